//! The RoCEv2 congestion notification packet (CNP): build one, or recognise and view a
//! received one.
//!
//! Owns: [`CnpSpec`] (what a CNP carries), [`emit_cnp`] / [`emit_cnp_udp_payload`] (write it,
//! no allocation), [`Cnp`] (a checked view of a received one) and [`is_cnp`]. Must not: decide
//! when to send a CNP or what a received one does (the sim's notification and reaction points,
//! `bypass_sim::cong`), or allocate.
//!
//! Layout (IBTA vol. 1 annex A17.9.3): `IPv4|IPv6 | UDP 4791 | BTH | 16 reserved bytes | ICRC`.
//! The BTH has opcode 0x81 (`ib_pack.h` `IB_OPCODE_CNP` | 1), BECN set, P_Key 0xffff, the
//! DestQP of the QP whose packet was marked, PSN 0 and every other field zero. The IP header
//! is the one the rest of bypass writes ([`IpSpec::write_ip_udp`]); the caller gives it the
//! CNP's DSCP with ECN not-ECT ([`cnp_tos`]). CNPs are outside the opcode table
//! ([`crate::roce::opcode`]), so [`crate::roce::RocePacket`] rejects them: a receiver tries
//! [`is_cnp`] first. Checked against scapy's `scapy.contrib.roce` `cnp()` by
//! `hw/tests/roce_scapy.rs`.

use zerocopy::IntoBytes;

use crate::error::{Error, Result};
use crate::roce::bth::{BTH_LEN, Bth, BthFields, DEFAULT_PKEY, ROCE_V2_UDP_DPORT};
use crate::roce::icrc::{self, ICRC_LEN};
use crate::roce::ip::{IpSpec, UDP_HDR_LEN, UdpPorts, split_ip_udp};
use crate::roce::opcode::BthOpcode;
use crate::view::View;

/// The reserved bytes between the BTH and the ICRC (annex A17.9.3).
pub const CNP_RESERVED_LEN: usize = 16;

/// The CNP's UDP payload length: BTH, reserved bytes, ICRC.
pub const CNP_UDP_PAYLOAD_LEN: usize = BTH_LEN + CNP_RESERVED_LEN + ICRC_LEN;

/// The IPv4 TOS / IPv6 traffic class of a CNP at DSCP `dscp`: the DSCP (six bits) and ECN
/// not-ECT (a CNP is never ECN-capable).
pub const fn cnp_tos(dscp: u8) -> u8 {
    (dscp & 0x3f) << 2
}

/// Everything that goes into one CNP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CnpSpec {
    /// The IP header (TOS / traffic class from [`cnp_tos`]).
    pub ip: IpSpec,
    /// UDP ports (destination [`ROCE_V2_UDP_DPORT`]).
    pub ports: UdpPorts,
    /// The QP the CNP is for: the sender of the marked packet (24 bits).
    pub dest_qp: u32,
}

impl CnpSpec {
    /// Length of the whole CNP from the IP header.
    pub fn packet_len(&self) -> usize {
        self.ip.header_len() + UDP_HDR_LEN + CNP_UDP_PAYLOAD_LEN
    }

    /// The CNP's BTH: opcode 0x81, BECN, P_Key 0xffff, DestQP, PSN 0.
    fn bth(&self) -> Result<Bth> {
        Bth::from_fields(&BthFields {
            opcode: BthOpcode::CNP,
            becn: true,
            pkey: DEFAULT_PKEY,
            dest_qp: self.dest_qp,
            ..BthFields::default()
        })
    }

    /// Writes BTH, reserved bytes and a zero ICRC slot into `buf` (exactly the UDP payload).
    fn write_transport(&self, buf: &mut [u8]) -> Result<()> {
        let bth = self.bth()?;
        buf[..BTH_LEN].copy_from_slice(bth.as_bytes());
        buf[BTH_LEN..].fill(0);
        Ok(())
    }
}

/// Emits the whole CNP, from the IP header to the ICRC, into the front of `buf` (IPv4 header
/// checksum and ICRC computed); returns its length. A short `buf` is [`Error::Truncated`]; a
/// DestQP wider than 24 bits is [`Error::FieldOverflow`].
pub fn emit_cnp(spec: &CnpSpec, buf: &mut [u8]) -> Result<usize> {
    let total = spec.packet_len();
    if buf.len() < total {
        return Err(Error::Truncated {
            what: "roce cnp buffer",
            need: total,
            got: buf.len(),
        });
    }
    let buf = &mut buf[..total];
    let hdrs = spec.ip.write_ip_udp(spec.ports, CNP_UDP_PAYLOAD_LEN, buf)?;
    spec.write_transport(&mut buf[hdrs..])?;
    let c = icrc::compute(buf)?;
    buf[total - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    Ok(total)
}

/// Emits only the CNP's UDP payload (BTH .. ICRC) for a UDP socket; the ICRC covers the IP and
/// UDP headers `spec` describes, which must be what the kernel puts on the wire. Returns its
/// length ([`CNP_UDP_PAYLOAD_LEN`]).
pub fn emit_cnp_udp_payload(spec: &CnpSpec, buf: &mut [u8]) -> Result<usize> {
    if buf.len() < CNP_UDP_PAYLOAD_LEN {
        return Err(Error::Truncated {
            what: "roce cnp udp payload buffer",
            need: CNP_UDP_PAYLOAD_LEN,
            got: buf.len(),
        });
    }
    let buf = &mut buf[..CNP_UDP_PAYLOAD_LEN];
    spec.write_transport(buf)?;
    let c = icrc::compute_udp_payload(&spec.ip, spec.ports, buf)?;
    buf[CNP_UDP_PAYLOAD_LEN - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    Ok(CNP_UDP_PAYLOAD_LEN)
}

/// True if `udp_payload` (from the BTH on) starts with a BTH of opcode CNP.
pub fn is_cnp(udp_payload: &[u8]) -> bool {
    udp_payload.first() == Some(&BthOpcode::CNP.0)
}

/// A received CNP, checked and decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cnp {
    /// The IP header fields it came with (source: the notification point).
    pub ip: IpSpec,
    /// Its UDP ports.
    pub ports: UdpPorts,
    /// The BTH fields (opcode CNP).
    pub bth: BthFields,
    /// Whether its ICRC is right.
    pub icrc_ok: bool,
}

impl Cnp {
    /// The QP the CNP is for.
    pub fn dest_qp(&self) -> u32 {
        self.bth.dest_qp
    }

    /// Views a CNP starting at its IP header (IPv4 header checksum checked).
    ///
    /// Errors: [`Error::Truncated`] / [`Error::Malformed`] for a packet that is not
    /// IPv4/IPv6 + UDP 4791 carrying a BTH of opcode CNP and TVer 0 followed by exactly the
    /// reserved bytes and the ICRC.
    pub fn parse(ip_packet: &[u8]) -> Result<Self> {
        let s = split_ip_udp(ip_packet, true)?;
        let ok = icrc::compute_parts(s.headers, s.payload).ok();
        Self::new(s.ip, s.ports, s.payload, ok)
    }

    /// Views a CNP's UDP payload received on a UDP socket, with the IP and UDP header fields
    /// it travelled with (for the ICRC); errors as [`Cnp::parse`].
    pub fn parse_udp_payload(ip: IpSpec, ports: UdpPorts, udp_payload: &[u8]) -> Result<Self> {
        let ok = icrc::compute_udp_payload(&ip, ports, udp_payload).ok();
        Self::new(ip, ports, udp_payload, ok)
    }

    fn new(ip: IpSpec, ports: UdpPorts, udp_payload: &[u8], icrc: Option<u32>) -> Result<Self> {
        const WHAT: &str = "roce cnp";
        if ports.dst != ROCE_V2_UDP_DPORT {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "UDP destination port is not 4791",
            });
        }
        let bth = Bth::view(udp_payload)?.fields();
        if bth.opcode != BthOpcode::CNP {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "BTH opcode is not CNP (0x81)",
            });
        }
        if bth.tver != 0 {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "BTH TVer is not 0",
            });
        }
        if udp_payload.len() != CNP_UDP_PAYLOAD_LEN {
            return Err(Error::Malformed {
                what: WHAT,
                reason: "a CNP is a BTH, 16 reserved bytes and the ICRC: the length differs",
            });
        }
        Ok(Self {
            ip,
            ports,
            bth,
            icrc_ok: icrc.is_some() && icrc == icrc::wire_value(udp_payload),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::ip::ipv4_to_gid;

    fn spec(v6: bool) -> CnpSpec {
        let (s, d) = if v6 {
            ([0x20; 16], [0x21; 16])
        } else {
            (ipv4_to_gid([10, 0, 0, 2]), ipv4_to_gid([10, 0, 0, 1]))
        };
        let mut ip = IpSpec::from_gids(&s, &d).unwrap();
        match &mut ip {
            IpSpec::V4(v) => v.tos = cnp_tos(48),
            IpSpec::V6(v) => v.traffic_class = cnp_tos(48),
        }
        CnpSpec {
            ip,
            ports: UdpPorts {
                src: 0xc0de,
                dst: ROCE_V2_UDP_DPORT,
            },
            dest_qp: 0x12_3456,
        }
    }

    #[test]
    fn a_cnp_round_trips_with_its_fields_and_a_valid_icrc() {
        for v6 in [false, true] {
            let s = spec(v6);
            let mut buf = [0u8; 100];
            let n = emit_cnp(&s, &mut buf).unwrap();
            assert_eq!(n, if v6 { 40 } else { 20 } + 8 + 32);
            let pkt = &buf[..n];
            assert!(icrc::check(pkt).unwrap());
            let hl = s.ip.header_len() + UDP_HDR_LEN;
            assert!(is_cnp(&pkt[hl..]));
            // BTH: opcode, BECN (bit 6 of byte 4), P_Key, DestQP, PSN 0; then 16 zeros.
            assert_eq!(
                &pkt[hl..hl + 12],
                &[0x81, 0, 0xff, 0xff, 0x40, 0x12, 0x34, 0x56, 0, 0, 0, 0]
            );
            assert!(pkt[hl + 12..hl + 28].iter().all(|&b| b == 0));
            let c = Cnp::parse(pkt).unwrap();
            assert!(c.icrc_ok);
            assert!(c.bth.becn);
            assert_eq!(c.dest_qp(), 0x12_3456);
            assert_eq!(c.ip, s.ip);
            let mut udp = [0u8; CNP_UDP_PAYLOAD_LEN];
            emit_cnp_udp_payload(&s, &mut udp).unwrap();
            assert_eq!(&udp[..], &pkt[hl..]);
            assert!(Cnp::parse_udp_payload(s.ip, s.ports, &udp).unwrap().icrc_ok);
        }
    }

    #[test]
    fn a_flipped_covered_bit_fails_the_icrc_and_a_wrong_length_is_rejected() {
        let s = spec(false);
        let mut buf = [0u8; 60];
        let n = emit_cnp(&s, &mut buf).unwrap();
        let mut bad = buf;
        bad[20 + 8 + 6] ^= 1; // DestQP
        assert!(!Cnp::parse(&bad[..n]).unwrap().icrc_ok);
        let udp = &buf[28..n];
        assert!(Cnp::parse_udp_payload(s.ip, s.ports, &udp[..udp.len() - 4]).is_err());
        let mut not_cnp = [0u8; CNP_UDP_PAYLOAD_LEN];
        not_cnp.copy_from_slice(udp);
        not_cnp[0] = 0x04;
        assert!(!is_cnp(&not_cnp));
        assert!(Cnp::parse_udp_payload(s.ip, s.ports, &not_cnp).is_err());
        assert!(emit_cnp(&s, &mut [0u8; 10]).is_err());
    }
}
