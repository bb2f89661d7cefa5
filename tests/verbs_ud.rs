//! UD through the safe API: SEND and SEND_IMM to an address handle, the GRH in front of the
//! data, the source QP in the completion, RC-only opcodes refused on a UD QP, and a hostile
//! peer endpoint refused as a UD destination.

#[path = "verbs_support.rs"]
mod support;

use bypass_verbs::endpoint::MULTICAST_QPN;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{EndpointParseError, Gid, QpBuilder, QpEndpoint, VerbsError, WcFlags, WcOpcode};
use support::*;

const GRH: usize = 40;

#[test]
fn ud_send_arrives_after_the_grh_with_the_source_qp() {
    let mut r = rig();
    let mut a = QpBuilder::ud(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut b = QpBuilder::ud(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).unwrap();
    b.connect(&ea).unwrap();
    for id in 0..2 {
        b.post_recv(RecvWr::new(id, r.b.pool.lease(GRH + 64).unwrap()))
            .unwrap();
    }
    let dest = a.ud_dest(&eb).unwrap();
    a.post_send(send_of(&r.a.pool, 5, b"datagram").to(&dest))
        .unwrap();
    a.post_send(
        SendWr::new(6, SendOp::SendImm(0x1234))
            .sge(lease_with(&r.a.pool, b"imm"))
            .to(&dest),
    )
    .unwrap();

    let rc = wait1(&mut r.b.cq, "UD receive");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!(rc.opcode(), WcOpcode::Recv);
    assert!(rc.flags().contains(WcFlags::GRH));
    assert_eq!(rc.src_qp(), a.qpn());
    assert_eq!(rc.byte_len() as usize, GRH + 8);
    let l = b.reclaim_lease(rc).unwrap().unwrap();
    assert_eq!(&l.as_slice()[GRH..GRH + 8], b"datagram");

    let rc = wait1(&mut r.b.cq, "UD receive with immediate");
    assert_eq!(rc.imm(), Some(0x1234));
    for _ in 0..2 {
        let c = wait1(&mut r.a.cq, "UD send");
        assert!(c.is_ok(), "{c}");
        drop(a.reclaim(c).unwrap());
    }
    assert_eq!(r.a.pool.leased(), 0);
}

#[test]
fn rdma_write_on_a_ud_qp_is_refused_by_the_driver() {
    let r = rig();
    let mut a = QpBuilder::ud(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let b = QpBuilder::ud(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let eb = b.endpoint().unwrap();
    a.connect(&eb).unwrap();
    let dest = a.ud_dest(&eb).unwrap();
    let err = a
        .post_send(
            SendWr::new(1, SendOp::Write(r.b.mr.remote().slice(0, 4).unwrap()))
                .sge(lease_with(&r.a.pool, b"nope"))
                .to(&dest),
        )
        .unwrap_err();
    assert!(matches!(err, VerbsError::Post(_)), "{err}");
    assert_eq!(r.a.pool.leased(), 0);
}

#[test]
fn a_hostile_ud_endpoint_is_refused_where_it_enters() {
    let r = rig();
    let a = QpBuilder::ud(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let b = QpBuilder::ud(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let eb = b.endpoint().unwrap();
    // QPN 0x100_0000 | b's QPN would address b once masked to 24 bits.
    for qpn in [0, MULTICAST_QPN, 0x0100_0000 | eb.qpn] {
        let err = a.ud_dest(&QpEndpoint { qpn, ..eb }).unwrap_err();
        assert!(
            matches!(err, VerbsError::Endpoint(EndpointParseError::UdQpn { qpn: q }) if q == qpn),
            "{qpn:#x}: {err}"
        );
    }
    for gid in [
        Gid([0; 16]),
        Gid::from_ipv4([224, 0, 0, 1]),
        Gid::from_ipv4([255, 255, 255, 255]),
    ] {
        let err = a.ud_dest(&QpEndpoint { gid, ..eb }).unwrap_err();
        assert!(
            matches!(err, VerbsError::Endpoint(EndpointParseError::UdGid { gid: g, .. }) if g == gid),
            "{gid}: {err}"
        );
    }
    assert!(
        a.ud_dest(&eb).is_ok(),
        "the peer's own endpoint is a destination"
    );
}
