//! One device, many users (issue item 6): a QP connected to another QP of the same NIC
//! (loopback to its own GID) on the stepped and the threaded fabric, several `Context`s on
//! one NIC exchanging data with each other and with a peer, one context dropped while the
//! other keeps working, and the HCA torn down when the last one goes. rdma-core's own tests
//! (`tests/base.py`) do both: every test opens the device in several places and connects QPs
//! on one port to each other.

#[path = "verbs_support.rs"]
mod support;

use std::sync::Arc;

use bypass_sim::Stage;
use bypass_sim::fabric::SimFabric;
use bypass_testbed::SimContext;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Context, Qp, QpBuilder, QpState, WcOpcode};
use support::*;

/// An RC QP on each side, connected to each other (the sides may share a NIC).
fn connect(x: &Side, y: &Side) -> (Qp, Qp) {
    let mut a = QpBuilder::rc(&x.pd, &x.cq, &x.cq).build().expect("QP x");
    let mut b = QpBuilder::rc(&y.pd, &y.cq, &y.cq).build().expect("QP y");
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).expect("connect x");
    b.connect(&ea).expect("connect y");
    (a, b)
}

fn small(ctx: &Arc<Context>) -> Side {
    side_sized(ctx.clone(), 1024, 8, 4096)
}

/// A WRITE x → y, then a SEND y → x, each checked where it lands.
fn write_and_send(x: &mut Side, qx: &mut Qp, y: &mut Side, qy: &mut Qp, tag: u8) {
    qx.post_send(
        SendWr::new(1, SendOp::Write(y.mr.remote().slice(8, 4).unwrap()))
            .sge(lease_with(&x.pool, &[tag; 4])),
    )
    .unwrap();
    let c = wait1(&mut x.cq, "write");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.opcode(), WcOpcode::RdmaWrite);
    drop(qx.reclaim(c).unwrap());
    let mut got = [0u8; 4];
    y.mr.read(8, &mut got).unwrap();
    assert_eq!(got, [tag; 4]);

    qx.post_recv(RecvWr::new(2, x.pool.lease(64).unwrap()))
        .unwrap();
    qy.post_send(send_of(&y.pool, 3, &[tag, tag + 1])).unwrap();
    let rc = wait1(&mut x.cq, "receive");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!((rc.opcode(), rc.src_qp()), (WcOpcode::Recv, qy.qpn()));
    let mut l = qx.reclaim_lease(rc).unwrap().expect("the receive buffer");
    l.set_len(2).unwrap();
    assert_eq!(l.as_slice(), &[tag, tag + 1]);
    let sc = wait1(&mut y.cq, "send");
    assert!(sc.is_ok(), "{sc}");
    drop(qy.reclaim(sc).unwrap());
}

fn loopback_on(fabric: &SimFabric) {
    let ctx = Context::open_sim(fabric, 1).unwrap();
    let mut x = small(&ctx);
    let mut y = small(&ctx);
    let (mut qx, mut qy) = connect(&x, &y);
    assert_eq!(
        qx.endpoint().unwrap().gid,
        qy.endpoint().unwrap().gid,
        "one GID"
    );
    write_and_send(&mut x, &mut qx, &mut y, &mut qy, 0x40);
    write_and_send(&mut y, &mut qy, &mut x, &mut qx, 0x50);
}

#[test]
fn loopback_rc_write_and_send_between_two_qps_of_one_nic_stepped() {
    loopback_on(&SimFabric::stepped(11));
}

#[test]
fn loopback_rc_write_and_send_between_two_qps_of_one_nic_threaded() {
    loopback_on(&SimFabric::threaded(12));
}

#[test]
fn loopback_packets_take_the_wire_path_and_a_lost_one_is_retransmitted_to_itself() {
    use bypass_sim::faults::{Fault, FaultPlan, Trigger};
    let fabric = SimFabric::stepped(15);
    let ctx = Context::open_sim(&fabric, 1).unwrap();
    let (mut x, mut y) = (small(&ctx), small(&ctx));
    let (mut qx, mut qy) = connect(&x, &y);
    // An active rule makes every packet wire bytes; the first one (the WRITE) is lost.
    fabric.with_world(|w| {
        w.set_faults(Some(
            FaultPlan::default().with(Trigger::Packet(0), Fault::Drop),
        ))
    });
    write_and_send(&mut x, &mut qx, &mut y, &mut qy, 0x60);
    let dropped = fabric.with_world(|w| w.fault_stats().dropped);
    assert_eq!(dropped, 1, "the loopback packet went through the rule");
}

#[test]
fn two_contexts_on_one_nic_exchange_with_each_other_and_with_the_peer() {
    let pair = Context::sim_pair(13).unwrap();
    let c1 = pair.a.clone();
    let c2 = pair.a.open_sibling();
    assert!(c1.same_device(&c2), "one brought-up HCA");
    let (mut s1, mut s2, mut peer) = (small(&c1), small(&c2), small(&pair.b));
    assert_ne!(s1.pd.pdn(), s2.pd.pdn(), "each context its own PD");
    let (mut q1, mut q2) = connect(&s1, &s2);
    write_and_send(&mut s1, &mut q1, &mut s2, &mut q2, 1);
    let (mut q2p, mut qp2) = connect(&s2, &peer);
    write_and_send(&mut s2, &mut q2p, &mut peer, &mut qp2, 2);
    write_and_send(&mut peer, &mut qp2, &mut s2, &mut q2p, 3);
    let (mut q1p, mut qp1) = connect(&s1, &peer);
    write_and_send(&mut s1, &mut q1p, &mut peer, &mut qp1, 4);
}

#[test]
fn dropping_one_context_leaves_the_other_working_and_the_last_tears_the_hca_down() {
    let pair = Context::sim_pair(14).unwrap();
    let fabric = pair.fabric.clone();
    let c2 = pair.a.open_sibling();
    let mut peer = small(&pair.b);
    let mut s2 = small(&c2);
    let (mut q2, mut qp) = connect(&s2, &peer);
    {
        // The first context, with objects of its own and traffic, then all of it dropped.
        let c1 = pair.a;
        let mut s1 = small(&c1);
        let (mut q1, mut qp1) = connect(&s1, &peer);
        write_and_send(&mut s1, &mut q1, &mut peer, &mut qp1, 5);
        drop((q1, qp1, s1, c1));
    }
    let stage = |f: &SimFabric| f.with_device(0, |d| d.firmware_stage()).unwrap();
    assert_eq!(
        stage(&fabric),
        Stage::Initialized,
        "the other context holds it up"
    );
    write_and_send(&mut s2, &mut q2, &mut peer, &mut qp, 6);
    write_and_send(&mut peer, &mut qp, &mut s2, &mut q2, 7);
    assert_eq!(q2.state().unwrap(), QpState::Rts);
    drop((q2, qp));
    drop(s2);
    assert_eq!(stage(&fabric), Stage::Initialized, "c2 still lives");
    drop(c2);
    assert_eq!(
        stage(&fabric),
        Stage::Disabled,
        "torn down with the last context"
    );
    let pages = fabric.with_device(0, |d| d.firmware_pages()).unwrap();
    assert_eq!(pages, 0, "every firmware page given back");
}
