//! The NP and RP on a stepped two-device wire (`testkit`): a rule on the wire marks CE the
//! ECT packets from a to b, b answers with CNPs, a's rate falls, paces and recovers; and the
//! same in a [`crate::World`] with the [`CeMark`] rule.

use bypass_hw::roce::cnp::Cnp;
use bypass_hw::wqe::WqeOpcode;

use super::mark::{CeMark, mark_ce};
use crate::testkit::{Pair, RcConn, Wqe};

const MTU: u32 = 1024;
const LINE: u64 = 100_000;

/// What went on the wire: (device time, bytes), per direction.
#[derive(Default)]
struct Log {
    a_tx: Vec<(u64, Vec<u8>)>,
    b_tx: Vec<(u64, Vec<u8>)>,
}

fn is_cnp(pkt: &[u8]) -> bool {
    pkt.get(28) == Some(&0x81)
}

/// Steps both devices and carries packets, passing a's through `mark` (true: mark it CE);
/// when nothing moves, advances both clocks to the earliest deadline, up to `until` ns.
fn run(p: &mut Pair, log: &mut Log, until: u64, mark: &mut dyn FnMut(&[u8]) -> bool) {
    for _ in 0..1_000_000 {
        let mut progress = p.a.dev.step() | p.b.dev.step();
        while let Some(mut pkt) = p.a.dev.take_tx() {
            log.a_tx.push((p.a.dev.now(), pkt.clone()));
            if mark(&pkt) {
                mark_ce(&mut pkt);
            }
            p.b.dev.receive(pkt);
            progress = true;
        }
        while let Some(pkt) = p.b.dev.take_tx() {
            log.b_tx.push((p.b.dev.now(), pkt.clone()));
            p.a.dev.receive(pkt);
            progress = true;
        }
        if progress {
            continue;
        }
        let now = p.a.dev.now();
        let next = [p.a.dev.next_deadline(), p.b.dev.next_deadline()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t <= until => {
                let t = t.max(now + 1);
                p.a.dev.set_time(t);
                p.b.dev.set_time(t);
            }
            _ => return,
        }
    }
    panic!("the pair never went idle");
}

/// An RC connection with the RP on at a and the NP on at b (priority 0) when asked.
fn conn(rp: bool, np: bool) -> RcConn {
    let mut c = RcConn::new(MTU, 1 << 20, 100, 200);
    c.p.a.dev.cong_mut().status.rp[0] = rp;
    c.p.b.dev.cong_mut().status.np[0] = np;
    c
}

/// Posts a WRITE of `len` bytes from a to b.
fn write(c: &mut RcConn, len: u32) {
    let b = c.b_mr;
    let w = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
        .raddr(b.va, b.key)
        .data(c.a_mr.key, c.a_mr.va, len)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
}

fn data_pkts(v: &[(u64, Vec<u8>)]) -> Vec<(u64, Vec<u8>)> {
    v.iter().filter(|(_, p)| !is_cnp(p)).cloned().collect()
}

#[test]
fn with_the_rp_on_data_goes_ect0_and_ce_marks_earn_rate_limited_cnps() {
    let mut c = conn(true, true);
    // The paper's byte counter (10 MB): with mlx5's 32 KB the rate climbs back within this
    // WRITE and the rest leaves unpaced.
    c.p.a.dev.cong_mut().rp.rpg_byte_reset = 10_000_000;
    // The stepped wire has no delay: a WRITE leaves at one instant until a CNP limits the
    // QP, so a first one earns the first CNP and the second is paced over time.
    write(&mut c, 4 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 10_000_000, &mut |_| true);
    write(&mut c, 1024 * 1024);
    run(&mut c.p, &mut log, 10_000_000, &mut |_| true);
    let sent = data_pkts(&log.a_tx);
    assert_eq!(sent.len(), 1028, "every packet of the WRITEs went out once");
    assert!(
        sent.iter().all(|(_, p)| p[1] & 3 == 0b10),
        "ECT(0) on every packet"
    );
    let cnps: Vec<&(u64, Vec<u8>)> = log.b_tx.iter().filter(|(_, p)| is_cnp(p)).collect();
    assert!(cnps.len() >= 2, "{} CNPs", cnps.len());
    for (_, p) in &cnps {
        let cnp = Cnp::parse(p).expect("a CNP");
        assert!(cnp.icrc_ok);
        assert!(cnp.bth.becn);
        assert_eq!(cnp.dest_qp(), c.a_qp.qpn);
        assert_eq!(p[1], 48 << 2, "DSCP 48, not ECN-capable");
    }
    for w in cnps.windows(2) {
        assert!(
            w[1].0 - w[0].0 >= 50_000,
            "CNPs {} ns apart",
            w[1].0 - w[0].0
        );
    }
    let (a, b) = (c.p.a.dev.cong().stats, c.p.b.dev.cong().stats);
    assert_eq!(b.np_ecn_marked_roce_packets, 1028);
    assert_eq!(b.np_cnp_sent, cnps.len() as u64);
    assert_eq!(a.rp_cnp_handled, cnps.len() as u64);
    assert_eq!(a.rp_cnp_ignored, 0);
    let r = c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap();
    assert_eq!(r.cnps_handled, cnps.len() as u64);
    assert!(r.limited && r.current_mbps < LINE / 2, "{r:?}");
    assert_eq!(c.p.b.read(c.b_mr.off, 16), c.p.a.read(c.a_mr.off, 16));
    assert!(c.p.a.poll(&mut c.a_cq).is_some(), "the WRITEs complete");
    assert!(c.p.a.poll(&mut c.a_cq).is_some(), "the WRITEs complete");
}

#[test]
fn a_paced_qp_sends_at_its_current_rate() {
    let mut c = conn(true, true);
    // Hold the rate still after the cut: no timer or byte-counter increases.
    let rp = &mut c.p.a.dev.cong_mut().rp;
    rp.rpg_time_reset = u32::MAX;
    rp.rpg_byte_reset = u32::MAX;
    write(&mut c, MTU);
    let mut log = Log::default();
    let mut first = true;
    run(&mut c.p, &mut log, 1_000_000, &mut |_| {
        std::mem::take(&mut first)
    });
    assert!(c.p.a.poll(&mut c.a_cq).is_some());
    let rate = c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap();
    assert!(rate.limited);
    assert_eq!(rate.current_mbps, LINE - LINE * 1023 / 2048);
    let start = c.p.a.dev.now();
    write(&mut c, 32 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 100_000_000, &mut |_| false);
    let sent = data_pkts(&log.a_tx);
    assert_eq!(sent.len(), 32);
    assert!(sent[0].0 >= start);
    for w in sent.windows(2) {
        let gap = (w[0].1.len() as u64 * 8000).div_ceil(rate.current_mbps);
        assert_eq!(w[1].0 - w[0].0, gap, "packets leave one gap apart at RC");
    }
    assert!(c.p.a.poll(&mut c.a_cq).is_some());
}

#[test]
fn the_rate_recovers_once_cnps_stop() {
    let mut c = conn(true, true);
    write(&mut c, 8 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 1_000_000, &mut |_| true);
    let cut = c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap();
    assert!(cut.limited);
    // Timer events every 300 µs: fast recovery toward the line rate, then released.
    let t = c.p.a.dev.now() + 300_000;
    c.p.run_until(t);
    let one = c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap();
    assert!(one.current_mbps > cut.current_mbps, "{cut:?} -> {one:?}");
    c.p.run_until(t + 30 * 300_000);
    let back = c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap();
    assert!(!back.limited);
    assert_eq!(back.current_mbps, LINE);
    assert!(back.alpha < cut.alpha, "alpha decays: {cut:?} -> {back:?}");
    // Released: a WRITE goes unpaced (every packet at one instant).
    write(&mut c, 8 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 0, &mut |_| false);
    let sent = data_pkts(&log.a_tx);
    assert_eq!(sent.len(), 8);
    assert!(sent.iter().all(|(t, _)| *t == sent[0].0));
}

#[test]
fn with_the_rp_off_cnps_are_ignored_and_the_rate_stays() {
    let mut c = conn(false, true);
    write(&mut c, 4 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 1_000_000, &mut |_| true);
    let sent = data_pkts(&log.a_tx);
    assert!(
        sent.iter().all(|(_, p)| p[1] & 3 == 0),
        "not ECT with the RP off"
    );
    assert_eq!(c.p.b.dev.cong().stats.np_ecn_marked_roce_packets, 0);
    // A CNP sent by hand (the NP of b for a's QP) is ignored by a.
    let cnp = {
        let mut ip = bypass_hw::roce::IpSpec::from_gids(&c.p.b.gid(), &c.p.a.gid()).unwrap();
        if let bypass_hw::roce::IpSpec::V4(v) = &mut ip {
            v.tos = 48 << 2;
        }
        let spec = bypass_hw::roce::CnpSpec {
            ip,
            ports: bypass_hw::roce::UdpPorts {
                src: 0xc000,
                dst: 4791,
            },
            dest_qp: c.a_qp.qpn,
        };
        let mut buf = vec![0; spec.packet_len()];
        bypass_hw::roce::emit_cnp(&spec, &mut buf).unwrap();
        buf
    };
    c.p.a.dev.receive(cnp.clone());
    c.p.a.dev.step();
    let a = c.p.a.dev.cong().stats;
    assert_eq!((a.rp_cnp_ignored, a.rp_cnp_handled), (1, 0));
    assert!(!c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap().limited);
    // The same CNP with the RP on is handled; a corrupt one counts as an ICRC error only.
    c.p.a.dev.cong_mut().status.rp[0] = true;
    c.p.a.dev.receive(cnp.clone());
    c.p.a.dev.step();
    let mut bad = cnp;
    bad[30] ^= 0xff;
    let icrc_errs = c.p.a.dev.counters.rx_icrc_errors;
    c.p.a.dev.receive(bad);
    c.p.a.dev.step();
    let a = c.p.a.dev.cong().stats;
    assert_eq!((a.rp_cnp_ignored, a.rp_cnp_handled), (1, 1));
    assert_eq!(c.p.a.dev.counters.rx_icrc_errors, icrc_errs + 1);
    assert!(c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap().limited);
}

#[test]
fn with_the_np_off_marked_packets_get_no_cnp_and_land() {
    let mut c = conn(true, false);
    c.p.a.write(c.a_mr.off, &[7u8; 4096]);
    write(&mut c, 4 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 1_000_000, &mut |_| true);
    assert!(log.b_tx.iter().all(|(_, p)| !is_cnp(p)));
    let b = c.p.b.dev.cong().stats;
    assert_eq!((b.np_ecn_marked_roce_packets, b.np_cnp_sent), (0, 0));
    assert_eq!(c.p.b.read(c.b_mr.off, 4096), vec![7u8; 4096]);
    assert!(c.p.a.poll(&mut c.a_cq).is_some());
}

#[test]
fn congestion_control_off_leaves_the_wire_as_it_was() {
    let mut c = conn(false, false);
    write(&mut c, 4 * MTU);
    let mut log = Log::default();
    run(&mut c.p, &mut log, 1_000_000, &mut |_| false);
    assert!(log.a_tx.iter().all(|(_, p)| p[1] == 0), "TOS 0: no ECT");
    assert!(log.b_tx.iter().all(|(_, p)| p[1] == 0 && !is_cnp(p)));
    assert_eq!(c.p.a.dev.cong().stats, Default::default());
}

#[test]
fn a_marked_ud_datagram_earns_its_sender_qp_a_cnp() {
    use crate::testkit::{Host, UD};
    use bypass_hw::wqe::DgramParams;
    let mut p = Pair::new();
    p.a.dev.cong_mut().status.rp[0] = true;
    p.b.dev.cong_mut().status.np[0] = true;
    let a_cq = p.a.cq(4);
    let b_cq = p.b.cq(4);
    let mut a_qp = p.a.qp(UD, &a_cq, &a_cq, 4, 4);
    let mut b_qp = p.b.qp(UD, &b_cq, &b_cq, 4, 4);
    let (ga, gb) = (p.a.gid(), p.b.gid());
    p.a.make_rts(&a_qp, 0, gb, 1024, 1, 1);
    p.b.make_rts(&b_qp, 0, ga, 1024, 1, 1);
    let a_mr = p.a.mr(4096, Host::all_access());
    let b_mr = p.b.mr(4096, Host::all_access());
    p.a.write(a_mr.off, b"datagram");
    p.b.post_recv(&mut b_qp, &[(b_mr.key, b_mr.va, 256)]);
    let av = DgramParams {
        key: u64::from(0x1111_1111u32) << 32,
        dqp_dct: b_qp.qpn,
        ext: true,
        hop_limit: 64,
        rgid: gb,
        ..Default::default()
    };
    let w = Wqe::new(WqeOpcode::SEND, 0, a_qp.qpn)
        .av(&av)
        .data(a_mr.key, a_mr.va, 8)
        .finish();
    p.a.post_send(&mut a_qp, &w);
    let mut log = Log::default();
    run(&mut p, &mut log, 1_000_000, &mut |_| true);
    assert_eq!(
        p.b.read(b_mr.off + 40, 8),
        b"datagram",
        "delivered as usual"
    );
    let cnps: Vec<_> = log.b_tx.iter().filter(|(_, p)| is_cnp(p)).collect();
    assert_eq!(cnps.len(), 1);
    let cnp = Cnp::parse(&cnps[0].1).unwrap();
    assert_eq!(cnp.dest_qp(), a_qp.qpn, "DestQP: the DETH's source QPN");
    assert_eq!(cnp.ip.gids().1, ga, "back to the datagram's source address");
    assert_eq!(p.a.dev.cong().stats.rp_cnp_handled, 1);
    assert!(p.a.dev.qp_rate(a_qp.qpn).unwrap().limited);
}

#[test]
fn in_a_world_with_a_ce_marking_rule_the_sender_slows_and_the_write_lands() {
    use crate::device::Device;
    use crate::profile::Profile;
    use crate::world::World;
    let mut c = conn(true, true);
    c.p.a.dev.cong_mut().rp.rpg_byte_reset = 10_000_000;
    let data: Vec<u8> = (0..512 * 1024u32).map(|i| (i % 251) as u8).collect();
    c.p.a.write(c.a_mr.off, &data);
    write(&mut c, 512 * 1024);
    let spare = || Device::new(Profile::with_id(9));
    let a = std::mem::replace(&mut c.p.a.dev, spare());
    let b = std::mem::replace(&mut c.p.b.dev, spare());
    let mut world = World::with_devices(7, vec![a, b]);
    world.add_rule(Box::new(CeMark::all().from(0)));
    assert!(world.settle(1_000_000_000).unwrap(), "the world went quiet");
    let marked = world.rules().get::<CeMark>().unwrap().marked();
    let mut devices = world.into_devices().into_iter();
    c.p.a.dev = devices.next().unwrap();
    c.p.b.dev = devices.next().unwrap();
    assert_eq!(c.p.b.read(c.b_mr.off, data.len()), data);
    assert!(c.p.a.poll(&mut c.a_cq).is_some(), "the WRITE completes");
    let (a, b) = (c.p.a.dev.cong().stats, c.p.b.dev.cong().stats);
    assert_eq!(b.np_ecn_marked_roce_packets, marked);
    assert!(marked >= 512, "{marked} marked");
    assert!(b.np_cnp_sent >= 2, "{b:?}");
    assert_eq!(a.rp_cnp_handled, b.np_cnp_sent);
    let r = c.p.a.dev.qp_rate(c.a_qp.qpn).unwrap();
    assert_eq!(r.cnps_handled, b.np_cnp_sent);
}

/// A 1 MiB WRITE from a (10 Gb/s link) to b (1 Gb/s link) through one switch whose egress
/// marks priority 0 by RED; with `cc` the RP (with the paper's parameters) and NP are on.
/// Returns the mean queue of the
/// switch's port toward b over the run's second half (sampled every 10 µs), the CNPs a
/// handled, and whether the WRITE landed and completed.
fn write_through_red_switch(cc: bool) -> (u64, u64, bool) {
    use crate::device::Device;
    use crate::net::{LinkSpec, Node, PortRef, RedConfig, SwitchSpec, Topology};
    use crate::profile::Profile;
    use crate::world::World;
    const LEN: usize = 1 << 20;
    let mut c = conn(cc, cc);
    c.p.a.dev.set_line_rate_mbps(10_000);
    // The DCQCN paper's parameters (g 1/256, alpha and rate timers 55 µs, 10 MB byte
    // counter, 5 fast-recovery steps, RT = RC on every CNP).
    let rp = &mut c.p.a.dev.cong_mut().rp;
    rp.clamp_tgt_rate = true;
    rp.dce_tcp_g = 1020;
    rp.dce_tcp_rtt = 55;
    rp.rpg_time_reset = 55;
    rp.rpg_byte_reset = 10_000_000;
    rp.rpg_threshold = 5;
    let data: Vec<u8> = (0..LEN).map(|i| (i * 13 + 1) as u8).collect();
    c.p.a.write(c.a_mr.off, &data);
    write(&mut c, LEN as u32);
    let fast = LinkSpec {
        rate_bps: 10_000_000_000,
        prop_ns: 1_000,
        mtu: 1_500,
    };
    let slow = LinkSpec {
        rate_bps: 1_000_000_000,
        ..fast
    };
    let red = RedConfig {
        kmin_bytes: 5_000,
        kmax_bytes: 200_000,
        pmax: 0.1,
    };
    let mut t = Topology::new();
    let s = t.add_switch(SwitchSpec::default().with_red(0, red));
    t.connect(Node::Nic(0), Node::Switch(s), fast);
    t.connect(Node::Nic(1), Node::Switch(s), slow);
    let spare = || Device::new(Profile::with_id(9));
    let a = std::mem::replace(&mut c.p.a.dev, spare());
    let b = std::mem::replace(&mut c.p.b.dev, spare());
    let mut w = World::with_devices(11, vec![a, b]);
    w.set_topology(Some(&t)).unwrap();
    let net = w.network_mut().unwrap();
    net.set_sampling(Some(10_000));
    let at = net
        .ports()
        .position(|p| p == PortRef::Switch { switch: 0, port: 1 })
        .unwrap();
    assert!(w.settle(100_000_000_000).unwrap(), "the world went quiet");
    let samples = w.network_mut().unwrap().take_samples();
    // The mean queue toward b over the second half of the run (past the first burst).
    let half = &samples[samples.len() / 2..];
    let q = half.iter().map(|s| s.queued[at][0]).sum::<u64>() / half.len().max(1) as u64;
    let mut devices = w.into_devices().into_iter();
    c.p.a.dev = devices.next().unwrap();
    c.p.b.dev = devices.next().unwrap();
    let ok = c.p.a.poll(&mut c.a_cq).is_some_and(|e| e[63] >> 4 == 0)
        && c.p.b.read(c.b_mr.off, LEN) == data;
    (q, c.p.a.dev.cong().stats.rp_cnp_handled, ok)
}

#[test]
fn dcqcn_keeps_a_red_switch_queue_shorter_than_no_congestion_control() {
    let (q_off, cnps_off, ok_off) = write_through_red_switch(false);
    let (q_on, cnps_on, ok_on) = write_through_red_switch(true);
    assert!(ok_off && ok_on, "both WRITEs land and complete");
    assert_eq!(cnps_off, 0);
    assert!(cnps_on >= 2, "{cnps_on} CNPs");
    // Without CC the window keeps the queue full; DCQCN paces the sender near the 1 Gb/s
    // bottleneck.
    assert!(
        q_on * 2 < q_off,
        "queue with DCQCN {q_on} B, without {q_off} B"
    );
}
