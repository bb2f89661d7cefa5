//! `Qp::write_batch` through the safe API on two stepped sim NICs: the WRITEs of a batch land,
//! their buffers stay parked until a completion is reclaimed, and a WRITE the batch cannot
//! take (too large for the remote buffer, no free WQEBB, QP not ready) is refused with its
//! buffer back in the pool and the WRITEs before it still posted.

#[path = "verbs_support.rs"]
mod support;

use bypass_verbs::error::VerbsError;
use bypass_verbs::{QpBuilder, QpState};
use support::*;

#[test]
fn a_batch_lands_every_write_and_parks_its_buffers_until_reclaimed() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let remote = r.b.mr.remote();
    {
        let mut batch = a.write_batch().unwrap();
        for k in 0..8u8 {
            let src = lease_with(&r.a.pool, &[k + 1; 8]);
            let at = remote.slice(u64::from(k) * 8, 8).unwrap();
            batch.write(u64::from(k), src, at, k == 7).unwrap();
        }
        assert_eq!(batch.len(), 8);
        batch.complete();
    }
    assert_eq!(a.sends_outstanding(), 8, "one WQEBB per WRITE");
    assert_eq!(r.a.pool.leased(), 8, "parked until a completion");
    let c = wait1(&mut r.a.cq, "the signaled last WRITE");
    assert!(c.is_ok(), "{}", c.status());
    assert_eq!(c.wr_id(), 7);
    drop(a.reclaim(c).unwrap());
    assert_eq!(r.a.pool.leased(), 0, "every lease back after the reclaim");
    assert!(r.a.cq.poll_one().is_none(), "unsignaled WRITEs make no CQE");
    let mut got = [0u8; 64];
    r.b.mr.read(0, &mut got).unwrap();
    for (k, chunk) in got.chunks(8).enumerate() {
        assert_eq!(chunk, [k as u8 + 1; 8], "WRITE {k}");
    }
}

#[test]
fn a_write_longer_than_the_remote_buffer_is_refused_and_its_lease_returns() {
    let r = rig();
    let (mut a, _b) = rc_pair(&r);
    let small = r.b.mr.remote().slice(0, 4).unwrap();
    let mut batch = a.write_batch().unwrap();
    let e = batch
        .write(1, lease_with(&r.a.pool, &[9; 8]), small, true)
        .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::RemoteTooSmall {
                len: 8,
                remote_len: 4
            }
        ),
        "{e}"
    );
    assert!(batch.is_empty());
    drop(batch);
    assert_eq!(r.a.pool.leased(), 0);
    assert_eq!(a.sends_outstanding(), 0);
}

#[test]
fn a_full_send_queue_refuses_the_next_write_and_keeps_those_before() {
    let mut r = rig();
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq)
        .max_send_wr(4)
        .build()
        .unwrap();
    let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).unwrap();
    b.connect(&ea).unwrap();
    let depth = a.options().caps.max_send_wr;
    let remote = r.b.mr.remote().slice(0, 8).unwrap();
    let mut posted = 0u64;
    let refused = {
        let mut batch = a.write_batch().unwrap();
        loop {
            let src = lease_with(&r.a.pool, &[3; 8]);
            match batch.write(posted, src, remote, true) {
                Ok(()) => posted += 1,
                Err(e) => break e,
            }
            // The ring holds at least `depth` one-WQEBB WRITEs (it is rounded up to a power
            // of two WQEBBs sized for the largest WQE), never more than 64 at this depth.
            assert!(posted <= 64, "the SQ took {posted} WRITEs at depth {depth}");
        }
    };
    assert!(posted >= u64::from(depth), "{posted} < depth {depth}");
    assert!(refused.to_string().contains("send queue full"), "{refused}");
    assert_eq!(
        r.a.pool.leased() as u64,
        posted,
        "the refused lease returned"
    );
    for want in 0..posted {
        let c = wait1(&mut r.a.cq, "a batched WRITE");
        assert!(c.is_ok(), "{}", c.status());
        assert_eq!(c.wr_id(), want);
        drop(a.reclaim(c).unwrap());
    }
    assert_eq!(r.a.pool.leased(), 0);
}

#[test]
fn a_qp_not_in_rts_starts_no_batch() {
    let r = rig();
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    assert_eq!(a.cached_state(), QpState::Reset);
    let e = a.write_batch().unwrap_err();
    assert!(matches!(e, VerbsError::QpNotReady { .. }), "{e}");
}
