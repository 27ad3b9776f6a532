//! What `Drop` does when the verb that frees an object fails (`EBUSY` while something still
//! uses it, or the provider refuses): the object is leaked and the failure logged, never a
//! panic. Call its `destroy`/`dealloc`/`dereg` method to see the error instead.

/// `Drop` for `$ty` by its method `$destroy` (returning the verb's [`Result`](crate::Result)):
/// on failure it logs `leaking <what>: <error>`, `what` formatted from `$it`, the object.
macro_rules! drop_by {
    ($ty:ty, $destroy:ident, |$it:pat_param| $($what:tt)+) => {
        impl Drop for $ty {
            fn drop(&mut self) {
                if let Err(e) = self.$destroy() {
                    let $it = &*self;
                    log::warn!("leaking {}: {e}", format_args!($($what)+));
                }
            }
        }
    };
}
pub(crate) use drop_by;
