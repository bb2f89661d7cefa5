//! The SQ drain and SQ error transitions and UC's fields: RTS2SQD, SQD2SQD, SQD_RTS from a
//! drain in progress, SQERR2RTS, and a UC QP's walk to RTS.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{OptParamMask as M, QpState, service_type};
use bypass_hw::syndrome::CmdStatus;

use super::{Rig, assert_fails};
use crate::firmware::qp::*;

#[test]
fn rts2sqd_with_nothing_in_progress_is_drained_at_once() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    r.step(Opcode::RTS2SQD_QP, qpn).unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Sqd);
    // A second drain is not a transition from SQD.
    assert_fails(
        r.step(Opcode::RTS2SQD_QP, qpn),
        CmdStatus::BAD_QP_STATE_ERR,
        SYND_BAD_QP_STATE,
    );
    r.step(Opcode::SQD2SQD_QP, qpn).unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Sqd);
    r.step(Opcode::SQD_RTS_QP, qpn).unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Rts);
    assert!(r.qp(qpn).req.fresh, "back in RTS the SQ is looked at again");
}

#[test]
fn rts2sqd_takes_no_optional_parameter() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::UD);
    r.walk_to_rts(qpn);
    let res = r.modify(Opcode::RTS2SQD_QP, qpn, M::Q_KEY.bits(), |_| {});
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_OPT_PARAM);
    assert_eq!(r.qp(qpn).state, QpState::Rts);
}

#[test]
fn sqd2sqd_waits_for_the_drain_and_sqd2rts_may_cancel_it() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    r.force(qpn, QpState::SqDraining);
    assert_fails(
        r.step(Opcode::SQD2SQD_QP, qpn),
        CmdStatus::BAD_QP_STATE_ERR,
        SYND_BAD_QP_STATE,
    );
    r.step(Opcode::SQD_RTS_QP, qpn).unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Rts);
}

#[test]
fn sqd2sqd_changes_a_ud_qkey_and_refuses_rc_only_bits() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::UD);
    r.walk_to_rts(qpn);
    r.step(Opcode::RTS2SQD_QP, qpn).unwrap();
    r.modify(Opcode::SQD2SQD_QP, qpn, M::Q_KEY.bits(), |q| {
        q.set_q_key(0x4242).unwrap();
    })
    .unwrap();
    assert_eq!(r.qp(qpn).attrs.q_key, 0x4242);
    let res = r.modify(Opcode::SQD2SQD_QP, qpn, M::RRE.bits(), |_| {});
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_OPT_PARAM);
}

#[test]
fn sqerr2rts_only_from_sqe_and_only_with_its_row() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::UC);
    r.walk_to_rts(qpn);
    assert_fails(
        r.step(Opcode::SQERR2RTS_QP, qpn),
        CmdStatus::BAD_QP_STATE_ERR,
        SYND_BAD_QP_STATE,
    );
    r.force(qpn, QpState::Sqer);
    let res = r.modify(Opcode::SQERR2RTS_QP, qpn, M::Q_KEY.bits(), |_| {});
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_OPT_PARAM);
    r.modify(Opcode::SQERR2RTS_QP, qpn, M::RWE.bits(), |q| {
        q.set_rwe(1).unwrap();
    })
    .unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Rts);
}

#[test]
fn a_uc_qp_takes_the_connection_fields_and_no_retry_counts() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::UC);
    r.walk_to_rts(qpn);
    let qp = r.qp(qpn);
    assert_eq!(qp.state, QpState::Rts);
    assert_eq!(qp.attrs.mtu, 1024);
    assert_ne!(qp.attrs.remote_qpn, 0);
    assert_eq!(qp.attrs.retry_count, 0);
    // UC has no RNR timer to change (the kernel's UC row has no RNR_TIMEOUT).
    let res = r.modify(Opcode::RTS2RTS_QP, qpn, M::RNR_TIMEOUT.bits(), |_| {});
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_OPT_PARAM);
}
