//! The RoCEv2 invariant CRC (ICRC), computed exactly as Linux rxe does.
//!
//! Covered (rxe `rxe_icrc.c` `rxe_icrc_hdr`; IBTA annex A17.3.3): eight `0xff` bytes for the
//! masked LRH (rxe's seed `0xdebb20e3` is the CRC register after them); the IP header with
//! IPv4 TOS, TTL and checksum, or IPv6 traffic class, flow label and hop limit, set to all
//! ones; the UDP header with its checksum set to all ones; the BTH with byte 4 (FECN, BECN,
//! reserved) set to all ones; then everything up to the ICRC. rxe runs `crc32_le` from that
//! seed and stores `~crc` little-endian: the standard CRC-32 (IEEE 802.3) of those bytes,
//! which is what these functions return; the wire bytes are its `to_le_bytes()`.
//!
//! Owns: [`compute`] / [`check`] (a whole IP packet), [`compute_udp_payload`] /
//! [`check_udp_payload`] (a UDP payload with the header fields the socket reports),
//! [`IcrcHasher`] (a packet fed in pieces) and [`IcrcHeaderState`] (the CRC state after one
//! packet's IP + UDP headers, for packets that repeat them).
//! Must not: allocate (the masked header copies live on the stack).

use crate::error::{Error, Result};
use crate::roce::bth::BTH_LEN;
use crate::roce::ip::{IpSpec, MAX_IP_UDP_HDR_LEN, UDP_HDR_LEN, UdpPorts, split_ip_udp};

/// Size of the ICRC trailer (rxe `RXE_ICRC_SIZE`).
pub const ICRC_LEN: usize = 4;

/// The CRC-32 of the eight `0xff` bytes standing for the masked LRH, as a finished CRC value
/// (`crc32fast::Hasher::new_with_initial` continues from it). rxe starts its register at
/// `0xdebb20e3` (`rxe_icrc.c`), the same state before inversion; a test checks the value.
const LRH_MASK_CRC: u32 = 0x2144_df1c;

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

/// Errors unless `ip_udp` has the length of an IPv4 + UDP or IPv6 + UDP header.
fn check_hdrs_len(ip_udp: &[u8]) -> Result<()> {
    if ip_udp.len() < UDP_HDR_LEN + 20 {
        return Err(Error::Truncated {
            what: "IP + UDP headers",
            need: UDP_HDR_LEN + 20,
            got: ip_udp.len(),
        });
    }
    if ip_udp.len() > MAX_IP_UDP_HDR_LEN {
        return Err(Error::Malformed {
            what: "roce ip+udp header",
            reason: "longer than an IPv6 + UDP header",
        });
    }
    Ok(())
}

/// A copy of `bth` (exactly [`BTH_LEN`] bytes) with its FECN/BECN/reserved byte masked.
fn masked_bth(bth: &[u8]) -> Result<[u8; BTH_LEN]> {
    let Ok(mut b) = <[u8; BTH_LEN]>::try_from(bth) else {
        return Err(Error::Truncated {
            what: "BTH",
            need: BTH_LEN,
            got: bth.len(),
        });
    };
    b[BTH_MASKED] = 0xff; // FECN, BECN, resv6a (rxe: bth->qpn |= ~BTH_QPN_MASK)
    Ok(b)
}

/// The BTH byte the ICRC covers as all ones: FECN, BECN and the reserved bits in front of the
/// destination QP (rxe `rxe_icrc_hdr`: `bth->qpn |= cpu_to_be32(~BTH_QPN_MASK)`).
const BTH_MASKED: usize = 4;

/// The ICRC's CRC state after the masked LRH and one packet's masked IP + UDP headers: every
/// packet with these headers, byte for byte (a flow's ACKs, its equal-size WRITEs), starts
/// from it.
#[derive(Debug, Clone)]
pub struct IcrcHeaderState(crc32fast::Hasher);

impl IcrcHeaderState {
    /// The state after headers `ip_udp` (unmasked, as [`IpSpec::write_ip_udp`] writes them:
    /// 28 or 48 bytes). Errors if they have the wrong length.
    pub fn new(ip_udp: &[u8]) -> Result<Self> {
        check_hdrs_len(ip_udp)?;
        let n = ip_udp.len();
        let mut hdrs = [0u8; MAX_IP_UDP_HDR_LEN];
        hdrs[..n].copy_from_slice(ip_udp);
        mask_ip_udp(&mut hdrs[..n]);
        let mut h = crc32fast::Hasher::new_with_initial(LRH_MASK_CRC);
        h.update(&hdrs[..n]);
        Ok(Self(h))
    }

    /// The ICRC of the packet with these headers whose UDP payload up to its ICRC is
    /// `covered` (BTH first): [`compute`]'s value, hashed in one piece. The BTH's
    /// FECN/BECN/reserved byte is set to all ones while it is hashed and put back after, so
    /// `covered` is left as it was. Errors if `covered` is shorter than a BTH.
    pub fn icrc_in_place(&self, covered: &mut [u8]) -> Result<u32> {
        let Some(byte) = covered
            .get(BTH_MASKED)
            .copied()
            .filter(|_| covered.len() >= BTH_LEN)
        else {
            return Err(Error::Truncated {
                what: "roce udp payload (BTH)",
                need: BTH_LEN,
                got: covered.len(),
            });
        };
        let mut h = self.0.clone();
        covered[BTH_MASKED] = 0xff;
        h.update(covered);
        covered[BTH_MASKED] = byte;
        Ok(h.finalize())
    }
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
    let mut h = IcrcHasher::new(ip_udp, &roce[..BTH_LEN])?;
    h.update(&roce[BTH_LEN..roce.len() - ICRC_LEN]);
    Ok(h.finish())
}

/// The ICRC of one packet fed in pieces: the IP + UDP headers and the BTH (masked as
/// [`compute`] masks them), then every byte after the BTH up to the ICRC in any number of
/// [`IcrcHasher::update`] calls (extension headers, payload pieces, pad). For a sender that
/// transmits a packet as a gather list and never assembles it. Gives exactly [`compute`]'s
/// value for the concatenated packet.
#[derive(Debug, Clone)]
pub struct IcrcHasher(crc32fast::Hasher);

impl IcrcHasher {
    /// Starts the CRC with the (unmasked) IP + UDP headers `ip_udp` (28 or 48 bytes, as
    /// [`IpSpec::write_ip_udp`] writes them) and the BTH `bth`. Errors if either has the wrong
    /// length.
    pub fn new(ip_udp: &[u8], bth: &[u8]) -> Result<Self> {
        check_hdrs_len(ip_udp)?;
        let b = masked_bth(bth)?;
        // The masked headers and the BTH in one buffer, fed in one update from the CRC state
        // after the eight 0xff bytes of the masked LRH (rxe's seed).
        let n = ip_udp.len();
        let mut buf = [0u8; MAX_IP_UDP_HDR_LEN + BTH_LEN];
        buf[..n].copy_from_slice(ip_udp);
        mask_ip_udp(&mut buf[..n]);
        buf[n..n + BTH_LEN].copy_from_slice(&b);
        let mut h = crc32fast::Hasher::new_with_initial(LRH_MASK_CRC);
        h.update(&buf[..n + BTH_LEN]);
        Ok(Self(h))
    }

    /// Feeds the next bytes after the BTH.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The ICRC (its wire bytes are `to_le_bytes()`).
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
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
    let mut hdrs = [0u8; MAX_IP_UDP_HDR_LEN];
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
    use crate::roce::{BthFields, BthOpcode, ExtFields, IpSpec, PacketSpec, emit};

    /// An emitted packet (IPv6 or IPv4-mapped GIDs) with `bth`, `ext` and `payload`, and its
    /// IP + UDP header length.
    fn packet(
        v6: bool,
        bth: BthFields,
        ext: ExtFields,
        payload: &[u8],
    ) -> (std::vec::Vec<u8>, usize) {
        let (s, d) = if v6 {
            ([0x20; 16], [0x21; 16])
        } else {
            (
                crate::roce::ip::ipv4_to_gid([10, 0, 0, 1]),
                crate::roce::ip::ipv4_to_gid([10, 0, 0, 2]),
            )
        };
        let spec = PacketSpec {
            ip: IpSpec::from_gids(&s, &d).unwrap(),
            ports: super::UdpPorts {
                src: 0xc001,
                dst: 4791,
            },
            bth: BthFields {
                pkey: 0xffff,
                dest_qp: 0x12,
                psn: 5,
                ..bth
            },
            ext,
            payload,
        };
        let mut pkt = std::vec![0u8; spec.packet_len().unwrap()];
        emit(&spec, &mut pkt).unwrap();
        (pkt, spec.ip.header_len() + super::UDP_HDR_LEN)
    }

    #[test]
    fn the_lrh_seed_is_the_crc_of_eight_ones_bytes_and_rxes_register() {
        assert_eq!(super::LRH_MASK_CRC, crc32fast::hash(&[0xff; 8]));
        // rxe_icrc.c starts crc32_le (no inversion) from 0xdebb20e3: the same register.
        assert_eq!(!super::LRH_MASK_CRC, 0xdebb_20e3);
    }

    #[test]
    fn a_packet_fed_in_pieces_has_the_icrc_of_the_whole() {
        use crate::roce::Reth;
        for v6 in [false, true] {
            let payload: std::vec::Vec<u8> = (0..301u32).map(|i| (i * 7) as u8).collect();
            let bth = BthFields {
                opcode: BthOpcode::RC_RDMA_WRITE_FIRST,
                ..BthFields::default()
            };
            let ext = ExtFields {
                reth: Some(Reth::new(0x1000, 7, 9000)),
                ..ExtFields::default()
            };
            let (pkt, hl) = packet(v6, bth, ext, &payload);
            let mut h = super::IcrcHasher::new(&pkt[..hl], &pkt[hl..hl + super::BTH_LEN]).unwrap();
            let body = &pkt[hl + super::BTH_LEN..pkt.len() - super::ICRC_LEN];
            let (a, b) = body.split_at(100);
            h.update(a);
            h.update(b);
            assert_eq!(h.finish(), super::compute(&pkt).unwrap(), "v6 {v6}");
        }
    }

    #[test]
    fn a_header_state_gives_the_hashers_icrc_for_every_kind_whatever_the_masked_bth_byte() {
        // Six header kinds, IPv4 and IPv6; BTHs that differ only in byte 4 (masked).
        for k in 0..6u8 {
            let n = if k % 2 == 0 { 28 } else { 48 };
            let mut hdrs: std::vec::Vec<u8> =
                (0..n as u8).map(|i| i.wrapping_mul(31) ^ k).collect();
            hdrs[0] = if n == 28 { 0x45 } else { 0x60 | k };
            let mut bth = [k, 1, 2, 3, k, 5, 6, 7, 8, 9, 10, 11];
            let body = [k ^ 0x5a; 13];
            let mut a = super::IcrcHasher::new(&hdrs, &bth).unwrap();
            a.update(&body);
            // The masked BTH byte differs: the ICRC must not.
            bth[4] = !bth[4];
            let mut covered = bth.to_vec();
            covered.extend_from_slice(&body);
            let b = super::IcrcHeaderState::new(&hdrs)
                .unwrap()
                .icrc_in_place(&mut covered)
                .unwrap();
            assert_eq!(a.finish(), b, "kind {k}");
        }
    }

    #[test]
    fn an_icrc_computed_in_place_equals_compute_and_leaves_the_bytes_as_they_were() {
        for v6 in [false, true, false, true] {
            for len in [0usize, 8, 333] {
                let payload: std::vec::Vec<u8> = (0..len as u32).map(|i| (i * 13) as u8).collect();
                let bth = BthFields {
                    opcode: BthOpcode::RC_SEND_ONLY,
                    fecn: true,
                    ..BthFields::default()
                };
                let (mut pkt, hl) = packet(v6, bth, ExtFields::default(), &payload);
                let want = super::compute(&pkt).unwrap();
                let before = pkt.clone();
                let end = pkt.len() - super::ICRC_LEN;
                let (ip_udp, rest) = pkt.split_at_mut(hl);
                let state = super::IcrcHeaderState::new(ip_udp).unwrap();
                let got = state.icrc_in_place(&mut rest[..end - hl]).unwrap();
                assert_eq!(got, want, "v6 {v6} len {len}");
                assert_eq!(pkt, before);
            }
        }
    }

    #[test]
    fn a_header_state_refuses_headers_of_neither_length_and_a_body_shorter_than_a_bth() {
        assert!(super::IcrcHeaderState::new(&[0x45; 27]).is_err());
        assert!(super::IcrcHeaderState::new(&[0x60; 49]).is_err());
        let state = super::IcrcHeaderState::new(&[0x45; 28]).unwrap();
        assert!(state.icrc_in_place(&mut [0; 11]).is_err());
    }
}
