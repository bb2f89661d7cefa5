//! The RoCEv2 invariant CRC (ICRC), computed exactly as Linux rxe does.
//!
//! Owns: [`compute`], [`check`] (over a whole IP packet) and [`compute_udp_payload`],
//! [`check_udp_payload`] (over a UDP payload, the IP and UDP headers rebuilt from what the
//! socket reports). Must not: allocate; the masked header copies live on the stack.
//!
//! What is covered (rxe `rxe_icrc.c` `rxe_icrc_hdr`; IBTA annex A17.3.3):
//! 1. eight bytes of `0xff` standing for the masked LRH (rxe starts from the seed
//!    `0xdebb20e3`, the CRC register after those eight bytes);
//! 2. the IP header, with IPv4 TOS, TTL and header checksum set to all ones, or IPv6 traffic
//!    class, flow label and hop limit set to all ones;
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with its FECN/BECN/reserved byte (byte 4) set to all ones;
//! 5. everything after the BTH up to the ICRC: extension headers, payload, pad.
//!
//! rxe uses the kernel's `crc32_le` without pre- or post-inversion from that seed and stores
//! `~crc` in CPU (little-endian) order, which is the standard CRC-32 (IEEE 802.3,
//! reflected, init and xorout `0xffffffff`) of the bytes above, written little-endian: the
//! value these functions return is that CRC-32, and the four bytes on the wire are its
//! `to_le_bytes()`.

use crate::error::{Error, Result};
use crate::roce::bth::BTH_LEN;
use crate::roce::ip::{IPV6_HDR_LEN, IpSpec, UDP_HDR_LEN, UdpPorts, split_ip_udp};

/// Size of the ICRC trailer (rxe `RXE_ICRC_SIZE`).
pub const ICRC_LEN: usize = 4;

/// Largest IP + UDP header the ICRC covers (IPv6 + UDP).
const MAX_HDRS: usize = IPV6_HDR_LEN + UDP_HDR_LEN;

/// Masks the variant fields of a copy of the IP + UDP headers (`hdrs.len()` is 28 or 48).
fn mask_ip_udp(hdrs: &mut [u8]) {
    let udp = hdrs.len() - UDP_HDR_LEN;
    if hdrs[0] >> 4 == 4 {
        hdrs[1] = 0xff; // tos
        hdrs[8] = 0xff; // ttl
        hdrs[10] = 0xff; // check
        hdrs[11] = 0xff;
    } else {
        hdrs[0] |= 0x0f; // traffic class, high nibble (rxe: priority = 0xf)
        hdrs[1] = 0xff; // traffic class low nibble + flow label (rxe: flow_lbl[] = 0xff)
        hdrs[2] = 0xff;
        hdrs[3] = 0xff;
        hdrs[7] = 0xff; // hop limit
    }
    hdrs[udp + 6] = 0xff; // UDP checksum
    hdrs[udp + 7] = 0xff;
}

/// The CRC over headers `ip_udp` (unmasked, 28 or 48 bytes) and the UDP payload `roce`
/// (BTH .. ICRC; the ICRC itself is not covered).
pub(crate) fn compute_parts(ip_udp: &[u8], roce: &[u8]) -> Result<u32> {
    let need = BTH_LEN + ICRC_LEN;
    if roce.len() < need {
        return Err(Error::Truncated {
            what: "roce udp payload (BTH + ICRC)",
            need,
            got: roce.len(),
        });
    }
    let mut hdrs = [0u8; MAX_HDRS];
    let hdrs = &mut hdrs[..ip_udp.len()];
    hdrs.copy_from_slice(ip_udp);
    mask_ip_udp(hdrs);
    let mut bth = [0u8; BTH_LEN];
    bth.copy_from_slice(&roce[..BTH_LEN]);
    bth[4] = 0xff; // FECN, BECN, resv6a (rxe: bth->qpn |= ~BTH_QPN_MASK)
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    h.update(hdrs);
    h.update(&bth);
    h.update(&roce[BTH_LEN..roce.len() - ICRC_LEN]);
    Ok(h.finalize())
}

/// The ICRC of a RoCEv2 packet starting at its IP header and ending with its (ignored) ICRC
/// field, as carried by the UDP length. The IP header checksum is not verified here.
pub fn compute(ip_and_beyond: &[u8]) -> Result<u32> {
    let s = split_ip_udp(ip_and_beyond, false)?;
    compute_parts(s.headers, s.payload)
}

/// The ICRC carried by a UDP payload (its last four bytes, little-endian), if there are any.
pub fn wire_value(udp_payload: &[u8]) -> Option<u32> {
    let n = udp_payload.len();
    let t = udp_payload.get(n.checked_sub(ICRC_LEN)?..)?;
    Some(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Whether the ICRC at the end of the UDP payload of this IP packet is right (rxe
/// `rxe_icrc_check`). Errors only when the packet is too short or not IPv4/IPv6 + UDP.
pub fn check(packet: &[u8]) -> Result<bool> {
    let s = split_ip_udp(packet, false)?;
    let c = compute_parts(s.headers, s.payload)?;
    Ok(wire_value(s.payload) == Some(c))
}

/// The ICRC of a UDP payload (BTH .. ICRC) as received from or sent through a UDP socket;
/// `ip` and `ports` must be exactly what is on the wire (in particular the IPv4 ID and DF, which
/// the ICRC covers), and the IP and UDP lengths are taken from the payload length.
pub fn compute_udp_payload(ip: &IpSpec, ports: UdpPorts, udp_payload: &[u8]) -> Result<u32> {
    let mut hdrs = [0u8; MAX_HDRS];
    let n = ip.write_ip_udp(ports, udp_payload.len(), &mut hdrs)?;
    compute_parts(&hdrs[..n], udp_payload)
}

/// Whether the ICRC at the end of a UDP payload is right, given the IP and UDP header fields
/// it travelled with (see [`compute_udp_payload`]).
pub fn check_udp_payload(ip: &IpSpec, ports: UdpPorts, udp_payload: &[u8]) -> Result<bool> {
    let c = compute_udp_payload(ip, ports, udp_payload)?;
    Ok(wire_value(udp_payload) == Some(c))
}

#[cfg(test)]
mod tests {
    #[test]
    fn rxe_seed_is_the_crc_register_after_eight_ff_bytes() {
        // rxe_icrc.c: "seed ... 0xdebb20e3 ... 8 bytes of 0xff representing a masked LRH".
        // crc32fast's finalize() is !register, so the register is !finalize().
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        assert_eq!(!h.finalize(), 0xdebb_20e3);
    }
}
