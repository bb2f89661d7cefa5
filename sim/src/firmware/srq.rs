//! SRQs as RMPs: CREATE_RMP, MODIFY_RMP (arm the limit), QUERY_RMP, DESTROY_RMP.
//!
//! Owns: these commands' checks, building [`Srq`] with its page list, the users count an SRQ
//! holds on its PD, and the QPs' count on the SRQ (taken in `qp::create`). Must not: take
//! WQEs or raise events (that is `srq` and the responder).
//!
//! Sources: the kernel's `mlx5_ib` `srq_cmd.c` (`create_rmp_cmd`, `arm_rmp_cmd`,
//! `query_rmp_cmd`, `destroy_rmp_cmd`: what a driver sets and reads back) and `srq.c`
//! (`mlx5_ib_create_srq`: the stride is the next segment plus the scatter entries, at least 32
//! bytes, a power of two; `max_wr` below `1 << log_max_srq_sz`; `mlx5_ib_modify_srq`: a
//! limit at or above the SRQ's size is refused); `cmd_hca_cap` `log_max_srq_sz`,
//! `log_max_srq`, `max_wqe_sz_rq` (LIM_ERR beyond them, as the CQ and QP commands). An unknown
//! object is BAD_RES, a destroy of one in use RES_BUSY (the "object in use" rule of
//! `objects`). The syndromes are the sim's (`syndromes`, `0x0109_xxxx`).

use bypass_hw::cmd::rmp::{
    CreateRmpIn, CreateRmpOut, DestroyRmpIn, ModifyRmpIn, QueryRmpIn, QueryRmpOut, Rmpc,
    srq_buf_bytes, state as rmp_state, wq_type,
};

use super::cq_eq::page_list;
use super::syndromes as s;
use super::{CmdError, CmdResult, check_uid};
use crate::objects::Objects;
use crate::profile::Profile;
use crate::srq::Srq;

/// Smallest SRQ WQE: the next segment and one scatter entry (rdma-core `mlx5_alloc_srq_buf`:
/// `max(32, size)`).
const MIN_LOG_STRIDE: u32 = 5;

/// CREATE_RMP.
pub(crate) fn create_rmp(
    objs: &mut Objects,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    check_uid(input)?;
    let i = CreateRmpIn::wrap_unchecked(input);
    let ctx = i.ctx();
    let wq = ctx.wq();
    if ctx.state() != u32::from(rmp_state::RDY) {
        return Err(CmdError::param(s::SRQ_BAD_STATE));
    }
    if wq.wq_type() != u32::from(wq_type::LINKED_LIST)
        || wq.wq_umem_valid() != 0
        || wq.dbr_umem_valid() != 0
        || wq.wq_signature() != 0
    {
        return Err(CmdError::param(s::SRQ_UNSUPPORTED));
    }
    let caps = &profile.caps;
    let log_size = wq.log_wq_sz();
    if log_size > u32::from(caps.log_max_srq_sz) {
        return Err(CmdError::lim(s::SRQ_TOO_LARGE));
    }
    let log_stride = wq.log_wq_stride();
    if log_stride < MIN_LOG_STRIDE || (1u64 << log_stride) > u64::from(caps.max_wqe_sz_rq) {
        return Err(CmdError::lim(s::SRQ_BAD_STRIDE));
    }
    let lwm = wq.lwm();
    if lwm >= 1 << log_size {
        return Err(CmdError::param(s::SRQ_BAD_LIMIT));
    }
    let pd = wq.pd();
    if !objs.pds.contains(pd) {
        return Err(CmdError::res(s::SRQ_PD_UNKNOWN));
    }
    let (log_size, log_stride) = (log_size as u8, log_stride as u8);
    let len = srq_buf_bytes(log_size, log_stride).ok_or(CmdError::lim(s::SRQ_TOO_LARGE))?;
    let pages = page_list(
        len,
        wq.log_wq_pg_sz(),
        wq.page_offset(),
        i.pas_capacity(),
        |k| i.pas(k).ok(),
        s::SRQ_PAS_UNALIGNED,
        s::SRQ_PAGE_SIZE,
    )?;
    let srq = Srq {
        pd,
        wq: pages,
        log_size,
        stride: 1 << log_stride,
        dbr: wq.dbr_addr(),
        lwm: lwm as u16,
        users: 0,
        head: 0,
        taken: 0,
        rmpc: ctx.as_bytes().to_vec(),
    };
    let rmpn = objs
        .srqs
        .insert_with(|_| srq)
        .ok_or(CmdError::lim(s::SRQ_EXHAUSTED))?;
    if let Some(p) = objs.pds.get_mut(pd) {
        p.users = p.users.saturating_add(1);
    }
    let _ = CreateRmpOut::wrap_unchecked(out).set_rmpn(rmpn);
    Ok(())
}

/// MODIFY_RMP: the only field it changes is the limit (`rmp_bitmask.lwm`), as `arm_rmp_cmd`
/// uses it; the state stays RDY.
pub(crate) fn modify_rmp(objs: &mut Objects, input: &[u8], _out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let i = ModifyRmpIn::wrap_unchecked(input);
    let srq = objs
        .srqs
        .get_mut(i.rmpn())
        .ok_or(CmdError::res(s::SRQ_UNKNOWN))?;
    if i.rmp_state() != u32::from(rmp_state::RDY) || i.ctx().state() != u32::from(rmp_state::RDY) {
        return Err(CmdError::param(s::SRQ_BAD_STATE));
    }
    if i.bitmask().lwm() != 0 {
        let lwm = i.ctx().wq().lwm();
        if lwm >= srq.size() {
            return Err(CmdError::param(s::SRQ_BAD_LIMIT));
        }
        srq.lwm = lwm as u16;
    }
    Ok(())
}

/// QUERY_RMP: the context as created, with the live `state`, `lwm` and `hw_counter`, then as
/// much of `pas[]` as the output has room for.
pub(crate) fn query_rmp(objs: &Objects, input: &[u8], out: &mut [u8]) -> CmdResult {
    let i = QueryRmpIn::wrap_unchecked(input);
    let srq = objs
        .srqs
        .get(i.rmpn())
        .ok_or(CmdError::res(s::SRQ_UNKNOWN))?;
    let mut o = QueryRmpOut::wrap_unchecked(&mut out[..]);
    {
        let mut ctx = o.rmp_context_mut();
        let dst = ctx.as_bytes_mut();
        let n = dst.len().min(srq.rmpc.len()).min(Rmpc::LEN);
        if let (Some(d), Some(src)) = (dst.get_mut(..n), srq.rmpc.get(..n)) {
            d.copy_from_slice(src);
        }
        let _ = ctx.set_state(u32::from(rmp_state::RDY));
        let mut wq = ctx.wq_mut();
        let _ = wq.set_lwm(u32::from(srq.lwm));
        let _ = wq.set_hw_counter(srq.taken);
    }
    let room = o.pas_capacity();
    for (k, &page) in srq.wq.pages().iter().take(room).enumerate() {
        let _ = o.set_pas(k, page);
    }
    Ok(())
}

/// DESTROY_RMP: refused while a QP takes receives from it.
pub(crate) fn destroy_rmp(objs: &mut Objects, input: &[u8], _out: &mut [u8]) -> CmdResult {
    check_uid(input)?;
    let n = DestroyRmpIn::wrap_unchecked(input).rmpn();
    let pd = match objs.srqs.get(n) {
        None => return Err(CmdError::res(s::SRQ_UNKNOWN)),
        Some(srq) if srq.users > 0 => return Err(CmdError::busy(s::SRQ_IN_USE)),
        Some(srq) => srq.pd,
    };
    objs.srqs.remove(n);
    if let Some(p) = objs.pds.get_mut(pd) {
        p.users = p.users.saturating_sub(1);
    }
    Ok(())
}
