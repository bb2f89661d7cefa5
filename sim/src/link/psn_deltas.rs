//! How a WRITE packet's ICRC changes with its PSN and AckReq, so that the middle packets of a
//! gathered burst (identical headers but for those) share one CRC pass over their headers.
//!
//! Owns: [`PsnDeltas`] (per length of what follows the BTH: the ICRC difference for any change
//! of the BTH's PSN, as three 256-entry tables, and of its AckReq) and [`PsnDeltaCache`] (the last
//! few lengths). Must not: build headers (`Burst::write_headers` does) or mask them
//! (`IcrcHasher` does, as `icrc::compute`).
//!
//! Why it is exact: the ICRC is a CRC-32 (rxe `rxe_icrc.c` `rxe_icrc_hdr`/`rxe_crc32`: the
//! masked pseudo-headers, then the rest of the packet), and a CRC over messages of one length
//! is affine in the message bits: `crc(x ^ d) = crc(x) ^ crc(d) ^ crc(0)`. Two packets whose
//! masked bytes differ only in the BTH's AckReq/PSN bytes (the masks do not touch those:
//! `rxe_icrc_hdr` masks the IP header's TOS/TTL/checksum, the UDP checksum and the BTH's
//! FECN/BECN/resv6a byte) and that have the same number of bytes after the BTH therefore have
//! ICRCs that differ by a linear function of the XOR of those bytes alone, whatever the rest
//! of the packets hold. That function is found once per length by flipping each of the 25
//! bits through the `Bth` view (as the link's IPv4 ID re-stamp does for the ID,
//! `link::ipv4_id`).

use bypass_hw::roce::Bth;
use bypass_hw::roce::icrc::IcrcHasher;
use zerocopy::IntoBytes;

/// Zeroes fed as the bytes after the BTH when the deltas are measured.
const ZEROES: [u8; 1024] = [0; 1024];

/// Lengths kept at once: a flow's middle packets have one length (its path MTU); a few QPs of
/// different path MTUs sending at once do not make the link measure again per burst.
const SLOTS: usize = 4;

/// The ICRC differences for packets with `rest` bytes between the BTH and the ICRC.
#[derive(Debug)]
pub(crate) struct PsnDeltas {
    rest: usize,
    /// `psn[k][v]`: the ICRC change when byte `k` (little end first) of the PSN changes by
    /// XOR `v`.
    psn: [[u32; 256]; 3],
    /// The ICRC change when AckReq flips.
    ack_req: u32,
}

impl PsnDeltas {
    /// Measures the deltas on a packet with IP + UDP header `ip_udp`, BTH `bth` and `rest`
    /// zero bytes after it (any headers give the same deltas). `None` if the hasher refuses
    /// the headers.
    fn measure(ip_udp: &[u8], bth: &Bth, rest: usize) -> Option<Self> {
        let icrc = |bth: &Bth| -> Option<u32> {
            let mut h = IcrcHasher::new(ip_udp, bth.as_bytes()).ok()?;
            let mut left = rest;
            while left > 0 {
                let n = left.min(ZEROES.len());
                h.update(ZEROES.get(..n)?);
                left -= n;
            }
            Some(h.finish())
        };
        let base = icrc(bth)?;
        let mut flipped = *bth;
        flipped.set_ack_req(!bth.ack_req());
        let ack_req = icrc(&flipped)? ^ base;
        let mut psn = [[0u32; 256]; 3];
        for (k, table) in psn.iter_mut().enumerate() {
            let mut bits = [0u32; 8];
            for (bit, d) in bits.iter_mut().enumerate() {
                let mut flipped = *bth;
                flipped.set_psn(bth.psn() ^ (1 << (8 * k + bit))).ok()?;
                *d = icrc(&flipped)? ^ base;
            }
            // Linear: the change for `v` is the XOR of its bits' changes.
            for v in 1..256usize {
                let low = v.trailing_zeros() as usize;
                let rest_of_v = table.get(v & (v - 1)).copied()?;
                *table.get_mut(v)? = rest_of_v ^ bits.get(low).copied()?;
            }
        }
        Some(Self { rest, psn, ack_req })
    }

    /// The ICRC change from a packet with BTH `from` to one with BTH `to` (the same but for
    /// AckReq and PSN) and as many bytes after it.
    #[inline]
    pub(crate) fn delta(&self, from: &Bth, to: &Bth) -> u32 {
        let [b0, b1, b2, _] = (from.psn() ^ to.psn()).to_le_bytes();
        let [t0, t1, t2] = &self.psn;
        let ack = if from.ack_req() == to.ack_req() {
            0
        } else {
            self.ack_req
        };
        // A byte indexes a 256-entry table: always there.
        let at = |t: &[u32; 256], b: u8| t.get(usize::from(b)).copied().unwrap_or(0);
        at(t0, b0) ^ at(t1, b1) ^ at(t2, b2) ^ ack
    }
}

/// [`PsnDeltas`] of the last few lengths seen (kept across rounds: measuring one costs 26
/// CRC passes over the length).
#[derive(Debug, Default)]
pub(crate) struct PsnDeltaCache {
    slots: Vec<PsnDeltas>,
    /// The slot the next new length replaces once all are in use.
    next: usize,
    /// The slot the last look-up found.
    hot: usize,
}

impl PsnDeltaCache {
    /// The deltas for `rest` bytes after the BTH, measured on `ip_udp` and `bth` the first
    /// time (see [`PsnDeltas::measure`]).
    #[inline]
    pub(crate) fn get(&mut self, ip_udp: &[u8], bth: &Bth, rest: usize) -> Option<&PsnDeltas> {
        if self.slots.get(self.hot).is_some_and(|s| s.rest == rest) {
            return self.slots.get(self.hot);
        }
        self.get_slow(ip_udp, bth, rest)
    }

    /// [`PsnDeltaCache::get`] when the last slot found is not for `rest`.
    #[inline(never)]
    fn get_slow(&mut self, ip_udp: &[u8], bth: &Bth, rest: usize) -> Option<&PsnDeltas> {
        if let Some(at) = self.slots.iter().position(|s| s.rest == rest) {
            self.hot = at;
            return self.slots.get(at);
        }
        let d = PsnDeltas::measure(ip_udp, bth, rest)?;
        if self.slots.len() < SLOTS {
            self.slots.push(d);
            self.hot = self.slots.len() - 1;
            return self.slots.last();
        }
        let at = self.next;
        self.next = (self.next + 1) % SLOTS;
        self.hot = at;
        let slot = self.slots.get_mut(at)?;
        *slot = d;
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::roce::ip::ipv4_to_gid;
    use bypass_hw::roce::{BTH_LEN, BthFields, BthOpcode, IpSpec, UdpPorts};

    fn bth(psn: u32, ack_req: bool) -> Bth {
        Bth::from_fields(&BthFields {
            opcode: BthOpcode::RC_RDMA_WRITE_MIDDLE,
            pkey: 0xffff,
            dest_qp: 0x12345,
            psn,
            ack_req,
            ..BthFields::default()
        })
        .unwrap()
    }

    fn icrc(ip_udp: &[u8], bth: &Bth, rest: &[u8]) -> u32 {
        let mut h = IcrcHasher::new(ip_udp, bth.as_bytes()).unwrap();
        h.update(rest);
        h.finish()
    }

    #[test]
    fn a_packets_icrc_is_its_neighbours_changed_by_the_psn_delta() {
        // rxe's IPv4 header defaults (TTL 64, DF, ID 0).
        let ip = IpSpec::from_gids(&ipv4_to_gid([10, 0, 0, 1]), &ipv4_to_gid([10, 0, 0, 2]))
            .expect("IPv4-mapped GIDs");
        let ports = UdpPorts {
            src: 0xc123,
            dst: 4791,
        };
        let mut cache = PsnDeltaCache::default();
        // Lengths beyond the slots, revisited: replaced slots are measured the same.
        for rest in [4096usize, 256, 1027, 0, 512, 1024, 4096, 256] {
            let udp_len = BTH_LEN + rest + 4;
            let mut ip_udp = vec![0u8; 28];
            ip.write_ip_udp(ports, udp_len, &mut ip_udp).unwrap();
            let from = bth(0x00ff_fff0, false);
            let payload: Vec<u8> = (0..rest).map(|i| (i * 31 + 7) as u8).collect();
            let d = cache.get(&ip_udp, &from, rest).unwrap();
            let base = icrc(&ip_udp, &from, &payload);
            for (psn, ack) in [
                (0x00ff_fff1, true),
                (0, false),
                (5, true),
                (0x00ab_cdef, false),
            ] {
                let to = bth(psn, ack);
                assert_eq!(
                    base ^ d.delta(&from, &to),
                    icrc(&ip_udp, &to, &payload),
                    "rest {rest}, psn {psn:#x}, ack_req {ack}"
                );
            }
        }
    }
}
