//! Completion channels and per-CQ events: several threads each blocking on their own CQ on a
//! threaded fabric, a channel's fd driven by epoll, solicited-only arming, the arm sequence
//! number (a repeated arm never wakes twice), and CQs on different completion vectors.

#[path = "verbs_support.rs"]
mod support;

use std::thread;
use std::time::Duration;

use bypass_sim::fabric::SimFabric;
use bypass_testbed::SimContext;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{CompletionChannel, Context, Cq, Qp, QpBuilder, VerbsError};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use support::*;

/// Connects an RC QP on `a` (send and receive on `acq`) to one on `b` (on `bcq`).
fn connect(a: &Side, acq: &Cq, b: &Side, bcq: &Cq) -> (Qp, Qp) {
    let mut qa = QpBuilder::rc(&a.pd, acq, acq).build().expect("QP a");
    let mut qb = QpBuilder::rc(&b.pd, bcq, bcq).build().expect("QP b");
    let (ea, eb) = (qa.endpoint().unwrap(), qb.endpoint().unwrap());
    qa.connect(&eb).expect("connect a");
    qb.connect(&ea).expect("connect b");
    (qa, qb)
}

fn threaded_sides() -> (SimFabric, Side, Side) {
    let fabric = SimFabric::threaded(3);
    let a = side_sized(Context::open_sim(&fabric, 1).unwrap(), 256, 32, 4096);
    let b = side_sized(Context::open_sim(&fabric, 2).unwrap(), 256, 32, 4096);
    (fabric, a, b)
}

#[test]
fn four_threads_blocking_on_four_cqs_are_each_woken_by_their_own_completions_only() {
    const CQS: usize = 4;
    const MSGS: usize = 5;
    let (_fabric, mut a, b) = threaded_sides();
    // All four on completion vector 0: one EQ whose events must be told apart by CQN.
    let mut channels = Vec::new();
    let mut cqs = Vec::new();
    let mut pairs = Vec::new();
    for _ in 0..CQS {
        let ch = b.ctx.create_comp_channel().unwrap();
        let cq = Cq::with_channel(&b.ctx, 64, Some(&ch), 0).unwrap();
        let (qa, mut qb) = connect(&a, &a.cq, &b, &cq);
        for k in 0..MSGS {
            qb.post_recv(RecvWr::new(k as u64, b.pool.lease(64).unwrap()))
                .unwrap();
        }
        channels.push(ch);
        cqs.push(cq);
        pairs.push((qa, qb));
    }
    let mut waiters = Vec::new();
    for (i, (ch, mut cq)) in channels.into_iter().zip(cqs).enumerate() {
        let qpn = pairs[i].1.qpn();
        waiters.push(thread::spawn(move || {
            let (mut got, mut wakeups) = (0usize, 0usize);
            cq.req_notify(false);
            while got < MSGS {
                // Blocks (epoll_wait on the channel's fd) until this CQ's event arrives.
                let ev = ch
                    .get_cq_event(WAIT * 5)
                    .expect("get_cq_event")
                    .unwrap_or_else(|| panic!("CQ {i}: event lost ({got} of {MSGS} seen)"));
                assert!(cq.owns(&ev), "CQ {i} woken by CQ {:#x}'s event", ev.cqn());
                wakeups += 1;
                cq.ack_events(1).unwrap();
                cq.req_notify(false);
                while let Some(c) = cq.poll_one() {
                    assert!(c.is_ok(), "{c}");
                    assert_eq!(c.qpn(), qpn, "a completion of another QP on CQ {i}");
                    got += 1;
                }
            }
            (cq, got, wakeups)
        }));
    }
    // Interleaved, so that every CQ's events share the EQ with the others'.
    for k in 0..MSGS {
        for (qa, _) in &mut pairs {
            qa.post_send(send_of(&a.pool, k as u64, b"ping")).unwrap();
        }
    }
    let mut sent = 0;
    while sent < CQS * MSGS {
        let c = wait1(&mut a.cq, "send");
        assert!(c.is_ok(), "{c}");
        sent += 1;
    }
    for (i, w) in waiters.into_iter().enumerate() {
        let (cq, got, wakeups) = w.join().expect("waiter");
        assert_eq!(got, MSGS, "CQ {i}");
        assert!((1..=MSGS).contains(&wakeups), "CQ {i}: {wakeups} wakeups");
        assert_eq!(cq.unacked_events(), 0);
    }
}

#[test]
fn a_channel_fd_in_epoll_becomes_readable_for_its_cq_event_and_only_then() {
    let (_fabric, a, b) = threaded_sides();
    let ch = b.ctx.create_comp_channel().unwrap();
    let mut cq = Cq::with_channel(&b.ctx, 64, Some(&ch), 0).unwrap();
    let (mut qa, mut qb) = connect(&a, &a.cq, &b, &cq);
    qb.post_recv(RecvWr::new(1, b.pool.lease(64).unwrap()))
        .unwrap();
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
    ep.add(&ch, EpollEvent::new(EpollFlags::EPOLLIN, 42))
        .unwrap();
    let mut evs = [EpollEvent::empty()];
    cq.req_notify(false);
    assert_eq!(
        ep.wait(&mut evs, EpollTimeout::ZERO).unwrap(),
        0,
        "nothing yet"
    );
    qa.post_send(send_of(&a.pool, 1, b"epoll")).unwrap();
    let ready = ep.wait(&mut evs, EpollTimeout::from(10_000u16)).unwrap();
    assert_eq!(
        (ready, evs[0].data()),
        (1, 42),
        "the channel's fd became readable"
    );
    let ev = loop {
        // Readiness may come from the vector's interrupt before the event is queued.
        if let Some(ev) = ch.try_get_cq_event().unwrap() {
            break ev;
        }
        ep.wait(&mut evs, EpollTimeout::from(10_000u16)).unwrap();
    };
    assert!(cq.owns(&ev));
    cq.ack_events(1).unwrap();
    let c = cq.poll_one().expect("the receive");
    assert!(c.is_ok() && c.is_recv(), "{c}");
    // Not re-armed: one arm, one event; the fd is quiet again.
    assert_eq!(ep.wait(&mut evs, EpollTimeout::ZERO).unwrap(), 0);
    assert!(ch.try_get_cq_event().unwrap().is_none());
}

/// A stepped rig whose B side has a CQ on a channel, connected to A.
fn stepped_on_channel() -> (Rig, CompletionChannel, Cq, Qp, Qp) {
    let r = rig();
    let ch = r.b.ctx.create_comp_channel().unwrap();
    let cq = Cq::with_channel(&r.b.ctx, 64, Some(&ch), 0).unwrap();
    let (qa, qb) = connect(&r.a, &r.a.cq, &r.b, &cq);
    (r, ch, cq, qa, qb)
}

const SHORT: Duration = Duration::from_secs(2);

#[test]
fn a_solicited_only_arm_ignores_a_plain_send_and_wakes_on_a_solicited_one() {
    let (mut r, ch, mut cq, mut qa, mut qb) = stepped_on_channel();
    for k in 0..2 {
        qb.post_recv(RecvWr::new(k, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    cq.req_notify(true);
    qa.post_send(send_of(&r.a.pool, 1, b"plain")).unwrap();
    assert!(wait1(&mut r.a.cq, "plain send").is_ok());
    assert!(
        ch.get_cq_event(SHORT).unwrap().is_none(),
        "a CQE without the solicited bit does not wake a solicited-only arm"
    );
    let plain = cq.poll_one().expect("the plain receive's CQE is there");
    assert!(!plain.flags().contains(bypass_verbs::WcFlags::SOLICITED));
    let mut wr = SendWr::new(2, SendOp::Send).sge(lease_with(&r.a.pool, b"solicited"));
    wr.solicited = true;
    qa.post_send(wr).unwrap();
    let ev = ch
        .get_cq_event(SHORT)
        .unwrap()
        .expect("the solicited CQE wakes it");
    assert!(cq.owns(&ev));
    cq.ack_events(1).unwrap();
    let c = cq.poll_one().expect("the solicited receive");
    assert!(c.flags().contains(bypass_verbs::WcFlags::SOLICITED), "{c}");
}

#[test]
fn arming_twice_without_taking_the_event_wakes_once() {
    let (mut r, ch, mut cq, mut qa, mut qb) = stepped_on_channel();
    for k in 0..3 {
        qb.post_recv(RecvWr::new(k, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    cq.req_notify(false);
    cq.req_notify(false);
    qa.post_send(send_of(&r.a.pool, 1, b"one")).unwrap();
    assert!(wait1(&mut r.a.cq, "send").is_ok());
    // Armed again with the same sequence number, the event not yet taken and the CQE
    // unpolled: a repeat of the request already answered.
    cq.req_notify(false);
    qa.post_send(send_of(&r.a.pool, 2, b"two")).unwrap();
    assert!(wait1(&mut r.a.cq, "send").is_ok());
    let ev = ch.get_cq_event(SHORT).unwrap().expect("one event");
    assert!(cq.owns(&ev));
    assert!(
        ch.get_cq_event(SHORT).unwrap().is_none(),
        "three arms with one sequence number raised a second event"
    );
    // Taken: the next arm is a new request, due at once for the unpolled CQEs.
    cq.req_notify(false);
    assert!(ch.get_cq_event(SHORT).unwrap().is_some());
    assert_eq!(cq.unacked_events(), 2);
    // Destroying with events unacknowledged is refused, not a hang.
    let (cq, e) = *cq.destroy().expect_err("unacked events");
    assert!(matches!(
        e,
        VerbsError::Driver(bypass_verbs::driver::DriverError::CqEventsUnacked { unacked: 2, .. })
    ));
    assert!(cq.ack_events(3).is_err(), "more acks than events");
    cq.ack_events(2).unwrap();
    drop((qa, qb));
    cq.destroy().map_err(|b| b.1).unwrap();
}

#[test]
fn cqs_on_different_vectors_raise_their_own_eq_and_msix_vector() {
    let (mut r, ch, _cq0, _qa0, _qb0) = stepped_on_channel();
    assert!(
        r.b.ctx.num_comp_vectors() >= 2,
        "the sim offers several vectors"
    );
    let mut cq1 = Cq::with_channel(&r.b.ctx, 64, Some(&ch), 1).unwrap();
    let (mut qa, mut qb) = connect(&r.a, &r.a.cq, &r.b, &cq1);
    qb.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    let raised = |v: u16| {
        r.b.ctx
            .sim()
            .unwrap()
            .with_device(|d| d.interrupts(v))
            .unwrap()
    };
    let before = (raised(1), raised(2));
    cq1.req_notify(false);
    qa.post_send(send_of(&r.a.pool, 1, b"vector 1")).unwrap();
    assert!(wait1(&mut r.a.cq, "send").is_ok());
    let ev = ch.get_cq_event(SHORT).unwrap().expect("CQ 1's event");
    assert!(cq1.owns(&ev));
    cq1.ack_events(1).unwrap();
    assert_eq!(
        raised(1),
        before.0,
        "completion vector 0 (MSI-X 1) stayed quiet"
    );
    assert_eq!(
        raised(2),
        before.1 + 1,
        "completion vector 1 raised MSI-X 2 once"
    );
    let eqs = r.b.ctx.hca().completion_eqs();
    assert_ne!(eqs[0].eqn(), eqs[1].eqn());
    assert!(matches!(
        Cq::with_channel(&r.b.ctx, 64, None, r.b.ctx.num_comp_vectors()),
        Err(VerbsError::Driver(
            bypass_verbs::driver::DriverError::NoCompVector { .. }
        ))
    ));
}

#[test]
fn cq_wait_on_a_shared_eq_is_not_robbed_by_another_cqs_waiter() {
    // The threaded fabric, two CQs on one completion vector, each waited on with Cq::wait
    // from its own thread: every completion reaches its own waiter.
    let (_fabric, a, b) = threaded_sides();
    let mut handles = Vec::new();
    let mut qas = Vec::new();
    let mut keep = Vec::new();
    for _ in 0..2 {
        let cq = Cq::new(&b.ctx, 64).unwrap();
        let (qa, mut qb) = connect(&a, &a.cq, &b, &cq);
        for k in 0..4 {
            qb.post_recv(RecvWr::new(k, b.pool.lease(64).unwrap()))
                .unwrap();
        }
        qas.push(qa);
        keep.push(qb);
        handles.push(thread::spawn(move || {
            let mut cq = cq;
            for _ in 0..4 {
                let c = cq.wait(WAIT * 5).unwrap().expect("own completion");
                assert!(c.is_ok(), "{c}");
            }
            cq
        }));
    }
    for k in 0..4 {
        for qa in &mut qas {
            qa.post_send(send_of(&a.pool, k, b"w")).unwrap();
        }
    }
    let cqs: Vec<Cq> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(cqs.len(), 2);
}
