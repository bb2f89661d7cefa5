//! What a simulated network is made of: links, switches, and how NICs and switches are joined.
//!
//! Owns: [`LinkSpec`] (rate, propagation delay, MTU), [`SwitchSpec`] (shared buffer, per
//! queue limit, per priority ECN/RED and PFC settings: [`RedConfig`], [`PfcConfig`]),
//! [`Topology`] (switches and the links between them and the world's NICs, with builders for
//! one switch and for a leaf/spine pair of levels) and [`TopologyError`]. Must not: hold any
//! run-time state (queues, clocks, counters live in `net::Network`), or know about devices
//! beyond their world ids.
//!
//! Units: rates in bit/s, times in ns of virtual time, sizes in bytes. A link's MTU is the
//! largest IP packet (IP header to ICRC) it carries; the serialisation time of a packet counts
//! those bytes only (no Ethernet header, preamble or inter-frame gap: the sim's wire has none).
//!
//! Sources: IEEE 802.1Qbb (PFC: XOFF/XON thresholds and headroom), RFC 3168 (ECN codepoints),
//! Floyd and Jacobson, "Random Early Detection Gateways" (RED's linear marking ramp), Zhu et
//! al., SIGCOMM 2015 (DCQCN's Kmin/Kmax/Pmax use of RED).

use crate::cong::PRIOS;

/// The largest NIC (world device) id a topology may name: the network keeps a table by id.
pub const MAX_NIC_ID: usize = 1 << 16;

/// One link: both directions have the same rate, delay and MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// Line rate in bit/s (> 0): a packet of `len` bytes occupies the link `len * 8 / rate`.
    pub rate_bps: u64,
    /// One-way propagation delay in ns.
    pub prop_ns: u64,
    /// The largest IP packet the link carries, in bytes; a bigger one is dropped at the hop
    /// about to send it (RoCEv2 sets DF: no fragmentation).
    pub mtu: u32,
}

impl Default for LinkSpec {
    /// 100 Gb/s, 1 µs, a 4096-byte RoCE MTU plus headers.
    fn default() -> Self {
        Self {
            rate_bps: 100_000_000_000,
            prop_ns: 1_000,
            mtu: 4_200,
        }
    }
}

/// RED marking of ECN-capable packets at enqueue to an egress queue of one priority: no
/// mark while the queue holds fewer than `kmin_bytes`, probability rising linearly to `pmax`
/// at `kmax_bytes`, every ECN-capable packet marked at or above `kmax_bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedConfig {
    /// Queue depth where marking starts.
    pub kmin_bytes: u64,
    /// Queue depth from which every ECN-capable packet is marked (> `kmin_bytes`).
    pub kmax_bytes: u64,
    /// Marking probability just below `kmax_bytes`, in `0.0..=1.0`.
    pub pmax: f64,
}

/// PFC for one priority, accounted per ingress port: the bytes that came in on the port at
/// this priority and still sit in the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcConfig {
    /// Reaching this many bytes sends XOFF to the upstream sender of the port.
    pub xoff_bytes: u64,
    /// Falling to this many bytes (or fewer) after an XOFF sends XON (<= `xoff_bytes`). An
    /// XOFF holds the upstream until the XON (the pause quanta of 802.1Qbb are not timed:
    /// a real switch refreshes its pause for as long as it stays above XON).
    pub xon_bytes: u64,
    /// Bytes admitted above `xoff_bytes` (in flight while the pause travels); a packet that
    /// does not fit is dropped as a headroom drop.
    pub headroom_bytes: u64,
}

/// What one priority of a switch does beyond drop-tail.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PrioSpec {
    /// ECN marking at the egress queues of this priority.
    pub red: Option<RedConfig>,
    /// PFC (lossless) for this priority; `None`: lossy (drop-tail).
    pub pfc: Option<PfcConfig>,
}

/// One switch: a shared packet buffer and, per egress port, one FIFO per priority served in
/// strict priority order (7 first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwitchSpec {
    /// The shared buffer in bytes: a lossy packet that does not fit is tail-dropped. Lossless
    /// (PFC) packets are limited by their ingress headroom instead.
    pub buffer_bytes: u64,
    /// The most bytes one egress queue (port, priority) may hold for lossy packets
    /// (`None`: only the shared buffer limits it).
    pub queue_limit_bytes: Option<u64>,
    /// Per priority ECN and PFC settings.
    pub prios: [PrioSpec; PRIOS],
}

impl Default for SwitchSpec {
    /// 12 MiB shared, no per-queue limit, every priority lossy without ECN.
    fn default() -> Self {
        Self {
            buffer_bytes: 12 << 20,
            queue_limit_bytes: None,
            prios: [PrioSpec::default(); PRIOS],
        }
    }
}

impl SwitchSpec {
    /// This spec with ECN marking `red` on priority `prio` (ignored if `prio` >= 8).
    pub fn with_red(mut self, prio: u8, red: RedConfig) -> Self {
        if let Some(p) = self.prios.get_mut(usize::from(prio)) {
            p.red = Some(red);
        }
        self
    }

    /// This spec with PFC `pfc` on priority `prio` (ignored if `prio` >= 8).
    pub fn with_pfc(mut self, prio: u8, pfc: PfcConfig) -> Self {
        if let Some(p) = self.prios.get_mut(usize::from(prio)) {
            p.pfc = Some(pfc);
        }
        self
    }
}

/// One end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    /// A NIC: the world's device id.
    Nic(usize),
    /// A switch: its index in the topology ([`Topology::add_switch`]).
    Switch(usize),
}

/// A topology the world can be given ([`crate::World::set_topology`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Topology {
    pub(crate) switches: Vec<SwitchSpec>,
    pub(crate) links: Vec<(Node, Node, LinkSpec)>,
}

/// A topology that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// A link names a switch the topology does not have.
    #[error(
        "building the network: link {link} names switch {switch}, but only {have} exist; add it first with Topology::add_switch"
    )]
    NoSuchSwitch {
        /// The link's index.
        link: usize,
        /// The switch it names.
        switch: usize,
        /// Switches there are.
        have: usize,
    },
    /// A NIC has more than one link (a NIC has one port on the network).
    #[error(
        "building the network: NIC {nic} is on two links ({first} and {second}); give each NIC exactly one link"
    )]
    NicTwice {
        /// The device id.
        nic: usize,
        /// The first link.
        first: usize,
        /// The second link.
        second: usize,
    },
    /// A link names a NIC id above [`MAX_NIC_ID`].
    #[error(
        "building the network: link {link} names NIC {nic}, above the largest id {MAX_NIC_ID}; NICs are world device ids, numbered from 0"
    )]
    NicIdTooLarge {
        /// The link's index.
        link: usize,
        /// The id it names.
        nic: usize,
    },
    /// A link joins two NICs, or a node to itself.
    #[error(
        "building the network: link {link} joins {a:?} to {b:?}; a link joins a NIC to a switch or two different switches"
    )]
    BadEnds {
        /// The link's index.
        link: usize,
        /// One end.
        a: Node,
        /// The other end.
        b: Node,
    },
    /// A link with rate 0 or MTU 0.
    #[error(
        "building the network: link {link} has rate {rate_bps} bit/s and MTU {mtu} bytes; both must be > 0"
    )]
    BadLink {
        /// The link's index.
        link: usize,
        /// Its rate.
        rate_bps: u64,
        /// Its MTU.
        mtu: u32,
    },
    /// A RED or PFC setting whose thresholds are out of order.
    #[error("building the network: switch {switch} priority {prio}: {what}; fix the thresholds")]
    BadPrio {
        /// The switch.
        switch: usize,
        /// The priority.
        prio: usize,
        /// What is wrong.
        what: &'static str,
    },
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a switch; returns its index.
    pub fn add_switch(&mut self, spec: SwitchSpec) -> usize {
        self.switches.push(spec);
        self.switches.len() - 1
    }

    /// Joins `a` and `b` by a link. Switch ports are numbered in the order their links are
    /// added (from 0, per switch).
    pub fn connect(&mut self, a: Node, b: Node, link: LinkSpec) -> &mut Self {
        self.links.push((a, b, link));
        self
    }

    /// NICs `0..nics` (world device ids) on one switch (switch 0), NIC `i` on port `i`.
    pub fn single_switch(nics: usize, link: LinkSpec, switch: SwitchSpec) -> Self {
        let mut t = Self::new();
        let s = t.add_switch(switch);
        for n in 0..nics {
            t.connect(Node::Nic(n), Node::Switch(s), link);
        }
        t
    }

    /// Two levels: `leaves` leaf switches (switches `0..leaves`) with `per_leaf` NICs each
    /// (NIC `i` on leaf `i / per_leaf`, port `i % per_leaf`) and one spine (switch `leaves`)
    /// joined to every leaf by `uplink` (the leaf's port `per_leaf`, the spine's port = the
    /// leaf's index). Every switch gets `switch`.
    pub fn two_level(
        leaves: usize,
        per_leaf: usize,
        host_link: LinkSpec,
        uplink: LinkSpec,
        switch: SwitchSpec,
    ) -> Self {
        let mut t = Self::new();
        for _ in 0..leaves {
            t.add_switch(switch);
        }
        let spine = t.add_switch(switch);
        for n in 0..leaves.saturating_mul(per_leaf) {
            t.connect(Node::Nic(n), Node::Switch(n / per_leaf.max(1)), host_link);
        }
        for l in 0..leaves {
            t.connect(Node::Switch(l), Node::Switch(spine), uplink);
        }
        t
    }

    /// The switches, by index.
    pub fn switches(&self) -> &[SwitchSpec] {
        &self.switches
    }

    /// Checks that the topology can be built.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let have = self.switches.len();
        let mut nic_link = std::collections::BTreeMap::new();
        for (i, &(a, b, l)) in self.links.iter().enumerate() {
            for n in [a, b] {
                match n {
                    Node::Switch(s) if s >= have => {
                        return Err(TopologyError::NoSuchSwitch {
                            link: i,
                            switch: s,
                            have,
                        });
                    }
                    Node::Nic(d) if d > MAX_NIC_ID => {
                        return Err(TopologyError::NicIdTooLarge { link: i, nic: d });
                    }
                    Node::Nic(d) => {
                        if let Some(&first) = nic_link.get(&d) {
                            return Err(TopologyError::NicTwice {
                                nic: d,
                                first,
                                second: i,
                            });
                        }
                        nic_link.insert(d, i);
                    }
                    Node::Switch(_) => {}
                }
            }
            if a == b || matches!((a, b), (Node::Nic(_), Node::Nic(_))) {
                return Err(TopologyError::BadEnds { link: i, a, b });
            }
            if l.rate_bps == 0 || l.mtu == 0 {
                return Err(TopologyError::BadLink {
                    link: i,
                    rate_bps: l.rate_bps,
                    mtu: l.mtu,
                });
            }
        }
        for (s, spec) in self.switches.iter().enumerate() {
            for (prio, p) in spec.prios.iter().enumerate() {
                let bad = |what| TopologyError::BadPrio {
                    switch: s,
                    prio,
                    what,
                };
                if let Some(r) = p.red {
                    if r.kmax_bytes <= r.kmin_bytes {
                        return Err(bad("RED needs kmin_bytes < kmax_bytes"));
                    }
                    if !(0.0..=1.0).contains(&r.pmax) {
                        return Err(bad("RED needs pmax in 0.0..=1.0"));
                    }
                }
                if let Some(f) = p.pfc
                    && f.xon_bytes > f.xoff_bytes
                {
                    return Err(bad("PFC needs xon_bytes <= xoff_bytes"));
                }
            }
        }
        Ok(())
    }
}
