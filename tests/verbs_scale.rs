//! Thousands of QPs on one sim NIC (not timed: `bypass perf qp-scale` measures): 5,000 RC QPs
//! each get a doorbell (4 dedicated low-latency bfregs, the rest shared, from at most 8 UAR
//! pages), a few of them spread over the range exchange data with a peer NIC, and everything
//! (UAR pages, doorbell-record pages) goes back when they are destroyed.

#[path = "verbs_support.rs"]
mod support;

use bypass_testbed::SimContext;
use bypass_verbs::driver::bfregs::{BfregClass, LOW_LAT_BFREGS};
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{Qp, QpBuilder};
use support::*;

const QPS: usize = 5000;

#[test]
fn five_thousand_qps_all_get_doorbells_and_a_few_exchange_data() {
    let mut r = rig();
    let uars = |r: &Rig| {
        r.a.ctx
            .sim()
            .unwrap()
            .with_device(|d| d.uar_pages_allocated())
            .unwrap()
    };
    let (uars0, dbrec_pages0) = (uars(&r), r.a.ctx.dbrec_pages());
    let mut qps: Vec<Qp> = (0..QPS)
        .map(|k| {
            QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq)
                .max_send_wr(16)
                .max_recv_wr(16)
                .build()
                .unwrap_or_else(|e| panic!("QP {k}: {e}"))
        })
        .collect();
    let count = |c: BfregClass| qps.iter().filter(|q| q.bfreg().class() == c).count();
    assert_eq!(count(BfregClass::LowLatency), LOW_LAT_BFREGS);
    assert_eq!(count(BfregClass::Shared), QPS - LOW_LAT_BFREGS);
    assert_eq!(uars(&r), uars0 + 8, "two bfregs a page, 16 bfregs in all");
    assert!(r.a.ctx.dbrec_pages() <= dbrec_pages0 + QPS.div_ceil(64));

    // QPs from the start, the middle and the end: dedicated and shared bfregs.
    for (n, k) in [0usize, 3, 4, 2500, QPS - 1].into_iter().enumerate() {
        let mut peer = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
        let (ea, eb) = (qps[k].endpoint().unwrap(), peer.endpoint().unwrap());
        qps[k].connect(&eb).unwrap();
        peer.connect(&ea).unwrap();
        let msg = format!("from QP {k}");
        let at = 64 * n;
        let target = r.b.mr.remote().slice(at as u64, msg.len() as u64).unwrap();
        qps[k]
            .post_send(
                SendWr::new(k as u64, SendOp::Write(target))
                    .sge(lease_with(&r.a.pool, msg.as_bytes())),
            )
            .unwrap();
        let c = wait1(&mut r.a.cq, "write");
        assert!(c.is_ok() && c.wr_id() == k as u64, "{c}");
        qps[k].reclaim(c).unwrap();
        let mut got = vec![0u8; msg.len()];
        r.b.mr.read(at, &mut got).unwrap();
        assert_eq!(got, msg.as_bytes());
    }
    drop(qps);
    assert_eq!(uars(&r), uars0, "UAR pages go with their last QP");
    assert_eq!(r.a.ctx.dbrec_pages(), dbrec_pages0);
}
