//! The requester's per-QP state: the fetched WQEs with their PSN ranges, the next PSN, the
//! oldest unacknowledged PSN, the retry counters and the timers.
//!
//! Owns: [`ReqState`]. Must not: act on it (that is `transport::requester` and
//! `transport::completer`).

use std::collections::VecDeque;

use crate::engine::wqe::SendWqe;

/// Requester state of a QP.
#[derive(Debug, Clone, Default)]
pub struct ReqState {
    /// Next PSN to send.
    pub(crate) psn: u32,
    /// One past the highest PSN ever sent (packets below it are retransmissions).
    pub(crate) max_psn: u32,
    /// Oldest unacknowledged PSN.
    pub(crate) una: u32,
    /// Fetched WQEs not yet completed, in SQ order.
    pub(crate) wqes: VecDeque<SendWqe>,
    /// Index in `wqes` of the WQE being sent.
    pub(crate) cur: usize,
    /// Packets of `wqes[cur]` already sent (READ: response PSNs to skip).
    pub(crate) cur_pkt: u32,
    /// Packets sent since the last one with AckReq.
    pub(crate) noack: u32,
    /// Transport retries used since the last progress.
    pub(crate) retries: u8,
    /// RNR retries used since the last progress.
    pub(crate) rnr_retries: u8,
    /// When the retransmit timer fires (device ns).
    pub(crate) ack_deadline: Option<u64>,
    /// An RNR wait: when it ends, and the PSN to resend from.
    pub(crate) rnr_wait: Option<(u64, u32)>,
    /// Set on entry to RTS: WQEs posted before (in INIT/RTR) are still to be fetched.
    pub(crate) fresh: bool,
    /// A go-back-N retry is under way and nothing was acknowledged since: further sequence
    /// NAKs and implied NAKs start no new retry, only a timeout does (rxe `rxe_completer`
    /// `comp.started_retry`). Without it every duplicate ACK the retry provokes would start
    /// another full retry, and the retransmissions grow without bound.
    pub(crate) retrying: bool,
    /// The reaction point's rate state and pacer (`cong::rp`).
    pub(crate) rp: crate::cong::rp::QpRp,
}

impl ReqState {
    /// State for a QP entering RTS with first PSN `psn`.
    pub fn new(psn: u32) -> Self {
        let psn = psn & 0x00ff_ffff;
        Self {
            psn,
            max_psn: psn,
            una: psn,
            fresh: true,
            ..Self::default()
        }
    }

    /// The reaction point's state (rate, alpha, pacing).
    pub fn rp(&self) -> &crate::cong::rp::QpRp {
        &self.rp
    }

    /// The next PSN this QP will send (QUERY_QP `next_send_psn`).
    pub fn psn(&self) -> u32 {
        self.psn
    }

    /// Forgets everything in flight (the WQEs were flushed); the PSN stays.
    pub(crate) fn reset_after_flush(&mut self) {
        self.wqes.clear();
        self.cur = 0;
        self.cur_pkt = 0;
        self.noack = 0;
        self.ack_deadline = None;
        self.rnr_wait = None;
        self.retrying = false;
        self.una = self.psn;
        self.max_psn = self.psn;
    }

    /// True while some fetched WQE has started and not yet completed: a message an SQ drain
    /// waits for.
    pub(crate) fn in_progress(&self) -> bool {
        self.wqes.iter().any(|w| w.started)
    }

    /// True while some WQE has packets out and no answer yet.
    pub(crate) fn outstanding(&self) -> bool {
        self.wqes
            .iter()
            .any(|w| w.started && !w.done && w.error.is_none())
    }
}
