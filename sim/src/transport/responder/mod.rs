//! The responder: request packets → receives, RDMA WRITE/READ/atomics, ACK/NAK/RNR NAK.
//!
//! Owns: the RC request checks in rxe's order and what a failed one costs (IBTA §9.9.3 error
//! classes: B = RNR NAK; C = the consumed receive WQE completes in error, the NAK goes out
//! with the request's PSN and the QP moves to ERR, rxe `do_class_ac_error` + `RESPST_ERROR`;
//! D = silent drop). The pieces: [`state`] (per-QP state), [`ack`] (response packets), `send`
//! (RC SEND), `rdma` (WRITE, READ, atomics, duplicates), `ud` (UD receive with the GRH), `uc`
//! (UC's PSN rule and drops over the same SEND/WRITE placement),
//! [`burst`] (a WRITE burst applied at once); receive WQEs are `engine::rq`'s. Must not: touch
//! the send queue or the requester's state.
//!
//! Sources: Linux rxe `rxe_resp.c` (`rxe_responder`: `check_psn`, `check_op_seq`,
//! `check_op_valid`, `check_resource`, `check_length`, `check_rkey`, `execute`, `acknowledge`,
//! `duplicate_request`) and IBTA vol. 1 §9.7 (PSN checks, MSN, duplicates, responder
//! resources).

pub(crate) mod ack;
pub(crate) mod burst;
mod rdma;
mod send;
pub(crate) mod state;
mod uc;
mod ud;

#[cfg(test)]
mod tests;

use bypass_hw::cmd::qp::{QpState, service_type as st};
use bypass_hw::eqe::EventType;
use bypass_hw::roce::opcode::{Position, pad_len, psn_add, psn_diff};
use bypass_hw::roce::{BthOpcode, RocePacket};
use bypass_hw::syndrome::{AethSyndrome, CqeSyndrome};

use crate::counters::Counters;
use crate::transport::state::DataPath;

use crate::engine::rq::{self, RecvDone, ScatterError};
use crate::engine::srq_recv;
use crate::engine::wqe::RecvWqe;
use crate::iommu::DmaFault;
use state::Msg;

/// How a request failed the checks (rxe's error states, grouped by IBTA error class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fail {
    /// Class B: no receive WQE; RNR NAK, nothing changes.
    Rnr,
    /// Class C: NAK `nak`, the consumed receive WQE (if `consumed`) completes with `cqe`, the
    /// QP moves to ERR.
    Fatal {
        /// The NAK syndrome.
        nak: AethSyndrome,
        /// The receive completion's syndrome.
        cqe: CqeSyndrome,
        /// The head receive WQE belongs to this message.
        consumed: bool,
    },
    /// Class D: dropped silently.
    Drop,
}

impl Fail {
    /// NAK invalid request (rxe `RESPST_ERR_MISSING_OPCODE_*`, `_UNSUPPORTED_OPCODE`,
    /// `_LENGTH`, `_MISALIGNED_ATOMIC`, `_TOO_MANY_RDMA_ATM_REQ`).
    pub(crate) fn inv_req(consumed: bool) -> Self {
        Self::Fatal {
            nak: AethSyndrome::NAK_INVALID_REQUEST,
            cqe: CqeSyndrome::REMOTE_INVAL_REQ_ERR,
            consumed,
        }
    }

    /// NAK remote access error (rxe `RESPST_ERR_RKEY_VIOLATION`).
    pub(crate) fn access(consumed: bool) -> Self {
        Self::Fatal {
            nak: AethSyndrome::NAK_REMOTE_ACCESS_ERROR,
            cqe: CqeSyndrome::REMOTE_ACCESS_ERR,
            consumed,
        }
    }

    /// NAK remote operational error: the responder itself could not do it (rxe
    /// `RESPST_ERR_MALFORMED_WQE`), the receive completing with `cqe`.
    pub(crate) fn operational(cqe: CqeSyndrome, consumed: bool) -> Self {
        Self::Fatal {
            nak: AethSyndrome::NAK_REMOTE_OPERATIONAL_ERROR,
            cqe,
            consumed,
        }
    }
}

/// Adds one to counter `f` of the device and of QP `qpn`.
pub(crate) fn count(dp: &mut DataPath<'_>, qpn: u32, f: fn(&mut Counters) -> &mut u64) {
    *f(dp.io.counters) += 1;
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        *f(&mut qp.counters) += 1;
    }
}

/// The path MTU of a QP (256 if unset, so no division by zero whatever the context says).
pub(crate) fn mtu(dp: &DataPath<'_>, qpn: u32) -> u32 {
    dp.objs
        .qps
        .get(qpn)
        .map_or(256, |q| q.attrs.mtu)
        .clamp(256, 4096)
}

/// A request packet for QP `qpn` (`transport::receive` checked the ICRC, the address, the
/// QP, the transport and that the QP is in RTR or later).
pub(crate) fn handle_request(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) {
    let Some(qp) = dp.objs.qps.get(qpn) else {
        return;
    };
    match qp.st {
        st::RC => rc_request(dp, qpn, pkt),
        st::UD => ud::receive(dp, qpn, pkt),
        st::UC => uc::receive(dp, qpn, pkt),
        _ => dp.io.counters.rx_discards += 1,
    }
}

/// Posts COMM_EST the first time a connected QP receives a request while in RTR (PRM; the
/// kernel's `mlx5_ib` `mlx5_ib_qp_event` turns it into `IB_EVENT_COMM_EST`).
fn comm_est(dp: &mut DataPath<'_>, qpn: u32) {
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return;
    };
    if qp.state != QpState::Rtr || qp.resp.comm_est {
        return;
    }
    qp.resp.comm_est = true;
    dp.comp.post_qp_event(&mut dp.io, EventType::COMM_EST, qpn);
}

/// An RC request: PSN check, then the checks and execution (rxe `rxe_responder`).
fn rc_request(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) {
    comm_est(dp, qpn);
    let psn = pkt.bth().psn();
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return;
    };
    let epsn = qp.resp.epsn;
    let diff = psn_diff(psn, epsn);
    if diff > 0 {
        // rxe `check_psn`: one NAK per gap, until a packet with the expected PSN arrives.
        if qp.resp.nak_sent {
            return;
        }
        qp.resp.nak_sent = true;
        count(dp, qpn, |c| &mut c.out_of_sequence);
        count(dp, qpn, |c| &mut c.naks_sent);
        count(dp, qpn, |c| &mut c.nak_seq_sent);
        ack::send_ack(dp, qpn, AethSyndrome::NAK_PSN_SEQ_ERROR, epsn);
        return;
    }
    let result = if diff < 0 {
        count(dp, qpn, |c| &mut c.duplicate_request);
        rdma::duplicate(dp, qpn, pkt)
    } else {
        qp.resp.nak_sent = false;
        check_and_execute(dp, qpn, pkt)
    };
    match result {
        Ok(()) => {}
        Err(Fail::Rnr) => {
            count(dp, qpn, |c| &mut c.out_of_buffer);
            let timer = dp.objs.qps.get(qpn).map_or(0, |q| q.attrs.min_rnr_nak);
            ack::send_ack(dp, qpn, AethSyndrome::rnr_nak(timer), psn);
        }
        Err(Fail::Fatal { nak, cqe, consumed }) => fatal(dp, qpn, psn, nak, cqe, consumed),
        Err(Fail::Drop) => {}
    }
}

/// What an RC request opcode asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
    Atomic,
}

fn kind(op: BthOpcode) -> Option<Kind> {
    match op.0 {
        0x00..=0x05 | 0x16 | 0x17 => Some(Kind::Send),
        0x06..=0x0b => Some(Kind::Write),
        0x0c => Some(Kind::Read),
        0x13 | 0x14 => Some(Kind::Atomic),
        _ => None,
    }
}

/// rxe `check_op_seq`: a MIDDLE/LAST must continue a message of its kind, and a message in
/// progress must be continued.
fn check_op_seq(msg: &Msg, position: Position, k: Kind) -> Result<(), Fail> {
    let continues = matches!(position, Position::Middle | Position::Last);
    match msg {
        // RESPST_ERR_MISSING_OPCODE_LAST_C: the SEND's WQE completes in error.
        Msg::Send { .. } if !(continues && k == Kind::Send) => Err(Fail::inv_req(true)),
        Msg::Write { .. } if !(continues && k == Kind::Write) => Err(Fail::inv_req(false)),
        // RESPST_ERR_MISSING_OPCODE_FIRST.
        Msg::Idle if continues => Err(Fail::inv_req(false)),
        _ => Ok(()),
    }
}

/// rxe `check_length` (RoCE: no LRH, so only the payload rules): FIRST and MIDDLE carry
/// exactly the MTU, LAST 1..=MTU, ONLY at most the MTU; and the pad must make the payload a
/// multiple of 4 (IBTA §9.2.3; rxe `check_rkey` treats a wrong pad as a length error).
pub(crate) fn check_length(pkt: &RocePacket<'_>, mtu: u32) -> bool {
    let n = pkt.payload().len();
    let mtu = mtu as usize;
    let ok = match pkt.info().position {
        Position::First | Position::Middle => n == mtu,
        Position::Last => n > 0 && n <= mtu,
        Position::Only => n <= mtu,
    };
    ok && pkt.bth().pad_cnt() == pad_len(n)
}

/// The checks after the PSN one, then execution.
fn check_and_execute(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) -> Result<(), Fail> {
    let op = pkt.opcode();
    let Some(qp) = dp.objs.qps.get(qpn) else {
        return Err(Fail::Drop);
    };
    // RESPST_ERR_UNSUPPORTED_OPCODE for anything rxe's RC responder does not take.
    let k = kind(op).ok_or(Fail::inv_req(matches!(qp.resp.msg, Msg::Send { .. })))?;
    check_op_seq(&qp.resp.msg, pkt.info().position, k)?;
    // rxe `check_op_valid` / `check_qp_attr_access`: the QP must allow the remote access.
    let allowed = match k {
        Kind::Send => true,
        Kind::Write => qp.attrs.rwe,
        Kind::Read => qp.attrs.rre,
        Kind::Atomic => qp.attrs.rae,
    };
    if !allowed {
        return Err(Fail::inv_req(false));
    }
    match k {
        Kind::Send => send::send(dp, qpn, pkt),
        Kind::Write => rdma::write(dp, qpn, pkt),
        Kind::Read => rdma::read(dp, qpn, pkt),
        Kind::Atomic => rdma::atomic(dp, qpn, pkt),
    }
}

/// A request processed: the expected PSN moves past it (`npsn` PSNs), and an ACK goes out
/// if the requester asked for one (rxe `execute` + `acknowledge`: one ACK covers every
/// request before it, so only AckReq packets are acknowledged).
pub(crate) fn advance(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>, npsn: u32) {
    let psn = pkt.bth().psn();
    // UC has no acknowledgements (IBTA §9.7: only RC responders answer), whatever AckReq says.
    let mut rc = false;
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        qp.resp.epsn = psn_add(psn, npsn);
        rc = qp.st == st::RC;
    }
    if rc && pkt.bth().ack_req() {
        ack::send_ack(dp, qpn, AethSyndrome::ACK_UNLIMITED, psn);
    }
}

/// Class C error: the consumed receive WQE completes with `cqe`, NAK `nak` with the request's
/// PSN, QP to ERR (rxe `do_class_ac_error`, `do_complete`, `acknowledge`, `RESPST_ERROR`).
fn fatal(
    dp: &mut DataPath<'_>,
    qpn: u32,
    psn: u32,
    nak: AethSyndrome,
    cqe: CqeSyndrome,
    consumed: bool,
) {
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        qp.resp.msg = Msg::Idle;
    }
    if consumed {
        if cqe == CqeSyndrome::LOCAL_LENGTH_ERR {
            count(dp, qpn, |c| &mut c.resp_local_length_error);
        }
        recv_error(dp, qpn, cqe);
    }
    if nak == AethSyndrome::NAK_REMOTE_ACCESS_ERROR {
        count(dp, qpn, |c| &mut c.resp_remote_access_errors);
    }
    count(dp, qpn, |c| &mut c.naks_sent);
    ack::send_ack(dp, qpn, nak, psn);
    dp.set_qp_state(qpn, QpState::Err);
    // The responder's QP reports why it went to ERR (IBTA vol. 1 §11.6.3.1: local access
    // violation / invalid request work queue errors; the kernel's `mlx5_ib_qp_event` maps
    // `WQ_ACCESS_ERROR` to `IB_EVENT_QP_ACCESS_ERR`, `WQ_INVAL_REQ_ERROR` to
    // `IB_EVENT_QP_REQ_ERR`, `WQ_CATAS_ERROR` to `IB_EVENT_QP_FATAL`).
    let t = match nak {
        AethSyndrome::NAK_REMOTE_ACCESS_ERROR => EventType::WQ_ACCESS_ERROR,
        AethSyndrome::NAK_INVALID_REQUEST => EventType::WQ_INVAL_REQ_ERROR,
        _ => EventType::WQ_CATAS_ERROR,
    };
    dp.comp.post_qp_event(&mut dp.io, t, qpn);
}

/// The receive WQE at the head of QP `qpn`'s RQ, if one is posted (`engine::rq::peek`).
pub(super) fn peek(dp: &mut DataPath<'_>, qpn: u32) -> Result<Option<RecvWqe>, DmaFault> {
    match dp.objs.qps.get_mut(qpn) {
        Some(qp) => match qp.srqn {
            None => rq::peek(qp, dp.io.dma),
            Some(srqn) => srq_recv::peek(qp, &mut dp.objs.srqs, dp.comp, &mut dp.io, srqn),
        },
        None => Ok(None),
    }
}

/// Writes `data` at byte `offset` of the message `wqe` receives, through QP `qpn`'s PD
/// (`engine::rq::scatter`).
pub(super) fn scatter(
    dp: &mut DataPath<'_>,
    qpn: u32,
    wqe: &RecvWqe,
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let pd = match dp.objs.qps.get(qpn) {
        Some(q) if q.srqn.is_none() => q.pd,
        Some(q) => q
            .srqn
            .and_then(|n| srq_recv::pd(&dp.objs.srqs, n))
            .ok_or(ScatterError::Protection)?,
        None => return Err(ScatterError::Protection),
    };
    rq::scatter(&dp.objs.mkeys, dp.io.dma, (pd, qpn), wqe, offset, data)
}

/// Completes the head receive WQE of QP `qpn` (`engine::rq::complete`).
pub(super) fn recv_done(dp: &mut DataPath<'_>, qpn: u32, done: &RecvDone) {
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        if qp.srqn.is_none() {
            rq::complete(qp, dp.comp, &mut dp.io, done);
        } else {
            srq_recv::complete(qp, dp.comp, &mut dp.io, done);
        }
    }
}

/// Completes the head receive WQE of QP `qpn` with `syndrome` (`engine::rq::complete_error`).
pub(super) fn recv_error(dp: &mut DataPath<'_>, qpn: u32, syndrome: CqeSyndrome) {
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        if qp.srqn.is_none() {
            rq::complete_error(qp, dp.comp, &mut dp.io, syndrome);
        } else {
            srq_recv::complete_error(qp, dp.comp, &mut dp.io, syndrome);
        }
    }
}

/// Flushes receives posted to QPs already in ERR: the device learns of them from the doorbell
/// record (mlx5 has no RQ doorbell register), and completes them with WR_FLUSH_ERR as the PRM
/// requires of a QP in ERR. True if any completion was written.
pub(crate) fn resume(dp: &mut DataPath<'_>) -> bool {
    // The QPs are borrowed apart from the completions and the DMA they flush through: no list
    // of QP numbers is collected (a scan allocates nothing).
    let mut any = false;
    for (_, qp) in dp.objs.qps.iter_mut() {
        if qp.state != QpState::Err {
            continue;
        }
        match rq::posted(qp, dp.io.dma) {
            Ok(0) => {}
            Ok(_) => any |= rq::flush(qp, dp.comp, &mut dp.io) > 0,
            Err(f) => {
                if !qp.resp.dbr_fault {
                    qp.resp.dbr_fault = true;
                    dp.io.dma_fault(f);
                }
            }
        }
    }
    any
}
