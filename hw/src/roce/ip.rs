//! The IPv4/IPv6 and UDP headers that carry RoCEv2, exactly as rxe builds them, plus the GID
//! to IP address mapping.
//!
//! Owns: [`IpSpec`] (what goes in the IP header), [`UdpPorts`], [`ipv4_checksum`],
//! [`gid_to_ipv4`], [`same_ip_udp`], and the writing and splitting of the IP + UDP headers.
//! Must not: look past the UDP header.
//!
//! Sources: RFC 791 (IPv4 header, checksum), RFC 8200 (IPv6 header), RFC 768 (UDP); Linux
//! `drivers/infiniband/sw/rxe/rxe_net.c` (`prepare_ipv4_hdr`: DF set, TOS = traffic class,
//! TTL = hop limit; `prepare_ipv6_hdr`: flow label 0; `prepare_udp_hdr`: checksum 0);
//! RFC 4291 §2.5.5.2 (IPv4-mapped IPv6 addresses, how RoCEv2 GIDs carry IPv4).

use crate::error::{Error, Result};

/// IPv4 header length without options (rxe never sends options and assumes none).
pub const IPV4_HDR_LEN: usize = 20;
/// IPv6 fixed header length (rxe sends no extension headers).
pub const IPV6_HDR_LEN: usize = 40;
/// UDP header length.
pub const UDP_HDR_LEN: usize = 8;
/// The longest IP + UDP header rxe sends or parses: IPv6's (no extension headers) + UDP.
pub const MAX_IP_UDP_HDR_LEN: usize = IPV6_HDR_LEN + UDP_HDR_LEN;
/// IP protocol / next header number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// The TTL / hop limit rxe uses by default (the route's `ip4_dst_hoplimit`, 64 on Linux).
pub const DEFAULT_TTL: u8 = 64;

const DF: u16 = 0x4000;

/// The IPv4 header fields a RoCEv2 sender chooses. Lengths, protocol and checksum are derived.
/// `Default` is all zero (addresses, TOS, TTL, ID, no DF): a blank to fill in, not what rxe
/// sends (`IpSpec::from_gids` gives that).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ipv4Spec {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Type of service (DSCP and ECN); masked out of the ICRC.
    pub tos: u8,
    /// Time to live; masked out of the ICRC.
    pub ttl: u8,
    /// Identification. Covered by the ICRC, so the receiver must see exactly what the sender
    /// computed it over: an unconnected UDP socket with `IP_PMTUDISC_DO` sends 0, a connected
    /// one its own counter (`scripts/guest/README.md`).
    pub id: u16,
    /// Don't-fragment flag (rxe always sets it).
    pub dont_fragment: bool,
}

/// The IPv6 header fields a RoCEv2 sender chooses. Payload length and next header are derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Spec {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Traffic class; masked out of the ICRC.
    pub traffic_class: u8,
    /// Flow label (20 bits; rxe sends 0); masked out of the ICRC.
    pub flow_label: u32,
    /// Hop limit; masked out of the ICRC.
    pub hop_limit: u8,
}

/// The network header of a RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpSpec {
    /// IPv4 (the GIDs are IPv4-mapped).
    V4(Ipv4Spec),
    /// IPv6.
    V6(Ipv6Spec),
}

/// UDP source and destination ports (the destination is 4791 for RoCEv2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPorts {
    /// Source port (rxe: [`crate::roce::opcode::rxe_udp_sport`]).
    pub src: u16,
    /// Destination port ([`crate::roce::bth::ROCE_V2_UDP_DPORT`]).
    pub dst: u16,
}

/// The IPv4 address of an IPv4-mapped GID `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2), else `None`.
pub fn gid_to_ipv4(gid: &[u8; 16]) -> Option<[u8; 4]> {
    if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        Some([gid[12], gid[13], gid[14], gid[15]])
    } else {
        None
    }
}

/// The IPv4-mapped GID `::ffff:a.b.c.d` of an IPv4 address.
pub fn ipv4_to_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// The RFC 791 header checksum of `hdr` (an IPv4 header with its checksum field zeroed, or
/// as received: a correct header then sums to 0).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    // One's-complement sum of big-endian 16-bit words, an odd last byte padded with zero
    // (RFC 1071), taken four bytes at a time into a 64-bit accumulator and folded at the end:
    // 32-bit words fold to the same 16-bit sum (RFC 1071 §2(B), parallel summation).
    let quads = hdr.chunks_exact(4);
    let tail = quads.remainder();
    let mut sum: u64 = quads.fold(0, |s, q| {
        s + u64::from(u32::from_be_bytes([q[0], q[1], q[2], q[3]]))
    });
    for (i, &b) in tail.iter().enumerate() {
        sum += u64::from(b) << (24 - 8 * i);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether `a` and `b` (`N` >= 8 bytes: the IPv4 and IPv6 + UDP header lengths) hold the
/// same bytes, compared as 8-byte words (the last one overlapping the one before when `N` is
/// not a multiple of 8), XORed together with no early exit and no call to `bcmp`.
#[inline(always)]
fn same_words<const N: usize>(a: &[u8; N], b: &[u8; N]) -> bool {
    const { assert!(N >= 8, "whole 8-byte words only") };
    let word = |x: &[u8; N], at: usize| {
        x.get(at..)
            .and_then(<[u8]>::first_chunk::<8>)
            .map_or(0, |w| u64::from_ne_bytes(*w))
    };
    let mut diff = 0u64;
    let mut at = 0;
    while at + 8 <= N {
        diff |= word(a, at) ^ word(b, at);
        at += 8;
    }
    if at < N {
        diff |= word(a, N - 8) ^ word(b, N - 8);
    }
    diff == 0
}

/// Whether the IP + UDP headers `a` and `b` are the same bytes: compared as 8-byte words at
/// the IPv4 + UDP and IPv6 + UDP lengths, as a slice at any other (headers of different
/// lengths are never the same). The sim's header caches test every packet of a flow with it.
#[inline]
pub fn same_ip_udp(a: &[u8], b: &[u8]) -> bool {
    const V4: usize = IPV4_HDR_LEN + UDP_HDR_LEN;
    const V6: usize = MAX_IP_UDP_HDR_LEN;
    match (a.len(), b.len()) {
        (V4, V4) => a
            .first_chunk::<V4>()
            .zip(b.first_chunk::<V4>())
            .is_some_and(|(a, b)| same_words(a, b)),
        (V6, V6) => a
            .first_chunk::<V6>()
            .zip(b.first_chunk::<V6>())
            .is_some_and(|(a, b)| same_words(a, b)),
        _ => a == b,
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Gives the IPv4 header at the front of `hdr` (20 bytes, no options, as
/// [`IpSpec::write_ip_udp`] writes it) the ID `id`, and its header checksum the value that
/// goes with it, updated incrementally from the one there (RFC 1624 eqn. 3,
/// `HC' = ~(~HC + ~m + m')`): the same bytes `write_ip_udp` writes with that ID.
///
/// Errors: [`Error::Truncated`] when `hdr` is shorter than 20 bytes, [`Error::Malformed`]
/// when its first byte is not `0x45` (version 4, IHL 5); `hdr` is unchanged then.
pub fn set_ipv4_id(hdr: &mut [u8], id: u16) -> Result<()> {
    let got = hdr.len();
    let h = hdr
        .get_mut(..IPV4_HDR_LEN)
        .ok_or(truncated("roce ipv4 header", IPV4_HDR_LEN, got))?;
    if h[0] != 0x45 {
        return Err(Error::Malformed {
            what: "roce ipv4 header",
            reason: "not an IPv4 header of 20 bytes (version 4, IHL 5)",
        });
    }
    let old = u16::from_be_bytes([h[4], h[5]]);
    let hc = u16::from_be_bytes([h[10], h[11]]);
    // One's-complement sum, end-around carry folded twice (three 16-bit terms).
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(id);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    Ok(())
}

fn truncated(what: &'static str, need: usize, got: usize) -> Error {
    Error::Truncated { what, need, got }
}

/// ECN codepoint ECT(0): ECN-capable transport (RFC 3168 §5), the low two bits of the
/// traffic class.
pub const ECN_ECT0: u8 = 0b10;
/// ECN codepoint CE: congestion experienced (RFC 3168 §5).
pub const ECN_CE: u8 = 0b11;

impl IpSpec {
    /// The IPv4 TOS or the IPv6 traffic class (DSCP << 2 | ECN).
    pub fn tclass(&self) -> u8 {
        match self {
            Self::V4(v) => v.tos,
            Self::V6(v) => v.traffic_class,
        }
    }

    /// Sets the IPv4 TOS or the IPv6 traffic class (DSCP << 2 | ECN).
    pub fn set_tclass(&mut self, tclass: u8) {
        match self {
            Self::V4(v) => v.tos = tclass,
            Self::V6(v) => v.traffic_class = tclass,
        }
    }

    /// IPv4 if both GIDs are IPv4-mapped, IPv6 if neither is (rxe `rxe_net.c`
    /// `rxe_prepare`: `skb->protocol` follows the address family of the GIDs); rxe's header
    /// defaults: TOS / traffic class 0, TTL / hop limit 64, DF set, IP ID 0, flow label 0.
    pub fn from_gids(sgid: &[u8; 16], dgid: &[u8; 16]) -> Result<Self> {
        match (gid_to_ipv4(sgid), gid_to_ipv4(dgid)) {
            (Some(src), Some(dst)) => Ok(Self::V4(Ipv4Spec {
                src,
                dst,
                tos: 0,
                ttl: DEFAULT_TTL,
                id: 0,
                dont_fragment: true,
            })),
            (None, None) => Ok(Self::V6(Ipv6Spec {
                src: *sgid,
                dst: *dgid,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: DEFAULT_TTL,
            })),
            _ => Err(Error::Malformed {
                what: "roce gid",
                reason: "one GID is IPv4-mapped and the other is not",
            }),
        }
    }

    /// Length of the IP header this spec emits.
    pub const fn header_len(&self) -> usize {
        match self {
            Self::V4(_) => IPV4_HDR_LEN,
            Self::V6(_) => IPV6_HDR_LEN,
        }
    }

    /// The destination address.
    pub fn dst_addr(&self) -> core::net::IpAddr {
        match self {
            Self::V4(v) => core::net::IpAddr::from(v.dst),
            Self::V6(v) => core::net::IpAddr::from(v.dst),
        }
    }

    /// Source and destination as GIDs (IPv4 addresses mapped).
    pub fn gids(&self) -> ([u8; 16], [u8; 16]) {
        match self {
            Self::V4(v) => (ipv4_to_gid(v.src), ipv4_to_gid(v.dst)),
            Self::V6(v) => (v.src, v.dst),
        }
    }

    /// Writes the IP header and the UDP header (checksum 0, as rxe sends) for a UDP payload of
    /// `udp_payload_len` bytes into the front of `buf`; returns the bytes written.
    pub fn write_ip_udp(
        &self,
        ports: UdpPorts,
        udp_payload_len: usize,
        buf: &mut [u8],
    ) -> Result<usize> {
        let hl = self.header_len();
        let need = hl + UDP_HDR_LEN;
        if buf.len() < need {
            return Err(truncated("roce ip+udp header", need, buf.len()));
        }
        let udp_len = UDP_HDR_LEN + udp_payload_len;
        let too_long = Error::Malformed {
            what: "roce ip header",
            reason: "the packet is longer than 65535 bytes",
        };
        let udp_len16 = u16::try_from(udp_len).map_err(|_| too_long)?;
        match self {
            Self::V4(v) => {
                let total = u16::try_from(IPV4_HDR_LEN + udp_len).map_err(|_| too_long)?;
                let h = &mut buf[..IPV4_HDR_LEN];
                h[0] = 0x45;
                h[1] = v.tos;
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[4..6].copy_from_slice(&v.id.to_be_bytes());
                h[6..8].copy_from_slice(&(if v.dont_fragment { DF } else { 0 }).to_be_bytes());
                h[8] = v.ttl;
                h[9] = IPPROTO_UDP;
                h[10..12].copy_from_slice(&[0, 0]);
                h[12..16].copy_from_slice(&v.src);
                h[16..20].copy_from_slice(&v.dst);
                let c = ipv4_checksum(h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            Self::V6(v) => {
                if v.flow_label > 0xf_ffff {
                    return Err(Error::FieldOverflow {
                        what: "ipv6.flow_label",
                        value: v.flow_label as u64,
                        bits: 20,
                    });
                }
                let h = &mut buf[..IPV6_HDR_LEN];
                let w0 = 6u32 << 28 | (v.traffic_class as u32) << 20 | v.flow_label;
                h[0..4].copy_from_slice(&w0.to_be_bytes());
                h[4..6].copy_from_slice(&udp_len16.to_be_bytes());
                h[6] = IPPROTO_UDP;
                h[7] = v.hop_limit;
                h[8..24].copy_from_slice(&v.src);
                h[24..40].copy_from_slice(&v.dst);
            }
        }
        let u = &mut buf[hl..need];
        u[0..2].copy_from_slice(&ports.src.to_be_bytes());
        u[2..4].copy_from_slice(&ports.dst.to_be_bytes());
        u[4..6].copy_from_slice(&udp_len16.to_be_bytes());
        u[6..8].copy_from_slice(&[0, 0]);
        Ok(need)
    }
}

/// An IP packet split at the UDP payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpUdpSplit<'a> {
    /// The IP and UDP headers, as received.
    pub headers: &'a [u8],
    /// The decoded IP header.
    pub ip: IpSpec,
    /// The UDP ports.
    pub ports: UdpPorts,
    /// The UDP payload, bounded by the UDP length.
    pub payload: &'a [u8],
}

/// Splits an IPv4/IPv6 packet carrying UDP into headers and UDP payload, checking every length
/// (IP total/payload length within the buffer, UDP length within the IP payload; bytes past the
/// IP length, such as Ethernet padding, are ignored). IPv4 options, fragments and IPv6
/// extension headers are rejected: rxe neither sends nor parses them (`rxe_icrc.c` copies a
/// fixed `sizeof(struct iphdr)`). The IPv4 checksum is checked only when `check_v4_csum`.
pub(crate) fn split_ip_udp(pkt: &[u8], check_v4_csum: bool) -> Result<IpUdpSplit<'_>> {
    let first = *pkt
        .first()
        .ok_or(truncated("roce ip header", IPV4_HDR_LEN, 0))?;
    let (hl, ip, ip_end) = match first >> 4 {
        4 => {
            if pkt.len() < IPV4_HDR_LEN {
                return Err(truncated("roce ipv4 header", IPV4_HDR_LEN, pkt.len()));
            }
            if first & 0x0f != 5 {
                return Err(Error::Malformed {
                    what: "roce ipv4 header",
                    reason: "IHL is not 5: IP options are not allowed",
                });
            }
            if pkt[9] != IPPROTO_UDP {
                return Err(Error::Malformed {
                    what: "roce ipv4 header",
                    reason: "protocol is not UDP",
                });
            }
            let frag = be16(pkt, 6);
            if frag & !DF != 0 {
                return Err(Error::Malformed {
                    what: "roce ipv4 header",
                    reason: "fragmented (MF or offset set) or reserved flag set",
                });
            }
            if check_v4_csum && ipv4_checksum(&pkt[..IPV4_HDR_LEN]) != 0 {
                return Err(Error::Malformed {
                    what: "roce ipv4 header",
                    reason: "bad header checksum",
                });
            }
            let total = be16(pkt, 2) as usize;
            if total < IPV4_HDR_LEN {
                return Err(Error::Malformed {
                    what: "roce ipv4 header",
                    reason: "total length shorter than the header",
                });
            }
            if total > pkt.len() {
                return Err(truncated(
                    "roce ipv4 packet (total length)",
                    total,
                    pkt.len(),
                ));
            }
            let ip = IpSpec::V4(Ipv4Spec {
                src: [pkt[12], pkt[13], pkt[14], pkt[15]],
                dst: [pkt[16], pkt[17], pkt[18], pkt[19]],
                tos: pkt[1],
                ttl: pkt[8],
                id: be16(pkt, 4),
                dont_fragment: frag & DF != 0,
            });
            (IPV4_HDR_LEN, ip, total)
        }
        6 => {
            if pkt.len() < IPV6_HDR_LEN {
                return Err(truncated("roce ipv6 header", IPV6_HDR_LEN, pkt.len()));
            }
            if pkt[6] != IPPROTO_UDP {
                return Err(Error::Malformed {
                    what: "roce ipv6 header",
                    reason: "next header is not UDP (extension headers are not allowed)",
                });
            }
            let end = IPV6_HDR_LEN + be16(pkt, 4) as usize;
            if end > pkt.len() {
                return Err(truncated(
                    "roce ipv6 packet (payload length)",
                    end,
                    pkt.len(),
                ));
            }
            let w0 = u32::from_be_bytes([pkt[0], pkt[1], pkt[2], pkt[3]]);
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&pkt[8..24]);
            dst.copy_from_slice(&pkt[24..40]);
            let ip = IpSpec::V6(Ipv6Spec {
                src,
                dst,
                traffic_class: (w0 >> 20) as u8,
                flow_label: w0 & 0xf_ffff,
                hop_limit: pkt[7],
            });
            (IPV6_HDR_LEN, ip, end)
        }
        _ => {
            return Err(Error::Malformed {
                what: "roce ip header",
                reason: "IP version is neither 4 nor 6",
            });
        }
    };
    let pkt = &pkt[..ip_end];
    let hdrs = hl + UDP_HDR_LEN;
    if pkt.len() < hdrs {
        return Err(truncated("roce udp header", hdrs, pkt.len()));
    }
    let udp_len = be16(pkt, hl + 4) as usize;
    if udp_len < UDP_HDR_LEN {
        return Err(Error::Malformed {
            what: "roce udp header",
            reason: "UDP length shorter than the header",
        });
    }
    if hl + udp_len > pkt.len() {
        return Err(truncated(
            "roce udp datagram (UDP length)",
            hl + udp_len,
            pkt.len(),
        ));
    }
    Ok(IpUdpSplit {
        headers: &pkt[..hdrs],
        ip,
        ports: UdpPorts {
            src: be16(pkt, hl),
            dst: be16(pkt, hl + 2),
        },
        payload: &pkt[hdrs..hl + udp_len],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_the_ipv4_id_writes_the_header_write_ip_udp_writes_with_that_id() {
        let mut v4 = Ipv4Spec {
            src: [10, 0, 0, 1],
            dst: [192, 168, 7, 200],
            tos: 0,
            ttl: 64,
            id: 0,
            dont_fragment: true,
        };
        let ports = UdpPorts {
            src: 0xc0de,
            dst: 4791,
        };
        for (dst, len) in [([192, 168, 7, 200], 20usize), ([255, 255, 255, 255], 4112)] {
            v4.dst = dst;
            for from in [0u16, 1, 0x8000] {
                for id in (0..=u16::MAX).step_by(97).chain([1, 63, 0xfffe, u16::MAX]) {
                    let mut got = [0u8; IPV4_HDR_LEN + UDP_HDR_LEN];
                    IpSpec::V4(Ipv4Spec { id: from, ..v4 })
                        .write_ip_udp(ports, len, &mut got)
                        .unwrap();
                    set_ipv4_id(&mut got, id).unwrap();
                    let mut want = [0u8; IPV4_HDR_LEN + UDP_HDR_LEN];
                    IpSpec::V4(Ipv4Spec { id, ..v4 })
                        .write_ip_udp(ports, len, &mut want)
                        .unwrap();
                    assert_eq!(got, want, "from id {from} to {id}, dst {dst:?}");
                }
            }
        }
        assert!(set_ipv4_id(&mut [0x45; 19], 1).is_err());
        assert!(set_ipv4_id(&mut [0x60; 40], 1).is_err());
    }

    #[test]
    fn checksum_of_rfc1071_example_header() {
        // A well-known IPv4 header (Wikipedia "IPv4 header checksum"): checksum 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00,
            0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(ipv4_checksum(&h), 0);
    }

    #[test]
    fn checksum_sums_an_odd_last_byte_as_a_zero_padded_word() {
        // Reference: RFC 1071 byte by byte, for every length 0..=41 of a varied buffer.
        let bytes: [u8; 41] = core::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0xa5);
        for n in 0..=bytes.len() {
            let mut sum = 0u32;
            for (i, &b) in bytes[..n].iter().enumerate() {
                sum += if i % 2 == 0 {
                    u32::from(b) << 8
                } else {
                    u32::from(b)
                };
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            assert_eq!(ipv4_checksum(&bytes[..n]), !(sum as u16), "length {n}");
        }
    }

    #[test]
    fn same_ip_udp_tells_headers_apart_by_any_byte() {
        for n in [28usize, 48, 30] {
            let a: std::vec::Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(7)).collect();
            assert!(same_ip_udp(&a, &a.clone()));
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x10;
                assert!(!same_ip_udp(&a, &b), "length {n}, byte {at}");
            }
            assert!(!same_ip_udp(&a, &a[..n - 1]));
        }
    }

    #[test]
    fn gid_mapping() {
        let g = ipv4_to_gid([10, 99, 0, 2]);
        assert_eq!(gid_to_ipv4(&g), Some([10, 99, 0, 2]));
        let mut v6 = [0u8; 16];
        v6[0] = 0xfe;
        v6[1] = 0x80;
        assert_eq!(gid_to_ipv4(&v6), None);
        assert!(IpSpec::from_gids(&g, &v6).is_err());
        assert!(matches!(
            IpSpec::from_gids(&g, &g),
            Ok(IpSpec::V4(Ipv4Spec {
                ttl: 64,
                id: 0,
                dont_fragment: true,
                ..
            }))
        ));
        assert!(matches!(IpSpec::from_gids(&v6, &v6), Ok(IpSpec::V6(_))));
    }
}
