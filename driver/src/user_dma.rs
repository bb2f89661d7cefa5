//! Application memory mapped for the device: pinned, kept across `fork`, mapped at IOVAs.
//!
//! Owns: [`PinnedRange`] (one registration's hold on the pages of a caller's range) and
//! [`DmaMapper::pin_caller`], the side effects the [`PinTable`] orders: for each new extent,
//! `madvise(MADV_DONTFORK)` (as libibverbs `ibv_reg_mr` → `ibv_dontfork_range` does once
//! `ibv_fork_init` ran, `libibverbs/memory.c`), then the `RLIMIT_MEMLOCK` check and `mlock`
//! where the backend's mapping does not pin (the sim; VFIO type1 pins and charges on
//! `VFIO_IOMMU_MAP_DMA` itself and checks the limit there), then an IOVA from the driver's
//! allocator (agreeing with the host address on as many low bits as it can, for large MTT
//! pages) and `DmaMap::map_dma` of the page-rounded span ([`CallerPages`]); on the last
//! user's release the reverse. Must not: build memory keys (`user_mr.rs`) or touch the bytes.
//!
//! rdma-core `providers/mlx5/mlx5_vfio.c` `mlx5_vfio_reg_mr` maps `aligned_va` for
//! `iova_reg_size` (the range rounded out to pages) the same way, one mapping per MR; here
//! overlapping registrations share extents (see `pin_table.rs` for why). `MADV_DONTFORK`
//! hides the pages from a forked child (their contents would otherwise be copied on write
//! under the device's feet); like libibverbs this also hides the rest of those pages.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, PoisonError};

use bypass_seam::CallerPages;
use nix::sys::mman::{MmapAdvise, madvise, mlock, munlock};

use crate::dma::{DmaMapper, MemlockState};
use crate::error::{DriverError, Result};
use crate::pin_table::{PageMapper, PinTable, Pins};

const PAGE: u64 = bypass_seam::PAGE_SIZE as u64;

/// One registration's hold on the pages of `addr..addr + len`: mapped for the device until
/// released (dropped, or [`PinnedRange::release`]). `Debug` redacts the address (an
/// application MR is known to peers by it unless registered at another IOVA).
pub struct PinnedRange {
    mapper: Arc<DmaMapper>,
    pins: Option<Pins>,
    addr: u64,
    len: usize,
    pages: Vec<u64>,
}

impl std::fmt::Debug for PinnedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedRange")
            .field("addr", &crate::redact::Addr(self.addr))
            .field("len", &self.len)
            .field("pages", &self.pages.len())
            .field("pinned", &self.pins.is_some())
            .finish_non_exhaustive()
    }
}

impl PinnedRange {
    /// Host address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a zero-length range is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The IOVA of each page of the range, in order (the page holding `addr` first).
    pub fn page_iovas(&self) -> &[u64] {
        &self.pages
    }

    /// Drops this hold; pages no other registration uses are unmapped and unpinned.
    ///
    /// Errors: [`DriverError::StillMapped`] when an unmap failed: the device may still reach
    /// the memory, which must then not be freed.
    pub fn release(mut self) -> Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        let Some(pins) = self.pins.take() else {
            return Ok(());
        };
        let mut table = self
            .mapper
            .pins
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let ok = table.release(pins, &mut Effects(&self.mapper));
        ok.then_some(()).ok_or(DriverError::StillMapped {
            addr: self.addr,
            len: self.len,
        })
    }
}

impl Drop for PinnedRange {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            tracing::error!(error = %e, "releasing application memory");
        }
    }
}

impl DmaMapper {
    /// Maps the pages holding `addr..addr + len` for the device (sharing those another
    /// registration already mapped).
    ///
    /// # Safety
    /// `addr..addr + len` must be memory of this process that stays mapped until the returned
    /// range is released and its release succeeded (a failed release means the device may
    /// still reach it: keep it mapped for good). While it is held, the device may read and
    /// write those bytes (as the memory key built over them allows), so they must be reached
    /// only through raw pointers while a device may write them; the rest of their pages is
    /// never touched by the device (see [`CallerPages`]).
    ///
    /// Errors: [`DriverError::BadDmaLength`] for `len == 0`, [`DriverError::CallerMemory`]
    /// (a range not mapped in this process, `mlock` refused), the memlock limit
    /// ([`DriverError::Backend`] with `MemlockLimit`), [`DriverError::IovaExhausted`], the
    /// backend's map error.
    pub unsafe fn pin_caller(
        self: &Arc<Self>,
        addr: NonNull<u8>,
        len: usize,
    ) -> Result<PinnedRange> {
        let a = addr.as_ptr() as u64;
        let (start, end) = PinTable::page_span(a, len as u64)
            .filter(|_| len > 0 && len < (1 << 46))
            .ok_or(DriverError::BadDmaLength { len })?;
        let mut table = self.pins.lock().unwrap_or_else(PoisonError::into_inner);
        let pins = table.acquire(start, end, &mut Effects(self))?;
        let pages: Option<Vec<u64>> = (start..end)
            .step_by(PAGE as usize)
            .map(|p| table.iova_of(p))
            .collect();
        drop(table);
        let mut range = PinnedRange {
            mapper: self.clone(),
            pins: Some(pins),
            addr: a,
            len,
            pages: Vec::new(),
        };
        // Every page was acquired just now, so each has an IOVA.
        range.pages = pages.ok_or(DriverError::StillMapped { addr: a, len })?;
        Ok(range)
    }

    /// The application-memory extents mapped now: `(host address, bytes, IOVA, users)`.
    pub fn caller_extents(&self) -> Vec<(u64, u64, u64, u32)> {
        self.pins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extents()
    }
}

/// The real side effects of the pin table, over one mapper's backend.
struct Effects<'a>(&'a Arc<DmaMapper>);

fn ptr_of(va: u64) -> Result<NonNull<c_void>> {
    NonNull::new(va as *mut c_void).ok_or(DriverError::CallerMemory {
        op: "mapping",
        addr: va,
        len: 0,
        source: nix::errno::Errno::EFAULT,
    })
}

impl PageMapper for Effects<'_> {
    fn map(&mut self, va: u64, len: u64) -> Result<u64> {
        let m = self.0;
        let ptr = ptr_of(va)?;
        let fail = |op, source| DriverError::CallerMemory {
            op,
            addr: va,
            len,
            source,
        };
        // SAFETY: advice only (no memory is changed); an unmapped range fails with ENOMEM.
        unsafe { madvise(ptr, len as usize, MmapAdvise::MADV_DONTFORK) }
            .map_err(|e| fail("madvise(MADV_DONTFORK)", e))?;
        let dofork = || {
            // SAFETY: as above: undoes the advice just given.
            let _ = unsafe { madvise(ptr, len as usize, MmapAdvise::MADV_DOFORK) };
        };
        let lock = !m.dev().pins_on_map();
        if lock {
            if let Err(e) = MemlockState::current().check(len) {
                dofork();
                return Err(e.into());
            }
            // SAFETY: mlock changes residency only; the range is mapped (madvise said so).
            if let Err(e) = unsafe { mlock(ptr, len as usize) } {
                dofork();
                return Err(fail("mlock", e));
            }
        }
        let undo = || {
            if lock {
                // SAFETY: unlocks what was locked just now.
                let _ = unsafe { munlock(ptr, len as usize) };
            }
            dofork();
        };
        let iova = match m.alloc_iova_like(len, va) {
            Ok(i) => i,
            Err(e) => {
                undo();
                return Err(e);
            }
        };
        // SAFETY: whole pages of mapped memory (checked above); the caller of `pin_caller`
        // promised they stay mapped while held and that the device is only pointed at the
        // registered bytes among them.
        let pages = unsafe { CallerPages::new(ptr.cast(), len as usize) };
        let r = match pages {
            // SAFETY: `iova` was just allocated from the mapper's free IOVA space for `len`.
            Some(p) => unsafe { m.dev().map_dma(iova, Arc::new(p)) }.map_err(Into::into),
            None => Err(DriverError::BadDmaLength { len: len as usize }),
        };
        if let Err(e) = r {
            m.free_iova(iova, len as usize);
            undo();
            return Err(e);
        }
        tracing::debug!(len, "mapped application memory");
        Ok(iova)
    }

    fn unmap(&mut self, va: u64, len: u64, iova: u64) -> bool {
        let m = self.0;
        // SAFETY: the pin table's own mapping, unmapped when its last MR went (its mkeys are
        // destroyed), so the device no longer reaches it.
        if let Err(e) = unsafe { m.dev().unmap_dma(iova, len as usize) } {
            // The IOVA may be the address peers use (`ibv_reg_mr_iova2`): redacted.
            tracing::error!(iova = %crate::redact::Addr(iova), len, error = %e,
                "unmapping application memory failed; its IOVA range is leaked");
            return false;
        }
        m.free_iova(iova, len as usize);
        if let Ok(ptr) = ptr_of(va) {
            if !m.dev().pins_on_map() {
                // SAFETY: the pages were locked by `map` and are still mapped (the owner of
                // the registration keeps them until its release returns).
                if let Err(e) = unsafe { munlock(ptr, len as usize) } {
                    tracing::warn!(len, error = %e, "munlock of application memory failed");
                }
            }
            // SAFETY: advice only; undoes `map`'s MADV_DONTFORK.
            let _ = unsafe { madvise(ptr, len as usize, MmapAdvise::MADV_DOFORK) };
        }
        true
    }
}
