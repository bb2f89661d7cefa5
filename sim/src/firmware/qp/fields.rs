//! The `qpc` fields each transition takes, checked against the device, mapped into
//! [`QpAttrs`] and written into the stored context.
//!
//! Owns: the required fields of RST2INIT, INIT2RTR (RC and UD) and RTR2RTS, and every optional
//! parameter. Must not: decide whether a transition is allowed or change the QP (that is
//! [`super::modify`], which applies what these return only when all of them succeed).
//!
//! Sources: what the kernel's `__mlx5_ib_modify_qp` (`drivers/infiniband/hw/mlx5/qp.c`)
//! always fills for an edge, the IB_QP_* attributes the IBTA lists as required (RST→INIT:
//! port, P_Key index, access flags (RC) or Q_Key (UD); INIT→RTR (RC): path MTU, destination
//! QPN, RQ PSN, responder resources, min RNR timer, address vector; RTR→RTS: SQ PSN and (RC)
//! retry count, RNR retry, initiator depth, timeout), and rdma-core's DEVX test
//! (`tests/mlx5_base.py` `Mlx5DevxRcResources.to_rts`).

use bypass_hw::cmd::qp::{OptParamMask, PathMtu, Qpc};

use super::{
    SYND_GID_INDEX, SYND_LOG_MSG_MAX, SYND_MTU, SYND_MTU_ABOVE_PORT, SYND_NO_CQ_RCV,
    SYND_PKEY_INDEX, SYND_PORT, SYND_RAE_NO_ATOMIC, SYND_RRA_MAX, SYND_SRA_MAX, SYND_SRQN,
};
use crate::events::Completions;
use crate::firmware::command::CmdError;
use crate::objects::QpAttrs;
use crate::profile::Profile;

/// Checks a port number (1-based) against the device's ports (kernel `qp.c`
/// `mlx5_ib_modify_qp`: "invalid port number" unless `1..=num_ports`).
fn check_port(p: &Profile, port: u32) -> Result<u8, CmdError> {
    let n = u8::try_from(port).map_err(|_| CmdError::param(SYND_PORT))?;
    if n == 0 || usize::from(n) > p.ports.len() {
        return Err(CmdError::param(SYND_PORT));
    }
    Ok(n)
}

/// Checks a P_Key index against the P_Key table (kernel `qp.c` `mlx5_ib_modify_qp`:
/// "invalid pkey index" unless below the port's `pkey_table_len`).
fn check_pkey_index(p: &Profile, index: u32) -> Result<u16, CmdError> {
    u16::try_from(index)
        .ok()
        .filter(|&i| i < p.caps.pkey_table_size)
        .ok_or(CmdError::param(SYND_PKEY_INDEX))
}

/// Ignores a setter's result: every value written here was read from a field of the same
/// width, or checked against a capability that fits it.
fn put<T>(_r: bypass_hw::Result<T>) {}

/// RST2INIT: port, P_Key index, and the remote access rights (RC) or the Q_Key (UD).
pub(super) fn rst2init(
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
            return Err(CmdError::param(SYND_RAE_NO_ATOMIC));
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
pub(super) fn init2rtr_rc(
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
        .ok_or(CmdError::param(SYND_PORT))?;
    // `mtu` must be an IB MTU code (kernel `__mlx5_ib_modify_qp`: "invalid mtu") no larger
    // than the port's (`ib_modify_qp_is_ok` / `ib_mtu_enum_to_int` against the port's
    // active MTU).
    let mtu = u8::try_from(q.mtu())
        .ok()
        .and_then(|c| PathMtu::try_from(c).ok())
        .ok_or(CmdError::param(SYND_MTU))?;
    if mtu.bytes() > port_info.max_mtu {
        return Err(CmdError::param(SYND_MTU_ABOVE_PORT));
    }
    // The kernel writes the capability itself here (`mtu_msgmax = path_mtu << 5 |
    // log_max_msg`); more than the device can reassemble is out of range.
    let log_msg_max = u8::try_from(q.log_msg_max()).unwrap_or(u8::MAX);
    if log_msg_max > p.caps.log_max_msg {
        return Err(CmdError::lim(SYND_LOG_MSG_MAX));
    }
    // Responder resources (kernel `mlx5_ib_modify_qp`: `max_dest_rd_atomic` at most
    // `1 << log_max_ra_res_qp`).
    let log_rra_max = u8::try_from(q.log_rra_max()).unwrap_or(u8::MAX);
    if log_rra_max > p.caps.log_max_ra_res_qp {
        return Err(CmdError::lim(SYND_RRA_MAX));
    }
    // The source GID must be an entry of the port's table (IB core resolves `sgid_index`
    // through `rdma_get_gid_attr` before mlx5 ever builds the path; an empty entry has no
    // address to send from).
    let gid_index = path.src_addr_index();
    let gids = port_info.gids.len().min(usize::from(p.caps.gid_table_size));
    let src_addr_index = u8::try_from(gid_index)
        .ok()
        .filter(|&i| usize::from(i) < gids)
        .ok_or(CmdError::param(SYND_GID_INDEX))?;

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
pub(super) fn init2rtr_ud(
    p: &Profile,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<(), CmdError> {
    let port = usize::from(a.path.port)
        .checked_sub(1)
        .and_then(|i| p.ports.get(i))
        .ok_or(CmdError::param(SYND_PORT))?;
    let mtu = PathMtu::from_bytes(port.max_mtu).unwrap_or(PathMtu::Mtu256);
    a.mtu = mtu.bytes();
    put(s.set_mtu(u32::from(mtu.code())));
    Ok(())
}

/// RTR2RTS: the first PSN to send and (RC) the retry counts, initiator depth and ACK timeout.
pub(super) fn rtr2rts(
    p: &Profile,
    rc: bool,
    q: &Qpc<&[u8]>,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<(), CmdError> {
    if rc {
        // Initiator depth (kernel `mlx5_ib_modify_qp`: `max_rd_atomic` at most
        // `1 << log_max_ra_req_qp`). rdma-core's DEVX test passes MAX_RDMA_ATOMIC = 20 here; the 3-bit field cannot hold
        // it (bypass-hw's setter refuses it), so only 0..=7 ever arrive, checked against the
        // capability.
        let log_sra_max = u8::try_from(q.log_sra_max()).unwrap_or(u8::MAX);
        if log_sra_max > p.caps.log_max_ra_req_qp {
            return Err(CmdError::lim(SYND_SRA_MAX));
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
pub(super) fn optional(
    comp: &Completions,
    profile: &Profile,
    opt: OptParamMask,
    q: &Qpc<&[u8]>,
    a: &mut QpAttrs,
    s: &mut Qpc<&mut [u8]>,
) -> Result<Option<u32>, CmdError> {
    let p = &profile;
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
            return Err(CmdError::param(SYND_RAE_NO_ATOMIC));
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
        return Err(CmdError::param(SYND_SRQN));
    }
    let mut cqn_rcv = None;
    if opt.contains(OptParamMask::CQN_RCV) {
        let cqn = q.cqn_rcv();
        if !comp.cqs.contains(cqn) {
            return Err(CmdError::res(SYND_NO_CQ_RCV));
        }
        put(s.set_cqn_rcv(cqn));
        cqn_rcv = Some(cqn);
    }
    Ok(cqn_rcv)
}
