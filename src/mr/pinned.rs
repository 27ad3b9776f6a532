//! Memory the caller owns, handed to a region by value ([`PinnedMemory`]): the `unsafe`
//! contract that lets peers reach memory the crate did not allocate.

use std::ptr::NonNull;

/// Memory that stays where it is while a value owns it: what lets a region over memory the
/// crate did not allocate (an `mmap(2)` the program made, memory of an allocator of its own,
/// [`HugePages`](crate::HugePages), [`SharedMemory`](crate::SharedMemory)) grant remote
/// access, join a [`BufferPool`](crate::BufferPool) and back memory windows, as a region
/// that allocated its memory does.
///
/// Registering takes the value ([`RegionMemory`](crate::RegionMemory)): the region calls
/// [`bytes`](Self::bytes) once, registers them (`ibv_reg_mr(3)`), and drops the value only
/// after `ibv_dereg_mr` succeeded, so the value's `Drop` is where the owner gets its memory
/// back (unmaps it, returns it to its allocator). When deregistration fails the NIC may still
/// reach the bytes, so the value is leaked, never dropped; a region leaked with
/// `std::mem::forget` leaks it too.
///
/// # Safety
///
/// An implementation promises, for the bytes [`bytes`](Self::bytes) returns:
///
/// - they are mapped readable and writable (`PROT_READ | PROT_WRITE`) and initialised (fresh
///   anonymous or file mappings are: zero-filled), from the call until the value is dropped,
///   and forever if it never is. Moving the value does not move them (they are not inside
///   it), and nothing but the value's `Drop` unmaps, remaps (`mremap(2)`, `MAP_FIXED`),
///   shrinks (`ftruncate(2)` of a file mapping) or frees them: not another owner, not a
///   borrow that could end without the value being dropped (so a value holding a `&mut [u8]`
///   does not qualify);
/// - nothing else reads or writes them while the value lives: no Rust reference to them
///   exists but those the region hands out, no other thread or code path keeps a pointer it
///   uses, and only when [`is_shared`](Self::is_shared) says so may another process (or
///   `write(2)` through a file descriptor) write them. The NIC writes them at any time, for
///   this process's work requests and for peers, so any other access would race it;
/// - `bytes` returns the same range on every call.
///
/// Fork protection ([`fork`](crate::fork)) madvises whole pages: with it on, a child must not
/// touch anything else sharing the bytes' first and last pages (whole pages avoid that).
///
/// A mapping the program made, unmapped when the region is done with it:
///
/// ```no_run
/// use std::ptr::NonNull;
/// use rdma_verbs::{AccessFlags, PinnedMemory};
///
/// /// `len` bytes of an anonymous mapping, unmapped on drop.
/// struct Mapped {
///     addr: NonNull<u8>,
///     len: usize,
/// }
///
/// // SAFETY: the mapping is private to the value (nothing else has its address), unmapped only
/// // by its `Drop`, and the value holds no thread-bound state.
/// unsafe impl Send for Mapped {}
///
/// // SAFETY: as above: mapped read-write and zero-filled from `mmap` until `Drop`, the same
/// // range every call, not shared with another process.
/// unsafe impl PinnedMemory for Mapped {
///     fn bytes(&mut self) -> NonNull<[u8]> {
///         NonNull::slice_from_raw_parts(self.addr, self.len)
///     }
/// }
///
/// impl Drop for Mapped {
///     fn drop(&mut self) {
///         // SAFETY: the mapping made in `main`, unmapped once.
///         unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let len = 1 << 20;
/// // SAFETY: a fresh anonymous mapping; no existing memory is touched.
/// let addr = unsafe {
///     libc::mmap(
///         std::ptr::null_mut(),
///         len,
///         libc::PROT_READ | libc::PROT_WRITE,
///         libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
///         -1,
///         0,
///     )
/// };
/// if addr == libc::MAP_FAILED {
///     return Err(std::io::Error::last_os_error().into());
/// }
/// let memory = Mapped { addr: NonNull::new(addr.cast()).ok_or("mmap gave null")?, len };
/// let ctx = rdma_verbs::Context::open_first()?;
/// let pd = ctx.alloc_pd()?;
/// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
/// let region = pd.register_remote_writable(memory, access)?;
/// // ... peers write it through region.remote(..) ...
/// region.destroy()?; // deregistered, then `Mapped` dropped: unmapped
/// # Ok(()) }
/// ```
///
/// The value moves into the region, so it cannot be reached while registered:
///
/// ```compile_fail,E0382
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// use rdma_verbs::{AccessFlags, HugePageSize, HugePages};
/// let pages = HugePages::new(1 << 21, HugePageSize::Size2MiB)?;
/// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
/// let region = pd.register_remote_writable(pages, access)?;
/// let len = pages.len(); // error: `pages` moved into the region
/// # drop(region); Ok(()) }
/// ```
///
/// and the region, which owns it, still cannot outlive its protection domain:
///
/// ```compile_fail,E0597
/// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
/// use rdma_verbs::{AccessFlags, SharedMemory};
/// let region = {
///     let pd = ctx.alloc_pd()?;
///     let memory = SharedMemory::new(c"buffers", 4096)?;
///     pd.register_remote_writable(memory, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?
/// }; // error: `pd` dropped while still borrowed
/// # drop(region); Ok(()) }
/// ```
pub unsafe trait PinnedMemory: Send + 'static {
    /// The bytes to register: their first byte and their length. Called once, when the value
    /// is registered; a region of 0 bytes is refused.
    fn bytes(&mut self) -> NonNull<[u8]>;

    /// Whether another process may write the bytes (a `MAP_SHARED` mapping it maps too, as a
    /// [`SharedMemory`](crate::SharedMemory)'s): such memory is registered only as a
    /// [`RemoteWritableRegion`](crate::RemoteWritableRegion), which copies instead of handing
    /// out slices. `false` unless overridden.
    fn is_shared(&self) -> bool {
        false
    }
}
