//! The requester's timers: the retransmit timer, the RNR wait and the pacer's wait of a
//! rate-limited QP (`cong::rp`), and what their expiry does.
//!
//! Owns: [`run_timers`], [`timer_due`], [`next_deadline`], [`rnr_timer_ns`]. Must not: send
//! anything itself (an expired timer rewinds or fails a WQE; `pump` sends).
//!
//! Sources: IBTA vol. 1 §9.7.6.1.3 (the ACK timeout, 4.096 µs × 2^`ack_timeout`), table 45
//! (the RNR NAK timer), rxe `rxe_comp.c` (`rxe_retransmit_timer`, the RNR path) and
//! `rxe_req.c` `req_retry`.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::syndrome::CqeSyndrome;

use super::{complete_ready, count, pump, rewind, use_retry, with_sender};
use crate::objects::Qp;
use crate::table::Table;
use crate::transport::state::DataPath;

/// IBTA table 45 (rxe `rnrnak_usec`): the RNR NAK timer, in µs, for each 5-bit code.
const RNR_USEC: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The RNR NAK timer for `code`, in ns.
pub(crate) fn rnr_timer_ns(code: u8) -> u64 {
    RNR_USEC[usize::from(code & 0x1f)] * 1000
}

/// Runs expired timers: RNR waits end (resend from the NAKed PSN), ACK timeouts retransmit
/// from the oldest unacknowledged PSN or, with no retry left, fail the oldest WQE with
/// TRANSPORT_RETRY_EXC_ERR.
pub(crate) fn run_timers(dp: &mut DataPath<'_>) -> bool {
    let now = dp.io.now;
    let due: Vec<u32> = dp
        .objs
        .qps
        .iter()
        .filter(|(_, qp)| timer_due(qp, now))
        .map(|(n, _)| n)
        .collect();
    let mut any = false;
    for qpn in due {
        let timed = with_sender(dp, qpn, |s, c, req| {
            // A paced packet's time has come: `pump` below sends it.
            req.rp.end_wait(now);
            if let Some((t, psn)) = req.rnr_wait
                && t <= now
            {
                req.rnr_wait = None;
                rewind(req, psn);
            }
            if req.ack_deadline.is_some_and(|t| t <= now) {
                req.ack_deadline = None;
                if req.outstanding() && req.rnr_wait.is_none() {
                    count(s, |k| k.local_ack_timeout_err += 1);
                    if use_retry(&mut req.retries, c.retry_count) {
                        count(s, |k| k.completer_retry_err += 1);
                        req.retrying = true;
                        let una = req.una;
                        rewind(req, una);
                    } else {
                        count(s, |k| k.retry_exceeded_err += 1);
                        if let Some(w) = req
                            .wqes
                            .iter_mut()
                            .find(|w| w.started && !w.done && w.error.is_none())
                        {
                            w.error = Some(CqeSyndrome::TRANSPORT_RETRY_EXC_ERR);
                        }
                    }
                }
            }
            complete_ready(s, req)
        });
        let Some(to_err) = timed else {
            continue;
        };
        any = true;
        if to_err {
            dp.set_qp_state(qpn, QpState::Err);
        }
        pump(dp, qpn);
    }
    any
}

/// Whether `qp` has a retransmit or RNR timer expired by `now` (what `run_timers` acts on).
pub(crate) fn timer_due(qp: &Qp, now: u64) -> bool {
    qp.req.rnr_wait.is_some_and(|(t, _)| t <= now)
        || qp.req.ack_deadline.is_some_and(|t| t <= now)
        || qp.req.rp.wait().is_some_and(|t| t <= now)
}

/// The earliest pending timer.
#[inline]
pub(crate) fn next_deadline(qps: &Table<Qp>) -> Option<u64> {
    // One pass, no iterator chains per QP: every run to idle of an inline doorbell asks.
    let mut next = u64::MAX;
    let mut any = false;
    for (_, qp) in qps.iter() {
        if let Some(t) = qp.req.ack_deadline {
            next = next.min(t);
            any = true;
        }
        if let Some((t, _)) = qp.req.rnr_wait {
            next = next.min(t);
            any = true;
        }
        if let Some(t) = qp.req.rp.wait() {
            next = next.min(t);
            any = true;
        }
    }
    any.then_some(next)
}
