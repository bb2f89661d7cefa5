//! The reaction point's per-QP part: the DCQCN state and the pacer that holds a rate-limited
//! QP's packets to its current rate.
//!
//! Owns: [`QpRp`] (kept in the QP's requester state) and its three uses: the gate before a
//! packet ([`QpRp::gate`]), the account after it ([`QpRp::sent`]) and a CNP
//! ([`QpRp::on_cnp`]). Must not: parse CNPs or decide whether the RP is on (the transport's
//! CNP dispatch does, from `Cong::status`), or send (the requester asks the gate).
//!
//! Pacing: after a packet of B bytes at rate RC Mb/s the next may leave at
//! `max(now, next) + B·8/RC` (B·8000/RC ns, rounded up), so the long-run rate is RC whatever
//! the packet sizes. A QP whose packet is held records when it may go ([`QpRp::wait`]); the
//! device's deadlines include it. Unlimited QPs pass the gate at once and send as before.
//!
//! Sources: Zhu et al., SIGCOMM 2015 (the RP's rate limiter per flow); mlx5 paces per QP in
//! hardware, with the rate the RP sets (NVIDIA DOCA "DCQCN CC parameters").

use super::RpParams;
use super::dcqcn::{Dcqcn, RateInfo, max_rate};

/// One QP's reaction-point state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpRp {
    /// The DCQCN rate state.
    dcqcn: Dcqcn,
    /// When the next packet may leave (ns), while limited.
    next_send: u64,
    /// The gate held a packet back until then (ns).
    wait: Option<u64>,
}

impl QpRp {
    /// True while the QP is rate limited (it must send packet by packet, no bursts).
    pub fn limited(&self) -> bool {
        self.dcqcn.limited()
    }

    /// When a packet held back by the gate may go (ns), if one is.
    pub fn wait(&self) -> Option<u64> {
        self.wait
    }

    /// Clears the wait once it is over (the timer scan lets the QP send again).
    pub(crate) fn end_wait(&mut self, now: u64) -> bool {
        if self.wait.is_some_and(|t| t <= now) {
            self.wait = None;
            return true;
        }
        false
    }

    /// Whether the QP may send a packet at `now` (`line_mbps` the port's line rate); if
    /// not, remembers when it may ([`QpRp::wait`]).
    pub fn gate(&mut self, p: &RpParams, line_mbps: u64, now: u64) -> bool {
        let max = max_rate(p, line_mbps);
        self.dcqcn.advance(p, max, now);
        if !self.dcqcn.limited() || self.next_send <= now {
            self.wait = None;
            return true;
        }
        self.wait = Some(self.next_send);
        false
    }

    /// A packet of `bytes` (from the IP header) left at `now`.
    pub fn sent(&mut self, p: &RpParams, line_mbps: u64, bytes: u64, now: u64) {
        let max = max_rate(p, line_mbps);
        if let Some(rate) = self.dcqcn.rate_mbps() {
            let gap = (bytes * 8000).div_ceil(rate.max(1));
            self.next_send = self.next_send.max(now) + gap;
        }
        self.dcqcn.on_sent(p, max, bytes, now);
    }

    /// A CNP for this QP arrived at `now` and the RP is on: DCQCN reacts.
    pub fn on_cnp(&mut self, p: &RpParams, line_mbps: u64, now: u64) {
        let max = max_rate(p, line_mbps);
        self.dcqcn.on_cnp(p, max, now);
    }

    /// The rate state as of `now` (timer increases and alpha decay applied to a copy).
    pub fn info(&self, p: &RpParams, line_mbps: u64, now: u64) -> RateInfo {
        let max = max_rate(p, line_mbps);
        let mut d = self.dcqcn;
        d.advance(p, max, now);
        d.info(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limited_qp_is_paced_at_its_current_rate() {
        let p = RpParams::default();
        let mut r = QpRp::default();
        assert!(r.gate(&p, 100_000, 0));
        r.sent(&p, 100_000, 4096, 0);
        assert!(r.gate(&p, 100_000, 0), "unlimited: no pacing");
        r.on_cnp(&p, 100_000, 1000);
        let rate = r.info(&p, 100_000, 1000).current_mbps;
        assert_eq!(rate, 50_049);
        assert!(r.gate(&p, 100_000, 1000));
        r.sent(&p, 100_000, 1000, 1000);
        let gap = (1000u64 * 8000).div_ceil(rate);
        assert!(!r.gate(&p, 100_000, 1000 + gap - 1));
        assert_eq!(r.wait(), Some(1000 + gap));
        assert!(r.gate(&p, 100_000, 1000 + gap));
        assert_eq!(r.wait(), None);
    }
}
