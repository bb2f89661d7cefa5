//! Doorbells and the SQ ring: BlueFlame, wrong UAR, wrap-around, laps, QP states, flush.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::roce::BthOpcode as B;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::{DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, WqeOpcode};
use zerocopy::IntoBytes;

use super::*;
use crate::objects::Uar;
use crate::trace::TraceEvent;

#[test]
fn blueflame_doorbell_uses_the_wqe_written_to_the_register() {
    let mut r = Rig::rc(1024, 0);
    let d = DataSeg::new(16, r.mr.key, r.mr.va + 100);
    let mut w = ctrl(WqeOpcode::SEND, 0, r.qp.qpn, 2, 0);
    w.extend_from_slice(d.as_bytes());
    w.resize(64, 0);
    // The ring copy says something else (a NOP); the device must not read it.
    let sq_off = r.qp.wq_off + r.qp.rq_wqes as usize * r.qp.rq_stride;
    r.p.a
        .write(sq_off, &ctrl(WqeOpcode::NOP, 0, r.qp.qpn, 1, 0));
    r.p.a.write(r.qp.dbr_off + 4, &1u32.to_be_bytes());
    let bf = u64::from(r.p.a.uar) * 4096 + 0x800 + 512 + 256;
    r.p.a.dev.mmio_write(bf, &w).expect("bf");
    r.p.a.dev.step();
    let p = r.sent();
    assert_eq!(p.len(), 1);
    assert_eq!(parse(&p[0]).payload(), &r.p.a.read(r.mr.off + 100, 16)[..]);
}

#[test]
fn doorbells_on_another_uar_or_for_an_unknown_qp_are_dropped() {
    let mut r = Rig::rc(1024, 0);
    let other =
        r.p.a
            .dev
            .objs
            .uars
            .insert_with(|_| Uar::default())
            .expect("uar");
    let w = ctrl(WqeOpcode::NOP, 0, r.qp.qpn, 1, 0);
    let sq_off = r.qp.wq_off + r.qp.rq_wqes as usize * r.qp.rq_stride;
    r.p.a.write(sq_off, &w);
    r.p.a.write(r.qp.dbr_off + 4, &1u32.to_be_bytes());
    let db = u64::from(other) * 4096 + 0x800;
    r.p.a.dev.mmio_write(db, &w[..8]).expect("written");
    let mut unknown = w[..8].to_vec();
    unknown[4..8].copy_from_slice(&((0x777u32 << 8) | 1).to_be_bytes());
    let mine = u64::from(r.p.a.uar) * 4096 + 0x800;
    r.p.a.dev.mmio_write(mine, &unknown).expect("written");
    r.p.a.dev.step();
    assert_eq!(r.p.a.dev.counters.doorbell_errors, 2);
    assert!(r.poll().is_none(), "the NOP was not executed");
    assert_eq!(r.qp_mut().sq_ci, 0);
}

#[test]
fn a_wqe_wrapping_the_end_of_the_sq_is_read_across_it() {
    let mut r = Rig::new(RC, 1024, 0, 2); // 4 WQEBBs
    for i in 0..3 {
        r.send(4);
        r.ack(i);
    }
    r.poll_all();
    r.sent();
    let (k, va) = (r.mr.key, r.mr.va);
    let segs: Vec<DataSeg> = (0..4).map(|i| DataSeg::new(2, k, va + 1000 * i)).collect();
    let bytes: Vec<&[u8]> = segs.iter().map(|s| s.as_bytes()).collect();
    let idx = r.post(WqeOpcode::SEND, &bytes, 0, MLX5_WQE_CTRL_CQ_UPDATE);
    assert_eq!(idx, 3);
    let p = r.sent();
    let want: Vec<u8> = (0..4)
        .flat_map(|i| r.p.a.read(r.mr.off + 1000 * i, 2))
        .collect();
    assert_eq!(parse(&p[0]).payload(), &want[..]);
    r.ack(3);
    assert_eq!(r.poll().expect("cqe").wqe_counter(), 3);
}

#[test]
fn the_sq_ring_wraps_over_several_laps() {
    let mut r = Rig::new(RC, 1024, 0, 2);
    for i in 0..20u32 {
        let idx = r.send(1 + i);
        assert_eq!(u32::from(idx), i);
        let p = r.sent();
        assert_eq!(parse(&p[0]).payload().len() as u32, 1 + i);
        r.ack(i);
        assert_ok(&r.poll().expect("cqe"), r.qp.qpn, i as u16, WqeOpcode::SEND);
    }
    assert_eq!(r.qp_mut().sq_ci, 20);
}

#[test]
fn wqes_posted_before_rts_run_when_the_qp_reaches_rts() {
    let mut r = Rig::rc(1024, 0);
    r.qp_mut().state = QpState::Init;
    r.send(8);
    assert!(r.sent().is_empty());
    let (qp, gid) = (r.qp, r.p.b.gid());
    r.p.a.make_rts(&qp, REMOTE, gid, 1024, 40, 0);
    r.p.a.dev.step();
    let p = r.sent();
    assert_eq!(p.len(), 1);
    assert_eq!(parse(&p[0]).bth().psn(), 40);
}

#[test]
fn entering_err_flushes_every_wqe_signaled_or_not_and_later_doorbells_flush_too() {
    let mut r = Rig::rc(1024, 0);
    r.send(8);
    let d = DataSeg::new(8, r.mr.key, r.mr.va);
    r.post(WqeOpcode::SEND, &[d.as_bytes()], 0, 0);
    let qpn = r.qp.qpn;
    r.p.a.dev.set_qp_state(qpn, QpState::Err);
    r.send(8);
    let c = r.poll_all();
    assert_eq!(c.len(), 3);
    for (i, c) in c.iter().enumerate() {
        assert_err(c, qpn, i as u16, CqeSyndrome::WR_FLUSH_ERR);
    }
    assert_eq!(r.p.a.dev.counters.req_cqe_flush_error, 3);
    assert_eq!(r.qp_mut().sq_ci, 3);
}

#[test]
fn executed_wqes_are_traced_and_nops_complete_in_order() {
    let mut r = Rig::rc(1024, 0);
    r.p.a.dev.trace.set_enabled(true);
    r.send(8);
    r.post(WqeOpcode::NOP, &[], 0, MLX5_WQE_CTRL_CQ_UPDATE);
    assert!(r.poll().is_none(), "the NOP waits for the SEND before it");
    r.ack(0);
    let c = r.poll_all();
    assert_ok(&c[1], r.qp.qpn, 1, WqeOpcode::NOP);
    let wqes =
        r.p.a
            .dev
            .trace
            .events()
            .iter()
            .filter(|e| matches!(e, TraceEvent::Wqe { .. }))
            .count();
    assert_eq!(wqes, 2);
    assert_eq!(parse(&r.sent()[0]).opcode(), B::RC_SEND_ONLY);
}
