//! A sim device whose wire is a real UDP socket: RoCEv2 through the host's IP stack, as Linux
//! rxe sends it (`drivers/infiniband/sw/rxe/rxe_net.c`).
//!
//! Owns: [`UdpLink`] (its sockets, receive buffers, send batch and ID tables, each seam in its
//! own file: `socket`, `rx`, `tx`, `sendmsg`, `stamp`), its [`LinkCounters`] and its packet
//! rules (`link::rule`: the pcap tee, injected drops), which see what it sends and decide on
//! what it receives before it checks it. Must not: parse or build RoCE headers by hand
//! (`bypass_hw::roce` does), reach into a device (the pump hands packets over,
//! `fabric/udp/pump.rs`), or change what a device sends: a link only moves the bytes.
//!
//! The wire: the device builds the whole IP packet; the link sends its UDP payload (BTH …
//! ICRC) from a socket bound to the device's UDP source port (the ICRC covers it, `rxe_icrc.c`
//! `rxe_icrc_hdr`), with DF set and the IPv4 ID the socket stamps (0 unconnected; the counted
//! ID of a connected socket, `link::connected`), XORed into the ICRC. On receive it rebuilds
//! the IP + UDP header in front of the payload from what the socket saw, with the ID the ICRC
//! shows ([`recover_ipv4_id`] for rxe's random ones), and checks the ICRC once.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bypass_hw::roce::{IpSpec, ROCE_V2_UDP_DPORT, UdpPorts};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::connected::{Connected, RxIds};
use super::ipv4_id::Ipv4IdSolver;
use super::rule::{Rules, Seen};
use super::rx::RxBuf;
use super::rx_mode::RxMode;
use super::sendmsg::SendBatch;
use super::socket::receiving_socket;
use super::stamp::{WireMemo, WireOf};
use super::train_ids::TrainDeltas;
use crate::faults::{Fault, FaultPlan, Faults, Trigger};
use crate::frame::TxTrains;
use crate::header_cache::HeaderCache;
use crate::pcap::{PcapTee, PcapWriter};
use crate::profile::Profile;

pub use super::counters::LinkCounters;
pub use super::ipv4_id::recover_ipv4_id;
pub(crate) use super::rx::RX_BATCH;
pub(crate) use super::sendmsg::GSO_TRAINS;
pub(crate) use super::sendmsg::{GSO_MAX_BYTES, GSO_MAX_SEGS};
pub use super::socket::LinkError;

/// The RoCEv2 UDP port (IANA 4791), the default a link listens on.
pub const ROCE_PORT: u16 = ROCE_V2_UDP_DPORT;

/// A packet [`UdpLink::deliver_rx`] hands on: the IP packet in the link's receive buffer, its
/// header as the link wrote it, and whether the link checked its ICRC.
#[derive(Debug, Clone, Copy)]
pub struct RxPacket<'a> {
    /// The IP packet, IP header through ICRC (header rebuilt, see the module comment).
    pub bytes: &'a [u8],
    /// The IP header's fields as written (IPv4: the ID the ICRC check found).
    pub ip: &'a IpSpec,
    /// The UDP ports as written.
    pub ports: UdpPorts,
    /// The link computed the ICRC (to find the IPv4 ID) and it matches `bytes`: the device
    /// need not compute it again. False: the device checks it (and counts a mismatch).
    pub icrc_checked: bool,
}

/// One device's wire as UDP sockets on `ADDR:PORT`.
#[derive(Debug)]
pub struct UdpLink {
    pub(super) local: SocketAddr,
    pub(super) rx: UdpSocket,
    /// Sending sockets by UDP source port (created when a port is first used), sorted by
    /// port: a binary search per send (no hashing).
    pub(super) tx: Vec<(u16, UdpSocket)>,
    /// Sending sockets connected to one peer each, with the IPv4 IDs they stamp: the flows'
    /// sends go out on these once the ID is known (`link::connected`).
    pub(super) connected: Connected,
    /// Send on connected sockets where the ID can be learned (on by default; off: every
    /// send unconnected, IPv4 ID 0).
    pub(super) connect: bool,
    /// The IPv4 ID each connected peer most likely sends next (a guess tried before the
    /// solver).
    pub(super) rx_ids: RxIds,
    /// The receive buffers of [`UdpLink::fill_rx`], reused: each holds one datagram or
    /// `UDP_GRO` train after `RX_HEADROOM` bytes, and the first `rx_filled` are waiting
    /// for [`UdpLink::deliver_rx`].
    pub(super) rx_bufs: Vec<RxBuf>,
    pub(super) rx_filled: usize,
    /// Whether the receiving socket is read with `UDP_GRO` on (`recvmsg`) or plain
    /// (`recvfrom`), and when that changes (`link::rx_mode`).
    pub(super) rx_mode: RxMode,
    /// Send segmented trains (`UDP_SEGMENT`); cleared when the kernel refuses one.
    pub(super) gso: bool,
    /// What `bytes_wire` found for each packet of the batch being sent, reused.
    pub(super) wires: Vec<Option<WireOf>>,
    /// What `wire_of` found for the last packets of each kind sent as bytes.
    pub(super) wire_memo: WireMemo,
    /// The sends one [`UdpLink::send_all`] builds, sent together (`sendmmsg`).
    pub(super) batch: SendBatch,
    /// How the ICRC changes with the IPv4 ID, by payload length.
    pub(super) deltas: Ipv4IdSolver,
    /// `deltas` for the IDs of one segmented send, looked up per segment sent, and per
    /// segment received that does not check with ID 0 (segment `k` of a peer's train).
    pub(super) train_deltas: TrainDeltas,
    /// The IP + UDP headers (IPv4 ID 0) last written in front of received packets, with the
    /// ICRC's CRC state after them (a peer's ACKs and equal-size WRITEs, wherever they sit in
    /// a train, repeat them byte for byte).
    pub(super) rx_hdrs: HeaderCache,
    pub(super) counters: Arc<LinkCounters>,
    /// The packet rules: the pcap tee ([`UdpLink::record_pcap`]), injected drops
    /// ([`UdpLink::drop_incoming_every`]); none unless asked.
    pub(super) rules: Rules,
    /// The rules' randomness (seed 0: a link's own faults are schedules, nothing is drawn).
    pub(super) rng: ChaCha8Rng,
}

/// The link's pcap tee, as a rule.
type Tee = PcapTee<BufWriter<File>>;

impl UdpLink {
    /// Binds the receiving socket to `local` (`ADDR:PORT`; the port is also where peers are
    /// sent to, so every peer of a link must listen on the same port: 4791 normally).
    pub fn bind(local: SocketAddr) -> Result<Self, LinkError> {
        let ip = local.ip();
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(LinkError::BadAddress {
                addr: ip,
                why: "it is not a unicast address of one interface",
            });
        }
        let (rx, gro) = receiving_socket(local)?;
        // Port 0 asks the kernel for one: report what it chose.
        let local = rx.local_addr().map_err(|source| LinkError::Socket {
            what: "reading the bound address",
            addr: local,
            source,
        })?;
        Ok(Self {
            local,
            rx,
            tx: Vec::new(),
            connected: Connected::default(),
            connect: true,
            rx_ids: RxIds::default(),
            rx_bufs: Vec::new(),
            rx_filled: 0,
            rx_mode: RxMode::new(gro),
            gso: true,
            wires: Vec::new(),
            wire_memo: WireMemo::default(),
            batch: SendBatch::default(),
            deltas: Ipv4IdSolver::new(),
            train_deltas: TrainDeltas::default(),
            rx_hdrs: HeaderCache::default(),
            counters: Arc::new(LinkCounters::default()),
            rules: Rules::default(),
            rng: ChaCha8Rng::seed_from_u64(0),
        })
    }

    /// Sends on connected sockets (the default: see `link::connected`), or, `false`, every
    /// packet unconnected with IPv4 ID 0 (to measure the difference, or for a peer that
    /// cannot take IDs other than 0).
    pub fn connect_sends(&mut self, on: bool) {
        self.connect = on;
    }

    /// Records every packet the link sends and receives (the IP packets as the device sent
    /// them and as it is handed them, wall-clock timestamps; not those a rule dropped on
    /// receipt) into a pcap file at `path`: a [`PcapTee`] among the link's rules. Wireshark/tshark decode them
    /// as RRoCE.
    pub fn record_pcap(&mut self, path: &Path) -> io::Result<()> {
        let f = File::create(path)?;
        let w = PcapWriter::new(BufWriter::new(f))?;
        match self.rules.get_mut::<Tee>() {
            Some(t) => drop(t.replace(Some(w))),
            None => self.rules.push(Box::new(PcapTee::new(w))),
        }
        Ok(())
    }

    /// Shows a packet the link sent to its rules, if one watches (the pcap tee records it).
    #[inline]
    pub(super) fn show_sent(&mut self, packet: &[u8]) {
        if self.rules.watched() {
            self.rules.seen(packet, wall_ns(), Seen::Sent);
        }
    }

    /// Drops every `n`-th packet the link receives from now on (0: none), counted in
    /// `rx_injected_drops`: a lossy wire for tests of loss recovery on a real socket (a
    /// packet inside a `UDP_GRO` train can be hit, which `tc netem` cannot do). A fault rule
    /// ([`Faults`] with [`Trigger::Every`]) among the link's rules.
    pub fn drop_incoming_every(&mut self, n: u64) {
        let plan = (n > 0).then(|| FaultPlan::default().with(Trigger::Every(n), Fault::Drop));
        let add = plan.is_some();
        if let Some(f) = self.rules.get_or_add(|| add.then(Faults::default)) {
            f.set_all(plan);
        }
    }

    /// A second handle on the receiving socket (for a pump to `poll` without the link).
    pub(crate) fn poller(&self) -> Result<UdpSocket, LinkError> {
        self.rx.try_clone().map_err(|source| LinkError::Socket {
            what: "duplicating the receiving socket",
            addr: self.local,
            source,
        })
    }

    /// How the link groups the packets it sends, for the requester ([`GSO_TRAINS`]; `None`
    /// once the kernel refused a segmented send).
    pub(crate) fn tx_trains(&self) -> Option<TxTrains> {
        self.gso.then_some(GSO_TRAINS)
    }

    /// The address the link receives on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The link's counters (shared: keep a clone before moving the link into an engine).
    pub fn counters(&self) -> Arc<LinkCounters> {
        self.counters.clone()
    }

    /// The local address as a RoCEv2 GID (IPv4-mapped for IPv4), GID index 0 of the device.
    pub fn gid(&self) -> [u8; 16] {
        match self.local.ip() {
            IpAddr::V4(v4) => Profile::ipv4_gid(v4.octets()),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// The profile of the device on this link: `Profile::with_id(1)` with the link's address
    /// as its only GID and, as its port's Ethernet MTU, the MTU of the interface holding
    /// that address (up to the port's 9000; `lo`'s 65536 gives 9000), so the active MTU
    /// the driver reports is what the host's link carries.
    pub fn profile(&self) -> Profile {
        let mut p = Profile::with_id(1);
        let mtu = super::socket::interface_mtu(self.local.ip());
        if let Some(port) = p.ports.first_mut() {
            port.gids = vec![self.gid()];
            if let Some(m) = mtu {
                port.eth_mtu = m.min(port.eth_mtu);
            }
        }
        p
    }
}

/// Wall-clock ns since the Unix epoch (the clock of the link's rules: pcap timestamps).
pub(super) fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[path = "udp_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "mtu_netns_tests.rs"]
mod mtu_netns_tests;
