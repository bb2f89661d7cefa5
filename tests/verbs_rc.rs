//! Every RC verb through the safe API on two stepped sim NICs: SEND, SEND_IMM, WRITE,
//! WRITE_IMM, READ, CAS, FETCH_ADD, SGE lists, inline, post lists, unsignaled requests, and
//! the research access to WQE/CQE bytes and the QP context.

#[path = "verbs_support.rs"]
mod support;

use bypass_verbs::driver::hw::wqe::{CtrlSeg, WqeOpcode};
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{QpState, WcFlags, WcOpcode};
use support::*;
use zerocopy::FromBytes;

#[test]
fn send_lands_in_the_posted_receive_and_both_leases_come_back() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    b.post_recv(RecvWr::new(11, r.b.pool.lease(64).unwrap()))
        .unwrap();
    a.post_send(send_of(&r.a.pool, 22, b"hello verbs")).unwrap();
    assert_eq!(r.a.pool.leased(), 1, "the source lease is parked in the QP");

    let rc = wait1(&mut r.b.cq, "receive");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!(
        (rc.wr_id(), rc.opcode(), rc.byte_len()),
        (11, WcOpcode::Recv, 11)
    );
    assert_eq!(rc.src_qp(), a.qpn());
    let mut got = b.reclaim_lease(rc).unwrap().expect("the receive buffer");
    got.set_len(11).unwrap();
    assert_eq!(got.as_slice(), b"hello verbs");

    let sc = wait1(&mut r.a.cq, "send");
    assert!(sc.is_ok(), "{sc}");
    assert_eq!((sc.wr_id(), sc.opcode()), (22, WcOpcode::Send));
    let src = a.reclaim_lease(sc).unwrap().expect("the source buffer");
    assert_eq!(src.as_slice(), b"hello verbs");
    drop((got, src));
    assert_eq!((r.a.pool.leased(), r.b.pool.leased()), (0, 0));
}

#[test]
fn send_with_immediate_delivers_the_immediate() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    b.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    a.post_send(SendWr::new(2, SendOp::SendImm(0xdead_beef)).sge(lease_with(&r.a.pool, b"x")))
        .unwrap();
    let rc = wait1(&mut r.b.cq, "receive");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!(rc.imm(), Some(0xdead_beef));
    assert!(rc.flags().contains(WcFlags::WITH_IMM));
    assert!(wait1(&mut r.a.cq, "send").is_ok());
}

#[test]
fn write_and_write_with_immediate_reach_the_peer_memory() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    let target = r.b.mr.remote();
    a.post_send(
        SendWr::new(1, SendOp::Write(target.slice(100, 5).unwrap()))
            .sge(lease_with(&r.a.pool, b"write")),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.opcode(), WcOpcode::RdmaWrite);
    let mut buf = [0u8; 5];
    r.b.mr.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"write");

    b.post_recv(RecvWr::new(5, r.b.pool.lease(16).unwrap()))
        .unwrap();
    a.post_send(
        SendWr::new(2, SendOp::WriteImm(target.slice(200, 3).unwrap(), 77))
            .sge(lease_with(&r.a.pool, b"imm")),
    )
    .unwrap();
    let rc = wait1(&mut r.b.cq, "write-imm receive");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!(rc.opcode(), WcOpcode::RecvRdmaWithImm);
    assert_eq!((rc.imm(), rc.wr_id()), (Some(77), 5));
    r.b.mr.read(200, &mut buf[..3]).unwrap();
    assert_eq!(&buf[..3], b"imm");
    assert!(wait1(&mut r.a.cq, "write-imm").is_ok());
}

#[test]
fn read_brings_peer_memory_into_the_lease() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    r.b.mr.write(64, b"remote bytes").unwrap();
    let dst = r.a.pool.lease(12).unwrap();
    a.post_send(SendWr::new(9, SendOp::Read(r.b.mr.remote().slice(64, 12).unwrap())).sge(dst))
        .unwrap();
    let c = wait1(&mut r.a.cq, "read");
    assert!(c.is_ok(), "{c}");
    assert_eq!((c.opcode(), c.byte_len()), (WcOpcode::RdmaRead, 12));
    let got = a.reclaim_lease(c).unwrap().unwrap();
    assert_eq!(got.as_slice(), b"remote bytes");
}

#[test]
fn atomics_return_the_old_value_and_update_the_target() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    r.b.mr.write_u64_be(8, 40).unwrap();
    let target = r.b.mr.remote().slice(8, 8).unwrap();

    a.post_send(
        SendWr::new(
            1,
            SendOp::FetchAdd {
                remote: target,
                add: 2,
            },
        )
        .sge(r.a.pool.lease(8).unwrap()),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "fetch-add");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.opcode(), WcOpcode::FetchAdd);
    let old = a.reclaim_lease(c).unwrap().unwrap();
    let old_v = u64::from_be_bytes(old.as_slice().try_into().unwrap());
    assert_eq!(
        old_v, 40,
        "the old value lands big-endian, as the target holds it"
    );
    assert_eq!(r.b.mr.read_u64_be(8).unwrap(), 42);

    a.post_send(
        SendWr::new(
            2,
            SendOp::CompareSwap {
                remote: target,
                compare: 42,
                swap: 7,
            },
        )
        .sge(r.a.pool.lease(8).unwrap()),
    )
    .unwrap();
    let c = wait1(&mut r.a.cq, "compare-swap");
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.opcode(), WcOpcode::CompSwap);
    let old = a.reclaim_lease(c).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(old.as_slice().try_into().unwrap()), 42);
    assert_eq!(r.b.mr.read_u64_be(8).unwrap(), 7);
}

#[test]
fn gather_list_and_inline_data_arrive_whole() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    for id in 0..2 {
        b.post_recv(RecvWr::new(id, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    a.post_send(
        SendWr::new(1, SendOp::Send)
            .sge(lease_with(&r.a.pool, b"gath"))
            .sge(lease_with(&r.a.pool, b"ered")),
    )
    .unwrap();
    let inline = *b"inline!";
    a.post_send(SendWr::new(2, SendOp::Send).inline(&inline))
        .unwrap();
    for (want_id, want) in [(0u64, &b"gathered"[..]), (1, &b"inline!"[..])] {
        let rc = wait1(&mut r.b.cq, "receive");
        assert!(rc.is_ok(), "{rc}");
        assert_eq!(rc.wr_id(), want_id);
        let len = rc.byte_len() as usize;
        let mut l = b.reclaim_lease(rc).unwrap().unwrap();
        l.set_len(len).unwrap();
        assert_eq!(l.as_slice(), want);
    }
    let c1 = wait1(&mut r.a.cq, "gather send");
    let leases: Vec<_> = a.reclaim(c1).unwrap().into_leases().collect();
    assert_eq!(leases.len(), 2, "both gather buffers come back");
    assert!(wait1(&mut r.a.cq, "inline send").is_ok());
}

#[test]
fn post_list_rings_once_and_unsignaled_leases_return_with_the_next_completion() {
    let mut r = rig();
    let (mut a, mut b) = rc_pair(&r);
    for id in 0..3 {
        b.post_recv(RecvWr::new(id, r.b.pool.lease(64).unwrap()))
            .unwrap();
    }
    a.post_send_list([
        send_of(&r.a.pool, 1, b"one").unsignaled(),
        send_of(&r.a.pool, 2, b"two").unsignaled(),
        send_of(&r.a.pool, 3, b"three"),
    ])
    .unwrap();
    assert_eq!(r.a.pool.leased(), 3);
    let c = wait1(&mut r.a.cq, "the signaled send");
    assert_eq!(c.wr_id(), 3);
    let last = a.reclaim_lease(c).unwrap().unwrap();
    assert_eq!(last.as_slice(), b"three");
    assert_eq!(
        r.a.pool.leased(),
        1,
        "the unsignaled sends' leases went back to the pool"
    );
    for want in 0..3 {
        let rc = wait1(&mut r.b.cq, "receive");
        assert_eq!(rc.wr_id(), want);
        drop(b.reclaim(rc).unwrap());
    }
    assert!(
        r.a.cq.poll().next().is_none(),
        "unsignaled sends make no CQE"
    );
}

#[test]
fn research_access_shows_the_wqe_the_cqe_and_the_qp_context() {
    let mut r = rig();
    let (mut a, _b) = rc_pair(&r);
    a.post_send(
        SendWr::new(1, SendOp::Write(r.b.mr.remote().slice(0, 4).unwrap()))
            .sge(lease_with(&r.a.pool, b"abcd")),
    )
    .unwrap();
    let wqe = a.last_wqe_bytes().expect("a posted WQE");
    let (ctrl, _) = CtrlSeg::ref_from_prefix(&wqe[..]).unwrap();
    assert_eq!(ctrl.opcode(), WqeOpcode::RDMA_WRITE);
    assert_eq!(ctrl.qpn(), a.qpn());
    assert_eq!(ctrl.ds(), 3, "ctrl + raddr + one data segment");
    let (c, raw) = (0..1000)
        .find_map(|_| {
            r.a.ctx.progress();
            r.a.cq.poll_raw()
        })
        .expect("a CQE");
    assert!(c.is_ok(), "{c}");
    assert_ne!(raw, [0u8; 64]);
    let info = a.query().unwrap();
    assert_eq!(info.qpc_bytes().len(), 0xe8);
    assert!(info.sq_psn != a.psn(), "the send PSN advanced");
    assert_eq!(a.state().unwrap(), QpState::Rts);
}
