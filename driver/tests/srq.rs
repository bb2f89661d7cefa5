//! SRQs through the driver on the stepped sim: QPs on one SRQ receiving SENDs (the SRQ's
//! `wr_id`s, WQEs back on the free list), RNR while it is empty and recovery, the limit event
//! once per arming, LAST_WQE_REACHED, DESTROY_RMP refused while a QP is attached, and bad
//! input refused.

mod datapath_util;

use std::sync::Arc;

use bypass_driver::DriverError;
use bypass_driver::Hca;
use bypass_driver::cq::Cq;
use bypass_driver::eq::AsyncEvent;
use bypass_driver::mr::{MkeyAccess, Mr};
use bypass_driver::pd::Pd;
use bypass_driver::poll::WcStatus;
use bypass_driver::post::{PostError, RecvWr, SendOp, SendWr};
use bypass_driver::qp::Qp;
use bypass_driver::qp_attr::{Init2Rtr, QpCaps, QpType, Rst2Init, Rtr2Rts};
use bypass_driver::srq::{Srq, SrqAttr};
use bypass_hw::eqe::EventType;
use bypass_hw::syndrome::{CmdStatus, CqeSyndrome};
use bypass_sim::Profile;
use bypass_sim::fabric::{SimBackend, SimFabric};
use datapath_util::settle;

struct Node {
    qps: Vec<Qp>,
    srq: Option<Srq>,
    mr: Mr,
    cq: Cq,
    pd: Arc<Pd>,
    hca: Arc<Hca>,
    gid: [u8; 16],
    backend: Arc<SimBackend>,
}

fn node(f: &SimFabric, id: u8) -> Node {
    let backend = f.add_device(Profile::with_id(id)).unwrap();
    let hca = Arc::new(Hca::open(backend.clone()).unwrap());
    let pd = Pd::alloc(&hca).unwrap();
    let cq = Cq::create(&hca, 256).unwrap();
    let buf = hca.alloc_dma(1 << 20).unwrap();
    let mr = Mr::register(&pd, buf, MkeyAccess::all()).unwrap();
    let gid = hca.ports()[0].gids[0];
    Node {
        qps: Vec::new(),
        srq: None,
        mr,
        cq,
        pd,
        hca,
        gid,
        backend,
    }
}

fn walk(qp: &mut Qp, dest: u32, rgid: [u8; 16], rnr_retry: u8) {
    qp.rst2init(&Rst2Init::default()).unwrap();
    qp.init2rtr(&Init2Rtr::rc(dest, 0x100, rgid)).unwrap();
    let mut rts = Rtr2Rts::new(0x100);
    rts.rnr_retry = rnr_retry;
    qp.rtr2rts(&rts).unwrap();
}

/// A sender with `n` RC QPs and a receiver with `n` RC QPs on one SRQ, connected pairwise.
fn setup(n: usize, attr: SrqAttr, rnr_retry: u8) -> (SimFabric, Node, Node) {
    let f = SimFabric::stepped(7);
    let mut a = node(&f, 1);
    let mut b = node(&f, 2);
    let srq = Srq::create(&b.pd, &attr).unwrap();
    for _ in 0..n {
        a.qps
            .push(Qp::create(&a.pd, &a.cq, &a.cq, QpType::Rc, &QpCaps::default()).unwrap());
        b.qps.push(
            Qp::create_on_srq(&b.pd, &b.cq, &b.cq, QpType::Rc, &QpCaps::default(), &srq).unwrap(),
        );
    }
    for k in 0..n {
        let (aq, bq) = (a.qps[k].qpn(), b.qps[k].qpn());
        let (ag, bg) = (a.gid, b.gid);
        walk(&mut a.qps[k], bq, bg, rnr_retry);
        walk(&mut b.qps[k], aq, ag, rnr_retry);
    }
    b.srq = Some(srq);
    (f, a, b)
}

fn post_srq(b: &Node, wr_id: u64, off: u64) {
    let sge = [b.mr.sge(off, 256)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe {
        b.srq
            .as_ref()
            .unwrap()
            .post_srq_recv(&RecvWr { wr_id, sges: &sge })
    }
    .unwrap();
}

fn send(a: &mut Node, k: usize, wr_id: u64, byte: u8) {
    a.mr.buf().write(0x1000 * k, &[byte; 64]).unwrap();
    let sge = [a.mr.sge(0x1000 * k as u64, 64)];
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { a.qps[k].post_send(&SendWr::new(wr_id, SendOp::Send, &sge)) }.unwrap();
}

fn read(mr: &Mr, off: usize) -> Vec<u8> {
    let mut v = vec![0; 64];
    mr.buf().read(off, &mut v).unwrap();
    v
}

fn events(h: &Hca) -> Vec<AsyncEvent> {
    h.process_events().unwrap()
}

#[test]
fn eight_qps_share_one_srq_and_completions_name_the_srq_wr_ids() {
    let (f, mut a, mut b) = setup(8, SrqAttr::default(), 7);
    for w in 0..8u64 {
        post_srq(&b, 100 + w, 0x1000 * w);
    }
    for k in 0..8 {
        send(&mut a, k, k as u64, 0xa0 + k as u8);
    }
    settle(&f);
    let mut got: Vec<(u32, u64)> = Vec::new();
    while let Some(wc) = b.cq.poll_one() {
        assert_eq!(wc.status(), WcStatus::Success);
        assert!(wc.opcode().is_recv());
        assert_eq!(wc.byte_len(), 64);
        // The SRQ WQE's own index (the free list hands out 0, 1, 2, ... first).
        assert_eq!(u64::from(wc.wqe_index()) + 100, wc.wr_id());
        let data = read(&b.mr, 0x1000 * (wc.wr_id() - 100) as usize);
        let k = b.qps.iter().position(|q| q.qpn() == wc.qpn()).unwrap();
        assert_eq!(data, vec![0xa0 + k as u8; 64]);
        got.push((wc.qpn(), wc.wr_id()));
    }
    assert_eq!(got.len(), 8);
    let mut ids: Vec<u64> = got.iter().map(|g| g.1).collect();
    ids.sort_unstable();
    assert_eq!(ids, (100..108).collect::<Vec<_>>());
    let mut qpns: Vec<u32> = got.iter().map(|g| g.0).collect();
    qpns.sort_unstable();
    qpns.dedup();
    assert_eq!(qpns.len(), 8, "every QP received one");
    let sends = std::iter::from_fn(|| a.cq.poll_one()).count();
    assert_eq!(sends, 8);
    // The WQEs went back to the free list: the SRQ takes max_wr more, many times over.
    for round in 0..20u64 {
        post_srq(&b, 1000 + round, 0);
        send(&mut a, (round % 8) as usize, round, 1);
        settle(&f);
        let wc = b.cq.poll_one().expect("a receive");
        assert_eq!(wc.wr_id(), 1000 + round);
        while a.cq.poll_one().is_some() {}
    }
}

#[test]
fn an_empty_srq_rnr_naks_and_the_send_completes_once_a_receive_is_posted() {
    let (f, mut a, mut b) = setup(2, SrqAttr::default(), 7);
    send(&mut a, 0, 1, 0x5a);
    // Some virtual time with nothing posted: RNR NAKs (retried forever), nothing completes.
    for _ in 0..20 {
        f.run_until_idle().unwrap();
        if let Some(next) = f.with_world(|w| w.next_event()) {
            f.with_world(|w| {
                let now = w.now();
                w.advance(next.saturating_sub(now).max(1))
            })
            .unwrap();
        }
    }
    assert!(b.cq.poll_one().is_none());
    assert!(a.cq.poll_one().is_none());
    let rnr = b.backend.with_device(|d| d.counters.out_of_buffer).unwrap();
    assert!(rnr >= 2, "RNR NAKs sent: {rnr}");
    post_srq(&b, 9, 0);
    settle(&f);
    let wc = b.cq.poll_one().expect("the receive");
    assert_eq!((wc.wr_id(), wc.byte_len()), (9, 64));
    assert_eq!(read(&b.mr, 0), vec![0x5a; 64]);
    let s = a.cq.poll_one().expect("the send");
    assert_eq!((s.wr_id(), s.status()), (1, WcStatus::Success));
}

#[test]
fn an_empty_srq_with_no_rnr_retries_fails_the_send() {
    let (f, mut a, mut b) = setup(1, SrqAttr::default(), 0);
    send(&mut a, 0, 1, 0);
    settle(&f);
    let s = a.cq.poll_one().expect("the send fails");
    assert_eq!(s.status(), WcStatus::Error(CqeSyndrome::RNR_RETRY_EXC_ERR));
    assert!(b.cq.poll_one().is_none());
}

#[test]
fn the_limit_event_fires_once_per_arming() {
    let attr = SrqAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    };
    let (f, mut a, mut b) = setup(2, attr, 7);
    let srq = b.srq.as_ref().unwrap();
    for w in 0..6 {
        post_srq(&b, w, 0x100 * w);
    }
    srq.arm_limit(4).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 4);
    let limit_events = |h: &Hca| {
        events(h)
            .iter()
            .filter_map(AsyncEvent::srq_limit_srqn)
            .collect::<Vec<_>>()
    };
    // 6 posted -> 5 -> 4: not below 4.
    for i in 0..2 {
        send(&mut a, i % 2, i as u64, 1);
        settle(&f);
    }
    assert!(limit_events(&b.hca).is_empty());
    // 4 -> 3: below the limit, one event, and the limit is disarmed.
    send(&mut a, 0, 2, 1);
    settle(&f);
    assert_eq!(limit_events(&b.hca), vec![srq.srqn()]);
    assert_eq!(srq.query().unwrap().srq_limit, 0);
    send(&mut a, 1, 3, 1);
    settle(&f);
    assert!(limit_events(&b.hca).is_empty(), "not again until re-armed");
    // Re-armed above the count: the next WQE taken raises it again.
    srq.arm_limit(5).unwrap();
    send(&mut a, 0, 4, 1);
    settle(&f);
    assert_eq!(limit_events(&b.hca), vec![srq.srqn()]);
    assert_eq!(
        std::iter::from_fn(|| b.cq.poll_one()).count(),
        5,
        "every send was received"
    );
}

#[test]
fn a_qp_on_an_srq_entering_err_raises_last_wqe_reached() {
    let (f, _a, mut b) = setup(2, SrqAttr::default(), 7);
    post_srq(&b, 1, 0);
    let _ = events(&b.hca);
    let qpn = b.qps[1].qpn();
    b.qps[1].to_error().unwrap();
    settle(&f);
    let last: Vec<u32> = events(&b.hca)
        .iter()
        .filter(|e| e.event_type == EventType::LAST_WQE)
        .filter_map(AsyncEvent::last_wqe_qpn)
        .collect();
    assert_eq!(last, vec![qpn]);
    // The SRQ's WQE is not flushed by one QP's error.
    assert!(b.cq.poll_one().is_none());
}

#[test]
fn destroy_is_refused_while_a_qp_is_attached() {
    let (_f, _a, mut b) = setup(1, SrqAttr::default(), 7);
    let srq = b.srq.take().unwrap();
    assert_eq!(srq.attached(), 1);
    let (srq, e) = srq.destroy().unwrap_err();
    match e {
        DriverError::CmdFailed { status, .. } => assert_eq!(status, CmdStatus::RES_BUSY),
        other => panic!("{other}"),
    }
    b.qps.clear();
    srq.destroy().unwrap();
}

#[test]
fn bad_input_is_refused() {
    let f = SimFabric::stepped(3);
    let b = node(&f, 2);
    let max = |max_wr| SrqAttr {
        max_wr,
        ..SrqAttr::default()
    };
    for bad in [
        max(0),
        max(1 << 15),
        SrqAttr {
            max_sge: 1000,
            ..SrqAttr::default()
        },
        SrqAttr {
            srq_limit: 64,
            ..SrqAttr::default()
        },
    ] {
        assert!(matches!(
            Srq::create(&b.pd, &bad),
            Err(DriverError::Unsupported { .. })
        ));
    }
    let srq = Srq::create(&b.pd, &max(4)).unwrap();
    assert!(matches!(
        srq.arm_limit(srq.max_wr()),
        Err(DriverError::Unsupported { .. })
    ));
    // Full at max_wr (rdma-core: head == tail).
    for w in 0..srq.max_wr() {
        let sge = [b.mr.sge(0, 16)];
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            srq.post_srq_recv(&RecvWr {
                wr_id: u64::from(w),
                sges: &sge,
            })
        }
        .unwrap();
    }
    let sge = [b.mr.sge(0, 16)];
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            srq.post_srq_recv(&RecvWr {
                wr_id: 9,
                sges: &sge,
            })
        },
        Err(PostError::SrqFull { .. })
    ));
    let two = [b.mr.sge(0, 16), b.mr.sge(16, 16)];
    let one_sge = Srq::create(&b.pd, &max(4)).unwrap();
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            one_sge.post_srq_recv(&RecvWr {
                wr_id: 9,
                sges: &two,
            })
        },
        Err(PostError::TooManySges { .. })
    ));
    // A QP on an SRQ takes no receive of its own.
    let mut qp = Qp::create_on_srq(
        &b.pd,
        &b.cq,
        &b.cq,
        QpType::Rc,
        &QpCaps::default(),
        &one_sge,
    )
    .unwrap();
    qp.rst2init(&Rst2Init::default()).unwrap();
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            qp.post_recv(&RecvWr {
                wr_id: 1,
                sges: &sge,
            })
        },
        Err(PostError::OnSrq { .. })
    ));
    assert_eq!(qp.srqn(), Some(one_sge.srqn()));
}

#[test]
fn destroying_a_qp_gives_the_srq_wqes_of_its_unpolled_receives_back() {
    let attr = SrqAttr {
        max_wr: 4,
        ..SrqAttr::default()
    };
    let (f, mut a, mut b) = setup(1, attr, 7);
    let srq_max = b.srq.as_ref().unwrap().max_wr();
    for w in 0..u64::from(srq_max) {
        post_srq(&b, w, 0x100 * w);
    }
    send(&mut a, 0, 1, 1);
    settle(&f);
    // The receive CQE stays unpolled; the QP's destroy cleans it from the CQ.
    b.qps.clear();
    post_srq(&b, 50, 0);
    let sge = [b.mr.sge(0, 16)];
    assert!(matches!(
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            b.srq.as_ref().unwrap().post_srq_recv(&RecvWr {
                wr_id: 51,
                sges: &sge,
            })
        },
        Err(PostError::SrqFull { .. })
    ));
    assert!(b.cq.poll_one().is_none(), "the CQE was cleaned");
}

#[test]
fn a_ud_qp_on_an_empty_srq_drops_the_datagram_then_receives_into_the_srq() {
    use bypass_driver::post::UdDest;
    let f = SimFabric::stepped(9);
    let mut a = node(&f, 1);
    let mut b = node(&f, 2);
    let srq = Srq::create(&b.pd, &SrqAttr::default()).unwrap();
    let caps = QpCaps::default();
    let mut qa = Qp::create(&a.pd, &a.cq, &a.cq, QpType::Ud, &caps).unwrap();
    let mut qb = Qp::create_on_srq(&b.pd, &b.cq, &b.cq, QpType::Ud, &caps, &srq).unwrap();
    for qp in [&mut qa, &mut qb] {
        qp.rst2init(&Rst2Init {
            qkey: 0x1111_1111,
            ..Rst2Init::default()
        })
        .unwrap();
        qp.init2rtr(&Init2Rtr::ud()).unwrap();
        qp.rtr2rts(&Rtr2Rts::new(0)).unwrap();
    }
    let mac = b.hca.ports()[0].mac;
    let dest = UdDest::roce(qb.qpn(), 0x1111_1111, b.gid, mac, 0, 64);
    a.mr.buf().write(0, b"datagram").unwrap();
    let s = [a.mr.sge(0, 8)];
    let wr = SendWr {
        ud: Some(&dest),
        ..SendWr::new(1, SendOp::Send, &s)
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { qa.post_send(&wr) }.unwrap();
    settle(&f);
    assert!(
        a.cq.poll_one()
            .is_some_and(|c| c.status() == WcStatus::Success)
    );
    assert!(b.cq.poll_one().is_none(), "dropped: no receive posted");
    let drops = b.backend.with_device(|d| d.counters.out_of_buffer).unwrap();
    assert_eq!(drops, 1);
    b.srq = Some(srq);
    post_srq(&b, 77, 0);
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { qa.post_send(&wr) }.unwrap();
    settle(&f);
    let c = b.cq.poll_one().expect("the datagram");
    assert_eq!((c.wr_id(), c.byte_len()), (77, 40 + 8));
    assert_eq!(&read(&b.mr, 40)[..8], b"datagram");
    drop(qb);
}

#[test]
fn multi_packet_sends_of_two_qps_each_fill_their_own_srq_wqe() {
    let (f, mut a, mut b) = setup(2, SrqAttr::default(), 7);
    let srq = b.srq.as_ref().unwrap();
    for w in 0..2u64 {
        let sge = [b.mr.sge(0x10000 * (w + 1), 0x8000)];
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe {
            srq.post_srq_recv(&RecvWr {
                wr_id: w,
                sges: &sge,
            })
        }
        .unwrap();
    }
    for k in 0..2usize {
        let msg: Vec<u8> = (0..20_000u32)
            .map(|i| (i as u8) ^ (k as u8 * 0x55))
            .collect();
        a.mr.buf().write(0x10000 * (k + 1), &msg).unwrap();
        let sge = [a.mr.sge(0x10000 * (k as u64 + 1), 20_000)];
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe { a.qps[k].post_send(&SendWr::new(k as u64, SendOp::Send, &sge)) }.unwrap();
    }
    settle(&f);
    let mut seen = 0;
    while let Some(wc) = b.cq.poll_one() {
        assert_eq!((wc.status(), wc.byte_len()), (WcStatus::Success, 20_000));
        let k = b.qps.iter().position(|q| q.qpn() == wc.qpn()).unwrap();
        let mut got = vec![0u8; 20_000];
        b.mr.buf()
            .read(0x10000 * (wc.wr_id() as usize + 1), &mut got)
            .unwrap();
        let want: Vec<u8> = (0..20_000u32)
            .map(|i| (i as u8) ^ (k as u8 * 0x55))
            .collect();
        assert!(got == want, "QP {k}'s message landed whole in its own WQE");
        seen += 1;
    }
    assert_eq!(seen, 2);
}
