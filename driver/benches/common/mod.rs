//! Setup shared by the data-path benchmarks: a connected RC pair on a stepped sim fabric.
//!
//! Owns: bench scaffolding only.

#![allow(dead_code)] // each bench uses a subset

use std::sync::Arc;

use bypass_driver::Hca;
use bypass_driver::cq::Cq;
use bypass_driver::mr::{MkeyAccess, Mr};
use bypass_driver::pd::Pd;
use bypass_driver::qp::Qp;
use bypass_driver::qp_attr::{Init2Rtr, QpCaps, QpType, Rst2Init, Rtr2Rts};
use bypass_sim::fabric::SimFabric;

/// One side's objects; field order is drop order.
pub struct Side {
    pub qp: Qp,
    pub mr: Mr,
    pub cq: Cq,
    _pd: Arc<Pd>,
    _hca: Arc<Hca>,
    gid: [u8; 16],
}

fn side(f: &SimFabric, id: u8) -> Side {
    let b = f
        .add_device(bypass_sim::Profile::with_id(id))
        .expect("device");
    let hca = Arc::new(Hca::open(b).expect("open"));
    let pd = Pd::alloc(&hca).expect("pd");
    let cq = Cq::create(&hca, 1024).expect("cq");
    let mr =
        Mr::register(&pd, hca.alloc_dma(1 << 16).expect("dma"), MkeyAccess::all()).expect("mr");
    let caps = QpCaps {
        max_send_wr: 256,
        ..QpCaps::default()
    };
    let qp = Qp::create(&pd, &cq, &cq, QpType::Rc, &caps).expect("qp");
    let gid = hca.port(1).expect("port").gids[0];
    Side {
        qp,
        mr,
        cq,
        _pd: pd,
        _hca: hca,
        gid,
    }
}

/// A connected RC pair on a stepped fabric.
pub fn setup() -> (SimFabric, Side, Side) {
    let f = SimFabric::stepped(1);
    let mut a = side(&f, 1);
    let mut b = side(&f, 2);
    let (aq, bq, ag, bg) = (a.qp.qpn(), b.qp.qpn(), a.gid, b.gid);
    for (s, dest, rgid, sq, rq) in [(&mut a, bq, bg, 1, 2), (&mut b, aq, ag, 2, 1)] {
        s.qp.rst2init(&Rst2Init::default()).expect("init");
        s.qp.init2rtr(&Init2Rtr::rc(dest, rq, rgid)).expect("rtr");
        s.qp.rtr2rts(&Rtr2Rts::new(sq)).expect("rts");
    }
    (f, a, b)
}

/// A second connected RC pair on the same two devices, PDs, MRs and CQs as `a` and `b` (its
/// completions land in the same CQs as the first pair's).
pub fn second_pair(a: &Side, b: &Side) -> (Qp, Qp) {
    let caps = QpCaps {
        max_send_wr: 256,
        ..QpCaps::default()
    };
    let mut qa = Qp::create(&a._pd, &a.cq, &a.cq, QpType::Rc, &caps).expect("qp");
    let mut qb = Qp::create(&b._pd, &b.cq, &b.cq, QpType::Rc, &caps).expect("qp");
    let (aq, bq) = (qa.qpn(), qb.qpn());
    for (q, dest, rgid, sq, rq) in [(&mut qa, bq, b.gid, 3, 4), (&mut qb, aq, a.gid, 4, 3)] {
        q.rst2init(&Rst2Init::default()).expect("init");
        q.init2rtr(&Init2Rtr::rc(dest, rq, rgid)).expect("rtr");
        q.rtr2rts(&Rtr2Rts::new(sq)).expect("rts");
    }
    (qa, qb)
}

/// Runs the fabric until the network is quiet (ACKs delivered, timers fired).
pub fn settle(f: &SimFabric) {
    let quiet = f.with_world(|w| w.settle(10_000_000_000));
    assert!(matches!(quiet, Ok(true)), "the fabric did not go quiet");
}
