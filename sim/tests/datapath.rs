//! The data path driven the way a driver drives it: two simulated NICs brought up with real
//! firmware commands, PDs, CQs, MRs and QPs created and connected with commands, WQEs posted
//! through the SQ ring and UAR doorbells, completions polled with the owner-bit rule, packets
//! carried between the NICs by a stepped `World`.

mod common;

use bypass_hw::cmd::mkey::MkeyAccess;
use bypass_hw::cmd::qp::{PathMtu, QpState, QueryQpOut, service_type as st};
use bypass_hw::cqe::{Cqe64, CqeOpcode, ErrCqe};
use bypass_hw::eqe::EventType;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::view::View;
use bypass_hw::wqe::{AtomicSeg, DataSeg, RaddrSeg, WqeOpcode};
use bypass_sim::trace::TraceEvent;
use bypass_sim::{LinkConfig, Profile, World};
use common::qp::{HostQp, wqe};
use common::{HostCq, HostEq, HostMr, Raw};
use zerocopy::IntoBytes;

const ALL: MkeyAccess = MkeyAccess::all();

/// One side of a connection.
struct Side {
    raw: Raw,
    eq: HostEq,
    cq: HostCq,
    qp: HostQp,
    mr: HostMr,
    id: usize,
}

/// Two NICs, brought up by commands, each with a completion EQ on vector 1, a CQ, a 1 MiB MR
/// and a QP of type `service` connected to the other side, inside a world of seed `seed`.
fn pair(seed: u64, service: u8, link: LinkConfig) -> (World, Side, Side) {
    let mut world = World::new(seed);
    world.set_link(link);
    let mut sides = [1u8, 2].map(|id| {
        let mut raw = Raw::new(Profile::with_id(id));
        raw.dev.trace.set_enabled(true);
        raw.bring_up();
        let pd = raw.alloc_pd().expect("PD");
        let uar = raw.uar;
        let mut eq = raw.create_eq(uar, 6, &[], 1).expect("completion EQ");
        raw.arm_eq(&eq);
        let _ = raw.poll_eq(&mut eq);
        let cq = raw.create_cq(7, eq.eqn).expect("CQ");
        let mr = raw.reg_mr(pd, 1 << 20, ALL).expect("MR");
        let qp = raw.create_qp(service, pd, &cq, &cq, 6, 6).expect("QP");
        let id = world.add_device(Profile::with_id(id));
        Side {
            raw,
            eq,
            cq,
            qp,
            mr,
            id,
        }
    });
    let (ga, gb) = (sides[0].raw.gid(), sides[1].raw.gid());
    let (qa, qb) = (sides[0].qp, sides[1].qp);
    sides[0]
        .raw
        .walk_to_rts(&qa, service, qb.qpn, gb, (0x100, 0x200), PathMtu::Mtu1024);
    sides[1]
        .raw
        .walk_to_rts(&qb, service, qa.qpn, ga, (0x200, 0x100), PathMtu::Mtu1024);
    let [a, b] = sides;
    (world, a, b)
}

/// Lets the world run the two devices until the network is quiet.
fn run(world: &mut World, a: &mut Side, b: &mut Side) {
    std::mem::swap(world.device(a.id), &mut a.raw.dev);
    std::mem::swap(world.device(b.id), &mut b.raw.dev);
    let quiet = world
        .settle(10_000_000_000)
        .unwrap_or_else(|e| panic!("{e}"));
    std::mem::swap(world.device(a.id), &mut a.raw.dev);
    std::mem::swap(world.device(b.id), &mut b.raw.dev);
    assert!(
        quiet,
        "the network did not go quiet (seed {})",
        world.seed()
    );
}

fn cqe(b: &[u8; 64]) -> &Cqe64 {
    Cqe64::view(b).unwrap()
}

fn data(mr: &HostMr, off: u64, len: u32) -> DataSeg {
    DataSeg::new(len, mr.key, mr.va + off)
}

#[test]
fn rc_send_write_read_and_atomics_over_commands_and_doorbells() {
    let (mut w, mut a, mut b) = pair(1, st::RC, LinkConfig::default());
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    a.raw.write(a.mr.off, &msg);
    let (bk, bva) = (b.mr.key, b.mr.va);
    b.raw.post_recv(&mut b.qp, &[(bk, bva, 4096)]);

    let w0 = wqe(
        WqeOpcode::SEND,
        a.qp.sq_pi,
        a.qp.qpn,
        0,
        &[data(&a.mr, 0, 3000).as_bytes()],
    );
    a.raw.post_send(&mut a.qp, &w0);
    let w1 = wqe(
        WqeOpcode::RDMA_WRITE,
        a.qp.sq_pi,
        a.qp.qpn,
        0,
        &[
            RaddrSeg::new(bva + 8192, bk).as_bytes(),
            data(&a.mr, 0, 3000).as_bytes(),
        ],
    );
    a.raw.post_send(&mut a.qp, &w1);
    b.raw.write(b.mr.off + 65536, b"remote bytes to read");
    let w2 = wqe(
        WqeOpcode::RDMA_READ,
        a.qp.sq_pi,
        a.qp.qpn,
        0,
        &[
            RaddrSeg::new(bva + 65536, bk).as_bytes(),
            data(&a.mr, 16384, 20).as_bytes(),
        ],
    );
    a.raw.post_send(&mut a.qp, &w2);
    b.raw.write(b.mr.off + 100_000, &41u64.to_be_bytes());
    let w3 = wqe(
        WqeOpcode::ATOMIC_FA,
        a.qp.sq_pi,
        a.qp.qpn,
        0,
        &[
            RaddrSeg::new(bva + 100_000, bk).as_bytes(),
            AtomicSeg::fetch_add(1).as_bytes(),
            data(&a.mr, 32768, 8).as_bytes(),
        ],
    );
    a.raw.post_send(&mut a.qp, &w3);
    run(&mut w, &mut a, &mut b);

    assert!(b.raw.read(b.mr.off, 3000) == msg, "SEND payload differs");
    assert!(
        b.raw.read(b.mr.off + 8192, 3000) == msg,
        "WRITE payload differs"
    );
    assert_eq!(
        a.raw.read(a.mr.off + 16384, 20),
        b"remote bytes to read",
        "READ"
    );
    assert_eq!(
        b.raw.read(b.mr.off + 100_000, 8),
        42u64.to_be_bytes(),
        "FETCH_ADD target"
    );
    assert_eq!(
        a.raw.read(a.mr.off + 32768, 8),
        41u64.to_be_bytes(),
        "FETCH_ADD result"
    );
    for (i, op) in [
        WqeOpcode::SEND,
        WqeOpcode::RDMA_WRITE,
        WqeOpcode::RDMA_READ,
        WqeOpcode::ATOMIC_FA,
    ]
    .into_iter()
    .enumerate()
    {
        let c = a
            .raw
            .poll_cq(&mut a.cq)
            .unwrap_or_else(|| panic!("send CQE {i}"));
        assert_eq!(cqe(&c).opcode(), CqeOpcode::REQ);
        assert_eq!(cqe(&c).wqe_opcode(), op);
    }
    let r = b.raw.poll_cq(&mut b.cq).expect("receive CQE");
    assert_eq!(
        (cqe(&r).opcode(), cqe(&r).byte_cnt()),
        (CqeOpcode::RESP_SEND, 3000)
    );

    // QUERY_QP shows the live PSNs: SEND 3 packets, WRITE 3, READ 1, FA 1 from 0x100.
    let out = a.raw.query_qp(a.qp.qpn);
    let q = QueryQpOut::new_checked(&out[..]).unwrap();
    assert_eq!(q.qpc().state(), QpState::Rts as u32);
    assert_eq!(q.qpc().next_send_psn(), 0x100 + 8);
    let out = b.raw.query_qp(b.qp.qpn);
    assert_eq!(
        QueryQpOut::new_checked(&out[..])
            .unwrap()
            .qpc()
            .next_rcv_psn(),
        0x100 + 8
    );
}

#[test]
fn armed_cq_raises_a_completion_event_and_an_interrupt() {
    let (mut w, mut a, mut b) = pair(2, st::RC, LinkConfig::default());
    a.raw.arm_cq(&a.cq, 0, false);
    let before = a.raw.dev.interrupts(1);
    a.raw.write(a.mr.off, b"x");
    let (bk, bva) = (b.mr.key, b.mr.va);
    let w0 = wqe(
        WqeOpcode::RDMA_WRITE,
        0,
        a.qp.qpn,
        0,
        &[
            RaddrSeg::new(bva, bk).as_bytes(),
            data(&a.mr, 0, 1).as_bytes(),
        ],
    );
    a.raw.post_send(&mut a.qp, &w0);
    run(&mut w, &mut a, &mut b);
    assert_eq!(
        a.raw.dev.interrupts(1),
        before + 1,
        "one interrupt on the EQ's vector"
    );
    let events = a.raw.poll_eq(&mut a.eq);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, EventType::COMPLETION.0);
    assert_eq!(
        u32::from_be_bytes(events[0].2[24..28].try_into().unwrap()) & 0xff_ffff,
        a.cq.cqn
    );
    assert!(a.raw.poll_cq(&mut a.cq).is_some());
    // Not re-armed: the next completion raises nothing.
    let w1 = wqe(
        WqeOpcode::RDMA_WRITE,
        1,
        a.qp.qpn,
        0,
        &[
            RaddrSeg::new(bva, bk).as_bytes(),
            data(&a.mr, 0, 1).as_bytes(),
        ],
    );
    a.raw.post_send(&mut a.qp, &w1);
    run(&mut w, &mut a, &mut b);
    assert_eq!(a.raw.dev.interrupts(1), before + 1);
    assert!(a.raw.poll_eq(&mut a.eq).is_empty());
}

/// A brought-up device with a 2-entry CQ, a 4 KiB MR and an RC QP in INIT whose send and
/// receive CQ it is (16 receive WQEs): the setup of the CQ overrun tests.
fn rc_qp_on_a_2_entry_cq() -> (Raw, HostCq, HostMr, HostQp) {
    let mut raw = Raw::new(Profile::with_id(1));
    raw.bring_up();
    let pd = raw.alloc_pd().unwrap();
    let eqn = raw.async_eq.unwrap().eqn;
    let cq = raw.create_cq(1, eqn).unwrap();
    let mr = raw.reg_mr(pd, 4096, ALL).unwrap();
    let qp = raw.create_qp(st::RC, pd, &cq, &cq, 4, 4).unwrap();
    raw.rst2init(&qp, st::RC).unwrap();
    (raw, cq, mr, qp)
}

#[test]
fn cq_overrun_raises_a_cq_error_event() {
    let (mut raw, mut cq, mr, mut qp) = rc_qp_on_a_2_entry_cq();
    // Three receives flushed by 2ERR produce three CQEs on a 2-entry CQ nobody polls.
    for _ in 0..3 {
        raw.post_recv(&mut qp, &[(mr.key, mr.va, 64)]);
    }
    qp_2err(&mut raw, qp.qpn);
    let events = raw.poll_async();
    let cq_err: Vec<_> = events
        .iter()
        .filter(|e| e.0 == EventType::CQ_ERROR.0)
        .collect();
    assert_eq!(cq_err.len(), 1, "{events:?}");
    assert_eq!(
        u32::from_be_bytes(cq_err[0].2[0..4].try_into().unwrap()) & 0xff_ffff,
        cq.cqn
    );
    assert_eq!(cq_err[0].2[11], 1, "syndrome CQ_OVERRUN");
    let f = raw.poll_cq(&mut cq).expect("the first flush CQE");
    assert_eq!(
        ErrCqe::view(&f).unwrap().syndrome(),
        CqeSyndrome::WR_FLUSH_ERR
    );
}

/// Moves `qpn` to ERR with the QP_2ERR command.
fn qp_2err(raw: &mut Raw, qpn: u32) {
    let mut i = common::header(
        bypass_hw::cmd::Opcode::QP_2ERR,
        0,
        bypass_hw::cmd::qp::Qp2ErrIn::LEN,
    );
    bypass_hw::cmd::qp::Qp2ErrIn::new_checked(&mut i[..])
        .unwrap()
        .set_qpn(qpn)
        .unwrap();
    raw.ok(&i, 16);
}

/// A CQ in overrun drops every CQE after the one that overran it, yet the flush it drops them
/// for still consumes and counts each receive: a ring of 16 flushed by 2ERR into a 2-entry CQ,
/// then another ring's worth posted on the QP in error. Two CQEs are written, one CQ error is
/// raised, all 32 receives are counted, and nothing is left to flush.
#[test]
fn a_flush_into_an_overrun_cq_consumes_and_counts_every_receive() {
    let (mut raw, mut cq, mr, mut qp) = rc_qp_on_a_2_entry_cq();
    for _ in 0..qp.rq_wqes {
        raw.post_recv(&mut qp, &[(mr.key, mr.va, 64)]);
    }
    qp_2err(&mut raw, qp.qpn);
    let qpn = qp.qpn;
    let flushed = |raw: &Raw| {
        let q = raw.dev.qp_counters(qpn).unwrap();
        (
            q.resp_cqe_flush_error,
            raw.dev.counters.resp_cqe_flush_error,
        )
    };
    assert_eq!(flushed(&raw), (16, 16));
    for _ in 0..qp.rq_wqes {
        raw.post_recv(&mut qp, &[(mr.key, mr.va, 64)]);
    }
    assert!(raw.dev.step(), "the late receives are flushed");
    assert_eq!(flushed(&raw), (32, 32));
    assert!(!raw.dev.step(), "every receive was consumed");
    let events = raw.poll_async();
    let cq_errors = events
        .iter()
        .filter(|e| e.0 == EventType::CQ_ERROR.0)
        .count();
    assert_eq!(cq_errors, 1, "{events:?}");
    for index in 0..2 {
        let f = raw
            .poll_cq(&mut cq)
            .expect("a CQE written before the overrun");
        let e = ErrCqe::view(&f).unwrap();
        assert_eq!(e.syndrome(), CqeSyndrome::WR_FLUSH_ERR);
        assert_eq!(e.wqe_counter(), index);
    }
    assert!(raw.poll_cq(&mut cq).is_none(), "the rest were dropped");
}

#[test]
fn blueflame_doorbell_carries_the_wqe_itself() {
    let (mut w, mut a, mut b) = pair(3, st::RC, LinkConfig::default());
    a.raw.write(a.mr.off, b"by blueflame");
    let (bk, bva) = (b.mr.key, b.mr.va);
    let w0 = wqe(
        WqeOpcode::RDMA_WRITE,
        0,
        a.qp.qpn,
        0,
        &[
            RaddrSeg::new(bva + 4, bk).as_bytes(),
            data(&a.mr, 0, 12).as_bytes(),
        ],
    );
    a.raw.post_send_bf(&mut a.qp, &w0);
    // The device takes the WQE from the BlueFlame write, so a ring copy scribbled after the
    // doorbell does not matter.
    let sq_off = a.qp.wq_off + a.qp.rq_wqes as usize * a.qp.rq_stride;
    a.raw.write(sq_off, &[0xee; 64]);
    run(&mut w, &mut a, &mut b);
    assert_eq!(b.raw.read(b.mr.off + 4, 12), b"by blueflame");
    assert_eq!(
        cqe(&a.raw.poll_cq(&mut a.cq).expect("CQE")).opcode(),
        CqeOpcode::REQ
    );
}

#[test]
fn ud_over_commands_with_grh() {
    let (mut w, mut a, mut b) = pair(4, st::UD, LinkConfig::default());
    a.raw.write(a.mr.off, b"ud payload");
    let (bk, bva) = (b.mr.key, b.mr.va);
    b.raw.post_recv(&mut b.qp, &[(bk, bva, 1024)]);
    let av = bypass_hw::wqe::Av::new(&bypass_hw::wqe::DgramParams {
        key: u64::from(common::qp::QKEY) << 32,
        dqp_dct: b.qp.qpn,
        ext: true,
        hop_limit: 64,
        rgid: b.raw.gid(),
        ..Default::default()
    })
    .unwrap();
    let w0 = wqe(
        WqeOpcode::SEND,
        0,
        a.qp.qpn,
        0,
        &[av.as_bytes(), data(&a.mr, 0, 10).as_bytes()],
    );
    a.raw.post_send(&mut a.qp, &w0);
    run(&mut w, &mut a, &mut b);
    let r = b.raw.poll_cq(&mut b.cq).expect("UD receive");
    assert_eq!(cqe(&r).byte_cnt(), 50);
    assert_eq!(cqe(&r).rqpn(), a.qp.qpn);
    assert_eq!(b.raw.read(b.mr.off + 40, 10), b"ud payload");
}

/// A mixed workload over a jittery link; returns both devices' traces.
fn traced_run(seed: u64) -> Vec<TraceEvent> {
    let (mut w, mut a, mut b) = pair(
        seed,
        st::RC,
        LinkConfig {
            latency_ns: 2_000,
            jitter_ns: 3_000,
        },
    );
    let (bk, bva) = (b.mr.key, b.mr.va);
    for i in 0..8u32 {
        b.raw
            .post_recv(&mut b.qp, &[(bk, bva + u64::from(i) * 4096, 4096)]);
    }
    a.raw.write(a.mr.off, &[7u8; 9000]);
    for i in 0..8u32 {
        let len = 500 + i * 400;
        let w0 = if i % 2 == 0 {
            wqe(
                WqeOpcode::SEND,
                a.qp.sq_pi,
                a.qp.qpn,
                0,
                &[data(&a.mr, 0, len).as_bytes()],
            )
        } else {
            wqe(
                WqeOpcode::RDMA_WRITE,
                a.qp.sq_pi,
                a.qp.qpn,
                0,
                &[
                    RaddrSeg::new(bva + 65536, bk).as_bytes(),
                    data(&a.mr, 0, len).as_bytes(),
                ],
            )
        };
        a.raw.post_send(&mut a.qp, &w0);
    }
    run(&mut w, &mut a, &mut b);
    for i in 0..8 {
        a.raw
            .poll_cq(&mut a.cq)
            .unwrap_or_else(|| panic!("CQE {i} (seed {seed})"));
    }
    let mut t = a.raw.dev.trace.take();
    t.extend(b.raw.dev.trace.take());
    t
}

#[test]
fn the_same_seed_replays_the_same_trace() {
    let first = traced_run(42);
    assert!(
        first
            .iter()
            .filter(|e| matches!(e, TraceEvent::Packet { .. }))
            .count()
            > 30
    );
    assert_eq!(first, traced_run(42), "seed 42 ran differently twice");
    assert_ne!(first, traced_run(43), "another seed draws other delays");
}
