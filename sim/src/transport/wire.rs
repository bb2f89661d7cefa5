//! The one way the device puts a request or response packet on the wire: the IP and UDP
//! headers of a route (as rxe builds them from the QP's path), then the packet.
//!
//! Owns: [`Route`], [`headers`] (with the device's one-entry cache of the last route),
//! [`qp_headers`] (kept in the QP after its first use) and [`send`]. Must not: decide what to
//! send (requester, responder), or carry bursts and ACKs by reference (`crate::frame`).
//!
//! Sources: rxe `rxe_net.c` `prepare_ipv4_hdr` / `prepare_ipv6_hdr`, `rxe_udp_sport` (the
//! UDP source port from the QPN when the path gives none), IBTA Annex A17 (RoCEv2).

use bypass_hw::roce::opcode::rxe_udp_sport;
use bypass_hw::roce::{
    BthFields, ExtFields, IpSpec, PacketSpec, ROCE_V2_UDP_DPORT, UdpPorts, emit,
};

use super::state::Transport;
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
    route: Route<'_>,
) -> Option<(IpSpec, UdpPorts)> {
    // One entry per device: a QP sends on the same path packet after packet (the profile's
    // GID table never changes, so the route alone decides the headers).
    if let Some(h) = &tp.headers_cache
        && h.port == route.port
        && h.src_qpn == route.src_qpn
        && h.path == *route.path
    {
        return Some((h.ip, h.ports));
    }
    let made = build_headers(profile, route)?;
    tp.headers_cache = Some(HeadersCache {
        port: route.port,
        src_qpn: route.src_qpn,
        path: route.path.clone(),
        ip: made.0,
        ports: made.1,
    });
    Some(made)
}

/// The headers of a QP's primary path: what [`headers`] gives for `route`, which must be that
/// path (`port` its port, `src_qpn` the QP), kept in `kept` (the QP's) after the first use.
pub(crate) fn qp_headers(
    kept: &mut Option<(IpSpec, UdpPorts)>,
    tp: &mut Transport,
    profile: &Profile,
    route: Route<'_>,
) -> Option<(IpSpec, UdpPorts)> {
    if let Some(h) = *kept {
        return Some(h);
    }
    let h = headers(tp, profile, route)?;
    *kept = Some(h);
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

fn build_headers(profile: &Profile, route: Route<'_>) -> Option<(IpSpec, UdpPorts)> {
    let sgid = profile
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
    tp: &mut Transport,
    profile: &Profile,
    io: &mut Io<'_>,
    route: Route<'_>,
    bth: BthFields,
    ext: ExtFields,
    payload: &[u8],
) -> bool {
    let Some((ip, ports)) = headers(tp, profile, route) else {
        io.counters.rx_discards += 1;
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
    io.counters.port_xmit_packets += 1;
    io.counters.port_xmit_data += len as u64;
    let at = io.now;
    io.trace.record(|| TraceEvent::Packet {
        at,
        tx: true,
        bytes: buf.clone(),
    });
    tp.tx.push_back(Frame::Wire(buf));
    true
}
