//! The RoCEv2 transport: what the device does with packets.
//!
//! Owns: receive dispatch (parse, ICRC, address and QP checks, then requests to the
//! [`responder`] and responses to the [`completer`]), and [`send`], the one way the device
//! puts a packet on the wire (IP/UDP headers from the QP's path, as rxe builds them). The
//! [`requester`] turns send WQEs into request packets and keeps the retransmit and RNR
//! timers. Must not: touch rings directly (completions go through `Device::post_cqe`).
//!
//! Receive checks follow rxe (`rxe_recv.c` `rxe_rcv`, `check_type_state`, `check_addr`):
//! bad ICRC → dropped and counted; a destination address that is not one of our GIDs, an
//! unknown QPN, an opcode of another transport than the QP's, or a QP not yet in RTR →
//! dropped and counted as a discard.

pub mod completer;
pub mod requester;
pub mod responder;
pub(crate) mod state;

use bypass_hw::cmd::qp::{QpState, service_type as st};
use bypass_hw::roce::opcode::{Direction, Transport, rxe_udp_sport};
use bypass_hw::roce::{
    BthFields, ExtFields, IpSpec, PacketSpec, ROCE_V2_UDP_DPORT, RocePacket, UdpPorts, emit,
};

pub use requester::ReqState;
pub use responder::RespState;

use crate::device::Device;
use crate::frame::{AckFrame, Burst, Frame};
use crate::objects::AddressPath;
use crate::trace::TraceEvent;

/// Moves QP `qpn` to `to`, tracing the change; entering ERR flushes both its queues
/// (every outstanding WQE completes with WR_FLUSH_ERR), as the PRM requires.
pub(crate) fn set_qp_state(dev: &mut Device, qpn: u32, to: QpState) {
    let Some(qp) = dev.objs.qps.get_mut(qpn) else {
        return;
    };
    let from = qp.state;
    qp.state = to;
    if from != to {
        let at = dev.now;
        dev.trace.record(|| TraceEvent::QpState {
            at,
            qpn,
            from: from as u8,
            to: to as u8,
        });
    }
    if to == QpState::Err {
        crate::engine::flush_sq(dev, qpn);
        responder::flush_rq(dev, qpn);
    }
}

/// Processes one packet from the wire (IP header through ICRC). `icrc_checked`: the link
/// already checked the ICRC and found it right (`Device::receive_icrc_checked`), so it is not
/// computed again.
pub(crate) fn receive(dev: &mut Device, bytes: &[u8], icrc_checked: bool) {
    count_and_trace(dev, bytes);
    let Ok(pkt) = RocePacket::parse(bytes) else {
        dev.counters.rx_discards += 1;
        return;
    };
    receive_packet(dev, &pkt, icrc_checked);
}

/// As [`receive`], for a packet whose IP and UDP headers (its first `ip.header_len()` + 8
/// bytes) a UDP link wrote itself from what its socket reported, `ip` and `ports`: they are taken as
/// given, not parsed again, and the IPv4 header checksum is not verified (the kernel checked
/// the one on the wire; the link's own is right by construction). The rest of the packet is
/// parsed and checked as [`receive`] does (`RocePacket::parse_udp_payload`).
pub(crate) fn receive_udp(
    dev: &mut Device,
    bytes: &[u8],
    ip: &IpSpec,
    ports: UdpPorts,
    icrc_checked: bool,
) {
    count_and_trace(dev, bytes);
    let Some(Ok(pkt)) = bytes
        .get(ip.header_len() + bypass_hw::roce::ip::UDP_HDR_LEN..)
        .map(|p| RocePacket::parse_udp_payload(*ip, ports, p))
    else {
        dev.counters.rx_discards += 1;
        return;
    };
    receive_packet(dev, &pkt, icrc_checked);
}

/// Counts a received packet and records it in the trace.
#[inline]
fn count_and_trace(dev: &mut Device, bytes: &[u8]) {
    dev.counters.port_rcv_packets += 1;
    dev.counters.port_rcv_data += bytes.len() as u64;
    let at = dev.now;
    dev.trace.record(|| TraceEvent::Packet {
        at,
        tx: false,
        bytes: bytes.to_vec(),
    });
}

/// The checks and dispatch of [`receive`] after the parse.
fn receive_packet(dev: &mut Device, pkt: &RocePacket<'_>, icrc_checked: bool) {
    if !icrc_checked && !pkt.icrc_ok() {
        dev.counters.rx_icrc_errors += 1;
        return;
    }
    if !dev.owns_gid(&crate::frame::dst_gid(pkt.ip())) {
        dev.counters.rx_discards += 1;
        return;
    }
    let qpn = pkt.bth().dest_qp();
    let Some(qp) = dev.objs.qps.get(qpn) else {
        dev.counters.rx_discards += 1;
        return;
    };
    let type_ok = match pkt.opcode().transport() {
        Transport::Rc => qp.st == st::RC,
        Transport::Ud => qp.st == st::UD,
        _ => false,
    };
    // Packets reach a QP from RTR on (rxe `check_type_state`); in ERR they are dropped.
    let state_ok = matches!(
        qp.state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::SqDraining | QpState::Sqer
    );
    if !type_ok || !state_ok {
        dev.counters.rx_discards += 1;
        return;
    }
    match pkt.info().direction {
        Direction::Request => responder::handle_request(dev, qpn, pkt),
        Direction::Response => completer::handle_response(dev, qpn, pkt),
    }
}

/// Processes a burst from an in-process link: applied at once when it is the plain case
/// (the responder's checks all pass for every packet, see `responder::burst`), else segmented
/// and processed packet by packet, so every outcome is the per-packet path's.
pub(crate) fn receive_burst(dev: &mut Device, b: &Burst) {
    if !dev.trace.enabled() && burst_reaches_qp(dev, b) && responder::burst::apply(dev, b) {
        return;
    }
    for pkt in b.segment() {
        receive(dev, &pkt, false);
    }
}

/// Processes an ACKNOWLEDGE from an in-process link as `receive` processes its bytes (which
/// always parse and pass the ICRC check): counted, the address and QP checked, handed to the
/// completer. With a trace to record, it goes through `receive` as bytes.
pub(crate) fn receive_ack(dev: &mut Device, a: &AckFrame) {
    if dev.trace.enabled() {
        if let Some(bytes) = a.to_wire() {
            receive(dev, &bytes, false);
        }
        return;
    }
    dev.counters.port_rcv_packets += 1;
    dev.counters.port_rcv_data += a.wire_len;
    if !reaches_rc_qp(dev, &a.ip, a.dest_qp) {
        dev.counters.rx_discards += 1;
        return;
    }
    completer::handle_ack(dev, a.dest_qp, a.psn, &a.aeth);
}

/// The checks `receive` makes before the responder, for a burst: ours, an RC QP in a state
/// that takes packets.
fn burst_reaches_qp(dev: &mut Device, b: &Burst) -> bool {
    reaches_rc_qp(dev, &b.ip, b.dest_qp)
}

/// True if the destination address is ours and `qpn` is an RC QP in a state that takes
/// packets (the checks of `receive`, rxe `check_addr`/`check_type_state`).
fn reaches_rc_qp(dev: &mut Device, ip: &IpSpec, qpn: u32) -> bool {
    if !dev.owns_gid(&crate::frame::dst_gid(ip)) {
        return false;
    }
    dev.objs.qps.get(qpn).is_some_and(|qp| {
        qp.st == st::RC
            && matches!(
                qp.state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::SqDraining | QpState::Sqer
            )
    })
}

/// Where a packet goes: the local GID index and port, and the remote end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route<'a> {
    /// Local port (1-based).
    pub port: u8,
    /// The path (remote GID, hop limit, traffic class, flow label, UDP source port).
    pub path: &'a AddressPath,
    /// The sending QP's number (for rxe's UDP source port rule when the path has none).
    pub src_qpn: u32,
}

/// The IP header and UDP ports of a packet on `route`, or `None` if the route names a GID the
/// port does not have or mixes IPv4 and IPv6 (rxe `prepare_ipv4_hdr`/`prepare_ipv6_hdr`,
/// `rxe_udp_sport`).
pub(crate) fn headers(dev: &mut Device, route: Route<'_>) -> Option<(IpSpec, UdpPorts)> {
    // One entry per device: a QP sends on the same path packet after packet (the profile's
    // GID table never changes, so the route alone decides the headers).
    if let Some(h) = &dev.tp.headers_cache {
        if h.port == route.port && h.src_qpn == route.src_qpn && h.path == *route.path {
            return Some((h.ip, h.ports));
        }
    }
    let made = build_headers(dev, route)?;
    dev.tp.headers_cache = Some(HeadersCache {
        port: route.port,
        src_qpn: route.src_qpn,
        path: route.path.clone(),
        ip: made.0,
        ports: made.1,
    });
    Some(made)
}

/// The headers of QP `qpn`'s primary path: what [`headers`] gives for `route`, which must be
/// that path (`port` its port, `src_qpn` the QP), kept in the QP after the first use.
pub(crate) fn qp_headers(
    dev: &mut Device,
    qpn: u32,
    route: Route<'_>,
) -> Option<(IpSpec, UdpPorts)> {
    if let Some(h) = dev.objs.qps.get(qpn).and_then(|qp| qp.headers) {
        return Some(h);
    }
    let h = headers(dev, route)?;
    if let Some(qp) = dev.objs.qps.get_mut(qpn) {
        qp.headers = Some(h);
    }
    Some(h)
}

/// The last route [`headers`] built headers for, and the headers.
#[derive(Debug, Clone)]
pub(crate) struct HeadersCache {
    port: u8,
    src_qpn: u32,
    path: AddressPath,
    ip: IpSpec,
    ports: UdpPorts,
}

fn build_headers(dev: &Device, route: Route<'_>) -> Option<(IpSpec, UdpPorts)> {
    let sgid = dev
        .profile
        .ports
        .get(usize::from(route.port.max(1)) - 1)
        .and_then(|p| p.gids.get(usize::from(route.path.src_addr_index)))
        .copied()?;
    let mut ip = IpSpec::from_gids(&sgid, &route.path.rgid).ok()?;
    let hop_limit = if route.path.hop_limit == 0 {
        64
    } else {
        route.path.hop_limit
    };
    match &mut ip {
        IpSpec::V4(v) => {
            v.ttl = hop_limit;
            v.tos = route.path.tclass;
        }
        IpSpec::V6(v) => {
            v.hop_limit = hop_limit;
            v.traffic_class = route.path.tclass;
            v.flow_label = route.path.flow_label & 0xf_ffff;
        }
    }
    let src = if route.path.udp_sport != 0 {
        route.path.udp_sport
    } else {
        rxe_udp_sport(route.src_qpn)
    };
    Some((
        ip,
        UdpPorts {
            src,
            dst: ROCE_V2_UDP_DPORT,
        },
    ))
}

/// Builds a RoCEv2 packet for `route` and queues it on the wire. Returns false (counting a
/// discard) if the route names a GID the port does not have or mixes IPv4 and IPv6.
pub(crate) fn send(
    dev: &mut Device,
    route: Route<'_>,
    bth: BthFields,
    ext: ExtFields,
    payload: &[u8],
) -> bool {
    let Some((ip, ports)) = headers(dev, route) else {
        dev.counters.rx_discards += 1;
        return false;
    };
    let spec = PacketSpec {
        ip,
        ports,
        bth,
        ext,
        payload,
    };
    let Ok(len) = spec.packet_len() else {
        return false;
    };
    let mut buf = vec![0u8; len];
    if emit(&spec, &mut buf).is_err() {
        return false;
    }
    dev.counters.port_xmit_packets += 1;
    dev.counters.port_xmit_data += len as u64;
    let at = dev.now;
    dev.trace.record(|| TraceEvent::Packet {
        at,
        tx: true,
        bytes: buf.clone(),
    });
    dev.tp.tx.push_back(Frame::Wire(buf));
    true
}

/// The periodic scan of a device step: runs every transport timer that has expired by device
/// time, lets QPs whose sending was held back (window full, waiting for a fence, freshly rung)
/// continue, and flushes receives posted to QPs in ERR. True if any timer ran, packet went out
/// or completion was written.
///
/// One pass over the QPs first says which of the three can have work; those that cannot are
/// skipped (each is a no-op when its QPs do not qualify: `requester::run_timers` acts only on
/// expired timers, `requester::resume` only on RTS QPs with work, `responder::resume` only on
/// QPs in ERR — and the requester's two are the only ones here that can move a QP to ERR, so
/// the responder's runs after them whenever they ran).
///
/// The pass is inlined into the step and the work kept out of line: the usual scan finds
/// nothing to do and should cost only the pass.
#[inline]
pub(crate) fn scan(dev: &mut Device) -> bool {
    // Error CQEs and SQ flushes that waited for bursts in flight (`engine::ledger`), before
    // anything else.
    let flushed = dev.tp.ledger.flushes_waiting() && crate::engine::ledger::retry(dev);
    let now = dev.now;
    let (mut timers, mut resumable, mut in_err) = (false, false, false);
    for (_, qp) in dev.objs.qps.iter() {
        timers |= requester::timer_due(qp, now);
        resumable |= requester::has_work(qp);
        in_err |= qp.state == QpState::Err;
    }
    if !(timers || resumable || in_err) {
        return flushed;
    }
    scan_work(dev, timers, resumable, in_err) | flushed
}

/// The work [`scan`] found may be due: timers, held-back sending, receives to flush.
#[inline(never)]
fn scan_work(dev: &mut Device, timers: bool, resumable: bool, in_err: bool) -> bool {
    let mut any = false;
    if timers {
        any |= requester::run_timers(dev);
    }
    if timers || resumable {
        any |= requester::resume(dev);
    }
    if timers || resumable || in_err {
        any |= responder::resume(dev);
    }
    any
}

/// The earliest pending timer; now, if a deferred SQ flush can be written
/// (`engine::ledger::Ledger::flush_ready`).
pub(crate) fn next_deadline(dev: &Device) -> Option<u64> {
    let timer = requester::next_deadline(dev);
    if dev.tp.ledger.flushes_waiting() && dev.tp.ledger.flush_ready() {
        return Some(timer.map_or(dev.now, |t| t.min(dev.now)));
    }
    timer
}
