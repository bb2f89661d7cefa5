//! Protection domains, UAR pages and memory keys: ALLOC/DEALLOC_PD, ALLOC/DEALLOC_UAR,
//! CREATE/QUERY/DESTROY_MKEY.
//!
//! Owns: these commands' checks and the PD users count mkeys hold. Must not: check accesses
//! through an mkey (that is [`crate::mkey::Mkey::translate`], at use).
//!
//! Sources: kernel `drivers/net/ethernet/mellanox/mlx5/core/mr.c` (`mlx5_core_create_mkey`:
//! key = `mkey_index << 8 | mkey_7_0`; `mlx5_core_destroy_mkey` sends only the index),
//! `drivers/infiniband/hw/mlx5/mr.c` (`set_mkc_access_pd_addr_fields`, `reg_create`: the MTT
//! list of `roundup(npages, 2)` entries after the input, `translations_octword_size` =
//! `get_octo_len`), rdma-core `mlx5_vfio.c` (`mlx5_vfio_reg_mr`: MTT mode, lr = 1, entries
//! `iova | MLX5_MTT_READ | MLX5_MTT_WRITE`), `core/uar.c` and `core/pd.c`.
//!
//! Statuses: a PD/UAR/mkey number that names nothing → BAD_RES; freeing a PD still used by an
//! mkey or QP, or a UAR still used by a CQ, EQ or QP → RES_BUSY (kernel `mlx5_ib` frees in
//! reverse order of creation, so firmware never sees this from it); a full table → LIM_ERR.

use bypass_hw::cmd::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, MLX5_MTT_READ, MLX5_MTT_WRITE, QueryMkeyIn,
    QueryMkeyOut, access_mode, mkey_from, mkey_variant,
};
use bypass_hw::cmd::pd_uar::{AllocPdOut, AllocUarOut, DeallocPdIn, DeallocUarIn};

use super::syndromes as s;
use super::{CmdError, CmdResult, check_uid};
use crate::mkey::{Access, Mkey};
use crate::objects::Objects;
use crate::objects::{Pd, Uar};

/// ALLOC_PD.
pub(crate) fn alloc_pd(objs: &mut Objects, input: &[u8], out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let pd = objs
        .pds
        .insert_with(|_| Pd::default())
        .ok_or(CmdError::lim(s::PD_EXHAUSTED))?;
    let _ = AllocPdOut::wrap_unchecked(out).set_pd(pd);
    Ok(())
}

/// DEALLOC_PD.
pub(crate) fn dealloc_pd(objs: &mut Objects, input: &[u8], _out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let n = DeallocPdIn::wrap_unchecked(input).pd();
    match objs.pds.get(n) {
        None => Err(CmdError::res(s::PD_UNKNOWN)),
        Some(pd) if pd.users > 0 => Err(CmdError::busy(s::PD_IN_USE)),
        Some(_) => {
            objs.pds.remove(n);
            Ok(())
        }
    }
}

/// ALLOC_UAR: the lowest free UAR page of BAR0.
pub(crate) fn alloc_uar(objs: &mut Objects, input: &[u8], out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let uar = objs
        .uars
        .insert_with(|_| Uar::default())
        .ok_or(CmdError::lim(s::UAR_EXHAUSTED))?;
    let _ = AllocUarOut::wrap_unchecked(out).set_uar(uar);
    Ok(())
}

/// DEALLOC_UAR.
pub(crate) fn dealloc_uar(objs: &mut Objects, input: &[u8], _out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let n = DeallocUarIn::wrap_unchecked(input).uar();
    match objs.uars.get(n) {
        None => Err(CmdError::res(s::UAR_UNKNOWN)),
        Some(u) if u.users > 0 => Err(CmdError::busy(s::UAR_IN_USE)),
        Some(_) => {
            objs.uars.remove(n);
            Ok(())
        }
    }
}

/// CREATE_MKEY: MTT mode only, `log_page_size` from 12 up to the profile's
/// `max_mkey_page_shift` (what GENERAL_2 advertises).
pub(crate) fn create_mkey(
    objs: &mut Objects,
    profile: &crate::profile::Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    check_uid(input)?;
    let i = CreateMkeyIn::wrap_unchecked(input);
    if i.mkey_umem_valid() != 0 {
        return Err(CmdError::param(s::MKEY_UMEM));
    }
    let m = i.mkc();
    if m.free() != 0 {
        return Err(CmdError::param(s::MKEY_FREE));
    }
    if m.access_mode() != access_mode::MTT {
        return Err(CmdError::param(s::MKEY_ACCESS_MODE));
    }
    let pd = m.pd();
    if !objs.pds.contains(pd) {
        return Err(CmdError::res(s::PD_UNKNOWN));
    }
    if m.length64() != 0 {
        return Err(CmdError::param(s::MKEY_LENGTH64));
    }
    let shift = m.log_page_size();
    if !(12..=u32::from(profile.caps.max_mkey_page_shift).min(31)).contains(&shift) {
        return Err(CmdError::param(s::MKEY_PAGE_SIZE));
    }
    let (start, len) = (m.start_addr(), m.len());
    let end = start
        .checked_add(len)
        .ok_or(CmdError::param(s::MKEY_RANGE_WRAPS))?;
    let npages = if len == 0 {
        0
    } else {
        ((end - 1) >> shift) - (start >> shift) + 1
    };
    let octwords = u64::from(m.translations_octword_size());
    if octwords.saturating_mul(2) < npages {
        return Err(CmdError::param(s::MKEY_OCTWORDS));
    }
    if (i.klm_pas_mtt_capacity() as u64) < octwords.saturating_mul(2) {
        return Err(CmdError::inlen(s::LIST_TRUNCATED));
    }
    let psize_mask = (1u64 << shift) - 1;
    // npages <= octwords * 2 <= capacity, which the input length bounds.
    let mut mtt = Vec::with_capacity(npages as usize);
    for k in 0..npages as usize {
        let e = i
            .klm_pas_mtt(k)
            .map_err(|_| CmdError::inlen(s::LIST_TRUNCATED))?;
        let page = e & !(MLX5_MTT_READ | MLX5_MTT_WRITE);
        if page & psize_mask != 0 {
            return Err(CmdError::param(s::MKEY_MTT_UNALIGNED));
        }
        mtt.push(e);
    }
    let variant = m.mkey_7_0() as u8;
    let key = Mkey {
        key: 0,
        pd,
        qpn: m.qpn(),
        start,
        len,
        access: Access {
            local_read: m.lr() != 0,
            local_write: m.lw() != 0,
            remote_read: m.rr() != 0,
            remote_write: m.rw() != 0,
            remote_atomic: m.a() != 0,
        },
        page_shift: shift,
        mtt,
    };
    let index = objs
        .mkeys
        .insert_with(|n| Mkey {
            key: mkey_from(n, variant),
            ..key
        })
        .ok_or(CmdError::lim(s::MKEY_EXHAUSTED))?;
    if let Some(p) = objs.pds.get_mut(pd) {
        p.users = p.users.saturating_add(1);
    }
    let _ = CreateMkeyOut::wrap_unchecked(out).set_mkey_index(index);
    Ok(())
}

/// QUERY_MKEY: the mkc as created (and the first MTT entries).
pub(crate) fn query_mkey(objs: &Objects, input: &[u8], out: &mut [u8]) -> CmdResult {
    let index = QueryMkeyIn::wrap_unchecked(input).mkey_index();
    let k = objs
        .mkeys
        .get(index)
        .ok_or(CmdError::res(s::MKEY_UNKNOWN))?;
    let mut o = QueryMkeyOut::wrap_unchecked(out);
    let mut m = o.memory_key_mkey_entry_mut();
    let _ = m.set_access_mode(access_mode::MTT);
    let _ = m.set_lr(k.access.local_read.into());
    let _ = m.set_lw(k.access.local_write.into());
    let _ = m.set_rr(k.access.remote_read.into());
    let _ = m.set_rw(k.access.remote_write.into());
    let _ = m.set_a(k.access.remote_atomic.into());
    let _ = m.set_qpn(k.qpn);
    let _ = m.set_mkey_7_0(mkey_variant(k.key).into());
    let _ = m.set_pd(k.pd);
    let _ = m.set_start_addr(k.start);
    let _ = m.set_len(k.len);
    let _ = m.set_translations_octword_size(k.mtt.len().div_ceil(2).min(u32::MAX as usize) as u32);
    let _ = m.set_log_page_size(k.page_shift);
    let mut first = [0u8; 16];
    for (j, e) in k.mtt.iter().take(2).enumerate() {
        first[j * 8..j * 8 + 8].copy_from_slice(&e.to_be_bytes());
    }
    let _ = o.set_bsf0_klm0_pas_mtt0_1(&first);
    Ok(())
}

/// DESTROY_MKEY. The input carries only the index (kernel `mlx5_core_destroy_mkey`), so the
/// variant byte cannot be checked here; the data path checks it on every use.
pub(crate) fn destroy_mkey(objs: &mut Objects, input: &[u8], _out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let index = DestroyMkeyIn::wrap_unchecked(input).mkey_index();
    let k = objs
        .mkeys
        .remove(index)
        .ok_or(CmdError::res(s::MKEY_UNKNOWN))?;
    if let Some(p) = objs.pds.get_mut(k.pd) {
        p.users = p.users.saturating_sub(1);
    }
    Ok(())
}
