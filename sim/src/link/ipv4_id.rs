//! How the ICRC of an IPv4 RoCEv2 packet depends on its IP ID: re-stamping an ID by XOR, and
//! recovering the ID a sender hashed into the ICRC, which a UDP socket does not report — with
//! the linear algebra done once per packet length.
//!
//! Owns: [`Ipv4IdSolver`] (per-length single-bit differences and elimination bases) and
//! [`recover_ipv4_id`]. Must not: touch sockets or rebuild headers (the UDP link does both
//! and asks this module for deltas and IDs only).
//!
//! Linux rxe fills the ID with `__ip_select_ident` (random) in `rxe_net.c` `prepare_ipv4_hdr`
//! before `rxe_icrc_generate`, and `rxe_icrc.c` `rxe_icrc_hdr` does not mask it. The ICRC is a
//! CRC-32, affine in its input: `icrc(id) = icrc(0) ^ delta(id)`, where `delta` is linear in
//! the 16 bits of `id` and its 16 single-bit values depend on the packet's length alone. They
//! are computed (16 CRCs of a zero message) and reduced to an elimination basis over GF(2)
//! the first time a length is seen; then re-stamping an ID costs an XOR, and recovering a
//! received packet's ID one CRC (with ID 0) and 32 XOR steps: against rxe every packet needs
//! the recovery, fast enough that ACKs keep well inside rxe's retransmit timer.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

use bypass_hw::roce::icrc;
use bypass_hw::roce::{IpSpec, Ipv4Spec, UdpPorts};

/// The most packet lengths kept (a full cache is emptied and refilled; a flow has a handful of
/// lengths: MTU-sized packets, ACKs and each message's last packet).
const MAX_LENGTHS: usize = 64;

/// For each bit `b` of the CRC difference, the combination whose highest set bit is `b`:
/// (its CRC difference, the ID bits that make it).
type Basis = [Option<(u32, u16)>; 32];

/// What one UDP payload length needs: `delta` of each ID bit, and their elimination basis.
#[derive(Debug, Clone, Copy)]
struct PerLength {
    bits: [u32; 16],
    basis: Basis,
}

/// The hasher of the per-length map: its keys are packet lengths the link itself measured, not
/// chosen by a peer to collide (a sender can only pick among a few thousand lengths, and a
/// full map is emptied anyway), so the std map's SipHash, paid for every received ID the link
/// solves for, buys nothing here. One
/// multiplication (Fibonacci hashing) spreads lengths into the high bits; `finish` folds them
/// onto the low bits, which pick the bucket (the low bits of a product depend only on the
/// low bits of the length: 16 and 4112 would share a bucket).
#[derive(Debug, Default, Clone, Copy)]
struct LenHasher(u64);

impl Hasher for LenHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The ICRC's dependence on the IPv4 ID, by UDP payload length (see the module comment).
#[derive(Debug, Default)]
pub struct Ipv4IdSolver {
    by_len: HashMap<usize, PerLength, BuildHasherDefault<LenHasher>>,
    zeros: Vec<u8>,
    built: u64,
}

/// The single-bit deltas and basis of UDP payloads of `len` bytes (16 + 1 CRCs over `zeros`,
/// grown to `len` zero bytes).
fn compute_per_length(zeros: &mut Vec<u8>, len: usize) -> Option<PerLength> {
    if zeros.len() < len {
        zeros.resize(len, 0);
    }
    let payload = zeros.get(..len)?;
    let ports = UdpPorts { src: 0, dst: 0 };
    let zero = Ipv4Spec {
        dont_fragment: true,
        ..Ipv4Spec::default()
    };
    let c0 = crc_with_id(&zero, ports, payload, 0)?;
    let mut bits = [0u32; 16];
    for (k, v) in bits.iter_mut().enumerate() {
        *v = crc_with_id(&zero, ports, payload, 1 << k)? ^ c0;
    }
    Some(PerLength {
        bits,
        basis: basis_of(&bits),
    })
}

impl Ipv4IdSolver {
    /// A solver with nothing computed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The single-bit deltas and basis of UDP payloads of `len` bytes (computed on first use),
    /// by reference: a table is ~300 bytes and is looked up for every re-stamped or received
    /// packet.
    fn per_length(&mut self, len: usize) -> Option<&PerLength> {
        let Self {
            by_len,
            zeros,
            built,
        } = self;
        if by_len.len() >= MAX_LENGTHS && !by_len.contains_key(&len) {
            by_len.clear();
        }
        match by_len.entry(len) {
            Entry::Occupied(e) => Some(e.into_mut()),
            Entry::Vacant(v) => {
                let p = compute_per_length(zeros, len)?;
                *built += 1;
                Some(v.insert(p))
            }
        }
    }

    /// `delta(id)` for UDP payloads of `len` bytes: what XOR turns the ICRC of ID 0 into the
    /// ICRC of ID `id`.
    pub fn delta(&mut self, len: usize, id: u16) -> Option<u32> {
        let p = self.per_length(len)?;
        Some(
            p.bits
                .iter()
                .enumerate()
                .filter(|&(k, _)| id >> k & 1 == 1)
                .fold(0, |acc, (_, &d)| acc ^ d),
        )
    }

    /// The ID whose `delta` is `diff` for UDP payloads of `len` bytes, if one is.
    pub fn solve(&mut self, len: usize, diff: u32) -> Option<u16> {
        let basis = &self.per_length(len)?.basis;
        let (mut t, mut id) = (diff, 0u16);
        for b in (0..32).rev() {
            if t >> b & 1 == 1 {
                let (bv, bm) = basis.get(b).copied().flatten()?;
                t ^= bv;
                id ^= bm;
            }
        }
        (t == 0).then_some(id)
    }

    /// The IPv4 ID the sender hashed into the ICRC of `payload` (the UDP payload, BTH …
    /// ICRC) sent with header `ip` (its `id` ignored) and `ports`: 0 when the packet checks
    /// with ID 0 (what a socket with `IP_PMTUDISC_DO` sends), else the one ID whose ICRC
    /// matches, or `None` when no ID explains the ICRC (a corrupted packet; such packets keep
    /// 16 of the ICRC's 32 bits of protection against corruption).
    pub fn recover(&mut self, ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8]) -> Option<u16> {
        let want = icrc::wire_value(payload)?;
        let c0 = crc_with_id(ip, ports, payload, 0)?;
        if c0 == want {
            return Some(0);
        }
        self.solve(payload.len(), want ^ c0)
    }

    /// How many lengths were computed (again after the cache was emptied): what the cache
    /// saves is every other packet's 16 CRCs.
    pub fn bases_built(&self) -> u64 {
        self.built
    }
}

fn crc_with_id(ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8], id: u16) -> Option<u32> {
    icrc::compute_udp_payload(&IpSpec::V4(Ipv4Spec { id, ..*ip }), ports, payload).ok()
}

/// Gaussian elimination of the 16 single-bit differences.
fn basis_of(bits: &[u32; 16]) -> Basis {
    let mut basis: Basis = [None; 32];
    for (k, &d) in bits.iter().enumerate() {
        let (mut v, mut m) = (d, 1u16 << k);
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
    basis
}

/// The IPv4 ID the sender hashed into the ICRC of `payload`, which a UDP socket does not
/// report: 0 when the packet checks with ID 0 (what an unconnected socket with
/// `IP_PMTUDISC_DO` sends), else the one ID whose ICRC matches, or `None`.
///
/// Linux rxe fills the ID with `__ip_select_ident` (random) in `rxe_net.c`
/// `prepare_ipv4_hdr` before `rxe_icrc_generate`, and `rxe_icrc.c` `rxe_icrc_hdr` does not
/// mask it. The ICRC is a CRC-32, affine in its input, so `icrc(id) ^ icrc(0)` is linear in
/// the 16 bits of `id`: the ID follows from the 16 single-bit differences by Gaussian
/// elimination over GF(2) (17 CRCs, only for packets that fail with ID 0). Such packets keep
/// 16 of the ICRC's 32 bits of protection against corruption. One packet at a time: the link
/// keeps an [`Ipv4IdSolver`], which computes the 16 differences once per packet length.
pub fn recover_ipv4_id(ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8]) -> Option<u16> {
    Ipv4IdSolver::new().recover(ip, ports, payload)
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
        assert_eq!(s.bases_built(), 0, "ID 0 needs no per-length work");
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
        assert!(s.by_len.len() <= MAX_LENGTHS);
    }
}
