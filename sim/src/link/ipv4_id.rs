//! Recovering the IPv4 ID a RoCEv2 sender hashed into the ICRC, which a UDP socket does not
//! report, with the linear algebra done once per packet length.
//!
//! Owns: [`Ipv4IdSolver`] (per-length elimination bases). Must not: touch sockets or rebuild
//! headers (the UDP link, `udp.rs`, does both and asks this module for the ID only).
//!
//! Linux rxe fills the ID with `__ip_select_ident` (random) in `rxe_net.c`
//! `prepare_ipv4_hdr` before `rxe_icrc_generate`, and `rxe_icrc.c` `rxe_icrc_hdr` does not
//! mask it. The ICRC is a CRC-32, affine in its input: for two inputs of the same length,
//! `crc(a) ^ crc(b)` depends only on `a ^ b`. So `icrc(id) ^ icrc(0)` is linear in the 16
//! bits of `id`, and its 16 single-bit differences depend on the packet's length alone, not
//! on its addresses, ports or payload. They are computed (16 CRCs) and reduced to an
//! elimination basis over GF(2) the first time a length is seen; every later packet of that
//! length costs one CRC (the one with ID 0) and 32 XOR steps. Against rxe every packet
//! needs this (its IDs are random), so the cache turns 17 CRCs of every received packet into
//! one: measured in `scripts/guest-test.sh rxe`, where 17 CRCs per 1 KiB packet in a debug
//! build delayed ACKs past rxe's 67 ms retransmit timer.

use std::collections::HashMap;

use bypass_hw::roce::icrc;
use bypass_hw::roce::{IpSpec, Ipv4Spec, UdpPorts};

/// The most packet lengths whose bases are kept (a full cache is emptied and refilled;
/// a flow has a handful of lengths: MTU-sized packets, ACKs and each message's last packet).
const MAX_LENGTHS: usize = 64;

/// For each bit `b` of the CRC difference, the combination whose highest set bit is `b`:
/// (its CRC difference, the ID bits that make it).
type Basis = [Option<(u32, u16)>; 32];

/// Finds the IPv4 ID of received RoCEv2 packets from their ICRC, caching the per-length
/// elimination basis (see the module comment).
#[derive(Debug, Default)]
pub struct Ipv4IdSolver {
    bases: HashMap<usize, Basis>,
    built: u64,
}

impl Ipv4IdSolver {
    /// A solver with no basis yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The IPv4 ID the sender hashed into the ICRC of `payload` (the UDP payload, BTH …
    /// ICRC) sent with header `ip` (its `id` ignored) and `ports`: 0 when the packet checks
    /// with ID 0 (what a socket with `IP_PMTUDISC_DO` sends, so every bypass peer), else the
    /// one ID whose ICRC matches, or `None` when no ID explains the ICRC (a corrupted packet;
    /// such packets keep 16 of the ICRC's 32 bits of protection against corruption).
    pub fn recover(&mut self, ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8]) -> Option<u16> {
        let want = icrc::wire_value(payload)?;
        let c0 = crc_with_id(ip, ports, payload, 0)?;
        if c0 == want {
            return Some(0);
        }
        let basis = match self.bases.get(&payload.len()) {
            Some(b) => *b,
            None => {
                let b = build_basis(ip, ports, payload, c0)?;
                if self.bases.len() >= MAX_LENGTHS {
                    self.bases.clear();
                }
                self.bases.insert(payload.len(), b);
                self.built += 1;
                b
            }
        };
        let (mut t, mut id) = (want ^ c0, 0u16);
        for b in (0..32).rev() {
            if t >> b & 1 == 1 {
                let (bv, bm) = basis.get(b).copied().flatten()?;
                t ^= bv;
                id ^= bm;
            }
        }
        (t == 0).then_some(id)
    }

    /// How many bases were computed (one per packet length seen, again after the cache was
    /// emptied): what the cache saves is every other packet's 16 CRCs.
    pub fn bases_built(&self) -> u64 {
        self.built
    }
}

fn crc_with_id(ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8], id: u16) -> Option<u32> {
    icrc::compute_udp_payload(&IpSpec::V4(Ipv4Spec { id, ..*ip }), ports, payload).ok()
}

/// Gaussian elimination of the 16 single-bit differences `icrc(1 << k) ^ icrc(0)`.
fn build_basis(ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8], c0: u32) -> Option<Basis> {
    let mut basis: Basis = [None; 32];
    for k in 0..16 {
        let (mut v, mut m) = (crc_with_id(ip, ports, payload, 1 << k)? ^ c0, 1u16 << k);
        for b in (0..32).rev() {
            if v >> b & 1 == 0 {
                continue;
            }
            match basis.get(b).copied().flatten() {
                Some((bv, bm)) => {
                    v ^= bv;
                    m ^= bm;
                }
                None => {
                    if let Some(slot) = basis.get_mut(b) {
                        *slot = Some((v, m));
                    }
                    break;
                }
            }
        }
    }
    Some(basis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::roce::ROCE_V2_UDP_DPORT;
    use bypass_hw::roce::ip::DEFAULT_TTL;

    /// A UDP payload (a BTH, `len` bytes of `fill`, the ICRC) as rxe would send it with IPv4
    /// ID `id` from `src`.
    fn rxe_payload(src: [u8; 4], id: u16, len: usize, fill: u8) -> (Ipv4Spec, UdpPorts, Vec<u8>) {
        let ip = Ipv4Spec {
            src,
            dst: [10, 99, 0, 1],
            tos: 0,
            ttl: DEFAULT_TTL,
            id,
            dont_fragment: true,
        };
        let ports = UdpPorts {
            src: 0xc000 | u16::from(fill),
            dst: ROCE_V2_UDP_DPORT,
        };
        // BTH: SEND_ONLY to QP 0x11, P_Key 0xffff, PSN 7; the payload; room for the ICRC.
        let mut p = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 7];
        p.extend(std::iter::repeat_n(fill, len));
        p.extend([0; 4]);
        let c = icrc::compute_udp_payload(&IpSpec::V4(ip), ports, &p).unwrap();
        let n = p.len();
        p[n - 4..].copy_from_slice(&c.to_le_bytes());
        (Ipv4Spec { id: 0, ..ip }, ports, p)
    }

    #[test]
    fn every_packet_of_one_length_is_solved_with_one_basis() {
        let mut s = Ipv4IdSolver::new();
        // Different addresses, ports, payloads and IDs, one length: one basis serves all.
        for (i, id) in [0xbeef_u16, 1, 0x8000, 0xffff, 0x1234]
            .into_iter()
            .enumerate()
        {
            let (ip, ports, p) = rxe_payload([10, 99, 0, 2 + i as u8], id, 1024, i as u8);
            assert_eq!(s.recover(&ip, ports, &p), Some(id), "packet {i}");
        }
        assert_eq!(s.bases_built(), 1);
        // Another length needs its own.
        let (ip, ports, p) = rxe_payload([10, 99, 0, 2], 0x4242, 4, 9);
        assert_eq!(s.recover(&ip, ports, &p), Some(0x4242));
        assert_eq!(s.bases_built(), 2);
    }

    #[test]
    fn id_zero_needs_no_basis_and_a_corrupted_packet_has_no_id() {
        let mut s = Ipv4IdSolver::new();
        let (ip, ports, p) = rxe_payload([10, 99, 0, 2], 0, 64, 3);
        assert_eq!(s.recover(&ip, ports, &p), Some(0));
        assert_eq!(s.bases_built(), 0);
        let (ip, ports, mut p) = rxe_payload([10, 99, 0, 2], 0x7777, 64, 3);
        p[20] ^= 0x40;
        // A flipped payload bit is explained by no ID: 16 of 32 CRC bits still catch it.
        assert_eq!(s.recover(&ip, ports, &p), None);
    }

    #[test]
    fn a_full_cache_starts_over_and_still_solves() {
        let mut s = Ipv4IdSolver::new();
        for len in 1..=MAX_LENGTHS + 1 {
            let (ip, ports, p) = rxe_payload([10, 99, 0, 2], len as u16, len, 1);
            assert_eq!(s.recover(&ip, ports, &p), Some(len as u16), "length {len}");
        }
        assert_eq!(s.bases_built(), MAX_LENGTHS as u64 + 1);
        assert!(s.bases.len() <= MAX_LENGTHS);
    }
}
