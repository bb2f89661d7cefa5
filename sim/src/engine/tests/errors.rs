//! Local errors: every syndrome the requester finds in a WQE or its buffers.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::{AtomicSeg, DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, RaddrSeg, WqeOpcode};
use zerocopy::IntoBytes;

use super::*;
use crate::buffer::PageList;
use crate::mkey::Access;

const SIG: u8 = MLX5_WQE_CTRL_CQ_UPDATE;

/// Posts one WQE built by `f`, checks it fails with `synd` and the QP ends in ERR.
fn fails(synd: CqeSyndrome, f: impl FnOnce(&mut Rig)) {
    let mut r = Rig::rc(1024, 0);
    f(&mut r);
    assert!(r.sent().is_empty(), "{synd}: nothing goes on the wire");
    let c = r.poll().unwrap_or_else(|| panic!("{synd}: an error CQE"));
    assert_err(&c, r.qp.qpn, 0, synd);
    assert_eq!(r.qp_mut().state, QpState::Err);
    assert_eq!(r.p.a.dev.counters.req_cqe_error, 1);
}

#[test]
fn bad_lkeys_other_pds_out_of_bounds_and_missing_rights_are_local_protection_errors() {
    fails(CqeSyndrome::LOCAL_PROT_ERR, |r| {
        let d = DataSeg::new(8, r.mr.key ^ 0xff, r.mr.va);
        r.post(WqeOpcode::SEND, &[d.as_bytes()], 0, SIG);
    });
    fails(CqeSyndrome::LOCAL_PROT_ERR, |r| {
        let d = DataSeg::new(8, r.mr.key, r.mr.va + (64 << 10) - 4);
        r.post(WqeOpcode::SEND, &[d.as_bytes()], 0, SIG);
    });
    fails(CqeSyndrome::LOCAL_PROT_ERR, |r| {
        let key = r.mr.key;
        r.p.a.dev.objs.mkeys.get_mut(key >> 8).expect("mkey").pd += 1;
        r.send(8);
    });
    fails(CqeSyndrome::LOCAL_PROT_ERR, |r| {
        // READ into an MR without local write.
        let ro = r.p.a.mr(
            4096,
            Access {
                local_read: true,
                ..Access::default()
            },
        );
        let ra = RaddrSeg::new(0x1000, 1);
        let d = DataSeg::new(8, ro.key, ro.va);
        r.post(WqeOpcode::RDMA_READ, &[ra.as_bytes(), d.as_bytes()], 0, SIG);
    });
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    fails(CqeSyndrome::LOCAL_QP_OP_ERR, |r| {
        // The ctrl segment names another QP (the doorbell names this one).
        let d = DataSeg::new(8, r.mr.key, r.mr.va);
        let mut w = ctrl(WqeOpcode::SEND, 0, r.qp.qpn + 1, 2, 0);
        w[4..8].copy_from_slice(&((r.qp.qpn << 8) | 2).to_be_bytes()[..]);
        w.extend_from_slice(d.as_bytes());
        // The doorbell bytes must name our QP: write the ring copy with the wrong QPN.
        let mut qp = r.qp;
        r.p.a.post_send(&mut qp, &w);
        let sq_off = qp.wq_off + qp.rq_wqes as usize * qp.rq_stride;
        r.p.a
            .write(sq_off + 4, &(((r.qp.qpn + 1) << 8) | 2).to_be_bytes());
        r.qp = qp;
        r.p.a.dev.step();
    });
    fails(CqeSyndrome::LOCAL_QP_OP_ERR, |r| {
        r.post(WqeOpcode::UMR, &[&[0; 16]], 0, SIG);
    });
    fails(CqeSyndrome::LOCAL_QP_OP_ERR, |r| {
        // WRITE without its raddr segment.
        r.post(WqeOpcode::RDMA_WRITE, &[], 0, SIG);
    });
    fails(CqeSyndrome::LOCAL_QP_OP_ERR, |r| {
        r.p.a.dev.profile.caps.max_wqe_sz_sq = 64;
        let d = DataSeg::new(1, r.mr.key, r.mr.va);
        r.post(WqeOpcode::SEND, &[d.as_bytes(); 4], 0, SIG);
    });
    fails(CqeSyndrome::LOCAL_QP_OP_ERR, |r| {
        let ra = RaddrSeg::new(0x1000, 1);
        let at = AtomicSeg::fetch_add(1);
        let d = DataSeg::new(4, r.mr.key, r.mr.va);
        r.post(
            WqeOpcode::ATOMIC_FA,
            &[ra.as_bytes(), at.as_bytes(), d.as_bytes()],
            0,
            SIG,
        );
    });
    fails(CqeSyndrome::LOCAL_QP_OP_ERR, |r| {
        let ra = RaddrSeg::new(0x1004, 1);
        let at = AtomicSeg::fetch_add(1);
        let d = DataSeg::new(8, r.mr.key, r.mr.va);
        r.post(
            WqeOpcode::ATOMIC_FA,
            &[ra.as_bytes(), at.as_bytes(), d.as_bytes()],
            0,
            SIG,
        );
    });
}

#[test]
fn messages_above_log_msg_max_are_local_length_errors() {
    fails(CqeSyndrome::LOCAL_LENGTH_ERR, |r| {
        r.qp_mut().attrs.log_msg_max = 10;
        r.send(1025);
    });
}

#[test]
fn a_wqe_the_device_cannot_read_is_a_local_protection_error_and_a_dma_fault() {
    fails(CqeSyndrome::LOCAL_PROT_ERR, |r| {
        let len = r.qp_mut().wq.pages().len() as u64 * 4096;
        r.qp_mut().wq =
            PageList::new(vec![0x7000_0000; len as usize / 4096], 0, 0, len).expect("pages");
        r.send(8);
    });
    let mut r = Rig::rc(1024, 0);
    r.qp_mut().wq = PageList::new(vec![0x7000_0000; 2], 0, 0, 8192).expect("pages");
    r.send(8);
    assert!(r.p.a.dev.counters.dma_faults >= 1);
}

#[test]
fn a_local_error_waits_for_the_wqes_before_it_to_complete() {
    let mut r = Rig::rc(1024, 0);
    r.send(8);
    let d = DataSeg::new(8, 0xdead_0000, 0);
    r.post(WqeOpcode::SEND, &[d.as_bytes()], 0, SIG);
    r.send(8);
    assert_eq!(r.sent().len(), 1, "nothing after the bad WQE is sent");
    assert!(r.poll().is_none());
    r.ack(0);
    let c = r.poll_all();
    assert_ok(&c[0], r.qp.qpn, 0, WqeOpcode::SEND);
    assert_err(&c[1], r.qp.qpn, 1, CqeSyndrome::LOCAL_PROT_ERR);
    assert_err(&c[2], r.qp.qpn, 2, CqeSyndrome::WR_FLUSH_ERR);
}
