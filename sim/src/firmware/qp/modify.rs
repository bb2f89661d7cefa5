//! The modify family: RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, SQD_RTS,
//! 2ERR and 2RST.
//!
//! Owns: the QP state machine as the firmware enforces it, the required fields each
//! transition takes from its `qpc`, the optional ones it takes when their `opt_param_mask`
//! bit is set, their checks against the capabilities and ports, and the mapping into
//! [`QpAttrs`] and the stored `qpc`. Must not: touch rings (ERR flushes through
//! `Device::set_qp_state`) or the requester/responder internals (it only creates their state
//! with `ReqState::new` / `RespState::new`).
//!
//! Sources:
//! - allowed edges: `bypass_hw::cmd::qp::apply`, the kernel's `optab` in
//!   `drivers/infiniband/hw/mlx5/qp.c` `__mlx5_ib_modify_qp`; a command from another state is
//!   BAD_QP_STATE (`MLX5_CMD_STAT_BAD_QP_STATE_ERR` 0x10, `cmd_status_str` "bad QP state").
//! - required fields per transition: what `__mlx5_ib_modify_qp` always fills for that edge
//!   (IB_QP_* attributes the IBTA lists as required: RST→INIT port, P_Key index, access flags
//!   (RC) or Q_Key (UD); INIT→RTR (RC) path MTU, destination QPN, RQ PSN, responder resources,
//!   min RNR timer, address vector; RTR→RTS SQ PSN and (RC) retry count, RNR retry, initiator
//!   depth, timeout) and what rdma-core's DEVX test sets (`tests/mlx5_base.py`
//!   `Mlx5DevxRcResources.to_rts`).
//! - optional fields: [`super::optpar`].
//! - UD: the kernel fixes `mtu` to 4096 and `log_msg_max` to 12 for UD (`mtu_msgmax`), the
//!   port's own MTU being the real limit, so INIT2RTR of a UD QP checks neither.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{
    Init2InitQpIn, Init2RtrQpIn, OptParamMask, PathMtu, Qp2ErrIn, Qp2RstIn, QpState, Qpc,
    Rst2InitQpIn, Rtr2RtsQpIn, Rts2RtsQpIn, Sqd2RtsQpIn, Sqerr2RtsQpIn, apply, service_type,
};
use bypass_hw::syndrome::CmdStatus;

use super::{
    SYND_BAD_QP_STATE, SYND_GID_INDEX, SYND_INPUT_LEN, SYND_LOG_MSG_MAX, SYND_MTU,
    SYND_MTU_ABOVE_PORT, SYND_NO_CQ_RCV, SYND_NO_QP, SYND_OPT_PARAM, SYND_PKEY_INDEX, SYND_PORT,
    SYND_RAE_NO_ATOMIC, SYND_RRA_MAX, SYND_SRA_MAX, SYND_SRQN, bad_param, fail, optpar,
};
use crate::device::Device;
use crate::firmware::{CmdError, CmdResult};
use crate::objects::QpAttrs;
use crate::profile::Profile;
use crate::transport::{ReqState, RespState};

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
    let short = || fail(CmdStatus::BAD_INP_LEN_ERR, SYND_INPUT_LEN);
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
        Opcode::QP_2ERR => short!(Qp2ErrIn),
        Opcode::QP_2RST => short!(Qp2RstIn),
        // The dispatcher routes only the opcodes above here.
        _ => return Err(fail(CmdStatus::BAD_OP_ERR, 0)),
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
pub(super) fn modify_qp(
    dev: &mut Device,
    op: Opcode,
    input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    let m = parse(op, input)?;
    let qp = dev
        .objs
        .qps
        .get(m.qpn)
        .ok_or(fail(CmdStatus::BAD_RES_ERR, SYND_NO_QP))?;
    let Some(to) = apply(op, qp.state) else {
        return Err(fail(CmdStatus::BAD_QP_STATE_ERR, SYND_BAD_QP_STATE));
    };
    let allowed = optpar::allowed(op, qp.st);
    if m.opt & !allowed.bits() != 0 {
        return Err(bad_param(SYND_OPT_PARAM));
    }
    let opt = OptParamMask::from_bits_retain(m.opt);
    let qpn = m.qpn;
    match op {
        Opcode::QP_2ERR => {
            // Flushes every outstanding WQE of both queues with WR_FLUSH_ERR.
            dev.set_qp_state(qpn, QpState::Err);
        }
        Opcode::QP_2RST => to_reset(dev, qpn),
        _ => {
            let q = Qpc::wrap_unchecked(&m.qpc[..]);
            let up = plan(dev, op, qp.st, &qp.attrs, &qp.qpc, &q, opt)?;
            if let Some(new_rcv) = up.cqn_rcv {
                move_rcv_cq(dev, qpn, new_rcv);
            }
            let Some(qp) = dev.objs.qps.get_mut(qpn) else {
                return Err(fail(CmdStatus::BAD_RES_ERR, SYND_NO_QP));
            };
            qp.attrs = up.attrs;
            qp.qpc = up.qpc;
            // INIT2RTR arms the responder at the expected PSN, RTR2RTS the requester at the
            // first PSN it sends.
            match op {
                Opcode::INIT2RTR_QP => qp.resp = RespState::new(qp.attrs.rq_psn),
                Opcode::RTR2RTS_QP => qp.req = ReqState::new(qp.attrs.sq_psn),
                _ => {}
            }
            dev.set_qp_state(qpn, to);
        }
    }
    Ok(())
}

/// 2RST: back to the state CREATE_QP left it in. Nothing is flushed: outstanding WQEs are
/// simply forgotten (PRM; the kernel cleans the CQs itself, `mlx5_ib_modify_qp` →
/// `__mlx5_ib_cq_clean` on a move to RESET), counters and transport state start over, and the
/// attributes the transitions set are cleared.
fn to_reset(dev: &mut Device, qpn: u32) {
    dev.set_qp_state(qpn, QpState::Rst);
    let Some(qp) = dev.objs.qps.get_mut(qpn) else {
        return;
    };
    qp.sq_ci = 0;
    qp.rq_ci = 0;
    qp.req = ReqState::default();
    qp.resp = RespState::default();
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
fn move_rcv_cq(dev: &mut Device, qpn: u32, cqn: u32) {
    let Some(qp) = dev.objs.qps.get_mut(qpn) else {
        return;
    };
    let old = core::mem::replace(&mut qp.cqn_rcv, cqn);
    if let Some(cq) = dev.objs.cqs.get_mut(old) {
        cq.users = cq.users.saturating_sub(1);
    }
    if let Some(cq) = dev.objs.cqs.get_mut(cqn) {
        cq.users = cq.users.saturating_add(1);
    }
}

/// Computes a long transition's [`Update`] from the input `q`, or the error that refuses it.
fn plan(
    dev: &Device,
    op: Opcode,
    st: u8,
    attrs: &QpAttrs,
    stored: &[u8],
    q: &Qpc<&[u8]>,
    opt: OptParamMask,
) -> Result<Update, CmdError> {
    let mut a = attrs.clone();
    let mut raw = stored.to_vec();
    raw.resize(QPC_LEN.max(raw.len()), 0);
    let mut s = Qpc::wrap_unchecked(&mut raw[..]);
    let p = &dev.profile;
    let rc = st == service_type::RC;
    match op {
        Opcode::RST2INIT_QP => rst2init(p, rc, q, &mut a, &mut s)?,
        Opcode::INIT2RTR_QP if rc => init2rtr_rc(p, q, &mut a, &mut s)?,
        Opcode::INIT2RTR_QP => init2rtr_ud(p, &mut a, &mut s)?,
        Opcode::RTR2RTS_QP => rtr2rts(p, rc, q, &mut a, &mut s)?,
        // INIT2INIT, RTS2RTS, SQERR2RTS, SQD_RTS: optional parameters only.
        _ => {}
    }
    let cqn_rcv = optional(dev, opt, q, &mut a, &mut s)?;
    Ok(Update {
        attrs: a,
        qpc: raw,
        cqn_rcv,
    })
}

/// Checks a port number (1-based) against the device's ports.
fn check_port(p: &Profile, port: u32) -> Result<u8, CmdError> {
    let n = u8::try_from(port).map_err(|_| bad_param(SYND_PORT))?;
    if n == 0 || usize::from(n) > p.ports.len() {
        return Err(bad_param(SYND_PORT));
    }
    Ok(n)
}

/// Checks a P_Key index against the P_Key table.
fn check_pkey_index(p: &Profile, index: u32) -> Result<u16, CmdError> {
    u16::try_from(index)
        .ok()
        .filter(|&i| i < p.caps.pkey_table_size)
        .ok_or(bad_param(SYND_PKEY_INDEX))
}

/// Ignores a setter's result: every value written here was read from a field of the same
/// width, or checked against a capability that fits it.
fn put<T>(_r: bypass_hw::Result<T>) {}

/// RST2INIT: port, P_Key index, and the remote access rights (RC) or the Q_Key (UD).
fn rst2init(
    p: &Profile,
    rc: bool,
    q: &Qpc<&[u8]>,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<(), CmdError> {
    let path = q.primary_address_path();
    let port = check_port(p, path.vhca_port_num())?;
    let pkey_index = check_pkey_index(p, path.pkey_index())?;
    if rc {
        let rae = q.rae() != 0;
        if rae && !p.caps.atomic {
            return Err(bad_param(SYND_RAE_NO_ATOMIC));
        }
        a.rre = q.rre() != 0;
        a.rwe = q.rwe() != 0;
        a.rae = rae;
        put(s.set_rre(q.rre()));
        put(s.set_rwe(q.rwe()));
        put(s.set_rae(q.rae()));
    } else {
        a.q_key = q.q_key();
        put(s.set_q_key(q.q_key()));
    }
    a.path.port = port;
    a.path.pkey_index = pkey_index;
    // The kernel puts the port's counter set here on RST2INIT (`qp_counter_set_usr_page`).
    put(s.set_counter_set_id(q.counter_set_id()));
    let mut sp = s.primary_address_path_mut();
    put(sp.set_vhca_port_num(u32::from(port)));
    put(sp.set_pkey_index(u32::from(pkey_index)));
    Ok(())
}

/// INIT2RTR of an RC QP: MTU, message size, the remote QP and its PSN, responder resources,
/// the RNR timer, and the primary address path.
fn init2rtr_rc(
    p: &Profile,
    q: &Qpc<&[u8]>,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<(), CmdError> {
    let path = q.primary_address_path();
    // A port of 0 keeps the one RST2INIT set (the kernel and rdma-core both repeat it).
    let port = match path.vhca_port_num() {
        0 => a.path.port,
        n => check_port(p, n)?,
    };
    let port_info = usize::from(port)
        .checked_sub(1)
        .and_then(|i| p.ports.get(i))
        .ok_or(bad_param(SYND_PORT))?;
    // `mtu` must be an IB MTU code (kernel `__mlx5_ib_modify_qp`: "invalid mtu") no larger
    // than the port's (`ib_modify_qp_is_ok` / `ib_mtu_enum_to_int` against the port's
    // active MTU).
    let mtu = u8::try_from(q.mtu())
        .ok()
        .and_then(|c| PathMtu::try_from(c).ok())
        .ok_or(bad_param(SYND_MTU))?;
    if mtu.bytes() > port_info.max_mtu {
        return Err(bad_param(SYND_MTU_ABOVE_PORT));
    }
    let log_msg_max = u8::try_from(q.log_msg_max()).unwrap_or(u8::MAX);
    if log_msg_max > p.caps.log_max_msg {
        return Err(bad_param(SYND_LOG_MSG_MAX));
    }
    let log_rra_max = u8::try_from(q.log_rra_max()).unwrap_or(u8::MAX);
    if log_rra_max > p.caps.log_max_ra_res_qp {
        return Err(bad_param(SYND_RRA_MAX));
    }
    let gid_index = path.src_addr_index();
    let gids = port_info.gids.len().min(usize::from(p.caps.gid_table_size));
    let src_addr_index = u8::try_from(gid_index)
        .ok()
        .filter(|&i| usize::from(i) < gids)
        .ok_or(bad_param(SYND_GID_INDEX))?;

    a.mtu = mtu.bytes();
    a.log_msg_max = log_msg_max;
    a.remote_qpn = q.remote_qpn();
    a.rq_psn = q.next_rcv_psn();
    a.min_rnr_nak = u8::try_from(q.min_rnr_nak()).unwrap_or(0);
    a.log_rra_max = log_rra_max;
    a.path.port = port;
    a.path.rgid = path.rgid_rip();
    a.path.rmac = path.rmac();
    a.path.src_addr_index = src_addr_index;
    a.path.hop_limit = u8::try_from(path.hop_limit()).unwrap_or(0);
    a.path.tclass = u8::try_from(path.tclass()).unwrap_or(0);
    a.path.flow_label = path.flow_label();
    a.path.udp_sport = u16::try_from(path.udp_sport()).unwrap_or(0);

    put(s.set_mtu(q.mtu()));
    put(s.set_log_msg_max(q.log_msg_max()));
    put(s.set_remote_qpn(q.remote_qpn()));
    put(s.set_next_rcv_psn(q.next_rcv_psn()));
    put(s.set_min_rnr_nak(q.min_rnr_nak()));
    put(s.set_log_rra_max(q.log_rra_max()));
    let mut sp = s.primary_address_path_mut();
    put(sp.set_vhca_port_num(u32::from(port)));
    put(sp.set_rgid_rip(&path.rgid_rip()));
    put(sp.set_rmac(path.rmac()));
    put(sp.set_src_addr_index(path.src_addr_index()));
    put(sp.set_hop_limit(path.hop_limit()));
    put(sp.set_tclass(path.tclass()));
    put(sp.set_flow_label(path.flow_label()));
    put(sp.set_udp_sport(path.udp_sport()));
    put(sp.set_grh(path.grh()));
    put(sp.set_rlid(path.rlid()));
    put(sp.set_stat_rate(path.stat_rate()));
    put(sp.set_sl(path.sl()));
    put(sp.set_eth_prio(path.eth_prio()));
    put(sp.set_dscp(path.dscp()));
    put(sp.set_ecn(path.ecn()));
    Ok(())
}

/// INIT2RTR of a UD QP: nothing is required; the path MTU is the port's (each datagram
/// names its own destination, and the kernel fixes the `qpc.mtu` of UD QPs to 4096).
fn init2rtr_ud(p: &Profile, a: &mut QpAttrs, s: &mut Qpc<&mut [u8]>) -> Result<(), CmdError> {
    let port = usize::from(a.path.port)
        .checked_sub(1)
        .and_then(|i| p.ports.get(i))
        .ok_or(bad_param(SYND_PORT))?;
    let mtu = PathMtu::from_bytes(port.max_mtu).unwrap_or(PathMtu::Mtu256);
    a.mtu = mtu.bytes();
    put(s.set_mtu(u32::from(mtu.code())));
    Ok(())
}

/// RTR2RTS: the first PSN to send and (RC) the retry counts, initiator depth and ACK timeout.
fn rtr2rts(
    p: &Profile,
    rc: bool,
    q: &Qpc<&[u8]>,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<(), CmdError> {
    if rc {
        // rdma-core's DEVX test passes MAX_RDMA_ATOMIC = 20 here; the 3-bit field cannot hold
        // it (bypass-hw's setter refuses it), so only 0..=7 ever arrive, checked against the
        // capability.
        let log_sra_max = u8::try_from(q.log_sra_max()).unwrap_or(u8::MAX);
        if log_sra_max > p.caps.log_max_ra_req_qp {
            return Err(bad_param(SYND_SRA_MAX));
        }
        let ack_timeout = q.primary_address_path().ack_timeout();
        a.log_sra_max = log_sra_max;
        a.retry_count = u8::try_from(q.retry_count()).unwrap_or(0);
        a.rnr_retry = u8::try_from(q.rnr_retry()).unwrap_or(0);
        a.path.ack_timeout = u8::try_from(ack_timeout).unwrap_or(0);
        put(s.set_log_sra_max(q.log_sra_max()));
        put(s.set_retry_count(q.retry_count()));
        put(s.set_rnr_retry(q.rnr_retry()));
        put(s.primary_address_path_mut().set_ack_timeout(ack_timeout));
    }
    a.sq_psn = q.next_send_psn();
    put(s.set_next_send_psn(q.next_send_psn()));
    Ok(())
}

/// The optional parameters whose bits are set (the table has already refused the others).
/// Returns a new receive CQ when `CQN_RCV` names one.
fn optional(
    dev: &Device,
    opt: OptParamMask,
    q: &Qpc<&[u8]>,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<Option<u32>, CmdError> {
    let p = &dev.profile;
    if opt.contains(OptParamMask::RRE) {
        a.rre = q.rre() != 0;
        put(s.set_rre(q.rre()));
    }
    if opt.contains(OptParamMask::RWE) {
        a.rwe = q.rwe() != 0;
        put(s.set_rwe(q.rwe()));
    }
    if opt.contains(OptParamMask::RAE) {
        if q.rae() != 0 && !p.caps.atomic {
            return Err(bad_param(SYND_RAE_NO_ATOMIC));
        }
        a.rae = q.rae() != 0;
        put(s.set_rae(q.rae()));
    }
    if opt.contains(OptParamMask::PKEY_INDEX) {
        let i = check_pkey_index(p, q.primary_address_path().pkey_index())?;
        a.path.pkey_index = i;
        put(s.primary_address_path_mut().set_pkey_index(u32::from(i)));
    }
    if opt.contains(OptParamMask::PRI_PORT) {
        let port = check_port(p, q.primary_address_path().vhca_port_num())?;
        a.path.port = port;
        put(s
            .primary_address_path_mut()
            .set_vhca_port_num(u32::from(port)));
    }
    if opt.contains(OptParamMask::Q_KEY) {
        a.q_key = q.q_key();
        put(s.set_q_key(q.q_key()));
    }
    if opt.contains(OptParamMask::RNR_TIMEOUT) {
        a.min_rnr_nak = u8::try_from(q.min_rnr_nak()).unwrap_or(0);
        put(s.set_min_rnr_nak(q.min_rnr_nak()));
    }
    if opt.contains(OptParamMask::PM_STATE) {
        put(s.set_pm_state(q.pm_state()));
    }
    if opt.contains(OptParamMask::ALT_ADDR_PATH) {
        // Path migration is not modelled: the alternate path is kept (QUERY_QP shows it) but
        // never used.
        let src = q.secondary_address_path();
        let mut dst = s.secondary_address_path_mut();
        let d = dst.as_bytes_mut();
        let n = d.len().min(src.as_bytes().len());
        if let (Some(d), Some(src)) = (d.get_mut(..n), src.as_bytes().get(..n)) {
            d.copy_from_slice(src);
        }
    }
    if opt.contains(OptParamMask::COUNTER_SET_ID) {
        put(s.set_counter_set_id(q.counter_set_id()));
    }
    if opt.contains(OptParamMask::SRQN) {
        return Err(bad_param(SYND_SRQN));
    }
    let mut cqn_rcv = None;
    if opt.contains(OptParamMask::CQN_RCV) {
        let cqn = q.cqn_rcv();
        if !dev.objs.cqs.contains(cqn) {
            return Err(fail(CmdStatus::BAD_RES_ERR, SYND_NO_CQ_RCV));
        }
        put(s.set_cqn_rcv(cqn));
        cqn_rcv = Some(cqn);
    }
    Ok(cqn_rcv)
}
