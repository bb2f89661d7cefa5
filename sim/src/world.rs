//! Stepped mode: several devices on one simulated network, a virtual clock, a seeded RNG.
//!
//! Owns: [`World`], which steps its devices in a fixed order, carries the packets they send to
//! the device that owns the destination address after the link latency, and moves virtual
//! time only when nothing is left to do now. Everything is single-threaded and ordered
//! (devices by id, packets by arrival time then send order), so the same seed gives the same
//! run, bit for bit. Must not: read the wall clock or spawn threads.
//!
//! On an in-process link a device may send a burst of WRITE packets whose payload is still in
//! its memory (`crate::frame`): one copy at delivery instead of three plus two ICRC passes.
//! The world allows it only while nothing needs the bytes ([`World::set_fast_path`], no
//! jitter, no device tracing, no active packet rule); what is delivered, and every counter,
//! is what the same packets sent one by one give.
//!
//! Faults and the pcap tee are packet rules ([`crate::link::rule`]): a packet meets them as it
//! enters flight ([`crate::faults`]) and as it leaves it ([`crate::pcap::PcapTee`]). The RNG is
//! the only source of randomness in a run (link jitter, and the rules' draws). A failing test
//! prints `World::seed()`; building a world with that seed replays the run.
//!
//! With a topology ([`World::set_topology`], `crate::net`) packets cross switches instead: NIC
//! egress queues, link rates and delays, switch queues, ECN marking, PFC, MTU drops.

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::device::Device;
use crate::faults::{FaultPlan, FaultStats, Faults};
use crate::frame::Frame;
use crate::link::rule::{Packet, Rule, Rules, Seen, Verdict};
use crate::net::{Network, Topology, TopologyError};
use crate::pcap::{PcapTee, PcapWriter};
use crate::profile::Profile;

/// Where a world tees its packets (see [`World::set_pcap`]).
pub type PcapSink = PcapWriter<Box<dyn std::io::Write + Send>>;

/// The world's pcap tee, as a rule.
type Tee = PcapTee<Box<dyn std::io::Write + Send>>;

/// How packets travel between devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// One-way latency in ns.
    pub latency_ns: u64,
    /// Extra latency drawn uniformly from `0..=jitter_ns` per packet (from the world's RNG).
    /// Jitter may reorder packets, as a real network can.
    pub jitter_ns: u64,
}

impl Default for LinkConfig {
    /// 1 µs, no jitter: a back-to-back cable.
    fn default() -> Self {
        Self {
            latency_ns: 1_000,
            jitter_ns: 0,
        }
    }
}

/// What the network did, for tests and reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Packets delivered.
    pub delivered: u64,
    /// Packets nobody owned the destination of (dropped).
    pub unroutable: u64,
}

/// Devices on a network, stepped deterministically.
pub struct World {
    devices: Vec<Device>,
    link: LinkConfig,
    /// In flight: (arrival time, send sequence) → (destination device, packet or burst).
    in_flight: BTreeMap<(u64, u64), (usize, Frame)>,
    /// Frames due at the current time (a zero-latency link), in send order: they arrive after
    /// everything in `in_flight` that is due by now, all of which was sent before them. Kept
    /// apart so that a zero-latency exchange does not churn the map.
    due_now: VecDeque<(usize, Frame)>,
    /// Packets in flight (a burst counts its packets).
    in_flight_packets: u64,
    /// Devices may send bursts when nothing needs the bytes.
    fast_path: bool,
    /// The last destinations [`World::route`] found (GID → device), newest first: an
    /// exchange between two devices routes to the same two over and over. Profiles (and
    /// so GIDs) never change once a device is added; adding one empties it.
    routes: [Option<([u8; 16], usize)>; ROUTE_CACHE],
    seq: u64,
    now: u64,
    seed: u64,
    rng: ChaCha8Rng,
    stats: NetStats,
    /// The packet rules: faults, the pcap tee, and any a user added, drawing from `rng`.
    rules: Rules,
    /// The switched network, when a topology is set ([`World::set_topology`]): it carries
    /// every packet instead of the fixed-latency link.
    net: Option<Network>,
    /// What the network delivered in a round, kept so a round allocates no list.
    net_out: Vec<(usize, Vec<u8>)>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("seed", &self.seed)
            .field("now", &self.now)
            .field("devices", &self.devices.len())
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

/// Destinations [`World::route`] remembers.
const ROUTE_CACHE: usize = 2;

/// The most steps [`World::run_until_idle`] takes before deciding the devices livelock.
pub const MAX_STEPS: usize = 1_000_000;

/// The devices kept doing work without ever becoming idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the world did not become idle within {steps} steps at t={now} ns (seed {seed}): a device livelocks"
)]
pub struct Livelock {
    /// Steps taken.
    pub steps: usize,
    /// Virtual time.
    pub now: u64,
    /// The world's seed, to replay the run.
    pub seed: u64,
}

impl World {
    /// An empty world whose randomness comes from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            devices: Vec::new(),
            link: LinkConfig::default(),
            in_flight: BTreeMap::new(),
            due_now: VecDeque::new(),
            in_flight_packets: 0,
            fast_path: true,
            routes: [None; ROUTE_CACHE],
            seq: 0,
            now: 0,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            stats: NetStats::default(),
            rules: Rules::default(),
            net: None,
            net_out: Vec::new(),
        }
    }

    /// Carries packets through the switched network `topology` describes from now on
    /// (`None`: back to the fixed-latency link of [`World::set_link`]); packets inside a
    /// network being replaced are lost with it. With a topology the fast path is off
    /// (switches need the bytes), the link's latency and jitter are not used, and packets
    /// meet the packet rules as they enter the network (a rule's extra delay holds them back
    /// before the NIC's egress).
    ///
    /// Each NIC on the topology, now or when it is added, takes its link's rate as its line
    /// rate (its DCQCN ceiling) and its link's MTU as its port's Ethernet MTU, as a ConnectX
    /// port runs at the speed its link trained to and a host sets its MTU to the fabric's.
    pub fn set_topology(&mut self, topology: Option<&Topology>) -> Result<(), TopologyError> {
        self.net = topology.map(|t| Network::new(t, self.now)).transpose()?;
        if let Some(net) = &self.net {
            for (id, d) in self.devices.iter_mut().enumerate() {
                net.fit_nic(id, d);
            }
        }
        Ok(())
    }

    /// The switched network, if a topology is set: its stats, queues and samples.
    pub fn network(&self) -> Option<&Network> {
        self.net.as_ref()
    }

    /// The switched network, mutably (sampling, keeping drops).
    pub fn network_mut(&mut self) -> Option<&mut Network> {
        self.net.as_mut()
    }

    /// Sets the faults for packets sent from now on by every device without a plan of its
    /// own (`None`: a perfect link). Their randomness comes from the world's seed.
    pub fn set_faults(&mut self, plan: Option<FaultPlan>) {
        let add = plan.is_some();
        if let Some(f) = self.rules.get_or_add(|| add.then(Faults::default)) {
            f.set_all(plan);
        }
    }

    /// Sets the faults for packets device `src` sends (one direction of a two-device link);
    /// `None` returns it to the plan of [`World::set_faults`].
    pub fn set_faults_from(&mut self, src: usize, plan: Option<FaultPlan>) {
        let add = plan.is_some();
        if let Some(f) = self.rules.get_or_add(|| add.then(Faults::default)) {
            f.set_from(src, plan);
        }
    }

    /// True if faults may touch packets (a link that carries packets by reference must then
    /// carry real bytes).
    pub fn faults_active(&self) -> bool {
        self.rules.get::<Faults>().is_some_and(Faults::is_active)
    }

    /// True if packets must travel as real wire bytes: a rule may flip, copy or drop them, or
    /// record them (the pcap tee). A link that carries packets by reference falls back to
    /// bytes then.
    pub fn wants_bytes(&self) -> bool {
        self.rules.active()
    }

    /// What the faults did so far.
    pub fn fault_stats(&self) -> &FaultStats {
        self.rules
            .get::<Faults>()
            .map_or(&FaultStats::NONE, Faults::stats)
    }

    /// What the faults did to the packets device `src` sent.
    pub fn fault_stats_from(&self, src: usize) -> FaultStats {
        self.rules
            .get::<Faults>()
            .map(|f| f.stats_from(src))
            .unwrap_or_default()
    }

    /// Tees every packet into `pcap` (`None`: stop and hand the writer back): each delivered
    /// packet as it arrives, with its arrival time, and each dropped one when it is dropped.
    pub fn set_pcap(&mut self, pcap: Option<PcapSink>) -> Option<PcapSink> {
        match self.rules.get_mut::<Tee>() {
            Some(t) => t.replace(pcap),
            None => {
                if let Some(p) = pcap {
                    self.rules.push(Box::new(PcapTee::new(p)));
                }
                None
            }
        }
    }

    /// The last write error of the pcap tee, if any (writing stopped then).
    pub fn pcap_error(&self) -> Option<&std::io::Error> {
        self.rules.get::<Tee>().and_then(Tee::error)
    }

    /// Adds a packet rule after the world's others (faults and the pcap tee are rules too): it
    /// decides the fate of every packet entering flight that earlier rules passed, drawing
    /// only from the world's RNG, and sees every packet leave.
    pub fn add_rule(&mut self, rule: Box<dyn Rule>) {
        self.rules.push(rule);
    }

    /// The world's packet rules ([`Rules::get`] finds one by its type).
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The seed this world was made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Sets the link model for packets sent from now on.
    pub fn set_link(&mut self, link: LinkConfig) {
        self.link = link;
    }

    /// Allows (the default) or forbids bursts on the in-process link. With it off every
    /// packet is built, ICRC'd, parsed and checked as bytes (the reference the fast path is
    /// tested against).
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// Whether bursts are allowed at all ([`World::set_fast_path`]); a link that segments
    /// frames itself (the UDP link) honours it too.
    pub fn fast_path(&self) -> bool {
        self.fast_path
    }

    /// True if devices may send bursts now: allowed, nothing needs the bytes (no faults, no
    /// pcap tee: [`World::wants_bytes`]), no jitter (packets of a burst cannot be reordered),
    /// and no device records a trace (the trace shows every packet's bytes).
    fn fast_now(&self) -> bool {
        self.fast_path
            && !self.wants_bytes()
            && self.link.jitter_ns == 0
            && self.net.is_none()
            && self.devices.iter().all(|d| !d.trace.enabled())
    }

    /// Adds a device; returns its id (its index).
    pub fn add_device(&mut self, profile: Profile) -> usize {
        let mut d = Device::new(profile);
        d.set_time(self.now);
        if let Some(net) = &self.net {
            net.fit_nic(self.devices.len(), &mut d);
        }
        self.devices.push(d);
        self.routes = [None; ROUTE_CACHE];
        self.devices.len() - 1
    }

    /// Device `id`.
    ///
    /// # Panics
    /// If `id` was not returned by [`World::add_device`] (a bug in the test using the world).
    pub fn device(&mut self, id: usize) -> &mut Device {
        &mut self.devices[id]
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// True if there are no devices.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Virtual time in ns.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Network statistics.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Packets in flight (on the link, or inside the switched network).
    pub fn in_flight(&self) -> usize {
        let net = self.net.as_ref().map_or(0, Network::in_flight);
        usize::try_from(self.in_flight_packets + net).unwrap_or(usize::MAX)
    }

    /// Steps every device and delivers every packet due now, until nothing happens; virtual
    /// time does not move. Returns the number of rounds.
    pub fn run_until_idle(&mut self) -> Result<usize, Livelock> {
        let fast = self.fast_now();
        // Neither changes during the run: set once, not at every round.
        for d in &mut self.devices {
            d.set_fast_tx(fast);
            d.set_time(self.now);
        }
        for round in 0..MAX_STEPS {
            let mut progress = false;
            for d in &mut self.devices {
                progress |= if round == 0 { d.step() } else { d.step_again() };
            }
            progress |= self.collect_tx(fast);
            progress |= self.deliver_due();
            if !progress {
                return Ok(round);
            }
            // The next round would find nothing to do: no device has a doorbell or a frame
            // waiting or a scan that went on, and this round left nothing on the link to
            // move (it collected every sent frame and delivered every due one). Its steps
            // would all return false; skip it and report what it would have.
            // On a switched network a device may hold frames its NIC's egress will take once
            // the network has run: another round then.
            let held = self.net.is_some() && self.devices.iter().any(Device::has_tx);
            if !held && !self.devices.iter().any(Device::has_pending) {
                return Ok(round + 1);
            }
        }
        Err(Livelock {
            steps: MAX_STEPS,
            now: self.now,
            seed: self.seed,
        })
    }

    /// Runs for `duration` ns of virtual time: jumps from event to event (packet arrivals,
    /// device timers), running to idle at each.
    pub fn advance(&mut self, duration: u64) -> Result<(), Livelock> {
        let end = self.now.saturating_add(duration);
        self.run_until_idle()?;
        while let Some(t) = self.next_event().filter(|&t| t <= end) {
            self.now = self.now.max(t);
            self.run_until_idle()?;
        }
        self.now = end;
        self.run_until_idle().map(|_| ())
    }

    /// Runs until no packet is in flight and no device has a timer pending, or `limit` ns of
    /// virtual time have passed. Returns true if the network went quiet.
    pub fn settle(&mut self, limit: u64) -> Result<bool, Livelock> {
        let end = self.now.saturating_add(limit);
        self.run_until_idle()?;
        while let Some(t) = self.next_event() {
            if t > end {
                self.now = end;
                return Ok(false);
            }
            self.now = self.now.max(t);
            self.run_until_idle()?;
        }
        Ok(true)
    }

    /// The next time something is due: a packet arrival or a device timer.
    pub fn next_event(&self) -> Option<u64> {
        let arrival = if self.due_now.is_empty() {
            self.in_flight.keys().next().map(|&(t, _)| t)
        } else {
            Some(self.now)
        };
        let net = self.net.as_ref().and_then(Network::next_event);
        let arrival = match (arrival, net) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timers = self.devices.iter().filter_map(Device::next_deadline).min();
        match (arrival, timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves every sent packet onto the network. `fast`: [`World::fast_now`], which nothing
    /// changes during a run.
    ///
    /// On the fast path (nothing tees, drops or reorders packets) a frame due now is handed
    /// to its device at once when nothing else is due before it (no due entry in the map, the
    /// zero-latency lane empty): that is where `deliver_due` would put it, after the same
    /// frames, without the trip through the lane.
    fn collect_tx(&mut self, fast: bool) -> bool {
        let mut any = false;
        let mut next = 0;
        // Devices in id order, skipping at once those that sent nothing.
        while let Some(src) = self
            .devices
            .get(next..)
            .and_then(|ds| ds.iter().position(Device::has_tx))
            .map(|k| next + k)
        {
            next = src + 1;
            while let Some(frame) = self.take_for_link(src) {
                any = true;
                if !matches!(frame, Frame::Wire(_)) && !fast {
                    // Sent before the link started needing the bytes: segment it.
                    self.devices[src].untake_wire(frame.into_wire());
                    continue;
                }
                let Some(dst) = self.route(&frame) else {
                    self.stats.unroutable += frame.packets();
                    continue;
                };
                if self.net.is_some() {
                    for pkt in frame.into_wire() {
                        self.enter_network(src, dst, pkt);
                    }
                    continue;
                }
                let jitter = if self.link.jitter_ns == 0 {
                    0
                } else {
                    self.rng.next_u64() % (self.link.jitter_ns + 1)
                };
                let at = self.now + self.link.latency_ns + jitter;
                match frame {
                    Frame::Wire(pkt) if self.rules.active() => {
                        self.enter_flight(src, dst, at, pkt);
                    }
                    frame if fast && at <= self.now && self.nothing_due() => {
                        self.seq += 1;
                        self.in_flight_packets += frame.packets();
                        self.deliver(dst, frame);
                    }
                    frame => self.put_in_flight(dst, at, frame),
                }
            }
        }
        any
    }

    /// The next frame device `src` sent, if its link takes it now: always on the plain link;
    /// on a switched network only while the NIC's egress has nothing waiting at its priority
    /// (the device holds the rest: back-pressure, `Device::set_tx_backpressure`).
    fn take_for_link(&mut self, src: usize) -> Option<Frame> {
        if let Some(net) = &self.net
            && let Some(prio) = self.devices[src].tx_head_prio()
            && net.nic_backlog(src, prio) > 0
        {
            return None;
        }
        self.devices[src].take_frame()
    }

    /// True if no frame is due now (the map's first arrival is later, the lane is empty).
    fn nothing_due(&self) -> bool {
        self.due_now.is_empty()
            && self
                .in_flight
                .keys()
                .next()
                .is_none_or(|&(t, _)| t > self.now)
    }

    /// Puts one packet in flight to arrive at `at`, after the rules had their say (a dropped
    /// one is shown to them now: the pcap tee records it).
    fn enter_flight(&mut self, src: usize, dst: usize, at: u64, mut pkt: Vec<u8>) {
        let mut p = Packet {
            bytes: &mut pkt,
            src,
            now_ns: self.now,
        };
        match self.rules.on_packet(&mut p, &mut self.rng) {
            Verdict::Drop => self.rules.seen(&pkt, self.now, Seen::Dropped),
            Verdict::Pass => self.put_in_flight(dst, at, Frame::Wire(pkt)),
            Verdict::Deliver {
                extra_ns,
                copy_after_ns,
            } => {
                let at = at.saturating_add(extra_ns);
                if let Some(gap) = copy_after_ns {
                    self.put_in_flight(dst, at.saturating_add(gap), Frame::Wire(pkt.clone()));
                }
                self.put_in_flight(dst, at, Frame::Wire(pkt));
            }
        }
    }

    /// Hands one packet to the switched network after the rules had their say (a dropped
    /// one is shown to them now; a delayed one enters the NIC's egress later).
    fn enter_network(&mut self, src: usize, dst: usize, mut pkt: Vec<u8>) {
        let now = self.now;
        let (at, copy_at) = if self.rules.active() {
            let mut p = Packet {
                bytes: &mut pkt,
                src,
                now_ns: now,
            };
            match self.rules.on_packet(&mut p, &mut self.rng) {
                Verdict::Drop => return self.rules.seen(&pkt, now, Seen::Dropped),
                Verdict::Pass => (now, None),
                Verdict::Deliver {
                    extra_ns,
                    copy_after_ns,
                } => {
                    let at = now.saturating_add(extra_ns);
                    (at, copy_after_ns.map(|g| at.saturating_add(g)))
                }
            }
        } else {
            (now, None)
        };
        let Some(net) = self.net.as_mut() else {
            return;
        };
        let mut sent = true;
        if let Some(c) = copy_at {
            sent &= net.send(c, src, dst, pkt.clone());
        }
        sent &= net.send(at, src, dst, pkt);
        if !sent {
            self.stats.unroutable += 1;
        }
    }

    /// Runs the switched network up to now: hands every packet that reached a NIC to its
    /// device (in arrival order) and shows the rules the packets it dropped.
    fn deliver_from_network(&mut self) -> bool {
        let Some(net) = self.net.as_mut() else {
            return false;
        };
        let watched = self.rules.watched();
        net.set_keep_dropped(watched);
        let mut out = std::mem::take(&mut self.net_out);
        // An event may free a NIC's egress: a frame its device holds can go this run.
        let mut any = net.run(self.now, &mut self.rng, &mut out);
        let dropped = net.take_dropped();
        for pkt in &dropped {
            self.rules.seen(pkt, self.now, Seen::Dropped);
        }
        for (dst, pkt) in out.drain(..) {
            any |= self.hand(dst, Frame::Wire(pkt));
        }
        self.net_out = out;
        any
    }

    /// Queues `frame` to arrive at `dst` at `at`: on the zero-latency lane if it is due now,
    /// else in the time-ordered map.
    fn put_in_flight(&mut self, dst: usize, at: u64, frame: Frame) {
        self.seq += 1;
        self.in_flight_packets += frame.packets();
        if at <= self.now {
            self.due_now.push_back((dst, frame));
        } else {
            self.in_flight.insert((at, self.seq), (dst, frame));
        }
    }

    /// The device that owns the packet's destination address (the first, by id).
    fn route(&mut self, frame: &Frame) -> Option<usize> {
        // A burst's or an ACK's address is a field (`Frame::dgid` reads it in place).
        let dgid = frame.dgid()?;
        for (g, dst) in self.routes.iter().flatten() {
            if *g == dgid {
                return Some(*dst);
            }
        }
        let dst = self
            .devices
            .iter()
            .position(|d| d.profile().owns_gid(&dgid))?;
        self.routes.rotate_right(1);
        if let Some(first) = self.routes.first_mut() {
            *first = Some((dgid, dst));
        }
        Some(dst)
    }

    /// Hands every packet whose arrival time has come to its device, in (arrival time, send
    /// order): the map's due entries, then the zero-latency lane.
    fn deliver_due(&mut self) -> bool {
        let mut any = self.deliver_from_network();
        if self.in_flight.is_empty() && self.due_now.is_empty() {
            // The in-process fast path hands frames over in `collect_tx`: usually nothing.
            return any;
        }
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (dst, frame) = entry.remove();
            any |= self.deliver(dst, frame);
        }
        while let Some((dst, frame)) = self.due_now.pop_front() {
            any |= self.deliver(dst, frame);
        }
        any
    }

    fn deliver(&mut self, dst: usize, frame: Frame) -> bool {
        self.in_flight_packets = self.in_flight_packets.saturating_sub(frame.packets());
        self.hand(dst, frame)
    }

    /// Hands `frame` to device `dst`, shown to the rules as delivered and counted.
    fn hand(&mut self, dst: usize, frame: Frame) -> bool {
        if self.rules.watched()
            && let Frame::Wire(pkt) = &frame
        {
            self.rules.seen(pkt, self.now, Seen::Delivered);
        }
        self.stats.delivered += frame.packets();
        match self.devices.get_mut(dst) {
            Some(d) => {
                d.receive_frame(frame);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
impl World {
    /// A world of devices a test set up by hand (`crate::testkit`), at time zero.
    pub(crate) fn with_devices(seed: u64, devices: Vec<Device>) -> Self {
        let mut w = Self::new(seed);
        w.devices = devices;
        w
    }

    /// The devices, handed back to the test.
    pub(crate) fn into_devices(self) -> Vec<Device> {
        self.devices
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::objects::AddressPath;
    use crate::transport::wire::Route;
    use bypass_hw::roce::RocePacket;
    use bypass_hw::roce::ext::Aeth;
    use bypass_hw::roce::{BthFields, BthOpcode, DEFAULT_PKEY, ExtFields};
    use bypass_hw::syndrome::AethSyndrome;

    /// Device `from` sends an ACK to the owner of `to_gid`, with PSN `psn`.
    pub(crate) fn send_ack(w: &mut World, from: usize, to_gid: [u8; 16], psn: u32) {
        let path = AddressPath {
            rgid: to_gid,
            port: 1,
            ..Default::default()
        };
        let bth = BthFields {
            opcode: BthOpcode::RC_ACKNOWLEDGE,
            pkey: DEFAULT_PKEY,
            dest_qp: 0x42,
            psn,
            ..Default::default()
        };
        let ext = ExtFields {
            aeth: Some(Aeth::new(AethSyndrome::ACK_UNLIMITED, 0).unwrap()),
            ..Default::default()
        };
        assert!(w.device(from).data_path().send(
            Route {
                port: 1,
                path: &path,
                src_qpn: 7
            },
            bth,
            ext,
            &[]
        ));
    }

    fn rx_psns(w: &mut World, dev: usize) -> Vec<u32> {
        // Packets a device received but could not use (no QP 0x42) are counted as discards;
        // the trace shows their order.
        w.device(dev)
            .trace
            .events()
            .iter()
            .filter_map(|e| match e {
                crate::trace::TraceEvent::Packet {
                    tx: false, bytes, ..
                } => Some(RocePacket::parse(bytes).unwrap().bth().psn()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn packets_arrive_after_the_latency_and_only_at_the_owner_of_the_address() {
        let mut w = World::new(1);
        let a = w.add_device(Profile::with_id(1));
        let b = w.add_device(Profile::with_id(2));
        w.device(b).trace.set_enabled(true);
        let gid_b = Profile::with_id(2).ports[0].gids[0];
        send_ack(&mut w, a, gid_b, 5);
        w.run_until_idle().unwrap();
        assert_eq!(w.in_flight(), 1);
        assert_eq!(
            w.device(b).counters.port_rcv_packets,
            0,
            "not before the latency"
        );
        w.advance(999).unwrap();
        assert_eq!(w.device(b).counters.port_rcv_packets, 0);
        w.advance(1).unwrap();
        assert_eq!(w.device(b).counters.port_rcv_packets, 1);
        assert_eq!(w.device(b).counters.rx_discards, 1, "no QP 0x42 on b");
        assert_eq!(w.device(a).counters.port_rcv_packets, 0);
        send_ack(&mut w, a, Profile::ipv4_gid([192, 0, 2, 1]), 6);
        assert!(w.settle(1_000_000).unwrap());
        assert_eq!(w.stats().unroutable, 1);
        assert_eq!(w.now(), 1_000);
    }

    #[test]
    fn a_zero_latency_link_delivers_in_send_order_within_the_same_run() {
        let mut w = World::new(3);
        w.set_link(LinkConfig {
            latency_ns: 0,
            jitter_ns: 0,
        });
        let a = w.add_device(Profile::with_id(1));
        let b = w.add_device(Profile::with_id(2));
        w.device(b).trace.set_enabled(true);
        let gid_b = Profile::with_id(2).ports[0].gids[0];
        for psn in [9, 3, 7] {
            send_ack(&mut w, a, gid_b, psn);
        }
        w.run_until_idle().unwrap();
        assert_eq!(w.in_flight(), 0);
        assert_eq!(w.next_event(), None);
        assert_eq!((w.now(), w.stats().delivered), (0, 3));
        assert_eq!(rx_psns(&mut w, b), [9, 3, 7]);
    }

    #[test]
    fn frames_reach_the_owner_of_their_address_as_destinations_alternate_past_the_route_cache() {
        let mut w = World::new(5);
        w.set_link(LinkConfig {
            latency_ns: 0,
            jitter_ns: 0,
        });
        let ids: Vec<usize> = (1..=4).map(|i| w.add_device(Profile::with_id(i))).collect();
        let gid = |i: u8| Profile::with_id(i).ports[0].gids[0];
        // More destinations than the cache holds, revisited out of order.
        let order = [2u8, 3, 4, 2, 4, 3, 3, 2, 4, 4];
        for (psn, &to) in order.iter().enumerate() {
            send_ack(&mut w, ids[0], gid(to), psn as u32);
        }
        w.run_until_idle().unwrap();
        for to in 2u8..=4 {
            let want = order.iter().filter(|&&t| t == to).count() as u64;
            assert_eq!(
                w.device(usize::from(to) - 1).counters.port_rcv_packets,
                want,
                "device {to}"
            );
        }
        assert_eq!(w.device(ids[0]).counters.port_rcv_packets, 0);
        // A device added later owns nothing routed before, and gets its own frames.
        let e = w.add_device(Profile::with_id(9));
        send_ack(&mut w, ids[0], gid(9), 99);
        send_ack(&mut w, ids[0], gid(2), 100);
        w.run_until_idle().unwrap();
        assert_eq!(w.device(e).counters.port_rcv_packets, 1);
        assert_eq!(w.device(1).counters.port_rcv_packets, 4);
        assert_eq!(w.stats().unroutable, 0);
    }

    #[test]
    fn a_run_to_idle_leaves_nothing_for_another_run_and_counts_its_working_rounds() {
        let mut w = World::new(3);
        w.set_link(LinkConfig {
            latency_ns: 0,
            jitter_ns: 0,
        });
        let a = w.add_device(Profile::with_id(1));
        let _b = w.add_device(Profile::with_id(2));
        assert_eq!(
            w.run_until_idle().unwrap(),
            0,
            "nothing to do: no round worked"
        );
        send_ack(&mut w, a, Profile::with_id(2).ports[0].gids[0], 1);
        // Round 0 carries the ACK to b, round 1 has b take it (a discard: no QP 0x42); the
        // round after would find nothing and is not run.
        assert_eq!(w.run_until_idle().unwrap(), 2);
        assert!(w.devices.iter().all(|d| !d.has_pending()));
        assert_eq!(w.run_until_idle().unwrap(), 0);
        assert_eq!(w.device(1).counters.rx_discards, 1);
    }

    fn jittery_run(seed: u64) -> Vec<u32> {
        let mut w = World::new(seed);
        w.set_link(LinkConfig {
            latency_ns: 1_000,
            jitter_ns: 5_000,
        });
        let a = w.add_device(Profile::with_id(1));
        let b = w.add_device(Profile::with_id(2));
        w.device(b).trace.set_enabled(true);
        let gid_b = Profile::with_id(2).ports[0].gids[0];
        for psn in 0..32 {
            send_ack(&mut w, a, gid_b, psn);
        }
        assert!(w.settle(1_000_000).unwrap(), "seed {seed}");
        rx_psns(&mut w, b)
    }

    #[test]
    fn the_same_seed_replays_the_same_reordering() {
        let first = jittery_run(7);
        assert_eq!(first.len(), 32);
        assert_eq!(first, jittery_run(7));
        assert_ne!(
            first,
            (0..32).collect::<Vec<_>>(),
            "5 µs of jitter reorders packets"
        );
        assert_ne!(first, jittery_run(8), "another seed, another order");
    }

    fn faulty_run(seed: u64, plan: FaultPlan) -> (Vec<u32>, World) {
        let mut w = World::new(seed);
        let a = w.add_device(Profile::with_id(1));
        let b = w.add_device(Profile::with_id(2));
        w.device(b).trace.set_enabled(true);
        w.set_faults(Some(plan));
        let gid_b = Profile::with_id(2).ports[0].gids[0];
        for psn in 0..200 {
            send_ack(&mut w, a, gid_b, psn);
        }
        assert!(w.settle(10_000_000).unwrap(), "seed {seed}");
        (rx_psns(&mut w, b), w)
    }

    #[test]
    fn faults_drop_duplicate_reorder_and_corrupt_and_replay_with_the_seed() {
        use crate::faults::Rate;
        let plan = FaultPlan {
            drop: Rate::percent(10),
            duplicate: Rate::percent(10),
            reorder: Rate::percent(10),
            corrupt: Rate::percent(10),
            ..FaultPlan::default()
        };
        let (psns, mut w) = faulty_run(11, plan.clone());
        let f = w.fault_stats().clone();
        assert!(f.dropped > 0 && f.duplicated > 0 && f.reordered > 0 && f.corrupted > 0);
        assert_eq!(psns.len() as u64, 200 - f.dropped + f.duplicated);
        assert_eq!(w.stats().delivered, psns.len() as u64);
        assert_eq!(
            w.device(1).counters.rx_icrc_errors,
            f.corrupted,
            "every corrupted packet fails the ICRC check"
        );
        assert!(psns.windows(2).any(|p| p[1] < p[0]), "reordered");
        assert_eq!(psns, faulty_run(11, plan.clone()).0, "same seed, same run");
        assert_ne!(psns, faulty_run(12, plan).0);
    }

    #[test]
    fn a_cut_link_drops_everything_from_the_cut_on_and_pcap_sees_it() {
        use crate::faults::{Fault, Trigger};
        let mut w = World::new(1);
        let a = w.add_device(Profile::with_id(1));
        let b = w.add_device(Profile::with_id(2));
        w.device(b).trace.set_enabled(true);
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink: Box<dyn std::io::Write + Send> = Box::new(Shared(buf.clone()));
        w.set_pcap(Some(PcapWriter::new(sink).unwrap()));
        w.set_faults_from(
            a,
            Some(FaultPlan::cut_after(3).with(Trigger::Packet(1), Fault::Delay(10_000))),
        );
        let gid_b = Profile::with_id(2).ports[0].gids[0];
        for psn in 0..6 {
            send_ack(&mut w, a, gid_b, psn);
        }
        assert!(w.settle(1_000_000).unwrap());
        assert_eq!(
            rx_psns(&mut w, b),
            vec![0, 2, 1],
            "1 delayed behind 2; 3.. cut"
        );
        assert_eq!(w.fault_stats().dropped, 3);
        assert_eq!(w.fault_stats().delayed, 1);
        assert!(w.wants_bytes());
        let pcap = w.set_pcap(None).unwrap();
        assert_eq!(pcap.packets(), 6, "3 delivered + 3 dropped");
        assert!(w.pcap_error().is_none());
        assert!(buf.lock().unwrap().len() > 24 + 6 * 16);
    }

    #[test]
    fn a_rule_added_to_the_world_holds_back_the_packets_it_names_and_sees_them_arrive() {
        use crate::link::rule::{Packet, Rule, Seen, Verdict};
        /// Holds odd PSNs back 10 µs; counts deliveries.
        struct HoldOdd {
            delivered: u64,
        }
        impl Rule for HoldOdd {
            fn on_packet(&mut self, pkt: &mut Packet<'_>, _: &mut dyn RngCore) -> Verdict {
                let psn = RocePacket::parse(pkt.bytes).map_or(0, |p| p.bth().psn());
                if psn % 2 == 1 {
                    Verdict::Deliver {
                        extra_ns: 10_000,
                        copy_after_ns: None,
                    }
                } else {
                    Verdict::Pass
                }
            }
            fn on_seen(&mut self, _: &[u8], _: u64, seen: Seen) {
                self.delivered += u64::from(seen == Seen::Delivered);
            }
            fn active(&self) -> bool {
                true
            }
        }
        let mut w = World::new(2);
        let a = w.add_device(Profile::with_id(1));
        let b = w.add_device(Profile::with_id(2));
        w.device(b).trace.set_enabled(true);
        w.add_rule(Box::new(HoldOdd { delivered: 0 }));
        assert!(w.wants_bytes(), "an active rule needs the bytes");
        let gid_b = Profile::with_id(2).ports[0].gids[0];
        for psn in 0..6 {
            send_ack(&mut w, a, gid_b, psn);
        }
        assert!(w.settle(1_000_000).unwrap());
        assert_eq!(rx_psns(&mut w, b), vec![0, 2, 4, 1, 3, 5]);
        assert_eq!(w.rules().get::<HoldOdd>().unwrap().delivered, 6);
        assert_eq!(w.fault_stats(), &FaultStats::default(), "no faults set");
    }
}
