//! The port's Ethernet MTU on the send side: which frames the port cannot carry.
//!
//! Owns: [`oversize`] (a frame's largest packet against the port's Ethernet MTU, and whom
//! it was for). Must not: count or drop (the device does, `Device::take_frame`), build
//! packets, or know links and switches (a switch's per-link MTUs are `crate::net`'s).
//!
//! Sources: Linux `net/ipv4/ip_output.c` `ip_finish_output2` / `ip_fragment` (a DF packet
//! larger than the device MTU is not sent: `EMSGSIZE`, counted as a fragmentation failure),
//! and `include/rdma/ib_addr.h` `iboe_get_mtu` for the headers a path MTU adds
//! (`bypass_hw::roce::mtu`). The MTU counts the IP packet: IP header through ICRC, no L2.

use bypass_hw::roce::RocePacket;

use crate::frame::{Frame, dst_gid};

/// For a frame with a packet larger than `eth_mtu`: its destination QP and GID (whose
/// sender the drop is counted for); `None` when every packet fits. A burst's first packet is
/// its largest (a full MTU of payload, with RETH if it starts the message); ACKs always fit
/// (under 100 bytes; any Ethernet MTU is at least 68 and the port's at least 352 to carry
/// RoCE at all).
pub(crate) fn oversize(f: &Frame, eth_mtu: u32) -> Option<(u32, [u8; 16])> {
    let mtu = u64::from(eth_mtu);
    match f {
        Frame::Wire(b) | Frame::WireChecked(b) => {
            if b.len() as u64 <= mtu {
                return None;
            }
            let p = RocePacket::parse(b).ok();
            Some(p.map_or((0, [0; 16]), |p| (p.bth().dest_qp(), p.ip().gids().1)))
        }
        Frame::Burst(b) => {
            // Cheap test first: a burst's packets carry at most its MTU plus 80 bytes of
            // headers (IPv6 40, UDP 8, BTH 12, RETH 16, ICRC 4).
            if u64::from(b.mtu) + 80 <= mtu || b.packet_len(0) <= mtu {
                return None;
            }
            Some((b.dest_qp, dst_gid(&b.ip)))
        }
        Frame::Ack(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use bypass_hw::wqe::WqeOpcode;

    use crate::testkit::{RcConn, Wqe};

    /// A connection at path MTU 4096 whose sender's port has Ethernet MTU `eth`, with one
    /// `len`-byte RDMA WRITE posted on A.
    fn write_at(eth: u32, len: u32) -> RcConn {
        let mut c = RcConn::new(4096, 64 << 10, 0x10, 0x20);
        assert!(c.p.a.dev.set_port_mtu(1, eth));
        assert_eq!(c.p.a.dev.port_mtu(1), Some(eth));
        let w = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
            .raddr(c.b_mr.va, c.b_mr.key)
            .data(c.a_mr.key, c.a_mr.va, len)
            .finish();
        c.p.a.post_send(&mut c.a_qp, &w);
        c
    }

    #[test]
    fn a_packet_over_the_port_mtu_is_dropped_and_counted_for_device_and_qp() {
        // 3 packets of 4096 + 60/76 bytes (first with RETH) and one of 100: three dropped.
        let mut c = write_at(1500, 3 * 4096 + 100);
        // A alone: what leaves its port, not delivered (no NAK, no retransmission).
        let mut sent = Vec::new();
        while c.p.a.dev.step() {
            while let Some(p) = c.p.a.dev.take_tx() {
                sent.push(p.len());
            }
        }
        while let Some(p) = c.p.a.dev.take_tx() {
            sent.push(p.len());
        }
        assert_eq!(
            sent,
            vec![20 + 8 + 12 + 100 + 4],
            "only the last packet passes"
        );
        let qpn = c.a_qp.qpn;
        assert_eq!(c.p.a.dev.counters.tx_mtu_drops, 3);
        assert_eq!(c.p.a.dev.qp_counters(qpn).map(|q| q.tx_mtu_drops), Some(3));
        assert_eq!(c.p.b.dev.counters.tx_mtu_drops, 0);
    }

    #[test]
    fn bursts_are_checked_at_the_port_too() {
        let mut c = write_at(1500, 8 * 4096);
        let (_, packets) = c.p.run_frames();
        assert_eq!(packets, 0, "every packet is too large");
        assert_eq!(c.p.a.dev.counters.tx_mtu_drops, 8);
        // 4096 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 = 4156 fits a 4156-byte port.
        let mut c = write_at(4156, 8 * 4096);
        let (_, packets) = c.p.run_frames();
        assert!(packets >= 8, "{packets}");
        assert_eq!(c.p.a.dev.counters.tx_mtu_drops, 0);
    }

    #[test]
    fn set_port_mtu_refuses_an_unknown_port_and_clamps() {
        let mut c = RcConn::new(1024, 4096, 0, 0);
        assert!(!c.p.a.dev.set_port_mtu(3, 1500));
        assert!(c.p.a.dev.set_port_mtu(1, 20_000));
        assert_eq!(c.p.a.dev.port_mtu(1), Some(9000));
    }
}
