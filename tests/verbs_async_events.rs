//! Asynchronous events through the context's async-event channel, each produced by what
//! causes it on a real NIC: a CQ overrun (a consumer that stopped polling), a QP fatal error
//! (the device cannot fetch a posted WQE: its queue's IOMMU mapping is gone), a remote access
//! violation (the responder's QP goes to ERR), and the port going down and up (the link).

#[path = "verbs_support.rs"]
mod support;

use std::time::Duration;

use bypass_testbed::SimContext;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{AsyncEventKind, AsyncEvents, Cq, QpBuilder, RemoteBuffer};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use support::*;

const SHORT: Duration = Duration::from_secs(2);

/// Takes events until one `want` accepts, acknowledging every one; panics if none comes.
fn expect_event(ev: &AsyncEvents, what: &str, want: impl Fn(&AsyncEventKind) -> bool) {
    let mut seen = Vec::new();
    loop {
        let Some(e) = ev.get_async_event(SHORT).expect("get_async_event") else {
            panic!("no {what} event; saw {seen:?}");
        };
        let hit = want(&e.kind);
        seen.push(e.kind);
        ev.ack_async_event(e);
        if hit {
            assert_eq!(ev.unacked(), 0);
            return;
        }
    }
}

#[test]
fn a_cq_nobody_polls_overruns_and_raises_a_cq_error() {
    let r = rig();
    let events = r.b.ctx.async_events().unwrap();
    let small = Cq::new(&r.b.ctx, 2).unwrap();
    assert_eq!(small.capacity(), 2);
    let mut qa = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut qb = QpBuilder::rc(&r.b.pd, &small, &small).build().unwrap();
    let (ea, eb) = (qa.endpoint().unwrap(), qb.endpoint().unwrap());
    qa.connect(&eb).unwrap();
    qb.connect(&ea).unwrap();
    for k in 0..4 {
        qb.post_recv(RecvWr::new(k, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    for k in 0..4 {
        qa.post_send(send_of(&r.a.pool, k, b"overrun")).unwrap();
    }
    let cqn = small.cqn();
    expect_event(&events, "CQ overrun", |k| {
        *k == AsyncEventKind::CqError { cqn, syndrome: 1 }
    });
}

/// Removes the IOMMU mappings from `iova` up (the largest range that splits none).
fn unmap_from(ctx: &bypass_verbs::Context, iova: u64) -> usize {
    ctx.sim()
        .unwrap()
        .with_device(|d| {
            (12..30)
                .rev()
                .find_map(|shift| d.iommu().unmap(iova, 1 << shift).ok().filter(|&n| n > 0))
                .unwrap_or(0)
        })
        .unwrap()
}

#[test]
fn a_wqe_the_device_cannot_fetch_is_a_qp_fatal_error() {
    let mut r = rig();
    let events = r.a.ctx.async_events().unwrap();
    let (mut qa, _qb) = rc_pair(&r);
    // The QP's work queue buffer, unmapped as an IOMMU fault would leave it: the next
    // doorbell's WQE cannot be read.
    let wq =
        r.a.ctx
            .sim()
            .unwrap()
            .with_device(|d| d.qp_wq_pages(qa.qpn()))
            .unwrap();
    assert!(unmap_from(&r.a.ctx, wq.expect("the QP")[0]) > 0);
    // Two WQEs, one doorbell: BlueFlame carries the last, the first must come from the ring.
    qa.post_send_list([
        send_of(&r.a.pool, 1, b"never fetched"),
        send_of(&r.a.pool, 2, b"by BlueFlame"),
    ])
    .unwrap();
    let qpn = qa.qpn();
    // The device works while the wait runs (stepped fabric).
    let _ = r.a.cq.wait(SHORT);
    expect_event(&events, "QP fatal", |k| {
        *k == AsyncEventKind::QpFatal { qpn }
    });
}

#[test]
fn a_write_with_a_bad_rkey_is_an_access_error_on_the_responders_qp() {
    let mut r = rig();
    let events = r.b.ctx.async_events().unwrap();
    let (mut qa, qb) = rc_pair(&r);
    let good = r.b.mr.remote();
    let bad = RemoteBuffer {
        rkey: good.rkey ^ 0x5500,
        ..good
    };
    qa.post_send(
        SendWr::new(1, SendOp::Write(bad.slice(0, 8).unwrap()))
            .sge(lease_with(&r.a.pool, b"bad rkey")),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "the write's error completion");
    assert!(!c.is_ok(), "{c}");
    let qpn = qb.qpn();
    expect_event(&events, "QP access error", |k| {
        *k == AsyncEventKind::QpAccessError { qpn }
    });
}

#[test]
fn the_port_going_down_and_up_is_reported_through_the_async_fd() {
    let r = rig();
    let events = r.b.ctx.async_events().unwrap();
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
    ep.add(&events, EpollEvent::new(EpollFlags::EPOLLIN, 7))
        .unwrap();
    let sim = r.b.ctx.sim().unwrap();
    assert!(sim.with_device(|d| d.set_port_link(1, false)).unwrap());
    // The event is on the EQ; a stepped sim raised its interrupt at once: the fd is readable.
    let mut evs = [EpollEvent::empty()];
    assert_eq!(ep.wait(&mut evs, EpollTimeout::from(5_000u16)).unwrap(), 1);
    let e = events.try_get_async_event().unwrap().expect("port down");
    assert_eq!(e.kind, AsyncEventKind::PortDown { port: 1 });
    events.ack_async_event(e);
    assert!(
        !sim.with_device(|d| d.set_port_link(1, false)).unwrap(),
        "already down"
    );
    assert!(sim.with_device(|d| d.set_port_link(1, true)).unwrap());
    expect_event(&events, "port active", |k| {
        *k == AsyncEventKind::PortActive { port: 1 }
    });
    assert!(events.try_get_async_event().unwrap().is_none());
    // The same channel whichever handle reads it.
    assert_eq!(r.b.ctx.async_events().unwrap().unacked(), 0);
}
