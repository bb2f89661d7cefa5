//! The troubleshooting cases through the safe API: what is refused before posting (QP not in
//! RTS, a receive in RESET, a message larger than the remote buffer, a bad atomic, a foreign
//! completion, a reset with work outstanding) and what the NIC reports (wrong rkey, an
//! address outside the remote MR, a missing remote access flag, RNR), each explaining itself.

#[path = "verbs_support.rs"]
mod support;

use bypass_verbs::driver::hw::syndrome::CqeSyndrome;
use bypass_verbs::driver::qp_attr::Rtr2Rts;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Access, QpBuilder, QpState, RemoteBuffer, VerbsError, WcStatus};
use support::*;

#[test]
fn post_on_a_qp_in_init_says_how_to_reach_rts() {
    let r = rig();
    let mut qp = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    qp.modify_to_init().unwrap();
    let err = qp.post_send(send_of(&r.a.pool, 1, b"early")).unwrap_err();
    assert!(matches!(
        err,
        VerbsError::QpNotReady {
            state: QpState::Init,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "QP {:#x} is in INIT: connect() or modify it to RTR and RTS first",
            qp.qpn()
        )
    );
    assert_eq!(
        r.a.pool.leased(),
        0,
        "the refused request's lease went back"
    );
}

#[test]
fn receive_in_reset_and_skipped_transitions_are_refused() {
    let r = rig();
    let mut qp = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let err = qp
        .post_recv(RecvWr::new(1, r.a.pool.lease(8).unwrap()))
        .unwrap_err();
    assert!(matches!(err, VerbsError::RecvInReset { .. }), "{err}");
    let err = qp.modify_to_rts().unwrap_err();
    assert!(
        matches!(
            err,
            VerbsError::BadTransition {
                from: QpState::Reset,
                to: QpState::Rts,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(qp.state().unwrap(), QpState::Reset);
}

#[test]
fn local_checks_refuse_oversized_writes_and_bad_atomics_before_posting() {
    let r = rig();
    let (mut a, _b) = rc_pair(&r);
    let small = r.b.mr.remote().slice(0, 4).unwrap();
    let err = a
        .post_send(SendWr::new(1, SendOp::Write(small)).sge(lease_with(&r.a.pool, b"too long")))
        .unwrap_err();
    assert!(
        matches!(
            err,
            VerbsError::RemoteTooSmall {
                len: 8,
                remote_len: 4
            }
        ),
        "{err}"
    );
    let odd = r.b.mr.remote().slice(4, 8).unwrap();
    let err = a
        .post_send(
            SendWr::new(
                2,
                SendOp::FetchAdd {
                    remote: odd,
                    add: 1,
                },
            )
            .sge(r.a.pool.lease(8).unwrap()),
        )
        .unwrap_err();
    assert!(
        matches!(err, VerbsError::BadAtomic { aligned: false, .. }),
        "{err}"
    );
    assert_eq!(a.sends_outstanding(), 0, "nothing reached the ring");
    assert_eq!(r.a.pool.leased(), 0);
}

/// Posts a WRITE of 4 bytes to `target` on `r` (through a responder QP granting all remote
/// access, or only reads) and returns the syndrome of its error completion.
fn remote_error(mut r: Rig, target: RemoteBuffer, qp_access_ok: bool) -> CqeSyndrome {
    let (mut a, _b) = if qp_access_ok {
        rc_pair(&r)
    } else {
        let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
        let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq)
            .access(bypass_verbs::QpAccess::REMOTE_READ)
            .build()
            .unwrap();
        let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
        a.connect(&eb).unwrap();
        b.connect(&ea).unwrap();
        (a, b)
    };
    a.post_send(SendWr::new(1, SendOp::Write(target)).sge(lease_with(&r.a.pool, b"data")))
        .unwrap();
    let c = wait1(&mut r.a.cq, "the failed write");
    assert_eq!(c.wr_id(), 1);
    let WcStatus::Error(s) = c.status() else {
        panic!("expected an error completion, got {c}");
    };
    let text = c.to_string();
    assert!(text.contains(s.name().unwrap_or("?")), "{text}");
    assert_eq!(
        a.state().unwrap(),
        QpState::Err,
        "an error completion moves the QP to ERR"
    );
    drop(a.reclaim(c).unwrap());
    assert_eq!(
        r.a.pool.leased(),
        0,
        "the error completion returned the lease"
    );
    s
}

#[test]
fn wrong_rkey_completes_with_remote_access_error() {
    let r = rig();
    let mut t = r.b.mr.remote().slice(0, 4).unwrap();
    t.rkey ^= 0x55;
    assert_eq!(remote_error(r, t, true), CqeSyndrome::REMOTE_ACCESS_ERR);
}

#[test]
fn address_outside_the_remote_mr_completes_with_remote_access_error() {
    let r = rig();
    let mut t = r.b.mr.remote();
    t.addr += t.len; // just past the region
    t.len = 4;
    assert_eq!(remote_error(r, t, true), CqeSyndrome::REMOTE_ACCESS_ERR);
}

#[test]
fn missing_remote_write_access_completes_with_an_explained_error() {
    // The MR allows remote writes but the responder QP grants only remote reads.
    let r = rig();
    let t = r.b.mr.remote().slice(0, 4).unwrap();
    let s = remote_error(r, t, false);
    assert!(
        matches!(
            s,
            CqeSyndrome::REMOTE_ACCESS_ERR | CqeSyndrome::REMOTE_INVAL_REQ_ERR
        ),
        "{s:?}"
    );
    assert!(!s.cause_and_fix().is_empty());
}

#[test]
fn mr_without_remote_write_refuses_a_write() {
    let mut r = rig();
    let ro =
        r.b.pd
            .register(64, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    let (mut a, _b) = rc_pair(&r);
    a.post_send(
        SendWr::new(1, SendOp::Write(ro.remote().slice(0, 4).unwrap()))
            .sge(lease_with(&r.a.pool, b"data")),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "the refused write");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::REMOTE_ACCESS_ERR),
        "{c}"
    );
    assert!(c.to_string().contains("MR allows remote access"), "{c}");
}

#[test]
fn send_without_a_receive_waits_out_rnr_then_succeeds() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    a.post_send(send_of(&r.a.pool, 1, b"patience")).unwrap();
    // rnr_retry 7 (the default) retries forever: nothing completes yet.
    assert!(
        r.a.cq
            .wait(std::time::Duration::from_millis(50))
            .unwrap()
            .is_none()
    );
    b.post_recv(RecvWr::new(2, r.b.pool.lease(64).unwrap()))
        .unwrap();
    let c = wait1(&mut r.a.cq, "the send after RNR");
    assert!(c.is_ok(), "{c}");
    let rc = wait1(&mut r.b.cq, "the receive");
    assert_eq!((rc.wr_id(), rc.byte_len()), (2, 8));
}

#[test]
fn send_without_a_receive_and_no_rnr_retries_fails_with_rnr_retry_exceeded() {
    let mut r = rig();
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.modify_to_init().unwrap();
    a.modify_to_rtr(&eb).unwrap();
    a.modify_to_rts_with(&Rtr2Rts {
        rnr_retry: 0,
        ..Rtr2Rts::new(a.psn())
    })
    .unwrap();
    b.connect(&ea).unwrap();
    a.post_send(send_of(&r.a.pool, 1, b"nobody home")).unwrap();
    let c = wait1(&mut r.a.cq, "the RNR failure");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::RNR_RETRY_EXC_ERR),
        "{c}"
    );
    assert!(c.to_string().contains("post receives"), "{c}");
}

#[test]
fn foreign_completions_are_refused_and_reset_waits_for_outstanding_work() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    b.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    b.post_recv(RecvWr::new(2, r.b.pool.lease(64).unwrap()))
        .unwrap();
    a.post_send(send_of(&r.a.pool, 9, b"hi")).unwrap();
    let sc = wait1(&mut r.a.cq, "send");
    let err = b.reclaim(sc).unwrap_err();
    assert!(matches!(err, VerbsError::ForeignCompletion { .. }), "{err}");

    // One receive is consumed, one still posted: reset is refused until it is flushed.
    let rc = wait1(&mut r.b.cq, "receive");
    drop(b.reclaim(rc).unwrap());
    let err = b.reset().unwrap_err();
    assert!(
        matches!(err, VerbsError::OutstandingAtReset { recvs: 1, .. }),
        "{err}"
    );
    b.to_error().unwrap();
    let flushed = wait1(&mut r.b.cq, "the flushed receive");
    assert_eq!(flushed.wr_id(), 2);
    assert_eq!(flushed.status(), WcStatus::Error(CqeSyndrome::WR_FLUSH_ERR));
    assert!(b.reclaim_lease(flushed).unwrap().is_some());
    b.reset().unwrap();
    assert_eq!(b.state().unwrap(), QpState::Reset);
    assert_eq!(r.b.pool.leased(), 0);
}
