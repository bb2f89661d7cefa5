//! A packet rule that marks ECN-capable packets Congestion Experienced, as a congested switch
//! would: for tests and tools that drive the NP and RP without a switch model.
//!
//! Owns: [`CeMark`] (which packets it marks, how many it did). Must not: drop, delay or
//! reorder packets, or mark packets that are not ECN-capable (RFC 3168 §5: a not-ECT packet
//! is never marked); the switch's RED marking belongs to the switch model.
//!
//! Marking is the switch's (`net::ecn::mark_ce`: the ECN bits of the IPv4 TOS, the header
//! checksum recomputed, or of the IPv6 traffic class). The RoCEv2 ICRC masks those bits, so a
//! marked packet still passes its ICRC check.
//!
//! Sources: RFC 3168 (ECN codepoints), IBTA annex A17.4 (the ICRC's masked fields).

use rand_core::RngCore;

use crate::link::rule::{Packet, Rule, Verdict};
use crate::net::ecn;

/// Marks CE every `every`-th ECN-capable packet (1: all) from one sender or any.
#[derive(Debug, Clone)]
pub struct CeMark {
    every: u64,
    from: Option<usize>,
    seen: u64,
    marked: u64,
}

impl CeMark {
    /// Marks every ECN-capable packet.
    pub fn all() -> Self {
        Self::every(1)
    }

    /// Marks one ECN-capable packet in `n` (the `n`-th, `2n`-th, ...; 0 is taken as 1).
    pub fn every(n: u64) -> Self {
        Self {
            every: n.max(1),
            from: None,
            seen: 0,
            marked: 0,
        }
    }

    /// Only packets sent by device `src` (the world's id).
    pub fn from(mut self, src: usize) -> Self {
        self.from = Some(src);
        self
    }

    /// Packets it marked.
    pub fn marked(&self) -> u64 {
        self.marked
    }
}

/// Sets the ECN bits of the IP packet `b` to CE if they say ECT(0) or ECT(1), as the switch
/// marks (`net::ecn`); true if it did.
pub fn mark_ce(b: &mut [u8]) -> bool {
    ecn::is_ect(b) && ecn::mark_ce(b)
}

impl Rule for CeMark {
    fn on_packet(&mut self, pkt: &mut Packet<'_>, _rng: &mut dyn RngCore) -> Verdict {
        if self.from.is_some_and(|s| s != pkt.src) {
            return Verdict::Pass;
        }
        if !ecn::is_ect(pkt.bytes) {
            return Verdict::Pass;
        }
        self.seen += 1;
        if self.seen.is_multiple_of(self.every) && mark_ce(pkt.bytes) {
            self.marked += 1;
        }
        Verdict::Pass
    }

    fn active(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::roce::icrc;

    #[test]
    fn marking_keeps_the_ipv4_checksum_and_the_icrc_and_skips_not_ect() {
        let spec = bypass_hw::roce::CnpSpec {
            ip: bypass_hw::roce::IpSpec::from_gids(
                &bypass_hw::roce::ip::ipv4_to_gid([10, 0, 0, 1]),
                &bypass_hw::roce::ip::ipv4_to_gid([10, 0, 0, 2]),
            )
            .unwrap(),
            ports: bypass_hw::roce::UdpPorts { src: 1, dst: 4791 },
            dest_qp: 5,
        };
        let mut pkt = vec![0; spec.packet_len()];
        bypass_hw::roce::emit_cnp(&spec, &mut pkt).unwrap();
        assert!(!mark_ce(&mut pkt), "not-ECT stays");
        // Make it ECT(0) with a right checksum, then mark.
        pkt[1] = 0b10;
        pkt[10..12].fill(0);
        let c = bypass_hw::roce::ip::ipv4_checksum(&pkt[..20]);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(mark_ce(&mut pkt));
        assert_eq!(pkt[1] & 3, 3);
        assert_eq!(bypass_hw::roce::ip::ipv4_checksum(&pkt[..20]), 0);
        assert!(icrc::check(&pkt).unwrap(), "the ICRC masks the ECN bits");
        assert!(bypass_hw::roce::Cnp::parse(&pkt).is_ok());
    }
}
