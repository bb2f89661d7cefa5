//! The IPv4-ID and ICRC arithmetic of the UDP link: where a packet goes and how it is laid
//! out, re-stamping a sent packet for the ID its socket gives it, and rebuilding a received
//! packet's header with the ID its ICRC shows.
//!
//! Owns: [`WireOf`]/[`wire_of`] and its memo [`WireMemo`], [`restamp_known`] and
//! [`restamp_gather`] (`icrc(id) = icrc(0) ^ delta(id)`, an XOR: `link::ipv4_id`,
//! `link::train_ids`), [`rx_fields`], [`write_header`] and [`check_icrc`] (a received
//! packet's header, one ICRC pass, the ID matched by guess, by train index or by the solver). Must not: touch
//! sockets, or parse or build RoCE headers other than through `bypass_hw::roce`.
//!
//! Sources: rxe's ICRC (`rxe_icrc.c` `rxe_icrc_hdr`: TTL, TOS, checksums and flow label masked,
//! the IPv4 ID not); IDs as the kernel stamps them (`include/net/ip.h` `ip_select_ident_segs`,
//! `net/ipv4/af_inet.c` `inet_gso_segment`).

use std::net::{IpAddr, SocketAddr};

use bypass_hw::roce::icrc::IcrcHeaderState;
use bypass_hw::roce::ip::{DEFAULT_TTL, MAX_IP_UDP_HDR_LEN};
use bypass_hw::roce::{
    ICRC_LEN, IpSpec, Ipv4Spec, Ipv6Spec, ROCE_V2_UDP_DPORT, RocePacket, UdpPorts,
};

use super::counters::LinkCounters;
use super::gather::GatherPkt;
use super::ipv4_id::Ipv4IdSolver;
use super::sendmsg::GSO_MAX_SEGS;
use super::train_ids::TrainDeltas;
use crate::header_cache::HeaderCache;

/// Where a packet goes on the wire and how it is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WireOf {
    /// Its IP header's fields.
    pub(super) ip: IpSpec,
    /// Its UDP ports.
    pub(super) ports: UdpPorts,
    pub(super) dst: IpAddr,
    pub(super) sport: u16,
    /// Bytes of IP + UDP header before the UDP payload.
    pub(super) header_len: usize,
    /// Bytes of UDP payload (BTH … ICRC).
    pub(super) payload_len: usize,
}

/// The destination, source port and layout of a device's packet, if it is RoCEv2 over IP.
pub(super) fn wire_of(packet: &[u8]) -> Option<WireOf> {
    let (ip, ports, payload_len) = match RocePacket::parse(packet) {
        Ok(p) => (*p.ip(), p.ports(), p.udp_payload().len()),
        // A CNP is outside the opcode table `RocePacket` parses.
        Err(_) => {
            let c = bypass_hw::roce::Cnp::parse(packet).ok()?;
            (c.ip, c.ports, bypass_hw::roce::cnp::CNP_UDP_PAYLOAD_LEN)
        }
    };
    Some(WireOf {
        ip,
        ports,
        dst: ip.dst_addr(),
        sport: ports.src,
        header_len: packet.len().checked_sub(payload_len)?,
        payload_len,
    })
}

/// The longest IP + UDP header: IPv6's.
pub(super) const MEMO_HEADER: usize = MAX_IP_UDP_HDR_LEN;

/// The packets of one kind a device sends (a flow's ACKs, its small WRITEs) have the same
/// IP and UDP headers, byte for byte (the IPv4 ID is 0, the PSN is past them): what
/// [`wire_of`] found for the last two kinds, by their headers and packet length.
#[derive(Debug, Default)]
pub(super) struct WireMemo {
    pub(super) slots: [Option<(usize, [u8; MEMO_HEADER], WireOf)>; 2],
    /// The slot the next new kind replaces.
    pub(super) next: usize,
}

impl WireMemo {
    /// [`wire_of`] for `packet`, or what it found for a packet of the same length whose IP and
    /// UDP headers are the same bytes (everything `WireOf` holds is read from those, and the
    /// split between headers and payload from them and the length). The send reads no more
    /// of a packet than that; the devices build their transport headers whole (a packet
    /// would be refused by its receiver otherwise, and counted there).
    pub(super) fn wire_of(&mut self, packet: &[u8]) -> Option<WireOf> {
        for (len, head, w) in self.slots.iter().flatten() {
            if *len == packet.len() && same_header(head, packet, w.header_len) {
                return Some(*w);
            }
        }
        let w = wire_of(packet)?;
        let mut head = [0u8; MEMO_HEADER];
        if let (Some(dst), Some(src)) = (head.get_mut(..w.header_len), packet.get(..w.header_len)) {
            dst.copy_from_slice(src);
            if let Some(slot) = self.slots.get_mut(self.next) {
                *slot = Some((packet.len(), head, w));
                self.next = (self.next + 1) % 2;
            }
        }
        Some(w)
    }
}

/// Whether the first `n` bytes of `packet` are the IP + UDP header `head` holds
/// (`ip::same_ip_udp`: word compares, no `memcmp` per packet sent).
#[inline]
pub(super) fn same_header(head: &[u8; MEMO_HEADER], packet: &[u8], n: usize) -> bool {
    head.get(..n)
        .zip(packet.get(..n))
        .is_some_and(|(h, p)| bypass_hw::roce::ip::same_ip_udp(h, p))
}

/// [`restamp_known`] for a gather packet going where `w` says: the ICRC in its tail changed
/// by `delta` (no pass over the payload) to that of IPv4 ID `id`, which it records (the pcap
/// writes its IP header from it).
pub(super) fn restamp_gather(
    g: &mut GatherPkt,
    w: &WireOf,
    id: u16,
    delta: &mut impl FnMut(usize, u16) -> Option<u32>,
) -> Option<()> {
    let IpSpec::V4(_) = w.ip else {
        return Some(());
    };
    let delta = delta(g.udp_len(), id ^ g.ip_id)?;
    g.ip_id = id;
    let slot = g.icrc_mut()?;
    let icrc = bypass_hw::roce::icrc::wire_value(slot)? ^ delta;
    slot.copy_from_slice(&icrc.to_le_bytes());
    Some(())
}

/// Gives an IPv4 packet built with IP ID 0, which [`wire_of`] parsed into `w`, the IP ID `id`
/// (header checksum too) and the ICRC that goes with it (`icrc(0) ^ delta(id)`, see
/// [`Ipv4IdSolver`], `delta` here); IPv6 packets (no ID) are left as they are. The IP header
/// is rewritten only when `header` (a segmented send's headers are the kernel's: only the
/// pcap reads the packet's). `None` if it cannot be done (a length the solver has no table
/// for, a packet shorter than its headers).
pub(super) fn restamp_known(
    packet: &mut [u8],
    w: &WireOf,
    id: u16,
    header: bool,
    delta: &mut impl FnMut(usize, u16) -> Option<u32>,
) -> Option<()> {
    let IpSpec::V4(v4) = w.ip else {
        return Some(());
    };
    let (ports, n) = (w.ports, w.payload_len);
    let delta = delta(n, id ^ v4.id)?;
    if header {
        IpSpec::V4(Ipv4Spec { id, ..v4 })
            .write_ip_udp(ports, n, packet)
            .ok()?;
    }
    let tail = packet.len().checked_sub(4)?;
    let icrc = bypass_hw::roce::icrc::wire_value(packet.get(tail..)?)? ^ delta;
    packet.get_mut(tail..)?.copy_from_slice(&icrc.to_le_bytes());
    Some(())
}

/// The IP header fields and UDP ports of a datagram from `from` to `local`, rebuilt from what
/// the socket saw: the sender's address and port, the bound address, DF, IPv4 ID 0 (the ID
/// the ICRC shows replaces it, [`check_icrc`]), and destination port 4791 (what the sender
/// hashed, even when the link listens elsewhere for tests on one host). TTL, TOS and the
/// checksums are masked out of the ICRC, so their rebuilt values do not matter. `None` when
/// the two addresses are of different families.
pub(super) fn rx_fields(local: SocketAddr, from: SocketAddr) -> Option<(IpSpec, UdpPorts)> {
    let ip = match (from.ip(), local.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpSpec::V4(Ipv4Spec {
            src: src.octets(),
            dst: dst.octets(),
            tos: 0,
            ttl: DEFAULT_TTL,
            id: 0,
            dont_fragment: true,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpSpec::V6(Ipv6Spec {
            src: src.octets(),
            dst: dst.octets(),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: DEFAULT_TTL,
        }),
        _ => return None,
    };
    let ports = UdpPorts {
        src: from.port(),
        dst: ROCE_V2_UDP_DPORT,
    };
    Some((ip, ports))
}

/// The ICRC of the packet whose IP + UDP header has the CRC state `crc` and whose UDP payload
/// is `payload` (one CRC pass over the payload; the payload is left as it was), or `None` when
/// the payload cannot hold a BTH and an ICRC.
pub(super) fn icrc_of(crc: &IcrcHeaderState, payload: &mut [u8]) -> Option<u32> {
    let body_end = payload.len().checked_sub(ICRC_LEN)?;
    crc.icrc_in_place(payload.get_mut(..body_end)?).ok()
}

/// Writes the IP + UDP header of a received UDP payload of `n` bytes into `hdr` (exactly its
/// length) from `ip` and `ports`, with IPv4 ID 0 (set in `ip`): the one header build of a
/// received packet (the device then takes the header as given,
/// `Device::receive_udp_in_place`), from `hdrs` (a copy and a kept CRC state when these
/// fields and this length came lately, whatever the packet's place in a train). Returns the
/// ICRC's CRC state after the header, for [`check_icrc`]; `None` when no header can be
/// written (a datagram over 64 KiB).
pub(super) fn write_header<'h>(
    hdrs: &'h mut HeaderCache,
    ip: &mut IpSpec,
    ports: UdpPorts,
    hdr: &mut [u8],
    n: usize,
) -> Option<&'h IcrcHeaderState> {
    if let IpSpec::V4(v4) = ip {
        v4.id = 0;
    }
    hdrs.write(ip, ports, n, hdr)
}

/// Checks the ICRC of the received packet whose header [`write_header`] wrote into `hdr`
/// from `ip` (CRC state `crc`) in front of `payload`: the one ICRC pass of a received packet,
/// `c0`, over the header with ID 0. IPv4: the ID is 0 if `c0` matches; else `guess` (a
/// connected bypass peer's next ID, `link::connected`) if `c0 ^ delta(guess)` does, or
/// `hint` (segment `hint` of an unconnected bypass peer's train), `delta` from `trains`, the
/// table the send side stamps train segments with; else the ID [`Ipv4IdSolver`] finds by XOR
/// (rxe's random IDs, a connected peer's first; one up to 64 behind `guess`, a connected
/// peer's send after a train read one datagram at a time, is not counted as recovered). The
/// header's ID and checksum are then set to the ID found (`ip::set_ipv4_id`), which is left
/// in `ip`. True when the ICRC matches the header as written; false (an ICRC no ID explains,
/// or a payload too short to carry one) leaves the check to the device, IPv4 with ID 0, which
/// counts the error as it should. `None` only when the header cannot be re-stamped.
#[allow(clippy::too_many_arguments)] // the receive path's state, borrowed field by field
pub(super) fn check_icrc(
    counters: &LinkCounters,
    solver: &mut Ipv4IdSolver,
    trains: &mut TrainDeltas,
    crc: &IcrcHeaderState,
    ip: &mut IpSpec,
    hdr: &mut [u8],
    payload: &mut [u8],
    (hint, guess): (u16, Option<u16>),
) -> Option<bool> {
    let n = payload.len();
    let (Some(want), Some(c0)) = (
        bypass_hw::roce::icrc::wire_value(payload),
        icrc_of(crc, payload),
    ) else {
        return Some(false);
    };
    if c0 == want {
        return Some(true);
    }
    let IpSpec::V4(_) = ip else {
        return Some(false);
    };
    // With ID `id` the ICRC is `c0 ^ delta(id)` (see `Ipv4IdSolver`).
    let mut matches =
        |id: u16| id != 0 && trains.delta(solver, n, id).is_some_and(|d| c0 ^ d == want);
    let found = if let Some(g) = guess.filter(|&g| matches(g)) {
        Some(g)
    } else if matches(hint) {
        Some(hint)
    } else {
        let id = solver.solve(n, want ^ c0);
        // A connected peer's send after a train of k segments takes the train's first ID + 1,
        // k - 1 behind the guess (one ID per send, `link::connected`): read whole, the train
        // moved the guess by one; read one datagram at a time (`UDP_GRO` off,
        // `link::rx_mode`), by k. Such an ID was expected, not recovered.
        let expected = |id: u16| {
            guess.is_some_and(|g| (1..=GSO_MAX_SEGS as u16).contains(&g.wrapping_sub(id)))
        };
        if id.is_some_and(|id| id != 0 && !expected(id)) {
            LinkCounters::add(&counters.rx_ip_id_recovered, 1);
        }
        id
    };
    restamp_id(ip, hdr, found.unwrap_or(0))?;
    Some(found.is_some())
}

/// Gives header `hdr` of an IPv4 packet, as `write_ip_udp` wrote it from `ip`, the ID `id`
/// (and the checksum that goes with it: `ip::set_ipv4_id`, a few adds), `ip` with it.
pub(super) fn restamp_id(ip: &mut IpSpec, hdr: &mut [u8], id: u16) -> Option<()> {
    if let IpSpec::V4(v4) = ip
        && v4.id != id
    {
        v4.id = id;
        bypass_hw::roce::ip::set_ipv4_id(hdr, id).ok()?;
    }
    Some(())
}
