//! Caller-owned memory as a device maps it: the whole pages around an application's range.
//!
//! Owns: [`CallerPages`]. Must not: pin, map or account anything (the driver pins and maps,
//! the backends keep the mappings), or decide which bytes of the pages a device may touch
//! (memory keys do: the device reaches caller pages only through an mkey's bounds).
//!
//! An IOMMU maps whole pages and `VFIO_IOMMU_MAP_DMA` takes a page-aligned `vaddr`, so the
//! registration of an unaligned range maps the pages that hold it (rdma-core
//! `providers/mlx5/mlx5_vfio.c` `mlx5_vfio_reg_mr`: `aligned_va`, `iova_reg_size`; the kernel's
//! `ib_umem_get` pins whole pages the same way). Bytes of those pages outside every live
//! registration belong to the application (other heap objects, Rust references and all): the
//! device never reads or writes them, because every access that reaches caller pages is
//! first checked against an mkey whose `start_addr`/`len` cover only registered bytes. That
//! is the one way in which this memory is weaker than [`HostMemory`]'s general promise, and
//! why the constructor is `unsafe`.
//!
//! Both backends map it as they map any [`HostMemory`] (`DmaMap::map_dma`): VFIO with
//! `VFIO_IOMMU_MAP_DMA` of its base and length, the sim's IOMMU through its raw pointer.

use std::ptr::NonNull;

use crate::{HostMemory, PAGE_SIZE};

/// The page-aligned span of caller-owned memory one DMA mapping covers.
#[derive(Debug)]
pub struct CallerPages {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a span of process memory reached only through raw pointers; the constructor's
// contract makes it valid from any thread for as long as the value lives.
unsafe impl Send for CallerPages {}
// SAFETY: as above; no method forms a Rust reference into the span.
unsafe impl Sync for CallerPages {}

impl CallerPages {
    /// The span `base..base + len`, or `None` unless `base` and `len` are page-aligned and
    /// `len` is not zero.
    ///
    /// # Safety
    /// The span must stay mapped in this process for as long as the value (and every clone of
    /// an `Arc` holding it) lives. The bytes that some live memory registration covers must be
    /// reachable through raw pointers only (no Rust reference that assumes they do not change
    /// may exist while a device may write them). The other bytes of the span may be anything
    /// the application likes: the caller guarantees that no device is ever told to access them
    /// (every access goes through a memory key that excludes them).
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Option<Self> {
        let aligned =
            (base.as_ptr() as usize).is_multiple_of(PAGE_SIZE) && len.is_multiple_of(PAGE_SIZE);
        (aligned && len > 0).then_some(Self { base, len })
    }
}

// SAFETY: `base()`/`len()` describe the span the constructor's contract keeps mapped; which of
// its bytes a device touches is limited by memory keys, as the contract requires.
unsafe impl HostMemory for CallerPages {
    fn base(&self) -> NonNull<u8> {
        self.base
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_pages_are_accepted() {
        let p = NonNull::new(PAGE_SIZE as *mut u8).unwrap();
        let q = NonNull::new((PAGE_SIZE + 8) as *mut u8).unwrap();
        // SAFETY: never dereferenced: only the alignment checks run.
        unsafe {
            assert!(CallerPages::new(p, PAGE_SIZE).is_some());
            assert!(CallerPages::new(p, 0).is_none());
            assert!(CallerPages::new(p, 100).is_none());
            assert!(CallerPages::new(q, PAGE_SIZE).is_none());
        }
    }
}
