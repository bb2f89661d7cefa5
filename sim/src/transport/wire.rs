//! The one way the device puts a request or response packet on the wire: the IP and UDP
//! headers of a route (as rxe builds them from the QP's path), then the packet.
//!
//! Owns: [`Route`], [`headers`] (with the device's one-entry cache of the last route),
//! [`qp_headers`] (kept in the QP after its first use) and [`send`]. Must not: decide what to
//! send (requester, responder), or carry bursts and ACKs by reference (`crate::frame`).
//!
//! ECN: while the reaction point is on for a packet's priority (`Cong::status.rp`, the
//! priority from the traffic class, `cong::prio_of_tclass`), its IP ECN bits are ECT(0), as
//! mlx5 sends RoCEv2 traffic of an ECN-enabled priority; otherwise they are the traffic
//! class's own. Both caches key on that choice ([`ect_for`]), so a status change takes effect
//! on the next packet.
//!
//! Sources: rxe `rxe_net.c` `prepare_ipv4_hdr` / `prepare_ipv6_hdr`, `rxe_udp_sport` (the
//! UDP source port from the QPN when the path gives none), IBTA Annex A17 (RoCEv2), RFC 3168
//! (the ECN codepoints).

use bypass_hw::roce::ip::ECN_ECT0;
use bypass_hw::roce::opcode::rxe_udp_sport;
use bypass_hw::roce::{
    BthFields, ExtFields, IpSpec, PacketSpec, ROCE_V2_UDP_DPORT, UdpPorts, emit,
};

use super::state::Transport;
use crate::cong::{CongStatus, prio_of_tclass};
use crate::frame::Frame;
use crate::io::Io;
use crate::objects::AddressPath;
use crate::profile::Profile;
use crate::trace::TraceEvent;

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
pub(crate) fn headers(
    tp: &mut Transport,
    profile: &Profile,
    status: &CongStatus,
    route: Route<'_>,
) -> Option<(IpSpec, UdpPorts)> {
    let ect = ect_for(status, route.path.tclass);
    // One entry per device: a QP sends on the same path packet after packet (the profile's
    // GID table never changes, so the route and the ECN choice decide the headers).
    if let Some(h) = &tp.headers_cache
        && h.port == route.port
        && h.src_qpn == route.src_qpn
        && h.ect == ect
        && h.path == *route.path
    {
        return Some((h.ip, h.ports));
    }
    let made = build_headers(profile, route, ect)?;
    tp.headers_cache = Some(HeadersCache {
        port: route.port,
        src_qpn: route.src_qpn,
        ect,
        path: route.path.clone(),
        ip: made.0,
        ports: made.1,
    });
    Some(made)
}

/// Whether packets with traffic class `tclass` go out ECT(0): the RP is on for its priority.
#[inline(always)]
pub(crate) fn ect_for(status: &CongStatus, tclass: u8) -> bool {
    status.rp[usize::from(prio_of_tclass(tclass))]
}

/// Whether headers `h`, built for traffic class `tclass`, still carry the ECN bits the
/// status asks for (kept headers are rebuilt when not).
#[inline(always)]
pub(crate) fn ecn_current(h: &(IpSpec, UdpPorts), status: &CongStatus, tclass: u8) -> bool {
    let want = if ect_for(status, tclass) {
        ECN_ECT0
    } else {
        tclass & 3
    };
    h.0.tclass() & 3 == want
}

/// The headers of a QP's primary path: what [`headers`] gives for `route`, which must be that
/// path (`port` its port, `src_qpn` the QP), kept in `kept` (the QP's) after the first use.
pub(crate) fn qp_headers(
    kept: &mut Option<(IpSpec, UdpPorts)>,
    tp: &mut Transport,
    profile: &Profile,
    status: &CongStatus,
    route: Route<'_>,
) -> Option<(IpSpec, UdpPorts)> {
    if let Some(h) = *kept
        && ecn_current(&h, status, route.path.tclass)
    {
        return Some(h);
    }
    let h = headers(tp, profile, status, route)?;
    *kept = Some(h);
    Some(h)
}

/// The last route [`headers`] built headers for, and the headers.
#[derive(Debug, Clone)]
pub(crate) struct HeadersCache {
    port: u8,
    src_qpn: u32,
    ect: bool,
    path: AddressPath,
    ip: IpSpec,
    ports: UdpPorts,
}

fn build_headers(profile: &Profile, route: Route<'_>, ect: bool) -> Option<(IpSpec, UdpPorts)> {
    let sgid = profile
        .ports
        .get(usize::from(route.port.max(1)) - 1)
        .and_then(|p| p.gids.get(usize::from(route.path.src_addr_index)))
        .copied()?;
    let mut ip = IpSpec::from_gids(&sgid, &route.path.rgid).ok()?;
    let tclass = if ect {
        (route.path.tclass & !3) | ECN_ECT0
    } else {
        route.path.tclass
    };
    let hop_limit = if route.path.hop_limit == 0 {
        64
    } else {
        route.path.hop_limit
    };
    match &mut ip {
        IpSpec::V4(v) => {
            v.ttl = hop_limit;
            v.tos = tclass;
        }
        IpSpec::V6(v) => {
            v.hop_limit = hop_limit;
            v.traffic_class = tclass;
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

/// Builds a RoCEv2 packet for `route` and queues it on the wire; returns its length. `None`
/// (counting a discard) if the route names a GID the port does not have or mixes IPv4 and
/// IPv6.
// The parts a packet needs are each its own borrow (no bundle of the device).
#[allow(clippy::too_many_arguments)]
pub(crate) fn send(
    tp: &mut Transport,
    profile: &Profile,
    status: &CongStatus,
    io: &mut Io<'_>,
    route: Route<'_>,
    bth: BthFields,
    ext: ExtFields,
    payload: &[u8],
) -> Option<usize> {
    let Some((ip, ports)) = headers(tp, profile, status, route) else {
        io.counters.rx_discards += 1;
        return None;
    };
    let spec = PacketSpec {
        ip,
        ports,
        bth,
        ext,
        payload,
    };
    let len = spec.packet_len().ok()?;
    let mut buf = vec![0u8; len];
    emit(&spec, &mut buf).ok()?;
    io.counters.port_xmit_packets += 1;
    io.counters.port_xmit_data += len as u64;
    let at = io.now;
    io.trace.record(|| TraceEvent::Packet {
        at,
        tx: true,
        bytes: buf.clone(),
    });
    tp.tx.push_back(Frame::Wire(buf));
    Some(len)
}
