//! BlueFlame registers as rdma-core hands them out (`bfregs.rs`): the first QPs get dedicated
//! low-latency bfregs, the rest share the medium-class ones (least used first), UAR pages come
//! as needed and go with their last user, and two QPs on one shared bfreg post correctly from
//! two threads at once (threaded fabric).

mod datapath_util;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bypass_driver::bfregs::{BfregClass, LOW_LAT_BFREGS, TOT_BFREGS};
use bypass_driver::cq::Cq;
use bypass_driver::post::{RemoteAddr, SendFlags};
use bypass_driver::qp::Qp;
use bypass_driver::qp_attr::{QpCaps, QpType};
use bypass_sim::fabric::SimFabric;
use datapath_util::*;

fn uars(side: &Side) -> usize {
    side.backend
        .with_device(|d| d.uar_pages_allocated())
        .unwrap()
}

#[test]
fn dedicated_bfregs_first_then_shared_ones_and_pages_go_with_their_last_user() {
    let f = fabric(11);
    let a = Side::new(&f, 1, QpType::Rc, true);
    // The side's own QP is the first: dedicated. The driver's page is the one other UAR.
    assert_eq!(a.qp.bfreg().class(), BfregClass::LowLatency);
    let caps = QpCaps::default();
    let mut qps: Vec<Qp> = (0..59)
        .map(|_| Qp::create(&a.pd, &a.cq, &a.cq, QpType::Rc, &caps).unwrap())
        .collect();
    let all: Vec<&Qp> = std::iter::once(&a.qp).chain(qps.iter()).collect();
    let classes: Vec<BfregClass> = all.iter().map(|q| q.bfreg().class()).collect();
    assert!(
        classes[..LOW_LAT_BFREGS]
            .iter()
            .all(|&c| c == BfregClass::LowLatency)
    );
    assert!(
        classes[LOW_LAT_BFREGS..]
            .iter()
            .all(|&c| c == BfregClass::Shared)
    );
    let mut users: HashMap<(u32, usize), usize> = HashMap::new();
    for q in &all {
        *users
            .entry((q.bfreg().uar_index(), q.bfreg().index()))
            .or_default() += 1;
        assert_ne!(q.bfreg().buf_size(), 0, "every class here takes BlueFlame");
    }
    // 4 registers of one QP each, 12 shared by the other 56, least used first: 4 or 5 each.
    assert_eq!(users.len(), TOT_BFREGS);
    let mut shared: Vec<usize> = users.values().copied().filter(|&n| n > 1).collect();
    shared.sort_unstable();
    assert_eq!(shared.len(), TOT_BFREGS - LOW_LAT_BFREGS);
    assert!(
        shared[0] >= 4 && shared[shared.len() - 1] <= 5,
        "{shared:?}"
    );
    assert_eq!(a.hca.bfregs().pages(), (8, 4, 12), "two bfregs per page");
    assert_eq!(uars(&a), 1 + 8);

    // A dedicated bfreg freed goes to the next QP that asks; no new page.
    let freed = (qps[0].bfreg().uar_index(), qps[0].bfreg().index());
    qps.remove(0);
    let again = Qp::create(&a.pd, &a.cq, &a.cq, QpType::Rc, &caps).unwrap();
    assert_eq!(again.bfreg().class(), BfregClass::LowLatency);
    assert_eq!((again.bfreg().uar_index(), again.bfreg().index()), freed);
    assert_eq!(uars(&a), 1 + 8);
    drop(again);
    drop(qps);
    // The side's QP keeps its page (and its neighbour bfreg, now free); all else is gone.
    assert_eq!(a.hca.bfregs().pages(), (1, 2, 0));
    assert_eq!(uars(&a), 1 + 1);
    let Side { qp, backend, .. } = a;
    drop(qp);
    assert_eq!(backend.with_device(|d| d.uar_pages_allocated()).unwrap(), 1);
}

/// Posts `n` signaled 64-byte WRITEs of `tag` bytes to `dst + 64 * i`, at most 8 outstanding,
/// polling `cq` for their completions.
fn write_many(qp: &mut Qp, cq: &mut Cq, side_mr: (u64, u32, u64, u32), dst: u64, n: u64) {
    let (laddr, lkey, raddr, rkey) = side_mr;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut posted, mut done) = (0u64, 0u64);
    while done < n {
        assert!(Instant::now() < deadline, "stalled at {done} of {n}");
        while posted < n && posted - done < 8 {
            let sge = bypass_driver::post::Sge {
                addr: laddr,
                length: 64,
                lkey,
            };
            let remote = RemoteAddr {
                addr: raddr + dst + 64 * posted,
                rkey,
            };
            // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
            unsafe { qp.post_write(posted, sge, remote, SendFlags::SIGNALED) }.unwrap();
            posted += 1;
        }
        while let Some(w) = cq.poll_one() {
            assert!(w.is_ok(), "{w:?}");
            done += 1;
        }
        std::thread::yield_now();
    }
}

#[test]
fn two_qps_on_one_shared_bfreg_post_from_two_threads() {
    let f = SimFabric::threaded(12);
    let mut a = Side::new(&f, 1, QpType::Rc, true);
    let mut b = Side::new(&f, 2, QpType::Rc, true);
    connect(&mut a, &mut b, QpType::Rc);
    let caps = QpCaps::default();
    // QPs 2..=16 of device a take the other 3 dedicated and the 12 shared bfregs; QP 17
    // shares the first shared one with QP 5.
    let mut cq1 = Cq::create(&a.hca, 64).unwrap();
    let mut cq2 = Cq::create(&a.hca, 64).unwrap();
    let mut fillers: Vec<Qp> = (0..14)
        .map(|k| {
            let cq = if k == 3 { &cq1 } else { &a.cq };
            Qp::create(&a.pd, cq, cq, QpType::Rc, &caps).unwrap()
        })
        .collect();
    let mut x = Qp::create(&a.pd, &a.cq, &a.cq, QpType::Rc, &caps).unwrap();
    assert_eq!(x.bfreg().class(), BfregClass::Shared);
    // The next one lands on the shared bfreg of fillers[3] (least used, first on ties)...
    let mut y = Qp::create(&a.pd, &cq2, &cq2, QpType::Rc, &caps).unwrap();
    let mut p = fillers.remove(3);
    assert_eq!(p.bfreg().class(), BfregClass::Shared);
    assert_eq!(
        (y.bfreg().uar_index(), y.bfreg().index()),
        (p.bfreg().uar_index(), p.bfreg().index()),
        "two QPs on one shared bfreg"
    );
    drop(fillers);
    // Peers on device b, one per QP.
    let mut pb = Qp::create(&b.pd, &b.cq, &b.cq, QpType::Rc, &caps).unwrap();
    let mut yb = Qp::create(&b.pd, &b.cq, &b.cq, QpType::Rc, &caps).unwrap();
    let (ag, bg) = (a.gid, b.gid);
    connect_qps(&mut p, &mut pb, ag, bg);
    connect_qps(&mut y, &mut yb, ag, bg);
    let _ = &mut x;
    a.write(0, &[0xa1; 64]);
    a.write(64, &[0xb2; 64]);
    let n = 2000u64;
    let (la, lk, ra, rk) = (a.mr.addr(), a.mr.lkey(), b.mr.addr(), b.mr.rkey());
    std::thread::scope(|s| {
        s.spawn(|| write_many(&mut p, &mut cq1, (la, lk, ra, rk), 0, n));
        s.spawn(|| write_many(&mut y, &mut cq2, (la + 64, lk, ra, rk), 64 * n, n));
    });
    let got = b.read(0, (128 * n) as usize);
    let (first, second) = got.split_at((64 * n) as usize);
    assert!(first.iter().all(|&v| v == 0xa1), "QP 1's WRITEs all landed");
    assert!(
        second.iter().all(|&v| v == 0xb2),
        "QP 2's WRITEs all landed"
    );
    drop((p, y, x, pb, yb));
}

fn connect_qps(a: &mut Qp, b: &mut Qp, ag: [u8; 16], bg: [u8; 16]) {
    use bypass_driver::qp_attr::{Init2Rtr, Rst2Init, Rtr2Rts};
    let (aq, bq) = (a.qpn(), b.qpn());
    for (q, dest, gid, sq, rq) in [(a, bq, bg, 0x10, 0x20), (b, aq, ag, 0x20, 0x10)] {
        q.rst2init(&Rst2Init::default()).unwrap();
        q.init2rtr(&Init2Rtr::rc(dest, rq, gid)).unwrap();
        q.rtr2rts(&Rtr2Rts::new(sq)).unwrap();
    }
}
