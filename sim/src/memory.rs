//! Host memory that a device can reach by DMA.
//!
//! Owns: [`SimMemory`], a page-aligned, zeroed allocation for tests and for callers without a
//! pinned mapping of their own, and [`copy_between`], one DMA copy between two buffers. The
//! [`HostMemory`] contract itself is the seam's (`bypass-seam`), re-exported here. Must not:
//! know about IOVAs (that is [`crate::iommu`]).
//!
//! Memory shared with a device is written by the host CPU and by the device's DMA engine
//! without Rust borrows in between, exactly like real DMA memory. All device-side access
//! goes through [`HostMemory::read_at`]/[`HostMemory::write_at`], which copy through raw
//! pointers inside the bounds the implementor vouches for. Ordering between the two sides is
//! the hardware protocol's business (ownership bits, doorbell records, fences), as on a real
//! NIC.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

pub use bypass_seam::{HostMemory, PAGE_SIZE, copy_small};

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

fn in_bounds(offset: usize, len: usize, total: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= total)
}

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
