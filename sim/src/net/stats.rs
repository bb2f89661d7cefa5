//! What the simulated network counts, per port and priority, and the queue-depth time series.
//!
//! Owns: [`PrioStats`] (one egress queue's counters: packets and bytes in and out, ECN
//! marks, drops by cause, PFC pauses sent and received, time paused, deepest queue),
//! [`PortStats`] (a port's eight), [`PortRef`] (how a report names a port), [`Sample`] (the
//! queued bytes of every port and priority at one instant of virtual time). Must not: decide
//! anything (the counters are written by `net::Network` only, read by tests and reports).
//!
//! A NIC's egress and a switch's egress port keep the same counters; for a NIC, `dequeued_*`
//! is what it put on its link and `xoff_sent` stays 0. `xoff_sent`/`xon_sent` are counted on
//! the port a switch received the traffic on (the one whose upstream it pauses);
//! `pauses_received` and `paused_ns` on the egress that was paused. [`FlowStats`] counts what
//! each (source, destination) NIC pair delivered, for per-flow rates.
//!
//! Sources: the counter names follow the switch counters of IEEE 802.1Qbb
//! (`pfc_pause_tx`/`rx`) and RFC 3168 (CE marks), spelled out.

use super::topology::Node;
use crate::cong::PRIOS;

/// One (port, priority)'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrioStats {
    /// Packets put into the egress queue.
    pub enqueued_packets: u64,
    /// Bytes put into the egress queue.
    pub enqueued_bytes: u64,
    /// Packets taken out to be sent on the link.
    pub dequeued_packets: u64,
    /// Bytes taken out to be sent on the link.
    pub dequeued_bytes: u64,
    /// ECN-capable packets marked CE at enqueue.
    pub ecn_marked: u64,
    /// Lossy packets dropped because the queue or the shared buffer was full.
    pub drop_tail: u64,
    /// Lossless packets dropped because the ingress headroom was full (counted at the
    /// egress queue they were bound for).
    pub drop_headroom: u64,
    /// Packets bigger than the link's MTU, dropped before entering it.
    pub drop_mtu: u64,
    /// XOFF frames sent upstream for traffic received on this port.
    pub xoff_sent: u64,
    /// XON frames sent upstream for traffic received on this port.
    pub xon_sent: u64,
    /// XOFF frames that paused this egress.
    pub pauses_received: u64,
    /// Virtual time this egress spent paused, in ns (up to the last event processed).
    pub paused_ns: u64,
    /// The most bytes the queue held.
    pub max_queue_bytes: u64,
}

/// A port's counters, by priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Per priority (index = priority).
    pub prio: [PrioStats; PRIOS],
}

impl PortStats {
    /// The sum over priorities.
    pub fn total(&self) -> PrioStats {
        let mut t = PrioStats::default();
        for p in &self.prio {
            t.enqueued_packets += p.enqueued_packets;
            t.enqueued_bytes += p.enqueued_bytes;
            t.dequeued_packets += p.dequeued_packets;
            t.dequeued_bytes += p.dequeued_bytes;
            t.ecn_marked += p.ecn_marked;
            t.drop_tail += p.drop_tail;
            t.drop_headroom += p.drop_headroom;
            t.drop_mtu += p.drop_mtu;
            t.xoff_sent += p.xoff_sent;
            t.xon_sent += p.xon_sent;
            t.pauses_received += p.pauses_received;
            t.paused_ns += p.paused_ns;
            t.max_queue_bytes = t.max_queue_bytes.max(p.max_queue_bytes);
        }
        t
    }
}

/// A port, as a report names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortRef {
    /// The egress of NIC (world device id) `0`.
    Nic(usize),
    /// Port `port` of switch `switch` (ports numbered per switch in link order).
    Switch {
        /// The switch.
        switch: usize,
        /// The port.
        port: usize,
    },
}

impl PortRef {
    /// The node this port belongs to.
    pub fn node(self) -> Node {
        match self {
            Self::Nic(n) => Node::Nic(n),
            Self::Switch { switch, .. } => Node::Switch(switch),
        }
    }
}

/// What one (source NIC, destination NIC) pair delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Packets that reached the destination.
    pub packets: u64,
    /// Their bytes (IP packets).
    pub bytes: u64,
}

/// The queued bytes of every port at one instant: the state after every event at or before
/// `t_ns` that the network had processed when the world reached `t_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Virtual time (a multiple of the sampling interval).
    pub t_ns: u64,
    /// Per port (in [`super::Network::ports`] order), the bytes queued per priority.
    pub queued: Vec<[u64; PRIOS]>,
    /// What each (source, destination) NIC pair had delivered by then.
    pub flows: std::collections::BTreeMap<(usize, usize), FlowStats>,
}
