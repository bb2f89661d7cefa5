//! Fix-ups that turn fuzzed bytes into RoCEv2 packets a NIC takes past its first checks: the
//! IP and UDP headers rebuilt for the two NICs' GIDs and port 4791, the destination QP set to
//! a live QP, and the ICRC recomputed, each only when the input's flags ask, so that inputs
//! both reach deep (a packet the responder parses) and stay raw (any header at all).
//!
//! Owns: [`fix_packet`] and [`icrc_for`]. Must not: panic on any input.
//!
//! Sources: `bypass_hw::roce` (IP/UDP header layout, BTH destination QP at bytes 5..8 of the
//! UDP payload, ICRC coverage as Linux rxe computes it).

use bypass_hw::roce::icrc;
use bypass_hw::roce::ip::{IPV4_HDR_LEN, IPV6_HDR_LEN, IpSpec, UDP_HDR_LEN, UdpPorts};

/// The RoCEv2 UDP port.
const ROCE_PORT: u16 = 4791;

/// Flag: rebuild the IP and UDP headers (from `sgid` to `dgid`, port 4791, right lengths and
/// checksum); bits 2..3 then pick the destination QP (0: as given, 1: `qpns[0]`, 2:
/// `qpns[1]`, 3: QP 1).
pub const FIX_HEADERS: u8 = 1 << 0;
/// Flag: recompute the ICRC over the packet as it is after the other fix-ups.
pub const FIX_ICRC: u8 = 1 << 1;

/// `packet` (IP header through ICRC) with the fix-ups `flags` asks for.
pub fn fix_packet(
    flags: u8,
    packet: &[u8],
    sgid: &[u8; 16],
    dgid: &[u8; 16],
    qpns: [u32; 2],
) -> Vec<u8> {
    let mut p = packet.to_vec();
    if flags & FIX_HEADERS != 0 {
        let hl = if p.first().is_some_and(|b| b >> 4 == 6) {
            IPV6_HDR_LEN
        } else {
            IPV4_HDR_LEN
        } + UDP_HDR_LEN;
        let sport = match (p.get(hl - 8), p.get(hl - 7)) {
            (Some(&h), Some(&l)) => u16::from_be_bytes([h, l]),
            _ => 0xc000,
        };
        let mut payload = p.get(hl..).unwrap_or(&[]).to_vec();
        let qpn = match flags >> 2 & 3 {
            1 => Some(qpns[0]),
            2 => Some(qpns[1]),
            3 => Some(1),
            _ => None,
        };
        if let (Some(q), Some(d)) = (qpn, payload.get_mut(5..8)) {
            d.copy_from_slice(&q.to_be_bytes()[1..]);
        }
        let ports = UdpPorts {
            src: sport,
            dst: ROCE_PORT,
        };
        if let Ok(ip) = IpSpec::from_gids(sgid, dgid) {
            let mut hdr = [0u8; IPV6_HDR_LEN + UDP_HDR_LEN];
            if let Ok(n) = ip.write_ip_udp(ports, payload.len(), &mut hdr) {
                p = hdr[..n].to_vec();
                p.append(&mut payload);
            }
        }
    }
    if flags & FIX_ICRC != 0
        && let Ok(c) = icrc::compute(&p)
    {
        let n = p.len();
        p[n - 4..].copy_from_slice(&c.to_le_bytes());
    }
    p
}

/// The ICRC a UDP payload needs to be right when it travels with `ip` and `ports`, written
/// into its last four bytes (nothing happens to a payload too short to carry one).
pub fn icrc_for(ip: &IpSpec, ports: UdpPorts, payload: &mut [u8]) {
    if let Ok(c) = icrc::compute_udp_payload(ip, ports, payload) {
        let n = payload.len();
        payload[n - 4..].copy_from_slice(&c.to_le_bytes());
    }
}
