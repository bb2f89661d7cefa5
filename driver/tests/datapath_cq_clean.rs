//! Stale CQEs of a destroyed or reset QP: the firmware reuses QP numbers, so CQEs a QP left
//! unpolled in its CQ must be removed when it is destroyed or reset (rdma-core
//! `__mlx5_cq_clean`), or a new QP that gets the same number would be credited with them.

mod datapath_util;

use bypass_driver::mr::Mr;
use bypass_driver::poll::WorkCompletion;
use bypass_driver::post::{RemoteAddr, SendOp, SendWr};
use bypass_driver::qp::Qp;
use bypass_driver::qp_attr::{Init2Rtr, QpCaps, QpType, Rst2Init, Rtr2Rts};
use datapath_util::*;

fn rc_qp(side: &Side) -> Qp {
    Qp::create(&side.pd, &side.cq, &side.cq, QpType::Rc, &QpCaps::default()).unwrap()
}

fn to_rts(qp: &mut Qp, dest: u32, rgid: [u8; 16], sq_psn: u32, rq_psn: u32) {
    qp.rst2init(&Rst2Init {
        qkey: QKEY,
        ..Rst2Init::default()
    })
    .unwrap();
    qp.init2rtr(&Init2Rtr::rc(dest, rq_psn, rgid)).unwrap();
    qp.rtr2rts(&Rtr2Rts::new(sq_psn)).unwrap();
}

/// A QP on `a`'s CQ connected to a new QP on `b`'s.
fn connected(a: &Side, b: &Side) -> (Qp, Qp) {
    let mut q = rc_qp(a);
    let mut p = rc_qp(b);
    to_rts(&mut q, p.qpn(), b.gid, 0x300, 0x400);
    to_rts(&mut p, q.qpn(), a.gid, 0x400, 0x300);
    (q, p)
}

fn write(qp: &mut Qp, from: &Mr, to: &Mr, wr_id: u64) {
    let s = [from.sge(0, 64)];
    let remote = RemoteAddr {
        addr: to.addr(),
        rkey: to.rkey(),
    };
    // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
    unsafe { qp.post_send(&SendWr::new(wr_id, SendOp::Write { remote }, &s)) }.unwrap();
}

fn drain(side: &mut Side) -> Vec<WorkCompletion> {
    side.drain_all()
}

#[test]
fn a_destroyed_qps_unpolled_completion_is_not_credited_to_the_next_qp_with_its_number() {
    let (f, mut a, b) = pair(41, QpType::Rc, false);
    let (mut victim, _peer) = connected(&a, &b);
    let stale_qpn = victim.qpn();
    // The victim's completion first, then one of the QP that stays, both unpolled.
    write(&mut victim, &a.mr, &b.mr, 0xdead);
    settle(&f);
    write(&mut a.qp, &a.mr, &b.mr, 0x77);
    settle(&f);
    drop(victim);

    // The firmware hands the number to the next QP on the same CQ.
    let (mut fresh, _peer2) = connected(&a, &b);
    assert_eq!(fresh.qpn(), stale_qpn, "the sim reuses the lowest free QPN");
    let wcs = drain(&mut a);
    assert_eq!(wcs.len(), 1, "only the surviving QP's completion: {wcs:#?}");
    assert_eq!((wcs[0].qpn(), wcs[0].wr_id()), (a.qp.qpn(), 0x77));
    assert!(wcs[0].is_ok());

    // The new QP's own completions arrive with its wr_ids.
    write(&mut fresh, &a.mr, &b.mr, 0x55);
    settle(&f);
    let wcs = drain(&mut a);
    assert_eq!(wcs.len(), 1, "{wcs:#?}");
    assert_eq!((wcs[0].qpn(), wcs[0].wr_id()), (stale_qpn, 0x55));
}

#[test]
fn reset_removes_the_qps_unpolled_completions_and_keeps_the_others() {
    let (f, mut a, b) = pair(42, QpType::Rc, false);
    let (mut victim, _peer) = connected(&a, &b);
    write(&mut a.qp, &a.mr, &b.mr, 0x1);
    settle(&f);
    write(&mut victim, &a.mr, &b.mr, 0xdead);
    settle(&f);
    write(&mut a.qp, &a.mr, &b.mr, 0x2);
    settle(&f);
    let before = a.cq.consumer_index();
    victim.reset().unwrap();
    assert_eq!(
        a.cq.consumer_index(),
        before + 1,
        "the consumer index moves past the freed slot"
    );
    let wcs = drain(&mut a);
    let got: Vec<_> = wcs.iter().map(|w| (w.qpn(), w.wr_id())).collect();
    assert_eq!(got, [(a.qp.qpn(), 0x1), (a.qp.qpn(), 0x2)]);
}
