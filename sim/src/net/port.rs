//! One end of a link: its egress (eight FIFOs served in strict priority, pausable per
//! priority) and, on a switch, the PFC accounting of what came in on it.
//!
//! Owns: [`Port`], [`Queued`] (a packet waiting in, or travelling from, an egress) and the
//! serialisation time of a packet at a link rate ([`ser_ns`]). Must not: route, mark, drop or
//! schedule (that is `net::Network`, which owns every port and the event queue); a port only
//! keeps its queues, its pause state and its counters consistent.
//!
//! Strict priority: the highest non-empty, unpaused priority sends next (7 first). A pause
//! stops a priority from starting a packet; one already on the wire finishes (802.1Qbb).
//!
//! Sources: IEEE 802.1Qbb §36 (per-priority pause of a transmit queue), IEEE 802.1Q §8.6.8
//! (strict priority transmission selection).

use std::collections::VecDeque;

use super::stats::{PortRef, PortStats};
use super::topology::LinkSpec;
use crate::cong::PRIOS;

/// A packet in the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    /// The IP packet.
    pub pkt: Vec<u8>,
    /// The sending NIC (world device id).
    pub src: usize,
    /// The destination NIC (world device id).
    pub dst: usize,
    /// Its priority (`cong::prio_of_tclass` of its traffic class).
    pub prio: u8,
    /// The switch port it came in on, while it sits in a switch with PFC on its priority
    /// (its bytes count against that port's ingress accounting until it leaves).
    pub ingress: Option<usize>,
}

/// One end of a link.
#[derive(Debug)]
pub(crate) struct Port {
    /// Who owns it.
    pub at: PortRef,
    /// The port at the other end of the link (index into the network's ports).
    pub peer: usize,
    /// The link.
    pub link: LinkSpec,
    /// Per priority FIFO.
    pub queues: [VecDeque<Queued>; PRIOS],
    /// Bytes queued per priority.
    pub queued: [u64; PRIOS],
    /// A packet is on the wire (until its serialisation ends).
    pub busy: bool,
    /// Per priority: paused since (virtual ns).
    pub paused: [Option<u64>; PRIOS],
    /// PFC: bytes received on this port per priority still inside the switch.
    pub ingress_bytes: [u64; PRIOS],
    /// PFC: an XOFF was sent upstream for this priority and no XON since.
    pub xoff: [bool; PRIOS],
    /// Counters.
    pub stats: PortStats,
}

impl Port {
    /// A port of `at` on `link`, its peer not known yet.
    pub fn new(at: PortRef, link: LinkSpec) -> Self {
        Self {
            at,
            peer: usize::MAX,
            link,
            queues: Default::default(),
            queued: [0; PRIOS],
            busy: false,
            paused: [None; PRIOS],
            ingress_bytes: [0; PRIOS],
            xoff: [false; PRIOS],
            stats: PortStats::default(),
        }
    }

    /// Appends `q` to its priority's FIFO and counts it.
    pub fn enqueue(&mut self, q: Queued) {
        let p = usize::from(q.prio) % PRIOS;
        let len = q.pkt.len() as u64;
        self.queued[p] += len;
        let s = &mut self.stats.prio[p];
        s.enqueued_packets += 1;
        s.enqueued_bytes += len;
        s.max_queue_bytes = s.max_queue_bytes.max(self.queued[p]);
        self.queues[p].push_back(q);
    }

    /// Takes the packet to send next: the head of the highest non-empty, unpaused priority,
    /// if the wire is free.
    pub fn dequeue(&mut self) -> Option<Queued> {
        if self.busy {
            return None;
        }
        let p = (0..PRIOS)
            .rev()
            .find(|&p| self.paused[p].is_none() && !self.queues[p].is_empty())?;
        let q = self.queues[p].pop_front()?;
        let len = q.pkt.len() as u64;
        self.queued[p] = self.queued[p].saturating_sub(len);
        let s = &mut self.stats.prio[p];
        s.dequeued_packets += 1;
        s.dequeued_bytes += len;
        Some(q)
    }

    /// Applies a pause (`on`) or resume for `prio` at `now`.
    pub fn pause(&mut self, prio: u8, on: bool, now: u64) {
        let p = usize::from(prio) % PRIOS;
        if on {
            if self.paused[p].is_none() {
                self.paused[p] = Some(now);
                self.stats.prio[p].pauses_received += 1;
            }
        } else if let Some(since) = self.paused[p].take() {
            self.stats.prio[p].paused_ns += now.saturating_sub(since);
        }
    }

    /// The counters, with a pause still going counted up to `now`.
    pub fn stats_at(&self, now: u64) -> PortStats {
        let mut s = self.stats;
        for (p, since) in self.paused.iter().enumerate() {
            if let Some(since) = since {
                s.prio[p].paused_ns += now.saturating_sub(*since);
            }
        }
        s
    }
}

/// How long a `len`-byte packet occupies a link of `rate_bps`, in ns (rounded up).
pub(crate) fn ser_ns(len: usize, rate_bps: u64) -> u64 {
    let bits = len as u128 * 8 * 1_000_000_000;
    let rate = u128::from(rate_bps.max(1));
    u64::try_from(bits.div_ceil(rate)).unwrap_or(u64::MAX)
}
