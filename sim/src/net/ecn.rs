//! The IP header bits a switch reads and writes: traffic class (for the priority), ECN
//! codepoint, CE marking, and RED's marking decision.
//!
//! Owns: [`tclass`] and [`ecn`] (read from an IPv4 or IPv6 packet), [`mark_ce`] (rewrite the
//! ECN bits to CE, fixing the IPv4 header checksum), [`red_marks`] (whether RED marks at a
//! queue depth, with one draw from the caller's RNG). Must not: touch anything past the IP
//! header. The RoCEv2 ICRC masks the whole TOS / traffic class byte, so marking leaves it
//! valid (`bypass_hw::roce::icrc`).
//!
//! Packets here are what `Frame::Wire` carries: an IP packet from its first header byte.
//!
//! Sources: RFC 3168 §5 (ECN field: 01/10 ECT, 11 CE), RFC 791 (IPv4 TOS byte, header
//! checksum), RFC 8200 §7 (IPv6 traffic class spans bytes 0-1), RFC 1624 (checksum update;
//! here the checksum is recomputed with `bypass_hw::roce::ip::ipv4_checksum`), Floyd and
//! Jacobson 1993 (RED's linear ramp).

use bypass_hw::roce::ip::ipv4_checksum;
use rand_core::RngCore;

use super::topology::RedConfig;

pub use bypass_hw::roce::ip::ECN_CE;

/// The IPv4 TOS / IPv6 traffic class of `pkt`, or `None` if it is not IPv4 or IPv6.
pub fn tclass(pkt: &[u8]) -> Option<u8> {
    let b0 = *pkt.first()?;
    let b1 = *pkt.get(1)?;
    match b0 >> 4 {
        4 => Some(b1),
        6 => Some(((b0 & 0x0f) << 4) | (b1 >> 4)),
        _ => None,
    }
}

/// The ECN codepoint (two bits) of `pkt`, or `None` if it is not IP.
pub fn ecn(pkt: &[u8]) -> Option<u8> {
    tclass(pkt).map(|t| t & 0b11)
}

/// Whether `pkt` is ECN-capable (ECT(0) or ECT(1); CE is already marked).
pub fn is_ect(pkt: &[u8]) -> bool {
    matches!(ecn(pkt), Some(0b01 | 0b10))
}

/// Marks `pkt` CE; an IPv4 header's checksum is recomputed. Returns false (and changes
/// nothing) if the packet is not IP or its IPv4 header is truncated.
pub fn mark_ce(pkt: &mut [u8]) -> bool {
    let Some(&b0) = pkt.first() else {
        return false;
    };
    match b0 >> 4 {
        4 => {
            let ihl = usize::from(b0 & 0x0f) * 4;
            let Some(hdr) = pkt.get_mut(..ihl).filter(|h| h.len() >= 20) else {
                return false;
            };
            hdr[1] |= ECN_CE;
            hdr[10] = 0;
            hdr[11] = 0;
            let c = ipv4_checksum(hdr);
            hdr[10..12].copy_from_slice(&c.to_be_bytes());
            true
        }
        6 => match pkt.get_mut(1) {
            Some(b1) => {
                // The traffic class's low two bits are bits 5..4 of byte 1.
                *b1 |= ECN_CE << 4;
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// Whether RED marks a packet arriving at a queue holding `queued` bytes: never below
/// `kmin_bytes`, always at or above `kmax_bytes`, in between with probability rising linearly
/// from 0 to `pmax`, decided by one draw from `rng` (only in between, so runs that never
/// reach the ramp draw nothing).
pub fn red_marks(red: &RedConfig, queued: u64, rng: &mut dyn RngCore) -> bool {
    if queued < red.kmin_bytes {
        return false;
    }
    if queued >= red.kmax_bytes {
        return true;
    }
    let span = red.kmax_bytes.saturating_sub(red.kmin_bytes).max(1) as f64;
    let p = red.pmax * (queued - red.kmin_bytes) as f64 / span;
    // 53 random bits: a uniform draw in [0, 1).
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    u < p
}
