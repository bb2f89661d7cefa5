//! Receiving through an SRQ: a QP attached to one takes its receive WQE from the SRQ when a
//! message starts and holds it until the message completes; the SRQ's events.
//!
//! Owns: the QP's held SRQ WQE (`resp.srq_wqe`): [`peek`] (take one, or the one held),
//! [`complete`] / [`complete_error`] (its CQE, with the WQE's index as `wqe_counter`),
//! [`entered_err`] (a held WQE flushed, then LAST_WQE_REACHED); and the EQEs SRQ_LIMIT and
//! LAST_WQE. Must not: touch a QP's own RQ (`engine::rq`) or decide ACKs (the responder).
//!
//! Sources: the SRQ list and limit: `crate::srq`. The events, as the kernel decodes them:
//! SRQ_RQ_LIMIT (0x14) names the SRQ in `qp_srq_n` (`mlx5_ib` `srq_cmd.c`
//! `srq_event_notifier`, which ignores the queue type), SRQ_LAST_WQE (0x13) the QP
//! (`mlx5_ib` `qp.c` `mlx5_ib_qp_event` → `IB_EVENT_QP_LAST_WQE_REACHED`). IBTA vol. 1
//! §11.6.3.4: once a QP attached to an SRQ is in the Error state, the Last WQE Reached event
//! is raised when no more WQEs of the SRQ will be consumed by it: here, once the WQE it held
//! (if any) was flushed. An SRQ's other WQEs stay posted: a QP's error does not flush them.

use bypass_hw::eqe::EventType;
use bypass_hw::syndrome::CqeSyndrome;

use super::rq::{self, RecvDone};
use super::wqe::RecvWqe;
use crate::events::Completions;
use crate::io::Io;
use crate::iommu::DmaFault;
use crate::objects::Qp;
use crate::srq::{self, Srq};
use crate::table::Table;

/// Raises event `t` about queue `n` (`mlx5_eqe_qp_srq`).
fn queue_event(comp: &mut Completions, io: &mut Io<'_>, t: EventType, n: u32) {
    comp.post_qp_event(io, t, n);
}

/// The receive WQE for the message `qp` starts (or continues): the SRQ WQE it holds, or the
/// next one it takes from SRQ `srqn` (`None`: the SRQ is empty). Taking one below the armed
/// limit raises SRQ_LIMIT and disarms it.
#[cold]
#[inline(never)]
pub(crate) fn peek(
    qp: &mut Qp,
    srqs: &mut Table<Srq>,
    comp: &mut Completions,
    io: &mut Io<'_>,
    srqn: u32,
) -> Result<Option<RecvWqe>, DmaFault> {
    let Some(s) = srqs.get_mut(srqn) else {
        return Ok(None);
    };
    if let Some(index) = qp.resp.srq_wqe {
        return srq::read_wqe(s, io.dma, index).map(|(w, _)| Some(w));
    }
    let Some(t) = srq::take(s, io.dma)? else {
        return Ok(None);
    };
    qp.resp.srq_wqe = Some(t.index);
    if t.limit_reached {
        queue_event(comp, io, EventType::SRQ_LIMIT, srqn);
    }
    Ok(Some(t.wqe))
}

/// The PD an SRQ QP's receives scatter through: the SRQ's.
#[cold]
pub(crate) fn pd(srqs: &Table<Srq>, srqn: u32) -> Option<u32> {
    srqs.get(srqn).map(|s| s.pd)
}

/// Completes the SRQ WQE `qp` holds (nothing if it holds none).
#[cold]
#[inline(never)]
pub(crate) fn complete(qp: &mut Qp, comp: &mut Completions, io: &mut Io<'_>, done: &RecvDone) {
    if let Some(index) = qp.resp.srq_wqe.take() {
        rq::complete_at(qp, comp, io, done, index);
    }
}

/// Completes the SRQ WQE `qp` holds with `syndrome` (nothing if it holds none).
#[cold]
#[inline(never)]
pub(crate) fn complete_error(
    qp: &mut Qp,
    comp: &mut Completions,
    io: &mut Io<'_>,
    syndrome: CqeSyndrome,
) {
    if let Some(index) = qp.resp.srq_wqe.take() {
        rq::complete_error_at(qp, comp, io, syndrome, index);
    }
}

/// `qp`, attached to an SRQ, entered ERR: the WQE it held completes with WR_FLUSH_ERR, then
/// LAST_WQE_REACHED.
#[cold]
#[inline(never)]
pub(crate) fn entered_err(qp: &mut Qp, comp: &mut Completions, io: &mut Io<'_>) {
    complete_error(qp, comp, io, CqeSyndrome::WR_FLUSH_ERR);
    queue_event(comp, io, EventType::LAST_WQE, qp.qpn);
}
