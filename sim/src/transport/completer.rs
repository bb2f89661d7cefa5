//! The completer: ACK/NAK, READ responses and atomic ACKs → send completions.
//!
//! Owns: what a response packet does to the requester's WQEs: coalesced ACKs, implicit ACKs
//! (a NAK or a READ/atomic response acknowledges every PSN before it), READ response
//! reassembly into the READ's local buffers, atomic results, RNR NAK back-off, PSN sequence
//! NAK go-back-N, and the fatal NAKs. Must not: send request packets itself (it rewinds and
//! lets the requester's `pump` resend) or touch rings (CQEs go through `engine::cqe`).
//!
//! Follows rxe `rxe_comp.c` (`check_psn`, `check_ack`, `do_read`, `do_atomic`,
//! `complete_ack`, the RNR and retry paths):
//! a response PSN beyond a SEND/WRITE's last PSN completes it; beyond a READ/atomic's last
//! PSN without its data means the response was lost (retry from it); a PSN before the oldest
//! unacknowledged one, or past the last one sent, is stale and ignored.

use bypass_hw::roce::opcode::{Position, psn_add, psn_diff};
use bypass_hw::roce::{Aeth, BthOpcode, RocePacket};
use bypass_hw::syndrome::{AethKind, CqeSyndrome};
use bypass_hw::wqe::WqeOpcode;

use super::requester::{self, Ctx, ReqState, Sender, count, rewind, rnr_timer_ns, use_retry};
use crate::engine::gather;
use crate::transport::state::DataPath;

/// What an acknowledgement up to a PSN found.
enum Acked {
    /// Everything up to the PSN that could complete did.
    Ok,
    /// A READ/atomic ending at or before the PSN has no data yet: its response was lost,
    /// resend from this PSN.
    Lost(u32),
}

/// A response packet for QP `qpn`.
pub(crate) fn handle_response(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) {
    respond_to(dp, qpn, pkt.bth().psn(), |s, c, req, psn| {
        match pkt.opcode() {
            BthOpcode::RC_ACKNOWLEDGE => {
                if let Some(aeth) = pkt.aeth() {
                    on_ack(s, c, req, aeth, psn);
                }
            }
            BthOpcode::RC_ATOMIC_ACKNOWLEDGE => on_atomic_ack(s, c, req, pkt, psn),
            BthOpcode::RC_RDMA_READ_RESPONSE_FIRST
            | BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE
            | BthOpcode::RC_RDMA_READ_RESPONSE_LAST
            | BthOpcode::RC_RDMA_READ_RESPONSE_ONLY => on_read_response(s, c, req, pkt, psn),
            _ => {}
        }
    });
}

/// An ACKNOWLEDGE that came as a structured frame on the in-process link
/// (`crate::frame::AckFrame`): what [`handle_response`] does with the same packet.
pub(crate) fn handle_ack(dp: &mut DataPath<'_>, qpn: u32, psn: u32, aeth: &Aeth) {
    respond_to(dp, qpn, psn, |s, c, req, psn| on_ack(s, c, req, aeth, psn));
}

/// Lends QP `qpn`'s send side to `f` for a response with PSN `psn` unless it is stale, then
/// completes what is ready and lets the requester send again.
fn respond_to(
    dp: &mut DataPath<'_>,
    qpn: u32,
    psn: u32,
    f: impl FnOnce(&mut Sender<'_, '_>, &Ctx, &mut ReqState, u32),
) {
    let answered = requester::with_sender(dp, qpn, |s, c, req| {
        // Only PSNs in [una - 1, max_psn) can answer something still outstanding; older ones
        // are duplicates (rxe re-ACKs duplicates at `ack_psn - 1`), newer ones answer nothing
        // sent.
        let stale = psn_diff(psn, req.una) < -1 || psn_diff(psn, req.max_psn) >= 0;
        if !stale {
            f(s, c, req, psn);
        }
        let failed = requester::complete_ready(s, req);
        requester::After::of(c, failed)
    });
    let Some(after) = answered else {
        return;
    };
    let to_err = matches!(after, requester::After::Fail(_));
    // An error moves the QP on; a drain ends when the ACK of its last started message
    // arrives.
    after.run(dp, qpn);
    // Skipped when it would do nothing: every WQE completed or still waiting for its ACK
    // (`requester::has_work`).
    if !to_err && dp.objs.qps.get(qpn).is_some_and(requester::has_work) {
        requester::pump(dp, qpn);
    }
}

/// Completes the SEND/WRITE WQEs whose last PSN is at or before `psn`, in order, and moves
/// the oldest unacknowledged PSN past them — never past the first response PSN an
/// outstanding READ/atomic has not received (a READ response beyond a lost one implicitly
/// acknowledges the requests before the READ, not the READ's own missing data; rxe
/// `rxe_comp.c` `check_psn` keeps `comp.psn` at the WQE's first missing PSN).
fn ack_through(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState, psn: u32) -> Acked {
    let mut progress = false;
    let mut lost = None;
    // The acknowledgement cannot reach past the response data a READ/atomic still waits for.
    let mut cap = None;
    for w in req.wqes.iter_mut() {
        if !w.started || w.error.is_some() {
            break;
        }
        if w.done || w.opcode == WqeOpcode::NOP {
            continue;
        }
        if !w.sent || psn_diff(w.last_psn, psn) > 0 {
            if w.is_read_or_atomic() {
                cap = Some(psn_add(w.first_psn, w.resp_pkts));
            }
            break;
        }
        if w.is_read_or_atomic() {
            lost = Some(psn_add(w.first_psn, w.resp_pkts));
            break;
        }
        w.done = true;
        progress = true;
    }
    let next = psn_add(psn, 1);
    let upto = match (lost, cap) {
        (Some(p), _) => p,
        (None, Some(c)) if psn_diff(c, next) < 0 => c,
        _ => next,
    };
    if psn_diff(upto, req.una) > 0 {
        req.una = upto;
        progress = true;
    }
    if progress {
        req.retrying = false;
        req.retries = 0;
        req.rnr_retries = 0;
        req.ack_deadline = if req.outstanding() {
            c.ack_timeout.map(|t| s.io.now.saturating_add(t))
        } else {
            None
        };
    }
    match lost {
        Some(p) => Acked::Lost(p),
        None => Acked::Ok,
    }
}

/// A retry from `psn` after a lost response or a sequence NAK: uses a transport retry, or
/// fails the oldest outstanding WQE with TRANSPORT_RETRY_EXC_ERR when none is left.
fn retry_from(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState, psn: u32) {
    if req.retrying {
        // A retry is already resending; its own duplicates' ACKs must not restart it (rxe
        // `rxe_completer` COMPST_ERROR_RETRY: `started_retry && !timeout_retry`).
        return;
    }
    if use_retry(&mut req.retries, c.retry_count) {
        count(s, |k| k.completer_retry_err += 1);
        req.retrying = true;
        rewind(req, psn);
    } else {
        count(s, |k| k.retry_exceeded_err += 1);
        fail_at(req, psn, CqeSyndrome::TRANSPORT_RETRY_EXC_ERR);
    }
}

/// A response whose PSN shows an earlier READ/atomic response was lost: retry from `psn`.
fn implied_nak(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState, psn: u32) {
    if !req.retrying {
        count(s, |k| k.implied_nak_seq_err += 1);
    }
    retry_from(s, c, req, psn);
}

/// Marks the outstanding WQE holding `psn` (or the oldest outstanding one) failed.
fn fail_at(req: &mut ReqState, psn: u32, synd: CqeSyndrome) {
    let idx = req
        .wqes
        .iter()
        .position(|w| {
            w.started
                && !w.done
                && w.error.is_none()
                && w.opcode != WqeOpcode::NOP
                && psn_diff(w.last_psn, psn) >= 0
        })
        .or_else(|| {
            req.wqes
                .iter()
                .position(|w| w.started && !w.done && w.error.is_none())
        });
    if let Some(w) = idx.and_then(|i| req.wqes.get_mut(i)) {
        w.error = Some(synd);
    }
    req.ack_deadline = None;
    req.rnr_wait = None;
}

/// ACKNOWLEDGE: an ACK, an RNR NAK or a NAK.
fn on_ack(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState, aeth: &Aeth, psn: u32) {
    match aeth.syndrome().kind() {
        AethKind::Ack(_) => {
            if let Acked::Lost(p) = ack_through(s, c, req, psn) {
                implied_nak(s, c, req, p);
            }
        }
        AethKind::RnrNak(code) => {
            // The NAK acknowledges every PSN before the one refused.
            if let Acked::Lost(p) = ack_through(s, c, req, psn_add(psn, 0x00ff_ffff)) {
                implied_nak(s, c, req, p);
                return;
            }
            count(s, |k| k.rnr_nak_received += 1);
            if use_retry(&mut req.rnr_retries, c.rnr_retry) {
                req.ack_deadline = None;
                req.rnr_wait = Some((s.io.now.saturating_add(rnr_timer_ns(code)), psn));
            } else {
                count(s, |k| k.rnr_nak_retry_err += 1);
                fail_at(req, psn, CqeSyndrome::RNR_RETRY_EXC_ERR);
            }
        }
        AethKind::Nak(code) => {
            count(s, |k| k.naks_received += 1);
            if let Acked::Lost(p) = ack_through(s, c, req, psn_add(psn, 0x00ff_ffff)) {
                implied_nak(s, c, req, p);
                return;
            }
            match code {
                0 => {
                    // PSN sequence error: the responder expects `psn`; go back to it
                    // (rxe: COMPST_ERROR_RETRY, which uses a retry).
                    count(s, |k| k.packet_seq_err += 1);
                    retry_from(s, c, req, psn);
                }
                1 => {
                    count(s, |k| k.req_remote_invalid_request += 1);
                    fail_at(req, psn, CqeSyndrome::REMOTE_INVAL_REQ_ERR);
                }
                2 => {
                    count(s, |k| k.req_remote_access_errors += 1);
                    fail_at(req, psn, CqeSyndrome::REMOTE_ACCESS_ERR);
                }
                3 => {
                    count(s, |k| k.req_remote_operation_error += 1);
                    fail_at(req, psn, CqeSyndrome::REMOTE_OP_ERR);
                }
                // Invalid RD request, or a reserved code: not meaningful on RC.
                _ => fail_at(req, psn, CqeSyndrome::BAD_RESP_ERR),
            }
        }
        AethKind::Reserved(_) => {}
    }
}

/// The oldest outstanding WQE, after the implicit acknowledgement of everything before `psn`.
/// `None` if nothing matches (the response is stale) or after a retry was started.
fn head_for(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState, psn: u32) -> Option<usize> {
    if let Acked::Lost(p) = ack_through(s, c, req, psn_add(psn, 0x00ff_ffff))
        && psn_diff(p, psn) < 0
    {
        implied_nak(s, c, req, p);
        return None;
    }
    req.wqes
        .iter()
        .position(|w| w.started && !w.done && w.error.is_none() && w.opcode != WqeOpcode::NOP)
}

/// A READ response packet: scatter at its offset, complete on LAST/ONLY.
fn on_read_response(
    s: &mut Sender<'_, '_>,
    c: &Ctx,
    req: &mut ReqState,
    pkt: &RocePacket<'_>,
    psn: u32,
) {
    let Some(i) = head_for(s, c, req, psn) else {
        return;
    };
    let Some(w) = req.wqes.get(i) else {
        return;
    };
    if w.opcode != WqeOpcode::RDMA_READ || !w.sent {
        return;
    }
    let expected = psn_add(w.first_psn, w.resp_pkts);
    let d = psn_diff(psn, expected);
    if d < 0 {
        return; // a duplicate of a response already taken
    }
    if d > 0 {
        // A response packet was lost (rxe: COMPST_ERROR_RETRY from the first missing PSN).
        implied_nak(s, c, req, expected);
        return;
    }
    let pos = pkt.info().position;
    let off = u64::from(w.resp_pkts) * u64::from(c.mtu);
    let n = pkt.payload().len() as u64;
    let remaining = u64::from(w.len).saturating_sub(off);
    let first_ok = matches!(pos, Position::First | Position::Only) == (w.resp_pkts == 0);
    let len_ok = match pos {
        Position::First | Position::Middle => n == u64::from(c.mtu) && n < remaining,
        Position::Last | Position::Only => n == remaining && n <= u64::from(c.mtu),
    };
    if !first_ok || !len_ok {
        // An opcode out of sequence or a length that does not fit the READ: the responder is
        // broken (rxe `check_ack` / `check_length` fail the WQE).
        fail_at(req, psn, CqeSyndrome::BAD_RESP_ERR);
        return;
    }
    let r = gather::scatter(s.mkeys, s.io.dma, c.pd, c.qpn, &w.sges, off, pkt.payload());
    if let Err(e) = r {
        fail_at(req, psn, e.report(s.io));
        return;
    }
    let last = matches!(pos, Position::Last | Position::Only);
    let last_psn = w.last_psn;
    if let Some(w) = req.wqes.get_mut(i) {
        w.resp_pkts += 1;
        if last {
            w.done = true;
        }
    }
    // Progress: the READ's packets up to this one are acknowledged.
    let _ = ack_through(s, c, req, if last { last_psn } else { psn });
    if psn_diff(psn_add(psn, 1), req.una) > 0 {
        req.una = psn_add(psn, 1);
    }
}

/// ATOMIC ACKNOWLEDGE: the original value goes to the atomic's local buffer.
///
/// The 8 bytes are written as they are on the wire, big-endian: the device's default
/// `atomic_req_8B_endianness_mode` is big-endian (kernel `mlx5_ifc.h` atomic caps;
/// `mlx5_ib` `get_atomic_caps` advertises host-endian atomics only when the firmware was
/// switched to host endianness, which this device does not model).
fn on_atomic_ack(
    s: &mut Sender<'_, '_>,
    c: &Ctx,
    req: &mut ReqState,
    pkt: &RocePacket<'_>,
    psn: u32,
) {
    let (Some(_aeth), Some(ack)) = (pkt.aeth(), pkt.atomic_ack_eth()) else {
        return;
    };
    let Some(i) = head_for(s, c, req, psn) else {
        return;
    };
    let Some(w) = req.wqes.get(i) else {
        return;
    };
    if !matches!(w.opcode, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA)
        || !w.sent
        || w.first_psn != psn
    {
        return;
    }
    let orig = ack.orig().to_be_bytes();
    let r = gather::scatter(s.mkeys, s.io.dma, c.pd, c.qpn, &w.sges, 0, &orig);
    if let Err(e) = r {
        fail_at(req, psn, e.report(s.io));
        return;
    }
    if let Some(w) = req.wqes.get_mut(i) {
        w.done = true;
    }
    let _ = ack_through(s, c, req, psn);
}
