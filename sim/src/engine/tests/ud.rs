//! UD sends: DETH, the address vector, local completion.

use bypass_hw::roce::BthOpcode as B;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::{Av, DataSeg, DgramParams, MLX5_WQE_CTRL_CQ_UPDATE, RaddrSeg, WqeOpcode};
use zerocopy::IntoBytes;

use super::*;
use crate::testkit::UD;

fn av(r: &Rig, qkey: u32) -> Av {
    Av::new(&DgramParams {
        key: u64::from(qkey) << 32,
        dqp_dct: 0x55,
        ext: true,
        hop_limit: 9,
        grh_gid_fl: 1 << 30,
        rgid: r.p.b.gid(),
        ..Default::default()
    })
    .expect("av")
}

#[test]
fn ud_send_carries_deth_goes_where_the_av_says_and_completes_without_ack() {
    let mut r = Rig::new(UD, 1024, 3, 4);
    let a = av(&r, 0x2222);
    let d = DataSeg::new(100, r.mr.key, r.mr.va);
    r.post(
        WqeOpcode::SEND_IMM,
        &[a.as_bytes(), d.as_bytes()],
        0x5151,
        MLX5_WQE_CTRL_CQ_UPDATE,
    );
    let p = r.sent();
    let pkt = parse(&p[0]);
    assert_eq!(pkt.opcode(), B::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!((pkt.bth().dest_qp(), pkt.bth().psn()), (0x55, 3));
    let deth = pkt.deth().expect("deth");
    assert_eq!((deth.qkey(), deth.src_qp()), (0x2222, r.qp.qpn));
    assert_eq!(pkt.imm_dt().expect("imm").imm(), 0x5151);
    assert_eq!(pkt.payload(), &r.p.a.read(r.mr.off, 100)[..]);
    assert_eq!(pkt.ip().gids().1, r.p.b.gid());
    assert_ok(
        &r.poll().expect("local completion"),
        r.qp.qpn,
        0,
        WqeOpcode::SEND_IMM,
    );
    // A Q_Key with the high bit set means the QP's own.
    let a = av(&r, 0x8000_0001);
    r.post(WqeOpcode::SEND, &[a.as_bytes(), d.as_bytes()], 0, 0);
    let p = r.sent();
    assert_eq!(parse(&p[0]).deth().expect("deth").qkey(), 0x1111_1111);
}

#[test]
fn ud_errors_oversized_messages_and_rc_only_opcodes() {
    let mut r = Rig::new(UD, 1024, 0, 4);
    let a = av(&r, 1);
    let d = DataSeg::new(1025, r.mr.key, r.mr.va);
    r.post(WqeOpcode::SEND, &[a.as_bytes(), d.as_bytes()], 0, 0);
    assert!(r.sent().is_empty());
    assert_err(
        &r.poll().expect("cqe"),
        r.qp.qpn,
        0,
        CqeSyndrome::LOCAL_LENGTH_ERR,
    );

    let mut r = Rig::new(UD, 1024, 0, 4);
    let ra = RaddrSeg::new(0, 0);
    r.post(WqeOpcode::RDMA_WRITE, &[ra.as_bytes()], 0, 0);
    assert_err(
        &r.poll().expect("cqe"),
        r.qp.qpn,
        0,
        CqeSyndrome::LOCAL_QP_OP_ERR,
    );
}
