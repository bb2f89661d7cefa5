//! Memory regions over application memory: `ibv_reg_mr` and `ibv_reg_mr_iova2`.
//!
//! Owns: [`UserMr`] (an mkey in MTT mode over the pages of a caller's range, which
//! [`crate::user_dma::PinnedRange`] keeps mapped). Must not: own the memory (the caller does;
//! the verbs layer's owning form holds the owner) or decide when it may be reused.
//!
//! The key's `start_addr` is the IOVA the caller chose (the address SGEs and a peer's RDMA use;
//! by default the host address, as `ibv_reg_mr`), `len` the exact length, and MTT entry `k` the
//! device address of the `k`-th page holding the range (PRM `mkc`; the kernel's `mlx5_ib`
//! `mr.c` `set_mkc_access_pd_addr_fields` / `mlx5_ifc.h` `mlx5_ifc_mkc_bits`). The device keeps
//! `start_addr`'s offset in the page, so IOVA and address must share their low 12 bits, which
//! rdma-core `mlx5_vfio_reg_mr` (`EOPNOTSUPP`) and the kernel's `ib_umem_find_best_pgsz`
//! (no page size fits: `EINVAL`) require too. Deregistration is DESTROY_MKEY, then the pages'
//! release; only a successful release lets the memory go back to its owner.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{DriverError, Result};
use crate::mr::{MkeyAccess, create_mkey_input_pages, destroy_mkey, exec_create_mkey};
use crate::pd::Pd;
use crate::redact::{Addr, Key};
use crate::user_dma::PinnedRange;

/// A registered region of application memory. `Debug` redacts the key and the address
/// ([`crate::redact`]).
pub struct UserMr {
    pd: Arc<Pd>,
    pinned: Option<PinnedRange>,
    key: u32,
    iova: u64,
    len: usize,
    access: MkeyAccess,
}

impl std::fmt::Debug for UserMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserMr")
            .field("pd", &self.pd)
            .field("iova", &Addr(self.iova))
            .field("len", &self.len)
            .field("key", &Key(self.key))
            .field("access", &self.access)
            .field("pinned", &self.pinned.is_some())
            .finish()
    }
}

impl UserMr {
    /// Registers `len` bytes at `addr` with `access`, addressed by SGEs and peers from `iova`
    /// (`None`: the host address, `ibv_reg_mr`; `Some`: `ibv_reg_mr_iova2`).
    ///
    /// # Safety
    /// `addr..addr + len` must be memory of this process that stays mapped until the region
    /// is deregistered ([`UserMr::deregister`] returned `Ok`, or the drop ran without logging
    /// a failed unmap; after a failure it must stay mapped for good). While registered the
    /// device reads it and, where `access` allows, writes it (receives, READ results, a
    /// peer's WRITEs and atomics): the bytes must be reached only through raw pointers while
    /// a device may write them, and must not be freed.
    ///
    /// Errors: [`DriverError::IovaOffsetMismatch`], [`DriverError::IovaWraps`], and those of
    /// [`crate::dma::DmaMapper::pin_caller`] and CREATE_MKEY.
    pub unsafe fn register(
        pd: &Arc<Pd>,
        addr: NonNull<u8>,
        len: usize,
        iova: Option<u64>,
        access: MkeyAccess,
    ) -> Result<Self> {
        let host = addr.as_ptr() as u64;
        let iova = iova.unwrap_or(host);
        if iova & 0xfff != host & 0xfff {
            return Err(DriverError::IovaOffsetMismatch { addr: host, iova });
        }
        if iova.checked_add(len as u64).is_none() {
            return Err(DriverError::IovaWraps { iova, len });
        }
        // SAFETY: the caller's contract is `pin_caller`'s.
        let pinned = unsafe { pd.hca().dma().pin_caller(addr, len)? };
        let variant = pd.next_key_variant();
        let i = create_mkey_input_pages(
            pd.pdn(),
            iova,
            len,
            access,
            variant,
            pinned.page_iovas(),
            pd.hca().caps().mkey_max_page_shift(),
        )?;
        // On an error `pinned` drops here and releases the pages.
        let key = exec_create_mkey(pd, &i, variant)?;
        tracing::debug!(pdn = pd.pdn(), len, "CREATE_MKEY (application memory)");
        Ok(Self {
            pd: pd.clone(),
            pinned: Some(pinned),
            key,
            iova,
            len,
            access,
        })
    }

    /// DESTROY_MKEY, then the pages' release.
    ///
    /// Errors: [`DriverError::StillMapped`]: the device may still reach the memory, which
    /// must then stay mapped (leak it).
    pub fn deregister(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(pinned) = self.pinned.take() else {
            return Ok(());
        };
        destroy_mkey(&self.pd, self.key);
        pinned.release()
    }

    /// The local key (equal to the remote key).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The address SGEs and peers use for byte 0: the IOVA chosen at registration.
    pub fn addr(&self) -> u64 {
        self.iova
    }

    /// The host address of byte 0.
    pub fn host_addr(&self) -> u64 {
        self.pinned.as_ref().map_or(0, PinnedRange::addr)
    }

    /// Length in bytes (exact, as registered).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a zero-length registration is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access rights.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The device address of each page the MTT maps, in order.
    pub fn page_iovas(&self) -> &[u64] {
        self.pinned.as_ref().map_or(&[], PinnedRange::page_iovas)
    }

    /// An SGE over `len` bytes at `off` in the region (not checked, as [`crate::mr::Mr::sge`]).
    pub fn sge(&self, off: u64, len: u32) -> crate::post::Sge {
        crate::post::Sge {
            addr: self.iova.wrapping_add(off),
            length: len,
            lkey: self.key,
        }
    }
}

impl Drop for UserMr {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::error!(error = %e, "deregistering application memory");
        }
    }
}
