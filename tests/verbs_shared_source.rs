//! Shared (frozen) leases through a real QP: many WRITEs and SENDs posted at once from one
//! read-only buffer, which cannot be made writable again (nor freed) until every completion
//! that covers them is reclaimed, and which is refused where the NIC would write.

#[path = "verbs_support.rs"]
mod support;

use bypass_verbs::VerbsError;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use support::*;

#[test]
fn many_writes_from_one_shared_buffer_land_and_it_thaws_after_the_last_completion() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    let src = lease_with(&r.a.pool, b"shared!!").freeze();
    let target = r.b.mr.remote();
    // Four WRITEs of the same source to four places, only the last signalled.
    for k in 0..4u64 {
        let wr = SendWr::new(k, SendOp::Write(target.slice(k * 16, 8).unwrap())).sge(src.clone());
        a.post_send(if k == 3 { wr } else { wr.unsignaled() })
            .unwrap();
    }
    assert_eq!(src.handles(), 5, "each posted WRITE holds a clone");
    assert_eq!(r.a.pool.leased(), 1, "one chunk, however many WRITEs");
    let src = src
        .try_unfreeze()
        .expect_err("refused while WRITEs are outstanding");

    let c = wait1(&mut r.a.cq, "the last write");
    assert!(c.is_ok(), "{c}");
    for k in 0..4usize {
        let mut got = [0u8; 8];
        r.b.mr.read(k * 16, &mut got).unwrap();
        assert_eq!(&got, b"shared!!", "WRITE {k}");
    }
    // Still parked until the completion is reclaimed.
    let src = src
        .try_unfreeze()
        .expect_err("completion not reclaimed yet");
    let back = a.reclaim(c).unwrap();
    assert_eq!(back.len(), 1, "the signalled WRITE's clone comes back");
    drop(back);
    let mut lease = src.try_unfreeze().expect("every clone released");
    lease.as_mut_slice()[0] = b'S';
    drop(lease);
    assert_eq!(r.a.pool.leased(), 0);
}

#[test]
fn a_shared_buffer_is_refused_as_a_receive_or_a_read_target() {
    let r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let src = lease_with(&r.a.pool, b"12345678").freeze();
    let err = b.post_recv(RecvWr::new(1, src.clone())).unwrap_err();
    assert!(
        matches!(err, VerbsError::SharedBufferWritten { op: "a receive" }),
        "{err}"
    );
    let read = SendWr::new(2, SendOp::Read(r.b.mr.remote().slice(0, 8).unwrap())).sge(src.clone());
    let err = a.post_send(read).unwrap_err();
    assert!(
        matches!(err, VerbsError::SharedBufferWritten { op: "an RDMA READ" }),
        "{err}"
    );
    assert_eq!(src.handles(), 1, "refused requests dropped their clones");
    assert_eq!(a.sends_outstanding(), 0, "nothing reached the ring");
}

#[test]
fn dropping_the_qp_releases_the_clones_it_held() {
    let r = rig();
    let (mut a, _b) = rc_pair(&r);
    let src = lease_with(&r.a.pool, b"x").freeze();
    a.post_send(
        SendWr::new(1, SendOp::Write(r.b.mr.remote().slice(0, 1).unwrap())).sge(src.clone()),
    )
    .unwrap();
    assert_eq!(src.handles(), 2);
    drop(a);
    assert!(src.try_unfreeze().is_ok(), "the destroyed QP let go");
}
