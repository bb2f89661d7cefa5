//! The send queue drain: a QP that RTS2SQD_QP left in SQ_DRAINING finishes the messages it
//! had started, starts no others, and once none is left moves to SQD and raises SQ_DRAINED.
//!
//! Owns: [`finish_if_drained`], the one place the drain ends, called where the last started
//! WQE can complete (entering SQ_DRAINING, after completions in the requester and completer).
//! Must not: start, send or complete WQEs (the requester does; it holds back unstarted ones
//! while the QP is draining) or flush anything.
//!
//! Sources: IBTA vol. 1 §10.3.1 (SQ Drain: messages in progress complete, no new one starts,
//! "Send Queue Drained" affiliated asynchronous event when none is left, WRs posted meanwhile
//! wait for the return to RTS); the mlx5 encoding of the event: `MLX5_EVENT_TYPE_SQ_DRAINED`
//! (0x03, `include/linux/mlx5/device.h`) with the QP number in the QP/SRQ event data
//! (`mlx5_eqe_qp_srq`, `type` = `MLX5_EVENT_QUEUE_TYPE_QP`), which the kernel's `mlx5_ib`
//! `mlx5_ib_qp_event` turns into `IB_EVENT_SQ_DRAINED`; the states are `MLX5_QP_STATE_SQ_DRAINING`
//! (7) and `MLX5_QP_STATE_SQD` (5) (`include/linux/mlx5/qp.h`).

use bypass_hw::cmd::qp::QpState;
use bypass_hw::eqe::EventType;

use crate::events::Completions;
use crate::io::Io;
use crate::objects::Qp;
use crate::table::Table;
use crate::trace::TraceEvent;

/// If QP `qpn` is draining and no message it started is left, moves it to SQD and posts
/// SQ_DRAINED (once: the QP leaves SQ_DRAINING here). True if it did.
pub(crate) fn finish_if_drained(
    qps: &mut Table<Qp>,
    comp: &mut Completions,
    io: &mut Io<'_>,
    qpn: u32,
) -> bool {
    let Some(qp) = qps.get_mut(qpn) else {
        return false;
    };
    if qp.state != QpState::SqDraining || qp.req.in_progress() {
        return false;
    }
    qp.state = QpState::Sqd;
    let at = io.now;
    io.trace.record(|| TraceEvent::QpState {
        at,
        qpn,
        from: QpState::SqDraining as u8,
        to: QpState::Sqd as u8,
    });
    comp.post_qp_event(io, EventType::SQ_DRAINED, qpn);
    true
}
