//! CREATE_QP, QUERY_QP and DESTROY_QP.
//!
//! Owns: the checks a new QP must pass (service type, capabilities, the objects it names, its
//! work-queue buffer), the `users` counts it takes and gives back on the PD, CQs and UAR, and
//! the QP context QUERY_QP returns. Must not: change a QP's state or attributes (that is
//! [`super::modify`]).
//!
//! Sources: the fields a driver sets are those of the kernel's `create_kernel_qp` /
//! `create_user_qp` (`drivers/infiniband/hw/mlx5/qp.c`) and rdma-core's DEVX test
//! (`tests/mlx5_base.py` `Mlx5DevxRcResources.create_qp`): `st`, `pd`, `pm_state`,
//! `log_rq_size`, `log_rq_stride`, `log_sq_size` or `no_sq`, `uar_page`, `cqn_snd`, `cqn_rcv`,
//! `user_index`, `log_page_size`, `page_offset`, `dbr_addr`, then `pas[]`. The kernel's own
//! sanity checks against the capabilities (`set_rq_size`, `calc_sq_size`) are the ones the
//! firmware repeats here: WQ sizes within `log_max_qp_sz`, the RQ WQE within `max_wqe_sz_rq`.

use bypass_hw::cmd::qp::{
    CreateQpIn, CreateQpOut, DestroyQpIn, QpState, QueryQpIn, QueryQpOut, rq_stride_bytes,
    service_type, wq_buf_layout,
};
use bypass_hw::syndrome::CmdStatus;

use super::{
    SYND_BAD_SERVICE_TYPE, SYND_INPUT_LEN, SYND_INPUT_QPN, SYND_NO_CQ_RCV, SYND_NO_CQ_SND,
    SYND_NO_PD, SYND_NO_QP, SYND_NO_SRQ, SYND_NO_UAR, SYND_OUTPUT_LEN, SYND_PAS,
    SYND_QP_TABLE_FULL, SYND_RQ_SIZE, SYND_RQ_STRIDE, SYND_RQ_TYPE, SYND_SQ_SIZE, SYND_UMEM,
};
use crate::buffer::PageList;
use crate::events::Completions;
use crate::firmware::command::{CmdError, CmdResult, QpControl};
use crate::objects::Objects;
use crate::objects::{Qp, QpAttrs, WqGeometry};
use crate::profile::Profile;
use crate::transport::requester::state::ReqState;
use crate::transport::responder::state::RespState;
use bypass_hw::cmd::rmp::rq_type;

/// The input is too short for its layout.
fn short_input() -> CmdError {
    CmdError::inlen(SYND_INPUT_LEN)
}

/// The output is too short for its layout.
fn short_output() -> CmdError {
    CmdError::new(CmdStatus::BAD_OUTP_LEN_ERR, SYND_OUTPUT_LEN)
}

/// CREATE_QP: checks everything first, then inserts the QP in RST and takes its users counts.
pub(crate) fn create_qp(
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let inp = CreateQpIn::new_checked(input).map_err(|_| short_input())?;
    let mut out = CreateQpOut::new_checked(output).map_err(|_| short_output())?;
    let qpc = inp.qpc();
    let caps = &profile.caps;

    // Service type: the device models RC, and UD / UC when it advertises `ud` / `uc`
    // (cmd_hca_cap). XRC, DC and the special types are refused as unsupported parameters.
    let st = u8::try_from(qpc.st()).unwrap_or(u8::MAX);
    let supported = st == service_type::RC
        || (st == service_type::UD && caps.ud)
        || (st == service_type::UC && caps.uc);
    if !supported {
        return Err(CmdError::param(SYND_BAD_SERVICE_TYPE));
    }
    // `input_qpn` needs a capability this device does not advertise (kernel `qp.c` sets it
    // only for `MLX5_IB_QP_CREATE_SQPN_QP1`-style special QPs).
    if inp.input_qpn() != 0 {
        return Err(CmdError::param(SYND_INPUT_QPN));
    }
    // DEVX umems exist only under the kernel's DEVX; over VFIO there are none to name.
    if inp.wq_umem_valid() != 0 || qpc.dbr_umem_valid() != 0 {
        return Err(CmdError::param(SYND_UMEM));
    }
    // `qpc.rq_type` (kernel `qp.c` `get_rx_type`): a regular RQ, or receives from the SRQ in
    // `srqn_rmpn_xrqn` (`MLX5_SRQ_RQ`, whose own RQ is empty: the SQ starts the buffer, as
    // the kernel's `set_rq_size` leaves `rq.wqe_cnt` 0). CRQ and zero-length RQs are not
    // modelled.
    let srqn = match u8::try_from(qpc.rq_type()).unwrap_or(u8::MAX) {
        rq_type::REGULAR => None,
        rq_type::SRQ => {
            let n = qpc.srqn_rmpn_xrqn();
            if !objs.srqs.contains(n) {
                return Err(CmdError::res(SYND_NO_SRQ));
            }
            Some(n)
        }
        _ => return Err(CmdError::param(SYND_RQ_TYPE)),
    };

    // Sizes (kernel `set_rq_size`, `calc_sq_size`, `set_user_buf_size`: log_max_qp_sz,
    // max_wqe_sz_rq).
    let log_rq_size = u8::try_from(qpc.log_rq_size()).unwrap_or(u8::MAX);
    if log_rq_size > caps.log_max_qp_sz {
        return Err(CmdError::lim(SYND_RQ_SIZE));
    }
    let log_rq_stride = u8::try_from(qpc.log_rq_stride()).unwrap_or(u8::MAX);
    let rq_stride = rq_stride_bytes(log_rq_stride);
    if rq_stride > u64::from(caps.max_wqe_sz_rq) {
        return Err(CmdError::lim(SYND_RQ_STRIDE));
    }
    let log_sq_size = if qpc.no_sq() != 0 {
        None
    } else {
        let l = u8::try_from(qpc.log_sq_size()).unwrap_or(u8::MAX);
        if l > caps.log_max_qp_sz {
            return Err(CmdError::lim(SYND_SQ_SIZE));
        }
        Some(l)
    };

    // The objects it names (BAD_RES: "the object the command names does not exist").
    let pd = qpc.pd();
    if !objs.pds.contains(pd) {
        return Err(CmdError::res(SYND_NO_PD));
    }
    let cqn_snd = qpc.cqn_snd();
    if !comp.cqs.contains(cqn_snd) {
        return Err(CmdError::res(SYND_NO_CQ_SND));
    }
    let cqn_rcv = qpc.cqn_rcv();
    if !comp.cqs.contains(cqn_rcv) {
        return Err(CmdError::res(SYND_NO_CQ_RCV));
    }
    let uar = qpc.uar_page();
    if !objs.uars.contains(uar) {
        return Err(CmdError::res(SYND_NO_UAR));
    }

    // The WQ buffer: RQ at offset 0, SQ right after it (rdma-core `sq.offset = rq.wq_size`),
    // `pas[]` pages of `4 KiB << log_page_size`, starting `page_offset * 64` bytes into the
    // first (kernel `mlx5_ib_populate_pas` + `MLX5_SET(qpc, qpc, page_offset, ...)`).
    let (rq_len, wq_len) =
        wq_buf_layout(log_rq_size, log_rq_stride, log_sq_size).ok_or(CmdError::param(SYND_PAS))?;
    let wq_len = if srqn.is_some() {
        wq_len - rq_len
    } else {
        wq_len
    };
    let pages: Vec<u64> = (0..inp.pas_capacity())
        .filter_map(|i| inp.pas(i).ok())
        .collect();
    let wq = PageList::new(pages, qpc.log_page_size(), qpc.page_offset(), wq_len)
        .map_err(|_| CmdError::param(SYND_PAS))?;

    let geom = WqGeometry {
        log_rq_size: if srqn.is_some() { 0 } else { log_rq_size },
        // An SRQ QP's RQ takes no room: `rq_bytes()` is 0 and the SQ starts at offset 0.
        rq_stride: if srqn.is_some() {
            0
        } else {
            u32::try_from(rq_stride).unwrap_or(u32::MAX)
        },
        log_sq_size,
    };
    let user_index = qpc.user_index();
    let dbr = qpc.dbr_addr();
    let mut raw = qpc.as_bytes().to_vec();
    if let Ok(mut q) = bypass_hw::cmd::qp::Qpc::new_checked(&mut raw[..]) {
        let _ = q.set_state(QpState::Rst as u32);
    }
    let Some(qpn) = objs.qps.insert_with(|qpn| Qp {
        qpn,
        st,
        pd,
        state: QpState::Rst,
        uar,
        cqn_snd,
        cqn_rcv,
        user_index,
        wq,
        geom,
        dbr,
        attrs: QpAttrs::default(),
        headers: None,
        sq_ci: 0,
        rq_ci: 0,
        req: ReqState::default(),
        resp: RespState::default(),
        qpc: raw,
        counters: Default::default(),
        srqn,
    }) else {
        // Every QP number of `1 << log_max_qp` is taken.
        return Err(CmdError::lim(SYND_QP_TABLE_FULL));
    };

    // The objects it uses cannot be destroyed while it lives (RES_BUSY in their DESTROY).
    if let Some(p) = objs.pds.get_mut(pd) {
        p.users = p.users.saturating_add(1);
    }
    for cqn in [cqn_snd, cqn_rcv] {
        if let Some(cq) = comp.cqs.get_mut(cqn) {
            cq.users = cq.users.saturating_add(1);
        }
    }
    if let Some(u) = objs.uars.get_mut(uar) {
        u.users = u.users.saturating_add(1);
    }
    if let Some(s) = srqn.and_then(|n| objs.srqs.get_mut(n)) {
        s.users = s.users.saturating_add(1);
    }
    out.set_qpn(qpn).map_err(|_| short_output())?;
    Ok(())
}

/// DESTROY_QP: from any state; outstanding WQEs are dropped without completions (the PRM
/// destroys the context; the kernel moves a QP to RESET first only to clean its CQs).
pub(crate) fn destroy_qp(
    objs: &mut Objects,
    comp: &mut Completions,
    dp: &mut dyn QpControl,
    input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    let inp = DestroyQpIn::new_checked(input).map_err(|_| short_input())?;
    let qp = objs
        .qps
        .remove(inp.qpn())
        .ok_or(CmdError::res(SYND_NO_QP))?;
    release_users(objs, comp, &qp);
    dp.forget(qp.qpn);
    Ok(())
}

/// Gives back the users counts `qp` took at creation (and any CQ it moved to since).
pub(super) fn release_users(objs: &mut Objects, comp: &mut Completions, qp: &Qp) {
    if let Some(p) = objs.pds.get_mut(qp.pd) {
        p.users = p.users.saturating_sub(1);
    }
    for cqn in [qp.cqn_snd, qp.cqn_rcv] {
        if let Some(cq) = comp.cqs.get_mut(cqn) {
            cq.users = cq.users.saturating_sub(1);
        }
    }
    if let Some(u) = objs.uars.get_mut(qp.uar) {
        u.users = u.users.saturating_sub(1);
    }
    if let Some(s) = qp.srqn.and_then(|n| objs.srqs.get_mut(n)) {
        s.users = s.users.saturating_sub(1);
    }
}

/// QUERY_QP: the stored `qpc` with the live fields patched in, then as much of `pas[]` as the
/// output has room for.
///
/// Live fields (the ones the kernel's `query_qp_attr` and rdma-core read back as current, or
/// that `mlx5_ifc.h` marks as hardware counters): `state`, `next_send_psn`, `next_rcv_psn`,
/// `hw_sq_wqebb_counter`, `hw_rq_counter`.
pub(crate) fn query_qp(objs: &Objects, input: &[u8], output: &mut [u8]) -> CmdResult {
    let inp = QueryQpIn::new_checked(input).map_err(|_| short_input())?;
    let qp = objs.qps.get(inp.qpn()).ok_or(CmdError::res(SYND_NO_QP))?;
    let mut out = QueryQpOut::new_checked(output).map_err(|_| short_output())?;
    {
        let mut qpc = out.qpc_mut();
        let dst = qpc.as_bytes_mut();
        let n = dst.len().min(qp.qpc.len());
        if let (Some(d), Some(s)) = (dst.get_mut(..n), qp.qpc.get(..n)) {
            d.copy_from_slice(s);
        }
        // Setters only fail on a value wider than the field; every value is masked to fit.
        let _ = qpc.set_state(qp.state as u32);
        let _ = qpc.set_next_send_psn(qp.req.psn() & 0x00ff_ffff);
        let _ = qpc.set_next_rcv_psn(qp.resp.epsn() & 0x00ff_ffff);
        let _ = qpc.set_hw_sq_wqebb_counter(qp.sq_ci & 0xffff);
        let _ = qpc.set_hw_rq_counter(qp.rq_ci);
    }
    let room = out.pas_capacity();
    for (i, &page) in qp.wq.pages().iter().take(room).enumerate() {
        let _ = out.set_pas(i, page);
    }
    Ok(())
}
