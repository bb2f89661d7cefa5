//! The switched network inside a `World` of real devices: packets the devices' data paths
//! build cross the switch with its timing, the packet rules (faults, the pcap tee) still
//! apply, and removing the topology returns to the fixed-latency link.

use super::port::ser_ns;
use super::*;
use crate::World;
use crate::faults::{FaultPlan, Rate};
use crate::profile::Profile;

use crate::world::tests::send_ack;

const LINK: LinkSpec = LinkSpec {
    rate_bps: 1_000_000_000,
    prop_ns: 500,
    mtu: 1_500,
};

fn world() -> World {
    let mut w = World::new(4);
    w.add_device(Profile::with_id(1));
    w.add_device(Profile::with_id(2));
    w.set_topology(Some(&Topology::single_switch(
        2,
        LINK,
        SwitchSpec::default(),
    )))
    .unwrap();
    w
}

/// An ACK's length on the wire: IPv4 + UDP + BTH + AETH + ICRC.
const ACK_LEN: usize = 20 + 8 + 12 + 4 + 4;

#[test]
fn a_devices_packet_crosses_the_switch_in_two_serialisations_and_two_delays() {
    let mut w = world();
    let gid_b = Profile::with_id(2).ports[0].gids[0];
    send_ack(&mut w, 0, gid_b, 1);
    send_ack(&mut w, 0, gid_b, 2);
    w.run_until_idle().unwrap();
    assert_eq!(w.in_flight(), 2, "inside the network");
    let ser = ser_ns(ACK_LEN, LINK.rate_bps);
    let first = 2 * (ser + LINK.prop_ns);
    w.advance(first - 1).unwrap();
    assert_eq!(w.device(1).counters.port_rcv_packets, 0);
    w.advance(1).unwrap();
    assert_eq!(w.device(1).counters.port_rcv_packets, 1);
    w.advance(ser).unwrap();
    assert_eq!(w.device(1).counters.port_rcv_packets, 2);
    assert!(w.settle(1_000_000).unwrap());
    assert_eq!((w.stats().delivered, w.in_flight()), (2, 0));
    let net = w.network().unwrap();
    let s = net.port_stats(PortRef::Nic(0)).unwrap().prio[0];
    assert_eq!(s.dequeued_bytes, 2 * ACK_LEN as u64);
    assert_eq!(
        net.port_stats(PortRef::Switch { switch: 0, port: 1 })
            .unwrap()
            .prio[0]
            .dequeued_packets,
        2
    );
}

#[test]
fn faults_still_drop_at_entry_and_a_world_without_topology_uses_its_link_again() {
    let mut w = world();
    w.set_faults(Some(FaultPlan {
        drop: Rate::percent(100),
        ..FaultPlan::default()
    }));
    let gid_b = Profile::with_id(2).ports[0].gids[0];
    send_ack(&mut w, 0, gid_b, 1);
    assert!(w.settle(1_000_000).unwrap());
    assert_eq!(w.fault_stats().dropped, 1);
    assert_eq!(w.device(1).counters.port_rcv_packets, 0);
    w.set_faults(None);
    w.set_topology(None).unwrap();
    assert!(w.network().is_none());
    let t0 = w.now();
    send_ack(&mut w, 0, gid_b, 2);
    assert!(w.settle(1_000_000).unwrap());
    assert_eq!(w.device(1).counters.port_rcv_packets, 1);
    assert_eq!(w.now() - t0, 1_000, "the default link's latency");
}

#[test]
fn a_packet_too_big_for_the_nics_link_is_dropped_at_its_egress() {
    let mut w = World::new(1);
    w.add_device(Profile::with_id(1));
    w.add_device(Profile::with_id(2));
    let tiny = LinkSpec { mtu: 40, ..LINK };
    w.set_topology(Some(&Topology::single_switch(
        2,
        tiny,
        SwitchSpec::default(),
    )))
    .unwrap();
    send_ack(&mut w, 0, Profile::with_id(2).ports[0].gids[0], 1);
    assert!(w.settle(1_000_000).unwrap());
    assert_eq!(w.device(1).counters.port_rcv_packets, 0);
    let net = w.network().unwrap();
    // The NIC took its link's MTU as its port's (`World::set_topology`): its port drops the
    // packet and counts it; the network never sees it.
    let dropped = net.port_stats(PortRef::Nic(0)).unwrap().prio[0].drop_mtu;
    assert_eq!((dropped, w.device(0).counters.tx_mtu_drops), (0, 1));
    assert_eq!(w.in_flight(), 0);
}

/// Makes every IPv4 packet entering the network ECT(0) (fixing its checksum), and keeps the
/// bytes of every packet delivered or dropped, as the pcap tee would see them.
#[derive(Default)]
struct EctAndTee {
    delivered: Vec<Vec<u8>>,
    dropped: usize,
}

impl crate::link::rule::Rule for EctAndTee {
    fn on_packet(
        &mut self,
        pkt: &mut crate::link::rule::Packet<'_>,
        _: &mut dyn rand_core::RngCore,
    ) -> crate::link::rule::Verdict {
        let b = &mut *pkt.bytes;
        b[1] = (b[1] & !0b11) | 0b10;
        b[10] = 0;
        b[11] = 0;
        let c = bypass_hw::roce::ip::ipv4_checksum(&b[..20]);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        crate::link::rule::Verdict::Pass
    }
    fn on_seen(&mut self, bytes: &[u8], _: u64, seen: crate::link::rule::Seen) {
        match seen {
            crate::link::rule::Seen::Delivered => self.delivered.push(bytes.to_vec()),
            crate::link::rule::Seen::Dropped => self.dropped += 1,
            _ => {}
        }
    }
    fn active(&self) -> bool {
        true
    }
}

#[test]
fn the_rules_see_packets_as_delivered_with_their_ce_marks_and_switch_drops_as_dropped() {
    let mut w = World::new(6);
    for i in 1..=3 {
        w.add_device(Profile::with_id(i));
    }
    let spec = SwitchSpec {
        queue_limit_bytes: Some(6 * ACK_LEN as u64),
        ..SwitchSpec::default()
    }
    .with_red(
        0,
        RedConfig {
            kmin_bytes: 0,
            kmax_bytes: 1,
            pmax: 1.0,
        },
    );
    w.set_topology(Some(&Topology::single_switch(3, LINK, spec)))
        .unwrap();
    w.add_rule(Box::new(EctAndTee::default()));
    let gid_c = Profile::with_id(3).ports[0].gids[0];
    for psn in 0..10 {
        send_ack(&mut w, 0, gid_c, psn);
        send_ack(&mut w, 1, gid_c, psn);
    }
    assert!(w.settle(10_000_000).unwrap());
    let net = w.network().unwrap();
    let s = net
        .port_stats(PortRef::Switch { switch: 0, port: 2 })
        .unwrap()
        .prio[0];
    let tee = w.rules().get::<EctAndTee>().unwrap();
    assert!(s.drop_tail > 0 && s.ecn_marked > 0);
    assert_eq!(tee.dropped as u64, s.drop_tail);
    let delivered = tee.delivered.len() as u64;
    assert_eq!(delivered + s.drop_tail, 20);
    let ce: Vec<&Vec<u8>> = tee
        .delivered
        .iter()
        .filter(|p| ecn::ecn(p) == Some(ecn::ECN_CE))
        .collect();
    assert_eq!(ce.len() as u64, s.ecn_marked);
    assert!(ce.iter().all(|p| bypass_hw::roce::icrc::check(p).unwrap()));
    assert_eq!(w.device(2).counters.rx_icrc_errors, 0);
    assert_eq!(w.device(2).counters.port_rcv_packets, delivered);
}

/// A 32 KiB RC WRITE from a to b through `t` (a is NIC 0, b NIC 1); returns whether it
/// landed intact with a successful CQE, the virtual time it took, and the stats of NIC 0's
/// egress and of switch 0's port 1 (toward b).
fn rc_write_through(t: &Topology) -> (bool, u64, PrioStats, PrioStats) {
    use crate::testkit::{RcConn, Wqe};
    use bypass_hw::wqe::WqeOpcode;
    const LEN: usize = 32 << 10;
    let mut c = RcConn::new(1024, LEN, 0x10, 0x20);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    c.p.a.write(c.a_mr.off, &data);
    let wqe = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
        .raddr(c.b_mr.va, c.b_mr.key)
        .data(c.a_mr.key, c.a_mr.va, LEN as u32)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &wqe);
    let spare = || crate::device::Device::new(Profile::with_id(9));
    let a = std::mem::replace(&mut c.p.a.dev, spare());
    let b = std::mem::replace(&mut c.p.b.dev, spare());
    let mut w = World::with_devices(3, vec![a, b]);
    w.set_topology(Some(t)).unwrap();
    assert!(w.settle(10_000_000_000).unwrap(), "the world went quiet");
    let took = w.now();
    let net = w.network().unwrap();
    let nic = net.port_stats(PortRef::Nic(0)).unwrap().total();
    let to_b = net
        .port_stats(PortRef::Switch { switch: 0, port: 1 })
        .unwrap()
        .total();
    let mut devices = w.into_devices().into_iter();
    c.p.a.dev = devices.next().unwrap();
    c.p.b.dev = devices.next().unwrap();
    let cqe = c.p.a.poll(&mut c.a_cq);
    let ok = cqe.is_some_and(|e| e[63] >> 4 == 0) && c.p.b.read(c.b_mr.off, LEN) == data;
    (ok, took, nic, to_b)
}

#[test]
fn an_rc_write_crosses_the_switch_at_the_line_rate_and_survives_tail_drops_slowly() {
    let fast = LinkSpec {
        rate_bps: 10_000_000_000,
        prop_ns: 1_000,
        mtu: 1_200,
    };
    let (ok, took, tx, _) =
        rc_write_through(&Topology::single_switch(2, fast, SwitchSpec::default()));
    assert!(ok, "the WRITE landed and completed");
    assert!(tx.dequeued_bytes > 32 << 10);
    // The bytes could not cross faster than 10 Gb/s.
    assert!(took >= port::ser_ns(32 << 10, fast.rate_bps));
    assert_eq!(tx.drop_mtu, 0);

    // Into a 1 Gb/s receiver link with a 4 KiB queue: tail drops, go-back-N, a slower finish.
    let slow = LinkSpec {
        rate_bps: 1_000_000_000,
        ..fast
    };
    let mut t = Topology::new();
    let s = t.add_switch(SwitchSpec {
        queue_limit_bytes: Some(4 << 10),
        ..SwitchSpec::default()
    });
    t.connect(Node::Nic(0), Node::Switch(s), fast);
    t.connect(Node::Nic(1), Node::Switch(s), slow);
    let (ok, lossy_took, _, to_b) = rc_write_through(&t);
    assert!(ok, "retransmission recovers every drop");
    assert!(to_b.drop_tail > 0);
    assert!(lossy_took > 10 * took, "{lossy_took} vs {took}");
}
