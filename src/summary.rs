//! `Debug` for the large attribute structs the query verbs fill ([`DeviceAttr`](crate::DeviceAttr),
//! [`PortAttr`](crate::PortAttr)): the few accessors a reader looks for first, the rest elided
//! (`..`; all of them through the accessors or `as_raw`).

/// `Debug` for `$name` as a struct of the accessors `$field`s, non-exhaustive.
macro_rules! summary_debug {
    ($name:ident: $($field:ident),+ $(,)?) => {
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    $(.field(stringify!($field), &self.$field()))+
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use summary_debug;
