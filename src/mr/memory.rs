//! The memory under a registration ([`RegionMemory`]): a zeroed buffer of whole pages the
//! region allocates and owns, or a `&mut [u8]` it borrows.
#![allow(unsafe_code)]
//! # Safety
//!
//! An owned buffer is allocated here with its layout and freed only through
//! [`Memory::free`], whose caller promises the registration is gone; a borrowed one is never
//! freed, and its borrow lasts as long as the [`Memory`].

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{Error, InvalidInputKind, Result};

/// Memory a region can be registered over: a length (a zeroed buffer of whole pages the
/// region allocates and owns; the region is that long, the rest of its last page unused) or
/// a `&mut [u8]` (borrowed for the region's life, for local access only; with fork
/// protection on, a child must not touch the rest of the pages it shares, see
/// [`fork`](crate::fork)).
pub trait RegionMemory<'a>: sealed::Sealed {
    #[doc(hidden)]
    fn into_memory(self) -> Result<Memory<'a>>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for usize {}
    impl Sealed for &mut [u8] {}
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
        Ok(Memory { ptr, len: self, owned: Some(layout), _borrow: PhantomData })
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
        Ok(Memory { ptr, len, owned: None, _borrow: PhantomData })
    }
}

/// The bytes under a registration. Frees them only when told (after deregistration).
#[doc(hidden)]
#[derive(Debug)]
pub struct Memory<'a> {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    /// `Some` when allocated here (and freed by `free`), `None` when borrowed.
    pub(super) owned: Option<Layout>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl Memory<'_> {
    /// `len` bytes the CPU cannot reach (a dma-buf's): never dereferenced, nothing to free.
    pub(super) fn unmapped(len: usize) -> Self {
        Memory { ptr: NonNull::dangling(), len, owned: None, _borrow: PhantomData }
    }

    /// Frees owned memory.
    ///
    /// # Safety
    ///
    /// Called at most once, after the registration is gone, and the memory is not used again.
    pub(super) unsafe fn free(&mut self) {
        if let Some(layout) = self.owned.take() {
            // SAFETY: allocated with this layout in `into_memory`; the caller guarantees
            // nothing uses it any more.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

fn page_size() -> usize {
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
            let layout = memory.owned.expect("allocated here");
            assert_eq!((memory.len, layout.size(), layout.align()), (len, pages * page, page));
            assert_eq!(memory.ptr.as_ptr() as usize % page, 0, "page-aligned");
            // SAFETY: never registered, not used again.
            unsafe { memory.free() };
        }
        let e = (usize::MAX - 1).into_memory().unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Size), "{e}");
    }
}
