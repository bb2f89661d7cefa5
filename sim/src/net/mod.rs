//! The switched network of the stepped world: NICs' egress queues, links with a rate and a
//! propagation delay, switches with a shared buffer, per-priority egress queues, drop-tail,
//! ECN marking by RED and PFC.
//!
//! Owns: [`Network`], built from a [`Topology`]: every port (`port`), the routes (shortest
//! path by hops, the lowest port on ties), and one time-ordered event queue (packet enters a
//! NIC's egress, serialisation ends, packet arrives at a port, pause/resume takes effect).
//! The world hands it every packet a device sends ([`Network::send`]) and takes back every
//! packet that reaches a NIC ([`Network::run`]). Must not: touch devices, read the wall clock,
//! or draw randomness from anything but the RNG it is lent (RED's draws).
//!
//! Order: events by (virtual time, scheduling order), so one seed gives one run. Queue depth
//! series: [`Network::set_sampling`] records every port's queued bytes at multiples of an
//! interval, computed as events are processed (no events of its own: a quiet network stays
//! quiet).
//!
//! Sources: see `topology` (802.1Qbb, RFC 3168, RED, DCQCN) and `ecn`.

pub mod ecn;
mod port;
pub mod stats;
pub mod topology;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod world_tests;

use std::collections::{BTreeMap, VecDeque};

use rand_core::RngCore;

use crate::cong::{PRIOS, prio_of_tclass};
use port::{Port, Queued, ser_ns};

/// Frames a NIC on a switched network may hold for its link before its requester waits
/// (`Device::set_tx_backpressure`): its send scheduler works a packet or two ahead.
const TX_GATE_FRAMES: usize = 2;
pub use stats::{FlowStats, PortRef, PortStats, PrioStats, Sample};
pub use topology::{
    LinkSpec, Node, PfcConfig, PrioSpec, RedConfig, SwitchSpec, Topology, TopologyError,
};

/// A switch's shared buffer use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Bytes in the buffer now.
    pub used_bytes: u64,
    /// The most it held.
    pub max_used_bytes: u64,
}

/// One switch's run-time state.
#[derive(Debug)]
struct Switch {
    spec: SwitchSpec,
    buffer: BufferStats,
    /// Egress port (network port index) toward each NIC, by device id.
    route: Vec<Option<usize>>,
}

/// Something due at a virtual time.
#[derive(Debug)]
enum Ev {
    /// A device sent a packet: it enters its NIC's egress.
    Send { src: usize, q: Queued },
    /// A port's serialisation of its current packet ends.
    TxDone(usize),
    /// A packet arrives at a port (from its peer).
    Arrive { port: usize, q: Queued },
    /// A pause (`on`) or resume of `prio` takes effect at egress `port`.
    Pause { port: usize, prio: u8, on: bool },
}

/// The switched network (see the module comment).
#[derive(Debug)]
pub struct Network {
    ports: Vec<Port>,
    /// The port of each NIC, by device id.
    nic_port: Vec<Option<usize>>,
    /// Per NIC (device id) and priority: bytes sent and not yet in its egress queue.
    entering: Vec<[u64; PRIOS]>,
    switches: Vec<Switch>,
    events: BTreeMap<(u64, u64), Ev>,
    seq: u64,
    now: u64,
    /// Packets sent and neither delivered nor dropped.
    packets: u64,
    unroutable: u64,
    sampling: Option<u64>,
    next_sample: u64,
    samples: Vec<Sample>,
    keep_dropped: bool,
    dropped: Vec<Vec<u8>>,
    /// What reached each destination from each source: (src, dst) → counts.
    flows: BTreeMap<(usize, usize), FlowStats>,
}

impl Network {
    /// Builds the network `t` describes, at virtual time `now`.
    pub fn new(t: &Topology, now: u64) -> Result<Self, TopologyError> {
        t.validate()?;
        let mut ports: Vec<Port> = Vec::new();
        let mut per_switch = vec![0usize; t.switches.len()];
        let mut nic_port: Vec<Option<usize>> = Vec::new();
        let mut make = |n: Node, l, ports: &mut Vec<Port>| {
            let at = match n {
                Node::Nic(d) => {
                    if nic_port.len() <= d {
                        nic_port.resize(d + 1, None);
                    }
                    nic_port[d] = Some(ports.len());
                    PortRef::Nic(d)
                }
                Node::Switch(s) => {
                    let port = per_switch[s];
                    per_switch[s] += 1;
                    PortRef::Switch { switch: s, port }
                }
            };
            ports.push(Port::new(at, l));
            ports.len() - 1
        };
        for &(a, b, l) in &t.links {
            let pa = make(a, l, &mut ports);
            let pb = make(b, l, &mut ports);
            ports[pa].peer = pb;
            ports[pb].peer = pa;
        }
        let switches = t
            .switches
            .iter()
            .enumerate()
            .map(|(s, spec)| Switch {
                spec: *spec,
                buffer: BufferStats::default(),
                route: routes_of(&ports, &nic_port, s),
            })
            .collect();
        Ok(Self {
            entering: vec![[0; PRIOS]; nic_port.len()],
            ports,
            nic_port,
            switches,
            events: BTreeMap::new(),
            seq: 0,
            now,
            packets: 0,
            unroutable: 0,
            sampling: None,
            next_sample: 0,
            samples: Vec::new(),
            keep_dropped: false,
            dropped: Vec::new(),
            flows: BTreeMap::new(),
        })
    }

    /// Device `src` sends `pkt` (an IP packet) to device `dst` at virtual time `at`: it
    /// enters `src`'s egress then. Returns false (and counts it unroutable) if either has no
    /// link or the packet is not IP.
    pub fn send(&mut self, at: u64, src: usize, dst: usize, pkt: Vec<u8>) -> bool {
        let linked = |d: usize| self.nic_port.get(d).copied().flatten().is_some();
        let Some(tc) = ecn::tclass(&pkt).filter(|_| linked(src) && linked(dst)) else {
            self.unroutable += 1;
            return false;
        };
        let q = Queued {
            pkt,
            src,
            dst,
            prio: prio_of_tclass(tc),
            ingress: None,
        };
        self.packets += 1;
        if let Some(e) = self.entering.get_mut(src) {
            e[usize::from(q.prio) % PRIOS] += q.pkt.len() as u64;
        }
        self.push(at.max(self.now), Ev::Send { src, q });
        true
    }

    /// Processes every event due by `now` (virtual ns), in order; appends each packet that
    /// reached a NIC to `out` as (device id, packet), in arrival order. RED draws from `rng`.
    /// Returns true if it processed any event.
    pub fn run(
        &mut self,
        now: u64,
        rng: &mut dyn RngCore,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) -> bool {
        let mut any = false;
        while let Some(entry) = self.events.first_entry() {
            let t = entry.key().0;
            if t > now {
                break;
            }
            let ev = entry.remove();
            self.sample_before(t);
            self.now = self.now.max(t);
            self.handle(ev, rng, out);
            any = true;
        }
        self.now = self.now.max(now);
        self.sample_before(now.saturating_add(1));
        any
    }

    /// The time of the next event, if any.
    pub fn next_event(&self) -> Option<u64> {
        self.events.keys().next().map(|&(t, _)| t)
    }

    /// Packets sent and neither delivered nor dropped yet.
    pub fn in_flight(&self) -> u64 {
        self.packets
    }

    /// Packets [`Network::send`] refused (no link for the source or destination, or not IP)
    /// or a switch found no route for.
    pub fn unroutable(&self) -> u64 {
        self.unroutable
    }

    /// Every port, in the order [`Sample::queued`] lists them.
    pub fn ports(&self) -> impl Iterator<Item = PortRef> + '_ {
        self.ports.iter().map(|p| p.at)
    }

    fn port_index(&self, r: PortRef) -> Option<usize> {
        self.ports.iter().position(|p| p.at == r)
    }

    /// A port's counters (pauses still going counted up to now), or `None` if there is no
    /// such port.
    pub fn port_stats(&self, r: PortRef) -> Option<PortStats> {
        let p = self.port_index(r)?;
        Some(self.ports[p].stats_at(self.now))
    }

    /// The MTU of the link port `r` sends on, or `None` if there is no such port.
    pub fn port_mtu(&self, r: PortRef) -> Option<u32> {
        Some(self.ports[self.port_index(r)?].link.mtu)
    }

    /// Bytes queued now at port `r`'s egress, per priority.
    pub fn queued_bytes(&self, r: PortRef) -> Option<[u64; PRIOS]> {
        self.port_index(r).map(|p| self.ports[p].queued)
    }

    /// Whether port `r`'s egress has priority `prio` paused now.
    pub fn is_paused(&self, r: PortRef, prio: u8) -> bool {
        self.port_index(r).is_some_and(|p| {
            self.ports[p]
                .paused
                .get(usize::from(prio))
                .is_some_and(Option::is_some)
        })
    }

    /// What reached NICs, per (source, destination) NIC pair, since the network was built
    /// (a flow's rate over an interval is the difference of two readings, or of two
    /// [`Sample::flows`]).
    pub fn flow_stats(&self) -> &BTreeMap<(usize, usize), FlowStats> {
        &self.flows
    }

    /// Gives device `d` (world device id `id`) its link's rate as line rate and its link's MTU
    /// as port 1's Ethernet MTU, if it is on this network.
    pub(crate) fn fit_nic(&self, id: usize, d: &mut crate::Device) {
        if let Some(link) = self
            .nic_port
            .get(id)
            .copied()
            .flatten()
            .map(|p| self.ports[p].link)
        {
            d.set_line_rate_mbps(link.rate_bps / 1_000_000);
            d.set_port_mtu(1, link.mtu);
            d.set_tx_backpressure(Some(TX_GATE_FRAMES));
        }
    }

    /// Bytes at NIC `src`'s egress waiting for the wire at priority `prio`: queued, or sent
    /// by the device and not yet queued (`World::collect_tx` takes a device's next frame only
    /// while this is 0: the NIC's send scheduler feeds the wire one packet ahead).
    pub(crate) fn nic_backlog(&self, src: usize, prio: u8) -> u64 {
        let p = usize::from(prio) % PRIOS;
        let queued = self
            .nic_port
            .get(src)
            .copied()
            .flatten()
            .map_or(0, |i| self.ports[i].queued[p]);
        queued + self.entering.get(src).map_or(0, |e| e[p])
    }

    /// The smallest MTU on the route from NIC `src` to NIC `dst` (the largest IP packet that
    /// crosses every link), or `None` if there is no route.
    pub fn path_mtu(&self, src: usize, dst: usize) -> Option<u32> {
        let mut p = self.nic_port.get(src).copied().flatten()?;
        let mut mtu = self.ports[p].link.mtu;
        // Every hop leaves by another port: more hops than ports is a loop.
        for _ in 0..self.ports.len() {
            let peer = self.ports.get(self.ports[p].peer)?;
            match peer.at {
                PortRef::Nic(d) => return (d == dst).then_some(mtu),
                PortRef::Switch { switch, .. } => {
                    p = self
                        .switches
                        .get(switch)?
                        .route
                        .get(dst)
                        .copied()
                        .flatten()?;
                    mtu = mtu.min(self.ports[p].link.mtu);
                }
            }
        }
        None
    }

    /// Switch `s`'s shared buffer use.
    pub fn buffer_stats(&self, s: usize) -> Option<BufferStats> {
        self.switches.get(s).map(|sw| sw.buffer)
    }

    /// Records every port's queued bytes at each multiple of `interval_ns` from now on
    /// (`None` or 0: stop). Samples accumulate until [`Network::take_samples`].
    pub fn set_sampling(&mut self, interval_ns: Option<u64>) {
        self.sampling = interval_ns.filter(|&i| i > 0);
        if let Some(i) = self.sampling {
            self.next_sample = self.now.div_ceil(i) * i;
        }
    }

    /// The samples recorded so far (emptied).
    pub fn take_samples(&mut self) -> Vec<Sample> {
        std::mem::take(&mut self.samples)
    }

    /// Keeps the packets the network drops, for [`Network::take_dropped`] (the pcap tee).
    pub fn set_keep_dropped(&mut self, on: bool) {
        self.keep_dropped = on;
    }

    /// The packets dropped since the last call, if kept.
    pub fn take_dropped(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.dropped)
    }

    /// Records the samples due strictly before `t`.
    fn sample_before(&mut self, t: u64) {
        let Some(i) = self.sampling else { return };
        while self.next_sample < t {
            self.samples.push(Sample {
                t_ns: self.next_sample,
                queued: self.ports.iter().map(|p| p.queued).collect(),
                flows: self.flows.clone(),
            });
            self.next_sample = self.next_sample.saturating_add(i);
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.insert((at, self.seq), ev);
    }

    fn drop_packet(&mut self, q: Queued) {
        self.packets = self.packets.saturating_sub(1);
        if self.keep_dropped {
            self.dropped.push(q.pkt);
        }
    }

    fn handle(&mut self, ev: Ev, rng: &mut dyn RngCore, out: &mut Vec<(usize, Vec<u8>)>) {
        match ev {
            Ev::Send { src, q } => {
                if let Some(e) = self.entering.get_mut(src) {
                    let p = usize::from(q.prio) % PRIOS;
                    e[p] = e[p].saturating_sub(q.pkt.len() as u64);
                }
                let Some(p) = self.nic_port.get(src).copied().flatten() else {
                    return self.drop_packet(q);
                };
                let port = &mut self.ports[p];
                if q.pkt.len() > port.link.mtu as usize {
                    port.stats.prio[usize::from(q.prio)].drop_mtu += 1;
                    return self.drop_packet(q);
                }
                port.enqueue(q);
                self.start(p);
            }
            Ev::TxDone(p) => {
                self.ports[p].busy = false;
                self.start(p);
            }
            Ev::Arrive { port, q } => match self.ports[port].at {
                PortRef::Nic(d) => {
                    self.packets = self.packets.saturating_sub(1);
                    let f = self.flows.entry((q.src, d)).or_default();
                    f.packets += 1;
                    f.bytes += q.pkt.len() as u64;
                    out.push((d, q.pkt));
                }
                PortRef::Switch { switch, .. } => self.switch_in(switch, port, q, rng),
            },
            Ev::Pause { port, prio, on } => {
                self.ports[port].pause(prio, on, self.now);
                if !on {
                    self.start(port);
                }
            }
        }
    }

    /// Starts sending the next packet at egress `p` if its wire is free.
    fn start(&mut self, p: usize) {
        let Some(mut q) = self.ports[p].dequeue() else {
            return;
        };
        let len = q.pkt.len();
        if let PortRef::Switch { switch, .. } = self.ports[p].at
            && let Some(sw) = self.switches.get_mut(switch)
        {
            sw.buffer.used_bytes = sw.buffer.used_bytes.saturating_sub(len as u64);
        }
        if let Some(ing) = q.ingress.take() {
            self.release(ing, q.prio, len as u64);
        }
        let port = &mut self.ports[p];
        port.busy = true;
        let ser = ser_ns(len, port.link.rate_bps);
        let (peer, prop) = (port.peer, port.link.prop_ns);
        let done = self.now.saturating_add(ser);
        self.push(done, Ev::TxDone(p));
        self.push(done.saturating_add(prop), Ev::Arrive { port: peer, q });
    }

    /// A packet arrives at switch `s` on port `ingress`: route, MTU check, admission (PFC
    /// headroom or drop-tail), RED marking, enqueue.
    fn switch_in(&mut self, s: usize, ingress: usize, mut q: Queued, rng: &mut dyn RngCore) {
        let Some(e) = self
            .switches
            .get(s)
            .and_then(|sw| sw.route.get(q.dst).copied().flatten())
        else {
            self.unroutable += 1;
            return self.drop_packet(q);
        };
        let prio = usize::from(q.prio) % PRIOS;
        let len = q.pkt.len() as u64;
        if len > u64::from(self.ports[e].link.mtu) {
            self.ports[e].stats.prio[prio].drop_mtu += 1;
            return self.drop_packet(q);
        }
        let sw = &self.switches[s];
        let spec = sw.spec.prios[prio];
        if let Some(pfc) = spec.pfc {
            let ing = &mut self.ports[ingress];
            if ing.ingress_bytes[prio] + len > pfc.xoff_bytes.saturating_add(pfc.headroom_bytes) {
                self.ports[e].stats.prio[prio].drop_headroom += 1;
                return self.drop_packet(q);
            }
            ing.ingress_bytes[prio] += len;
            q.ingress = Some(ingress);
            if !ing.xoff[prio] && ing.ingress_bytes[prio] >= pfc.xoff_bytes {
                ing.xoff[prio] = true;
                ing.stats.prio[prio].xoff_sent += 1;
                let (up, prop) = (ing.peer, ing.link.prop_ns);
                self.push(
                    self.now.saturating_add(prop),
                    Ev::Pause {
                        port: up,
                        prio: q.prio,
                        on: true,
                    },
                );
            }
        } else {
            let queued = self.ports[e].queued[prio];
            let full = sw.buffer.used_bytes + len > sw.spec.buffer_bytes
                || sw.spec.queue_limit_bytes.is_some_and(|l| queued + len > l);
            if full {
                self.ports[e].stats.prio[prio].drop_tail += 1;
                return self.drop_packet(q);
            }
        }
        if let Some(red) = spec.red
            && ecn::is_ect(&q.pkt)
            && ecn::red_marks(&red, self.ports[e].queued[prio], rng)
            && ecn::mark_ce(&mut q.pkt)
        {
            self.ports[e].stats.prio[prio].ecn_marked += 1;
        }
        let b = &mut self.switches[s].buffer;
        b.used_bytes += len;
        b.max_used_bytes = b.max_used_bytes.max(b.used_bytes);
        self.ports[e].enqueue(q);
        self.start(e);
    }

    /// A PFC-accounted packet of `len` bytes that came in on `ingress` leaves the switch:
    /// resume the upstream once the port is at or below XON.
    fn release(&mut self, ingress: usize, prio: u8, len: u64) {
        let p = usize::from(prio) % PRIOS;
        let xon = match self.ports[ingress].at {
            PortRef::Switch { switch, .. } => self
                .switches
                .get(switch)
                .and_then(|sw| sw.spec.prios[p].pfc)
                .map_or(0, |f| f.xon_bytes),
            PortRef::Nic(_) => 0,
        };
        let ing = &mut self.ports[ingress];
        ing.ingress_bytes[p] = ing.ingress_bytes[p].saturating_sub(len);
        if ing.xoff[p] && ing.ingress_bytes[p] <= xon {
            ing.xoff[p] = false;
            ing.stats.prio[p].xon_sent += 1;
            let (up, prop) = (ing.peer, ing.link.prop_ns);
            self.push(
                self.now.saturating_add(prop),
                Ev::Pause {
                    port: up,
                    prio,
                    on: false,
                },
            );
        }
    }
}

/// Switch `s`'s egress port toward each NIC: the first hop of a shortest path (by hops),
/// the lowest port index on ties.
fn routes_of(ports: &[Port], nic_port: &[Option<usize>], s: usize) -> Vec<Option<usize>> {
    let node_of = |p: &Port| p.at.node();
    let ports_of = |n: Node| {
        ports
            .iter()
            .enumerate()
            .filter(move |(_, p)| node_of(p) == n)
            .map(|(i, _)| i)
    };
    // Breadth-first from `s`: for every node reached, the first port out of `s` on the way.
    let mut first: BTreeMap<Node, usize> = BTreeMap::new();
    let mut todo = VecDeque::new();
    first.insert(Node::Switch(s), usize::MAX);
    todo.push_back(Node::Switch(s));
    while let Some(n) = todo.pop_front() {
        let via = first.get(&n).copied().unwrap_or(usize::MAX);
        for p in ports_of(n) {
            let Some(peer) = ports.get(ports[p].peer) else {
                continue;
            };
            let m = node_of(peer);
            if first.contains_key(&m) {
                continue;
            }
            first.insert(m, if via == usize::MAX { p } else { via });
            if matches!(m, Node::Switch(_)) {
                todo.push_back(m);
            }
        }
    }
    (0..nic_port.len())
        .map(|d| first.get(&Node::Nic(d)).copied())
        .collect()
}
