//! Memory regions: CREATE_MKEY in MTT mode over DMA memory (the largest MTT page size that is
//! exact, `mtt_pages.rs`), access flags, a random non-zero key variant, DESTROY_MKEY on drop.
//!
//! Follows rdma-core `providers/mlx5/mlx5_vfio.c` `mlx5_vfio_reg_mr` / `vfio_reg_mr` (MTT
//! access mode, `pg_access`, `qpn = 0xffffff`, `start_addr` = the address SGEs use,
//! `translations_octword_size = ALIGN(npages, 2) / 2`, `log_page_size`, one MTT entry per
//! page with `MLX5_MTT_READ | MLX5_MTT_WRITE`), and the kernel `mlx5_ib` for the key
//! (`mkey = index << 8 | variant`).
//!
//! Owns: [`Mr`]. Must not: decide what the memory holds or when it may be reused (the verbs
//! layer's leases do).

use std::sync::Arc;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, MLX5_MTT_READ, MLX5_MTT_WRITE, access_mode,
    create_mkey_in_len, mkey_from, mkey_index, mtt_entry,
};

pub use bypass_hw::cmd::mkey::MkeyAccess;

use crate::cmdq::input;
use crate::dma::DmaBuf;
use crate::error::{DriverError, Result};
use crate::mtt_pages::best_mtt;
use crate::pd::Pd;
use crate::redact::{Addr, Key};

const PAGE: u64 = 4096;

/// A registered memory region over (part of) a [`DmaBuf`], which it keeps alive.
///
/// SGEs address it by host address: [`Mr::addr`] .. `addr + len` (as ibverbs does); the key
/// maps that range to the buffer's IOVAs. `Debug` redacts the key and the address
/// ([`crate::redact`]).
pub struct Mr {
    pd: Arc<Pd>,
    buf: Arc<DmaBuf>,
    offset: usize,
    len: usize,
    key: u32,
    access: MkeyAccess,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("pd", &self.pd)
            .field("addr", &Addr(self.addr()))
            .field("len", &self.len)
            .field("key", &Key(self.key))
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl Mr {
    /// Registers the whole of `buf` with `access`.
    pub fn register(pd: &Arc<Pd>, buf: DmaBuf, access: MkeyAccess) -> Result<Self> {
        let len = buf.len();
        Self::register_range(pd, Arc::new(buf), 0, len, access)
    }

    /// Registers `len` bytes at `offset` of a shared buffer (several MRs may cover one buffer).
    ///
    /// Errors: [`DriverError::DmaOutOfRange`] for a range outside the buffer; the command's
    /// error if the device refuses.
    pub fn register_range(
        pd: &Arc<Pd>,
        buf: Arc<DmaBuf>,
        offset: usize,
        len: usize,
        access: MkeyAccess,
    ) -> Result<Self> {
        let va = buf.ptr_at(offset, len)?.as_ptr() as u64;
        let iova = buf.iova_at(offset)?;
        let variant = pd.next_key_variant();
        let max_shift = pd.hca().caps().mkey_max_page_shift();
        let i = create_mkey_input(pd.pdn(), va, iova, len, access, variant, max_shift)?;
        let key = exec_create_mkey(pd, &i, variant)?;
        tracing::debug!(pdn = pd.pdn(), len, "CREATE_MKEY");
        Ok(Self {
            pd: pd.clone(),
            buf,
            offset,
            len,
            key,
            access,
        })
    }

    /// The local key (equal to the remote key).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The address SGEs use for byte 0 of the region.
    pub fn addr(&self) -> u64 {
        self.buf
            .ptr_at(self.offset, 0)
            .map_or(0, |p| p.as_ptr() as u64)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access rights.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }

    /// The buffer behind the region.
    pub fn buf(&self) -> &Arc<DmaBuf> {
        &self.buf
    }

    /// Offset of the region in its buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// An SGE over `len` bytes at `off` in the region (not checked: an SGE outside the region
    /// is the device's LOCAL_PROT_ERR to report, which research sometimes wants).
    pub fn sge(&self, off: u64, len: u32) -> crate::post::Sge {
        crate::post::Sge {
            addr: self.addr().wrapping_add(off),
            length: len,
            lkey: self.key,
        }
    }
}

/// The CREATE_MKEY input for `len` bytes that SGEs address from `va`, whose pages start at
/// `iova` (IOVA-contiguous), as rdma-core `vfio_reg_mr` builds it, with MTT pages of at most
/// `1 << max_shift` bytes.
pub fn create_mkey_input(
    pdn: u32,
    va: u64,
    iova: u64,
    len: usize,
    access: MkeyAccess,
    variant: u8,
    max_shift: u32,
) -> Result<Vec<u8>> {
    let npages = mtt_pages(va, len);
    // The page holding `va` maps to the IOVA page holding `iova` (same offset in the page).
    let first_iova = iova & !(PAGE - 1);
    let pages: Vec<u64> = (0..npages as u64).map(|k| first_iova + k * PAGE).collect();
    create_mkey_input_pages(pdn, va, len, access, variant, &pages, max_shift)
}

/// The number of 4 KiB MTT pages `len` bytes starting at `va` touch (0 for `len == 0`).
pub fn mtt_pages(va: u64, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let last = va.saturating_add(len as u64 - 1);
    ((last / PAGE) - (va / PAGE) + 1) as usize
}

/// The CREATE_MKEY input for `len` bytes that SGEs address from `start_addr`, `pages[k]` being
/// the device address of the 4 KiB page that holds `(start_addr & !0xfff) + k * 4096` (PRM
/// `mkc`: `start_addr`, `len`, `log_page_size`, `translations_octword_size = ALIGN(npages, 2)
/// / 2`; the kernel's `mlx5_ib` `mr.c` `set_mkc_access_pd_addr_fields` / `reg_create` and
/// rdma-core `mlx5_vfio_reg_mr` fill the same fields). The MTT uses the largest page size
/// that translates every byte as `pages` does, up to `max_shift` (the device's,
/// [`crate::hca::Caps::mkey_max_page_shift`])
/// ([`crate::mtt_pages::best_mtt`]), so a contiguous gigabyte takes a few entries, not
/// 262,144. `start_addr` may be unaligned: the device keeps its offset in the page.
pub fn create_mkey_input_pages(
    pdn: u32,
    start_addr: u64,
    len: usize,
    access: MkeyAccess,
    variant: u8,
    pages: &[u64],
    max_shift: u32,
) -> Result<Vec<u8>> {
    let mtt = best_mtt(start_addr, len as u64, pages, max_shift)?;
    let e = |source| DriverError::BuildInput {
        what: "CREATE_MKEY",
        source,
    };
    let npages = mtt.entries.len();
    let mut i = input(Opcode::CREATE_MKEY, 0, create_mkey_in_len(npages));
    let mut c = CreateMkeyIn::new_checked(&mut i[..]).map_err(e)?;
    c.set_pg_access(1).map_err(e)?;
    c.set_translations_octword_actual_size(npages.div_ceil(2) as u32)
        .map_err(e)?;
    for (k, &page) in mtt.entries.iter().enumerate() {
        c.set_klm_pas_mtt(k, mtt_entry(page, MLX5_MTT_READ | MLX5_MTT_WRITE))
            .map_err(e)?;
    }
    let mut m = c.mkc_mut();
    m.set_access_mode(access_mode::MTT).map_err(e)?;
    m.set_access(access).map_err(e)?;
    m.set_qpn(0x00ff_ffff).map_err(e)?;
    m.set_mkey_7_0(variant.into()).map_err(e)?;
    m.set_pd(pdn).map_err(e)?;
    m.set_start_addr(start_addr).map_err(e)?;
    m.set_len(len as u64).map_err(e)?;
    m.set_translations_octword_size(npages.div_ceil(2) as u32)
        .map_err(e)?;
    m.set_log_page_size(mtt.shift).map_err(e)?;
    Ok(i)
}

/// Runs a CREATE_MKEY input built for `pd` with key variant `variant`; returns the key.
pub(crate) fn exec_create_mkey(pd: &Pd, i: &[u8], variant: u8) -> Result<u32> {
    let o = pd
        .hca()
        .exec_create(i, CreateMkeyOut::LEN, crate::limits::Resource::Mr)?;
    let index = CreateMkeyOut::new_checked(&o[..])
        .map_err(|source| DriverError::BadOutput {
            op: Opcode::CREATE_MKEY,
            source,
        })?
        .mkey_index();
    Ok(mkey_from(index, variant))
}

/// DESTROY_MKEY of `key` (errors logged: the key then stays valid on the device, but every
/// caller unmaps the memory behind it next, so the device can no longer reach it).
pub(crate) fn destroy_mkey(pd: &Pd, key: u32) {
    let mut i = input(Opcode::DESTROY_MKEY, 0, DestroyMkeyIn::LEN);
    if let Ok(mut d) = DestroyMkeyIn::new_checked(&mut i[..]) {
        let _ = d.set_mkey_index(mkey_index(key));
    }
    if let Err(e) = pd.hca().cmdq().exec(&i, 16) {
        tracing::error!(error = %e, "DESTROY_MKEY failed; the key stays valid on the device");
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        destroy_mkey(&self.pd, self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contiguous_gigabyte_fits_one_command() {
        // Address and IOVA agree below 1 GiB only, so two 1 GiB pages, not one 2 GiB page.
        let (va, iova) = (0x7f40_0000_0000u64 + 0x20, 0x40_4000_0000u64 + 0x20);
        let i = create_mkey_input(1, va, iova, 1 << 30, MkeyAccess::all(), 1, 31).unwrap();
        assert!(i.len() < crate::cmdq::MAX_MSG_LEN, "{} bytes", i.len());
        let c = CreateMkeyIn::new_checked(&i[..]).unwrap();
        assert_eq!(c.mkc().log_page_size(), 30);
        assert_eq!(c.klm_pas_mtt(0).unwrap() & !3, 0x40_4000_0000);
        assert_eq!(c.klm_pas_mtt(1).unwrap() & !3, 0x40_8000_0000);
    }

    #[test]
    fn mtt_covers_every_touched_page() {
        let i = create_mkey_input(3, 0x7000_0ff0, 0x10_0ff0, 0x20, MkeyAccess::all(), 0x5a, 31)
            .unwrap();
        let c = CreateMkeyIn::new_checked(&i[..]).unwrap();
        assert_eq!(c.translations_octword_actual_size(), 1);
        // The 32 bytes straddle a 4 KiB boundary inside one 8 KiB page, and address and IOVA
        // agree below 8 KiB: one 8 KiB entry.
        assert_eq!(c.klm_pas_mtt(0).unwrap(), 0x10_0000 | 3);
        assert_eq!(c.klm_pas_mtt(1).unwrap(), 0);
        let m = c.mkc();
        assert_eq!(m.log_page_size(), 13);
        assert_eq!(
            (m.start_addr(), m.len(), m.pd(), m.mkey_7_0()),
            (0x7000_0ff0, 0x20, 3, 0x5a)
        );
        assert_eq!(m.access_mode(), access_mode::MTT);
    }
}
