//! Doorbells and the SQ ring: BlueFlame, wrong UAR, wrap-around, laps, QP states, flush.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::roce::BthOpcode as B;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::{DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, RaddrSeg, WqeOpcode};
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

/// Each post is ring copy → doorbell record → BlueFlame copy (rdma-core `post_send_db`), and a
/// threaded fabric's engine thread may step between a post's record and its BlueFlame write.
/// The BlueFlame write of WQE 1 then reaches the device after WQE 1 was fetched from the ring
/// (the record announced it) and while the record already announces WQE 2: it must not stand
/// in for WQE 2, or the signaled WRITE is replaced by an unsignaled one and its completion
/// never comes.
#[test]
fn a_late_blueflame_wqe_never_stands_in_for_another_index() {
    let mut r = Rig::rc(1024, 0);
    let qpn = r.qp.qpn;
    let sq_off = r.qp.wq_off + r.qp.rq_wqes as usize * r.qp.rq_stride;
    let wqe = |r: &Rig, i: u16, len: u32, flags: u8| {
        let mut w = ctrl(WqeOpcode::RDMA_WRITE, i, qpn, 3, 0);
        w[11] = flags;
        w.extend_from_slice(RaddrSeg::new(0xabc0_0000, 0x77).as_bytes());
        w.extend_from_slice(DataSeg::new(len, r.mr.key, r.mr.va).as_bytes());
        w.resize(64, 0);
        w
    };
    let w = [
        wqe(&r, 0, 1, 0),
        wqe(&r, 1, 2, 0),
        wqe(&r, 2, 3, MLX5_WQE_CTRL_CQ_UPDATE),
    ];
    // The app's half of a post: the ring copy, then the doorbell record.
    let ring = |r: &mut Rig, i: usize| {
        r.p.a.write(sq_off + i * 64, &w[i]);
        r.p.a.write(r.qp.dbr_off + 4, &(i as u32 + 1).to_be_bytes());
    };
    // The BlueFlame copy, alternating the halves of bfreg 1.
    let bf = |r: &mut Rig, i: usize| {
        let off = u64::from(r.p.a.uar) * 4096 + 0x800 + 512 + (i as u64 % 2) * 256;
        r.p.a.dev.mmio_write(off, &w[i]).expect("bf");
    };
    ring(&mut r, 0);
    bf(&mut r, 0);
    ring(&mut r, 1);
    r.p.a.dev.step(); // BF 0: WQE 0 from the register, WQE 1 from the ring
    bf(&mut r, 1);
    ring(&mut r, 2);
    r.p.a.dev.step(); // BF 1 (already fetched) while the record announces WQE 2
    bf(&mut r, 2);
    r.p.a.dev.step();
    let lens: Vec<usize> = r.sent().iter().map(|p| parse(p).payload().len()).collect();
    assert_eq!(lens, [1, 2, 3], "each WQE executed once, in order");
    r.ack(2);
    let c = r.poll().expect("the signaled WRITE completes");
    assert_ok(&c, qpn, 2, WqeOpcode::RDMA_WRITE);
    assert!(r.poll().is_none());
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

/// A doorbell record whose producer falls inside a multi-WQEBB WQE, or jumps further ahead
/// than the SQ can hold, must not send the device around the 16-bit counter forever. The
/// device fetches only complete WQEs, at most one ring's worth, and counts the bad record.
#[test]
fn a_producer_inside_a_wqe_or_beyond_the_ring_fetches_at_most_one_ring() {
    let mut r = Rig::rc(1024, 0);
    let qpn = r.qp.qpn;
    let sq_off = r.qp.wq_off + r.qp.rq_wqes as usize * r.qp.rq_stride;
    // Every SQ slot holds a 2-WQEBB NOP (ds = 5: 80 bytes).
    for i in 0..r.qp.sq_wqebbs as usize {
        let mut w = ctrl(WqeOpcode::NOP, i as u16, qpn, 5, 0);
        w.resize(64, 0);
        r.p.a.write(sq_off + i * 64, &w);
    }
    let db = u64::from(r.p.a.uar) * 4096 + 0x800 + 512;
    // The doorbell: the first 8 bytes of a ctrl segment naming this QP.
    let ring: [u8; 8] = ctrl(WqeOpcode::NOP, 0, qpn, 5, 0)[..8].try_into().unwrap();
    // Producer 1: inside the first WQE, which is not complete yet.
    r.p.a.write(r.qp.dbr_off + 4, &1u32.to_be_bytes());
    r.p.a.dev.mmio_write(db, &ring).expect("doorbell");
    r.p.a.dev.step();
    assert_eq!(
        r.p.a.dev.objs.qps.get(qpn).unwrap().sq_ci,
        0,
        "an incomplete WQE is not fetched"
    );
    // Producer 0x8001: far beyond the ring, and odd, so no sum of 2-WQEBB steps ever equals it.
    r.p.a.write(r.qp.dbr_off + 4, &0x8001u32.to_be_bytes());
    r.p.a.dev.mmio_write(db, &ring).expect("doorbell");
    r.p.a.dev.step();
    let qp = r.p.a.dev.objs.qps.get(qpn).unwrap();
    assert!(
        qp.sq_ci <= r.qp.sq_wqebbs,
        "fetched {} WQEBBs from a ring of {}",
        qp.sq_ci,
        r.qp.sq_wqebbs
    );
    assert!(qp.req.wqes.len() <= r.qp.sq_wqebbs as usize);
    assert!(qp.sq_ci > 0, "the complete WQEs were fetched");
    assert!(
        r.p.a.dev.counters.doorbell_errors >= 1,
        "the bad record is counted"
    );
}

/// The same bound on the flush path: a doorbell on a QP in ERR flushes what the record
/// announces, and a producer that falls inside a multi-WQEBB WQE must not make it spin.
#[test]
fn flushing_in_err_stops_at_the_ring_whatever_the_producer() {
    let mut r = Rig::rc(1024, 0);
    let qpn = r.qp.qpn;
    let sq_off = r.qp.wq_off + r.qp.rq_wqes as usize * r.qp.rq_stride;
    for i in 0..r.qp.sq_wqebbs as usize {
        let mut w = ctrl(WqeOpcode::NOP, i as u16, qpn, 5, 0);
        w.resize(64, 0);
        r.p.a.write(sq_off + i * 64, &w);
    }
    r.p.a.dev.set_qp_state(qpn, QpState::Err);
    let db = u64::from(r.p.a.uar) * 4096 + 0x800 + 512;
    let ring: [u8; 8] = ctrl(WqeOpcode::NOP, 0, qpn, 5, 0)[..8].try_into().unwrap();
    r.p.a.write(r.qp.dbr_off + 4, &0x8001u32.to_be_bytes());
    r.p.a.dev.mmio_write(db, &ring).expect("doorbell");
    r.p.a.dev.step();
    let qp = r.p.a.dev.objs.qps.get(qpn).unwrap();
    assert!(
        qp.sq_ci > 0 && qp.sq_ci <= r.qp.sq_wqebbs,
        "flushed {} WQEBBs from a ring of {}",
        qp.sq_ci,
        r.qp.sq_wqebbs
    );
}
