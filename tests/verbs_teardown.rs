//! Teardown: dropping the verbs objects destroys their device objects and dropping the last
//! context returns every firmware page and unmaps every DMA buffer, as the sim sees it.

#[path = "verbs_support.rs"]
mod support;

use bypass_testbed::SimContext;
use bypass_verbs::driver::qp_attr::query_qp_input;
use bypass_verbs::wr::RecvWr;
use support::*;

#[test]
fn dropping_everything_leaves_no_object_page_or_mapping_in_the_sim() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let qpn = a.qpn();
    b.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    a.post_send(send_of(&r.a.pool, 1, b"bye")).unwrap();
    assert!(wait1(&mut r.b.cq, "receive").is_ok());
    // A posted receive still parked when the QP goes.
    b.post_recv(RecvWr::new(2, r.b.pool.lease(64).unwrap()))
        .unwrap();
    let ids = (r.a.ctx.sim().unwrap().id(), r.b.ctx.sim().unwrap().id());
    let ctx_a = r.a.ctx.clone();
    drop((a, b));
    // SAFETY: QUERY_QP only reads; the QP number names no live object any more.
    let gone = unsafe { ctx_a.hca().cmd() }.exec(&query_qp_input(qpn).unwrap(), 0x100);
    assert!(gone.is_err(), "QUERY_QP of a destroyed QP must fail");
    let Rig { fabric, a, b } = r;
    drop((a, b, ctx_a));
    for id in [ids.0, ids.1] {
        let (pages, maps) = fabric
            .with_device(id, |d| (d.firmware_pages(), d.iommu().mappings()))
            .unwrap();
        assert_eq!(
            (pages, maps),
            (0, 0),
            "device {id}: pages and DMA mappings left"
        );
    }
}
