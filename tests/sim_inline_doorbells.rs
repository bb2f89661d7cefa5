//! A threaded sim fabric with inline doorbells (`FabricOptions::low_latency`, what
//! `bypass perf` runs on): a post is acted on in the posting thread, so when `post_send`
//! returns the WRITE has landed in the peer's memory (the link has no latency) and its
//! completion is in the CQ, with no wait, no `progress()` and no engine thread involved; the
//! payload travels as a burst (one copy) and arrives intact.

use bypass_sim::fabric::{FabricOptions, SimFabric};
use bypass_testbed::SimContext;
use bypass_verbs::{Access, Context, Cq, QpBuilder, SendOp, SendWr};

#[test]
fn a_write_on_an_inline_doorbell_fabric_has_landed_and_completed_when_post_send_returns() {
    let fabric = SimFabric::threaded_with(11, FabricOptions::low_latency());
    let (ca, cb) = (
        Context::open_sim(&fabric, 1).expect("NIC a"),
        Context::open_sim(&fabric, 2).expect("NIC b"),
    );
    let (pa, pb) = (ca.alloc_pd().expect("PD a"), cb.alloc_pd().expect("PD b"));
    let (cqa, cqb) = (
        Cq::new(&ca, 16).expect("CQ a"),
        Cq::new(&cb, 16).expect("CQ b"),
    );
    let mut cqa = cqa;
    let target = pb
        .register(64 << 10, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .expect("MR b");
    let pool = pa.create_pool(64 << 10, 2).expect("pool a");
    let mut a = QpBuilder::rc(&pa, &cqa, &cqa).build().expect("QP a");
    let mut b = QpBuilder::rc(&pb, &cqb, &cqb).build().expect("QP b");
    let (ea, eb) = (a.endpoint().expect("ep a"), b.endpoint().expect("ep b"));
    a.connect(&eb).expect("connect a");
    b.connect(&ea).expect("connect b");

    let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 + i / 256) as u8).collect();
    let mut lease = pool.lease(data.len()).expect("lease");
    lease.as_mut_slice().copy_from_slice(&data);
    let remote = target
        .remote()
        .slice(1000, data.len() as u64)
        .expect("slice");
    a.post_send(SendWr::new(9, SendOp::Write(remote)).sge(lease))
        .expect("post WRITE");

    let c = cqa
        .poll_one()
        .expect("the completion is there when post_send returns");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.wr_id(), 9);
    let mut got = vec![0u8; data.len()];
    target.read(1000, &mut got).expect("read MR b");
    assert_eq!(got, data);
    assert_eq!(fabric.world_errors(), 0);
}
