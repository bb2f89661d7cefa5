//! The modify family: RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, SQD_RTS,
//! RTS2SQD, SQD2SQD, 2ERR and 2RST.
//!
//! Owns: the QP state machine as the firmware enforces it (which edge, which optional bits),
//! the all-or-nothing update of a QP (the fields are taken and checked by [`super::fields`]
//! first; the QP changes only if all pass), the arming of the requester and responder
//! (`ReqState::new`, `RespState::new`), and 2ERR / 2RST. Must not: touch rings or the
//! transport's internals (state changes, flushes and resets go through `QpControl`).
//!
//! Sources: the allowed edges of `bypass_hw::cmd::qp::apply` and the kernel's `optab`
//! (`drivers/infiniband/hw/mlx5/qp.c` `__mlx5_ib_modify_qp`; another state is BAD_QP_STATE,
//! `MLX5_CMD_STAT_BAD_QP_STATE_ERR`); the fields each edge requires as `__mlx5_ib_modify_qp`
//! and rdma-core's DEVX test (`tests/mlx5_base.py` `Mlx5DevxRcResources.to_rts`) fill them
//! ([`super::fields`]); the optional ones in [`super::optpar`]. For UD the kernel fixes `mtu`
//! to 4096 and `log_msg_max` to 12 (`mtu_msgmax`), so INIT2RTR of a UD QP checks neither.
//! UC takes RC's path fields (INIT2RTR: MTU, remote QP, PSN, address path; RST2INIT: access)
//! and none of its reliability ones (RTR2RTS: the send PSN only), as `ib_modify_qp_is_ok`'s
//! table requires for `IB_QPT_UC` (`drivers/infiniband/core/verbs.c` `qp_state_table`).
//! RTS2SQD moves the QP to SQ_DRAINING (SQD at once if nothing is in progress,
//! `engine::drain`); SQD_RTS and SQERR2RTS let the requester fetch what was posted meanwhile.
//! 2ERR and 2RST take a draining QP as an SQD one (the kernel's `optab` has only SQD).

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{
    Init2InitQpIn, Init2RtrQpIn, OptParamMask, Qp2ErrIn, Qp2RstIn, QpState, Qpc, Rst2InitQpIn,
    Rtr2RtsQpIn, Rts2RtsQpIn, Rts2SqdQpIn, Sqd2RtsQpIn, Sqd2SqdQpIn, Sqerr2RtsQpIn, apply,
    service_type,
};
use bypass_hw::syndrome::CmdStatus;

use super::fields::{init2rtr_rc, init2rtr_ud, optional, rst2init, rtr2rts};
use super::{SYND_BAD_QP_STATE, SYND_INPUT_LEN, SYND_NO_QP, SYND_OPT_PARAM, optpar};
use crate::events::Completions;
use crate::firmware::command::{CmdError, CmdResult, QpControl};
use crate::io::Io;
use crate::objects::Objects;
use crate::objects::{Qp, QpAttrs};
use crate::profile::Profile;
use crate::transport::requester::state::ReqState;
use crate::transport::responder::state::RespState;

/// Bytes of a `qpc`.
const QPC_LEN: usize = Qpc::<()>::LEN;

/// The parts of a modify input every transition shares.
struct ModifyIn {
    qpn: u32,
    opt: u32,
    /// The input's `qpc` (all zero for 2ERR / 2RST, which carry none).
    qpc: [u8; QPC_LEN],
}

/// Reads `qpn`, `opt_param_mask` and `qpc` through the opcode's own layout.
fn parse(op: Opcode, input: &[u8]) -> Result<ModifyIn, CmdError> {
    let short = || CmdError::inlen(SYND_INPUT_LEN);
    macro_rules! long {
        ($ty:ident) => {{
            let v = $ty::new_checked(input).map_err(|_| short())?;
            let mut qpc = [0u8; QPC_LEN];
            let src = v.qpc();
            let src = src.as_bytes();
            let n = src.len().min(QPC_LEN);
            if let (Some(d), Some(s)) = (qpc.get_mut(..n), src.get(..n)) {
                d.copy_from_slice(s);
            }
            ModifyIn {
                qpn: v.qpn(),
                opt: v.opt_param_mask(),
                qpc,
            }
        }};
    }
    macro_rules! short {
        ($ty:ident) => {{
            let v = $ty::new_checked(input).map_err(|_| short())?;
            ModifyIn {
                qpn: v.qpn(),
                opt: 0,
                qpc: [0u8; QPC_LEN],
            }
        }};
    }
    Ok(match op {
        Opcode::RST2INIT_QP => long!(Rst2InitQpIn),
        Opcode::INIT2INIT_QP => long!(Init2InitQpIn),
        Opcode::INIT2RTR_QP => long!(Init2RtrQpIn),
        Opcode::RTR2RTS_QP => long!(Rtr2RtsQpIn),
        Opcode::RTS2RTS_QP => long!(Rts2RtsQpIn),
        Opcode::SQERR2RTS_QP => long!(Sqerr2RtsQpIn),
        Opcode::SQD_RTS_QP => long!(Sqd2RtsQpIn),
        Opcode::RTS2SQD_QP => long!(Rts2SqdQpIn),
        Opcode::SQD2SQD_QP => long!(Sqd2SqdQpIn),
        Opcode::QP_2ERR => short!(Qp2ErrIn),
        Opcode::QP_2RST => short!(Qp2RstIn),
        // The dispatcher routes only the opcodes above here.
        _ => return Err(CmdError::new(CmdStatus::BAD_OP_ERR, 0)),
    })
}

/// What a transition changes, computed (and checked) before anything is changed, so that a
/// refused command leaves the QP exactly as it was.
struct Update {
    attrs: QpAttrs,
    qpc: Vec<u8>,
    /// A new receive CQ (RTS2RTS `CQN_RCV`).
    cqn_rcv: Option<u32>,
}

/// One modify command.
pub(crate) fn modify_qp(
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    io: &mut Io<'_>,
    dp: &mut dyn QpControl,
    op: Opcode,
    input: &[u8],
) -> CmdResult {
    let m = parse(op, input)?;
    let qp = objs.qps.get(m.qpn).ok_or(CmdError::res(SYND_NO_QP))?;
    let from = match (qp.state, op) {
        (QpState::SqDraining, Opcode::QP_2ERR | Opcode::QP_2RST) => QpState::Sqd,
        (s, _) => s,
    };
    let Some(to) = apply(op, from) else {
        return Err(CmdError::new(
            CmdStatus::BAD_QP_STATE_ERR,
            SYND_BAD_QP_STATE,
        ));
    };
    let allowed = optpar::allowed(op, qp.st);
    if m.opt & !allowed.bits() != 0 {
        return Err(CmdError::param(SYND_OPT_PARAM));
    }
    let opt = OptParamMask::from_bits_retain(m.opt);
    let qpn = m.qpn;
    match op {
        Opcode::QP_2ERR => {
            // Flushes every outstanding WQE of both queues with WR_FLUSH_ERR.
            dp.set_state(&mut objs.qps, comp, io, qpn, QpState::Err);
        }
        Opcode::QP_2RST => to_reset(objs, comp, io, dp, qpn),
        _ => {
            let q = Qpc::wrap_unchecked(&m.qpc[..]);
            let up = plan(comp, profile, op, qp, &q, opt)?;
            if let Some(new_rcv) = up.cqn_rcv {
                move_rcv_cq(objs, comp, qpn, new_rcv);
            }
            let Some(qp) = objs.qps.get_mut(qpn) else {
                return Err(CmdError::res(SYND_NO_QP));
            };
            qp.attrs = up.attrs;
            qp.headers = None;
            qp.qpc = up.qpc;
            // INIT2RTR arms the responder at the expected PSN, RTR2RTS the requester at the
            // first PSN it sends.
            let mut to = to;
            match op {
                Opcode::INIT2RTR_QP => qp.resp = RespState::new(qp.attrs.rq_psn),
                Opcode::RTR2RTS_QP => qp.req = ReqState::new(qp.attrs.sq_psn),
                // Doorbells rung in SQD or SQE were not acted on (SQD) or flushed what they
                // covered (SQE): back in RTS the requester looks at the record again.
                Opcode::SQD_RTS_QP | Opcode::SQERR2RTS_QP => qp.req.fresh = true,
                // Messages in progress finish first (`engine::drain`).
                Opcode::RTS2SQD_QP => to = QpState::SqDraining,
                _ => {}
            }
            dp.set_state(&mut objs.qps, comp, io, qpn, to);
        }
    }
    Ok(())
}

/// 2RST: back to the state CREATE_QP left it in. Nothing is flushed: outstanding WQEs are
/// simply forgotten (PRM; the kernel cleans the CQs itself, `mlx5_ib_modify_qp` →
/// `__mlx5_ib_cq_clean` on a move to RESET), counters and transport state start over, and the
/// attributes the transitions set are cleared.
fn to_reset(
    objs: &mut Objects,
    comp: &mut Completions,
    io: &mut Io<'_>,
    dp: &mut dyn QpControl,
    qpn: u32,
) {
    // The data path writes the error CQEs held for the QP's bursts first (a NIC wrote them
    // when the QP entered ERR, before this command, which waited for those bursts to be read:
    // `firmware::cmdq::waits_for`), then forgets the rest with the QP's transport state.
    dp.reset(&mut objs.qps, comp, io, qpn);
    let Some(qp) = objs.qps.get_mut(qpn) else {
        return;
    };
    qp.attrs = QpAttrs::default();
    if let Ok(mut s) = Qpc::new_checked(&mut qp.qpc[..]) {
        clear_transition_fields(&mut s);
    }
}

/// Zeroes the `qpc` fields the modify commands set (so QUERY_QP after 2RST shows none).
fn clear_transition_fields(s: &mut Qpc<&mut [u8]>) {
    let _ = s
        .set_rre(0)
        .and_then(|s| s.set_rwe(0))
        .and_then(|s| s.set_rae(0))
        .and_then(|s| s.set_q_key(0))
        .and_then(|s| s.set_mtu(0))
        .and_then(|s| s.set_log_msg_max(0))
        .and_then(|s| s.set_remote_qpn(0))
        .and_then(|s| s.set_next_rcv_psn(0))
        .and_then(|s| s.set_min_rnr_nak(0))
        .and_then(|s| s.set_log_rra_max(0))
        .and_then(|s| s.set_next_send_psn(0))
        .and_then(|s| s.set_retry_count(0))
        .and_then(|s| s.set_rnr_retry(0))
        .and_then(|s| s.set_log_sra_max(0));
    s.primary_address_path_mut().as_bytes_mut().fill(0);
    s.secondary_address_path_mut().as_bytes_mut().fill(0);
}

/// Moves QP `qpn`'s receive CQ to `cqn`, moving the users count with it.
fn move_rcv_cq(objs: &mut Objects, comp: &mut Completions, qpn: u32, cqn: u32) {
    let Some(qp) = objs.qps.get_mut(qpn) else {
        return;
    };
    let old = core::mem::replace(&mut qp.cqn_rcv, cqn);
    if let Some(cq) = comp.cqs.get_mut(old) {
        cq.users = cq.users.saturating_sub(1);
    }
    if let Some(cq) = comp.cqs.get_mut(cqn) {
        cq.users = cq.users.saturating_add(1);
    }
}

/// Computes a long transition's [`Update`] from the input `q`, or the error that refuses it.
fn plan(
    comp: &Completions,
    profile: &Profile,
    op: Opcode,
    qp: &Qp,
    q: &Qpc<&[u8]>,
    opt: OptParamMask,
) -> Result<Update, CmdError> {
    let mut a = qp.attrs.clone();
    let mut raw = qp.qpc.clone();
    raw.resize(QPC_LEN.max(raw.len()), 0);
    let mut s = Qpc::wrap_unchecked(&mut raw[..]);
    let p = profile;
    let rc = qp.st == service_type::RC;
    let connected = rc || qp.st == service_type::UC;
    match op {
        Opcode::RST2INIT_QP => rst2init(p, connected, q, &mut a, &mut s)?,
        Opcode::INIT2RTR_QP if connected => init2rtr_rc(p, q, &mut a, &mut s)?,
        Opcode::INIT2RTR_QP => init2rtr_ud(p, &mut a, &mut s)?,
        Opcode::RTR2RTS_QP => rtr2rts(p, rc, q, &mut a, &mut s)?,
        // INIT2INIT, RTS2RTS, SQERR2RTS, SQD_RTS, RTS2SQD, SQD2SQD: optional parameters only.
        _ => {}
    }
    let cqn_rcv = optional(comp, profile, opt, q, &mut a, &mut s)?;
    Ok(Update {
        attrs: a,
        qpc: raw,
        cqn_rcv,
    })
}
