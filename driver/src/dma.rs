//! DMA memory: pinned host regions, the IOVA allocator, and mapped buffers.
//!
//! Owns: [`DmaRegion`] (page-aligned anonymous memory from `memmap2`, preferring the
//! device's NUMA node (`numa.rs`) and pinned with `mlock` after a `RLIMIT_MEMLOCK` check),
//! [`IovaAllocator`] (an interval set of free IOVAs,
//! first-fit, like rdma-core's `util/interval_set.c` `iset_alloc_range`), [`DmaMapper`] (the
//! two together over a [`Backend`]) and [`DmaBuf`] (a region mapped at an IOVA; unmapped,
//! then its IOVA freed, then its memory freed, on drop). Must not: know mlx5 formats.
//! Application memory the caller owns is mapped by `user_dma.rs`, over the same allocator.
//!
//! Memory shared with the device is written by the CPU and by DMA without Rust borrows in
//! between. So nothing here hands out `&[u8]`/`&mut [u8]` into a region: access is through
//! raw pointers ([`DmaBuf::ptr_at`]) or copying accessors ([`DmaBuf::read`],
//! [`DmaBuf::write`]) that never form a reference to the shared bytes.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use memmap2::MmapMut;

use crate::backend::{Backend, HostMemory, IovaRange};
use crate::error::{DriverError, Result};

pub use bypass_seam::{MemlockState, PAGE_SIZE};
/// Largest IOVA alignment the allocator uses (rdma-core `MLX5_VFIO_BLOCK_SIZE`, 2 MiB).
pub const MAX_IOVA_ALIGN: u64 = 2 << 20;
/// Largest alignment of an IOVA chosen to agree with a host address (1 GiB: the largest MTT
/// page worth having, and the x86 IOMMU's largest superpage).
pub const MAX_KEY_ALIGN: u64 = 1 << 30;
/// Largest single DMA allocation (64 TiB; anything near it is a bug).
const MAX_DMA_LEN: usize = 1 << 46;

/// Page-aligned anonymous memory, pinned while it lives.
///
/// Never moves and is never exposed as a Rust slice: every access goes through raw pointers.
pub struct DmaRegion {
    /// Keeps the mapping alive; never dereferenced after construction (that would form a
    /// reference aliasing the device's view).
    _map: MmapMut,
    ptr: NonNull<u8>,
    len: usize,
    locked: bool,
    /// The node whose `MPOL_PREFERRED` policy the pages were given (`None`: none asked, or
    /// the policy could not be set).
    node: Option<u32>,
}

impl std::fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("len", &self.len)
            .field("locked", &self.locked)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

// SAFETY: DmaRegion owns its mapping; all access is through raw pointers within `len`, which
// is valid from any thread (the memory is plain anonymous memory; ordering with the device is
// the hardware protocol's business).
unsafe impl Send for DmaRegion {}
// SAFETY: as above; no method hands out a Rust reference into the memory.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Maps `len` bytes (rounded up to whole pages) of zeroed anonymous memory and pins it.
    ///
    /// Errors: [`DriverError::Backend`] with `MemlockLimit` if pinning would pass
    /// `RLIMIT_MEMLOCK` (with the numbers and how to raise it), [`DriverError::Mlock`],
    /// [`DriverError::Mmap`], [`DriverError::BadDmaLength`].
    pub fn new(len: usize) -> Result<Self> {
        Self::on_node(len, true, None)
    }

    /// Like [`DmaRegion::new`] but without `mlock`: for a backend whose DMA mapping pins the
    /// pages itself ([`bypass_seam::DmaMap::pins_on_map`]), which checks `RLIMIT_MEMLOCK` when
    /// it maps.
    ///
    /// Errors: [`DriverError::Mmap`], [`DriverError::BadDmaLength`].
    pub fn new_unlocked(len: usize) -> Result<Self> {
        Self::on_node(len, false, None)
    }

    /// Like [`DmaRegion::new`] (`lock`) or [`DmaRegion::new_unlocked`], with the pages
    /// preferring NUMA node `node`: the `MPOL_PREFERRED` policy is set before anything
    /// touches them (before `mlock` faults them in, and before a backend pins them).
    ///
    /// Preferred, not bound: locality is a matter of DMA latency and bandwidth, not of
    /// correctness, so a full node must not make an allocation fail (`MPOL_BIND` would fail
    /// `mlock`, or let the OOM killer in, while other nodes have room). For the same reason a
    /// policy that cannot be set (a kernel without NUMA, a seccomp filter, an offline node)
    /// is logged once and the region is allocated without it: [`DmaRegion::numa_node`] then
    /// says `None`.
    ///
    /// Errors: as [`DmaRegion::new`].
    pub fn on_node(len: usize, lock: bool, node: Option<u32>) -> Result<Self> {
        let rounded = len
            .checked_next_multiple_of(PAGE_SIZE)
            .filter(|&r| r > 0 && r <= MAX_DMA_LEN)
            .ok_or(DriverError::BadDmaLength { len })?;
        if lock {
            MemlockState::current().check(rounded as u64)?;
        }
        let mut map =
            MmapMut::map_anon(rounded).map_err(|source| DriverError::Mmap { len, source })?;
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or(DriverError::Mmap {
            len,
            source: std::io::Error::other("mmap returned a null pointer"),
        })?;
        let node = node.filter(|&n| match crate::numa::prefer_node(ptr, rounded, n) {
            Ok(()) => true,
            Err(e) => {
                warn_unplaced(&e);
                false
            }
        });
        if lock {
            // SAFETY: ptr..ptr+rounded is the live anonymous mapping just created, owned by
            // `map`.
            let locked = unsafe { nix::sys::mman::mlock(ptr.cast::<c_void>(), rounded) };
            locked.map_err(|source| DriverError::Mlock {
                len: rounded,
                source,
            })?;
        }
        Ok(Self {
            _map: map,
            ptr,
            len: rounded,
            locked: lock,
            node,
        })
    }

    /// The NUMA node the pages prefer, when that policy was asked for and applied.
    pub fn numa_node(&self) -> Option<u32> {
        self.node
    }

    /// First byte.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length in bytes (a multiple of [`PAGE_SIZE`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (regions are at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Logs a NUMA policy failure, once per process: every DMA allocation would fail the same way.
fn warn_unplaced(e: &crate::numa::NumaError) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(error = %e, "DMA memory is not placed on the device's NUMA node");
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: the same range that was locked in `new`; the mapping is still alive
            // (`_map` drops after this).
            let r = unsafe { nix::sys::mman::munlock(self.ptr.cast::<c_void>(), self.len) };
            if let Err(e) = r {
                tracing::warn!(len = self.len, error = %e, "munlock of a DMA region failed");
            }
        }
    }
}

// SAFETY: `base()`/`len()` describe the live mapping owned by the region, which never moves
// and stays allocated while the region (held by the backend through an Arc while mapped)
// lives; the region never creates Rust references into it, so raw reads/writes from any
// thread are fine.
unsafe impl HostMemory for DmaRegion {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Free IOVA space: disjoint inclusive intervals, first-fit allocation.
///
/// rdma-core `util/interval_set.c` (`iset_insert_range`, `iset_alloc_range`), as
/// `mlx5_vfio_init_device_dma` seeds it from the IOMMU's apertures.
#[derive(Debug, Clone, Default)]
pub struct IovaAllocator {
    /// start → last (inclusive), disjoint and not adjacent.
    free: BTreeMap<u64, u64>,
}

impl IovaAllocator {
    /// An allocator whose free space is `ranges`, trimmed to whole pages (ranges may overlap;
    /// they are merged).
    pub fn new(ranges: &[IovaRange]) -> Self {
        let mut a = Self::default();
        for r in ranges {
            let start = r.start.next_multiple_of(PAGE_SIZE as u64);
            let end = r.last.saturating_add(1) & !(PAGE_SIZE as u64 - 1);
            if end > start {
                a.insert(start, end - 1);
            }
        }
        a
    }

    /// The alignment bypass uses for a `len`-byte allocation: `len`'s power of two, at least
    /// a page, at most 2 MiB (so a buffer never straddles more IOMMU superpages than needed).
    pub fn natural_align(len: u64) -> u64 {
        len.checked_next_power_of_two()
            .unwrap_or(MAX_IOVA_ALIGN)
            .clamp(PAGE_SIZE as u64, MAX_IOVA_ALIGN)
    }

    /// Allocates `len` bytes (rounded up to pages) aligned to `align` (a power of two, at
    /// least a page), first fit. Returns the IOVA.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64> {
        // Congruent to 0 modulo `align` is aligned to it.
        self.alloc_congruent(len, align, 0)
    }

    /// Allocates `len` bytes (rounded up to pages) at an IOVA congruent to `addr` modulo
    /// `align` (a power of two, at least a page): the IOVA and `addr` agree on their bits
    /// below `align`, so a memory key over a contiguous range may use pages of up to `align`
    /// bytes (`mtt_pages.rs`). First fit. Returns the IOVA.
    pub fn alloc_congruent(&mut self, len: u64, align: u64, addr: u64) -> Result<u64> {
        let align = align.max(PAGE_SIZE as u64);
        let want = addr & align.wrapping_sub(1) & !(PAGE_SIZE as u64 - 1);
        let len = len
            .checked_next_multiple_of(PAGE_SIZE as u64)
            .filter(|&l| l > 0);
        let exhausted = DriverError::IovaExhausted {
            len: len.unwrap_or(0),
            align,
        };
        let (Some(len), true) = (len, align.is_power_of_two()) else {
            return Err(exhausted);
        };
        let found = self.free.iter().find_map(|(&start, &last)| {
            let at = (start & !(align - 1)).checked_add(want)?;
            let at = if at < start {
                at.checked_add(align)?
            } else {
                at
            };
            let end = at.checked_add(len - 1)?;
            (end <= last).then_some((start, last, at, end))
        });
        let Some((start, last, at, end)) = found else {
            return Err(exhausted);
        };
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - 1);
        }
        if end < last {
            self.free.insert(end + 1, last);
        }
        Ok(at)
    }

    /// Returns `len` bytes (rounded up to pages) at `iova` to the free space.
    pub fn free(&mut self, iova: u64, len: u64) {
        let len = len.next_multiple_of(PAGE_SIZE as u64);
        if len == 0 {
            return;
        }
        self.insert(iova, iova.saturating_add(len - 1));
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free
            .iter()
            .map(|(&s, &l)| (l - s).saturating_add(1))
            .sum()
    }

    /// The free intervals, `(start, last)` inclusive, in order.
    pub fn free_ranges(&self) -> Vec<(u64, u64)> {
        self.free.iter().map(|(&s, &l)| (s, l)).collect()
    }

    fn insert(&mut self, mut start: u64, mut last: u64) {
        // Merge with every interval that overlaps or touches [start, last].
        let touching: Vec<(u64, u64)> = self
            .free
            .range(..=last.saturating_add(1))
            .filter(|&(_, &l)| l.saturating_add(1) >= start)
            .map(|(&s, &l)| (s, l))
            .collect();
        for (s, l) in touching {
            self.free.remove(&s);
            start = start.min(s);
            last = last.max(l);
        }
        self.free.insert(start, last);
    }
}

/// Allocates DMA memory mapped for one device: pinned regions at IOVAs from an allocator
/// seeded with the backend's apertures.
#[derive(Debug)]
pub struct DmaMapper {
    backend: Arc<dyn Backend>,
    /// The backend's NUMA node, read once: every region prefers it.
    node: Option<u32>,
    iova: Mutex<IovaAllocator>,
    /// Application memory mapped now, shared by overlapping registrations (`user_dma.rs`).
    pub(crate) pins: Mutex<crate::pin_table::PinTable>,
}

impl DmaMapper {
    /// A mapper over `backend`'s IOVA apertures ([`IovaRange::LEGACY`] if it reports none).
    pub fn new(backend: Arc<dyn Backend>) -> Arc<Self> {
        let mut ranges = backend.iova_ranges();
        if ranges.is_empty() {
            ranges = IovaRange::LEGACY.to_vec();
        }
        Arc::new(Self {
            iova: Mutex::new(IovaAllocator::new(&ranges)),
            pins: Mutex::default(),
            node: backend.numa_node(),
            backend,
        })
    }

    /// The backend the buffers are mapped into.
    ///
    /// # Safety
    /// As for [`crate::Hca::backend`]: the caller must not unmap or remap an IOVA this mapper
    /// (or any live driver object) maps, nor write a doorbell, BlueFlame or command-queue
    /// register through it. [`DmaMapper::numa_node`] and [`DmaMapper::free_iova_bytes`] are
    /// the safe views.
    ///
    /// Safe code cannot reach it:
    /// ```compile_fail,E0133
    /// fn raw(dma: &bypass_driver::dma::DmaMapper) {
    ///     let _ = dma.backend();
    /// }
    /// ```
    pub unsafe fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The backend, for the driver's own mapping code (`user_dma.rs`, `dmabuf_mr.rs`), which
    /// maps only what it pinned and unmaps only what it mapped.
    pub(crate) fn dev(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The NUMA node the buffers' pages prefer: the backend's ([`Backend::numa_node`]).
    pub fn numa_node(&self) -> Option<u32> {
        self.node
    }

    /// `len` bytes of zeroed, pinned memory, mapped for the device at an IOVA aligned to
    /// [`IovaAllocator::natural_align`].
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<DmaBuf> {
        let align = IovaAllocator::natural_align(len as u64);
        self.alloc_aligned(len, align)
    }

    /// Like [`DmaMapper::alloc`] with an explicit IOVA alignment (a power of two).
    pub fn alloc_aligned(self: &Arc<Self>, len: usize, align: u64) -> Result<DmaBuf> {
        self.alloc_mapped(len, |region| {
            self.iova
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .alloc(region.len() as u64, align)
        })
    }

    /// `len` bytes of zeroed, pinned memory for a memory key: mapped at an IOVA that agrees
    /// with the memory's host address on as many low bits as [`DmaMapper::alloc_iova_like`]
    /// finds room for, so a key that SGEs address by host address ([`crate::mr::Mr`]) takes
    /// large MTT pages.
    pub fn alloc_for_key(self: &Arc<Self>, len: usize) -> Result<DmaBuf> {
        self.alloc_mapped(len, |region| {
            self.alloc_iova_like(region.len() as u64, region.as_ptr().as_ptr() as u64)
        })
    }

    /// A region of `len` bytes on the device's node, mapped at the IOVA `pick` chooses for
    /// it; the IOVA goes back if the mapping fails.
    fn alloc_mapped(
        self: &Arc<Self>,
        len: usize,
        pick: impl FnOnce(&DmaRegion) -> Result<u64>,
    ) -> Result<DmaBuf> {
        let region = Arc::new(DmaRegion::on_node(
            len,
            !self.backend.pins_on_map(),
            self.node,
        )?);
        let iova = pick(&region)?;
        // SAFETY: `iova` was just allocated from this mapper's free IOVA space (`pick`), so no
        // other mapping is live there and nothing in the device refers to it yet.
        if let Err(e) = unsafe { self.backend.map_dma(iova, region.clone()) } {
            self.free_iova(iova, region.len());
            return Err(e.into());
        }
        Ok(DmaBuf {
            region,
            iova,
            mapper: self.clone(),
        })
    }

    /// An IOVA range of `len` bytes congruent to `addr` modulo the largest power of two, from
    /// `len`'s own (at most [`MAX_KEY_ALIGN`]) down to a page, that the free space allows:
    /// the mapping of application memory (or a dma-buf) at `addr` is then contiguous at the
    /// same low bits, which large MTT pages need. A page-aligned first fit is the last
    /// resort (then keys over it use 4 KiB pages).
    pub(crate) fn alloc_iova_like(&self, len: u64, addr: u64) -> Result<u64> {
        let mut a = self.iova.lock().unwrap_or_else(PoisonError::into_inner);
        let mut align = len
            .checked_next_power_of_two()
            .unwrap_or(MAX_KEY_ALIGN)
            .clamp(PAGE_SIZE as u64, MAX_KEY_ALIGN);
        while align > PAGE_SIZE as u64 {
            if let Ok(iova) = a.alloc_congruent(len, align, addr) {
                return Ok(iova);
            }
            align /= 2;
        }
        a.alloc_congruent(len, PAGE_SIZE as u64, addr)
    }

    pub(crate) fn free_iova(&self, iova: u64, len: usize) {
        self.iova
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .free(iova, len as u64);
    }

    /// Free IOVA bytes left (for tests and diagnostics).
    pub fn free_iova_bytes(&self) -> u64 {
        self.iova
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .free_bytes()
    }
}

/// Pinned memory mapped for the device at [`DmaBuf::iova`]. On drop: unmapped from the
/// device, then its IOVA freed, then the memory unpinned and freed, in that order.
#[derive(Debug)]
pub struct DmaBuf {
    region: Arc<DmaRegion>,
    iova: u64,
    mapper: Arc<DmaMapper>,
}

impl DmaBuf {
    /// The device address of byte 0.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// The host address of byte 0. Writing through it is the caller's `unsafe` business:
    /// the memory is shared with the device.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.region.as_ptr()
    }

    /// The region (what the backend maps).
    pub fn region(&self) -> &Arc<DmaRegion> {
        &self.region
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        if off.checked_add(len).is_none_or(|e| e > self.len()) {
            return Err(DriverError::DmaOutOfRange {
                off,
                len,
                buf_len: self.len(),
            });
        }
        Ok(())
    }

    /// The host pointer to `len` bytes at `off`, checked to be inside the buffer.
    pub fn ptr_at(&self, off: usize, len: usize) -> Result<NonNull<u8>> {
        self.check(off, len)?;
        // SAFETY: off + len <= self.len() (checked), so the result stays inside the mapping.
        Ok(unsafe { self.as_ptr().add(off) })
    }

    /// The device address of byte `off`, checked to be inside the buffer.
    pub fn iova_at(&self, off: usize) -> Result<u64> {
        self.check(off, 0)?;
        Ok(self.iova + off as u64)
    }

    /// Copies `src` into the buffer at `off` (plain stores; order them with the device with
    /// the protocol's barriers).
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        let dst = self.ptr_at(off, src.len())?;
        // SAFETY: dst..dst+src.len() is inside the live mapping (checked); src is a distinct
        // Rust slice, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr(), src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes at `off` out of the buffer.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let src = self.ptr_at(off, dst.len())?;
        // SAFETY: src..src+dst.len() is inside the live mapping (checked); dst is distinct.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<()> {
        let dst = self.ptr_at(off, len)?;
        // SAFETY: inside the live mapping (checked).
        unsafe { std::ptr::write_bytes(dst.as_ptr(), byte, len) };
        Ok(())
    }

    /// One byte at `off`, read with a volatile load (ownership bits the device flips).
    pub fn read_u8_volatile(&self, off: usize) -> Result<u8> {
        let p = self.ptr_at(off, 1)?;
        // SAFETY: inside the live mapping (checked); u8 has no alignment requirement.
        Ok(unsafe { std::ptr::read_volatile(p.as_ptr()) })
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        let len = self.region.len();
        // SAFETY: this buffer's own mapping; the objects the device reached it through hold an
        // `Arc` of it (or are destroyed first), so dropping it means the device is done with it.
        match unsafe { self.mapper.backend.unmap_dma(self.iova, len) } {
            // Only a fully unmapped IOVA range may be reused.
            Ok(()) => self.mapper.free_iova(self.iova, len),
            Err(e) => tracing::error!(iova = self.iova, len, error = %e,
                "unmapping a DMA buffer failed; its IOVA range is leaked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = PAGE_SIZE as u64;

    fn alloc1(start: u64, last: u64) -> IovaAllocator {
        IovaAllocator::new(&[IovaRange { start, last }])
    }

    #[test]
    fn congruent_allocations_keep_the_low_bits_of_the_address() {
        let mut a = alloc1(0x10_0000, 0xffff_ffff);
        let addr = 0x7f12_3456_7000u64;
        let i = a.alloc_congruent(0x4000, 1 << 30, addr).unwrap();
        assert_eq!(i & ((1 << 30) - 1), addr & ((1 << 30) - 1));
        assert_eq!(i, 0x3456_7000, "the first such address in the range");
        // A 1 MiB space has no address with those low 30 bits; a page-aligned one fits.
        let mut small = alloc1(0x10_0000, 0x1f_ffff);
        assert!(small.alloc_congruent(0x1000, 1 << 30, addr).is_err());
        assert_eq!(
            small.alloc_congruent(0x1000, 0x1000, addr).unwrap(),
            0x10_0000
        );
        assert_eq!(small.free_bytes(), 0x10_0000 - 0x1000);
    }

    #[test]
    fn allocations_stay_inside_the_ranges_and_trim_to_pages() {
        let mut a = IovaAllocator::new(&[
            IovaRange {
                start: 0x1_0001,
                last: 0x1_ffff,
            },
            IovaRange {
                start: 0x10_0000,
                last: 0x10_3fff,
            },
        ]);
        assert_eq!(
            a.free_ranges(),
            vec![(0x1_1000, 0x1_ffff), (0x10_0000, 0x10_3fff)]
        );
        let x = a.alloc(P, P).unwrap();
        assert_eq!(x, 0x1_1000);
        // 64 KiB aligned to 64 KiB does not fit the first range: the second is too small too.
        assert!(matches!(
            a.alloc(0x1_0000, 0x1_0000),
            Err(DriverError::IovaExhausted { .. })
        ));
        let y = a.alloc(0x4000, P).unwrap();
        assert!((0x1_2000..=0x1_ffff).contains(&y) || y == 0x10_0000);
    }

    #[test]
    fn alignment_is_natural_up_to_2mib() {
        assert_eq!(IovaAllocator::natural_align(1), P);
        assert_eq!(IovaAllocator::natural_align(5000), 8192);
        assert_eq!(IovaAllocator::natural_align(64 << 20), MAX_IOVA_ALIGN);
        let mut a = alloc1(0x1000, (1 << 32) - 1);
        let _ = a.alloc(P, P).unwrap();
        let b = a.alloc(2 << 20, MAX_IOVA_ALIGN).unwrap();
        assert_eq!(b % MAX_IOVA_ALIGN, 0);
        let c = a.alloc(0x8000, 0x8000).unwrap();
        assert_eq!(c % 0x8000, 0);
    }

    #[test]
    fn exhaustion_is_an_error_and_free_makes_room_again() {
        let mut a = alloc1(0x10000, 0x10000 + 4 * P - 1);
        let v: Vec<u64> = (0..4).map(|_| a.alloc(P, P).unwrap()).collect();
        assert_eq!(v, vec![0x10000, 0x11000, 0x12000, 0x13000]);
        assert!(a.alloc(P, P).is_err());
        assert_eq!(a.free_bytes(), 0);
        a.free(0x11000, P);
        assert_eq!(a.alloc(P, P).unwrap(), 0x11000, "first fit reuses the hole");
        a.free(0x12000, P);
        a.free(0x11000, P);
        a.free(0x13000, P);
        a.free(0x10000, P);
        assert_eq!(a.free_ranges(), vec![(0x10000, 0x13fff)], "frees merge");
        assert_eq!(a.alloc(4 * P, P).unwrap(), 0x10000);
    }

    #[test]
    fn bad_requests_are_errors_not_panics() {
        let mut a = alloc1(0, u64::MAX);
        assert!(a.alloc(0, P).is_err());
        assert!(
            a.alloc(P, 3 * P).is_err(),
            "alignment must be a power of two"
        );
        assert!(a.alloc(u64::MAX, P).is_err());
        let top = a.alloc(P, 1 << 63).unwrap();
        assert_eq!(top, 0);
        let hi = a.alloc(P, 1 << 63).unwrap();
        assert_eq!(hi, 1 << 63);
        a.free(u64::MAX - P + 1, P);
    }

    #[test]
    fn memlock_check_names_the_numbers() {
        let s = MemlockState {
            limit: Some(64 << 10),
            locked: 60 << 10,
            cap_ipc_lock: false,
        };
        let e = s.check(8192).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("8192") && msg.contains("61440") && msg.contains("65536"));
        assert!(msg.contains("ulimit -l") && msg.contains("LimitMEMLOCK"));
        assert!(s.check(4096).is_ok());
        assert!(
            MemlockState {
                cap_ipc_lock: true,
                ..s
            }
            .check(1 << 30)
            .is_ok()
        );
        assert!(MemlockState { limit: None, ..s }.check(1 << 30).is_ok());
    }

    #[test]
    fn region_is_zeroed_page_rounded_and_aligned() {
        let r = DmaRegion::new(100).unwrap();
        assert_eq!(r.len(), PAGE_SIZE);
        assert_eq!(r.as_ptr().as_ptr() as usize % PAGE_SIZE, 0);
        assert!(DmaRegion::new(0).is_err());
    }

    #[test]
    fn a_region_on_node_0_prefers_node_0_and_its_pages_are_there() {
        use crate::numa::{PolicyMode, node_of, policy_of};
        let r = DmaRegion::on_node(3 * PAGE_SIZE, true, Some(0)).unwrap();
        assert_eq!(r.numa_node(), Some(0));
        let (mode, nodes) = policy_of(r.as_ptr()).unwrap();
        assert_eq!(mode, PolicyMode::Preferred);
        assert_eq!(nodes, vec![0]);
        // SAFETY: the last page is inside the live region.
        let last = unsafe { r.as_ptr().add(2 * PAGE_SIZE) };
        assert_eq!(node_of(last).unwrap(), 0);
    }

    #[test]
    fn a_region_without_a_node_keeps_the_default_policy() {
        use crate::numa::{PolicyMode, policy_of};
        let r = DmaRegion::new_unlocked(PAGE_SIZE).unwrap();
        assert_eq!(r.numa_node(), None);
        assert_eq!(
            policy_of(r.as_ptr()).unwrap(),
            (PolicyMode::Default, vec![])
        );
    }

    #[test]
    fn a_node_that_cannot_be_preferred_falls_back_to_an_unplaced_region() {
        use crate::numa::{PolicyMode, policy_of};
        // No machine this runs on has 1000 nodes online: mbind refuses, the region stays.
        let r = DmaRegion::on_node(PAGE_SIZE, false, Some(1000)).unwrap();
        assert_eq!(r.numa_node(), None);
        assert_eq!(policy_of(r.as_ptr()).unwrap().0, PolicyMode::Default);
    }
}
