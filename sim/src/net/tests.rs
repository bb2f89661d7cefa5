//! The switched network's unit tests: synthetic RoCEv2 packets built by `bypass_hw::roce`,
//! a network stepped event by event with a seeded RNG, timings and counters asserted exactly.

use bypass_hw::roce::ip::ipv4_checksum;
use bypass_hw::roce::{
    BthFields, BthOpcode, DEFAULT_PKEY, ExtFields, IpSpec, Ipv6Spec, PacketSpec, ROCE_V2_UDP_DPORT,
    RocePacket, UdpPorts, emit, icrc,
};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::port::ser_ns;
use super::*;
use crate::profile::Profile;

/// An RC SEND_ONLY packet from NIC `src` to NIC `dst` (10.0.0.src+1 → 10.0.0.dst+1) with
/// traffic class `tos` and `payload` bytes, PSN `psn`.
fn pkt(src: usize, dst: usize, tos: u8, payload: usize, psn: u32) -> Vec<u8> {
    let ip = |n: usize| Profile::ipv4_gid([10, 0, 0, n as u8 + 1]);
    let mut spec_ip = IpSpec::from_gids(&ip(src), &ip(dst)).unwrap();
    if let IpSpec::V4(v4) = &mut spec_ip {
        v4.tos = tos;
    }
    build(spec_ip, payload, psn)
}

fn build(ip: IpSpec, payload: usize, psn: u32) -> Vec<u8> {
    let data = vec![0x5a; payload];
    let spec = PacketSpec {
        ip,
        ports: UdpPorts {
            src: 0xc000,
            dst: ROCE_V2_UDP_DPORT,
        },
        bth: BthFields {
            opcode: BthOpcode::RC_SEND_ONLY,
            pkey: DEFAULT_PKEY,
            dest_qp: 0x11,
            psn,
            ..Default::default()
        },
        ext: ExtFields::default(),
        payload: &data,
    };
    let mut buf = vec![0u8; spec.packet_len().unwrap()];
    emit(&spec, &mut buf).unwrap();
    buf
}

/// ECT(0) with priority `prio` (DSCP = prio << 3).
fn ect(prio: u8) -> u8 {
    (prio << 5) | 0b10
}

const GBPS10: LinkSpec = LinkSpec {
    rate_bps: 10_000_000_000,
    prop_ns: 100,
    mtu: 4_200,
};

/// What reached NICs: (arrival time, NIC, packet).
type Arrivals = Vec<(u64, usize, Vec<u8>)>;

/// Runs `net` event by event until nothing is left; returns what arrived.
fn drain(net: &mut Network, rng: &mut ChaCha8Rng) -> Arrivals {
    let mut got = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = net.next_event() {
        net.run(t, rng, &mut out);
        got.extend(out.drain(..).map(|(d, p)| (t, d, p)));
    }
    got
}

fn sw(port: usize) -> PortRef {
    PortRef::Switch { switch: 0, port }
}

#[test]
fn a_packet_takes_its_serialisation_time_on_each_link_plus_the_delays() {
    let mut net = Network::new(
        &Topology::single_switch(2, GBPS10, SwitchSpec::default()),
        0,
    )
    .unwrap();
    let p = pkt(0, 1, 0, 1_000, 0);
    let len = p.len();
    assert_eq!(ser_ns(1_250, 10_000_000_000), 1_000, "1250 B at 10 Gb/s");
    let ser = ser_ns(len, GBPS10.rate_bps);
    assert!(net.send(0, 0, 1, p.clone()));
    assert!(net.send(0, 0, 1, p));
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    let times: Vec<u64> = got.iter().map(|g| g.0).collect();
    // NIC egress, propagation, switch egress, propagation; the second behind the first.
    let first = 2 * ser + 2 * GBPS10.prop_ns;
    assert_eq!(times, vec![first, first + ser]);
    assert!(got.iter().all(|g| g.1 == 1));
    let nic = net.port_stats(PortRef::Nic(0)).unwrap().prio[0];
    assert_eq!(
        (nic.dequeued_packets, nic.dequeued_bytes),
        (2, 2 * len as u64)
    );
    assert_eq!(net.in_flight(), 0);
}

#[test]
fn two_senders_into_one_port_build_a_queue_that_drains_at_the_line_rate() {
    let mut net = Network::new(
        &Topology::single_switch(3, GBPS10, SwitchSpec::default()),
        0,
    )
    .unwrap();
    let len = pkt(0, 2, 0, 1_000, 0).len();
    for i in 0..10 {
        net.send(0, 0, 2, pkt(0, 2, 0, 1_000, i));
        net.send(0, 1, 2, pkt(1, 2, 0, 1_000, i));
    }
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    assert_eq!(got.len(), 20);
    let ser = ser_ns(len, GBPS10.rate_bps);
    // Back to back at the receiver's line rate.
    for w in got.windows(2) {
        assert_eq!(w[1].0 - w[0].0, ser);
    }
    let s = net.port_stats(sw(2)).unwrap().prio[0];
    assert_eq!(s.dequeued_packets, 20);
    // Two arrive per serialisation time, one leaves: the queue peaks near ten packets.
    assert!(s.max_queue_bytes >= 9 * len as u64, "{}", s.max_queue_bytes);
    assert_eq!(net.buffer_stats(0).unwrap().used_bytes, 0);
    assert_eq!(net.queued_bytes(sw(2)).unwrap(), [0; 8]);
}

/// Two senders into NIC 2 on priority 3, A ECN-capable, B not, with `red`; what arrived.
fn red_run(red: RedConfig, seed: u64) -> (Network, Arrivals) {
    let spec = SwitchSpec::default().with_red(3, red);
    let mut net = Network::new(&Topology::single_switch(3, GBPS10, spec), 0).unwrap();
    for i in 0..50 {
        net.send(0, 0, 2, pkt(0, 2, ect(3), 1_000, i));
        net.send(0, 1, 2, pkt(1, 2, 3 << 5, 1_000, i));
    }
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(seed));
    (net, got)
}

fn ce_count(got: &Arrivals, from_ip: u8) -> usize {
    got.iter()
        .filter(|g| g.2[15] == from_ip && ecn::ecn(&g.2) == Some(ecn::ECN_CE))
        .count()
}

#[test]
fn red_marks_nothing_below_kmin_every_ect_packet_above_kmax_and_never_non_ect() {
    let never = RedConfig {
        kmin_bytes: 1 << 20,
        kmax_bytes: 2 << 20,
        pmax: 1.0,
    };
    let (net, got) = red_run(never, 1);
    assert_eq!(got.len(), 100);
    assert_eq!(net.port_stats(sw(2)).unwrap().prio[3].ecn_marked, 0);
    assert_eq!(ce_count(&got, 1) + ce_count(&got, 2), 0);

    let always = RedConfig {
        kmin_bytes: 0,
        kmax_bytes: 1,
        pmax: 1.0,
    };
    let (net, got) = red_run(always, 1);
    let marked = net.port_stats(sw(2)).unwrap().prio[3].ecn_marked;
    // Every A packet but the very first found a queue of at least one byte.
    assert_eq!(marked, 49);
    assert_eq!(ce_count(&got, 1), 49);
    assert_eq!(ce_count(&got, 2), 0, "non-ECT packets are never marked");
    assert!(
        got.iter()
            .all(|g| g.2[15] == 1 || ecn::ecn(&g.2) == Some(0))
    );
}

#[test]
fn a_marked_packet_keeps_a_valid_icrc_and_ipv4_checksum() {
    let mut p = pkt(0, 1, ect(3), 100, 5);
    assert!(ecn::mark_ce(&mut p));
    assert_eq!(ecn::ecn(&p), Some(ecn::ECN_CE));
    assert_eq!(p[1], (3 << 5) | 0b11, "DSCP kept");
    assert_eq!(ipv4_checksum(&p[..20]), 0, "header sums to zero");
    assert!(icrc::check(&p).unwrap());
    assert!(RocePacket::parse(&p).unwrap().icrc_ok());

    let ip6 = IpSpec::V6(Ipv6Spec {
        src: [0xfe; 16],
        dst: [0xfd; 16],
        traffic_class: ect(5),
        flow_label: 0,
        hop_limit: 64,
    });
    let mut p6 = build(ip6, 64, 1);
    assert_eq!(ecn::tclass(&p6), Some(ect(5)));
    assert!(ecn::mark_ce(&mut p6));
    assert_eq!(ecn::tclass(&p6), Some((5 << 5) | 0b11));
    assert!(icrc::check(&p6).unwrap());

    // Marked inside the network too.
    let (_, got) = red_run(
        RedConfig {
            kmin_bytes: 0,
            kmax_bytes: 1,
            pmax: 1.0,
        },
        2,
    );
    for (_, _, p) in got.iter().filter(|g| ecn::ecn(&g.2) == Some(ecn::ECN_CE)) {
        assert_eq!(ipv4_checksum(&p[..20]), 0);
        assert!(icrc::check(p).unwrap());
    }
}

#[test]
fn a_lossy_queue_tail_drops_what_does_not_fit_and_counts_it() {
    let len = pkt(0, 2, 0, 1_000, 0).len() as u64;
    let spec = SwitchSpec {
        queue_limit_bytes: Some(3 * len),
        ..SwitchSpec::default()
    };
    let mut net = Network::new(&Topology::single_switch(3, GBPS10, spec), 0).unwrap();
    for i in 0..10 {
        net.send(0, 0, 2, pkt(0, 2, 0, 1_000, i));
        net.send(0, 1, 2, pkt(1, 2, 0, 1_000, i));
    }
    net.set_keep_dropped(true);
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    let s = net.port_stats(sw(2)).unwrap().prio[0];
    assert!(s.drop_tail > 0);
    assert_eq!(got.len() as u64 + s.drop_tail, 20);
    assert_eq!(net.take_dropped().len() as u64, s.drop_tail);
    assert!(s.max_queue_bytes <= 3 * len);
    assert_eq!(net.in_flight(), 0);

    // A small shared buffer drops too.
    let spec = SwitchSpec {
        buffer_bytes: 2 * len,
        ..SwitchSpec::default()
    };
    let mut net = Network::new(&Topology::single_switch(3, GBPS10, spec), 0).unwrap();
    for i in 0..10 {
        net.send(0, 0, 2, pkt(0, 2, 0, 1_000, i));
        net.send(0, 1, 2, pkt(1, 2, 0, 1_000, i));
    }
    drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    assert!(net.port_stats(sw(2)).unwrap().prio[0].drop_tail > 0);
    assert!(net.buffer_stats(0).unwrap().max_used_bytes <= 2 * len);
}

fn pfc(len: u64, headroom: u64) -> SwitchSpec {
    SwitchSpec::default().with_pfc(
        3,
        PfcConfig {
            xoff_bytes: 4 * len,
            xon_bytes: 2 * len,
            headroom_bytes: headroom,
        },
    )
}

#[test]
fn pfc_with_headroom_drops_nothing_pauses_the_senders_and_they_really_hold() {
    let len = pkt(0, 3, 0, 1_000, 0).len() as u64;
    let mut net = Network::new(&Topology::single_switch(4, GBPS10, pfc(len, 4 * len)), 0).unwrap();
    for i in 0..30 {
        for s in 0..3 {
            net.send(0, s, 3, pkt(s, 3, 3 << 5, 1_000, i));
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut out = Vec::new();
    let mut held_steps = 0;
    while let Some(t) = net.next_event() {
        let before = net.port_stats(PortRef::Nic(0)).unwrap().prio[3].dequeued_packets;
        let paused_before = net.is_paused(PortRef::Nic(0), 3);
        net.run(t, &mut rng, &mut out);
        if paused_before && net.is_paused(PortRef::Nic(0), 3) {
            held_steps += 1;
            let after = net.port_stats(PortRef::Nic(0)).unwrap().prio[3].dequeued_packets;
            assert_eq!(after, before, "a paused egress starts nothing (t={t})");
        }
    }
    assert_eq!(out.len(), 90, "lossless: everything arrives");
    assert!(held_steps > 0);
    let mut xoff = 0;
    for s in 0..3 {
        let port = net.port_stats(sw(s)).unwrap().prio[3];
        xoff += port.xoff_sent;
        assert_eq!(port.xoff_sent, port.xon_sent, "every pause resumed");
        let nic = net.port_stats(PortRef::Nic(s)).unwrap().prio[3];
        assert_eq!(nic.pauses_received, port.xoff_sent);
        assert!(nic.paused_ns > 0);
    }
    assert!(xoff > 0);
    let out_port = net.port_stats(sw(3)).unwrap().prio[3];
    assert_eq!((out_port.drop_headroom, out_port.drop_tail), (0, 0));

    // Without headroom the same load overflows it.
    let mut net = Network::new(&Topology::single_switch(4, GBPS10, pfc(len, 0)), 0).unwrap();
    for i in 0..30 {
        for s in 0..3 {
            net.send(0, s, 3, pkt(s, 3, 3 << 5, 1_000, i));
        }
    }
    let got = drain(&mut net, &mut rng);
    let d = net.port_stats(sw(3)).unwrap().prio[3].drop_headroom;
    assert!(d > 0);
    assert_eq!(got.len() as u64 + d, 90);
}

/// NIC 0 alternates packets to NIC 2 and NIC 3; with `congest`, NICs 1, 4 and 5 also flood
/// NIC 2. Returns the arrival time of the last packet at NIC 3, and NIC 0's pauses.
fn victim_run(congest: bool) -> (u64, u64) {
    let len = pkt(0, 2, 0, 1_000, 0).len() as u64;
    let mut net = Network::new(&Topology::single_switch(6, GBPS10, pfc(len, 8 * len)), 0).unwrap();
    for i in 0..40 {
        net.send(0, 0, 2 + (i as usize % 2), pkt(0, 2, 3 << 5, 1_000, i));
        for s in [1, 4, 5].into_iter().filter(|_| congest) {
            net.send(0, s, 2, pkt(s, 2, 3 << 5, 1_000, i));
        }
    }
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    let last = got.iter().filter(|g| g.1 == 3).map(|g| g.0).max().unwrap();
    let pauses = net.port_stats(PortRef::Nic(0)).unwrap().prio[3].pauses_received;
    (last, pauses)
}

#[test]
fn head_of_line_a_flow_to_an_idle_port_from_a_paused_nic_is_slowed() {
    let (alone, no_pauses) = victim_run(false);
    let (victim, pauses) = victim_run(true);
    assert_eq!(no_pauses, 0);
    assert!(pauses > 0);
    assert!(
        victim > alone + alone / 2,
        "the flow to the idle NIC 3 waits behind the paused priority: {victim} vs {alone}"
    );
}

#[test]
fn a_packet_over_a_links_mtu_is_dropped_and_counted_at_the_hop_about_to_send_it() {
    let mut t = Topology::new();
    let s = t.add_switch(SwitchSpec::default());
    t.connect(
        Node::Nic(0),
        Node::Switch(s),
        LinkSpec {
            mtu: 1_500,
            ..GBPS10
        },
    );
    t.connect(
        Node::Nic(1),
        Node::Switch(s),
        LinkSpec {
            mtu: 1_000,
            ..GBPS10
        },
    );
    let mut net = Network::new(&t, 0).unwrap();
    net.send(0, 0, 1, pkt(0, 1, 0, 1_100, 0)); // fits 1500, not 1000
    net.send(0, 0, 1, pkt(0, 1, 0, 1_600, 1)); // fits neither
    net.send(0, 0, 1, pkt(0, 1, 0, 500, 2));
    assert_eq!(net.path_mtu(0, 1), Some(1_000));
    assert_eq!(net.path_mtu(1, 0), Some(1_000));
    assert_eq!(net.path_mtu(0, 5), None);
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    assert_eq!(got.len(), 1);
    assert_eq!(net.port_stats(PortRef::Nic(0)).unwrap().prio[0].drop_mtu, 1);
    assert_eq!(net.port_stats(sw(1)).unwrap().prio[0].drop_mtu, 1);
    assert_eq!(net.port_stats(sw(0)).unwrap().prio[0].drop_mtu, 0);
    assert_eq!(net.in_flight(), 0);
}

#[test]
fn two_levels_route_across_the_spine_only_between_leaves() {
    let t = Topology::two_level(2, 2, GBPS10, GBPS10, SwitchSpec::default());
    let mut net = Network::new(&t, 0).unwrap();
    let p = pkt(0, 3, 0, 1_000, 0);
    let ser = ser_ns(p.len(), GBPS10.rate_bps);
    net.send(0, 0, 3, p);
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1), (4 * (ser + GBPS10.prop_ns), 3));
    let jumbo = LinkSpec {
        mtu: 9_000,
        ..GBPS10
    };
    let mixed = Network::new(
        &Topology::two_level(2, 2, jumbo, GBPS10, SwitchSpec::default()),
        0,
    )
    .unwrap();
    assert_eq!(mixed.path_mtu(0, 1), Some(9_000), "within a leaf");
    assert_eq!(mixed.path_mtu(0, 3), Some(GBPS10.mtu), "across the spine");
    let deq = |net: &Network, switch, port| {
        net.port_stats(PortRef::Switch { switch, port })
            .unwrap()
            .total()
            .dequeued_packets
    };
    // Leaf 0's uplink (port 2), the spine's port to leaf 1, leaf 1's port to NIC 3.
    assert_eq!(
        (deq(&net, 0, 2), deq(&net, 2, 1), deq(&net, 1, 1)),
        (1, 1, 1)
    );
    net.send(net.now, 0, 1, pkt(0, 1, 0, 1_000, 1));
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    assert_eq!(got.len(), 1);
    let d = |s, p| deq(&net, s, p);
    assert_eq!((d(0, 1), d(0, 2), d(2, 0), d(2, 1)), (1, 1, 0, 1));
}

#[test]
fn the_same_seed_gives_the_same_marks_and_samples_and_another_seed_other_marks() {
    let ramp = RedConfig {
        kmin_bytes: 0,
        kmax_bytes: 1 << 20,
        pmax: 1.0,
    };
    let sampled = |seed| {
        let spec = SwitchSpec::default().with_red(3, ramp);
        let mut net = Network::new(&Topology::single_switch(3, GBPS10, spec), 0).unwrap();
        net.set_sampling(Some(500));
        for i in 0..200 {
            net.send(0, 0, 2, pkt(0, 2, ect(3), 1_000, i));
            net.send(0, 1, 2, pkt(1, 2, ect(3), 1_000, i));
        }
        let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(seed));
        let marks: Vec<bool> = got.iter().map(|g| ecn::ecn(&g.2) == Some(3)).collect();
        (marks, net.take_samples(), net.flow_stats().clone())
    };
    let (m1, s1, flows) = sampled(9);
    let (m2, s2, _) = sampled(9);
    let (m3, _, _) = sampled(10);
    assert!(m1.iter().any(|&m| m) && m1.iter().any(|&m| !m));
    assert_eq!(m1, m2);
    assert_eq!(s1, s2);
    assert_ne!(m1, m3);
    // Samples at every multiple of 500 ns; the receiver's queue (switch port 2) grows.
    assert!(s1.windows(2).all(|w| w[1].t_ns == w[0].t_ns + 500));
    let port2 = 2 * 3 - 1; // ports: NIC0, sw0, NIC1, sw1, NIC2, sw2
    assert_eq!(
        Network::new(
            &Topology::single_switch(3, GBPS10, SwitchSpec::default()),
            0
        )
        .unwrap()
        .ports()
        .nth(port2),
        Some(sw(2))
    );
    let peak = s1.iter().map(|s| s.queued[port2][3]).max().unwrap();
    assert!(peak > 50_000, "{peak}");
    // Per-flow deliveries: everything each sender sent, reached by the samples over time.
    assert_eq!(flows.get(&(0, 2)).map(|f| f.packets), Some(200));
    assert_eq!(flows.get(&(1, 2)).map(|f| f.packets), Some(200));
    assert_eq!(flows.len(), 2);
    let at = |k: usize| s1[k].flows.get(&(0, 2)).map_or(0, |f| f.bytes);
    assert!(at(s1.len() / 2) < at(s1.len() - 1));
    assert!(at(s1.len() - 1) <= flows[&(0, 2)].bytes);
}

#[test]
fn a_topology_with_a_nic_on_two_links_or_bad_thresholds_is_refused() {
    let mut t = Topology::single_switch(2, GBPS10, SwitchSpec::default());
    t.connect(Node::Nic(0), Node::Switch(0), GBPS10);
    let e = Network::new(&t, 0).unwrap_err();
    assert_eq!(
        e,
        TopologyError::NicTwice {
            nic: 0,
            first: 0,
            second: 2
        }
    );
    assert!(e.to_string().contains("exactly one link"));
    let bad = SwitchSpec::default().with_pfc(
        1,
        PfcConfig {
            xoff_bytes: 1,
            xon_bytes: 2,
            headroom_bytes: 0,
        },
    );
    let e = Network::new(&Topology::single_switch(2, GBPS10, bad), 0).unwrap_err();
    assert!(matches!(e, TopologyError::BadPrio { prio: 1, .. }));
    let mut huge = Topology::single_switch(1, GBPS10, SwitchSpec::default());
    huge.connect(Node::Nic(usize::MAX), Node::Switch(0), GBPS10);
    let e = Network::new(&huge, 0).unwrap_err();
    assert_eq!(
        e,
        TopologyError::NicIdTooLarge {
            link: 1,
            nic: usize::MAX
        }
    );
    let mut net = Network::new(
        &Topology::single_switch(2, GBPS10, SwitchSpec::default()),
        0,
    )
    .unwrap();
    assert!(!net.send(0, 0, 7, pkt(0, 1, 0, 10, 0)), "NIC 7 has no link");
    assert!(!net.send(0, 0, 1, vec![0u8; 30]), "not IP");
    assert_eq!(net.unroutable(), 2);
}

#[test]
fn pfc_between_switches_pauses_the_upstream_switch_port_and_drops_nothing() {
    let len = pkt(0, 2, 0, 1_000, 0).len() as u64;
    let t = Topology::two_level(2, 2, GBPS10, GBPS10, pfc(len, 8 * len));
    let mut net = Network::new(&t, 0).unwrap();
    // NICs 0, 1 (leaf 0) and 3 (leaf 1) into NIC 2 (leaf 1).
    for i in 0..30 {
        for s in [0, 1, 3] {
            net.send(0, s, 2, pkt(s, 2, 3 << 5, 1_000, i));
        }
    }
    let got = drain(&mut net, &mut ChaCha8Rng::seed_from_u64(1));
    assert_eq!(got.len(), 90);
    let at = |switch, port| {
        net.port_stats(PortRef::Switch { switch, port })
            .unwrap()
            .prio[3]
    };
    // Leaf 1's uplink (port 2) pauses the spine's port 1, which pauses leaf 0's uplink.
    assert!(at(1, 2).xoff_sent > 0);
    assert_eq!(at(2, 1).pauses_received, at(1, 2).xoff_sent);
    assert!(at(2, 1).paused_ns > 0);
    assert!(at(2, 0).xoff_sent > 0 && at(0, 2).pauses_received > 0);
    let drops: u64 = net
        .ports()
        .map(|r| {
            let s = net.port_stats(r).unwrap().total();
            s.drop_headroom + s.drop_tail + s.drop_mtu
        })
        .sum();
    assert_eq!(drops, 0);
}

#[test]
fn a_pause_reaches_the_upstream_one_propagation_delay_after_the_xoff() {
    let len = pkt(0, 1, 0, 1_000, 0).len() as u64;
    let slow = LinkSpec {
        rate_bps: 1_000_000_000,
        ..GBPS10
    };
    let mut t = Topology::new();
    let s = t.add_switch(pfc(len, 16 * len));
    t.connect(Node::Nic(0), Node::Switch(s), GBPS10);
    t.connect(Node::Nic(1), Node::Switch(s), slow);
    let mut net = Network::new(&t, 0).unwrap();
    for i in 0..20 {
        net.send(0, 0, 1, pkt(0, 1, 3 << 5, 1_000, i));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut out = Vec::new();
    let (mut xoff_at, mut paused_at, mut xon_at, mut resumed_at) = (None, None, None, None);
    while let Some(t) = net.next_event() {
        net.run(t, &mut rng, &mut out);
        let s = net.port_stats(sw(0)).unwrap().prio[3];
        if s.xoff_sent == 1 && xoff_at.is_none() {
            xoff_at = Some(t);
        }
        if s.xon_sent == 1 && xon_at.is_none() {
            xon_at = Some(t);
        }
        let paused = net.is_paused(PortRef::Nic(0), 3);
        if paused && paused_at.is_none() {
            paused_at = Some(t);
        }
        if !paused && paused_at.is_some() && resumed_at.is_none() {
            resumed_at = Some(t);
        }
    }
    assert_eq!(out.len(), 20);
    let (xoff, paused) = (xoff_at.unwrap(), paused_at.unwrap());
    assert_eq!(paused - xoff, GBPS10.prop_ns);
    assert_eq!(resumed_at.unwrap() - xon_at.unwrap(), GBPS10.prop_ns);
    let nic = net.port_stats(PortRef::Nic(0)).unwrap().prio[3];
    assert!(nic.paused_ns >= resumed_at.unwrap() - paused);
}
