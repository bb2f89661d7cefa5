//! Shared receive queues through the safe API on two stepped sim NICs: one SRQ shared by 8 RC
//! QPs receiving SENDs from 8 peer QPs, the receive leases coming back whichever QP consumed
//! them; RNR while the SRQ is empty and recovery once receives are posted (rnr_retry); the
//! limit event once per arming; LAST_WQE_REACHED when an attached QP goes to ERR; destroy
//! refused while QPs are attached; bad input refused with typed errors.

#[path = "verbs_support.rs"]
mod support;

use bypass_hw::eqe::EventType;
use bypass_sim::fabric::SimFabric;
use bypass_testbed::SimContext;
use bypass_verbs::wr::RecvWr;
use bypass_verbs::{Cq, Qp, QpBuilder, Srq, SrqOptions, VerbsError, WcOpcode};
use support::*;

/// Runs the stepped fabric until the network is quiet (`World::settle`: virtual time moves
/// through RNR and retransmission timers), at most 10 s of it.
fn settle(f: &SimFabric) {
    let quiet = f.with_world(|w| w.settle(10_000_000_000));
    assert!(
        matches!(quiet, Ok(true)),
        "the fabric never went quiet: {quiet:?}"
    );
}

/// `n` connected pairs: a plain RC QP on NIC a, an RC QP on `srq` on NIC b.
fn pairs(r: &Rig, srq: &Srq, n: usize) -> (Vec<Qp>, Vec<Qp>) {
    let (mut qa, mut qb) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
        let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq)
            .srq(srq)
            .build()
            .unwrap();
        let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
        a.connect(&eb).unwrap();
        b.connect(&ea).unwrap();
        qa.push(a);
        qb.push(b);
    }
    (qa, qb)
}

fn drain(cq: &mut Cq) -> Vec<bypass_verbs::Completion> {
    std::iter::from_fn(|| cq.poll_one()).collect()
}

#[test]
fn one_srq_shared_by_eight_qps_receives_from_eight_peers() {
    let mut r = rig();
    let srq = Srq::new(&r.b.pd, &r.b.cq, &SrqOptions::default()).unwrap();
    let (mut qa, qb) = pairs(&r, &srq, 8);
    for w in 0..8 {
        srq.post_recv(RecvWr::new(100 + w, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    assert_eq!(
        r.b.pool.leased(),
        8,
        "the receive leases are parked in the SRQ"
    );
    for (k, a) in qa.iter_mut().enumerate() {
        a.post_send(send_of(&r.a.pool, k as u64, &[k as u8 + 1; 32]))
            .unwrap();
    }
    settle(&r.fabric);
    let got = drain(&mut r.b.cq);
    assert_eq!(got.len(), 8);
    let mut ids = Vec::new();
    for c in got {
        assert!(c.is_ok(), "{c}");
        assert_eq!((c.opcode(), c.byte_len()), (WcOpcode::Recv, 32));
        let k = qb
            .iter()
            .position(|q| q.qpn() == c.qpn())
            .expect("one of ours");
        assert_eq!(c.src_qp(), qa[k].qpn());
        ids.push(c.wr_id());
        let mut l = srq
            .reclaim(c)
            .unwrap()
            .into_leases()
            .next()
            .expect("the receive buffer");
        l.set_len(32).unwrap();
        assert_eq!(l.as_slice(), &[k as u8 + 1; 32]);
    }
    ids.sort_unstable();
    assert_eq!(ids, (100..108).collect::<Vec<_>>());
    assert_eq!(r.b.pool.leased(), 0, "every lease came back");
    assert_eq!(srq.recvs_outstanding(), 0);
    for c in drain(&mut r.a.cq) {
        assert!(c.is_ok(), "{c}");
        let k = qa.iter().position(|q| q.qpn() == c.qpn()).unwrap();
        qa[k].reclaim(c).unwrap();
    }
    assert_eq!(r.a.pool.leased(), 0);
}

#[test]
fn an_empty_srq_answers_rnr_and_the_send_completes_once_a_receive_is_posted() {
    let mut r = rig();
    let srq = Srq::new(&r.b.pd, &r.b.cq, &SrqOptions::default()).unwrap();
    let (mut qa, _qb) = pairs(&r, &srq, 2);
    qa[1]
        .post_send(send_of(&r.a.pool, 5, b"after the RNR"))
        .unwrap();
    // 20 ms of virtual time: the SEND arrives, is RNR NAKed, and is retried (rnr_retry 7
    // retries forever, so the network does not go quiet).
    let quiet = r.fabric.with_world(|w| w.settle(20_000_000));
    assert!(
        matches!(quiet, Ok(false)),
        "RNR retries keep the network busy: {quiet:?}"
    );
    assert!(r.a.cq.poll_one().is_none(), "the requester is RNR-waiting");
    assert!(r.b.cq.poll_one().is_none());
    let rnr_sent =
        r.b.ctx
            .sim()
            .unwrap()
            .with_device(|d| d.counters.out_of_buffer)
            .unwrap();
    let rnr_got =
        r.a.ctx
            .sim()
            .unwrap()
            .with_device(|d| d.counters.rnr_nak_received)
            .unwrap();
    assert!(
        rnr_sent >= 1 && rnr_got >= 1,
        "RNR NAKs: {rnr_sent} sent, {rnr_got} received"
    );
    srq.post_recv(RecvWr::new(9, r.b.pool.lease(64).unwrap()))
        .unwrap();
    settle(&r.fabric);
    let c = r.b.cq.poll_one().expect("the receive");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.wr_id(), 9);
    let mut l = srq.reclaim(c).unwrap().into_leases().next().unwrap();
    l.set_len(13).unwrap();
    assert_eq!(l.as_slice(), b"after the RNR");
    let s = r.a.cq.poll_one().expect("the send");
    assert!(s.is_ok(), "{s}");
}

#[test]
fn the_limit_event_fires_when_the_count_falls_below_it_and_not_again_until_rearmed() {
    let mut r = rig();
    let opts = SrqOptions {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = Srq::new(&r.b.pd, &r.b.cq, &opts).unwrap();
    let (mut qa, _qb) = pairs(&r, &srq, 8);
    for w in 0..8 {
        srq.post_recv(RecvWr::new(w, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    srq.arm_limit(6).unwrap();
    let hca = r.b.ctx.hca().clone();
    let limit = || -> Vec<u32> {
        hca.process_events()
            .unwrap()
            .iter()
            .filter_map(|e| e.srq_limit_srqn())
            .collect()
    };
    let mut send = |k: usize, r: &mut Rig| {
        qa[k].post_send(send_of(&r.a.pool, k as u64, b"x")).unwrap();
        settle(&r.fabric);
        for c in drain(&mut r.b.cq) {
            srq.reclaim(c).unwrap();
        }
        for c in drain(&mut r.a.cq) {
            qa[k].reclaim(c).unwrap();
        }
    };
    // 8 -> 7 -> 6: not below 6.
    send(0, &mut r);
    send(1, &mut r);
    assert!(limit().is_empty());
    // 6 -> 5: below the limit.
    send(2, &mut r);
    assert_eq!(limit(), vec![srq.srqn()]);
    assert_eq!(srq.query().unwrap().srq_limit, 0, "disarmed once it fired");
    send(3, &mut r);
    send(4, &mut r);
    assert!(limit().is_empty(), "not again until re-armed");
    srq.arm_limit(4).unwrap();
    send(5, &mut r);
    assert_eq!(limit(), vec![srq.srqn()]);
}

#[test]
fn an_attached_qp_entering_err_raises_last_wqe_reached() {
    let r = rig();
    let srq = Srq::new(&r.b.pd, &r.b.cq, &SrqOptions::default()).unwrap();
    let (_qa, mut qb) = pairs(&r, &srq, 3);
    srq.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    let hca = r.b.ctx.hca().clone();
    let _ = hca.process_events().unwrap();
    qb[2].to_error().unwrap();
    settle(&r.fabric);
    let last: Vec<u32> = hca
        .process_events()
        .unwrap()
        .iter()
        .filter(|e| e.event_type == EventType::LAST_WQE)
        .filter_map(|e| e.last_wqe_qpn())
        .collect();
    assert_eq!(last, vec![qb[2].qpn()]);
    assert_eq!(
        srq.recvs_outstanding(),
        1,
        "one QP's error flushes no SRQ WQE"
    );
}

#[test]
fn destroy_is_refused_while_qps_are_attached() {
    let r = rig();
    let srq = Srq::new(&r.b.pd, &r.b.cq, &SrqOptions::default()).unwrap();
    let (_qa, qb) = pairs(&r, &srq, 2);
    let (srq, e) = srq.destroy().unwrap_err();
    assert!(matches!(e, VerbsError::SrqInUse { qps: 2, .. }), "{e}");
    drop(qb);
    srq.destroy().unwrap();
}

#[test]
fn bad_input_is_refused_with_typed_errors() {
    let r = rig();
    let other_cq = Cq::new(&r.b.ctx, 16).unwrap();
    let srq = Srq::new(&r.b.pd, &r.b.cq, &SrqOptions::default()).unwrap();
    // A QP on the SRQ must report receives to the SRQ's CQ.
    let e = QpBuilder::rc(&r.b.pd, &r.b.cq, &other_cq)
        .srq(&srq)
        .build()
        .unwrap_err();
    assert!(matches!(e, VerbsError::SrqCqMismatch { .. }), "{e}");
    // Sizes the device does not take.
    for bad in [
        SrqOptions {
            max_wr: 0,
            ..SrqOptions::default()
        },
        SrqOptions {
            max_wr: 1 << 20,
            ..SrqOptions::default()
        },
        SrqOptions {
            srq_limit: 64,
            ..SrqOptions::default()
        },
    ] {
        assert!(matches!(
            Srq::new(&r.b.pd, &r.b.cq, &bad),
            Err(VerbsError::Driver(_))
        ));
    }
    assert!(srq.arm_limit(srq.max_wr()).is_err());
    // A QP on an SRQ takes no receive of its own.
    let (_qa, mut qb) = pairs(&r, &srq, 1);
    let e = qb[0]
        .post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap_err();
    assert!(matches!(e, VerbsError::Post(_)), "{e}");
    assert_eq!(r.b.pool.leased(), 0, "the refused buffer came back");
    // Two scatter entries on a one-entry SRQ.
    let mut rw = RecvWr::new(2, r.b.pool.lease(64).unwrap());
    rw.sges.push(r.b.pool.lease(64).unwrap()).unwrap();
    assert!(matches!(
        srq.post_recv(rw),
        Err(VerbsError::TooManySges { .. })
    ));
}
