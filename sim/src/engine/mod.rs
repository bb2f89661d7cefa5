//! The work queues as the device reads and completes them: WQE fetch from the send queue by
//! DMA, the receive queue, send completions, flushes, and the QP state change that flushes.
//!
//! Owns: fetching WQEs from the SQ ring up to the doorbell record's producer ([`fetch`]),
//! flushing ([`flush_sq`], [`flush_posted`]) and entering a state ([`set_qp_state`]). WQE
//! parsing is in [`wqe`], local memory access in [`gather`], send CQEs in [`cqe`], the
//! receive queue in [`rq`], what waits for bursts in flight in [`ledger`]. Must not: build
//! packets or keep transport state (that is `transport`), touch rings directly.
//!
//! The doorbell protocol, as rdma-core `providers/mlx5/qp.c` `post_send_db` drives it: the
//! WQEs are written, then the doorbell record's send counter (`dbr + 4`, big-endian, 16 bits
//! of `sq.cur_post`), then the first 8 bytes of the last WQE's ctrl segment go to the UAR
//! (or the whole WQE by BlueFlame). The device processes WQEs from its own counter up to the
//! record's, so one doorbell can cover many WQEs; the 8 doorbell bytes only name the QP.
//! Work requests are processed only from RTS (IBTA vol. 1 §10.3.1): [`fetch`] picks up the
//! WQEs posted before when the QP reaches RTS (the requester's `resume` calls it).

pub(crate) mod cqe;
pub(crate) mod drain;
pub(crate) mod gather;
pub(crate) mod ledger;
pub(crate) mod rq;
pub(crate) mod srq_recv;
pub(crate) mod wqe;

use bypass_hw::cmd::qp::QpState;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::{CtrlSeg, MLX5_SEND_WQE_BB, WqeOpcode};
use zerocopy::FromBytes;

use crate::buffer::PageList;
use crate::counters::Counters;
use crate::events::Completions;
use crate::io::Io;
use crate::iommu::Iommu;
use crate::objects::Qp;
use crate::profile::Caps;
use crate::table::Table;
use crate::trace::TraceEvent;
use ledger::Ledger;
use wqe::{Limits, SendWqe};

/// Fetches every WQE from the QP's SQ counter up to the doorbell record's producer, parses it
/// and queues it for the requester. With BlueFlame, `bf` holds the WQE written to the
/// register; the device uses those bytes, not the ring copy, for the WQE whose index the
/// BlueFlame ctrl segment names, and only for it.
///
/// The doorbell record is the producer (rdma-core `providers/mlx5/qp.c` `post_send_db`: the
/// ring copy, then `qp->db[MLX5_SND_DBR]`, then the 8-byte doorbell or `mlx5_bf_copy` of the
/// same WQE from the ring), so a BlueFlame write only carries a copy of a WQE the record
/// already announces. It can reach the device late: after an earlier doorbell already fetched
/// its WQE from the ring (the record had moved past it) and while the record announces more.
/// Its bytes then belong to an index behind the device's counter, and putting them in place of
/// the WQE at the counter would execute one WQE twice and lose another (an unsignaled WRITE
/// run in place of a signaled one, whose completion then never comes). Such a write is only a
/// doorbell: every WQE comes from the ring.
///
/// Returns true when the device could not read its doorbell record or a WQE (a DMA fault):
/// a work queue catastrophic error, which the caller reports with `WQ_CATAS_ERROR` (PRM; the
/// kernel's `mlx5_ib` `mlx5_ib_qp_event` turns it into `IB_EVENT_QP_FATAL`).
pub(crate) fn fetch(
    qp: &mut Qp,
    caps: &Caps,
    io: &mut Io<'_>,
    bf_spare: &mut Vec<u8>,
    bf: Option<Vec<u8>>,
) -> bool {
    let Some(log_sq) = qp.geom.log_sq_size else {
        return false;
    };
    let qpn = qp.qpn;
    let sq_wqebbs = 1u32 << log_sq;
    let rq_bytes = qp.geom.rq_bytes();
    let lim = Limits {
        qpn,
        st: qp.st,
        max_wqe_bytes: u32::from(caps.max_wqe_sz_sq),
        log_msg_max: match qp.attrs.log_msg_max {
            // A qpc without log_msg_max: the device's own limit applies.
            0 => caps.log_max_msg,
            l => l.min(caps.log_max_msg),
        },
    };
    let dbr = qp.dbr.wrapping_add(4);
    let pi = match io.dma.read_be32(dbr) {
        Ok(v) => v & 0xffff,
        Err(f) => {
            io.dma_fault(f);
            return true;
        }
    };
    let mut faulted = false;
    let mut ci = qp.sq_ci & 0xffff;
    let outstanding = u32::try_from(qp.req.wqes.len()).unwrap_or(u32::MAX);
    let mut remaining = fetch_budget(io.counters, pi, ci, sq_wqebbs, outstanding);
    // The index the BlueFlame WQE was posted at (`ctrl.opmod_idx_opcode` bits 23:8).
    let bf_index = bf.as_deref().and_then(|b| {
        CtrlSeg::read_from_prefix(b)
            .ok()
            .map(|(c, _)| u32::from(c.wqe_index()))
    });
    let mut bf = bf;
    // Fetched WQEs go straight onto the QP's queue (no list per doorbell); `sq_ci` is
    // written once at the end.
    while remaining != 0 {
        let mine = if bf_index == Some(ci) {
            bf.take()
        } else {
            None
        };
        match read_wqe(&qp.wq, io.dma, rq_bytes, sq_wqebbs, ci, mine) {
            Ok((bytes, wqebbs)) => {
                let at = io.now;
                io.trace.record(|| TraceEvent::Wqe {
                    at,
                    qpn,
                    bytes: bytes.clone(),
                });
                // The WQEBBs `parse` gives the WQE (`read_wqe` read them from its ctrl
                // segment), known before parsing: a WQE reaching past the budget is not
                // parsed, and one that fits is parsed straight into the queue (no moves of
                // the parsed WQE on the way).
                let fits = wqebbs <= remaining;
                if fits {
                    qp.req
                        .wqes
                        .push_back(SendWqe::bare(ci as u16, WqeOpcode::NOP, 1));
                    if let Some(w) = qp.req.wqes.back_mut() {
                        wqe::parse_into(w, &bytes, &lim);
                    }
                }
                if bytes.capacity() > bf_spare.capacity() {
                    // The next BlueFlame write fills this buffer again.
                    *bf_spare = bytes;
                }
                if !fits {
                    break;
                }
                remaining -= wqebbs;
                ci = (ci + wqebbs) & 0xffff;
            }
            Err(f) => {
                // The WQE could not be read: it completes with the local protection error
                // (the device's access to the posted buffer failed) when its turn comes, and
                // nothing after it is fetched.
                io.dma_fault(f);
                let mut w = SendWqe::bare(ci as u16, WqeOpcode::NOP, 1);
                w.error = Some(CqeSyndrome::LOCAL_PROT_ERR);
                ci = (ci + 1) & 0xffff;
                qp.req.wqes.push_back(w);
                faulted = true;
                break;
            }
        }
    }
    qp.sq_ci = ci;
    faulted
}

/// Reads the WQE at SQ counter `ci`: its ctrl segment, then the rest, WQEBB by WQEBB, wrapping
/// at the end of the SQ. `bf` replaces the ring bytes where it has them. Returns the bytes (at
/// most the SQ's size) and the WQEBBs the ctrl segment claims (one if it cannot be read; not
/// capped: a WQE claiming more than the fetch budget is not parsed).
fn read_wqe(
    wq: &PageList,
    dma: &mut Iommu,
    rq_bytes: u64,
    sq_wqebbs: u32,
    ci: u32,
    bf: Option<Vec<u8>>,
) -> Result<(Vec<u8>, u32), crate::iommu::DmaFault> {
    let mut first = [0u8; MLX5_SEND_WQE_BB];
    match bf.as_deref().and_then(|b| b.get(..MLX5_SEND_WQE_BB)) {
        Some(b) => first.copy_from_slice(b),
        None => wq.read(dma, wqe::sq_offset(rq_bytes, sq_wqebbs, ci), &mut first)?,
    }
    let claimed =
        CtrlSeg::read_from_prefix(&first[..]).map_or(1, |(c, _)| u32::from(wqe::wqebbs(&c)));
    let nbb = claimed.min(sq_wqebbs);
    let whole = nbb as usize * MLX5_SEND_WQE_BB;
    let bf = match bf {
        // BlueFlame carried the whole WQE: its bytes are the WQE (no copy).
        Some(mut b) if b.len() >= whole => {
            b.truncate(whole);
            return Ok((b, claimed));
        }
        partial => partial,
    };
    let mut bytes = Vec::with_capacity(nbb as usize * MLX5_SEND_WQE_BB);
    bytes.extend_from_slice(&first);
    for i in 1..nbb {
        let at = i as usize * MLX5_SEND_WQE_BB;
        match bf.as_deref().and_then(|b| b.get(at..at + MLX5_SEND_WQE_BB)) {
            Some(b) => bytes.extend_from_slice(b),
            None => {
                let mut bb = [0u8; MLX5_SEND_WQE_BB];
                let off = wqe::sq_offset(rq_bytes, sq_wqebbs, ci.wrapping_add(i));
                wq.read(dma, off, &mut bb)?;
                bytes.extend_from_slice(&bb);
            }
        }
    }
    Ok((bytes, claimed))
}

/// Moves QP `qpn` to `to`, tracing the change; entering ERR flushes both its queues (every
/// outstanding WQE completes with WR_FLUSH_ERR, the SQ's once no burst of the QP reads its
/// memory: [`ledger`]), as the PRM requires, and forgets the message being received; entering
/// SQE flushes the SQ alone; entering SQ_DRAINING ends at once in SQD if nothing is in
/// progress ([`drain`]).
pub(crate) fn set_qp_state(
    qps: &mut Table<Qp>,
    comp: &mut Completions,
    ledger: &mut Ledger,
    io: &mut Io<'_>,
    qpn: u32,
    to: QpState,
) {
    let Some(qp) = qps.get_mut(qpn) else {
        return;
    };
    let from = qp.state;
    qp.state = to;
    ledger.note_state_change();
    if from != to {
        let at = io.now;
        io.trace.record(|| TraceEvent::QpState {
            at,
            qpn,
            from: from as u8,
            to: to as u8,
        });
    }
    if to == QpState::Err {
        flush_sq(qps, comp, ledger, io, qpn);
        if let Some(qp) = qps.get_mut(qpn) {
            qp.resp.forget_message();
            rq::flush(qp, comp, io);
            if qp.srqn.is_some() && from != QpState::Err {
                srq_recv::entered_err(qp, comp, io);
            }
        }
    }
    // SQE (UD/UC after a send error): only the SQ flushes; receives go on (IBTA §10.3.1).
    if to == QpState::Sqer {
        flush_sq(qps, comp, ledger, io, qpn);
    }
    // A drain with nothing in progress is over at once.
    if to == QpState::SqDraining {
        drain::finish_if_drained(qps, comp, io, qpn);
    }
}

/// Completes every outstanding send WQE of `qpn`, and every WQE posted up to the doorbell
/// record's producer, with WR_FLUSH_ERR.
///
/// Every flushed WQE gets its CQE, signaled or not: IBTA §10.7.3.1 requires a completion for
/// every WR flushed in the error state, rxe posts one whenever the status is not success
/// (`rxe_comp.c` `do_complete`), and rdma-core's mlx5 poll is built for it (a REQ_ERR CQE sets
/// `sq.tail = wqe_head[idx] + 1`, `cq.c` `mlx5_parse_cqe`, so one CQE per WQE retires each
/// in turn). The kernel's drain (`mlx5_ib` `mlx5_ib_drain_sq`) relies on the flush of its
/// own signaled marker WQE.
///
/// The requester forgets the WQEs at once; their CQEs wait while a burst of this QP still
/// reads its memory ([`Ledger::flush_when_read`]).
pub(crate) fn flush_sq(
    qps: &mut Table<Qp>,
    comp: &mut Completions,
    ledger: &mut Ledger,
    io: &mut Io<'_>,
    qpn: u32,
) {
    let Some(qp) = qps.get_mut(qpn) else {
        return;
    };
    let wqes = std::mem::take(&mut qp.req.wqes);
    qp.req.reset_after_flush();
    let flushes = wqes.iter().map(|w| ledger::PendingErr {
        index: w.index,
        opcode: w.opcode,
        syndrome: CqeSyndrome::WR_FLUSH_ERR,
    });
    ledger.flush_when_read(qps, comp, io, qpn, flushes);
}

/// How many WQEBBs the device may take from the SQ, from counter `ci` toward the doorbell
/// record's producer `pi`, with `outstanding` WQEs already taken and not completed.
///
/// A send queue never holds more than its WQEBBs, so a producer further ahead than the free
/// part of the ring is a driver bug (it overwrote WQEs the device had not consumed): the device
/// takes at most one ring's worth and counts the bad record. Callers also stop before a WQE
/// that would reach past the budget (it is not complete yet). Without these bounds a producer
/// that falls inside a multi-WQEBB WQE is never matched exactly and the walk runs around the
/// 16-bit counter forever.
fn fetch_budget(
    counters: &mut Counters,
    pi: u32,
    ci: u32,
    sq_wqebbs: u32,
    outstanding: u32,
) -> u32 {
    let announced = pi.wrapping_sub(ci) & 0xffff;
    let budget = announced.min(sq_wqebbs.saturating_sub(outstanding));
    if budget < announced {
        counters.doorbell_errors += 1;
    }
    budget
}

/// Flushes the WQEs posted after the device's SQ counter (reading only their ctrl segments).
pub(crate) fn flush_posted(qp: &mut Qp, comp: &mut Completions, io: &mut Io<'_>) {
    let Some(log_sq) = qp.geom.log_sq_size else {
        return;
    };
    let sq_wqebbs = 1u32 << log_sq;
    let rq_bytes = qp.geom.rq_bytes();
    let pi = match io.dma.read_be32(qp.dbr.wrapping_add(4)) {
        Ok(v) => v & 0xffff,
        Err(f) => {
            io.dma_fault(f);
            return;
        }
    };
    let mut ci = qp.sq_ci & 0xffff;
    let mut remaining = fetch_budget(io.counters, pi, ci, sq_wqebbs, 0);
    let mut flushed = Vec::new();
    while remaining != 0 {
        let mut c = [0u8; 16];
        if let Err(f) = qp
            .wq
            .read(io.dma, wqe::sq_offset(rq_bytes, sq_wqebbs, ci), &mut c)
        {
            io.dma_fault(f);
            break;
        }
        let (opcode, nbb) = match CtrlSeg::read_from_prefix(&c[..]) {
            Ok((ctrl, _)) => (ctrl.opcode(), wqe::wqebbs(&ctrl)),
            Err(_) => (WqeOpcode::NOP, 1),
        };
        let nbb = u32::from(nbb);
        if nbb > remaining {
            break;
        }
        remaining -= nbb;
        flushed.push((ci as u16, opcode));
        ci = (ci + nbb) & 0xffff;
    }
    qp.sq_ci = ci;
    let cq = cqe::SendCq::of(qp);
    for (index, opcode) in flushed {
        cqe::post_err(
            cq,
            &mut qp.counters,
            comp,
            io,
            index,
            opcode,
            CqeSyndrome::WR_FLUSH_ERR,
        );
    }
}

#[cfg(test)]
mod tests;
