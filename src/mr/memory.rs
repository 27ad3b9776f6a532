//! The memory under a registration ([`RegionMemory`]): a zeroed buffer of whole pages the
//! region allocates and owns, a [`PinnedMemory`] value it takes, or a `&mut [u8]` it borrows.
#![allow(unsafe_code)]
//! # Safety
//!
//! An owned buffer is allocated here with its layout and freed only through
//! [`Memory::free`], whose caller promises the registration is gone; so is a
//! [`PinnedMemory`] owner dropped only there, and leaked (`ManuallyDrop`) otherwise, its
//! bytes valid until it drops by its contract; a borrowed one is never freed, and its borrow
//! lasts as long as the [`Memory`].

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::pinned::PinnedMemory;
use crate::error::{Error, InvalidInputKind, Result};

/// Memory a region can be registered over: a length (a zeroed buffer of whole pages the
/// region allocates and owns; the region is that long, the rest of its last page unused), a
/// [`PinnedMemory`] value (owned by the region, dropped after it deregisters: huge pages
/// ([`HugePages`](crate::HugePages)), a memfd ([`SharedMemory`](crate::SharedMemory)), or
/// the caller's own mapping), or a `&mut [u8]` (borrowed for the region's life, for local
/// access only; with fork protection on, a child must not touch the rest of the pages it
/// shares, see [`fork`](crate::fork)).
pub trait RegionMemory<'a>: sealed::Sealed {
    #[doc(hidden)]
    fn into_memory(self) -> Result<Memory<'a>>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for usize {}
    impl Sealed for &mut [u8] {}
    impl<T: super::PinnedMemory> Sealed for T {}
}

impl<'a> RegionMemory<'a> for usize {
    fn into_memory(self) -> Result<Memory<'a>> {
        if self == 0 {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                "a memory region needs at least 1 byte".into(),
            ));
        }
        // Whole pages: fork protection (`crate::fork`) madvises whole pages, so nothing else
        // may share the buffer's last one.
        let page = page_size();
        let layout = self
            .checked_next_multiple_of(page)
            .and_then(|size| Layout::from_size_align(size, page).ok())
            .ok_or_else(|| {
                Error::invalid(
                    InvalidInputKind::Size,
                    format!("a {self}-byte buffer cannot be allocated"),
                )
            })?;
        // SAFETY: the layout is not zero-sized (checked above).
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            Error::invalid(
                InvalidInputKind::Size,
                format!("out of memory allocating a {self}-byte buffer"),
            )
        })?;
        Ok(Memory { ptr, len: self, owner: Owner::Heap(layout), _borrow: PhantomData })
    }
}

impl<'a, T: PinnedMemory> RegionMemory<'a> for T {
    fn into_memory(mut self) -> Result<Memory<'a>> {
        let bytes = self.bytes();
        if bytes.is_empty() {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                "a memory region needs at least 1 byte".into(),
            ));
        }
        let shared = self.is_shared();
        // Moving `self` into the box does not move its bytes (the trait's contract).
        let owner = Owner::Pinned { owner: ManuallyDrop::new(Box::new(self)), shared };
        Ok(Memory { ptr: bytes.cast(), len: bytes.len(), owner, _borrow: PhantomData })
    }
}

impl<'a> RegionMemory<'a> for &'a mut [u8] {
    fn into_memory(self) -> Result<Memory<'a>> {
        if self.is_empty() {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                "a memory region needs at least 1 byte".into(),
            ));
        }
        let len = self.len();
        let ptr = NonNull::from(self).cast();
        Ok(Memory { ptr, len, owner: Owner::Borrowed, _borrow: PhantomData })
    }
}

/// The bytes under a registration. Frees them only when told (after deregistration).
#[doc(hidden)]
pub struct Memory<'a> {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    owner: Owner,
    _borrow: PhantomData<&'a mut [u8]>,
}

/// Who frees a registration's bytes.
enum Owner {
    /// Allocated here with this layout, freed by `free`.
    Heap(Layout),
    /// Given by value: dropped by `free`, leaked if never freed. `shared` when another
    /// process may write the bytes ([`PinnedMemory::is_shared`]).
    Pinned { owner: ManuallyDrop<Box<dyn PinnedMemory>>, shared: bool },
    /// Borrowed, or not the CPU's (a dma-buf's, a device allocation's): nothing to free.
    Borrowed,
}

impl Memory<'_> {
    /// `len` bytes the CPU cannot reach (a dma-buf's, a device allocation's): never
    /// dereferenced, nothing to free.
    pub(super) fn unmapped(len: usize) -> Self {
        Memory { ptr: NonNull::dangling(), len, owner: Owner::Borrowed, _borrow: PhantomData }
    }

    /// Whether the region owns the memory (allocated, or given by value), so that leaking the
    /// region leaks the memory rather than ending a borrow of it.
    pub(super) fn is_owned(&self) -> bool {
        !matches!(self.owner, Owner::Borrowed)
    }

    /// Whether another process may write the bytes (a memfd's): no plain slices of them.
    pub(super) fn is_shared(&self) -> bool {
        matches!(self.owner, Owner::Pinned { shared: true, .. })
    }

    /// Frees owned memory: deallocates it, or drops the [`PinnedMemory`] that owns it.
    ///
    /// # Safety
    ///
    /// Called at most once, after the registration is gone, and the memory is not used again.
    pub(super) unsafe fn free(&mut self) {
        match std::mem::replace(&mut self.owner, Owner::Borrowed) {
            // SAFETY: allocated with this layout in `into_memory`; the caller guarantees
            // nothing uses it any more.
            Owner::Heap(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) },
            Owner::Pinned { owner, .. } => drop(ManuallyDrop::into_inner(owner)),
            Owner::Borrowed => {}
        }
    }
}

impl std::fmt::Debug for Memory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = match self.owner {
            Owner::Heap(_) => "heap",
            Owner::Pinned { shared: false, .. } => "pinned",
            Owner::Pinned { shared: true, .. } => "shared",
            Owner::Borrowed => "borrowed",
        };
        f.debug_struct("Memory").field("len", &self.len).field("owner", &owner).finish()
    }
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n.is_power_of_two()).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owned_buffer_is_whole_pages_however_long_the_region() {
        let page = page_size();
        for (len, pages) in [(1, 1), (64, 1), (page, 1), (page + 1, 2), (3 * page - 1, 3)] {
            let mut memory = len.into_memory().unwrap();
            let Owner::Heap(layout) = memory.owner else { panic!("allocated here") };
            assert_eq!((memory.len, layout.size(), layout.align()), (len, pages * page, page));
            assert_eq!(memory.ptr.as_ptr() as usize % page, 0, "page-aligned");
            // SAFETY: never registered, not used again.
            unsafe { memory.free() };
        }
        let e = (usize::MAX - 1).into_memory().unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Size), "{e}");
    }
}
