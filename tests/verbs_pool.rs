//! The memory pool on a real registration: leases work for posting, come back with their
//! completions or when the QP is dropped, and exhaustion is an explained error.

#[path = "verbs_support.rs"]
mod support;

use std::time::{Duration, Instant};

use bypass_verbs::wr::RecvWr;
use bypass_verbs::{Cq, QpBuilder, VerbsError};
use support::*;

#[test]
fn exhausted_pool_says_what_to_do_and_recovers_when_leases_return() {
    let r = rig();
    let pool = r.a.pd.create_pool(256, 4).unwrap();
    let held: Vec<_> = (0..4).map(|_| pool.lease(256).unwrap()).collect();
    let err = pool.lease(1).unwrap_err();
    assert!(matches!(
        err,
        VerbsError::PoolExhausted {
            count: 4,
            chunk: 256
        }
    ));
    assert!(err.to_string().contains("poll completions"), "{err}");
    assert!(matches!(
        pool.lease(257),
        Err(VerbsError::LeaseTooLarge { .. })
    ));
    drop(held);
    assert!(pool.lease(256).is_ok());
}

#[test]
fn posted_leases_stay_leased_until_reclaimed() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let lease = || r.b.pool.lease(128).unwrap();
    b.post_recv_list([
        RecvWr::new(0, lease()),
        RecvWr::new(1, lease()),
        RecvWr::new(2, lease()),
        RecvWr::new(3, lease()),
    ])
    .unwrap();
    for id in 4..8 {
        b.post_recv(RecvWr::new(id, lease())).unwrap();
    }
    assert_eq!(r.b.pool.leased(), 8);
    for id in 0..8 {
        a.post_send(send_of(&r.a.pool, id, &[id as u8; 16]))
            .unwrap();
    }
    let mut done = Vec::new();
    r.b.cq.wait_many(8, WAIT, &mut done).unwrap();
    assert_eq!(done.len(), 8);
    for (k, c) in done.into_iter().enumerate() {
        assert_eq!(c.wr_id(), k as u64);
        let l = b.reclaim_lease(c).unwrap().unwrap();
        assert_eq!(l.as_slice()[0], k as u8);
    }
    assert_eq!(r.b.pool.leased(), 0);
}

#[test]
fn dropping_a_qp_returns_its_parked_leases() {
    let r = rig();
    let mut qp = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    qp.modify_to_init().unwrap();
    for id in 0..5 {
        qp.post_recv(RecvWr::new(id, r.a.pool.lease(64).unwrap()))
            .unwrap();
    }
    assert_eq!(r.a.pool.leased(), 5);
    drop(qp);
    assert_eq!(r.a.pool.leased(), 0, "DESTROY_QP, then the leases go back");
}

#[test]
fn blocking_wait_sleeps_until_the_completion_and_times_out_when_idle() {
    let mut r = rig();
    let mut idle = Cq::new(&r.a.ctx, 8).unwrap();
    let t = Instant::now();
    assert!(idle.wait(Duration::from_millis(20)).unwrap().is_none());
    assert!(t.elapsed() < Duration::from_secs(2));
    let (mut a, mut b) = rc_pair(&r);
    b.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    a.post_send(send_of(&r.a.pool, 2, b"wake up")).unwrap();
    let c = r.b.cq.wait(WAIT).unwrap().expect("woken by the completion");
    assert_eq!(c.wr_id(), 1);
}
