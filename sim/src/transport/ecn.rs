//! ECN in the transport: the notification point's CNPs for CE-marked packets, and received
//! CNPs handed to the reaction point.
//!
//! Owns: [`notify`] (a CE-marked packet that reached a QP: count it and, at most once per
//! `min_time_between_cnps` per flow, send a CNP), [`receive_cnp`] (a CNP: to the QP's RP, or
//! ignored) and [`is_cnp`] / [`ce`] (the receive dispatch's tests). Must not: run DCQCN or
//! keep per-flow timing (`cong::rp`, `cong::np`), or treat a CNP as a transport error (a CNP
//! that names no QP, or one whose RP is off, is counted as ignored and nothing else).
//!
//! The CNP goes back on the path the marked packet came: from the address it was sent to,
//! to the address it came from, DestQP the sender's QP (RC/UC: the QP's remote QPN; UD: the
//! DETH's source QPN), at `cnp_dscp` with ECN not-ECT, UDP source port rxe's for the QPN.
//!
//! Sources: IBTA annex A17.9 (CNPs), mlx5 `cong_control_r_roce_ecn_np` and the counters of
//! `query_cong_statistics_out` (`mlx5_ifc.h`), Zhu et al. SIGCOMM 2015 (the NP and RP).

use bypass_hw::cmd::qp::service_type as st;
use bypass_hw::roce::cnp::{Cnp, CnpSpec, cnp_tos, emit_cnp};
use bypass_hw::roce::ip::{IPV4_HDR_LEN, IPV6_HDR_LEN, UDP_HDR_LEN};
use bypass_hw::roce::opcode::rxe_udp_sport;
use bypass_hw::roce::{IpSpec, ROCE_V2_UDP_DPORT, RocePacket, UdpPorts};

use super::state::DataPath;
use crate::cong::np::Flow;
use crate::cong::prio_of_tclass;
use crate::frame::Frame;
use crate::trace::TraceEvent;

/// True if the IP packet `bytes` carries a BTH of opcode CNP (checked no further).
#[inline(always)]
pub(crate) fn is_cnp(bytes: &[u8]) -> bool {
    let hl = match bytes.first().map(|b| b >> 4) {
        Some(4) => IPV4_HDR_LEN,
        Some(6) => IPV6_HDR_LEN,
        _ => return false,
    };
    bytes
        .get(hl + UDP_HDR_LEN..)
        .is_some_and(bypass_hw::roce::cnp::is_cnp)
}

/// True if the packet's IP header says Congestion Experienced.
#[inline(always)]
pub(crate) fn ce(ip: &IpSpec) -> bool {
    ip.tclass() & 3 == bypass_hw::roce::ip::ECN_CE
}

/// A received CNP (parsed, or the parse's error): checked as any packet (ICRC unless the
/// link checked it, destination address ours), then handed to the reaction point of the QP
/// it names when the RP is on for that QP's priority (`rp_cnp_handled`), else counted
/// `rp_cnp_ignored`.
pub(crate) fn receive_cnp(
    dp: &mut DataPath<'_>,
    cnp: bypass_hw::error::Result<Cnp>,
    icrc_checked: bool,
) {
    let Ok(c) = cnp else {
        dp.io.counters.rx_discards += 1;
        return;
    };
    if !icrc_checked && !c.icrc_ok {
        dp.io.counters.rx_icrc_errors += 1;
        return;
    }
    if !dp.owns_gid(&crate::frame::dst_gid(&c.ip)) {
        dp.io.counters.rx_discards += 1;
        return;
    }
    let now = dp.io.now;
    let line = dp.profile.line_rate_mbps;
    let Some(qp) = dp.objs.qps.get_mut(c.dest_qp()) else {
        dp.cong.stats.rp_cnp_ignored += 1;
        return;
    };
    let prio = usize::from(prio_of_tclass(qp.attrs.path.tclass));
    if dp.cong.status.rp[prio] {
        qp.req.rp.on_cnp(&dp.cong.rp, line, now);
        dp.cong.stats.rp_cnp_handled += 1;
        // The rate changed: the next scan must look at the QP again.
        dp.tp.quiet = None;
    } else {
        dp.cong.stats.rp_cnp_ignored += 1;
    }
}

/// The notification point for packet `pkt`, which passed the receive checks for QP `qpn`
/// (of service type `qp_st`, remote QPN `remote_qpn`): a CE mark on a priority whose NP is on
/// is counted and answered with a CNP unless the flow got one too recently. The packet
/// itself is processed as usual by the caller.
pub(crate) fn notify(
    dp: &mut DataPath<'_>,
    pkt: &RocePacket<'_>,
    qpn: u32,
    qp_st: u8,
    remote_qpn: u32,
) {
    let ip = pkt.ip();
    if !ce(ip) {
        return;
    }
    let prio = usize::from(prio_of_tclass(ip.tclass()));
    if !dp.cong.status.np[prio] {
        return;
    }
    dp.cong.stats.np_ecn_marked_roce_packets += 1;
    let peer_qpn = if qp_st == st::UD {
        match pkt.deth() {
            Some(d) => d.src_qp(),
            None => return,
        }
    } else {
        remote_qpn & 0x00ff_ffff
    };
    let (peer_gid, our_gid) = ip.gids();
    let flow = Flow {
        local_qpn: qpn,
        peer_gid,
        peer_qpn,
    };
    if !dp.tp.np.admit(&dp.cong.np, flow, dp.io.now) {
        return;
    }
    if send_cnp(dp, &our_gid, &peer_gid, qpn, peer_qpn) {
        dp.cong.stats.np_cnp_sent += 1;
    }
}

/// Builds a CNP from `our_gid` to `peer_gid` for QP `peer_qpn` and queues it on the wire.
fn send_cnp(
    dp: &mut DataPath<'_>,
    our_gid: &[u8; 16],
    peer_gid: &[u8; 16],
    local_qpn: u32,
    peer_qpn: u32,
) -> bool {
    let Ok(mut ip) = IpSpec::from_gids(our_gid, peer_gid) else {
        return false;
    };
    ip.set_tclass(cnp_tos(dp.cong.np.cnp_dscp));
    let spec = CnpSpec {
        ip,
        ports: UdpPorts {
            src: rxe_udp_sport(local_qpn),
            dst: ROCE_V2_UDP_DPORT,
        },
        dest_qp: peer_qpn,
    };
    let mut buf = vec![0u8; spec.packet_len()];
    let Ok(len) = emit_cnp(&spec, &mut buf) else {
        return false;
    };
    dp.io.counters.port_xmit_packets += 1;
    dp.io.counters.port_xmit_data += len as u64;
    let at = dp.io.now;
    dp.io.trace.record(|| TraceEvent::Packet {
        at,
        tx: true,
        bytes: buf.clone(),
    });
    dp.tp.tx.push_back(Frame::Wire(buf));
    true
}
