//! Host memory that a device can reach by DMA.
//!
//! Owns: the [`HostMemory`] contract (what the IOMMU model needs from a piece of host memory)
//! and [`SimMemory`], a page-aligned, zeroed allocation for tests and for callers without a
//! pinned mapping of their own. Must not: know about IOVAs (that is [`crate::iommu`]).
//!
//! Memory shared with a device is written by the host CPU and by the device's DMA engine
//! without Rust borrows in between, exactly like real DMA memory. All device-side access
//! goes through [`HostMemory::read_at`]/[`HostMemory::write_at`], which copy through raw
//! pointers inside the bounds the implementor vouches for. Ordering between the two sides is
//! the hardware protocol's business (ownership bits, doorbell records, fences), as on a real
//! NIC.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// A host buffer a device may DMA to and from.
///
/// # Safety
/// Implementors promise that `base()` points to `len()` bytes that stay allocated, and are
/// not moved, for as long as the value lives, and that those bytes may be read and written
/// through raw pointers from any thread (they are not covered by a Rust reference that
/// assumes exclusive or immutable access).
///
/// `read_at`/`write_at` are helpers over `base()`/`len()`, not hooks: the device also copies
/// through `base()` directly (the IOMMU's cache of recent mappings), so an implementation
/// must not override them with other behaviour.
pub unsafe trait HostMemory: Send + Sync {
    /// First byte.
    fn base(&self) -> NonNull<u8>;
    /// Length in bytes.
    fn len(&self) -> usize;

    /// True for a zero-length buffer.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`. Returns false (copying
    /// nothing) if the range is not inside the buffer.
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        if !in_bounds(offset, dst.len(), self.len()) {
            return false;
        }
        // SAFETY: offset..offset+dst.len() is inside the buffer (checked above), which the
        // trait contract keeps valid for reads; dst is a distinct Rust slice.
        unsafe {
            copy_small(
                self.base().as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        true
    }

    /// Copies `src` into the buffer at `offset`. Returns false (writing nothing) if the range
    /// is not inside the buffer.
    fn write_at(&self, offset: usize, src: &[u8]) -> bool {
        if !in_bounds(offset, src.len(), self.len()) {
            return false;
        }
        // SAFETY: the destination range is inside the buffer (checked above), which the trait
        // contract keeps valid for raw writes; src is a distinct Rust slice.
        unsafe { copy_small(src.as_ptr(), self.base().as_ptr().add(offset), src.len()) };
        true
    }
}

/// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off` (one device-side DMA
/// copy between two host buffers, which may be the same one). Returns false, copying
/// nothing, if either range is outside its buffer.
pub fn copy_between(
    src: &dyn HostMemory,
    src_off: usize,
    dst: &dyn HostMemory,
    dst_off: usize,
    len: usize,
) -> bool {
    if !in_bounds(src_off, len, src.len()) || !in_bounds(dst_off, len, dst.len()) {
        return false;
    }
    // SAFETY: both ranges are inside their buffers (checked above), which the trait contract
    // keeps valid for raw reads and writes; `ptr::copy` allows the ranges to overlap (a WRITE
    // from a buffer into itself).
    unsafe {
        std::ptr::copy(
            src.base().as_ptr().add(src_off),
            dst.base().as_ptr().add(dst_off),
            len,
        )
    };
    true
}

/// `ptr::copy_nonoverlapping(src, dst, len)`, with the sizes the device moves most (a 4- or
/// 8-byte doorbell record or counter, a 64-byte CQE or EQE) copied by a few moves of a known
/// size rather than a `memcpy` call.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`: `src` valid for reads and `dst` for writes of `len` bytes,
/// the ranges not overlapping.
#[inline(always)]
pub(crate) unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, for the same `len` in every arm.
    unsafe {
        match len {
            4 => std::ptr::copy_nonoverlapping(src, dst, 4),
            8 => std::ptr::copy_nonoverlapping(src, dst, 8),
            64 => std::ptr::copy_nonoverlapping(src, dst, 64),
            n => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

fn in_bounds(offset: usize, len: usize, total: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= total)
}

/// The page size the IOMMU model maps with (VFIO type1 on x86: 4 KiB).
pub const PAGE_SIZE: usize = 4096;

/// A zeroed, page-aligned host allocation, shareable with a device (`Arc<SimMemory>`).
#[derive(Debug)]
pub struct SimMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: SimMemory owns its allocation; all access is through raw-pointer copies bounded by
// `len` (HostMemory's methods), which are valid from any thread.
unsafe impl Send for SimMemory {}
// SAFETY: as above; no method hands out a Rust reference into the buffer.
unsafe impl Sync for SimMemory {}

impl SimMemory {
    /// Allocates `len` zeroed bytes, aligned to [`PAGE_SIZE`] and rounded up to whole pages.
    /// Returns `None` for `len == 0` or if the allocator refuses.
    pub fn new(len: usize) -> Option<Self> {
        let rounded = len.checked_next_multiple_of(PAGE_SIZE)?;
        if rounded == 0 {
            return None;
        }
        let layout = Layout::from_size_align(rounded, PAGE_SIZE).ok()?;
        // SAFETY: layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(Self { ptr, len: rounded })
    }

    /// Reads a copy of `len` bytes at `offset` (host side), or `None` if out of bounds.
    pub fn to_vec(&self, offset: usize, len: usize) -> Option<Vec<u8>> {
        let mut v = vec![0; len];
        self.read_at(offset, &mut v).then_some(v)
    }
}

impl Drop for SimMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout (len is the rounded size, which
        // `new` proved forms a valid layout with PAGE_SIZE alignment).
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, PAGE_SIZE),
            )
        };
    }
}

// SAFETY: ptr/len describe the live allocation owned by self; it never moves.
unsafe impl HostMemory for SimMemory {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_zeroed_page_aligned_and_rounded() {
        let m = SimMemory::new(100).unwrap();
        assert_eq!(m.len(), PAGE_SIZE);
        assert_eq!(m.base().as_ptr() as usize % PAGE_SIZE, 0);
        assert_eq!(m.to_vec(0, PAGE_SIZE).unwrap(), vec![0; PAGE_SIZE]);
        assert!(SimMemory::new(0).is_none());
    }

    #[test]
    fn out_of_bounds_access_copies_nothing() {
        let m = SimMemory::new(PAGE_SIZE).unwrap();
        assert!(!m.write_at(PAGE_SIZE - 1, &[1, 2]));
        assert!(!m.write_at(usize::MAX, &[1]));
        assert!(m.write_at(PAGE_SIZE - 2, &[1, 2]));
        let mut b = [0u8; 3];
        assert!(!m.read_at(PAGE_SIZE - 2, &mut b));
        assert_eq!(b, [0, 0, 0]);
        assert_eq!(m.to_vec(PAGE_SIZE - 2, 2).unwrap(), vec![1, 2]);
    }
}
