//! DMA: the host memory a device reaches, and mapping it at IOVAs.
//!
//! Owns: [`HostMemory`] (what a device needs from a piece of host memory: a stable base and a
//! length, read and written through raw pointers), [`DmaMap`] (mapping such memory at an IOVA
//! the driver chose), [`IovaRange`] and [`PAGE_SIZE`]. Must not: allocate IOVAs (the driver's
//! allocator does) or keep mappings (each backend does: VFIO's container, the sim's IOMMU).
//!
//! Memory shared with a device is written by the host CPU and by the device's DMA without Rust
//! borrows in between, exactly like real DMA memory, so the contract is raw pointers only.
//! Ordering between the two sides is the hardware protocol's business (owner bits, doorbell
//! records, fences). Sources: `include/uapi/linux/vfio.h` (`vfio_iommu_type1_dma_map`,
//! `vfio_iova_range`), rdma-core `mlx5_vfio.c` (`mlx5_vfio_init_device_dma`).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::{BackendError, DmaBufSlice};

/// The IOMMU page size bypass maps with (VFIO type1 on x86: 4 KiB).
pub const PAGE_SIZE: usize = 4096;

/// One IOVA aperture the IOMMU accepts: `start..=last` (inclusive, as VFIO's
/// `vfio_iova_range` reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable IOVA.
    pub start: u64,
    /// Last usable IOVA (inclusive).
    pub last: u64,
}

impl IovaRange {
    /// The legacy x86 apertures rdma-core uses when VFIO reports none
    /// (`mlx5_vfio.c` `mlx5_vfio_init_device_dma`: `[0x10000, 0xFEDFFFFF]` and
    /// `[0xFEF00000, 2^39-1]`, skipping the MSI window at 0xFEE00000).
    pub const LEGACY: [IovaRange; 2] = [
        IovaRange {
            start: 0x1_0000,
            last: 0xfedf_ffff,
        },
        IovaRange {
            start: 0xfef0_0000,
            last: (1 << 39) - 1,
        },
    ];
}

/// A host buffer a device may DMA to and from.
///
/// # Safety
/// Implementors promise that `base()` points to `len()` bytes that stay allocated, and are
/// not moved, for as long as the value lives, and that those bytes may be read and written
/// through raw pointers from any thread (they are not covered by a Rust reference that
/// assumes exclusive or immutable access).
///
/// `read_at`/`write_at` are helpers over `base()`/`len()`, not hooks: a device may also copy
/// through `base()` directly (the sim's IOMMU caches recent mappings), so an implementation
/// must not override them with other behaviour.
///
/// Memory the application owns and registers is mapped by whole pages ([`crate::CallerPages`]):
/// there the promise about references holds for the registered bytes, and the device reaches
/// the rest of those pages never, since memory keys bound every access to them.
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

/// `ptr::copy_nonoverlapping(src, dst, len)`, with the sizes a device moves most (a 4- or
/// 8-byte doorbell record or counter, a 64-byte CQE or EQE) copied by a few moves of a known
/// size rather than a `memcpy` call.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`: `src` valid for reads and `dst` for writes of `len` bytes,
/// the ranges not overlapping.
#[inline(always)]
pub unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
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

/// The IOMMU of one device, as the driver maps memory into it.
///
/// Mapping and unmapping are `unsafe`: they decide what the device can reach at an IOVA, and
/// an IOVA the driver has given the device (a ring, a mailbox, a registered buffer) remapped
/// or unmapped behind it makes the device read or write memory nobody meant for it.
///
/// # Safety (of map and unmap)
/// The caller owns the IOVA range: it allocated it from [`DmaMap::iova_ranges`] itself, no
/// other mapping is live there, and nothing it programmed into the device still refers to an
/// IOVA it unmaps. The driver's `DmaMapper` is the one such caller.
///
/// Safe code holding a backend cannot unmap what the device uses:
/// ```compile_fail,E0133
/// fn pull(iommu: &dyn bypass_seam::DmaMap) {
///     let _ = iommu.unmap_dma(0x1000, 4096);
/// }
/// ```
pub trait DmaMap: Send + Sync {
    /// The IOVA apertures the IOMMU accepts (VFIO: `VFIO_IOMMU_GET_INFO`'s IOVA-range
    /// capability, or [`IovaRange::LEGACY`]). The driver allocates every IOVA inside them.
    fn iova_ranges(&self) -> Vec<IovaRange>;

    /// Maps all of `mem` at `iova` for device read and write (`VFIO_IOMMU_MAP_DMA`). `iova`
    /// is page-aligned and inside [`DmaMap::iova_ranges`]; the backend keeps `mem` alive until
    /// it is unmapped, so the device never reaches freed memory.
    ///
    /// Errors: [`BackendError::DmaMap`] (with the backend's reason and fix),
    /// [`BackendError::MemlockLimit`] where mapping pins ([`DmaMap::pins_on_map`]).
    ///
    /// # Safety
    /// The trait's contract: the caller owns `iova..iova + mem.len()`.
    unsafe fn map_dma(&self, iova: u64, mem: Arc<dyn HostMemory>) -> Result<(), BackendError>;

    /// Unmaps the mapping made at `iova` of `len` bytes (`VFIO_IOMMU_UNMAP_DMA`). After it
    /// returns the device can no longer reach the memory.
    ///
    /// # Safety
    /// The trait's contract: the caller made this mapping and the device no longer uses it.
    unsafe fn unmap_dma(&self, iova: u64, len: usize) -> Result<(), BackendError>;

    /// True when [`DmaMap::map_dma`] pins the memory itself and charges it to
    /// `RLIMIT_MEMLOCK` (VFIO type1: `vfio_iommu_type1.c` `vfio_pin_pages_remote` →
    /// `vfio_lock_acct`). The driver then does not `mlock` the regions it maps: the pin keeps
    /// them resident, and an mlock as well would charge the limit twice.
    fn pins_on_map(&self) -> bool {
        false
    }

    /// Maps `slice` (whole pages of a dma-buf) at `iova` for device read and write, keeping
    /// what it needs of the slice (its fd, its peer) until [`DmaMap::unmap_dma`] of the same
    /// range. How depends on the backend: the sim `mmap`s a CPU-mappable dma-buf and reaches
    /// memory the CPU cannot map through `slice.peer`; VFIO type1 maps `slice.backing` (a
    /// udmabuf's memfd), since it cannot map a dma-buf's `VM_PFNMAP` mapping (EFAULT). A
    /// backend never reports success for memory it did not map.
    ///
    /// Errors: [`BackendError::DmaBuf`] naming the exporter, what is missing and the fix.
    /// The default (a backend that maps host memory only) refuses every dma-buf.
    ///
    /// # Safety
    /// The trait's contract: the caller owns `iova..iova + slice.len`.
    unsafe fn map_dmabuf(&self, iova: u64, slice: &DmaBufSlice) -> Result<(), BackendError> {
        Err(BackendError::DmaBuf {
            iova,
            len: slice.len,
            exporter: slice.file.exporter().name().to_owned(),
            reason: "this backend maps host memory only: use the sim or the VFIO backend"
                .to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::cell::UnsafeCell;

    struct Bytes(Box<UnsafeCell<[u8; 64]>>);

    // SAFETY: the box is owned and never moves while `self` lives; its bytes sit in an
    // `UnsafeCell`, so raw writes through `base()` alias no reference.
    unsafe impl Sync for Bytes {}

    // SAFETY: as above: 64 live bytes, reached only through raw pointers.
    unsafe impl HostMemory for Bytes {
        fn base(&self) -> NonNull<u8> {
            NonNull::new(self.0.get().cast()).expect("a box is never null")
        }
        fn len(&self) -> usize {
            64
        }
    }

    #[test]
    fn out_of_bounds_access_copies_nothing() {
        let m = Bytes(Box::new(UnsafeCell::new([0; 64])));
        assert!(!m.write_at(63, &[1, 2]));
        assert!(!m.write_at(usize::MAX, &[1]));
        assert!(m.write_at(62, &[1, 2]));
        let mut b = [0u8; 3];
        assert!(!m.read_at(62, &mut b));
        assert_eq!(b, [0, 0, 0]);
        let mut two = [0u8; 2];
        assert!(m.read_at(62, &mut two));
        assert_eq!(two, [1, 2]);
    }
}
