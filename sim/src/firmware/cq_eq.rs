//! Completion and event queues: CREATE/QUERY/MODIFY/DESTROY_CQ, CREATE/QUERY/DESTROY_EQ.
//!
//! Owns: these commands' checks, building [`Cq`]/[`Eq`] with their rings, and the users counts
//! a CQ holds on its EQ and UAR (and an EQ on its UAR). Must not: write CQEs or EQEs (that is
//! `events`).
//!
//! Sources: kernel `drivers/net/ethernet/mellanox/mlx5/core/cq.c` (`mlx5_create_cq`),
//! `core/eq.c` (`create_map_eq`: `event_bitmask`, `intr`, `log_eq_size`, `uar_page`, the pas
//! list after the input), `drivers/infiniband/hw/mlx5/cq.c` (`create_cq_kernel`: cqc
//! `log_cq_size`, `cqe_sz`, `uar_page`, `c_eqn`, `log_page_size` relative to 4 KiB,
//! `page_offset`, `dbr_addr`), rdma-core `tests/mlx5_base.py` (`Mlx5DevxRcResources.create_cq`),
//! `mlx5_vfio.c` (`create_async_eqs`). Limits from `cmd_hca_cap`: `log_max_cq_sz`,
//! `log_max_cq`, `log_max_eq_sz`, `log_max_eq` (LIM_ERR beyond them).

use bypass_hw::cmd::cq::{
    CreateCqIn, CreateCqOut, DestroyCqIn, ModifyCqIn, QueryCqIn, QueryCqOut, cq_buf_bytes, cqe_sz,
    modify_op_mod, modify_select, st as cq_st, status as cq_status,
};
use bypass_hw::cmd::eq::{
    CreateEqIn, CreateEqOut, DestroyEqIn, EVENT_BITMASK_WORDS, QueryEqIn, QueryEqOut, eq_buf_bytes,
    st as eq_st,
};

use super::syndromes as s;
use super::{CmdError, CmdResult, check_uid};
use crate::buffer::{PageList, PageListError};
use crate::events::Completions;
use crate::io::Io;
use crate::objects::Objects;
use crate::objects::{Cq, Eq};
use crate::profile::Profile;
use crate::ring::{ArmKind, CqRing, EqRing};

/// Reads the `pas` entries a `len`-byte buffer with `log_page_size` (relative to 4 KiB) and
/// `page_offset` (64-byte units) needs, and builds its page list.
pub(super) fn page_list(
    len: u64,
    log_page_size: u32,
    page_offset: u32,
    capacity: usize,
    get: impl Fn(usize) -> Option<u64>,
    unaligned: u32,
    bad_size: u32,
) -> Result<PageList, CmdError> {
    let shift = 12u32.saturating_add(log_page_size);
    if shift > 31 {
        return Err(CmdError::param(bad_size));
    }
    let need = (u64::from(page_offset) * 64)
        .saturating_add(len)
        .div_ceil(1u64 << shift);
    if (capacity as u64) < need {
        return Err(CmdError::inlen(s::LIST_TRUNCATED));
    }
    let mut pages = Vec::with_capacity(need as usize);
    for k in 0..need as usize {
        pages.push(get(k).ok_or(CmdError::inlen(s::LIST_TRUNCATED))?);
    }
    PageList::new(pages, log_page_size, page_offset, len).map_err(|e| match e {
        PageListError::Unaligned => CmdError::param(unaligned),
        PageListError::BadPageSize => CmdError::param(bad_size),
        PageListError::TooShort => CmdError::inlen(s::LIST_TRUNCATED),
    })
}

/// CREATE_CQ.
pub(crate) fn create_cq(
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    check_uid(input)?;
    let i = CreateCqIn::wrap_unchecked(input);
    let c = i.cqc();
    if i.cq_umem_valid() != 0
        || c.dbr_umem_valid() != 0
        || c.cqe_comp_en() != 0
        || c.cc() != 0
        || c.apu_cq() != 0
    {
        return Err(CmdError::param(s::CQ_UNSUPPORTED));
    }
    let code = c.cqe_sz() as u8;
    let cqe_bytes = cqe_sz::bytes(code).ok_or(CmdError::param(s::CQ_BAD_CQE_SIZE))?;
    let log_size = c.log_cq_size();
    if log_size > u32::from(profile.caps.log_max_cq_sz) {
        return Err(CmdError::lim(s::CQ_TOO_LARGE));
    }
    let uar = c.uar_page();
    if !objs.uars.contains(uar) {
        return Err(CmdError::res(s::CQ_UAR_UNKNOWN));
    }
    let eqn = c.c_eqn();
    if !comp.eqs.contains(eqn) {
        return Err(CmdError::res(s::CQ_EQ_UNKNOWN));
    }
    let len = cq_buf_bytes(log_size as u8, code).ok_or(CmdError::lim(s::CQ_TOO_LARGE))?;
    let pl = page_list(
        len,
        c.log_page_size(),
        c.page_offset(),
        i.pas_capacity(),
        |k| i.pas(k).ok(),
        s::CQ_PAS_UNALIGNED,
        s::CQ_PAGE_SIZE,
    )?;
    let ring = CqRing::new(pl, log_size, cqe_bytes as u32, c.dbr_addr(), c.oi() != 0);
    let cqc = c.as_bytes().to_vec();
    let cqn = comp
        .cqs
        .insert_with(|_| Cq {
            ring,
            eqn,
            uar,
            users: 0,
            cqc,
        })
        .ok_or(CmdError::lim(s::CQ_EXHAUSTED))?;
    if let Some(e) = comp.eqs.get_mut(eqn) {
        e.users = e.users.saturating_add(1);
    }
    if let Some(u) = objs.uars.get_mut(uar) {
        u.users = u.users.saturating_add(1);
    }
    let _ = CreateCqOut::wrap_unchecked(out).set_cqn(cqn);
    Ok(())
}

/// QUERY_CQ: the cqc as created, with the live status, arm state and counters.
pub(crate) fn query_cq(
    comp: &Completions,
    io: &mut Io<'_>,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let cqn = QueryCqIn::wrap_unchecked(input).cqn();
    let Some(cq) = comp.cqs.get(cqn) else {
        return Err(CmdError::res(s::CQ_UNKNOWN));
    };
    let (cqc, pi, overrun, armed) = (cq.cqc.clone(), cq.ring.pi, cq.ring.overrun, cq.ring.armed());
    let ci = {
        let Some(cq) = comp.cqs.get(cqn) else {
            return Err(CmdError::res(s::CQ_UNKNOWN));
        };
        let ring = cq.ring.clone();
        ring.consumer_index(io.dma)
    };
    let mut o = QueryCqOut::wrap_unchecked(out);
    let mut c = o.cq_context_mut();
    if let Some(dst) = c.as_bytes_mut().get_mut(..cqc.len()) {
        dst.copy_from_slice(&cqc);
    }
    let _ = c.set_status(u32::from(if overrun {
        cq_status::CQ_OVERFLOW
    } else {
        cq_status::OK
    }));
    let _ = c.set_st(u32::from(match armed {
        Some(ArmKind::Any) => cq_st::NOTIFICATION_REQUEST_ARMED,
        Some(ArmKind::SolicitedOnly) => cq_st::SOLICITED_NOTIFICATION_REQUEST_ARMED,
        None => cq_st::FIRED,
    }));
    let _ = c.set_producer_counter(pi & 0x00ff_ffff);
    match ci {
        Ok(ci) => {
            let _ = c.set_consumer_counter(ci);
        }
        Err(f) => io.dma_fault(f),
    }
    Ok(())
}

/// MODIFY_CQ: moderation (`cq_period`, `cq_max_count`) and overrun-ignore are recorded in the
/// context (the sim does not moderate events); resize is not supported (`cq_resize` = 0).
pub(crate) fn modify_cq(comp: &mut Completions, input: &[u8], _out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let i = ModifyCqIn::wrap_unchecked(input);
    let Some(cq) = comp.cqs.get_mut(i.cqn()) else {
        return Err(CmdError::res(s::CQ_UNKNOWN));
    };
    match i.op_mod() as u16 {
        modify_op_mod::MODIFY_CQ => {
            let sel = i.modify_field_select_resize_field_select();
            let new = i.cq_context();
            let mut c = bypass_hw::cmd::cq::Cqc::wrap_unchecked(&mut cq.cqc[..]);
            if sel & modify_select::PERIOD != 0 {
                let _ = c.set_cq_period(new.cq_period());
            }
            if sel & modify_select::COUNT != 0 {
                let _ = c.set_cq_max_count(new.cq_max_count());
            }
            if sel & modify_select::OVERRUN != 0 {
                let _ = c.set_oi(new.oi());
            }
            Ok(())
        }
        modify_op_mod::RESIZE_CQ => Err(CmdError::param(s::CQ_RESIZE_UNSUPPORTED)),
        _ => Err(CmdError::param(s::BAD_OP_MOD)),
    }
}

/// DESTROY_CQ: refused while a QP uses the CQ.
pub(crate) fn destroy_cq(
    objs: &mut Objects,
    comp: &mut Completions,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    check_uid(input)?;
    let cqn = DestroyCqIn::wrap_unchecked(input).cqn();
    let (eqn, uar) = match comp.cqs.get(cqn) {
        None => return Err(CmdError::res(s::CQ_UNKNOWN)),
        Some(cq) if cq.users > 0 => return Err(CmdError::busy(s::CQ_IN_USE)),
        Some(cq) => (cq.eqn, cq.uar),
    };
    comp.cqs.remove(cqn);
    if let Some(e) = comp.eqs.get_mut(eqn) {
        e.users = e.users.saturating_sub(1);
    }
    if let Some(u) = objs.uars.get_mut(uar) {
        u.users = u.users.saturating_sub(1);
    }
    Ok(())
}

/// CREATE_EQ.
pub(crate) fn create_eq(
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    check_uid(input)?;
    let i = CreateEqIn::wrap_unchecked(input);
    let c = i.eqc();
    let log_size = c.log_eq_size();
    if log_size > u32::from(profile.caps.log_max_eq_sz) {
        return Err(CmdError::lim(s::EQ_TOO_LARGE));
    }
    let uar = c.uar_page();
    if !objs.uars.contains(uar) {
        return Err(CmdError::res(s::EQ_UAR_UNKNOWN));
    }
    let intr = c.intr();
    if intr >= u32::from(profile.msix_vectors) {
        return Err(CmdError::param(s::EQ_BAD_VECTOR));
    }
    let len = eq_buf_bytes(log_size as u8).ok_or(CmdError::lim(s::EQ_TOO_LARGE))?;
    let pl = page_list(
        len,
        c.log_page_size(),
        c.page_offset(),
        i.pas_capacity(),
        |k| i.pas(k).ok(),
        s::EQ_PAS_UNALIGNED,
        s::EQ_PAGE_SIZE,
    )?;
    let mut event_bitmask = [0u64; EVENT_BITMASK_WORDS];
    for (w, slot) in event_bitmask.iter_mut().enumerate() {
        *slot = i.event_bitmask(w).unwrap_or(0);
    }
    let eqc = c.as_bytes().to_vec();
    let eqn = comp
        .eqs
        .insert_with(|_| Eq {
            ring: EqRing::new(pl, log_size),
            intr: intr as u16,
            uar,
            event_bitmask,
            users: 0,
            eqc,
        })
        .ok_or(CmdError::lim(s::EQ_EXHAUSTED))?;
    if let Some(u) = objs.uars.get_mut(uar) {
        u.users = u.users.saturating_add(1);
    }
    let _ = CreateEqOut::wrap_unchecked(out).set_eq_number(eqn);
    Ok(())
}

/// QUERY_EQ: the eqc as created, with the live counters and arm state.
pub(crate) fn query_eq(comp: &Completions, input: &[u8], out: &mut [u8]) -> CmdResult {
    let eqn = QueryEqIn::wrap_unchecked(input).eq_number();
    let Some(eq) = comp.eqs.get(eqn) else {
        return Err(CmdError::res(s::EQ_UNKNOWN));
    };
    let mut o = QueryEqOut::wrap_unchecked(out);
    let _ = o.set_event_bitmask(eq.event_bitmask[0]);
    let mut c = o.eq_context_entry_mut();
    if let Some(dst) = c.as_bytes_mut().get_mut(..eq.eqc.len()) {
        dst.copy_from_slice(&eq.eqc);
    }
    let _ = c.set_producer_counter(eq.ring.pi & 0x00ff_ffff);
    let _ = c.set_consumer_counter(eq.ring.ci & 0x00ff_ffff);
    let _ = c.set_st(u32::from(if eq.ring.armed {
        eq_st::ARMED
    } else {
        eq_st::FIRED
    }));
    Ok(())
}

/// DESTROY_EQ: refused while a CQ reports to the EQ.
pub(crate) fn destroy_eq(
    objs: &mut Objects,
    comp: &mut Completions,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let eqn = DestroyEqIn::wrap_unchecked(input).eq_number();
    let uar = match comp.eqs.get(eqn) {
        None => return Err(CmdError::res(s::EQ_UNKNOWN)),
        Some(eq) if eq.users > 0 => return Err(CmdError::busy(s::EQ_IN_USE)),
        Some(eq) => eq.uar,
    };
    comp.eqs.remove(eqn);
    if let Some(u) = objs.uars.get_mut(uar) {
        u.users = u.users.saturating_sub(1);
    }
    Ok(())
}
