//! A sim device whose wire is a real UDP socket: RoCEv2 through the host's IP stack, as Linux
//! rxe sends it.
//!
//! Owns: [`UdpLink`] (the sockets: one bound to `ADDR:PORT` that receives, one per UDP source
//! port that sends; segmented sends and coalesced reads), its [`LinkCounters`], its optional
//! pcap tee, [`recover_ipv4_id`] (the IP ID of rxe's packets, which a socket does not report),
//! and [`UdpWire`] (the link shared by the threads that move a fabric's world: the posting
//! thread, the application's wait loops and an engine thread; see its doc). Must not:
//! parse or build RoCE headers by hand (`bypass_hw::roce` does), or reach into a device beyond
//! its public `step`/`set_time`/`set_fast_tx`/`take_frame`/`receive`/`receive_icrc_checked`/
//! `receive_in_place`/`receive_udp_in_place`/`next_deadline` (and whether it records a trace),
//! and the crate's `recycle_burst` (the box of a burst it segmented goes back to the device).
//!
//! Fast path: a train of packets to one peer goes out in one `sendmsg` with `UDP_SEGMENT`
//! (the trains a pump round sends from one socket, in one `sendmmsg`) and, with `UDP_GRO` on
//! the receiving socket, comes in with one `recvmsg` (on loopback the train is never cut at
//! all); while only small single datagrams arrive, `UDP_GRO` is off and each is read with a
//! cheaper `recvfrom` (`link::rx_mode`). A pump round reads the socket into reused buffers that keep
//! room in front of the datagram; each packet's IP + UDP header is then rebuilt in place, in
//! front of its UDP payload (over the tail of the segment before it, already delivered), and
//! the device takes the packet from there (`Device::receive_udp_in_place`): no copy and no
//! allocation in the link. Each header is written once (IPv4 with ID 0, a copy when a peer's
//! packet of the same kind came lately, `crate::header_cache`), and each packet costs one ICRC
//! pass, over that header; an IPv4 packet with another ID (segment `k` of a train carries its send's ID + `k`: `k`
//! from an unconnected peer, the socket's counted ID + `k` from a connected one, guessed from
//! its last; rxe's are random) is matched by XOR (see `Ipv4IdSolver`) and its header rewritten
//! with that ID. None in the device, which takes a
//! packet the link matched as checked, and takes the header's fields from the link as given
//! (no parse of the header, no IPv4 checksum verification: the kernel verified the real one). On transmit the link takes the device's frames
//! (`Device::set_fast_tx`): a burst of WRITE packets whose payload is in host memory is sent
//! as gather lists (`link::gather`): per packet the BTH (+RETH) from a small header buffer,
//! the payload as iovecs pointing straight into the sender's registered memory, and the pad
//! and ICRC from a small tail, so the only copy of the payload on transmit is the kernel's
//! (as a NIC's DMA read is the only one on hardware); the ICRC is one pass over the header
//! and the payload pieces (`bypass_hw::roce::icrc::IcrcHasher`), nothing assembled. Other
//! bursts (inline payloads, or one scattered over more runs than a `sendmsg` takes) are
//! segmented (`Burst::segment_direct_into`) into the buffers of packets already sent, one copy
//! per byte. The wire bytes are the same either way. A flow's sends leave on a socket
//! `connect`ed to its peer (`link::connected`: the kernel keeps the route instead of looking
//! it up per send), once the link has learned the IPv4 IDs that socket stamps (a random
//! per-socket counter, which the ICRC covers); until then, or where it cannot be learned,
//! on the source port's unconnected socket with ID 0.
//!
//! When ACKs leave: a wait loop's round ([`Pumper::App`]) that produces only ACKs holds them
//! for one round; the next round of this process, whatever it is (the doorbell of the
//! application's reply, its next wait-loop round, or the engine's timer round at most
//! [`IDLE_POLL_MS`] later when the application stops pumping), sends them in a send of their
//! own right after its requests (the peer reads a request alone and answers it while the
//! ACK's send and read happen; see [`UdpWire::pump`]'s round). An ACK is
//! thus late by at most the process's own next pump round: microseconds in a busy loop, a
//! millisecond at worst, far below any ACK timeout (IBTA `local_ack_timeout` 4.096 us x
//! 2^timeout: perftest's timeout 14 is ~67 ms).
//!
//! The wire, as rxe has it (Linux `drivers/infiniband/sw/rxe/rxe_net.c`):
//! - The device builds the whole IP packet; the link sends only the UDP payload (BTH … ICRC)
//!   to the destination GID's address. The kernel writes the IP and UDP headers again.
//! - The ICRC covers the IP and UDP headers except TTL/TOS/flow label/checksums
//!   (`rxe_icrc.c` `rxe_icrc_hdr`), so the UDP source port on the wire must be the one the
//!   device chose (`rxe_qp.c`: `0xc000 + hash(qpn)`): a socket bound to that port sends it.
//!   The IPv4 header the peer checks must be what the device hashed: DF set (`IP_MTU_DISCOVER
//!   = IP_PMTUDISC_DO`) and the ID the kernel stamps: 0 on an unconnected socket
//!   (`ip_select_ident`), the connected socket's counted ID otherwise, which the link XORs
//!   into the ICRC the device computed with ID 0 (measured against rxe by
//!   `scripts/guest-test.sh rxe`, see `scripts/guest/README.md`).
//! - On receive the link rebuilds the IP + UDP header from what the socket saw: the sender's
//!   address and port, our bound address, DF, ID 0 (or the ID the ICRC shows: a connected
//!   peer's, guessed from its last, or rxe's random one), and destination port 4791 (what the
//!   sender hashed, even when this link listens elsewhere for tests on one host). TTL, TOS
//!   and the checksums are masked out of the ICRC, so their rebuilt values do not matter.
//!   The device checks the ICRC as for any packet.
//!
//! - rxe sends a random IPv4 ID (`__ip_select_ident`) and hashes it into the ICRC; a UDP
//!   socket cannot see it, so [`recover_ipv4_id`] solves for it from the ICRC.
//!
//! The receiving socket is bound to one address, so the destination address of every
//! datagram it gets is that address (no `IP_PKTINFO` needed).

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use std::time::{SystemTime, UNIX_EPOCH};

use bypass_hw::roce::icrc::IcrcHeaderState;
use bypass_hw::roce::ip::{DEFAULT_TTL, MAX_IP_UDP_HDR_LEN, UDP_HDR_LEN};
use bypass_hw::roce::{
    ICRC_LEN, IpSpec, Ipv4Spec, Ipv6Spec, ROCE_V2_UDP_DPORT, RocePacket, UdpPorts,
};
use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, setsockopt, socket, sockopt,
};

use super::rx_mode::{RxMode, STREAM_BYTES, Switch};
use crate::frame::TxTrains;
use crate::header_cache::HeaderCache;
use crate::link::connected::{Connected, RxIds};
use crate::link::gather::{GatherPkt, Gathered, IOV_MAX, IovList, Out};
use crate::link::ipv4_id::Ipv4IdSolver;
use crate::link::train_ids::TrainDeltas;
use crate::pcap::PcapWriter;
use crate::profile::Profile;

/// The RoCEv2 UDP port (IANA 4791), the default a link listens on.
pub const ROCE_PORT: u16 = ROCE_V2_UDP_DPORT;

/// The largest UDP payload a link receives (a 4096-byte MTU packet is ~4.2 KiB; a UDP datagram
/// can be up to 64 KiB).
const MAX_DATAGRAM: usize = 65_536;

/// The receive buffer a link asks for: a window of 4 KiB packets as deep as a bandwidth
/// test keeps in flight (the kernel's default, ~200 KiB, drops a burst of 64 KiB WRITEs
/// and the transport has to go back N). `SO_RCVBUFFORCE` (CAP_NET_ADMIN) goes past
/// `net.core.rmem_max`; without it the kernel caps `SO_RCVBUF` there.
const RCVBUF: usize = 32 << 20;

/// The most datagrams received per pump round before the devices run.
pub(crate) const RX_BATCH: usize = 64;

/// The most UDP payload bytes one segmented (`UDP_SEGMENT`) send carries: an IPv4 datagram
/// holds at most 65,507 bytes of UDP payload (the kernel refuses more with `EMSGSIZE`).
pub(crate) const GSO_MAX_BYTES: usize = 65_000;

/// The most segments in one segmented send (Linux `UDP_MAX_SEGMENTS`, 64 before 6.9).
pub(crate) const GSO_MAX_SEGS: usize = 64;

/// The link's segmented sends as the requester sees them ([`TxTrains`]: it ends window-cut
/// WRITE bursts where a send ends).
pub const GSO_TRAINS: TxTrains = TxTrains {
    max_segments: GSO_MAX_SEGS as u32,
    max_bytes: GSO_MAX_BYTES as u32,
};

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

/// Why a link could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A socket could not be created, configured or bound.
    #[error(
        "UDP link: {what} for {addr} failed: {source}; use an address of this host (`ip addr`), and a port no other process holds (Linux rxe holds 4791 on every address: give another port, e.g. udp:ADDR:4792, to both peers)"
    )]
    Socket {
        /// What was being done.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The address cannot carry RoCEv2.
    #[error(
        "UDP link: {addr} cannot be a RoCE address ({why}); give the unicast address of an interface of this host"
    )]
    BadAddress {
        /// The address.
        addr: IpAddr,
        /// Why.
        why: &'static str,
    },
}

/// What a link did: packets and the reasons some were not sent or not delivered. The link
/// that owns them is their only writer ([`LinkCounters::add`]); anyone may read them.
#[derive(Debug, Default)]
pub struct LinkCounters {
    /// Datagrams sent.
    pub tx_packets: AtomicU64,
    /// UDP payload bytes sent.
    pub tx_bytes: AtomicU64,
    /// Datagrams received and handed to a device.
    pub rx_packets: AtomicU64,
    /// UDP payload bytes received.
    pub rx_bytes: AtomicU64,
    /// Sends the kernel refused (`EMSGSIZE`: the packet is larger than the route's MTU, lower
    /// the path MTU; unreachable hosts; full socket buffers). The transport retransmits.
    pub tx_errors: AtomicU64,
    /// Packets the device sent that are not RoCEv2 over IP (dropped; a device bug).
    pub tx_malformed: AtomicU64,
    /// Packets whose UDP source port could not be bound, sent from the listening socket
    /// instead (the peer will count an ICRC error for each).
    pub tx_sport_fallbacks: AtomicU64,
    /// IPv4 datagrams whose IP ID was not 0 (Linux rxe sends random ones) and was recovered
    /// from the ICRC (see [`recover_ipv4_id`]).
    pub rx_ip_id_recovered: AtomicU64,
    /// Datagrams that could not be handed on (another address family, or the rebuilt header
    /// did not fit).
    pub rx_dropped: AtomicU64,
    /// Segmented sends (`UDP_SEGMENT`): several packets to one peer in one `sendmsg`.
    pub tx_gso_sends: AtomicU64,
    /// Coalesced receives (`UDP_GRO`): several packets in one `recvmsg`.
    pub rx_gro_reads: AtomicU64,
    /// Packets received and dropped on purpose ([`UdpLink::drop_incoming_every`]).
    pub rx_injected_drops: AtomicU64,
    /// Packets sent (counted in `tx_packets` too) whose payload the kernel read straight
    /// from the sender's memory (`sendmsg` iovecs, no copy into a link buffer).
    pub tx_from_memory: AtomicU64,
    /// Send system calls made (`sendto`, `sendmsg` or `sendmmsg`, each counted once however
    /// many datagrams it carried).
    pub tx_send_calls: AtomicU64,
    /// Sends (datagrams or segmented sends) that went out on a connected socket (see
    /// `link::connected`); the rest went out unconnected, with IPv4 ID 0.
    pub tx_connected: AtomicU64,
    /// Empty datagrams sent to learn a connected socket's IPv4 ID (`link::connected`).
    pub tx_id_probes: AtomicU64,
    /// Connected sockets whose IPv4 ID could not be learned (the device does not loop
    /// transmit timestamps back): their flows go out unconnected.
    pub tx_id_probe_failures: AtomicU64,
    /// Empty datagrams received (a bypass peer's ID probes), skipped.
    pub rx_empty: AtomicU64,
    /// Times the receiving socket's `UDP_GRO` was turned off (single datagrams arriving:
    /// plain reads) or on again (a stream) (see `link::rx_mode`).
    pub rx_gro_switches: AtomicU64,
}

impl LinkCounters {
    /// Adds `n` to counter `c`: a load and a store, not an atomic add. Only the link that
    /// owns the counters writes them (from `&mut UdpLink`, or under its `UdpWire`'s lock: one
    /// writer at a time, the lock ordering the writes); readers holding
    /// [`UdpLink::counters`] only load. A `lock`-prefixed add costs about 20 cycles, and a
    /// packet's trip through the link counts four to six times on the round trip's path.
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// A one-line summary (`tx 10 pkts / 1234 B, rx …`).
    pub fn summary(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "tx {} pkts / {} B in {} send calls, {} segmented sends ({} from the sender's memory), {} sends connected ({} ID probes, {} failed), rx {} pkts / {} B in {} coalesced reads, tx errors {}, tx malformed {}, source-port fallbacks {}, rx IP IDs recovered {}, rx dropped {}, rx dropped on purpose {}, rx empty {}, rx GRO switches {}",
            g(&self.tx_packets),
            g(&self.tx_bytes),
            g(&self.tx_send_calls),
            g(&self.tx_gso_sends),
            g(&self.tx_from_memory),
            g(&self.tx_connected),
            g(&self.tx_id_probes),
            g(&self.tx_id_probe_failures),
            g(&self.rx_packets),
            g(&self.rx_bytes),
            g(&self.rx_gro_reads),
            g(&self.tx_errors),
            g(&self.tx_malformed),
            g(&self.tx_sport_fallbacks),
            g(&self.rx_ip_id_recovered),
            g(&self.rx_dropped),
            g(&self.rx_injected_drops),
            g(&self.rx_empty),
            g(&self.rx_gro_switches)
        )
    }
}

/// One device's wire as UDP sockets on `ADDR:PORT`.
#[derive(Debug)]
pub struct UdpLink {
    local: SocketAddr,
    rx: UdpSocket,
    /// Sending sockets by UDP source port (created when a port is first used), sorted by
    /// port: a binary search per send, where a `HashMap` hashed the port with SipHash
    /// (~150 instructions a send).
    tx: Vec<(u16, UdpSocket)>,
    /// Sending sockets connected to one peer each, with the IPv4 IDs they stamp: the flows'
    /// sends go out on these once the ID is known (`link::connected`).
    connected: Connected,
    /// Send on connected sockets where the ID can be learned (on by default; off: every
    /// send unconnected, IPv4 ID 0, as before `link::connected`).
    connect: bool,
    /// The IPv4 ID each connected peer most likely sends next (a guess tried before the
    /// solver).
    rx_ids: RxIds,
    /// The receive buffers of [`UdpLink::fill_rx`], reused: each holds one datagram or
    /// `UDP_GRO` train after [`RX_HEADROOM`] bytes, and the first `rx_filled` are waiting
    /// for [`UdpLink::deliver_rx`].
    rx_bufs: Vec<RxBuf>,
    rx_filled: usize,
    /// Whether the receiving socket is read with `UDP_GRO` on (`recvmsg`) or plain
    /// (`recvfrom`), and when that changes (`link::rx_mode`).
    rx_mode: RxMode,
    /// Send segmented trains (`UDP_SEGMENT`); cleared when the kernel refuses one.
    gso: bool,
    /// What [`bytes_wire`] found for each packet of the batch being sent, reused.
    wires: Vec<Option<WireOf>>,
    /// What [`wire_of`] found for the last packets of each kind sent as bytes.
    wire_memo: WireMemo,
    /// The sends one [`UdpLink::send_all`] builds, sent together (`sendmmsg`).
    batch: SendBatch,
    /// How the ICRC changes with the IPv4 ID, by payload length.
    deltas: Ipv4IdSolver,
    /// `deltas` for the IDs of one segmented send, looked up per segment sent, and per
    /// segment received that does not check with ID 0 (segment `k` of a peer's train).
    train_deltas: TrainDeltas,
    /// The IP + UDP headers (IPv4 ID 0) last written in front of received packets, with the
    /// ICRC's CRC state after them (a peer's ACKs and equal-size WRITEs, wherever they sit in
    /// a train, repeat them byte for byte).
    rx_hdrs: HeaderCache,
    /// Drop every n-th packet received (0: none), and how many were received so far.
    drop_every: u64,
    rx_seen: u64,
    counters: Arc<LinkCounters>,
    /// Where every packet sent and received is recorded, when asked.
    pcap: Option<PcapWriter<BufWriter<File>>>,
}

/// Sets `IP_MTU_DISCOVER` (or `IPV6_MTU_DISCOVER`) to "do": DF set, never fragment, and —
/// for IPv4 on an unconnected socket — IP ID 0, the header the peer's ICRC check expects (see
/// the module comment; a connected socket stamps its counter, `link::connected`).
fn set_pmtudisc_do(fd: &impl AsRawFd, v6: bool) -> io::Result<()> {
    let (level, name, value) = if v6 {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    };
    let value: libc::c_int = value;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is an open socket for the duration of the call (borrowed from its owner);
    // the option value points at a live `c_int` and `len` is its size, as setsockopt(2) asks.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast::<libc::c_void>(),
            len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A non-blocking UDP socket bound to `addr` with `IP_PMTUDISC_DO`; `shared` adds
/// `SO_REUSEADDR`/`SO_REUSEPORT` (sending sockets: two links on one host may send from the
/// same source port; nobody sends to those ports).
fn udp_socket(addr: SocketAddr, shared: bool) -> Result<UdpSocket, LinkError> {
    let err = |what| {
        move |e: nix::Error| LinkError::Socket {
            what,
            addr,
            source: io::Error::from(e),
        }
    };
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd: OwnedFd = socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(err("creating a UDP socket"))?;
    if shared {
        setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(err("setting SO_REUSEADDR"))?;
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(err("setting SO_REUSEPORT"))?;
    }
    set_pmtudisc_do(&fd, addr.is_ipv6()).map_err(|source| LinkError::Socket {
        what: "setting IP_MTU_DISCOVER = IP_PMTUDISC_DO",
        addr,
        source,
    })?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).map_err(err("binding"))?;
    Ok(UdpSocket::from(fd))
}

/// A link's sending socket bound to `local` (shared: see [`udp_socket`]).
pub(crate) fn sending_socket(local: SocketAddr) -> Result<UdpSocket, LinkError> {
    udp_socket(local, true)
}

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
        let rx = udp_socket(local, false)?;
        if setsockopt(&rx, sockopt::RcvBufForce, &RCVBUF).is_err() {
            // Best effort: a smaller buffer only costs retransmissions under bursts.
            let _ = setsockopt(&rx, sockopt::RcvBuf, &RCVBUF);
        }
        // Best effort: without UDP_GRO (kernels before 5.0) every datagram is read alone.
        let gro = setsockopt(&rx, sockopt::UdpGroSegment, &true).is_ok();
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
            drop_every: 0,
            rx_seen: 0,
            counters: Arc::new(LinkCounters::default()),
            pcap: None,
        })
    }

    /// Sends on connected sockets (the default: see `link::connected`), or, `false`, every
    /// packet unconnected with IPv4 ID 0 (to measure the difference, or for a peer that
    /// cannot take IDs other than 0).
    pub fn connect_sends(&mut self, on: bool) {
        self.connect = on;
    }

    /// Records every packet the link sends and receives (the IP packets as the device sent
    /// them and as it is handed them, wall-clock timestamps) into a pcap file at `path`.
    /// Wireshark/tshark decode them as RRoCE.
    pub fn record_pcap(&mut self, path: &Path) -> io::Result<()> {
        let f = File::create(path)?;
        self.pcap = Some(PcapWriter::new(BufWriter::new(f))?);
        Ok(())
    }

    fn tee(&mut self, packet: &[u8]) {
        tee(&mut self.pcap, packet);
    }

    /// Drops every `n`-th packet the link receives (0: none), counted in
    /// `rx_injected_drops`: a lossy wire for tests of loss recovery on a real socket (a
    /// packet inside a `UDP_GRO` train can be hit, which `tc netem` cannot do).
    pub fn drop_incoming_every(&mut self, n: u64) {
        self.drop_every = n;
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
    /// as its only GID.
    pub fn profile(&self) -> Profile {
        let mut p = Profile::with_id(1);
        if let Some(port) = p.ports.first_mut() {
            port.gids = vec![self.gid()];
        }
        p
    }

    /// Sends one packet a device transmitted (IP header through ICRC) as a UDP datagram from
    /// the source port in its UDP header to its destination address. False if it was not sent
    /// (counted; the transport recovers as from a loss).
    /// The packet is re-stamped in place with the IPv4 ID of the socket it leaves on (its
    /// ICRC too; see `link::connected`).
    pub fn send(&mut self, packet: &mut [u8]) -> bool {
        let Some(w) = wire_of(packet) else {
            LinkCounters::add(&self.counters.tx_malformed, 1);
            return false;
        };
        self.send_known(packet, &w)
    }

    /// [`UdpLink::send`] of a packet [`wire_of`] already parsed into `w`, re-stamped for the
    /// ID of the socket it leaves on.
    fn send_known(&mut self, packet: &mut [u8], w: &WireOf) -> bool {
        let to = SocketAddr::new(w.dst, self.local.port());
        let route = self.tx_route(w.sport, to);
        if route.id != 0 {
            let header = self.pcap.is_some();
            let (solver, table) = (&mut self.deltas, &mut self.train_deltas);
            let mut delta = |len: usize, id: u16| table.delta(solver, len, id);
            if restamp_known(packet, w, route.id, header, &mut delta).is_none() {
                LinkCounters::add(&self.counters.tx_malformed, 1);
                return false;
            }
        }
        self.tee(packet);
        let payload = packet.get(w.header_len..).unwrap_or(&[]);
        let q = Pending {
            fd: route.fd,
            to,
            conn: route.conn,
            seg: None,
            packets: 1,
            gathered: 0,
        };
        if let Some(conn) = q.conn {
            self.connected.sent(conn);
        }
        LinkCounters::add(&self.counters.tx_send_calls, 1);
        // A connected socket's send names no address (as `flush_sends`).
        let r = match q.conn {
            Some(_) => nix::sys::socket::send(q.fd, payload, nix::sys::socket::MsgFlags::empty()),
            None => nix::sys::socket::sendto(
                q.fd,
                payload,
                &SockaddrStorage::from(to),
                nix::sys::socket::MsgFlags::empty(),
            ),
        };
        let ok = r.is_ok();
        count_send(&self.counters, &mut self.gso, &mut self.connected, &q, r);
        ok
    }

    /// Where a send from source port `sport` to `to` leaves: the flow's connected socket
    /// when its next IPv4 ID is known (with that ID), else the port's unconnected socket
    /// (ID 0). The listening port's own sends stay on the listening socket.
    fn tx_route(&mut self, sport: u16, to: SocketAddr) -> TxRoute {
        if self.connect
            && sport != self.local.port()
            && let Some(r) =
                self.connected
                    .route(self.local.ip(), sport, to, &self.counters, |fd| {
                        self.batch.sends.iter().any(|q| q.fd == fd)
                    })
        {
            return TxRoute {
                fd: r.fd,
                conn: Some(r.conn),
                id: r.id,
            };
        }
        TxRoute {
            fd: self.tx_socket(sport).as_raw_fd(),
            conn: None,
            id: 0,
        }
    }

    /// Sends every packet of `packets` (IP header through ICRC, as the device built them) and
    /// empties it, as the pump sends them (tests drive the link's send path with it).
    #[cfg(test)]
    pub(crate) fn send_batch(&mut self, packets: &mut Vec<Vec<u8>>) {
        let mut out: Vec<Out> = packets.drain(..).map(Out::Bytes).collect();
        self.send_all(&mut out, &Gathered::default());
    }

    /// Sends every packet of `packets`, as bytes (IP header through ICRC, as the device built
    /// them) or as gather lists whose payload lies in `bursts` (see `link::gather`), leaving
    /// them in `packets` (the caller reuses their buffers). A run of consecutive packets to
    /// one peer from one source port whose UDP payloads are equally long (the last may be
    /// shorter) goes out as one segmented send (`UDP_SEGMENT`, Linux `udp_send_skb`): one
    /// system call and one trip through the IP stack for up to 64 packets; the kernel cuts
    /// the train into exactly the datagrams [`UdpLink::send`] would have sent one by one (on
    /// loopback, and to a socket with `UDP_GRO`, it is not even cut: the receiver reads the
    /// train whole). Consecutive sends from one socket are queued and go out together, in
    /// one `sendmmsg` (up to [`MAX_BATCH`]): a window of 4 KiB WRITE packets is about five
    /// trains, five system calls before; measured, 1 MiB WRITE streaming went from 3,689 to
    /// 3,845 MiB/s (medians of three `perf compare-udp --only bw` runs each, interleaved).
    /// A segmented send's iovecs (per packet: the UDP payload's bytes, or the BTH (+RETH),
    /// the payload's host-memory pieces and the pad + ICRC) add up, per segment, to exactly
    /// the segment size the kernel cuts at, and stay within [`IOV_MAX`].
    ///
    /// The IPv4 ID of segment `k` of a train is the send's ID + `k`: segmentation
    /// (`net/ipv4/af_inet.c` `inet_gso_segment`) numbers the segments up from the first's
    /// ID (0 on an unconnected socket with DF, `include/net/ip.h` `ip_select_ident_segs`;
    /// the counted ID on a connected one, `link::connected`), and the ICRC covers the ID, so
    /// segment `k`'s ICRC is changed to that of its ID before it is sent (an XOR,
    /// `link::train_ids`); its own IP header, which the kernel does not read, is re-stamped
    /// with that ID only when a pcap records it (the pcap shows the header as sent).
    pub(crate) fn send_all(&mut self, packets: &mut [Out], bursts: &Gathered) {
        // Each packet is parsed once, here; grouping and re-stamping use what this found.
        let mut wires = std::mem::take(&mut self.wires);
        wires.clear();
        let memo = &mut self.wire_memo;
        wires.extend(packets.iter().map(|p| bytes_wire(p, memo)));
        let mut i = 0;
        while let (Some(rest), Some(rest_wires)) = (packets.get_mut(i..), wires.get(i..)) {
            if rest.is_empty() {
                break;
            }
            let n = if self.gso {
                train_len(rest, rest_wires, bursts)
            } else {
                1
            };
            match (rest.get_mut(..n), rest_wires.get(..n)) {
                (Some(train), Some(train_wires)) if n > 1 => {
                    self.send_train(train, train_wires, bursts);
                }
                _ => match (rest.first_mut(), rest_wires.first()) {
                    (Some(Out::Bytes(p)), Some(Some(w))) => {
                        // In order after what is queued (one `sendto`, no message header).
                        self.flush_sends();
                        self.send_known(p, w);
                    }
                    (Some(Out::Bytes(_)), _) => {
                        LinkCounters::add(&self.counters.tx_malformed, 1);
                    }
                    (Some(Out::Gather(g)), _) => {
                        let w = gather_wire(g, bursts);
                        self.send_gathered(g, w, bursts);
                    }
                    (None, _) => {}
                },
            }
            i += n.max(1);
        }
        self.flush_sends();
        self.wires = wires;
    }

    /// Sends one gather packet alone (the link does not segment, or it leads no train).
    fn send_gathered(&mut self, g: &mut GatherPkt, w: Option<WireOf>, bursts: &Gathered) {
        let Some(w) = w else {
            LinkCounters::add(&self.counters.tx_malformed, 1);
            return;
        };
        let to = SocketAddr::new(w.dst, self.local.port());
        let route = self.tx_route(w.sport, to);
        if route.id != 0 {
            let (solver, table) = (&mut self.deltas, &mut self.train_deltas);
            let mut delta = |len: usize, id: u16| table.delta(solver, len, id);
            if restamp_gather(g, &w, route.id, &mut delta).is_none() {
                LinkCounters::add(&self.counters.tx_malformed, 1);
                return;
            }
        }
        if self.pcap.is_some() {
            let p = bursts.assemble(g).unwrap_or_default();
            self.tee(&p);
        }
        let send = Pending {
            fd: route.fd,
            to,
            conn: route.conn,
            seg: None,
            packets: 1,
            gathered: 1,
        };
        let Some((iov, _)) = self.queue(send) else {
            LinkCounters::add(&self.counters.tx_errors, 1);
            return;
        };
        if !push_gather_iov(g, bursts, iov) {
            self.unqueue_last();
            LinkCounters::add(&self.counters.tx_errors, 1);
        }
    }

    /// Sends `train` (2 or more packets [`train_len`] grouped) as one segmented send.
    /// `wires` is what [`bytes_wire`] found for each packet of `train`.
    fn send_train(&mut self, train: &mut [Out], wires: &[Option<WireOf>], bursts: &Gathered) {
        let n = train.len() as u64;
        let Some(first) = train
            .first()
            .zip(wires.first())
            .and_then(|(p, w)| out_wire(p, *w, bursts))
        else {
            LinkCounters::add(&self.counters.tx_malformed, n);
            return;
        };
        let to = SocketAddr::new(first.dst, self.local.port());
        let route = self.tx_route(first.sport, to);
        // The kernel writes the IP headers of a segmented send itself: a packet's own IP
        // header is only read by the pcap, and re-stamped only for it.
        let header = self.pcap.is_some();
        let (solver, table) = (&mut self.deltas, &mut self.train_deltas);
        let mut delta = |len: usize, id: u16| table.delta(solver, len, id);
        for (k, (p, w)) in train.iter_mut().zip(wires).enumerate() {
            // Segment `k` leaves with the send's ID + `k` (the packets were built with 0).
            let id = route.id.wrapping_add(u16::try_from(k).unwrap_or(u16::MAX));
            let done = id == 0
                || match (p, w) {
                    (Out::Bytes(p), Some(w)) => restamp_known(p, w, id, header, &mut delta),
                    // Its IP version is the first's (`train_len`: same header length).
                    (Out::Gather(g), _) => restamp_gather(g, &first, id, &mut delta),
                    (Out::Bytes(_), None) => None,
                }
                .is_some();
            if !done {
                LinkCounters::add(&self.counters.tx_malformed, 1);
            }
        }
        if self.pcap.is_some() {
            for p in train.iter() {
                match p {
                    Out::Bytes(b) => self.tee(b),
                    Out::Gather(g) => {
                        let b = bursts.assemble(g).unwrap_or_default();
                        self.tee(&b);
                    }
                }
            }
        }
        let Ok(seg) = u16::try_from(first.payload_len) else {
            LinkCounters::add(&self.counters.tx_errors, n);
            return;
        };
        let send = Pending {
            fd: route.fd,
            to,
            conn: route.conn,
            seg: Some(seg),
            packets: n,
            gathered: 0,
        };
        let Some((iov, queued)) = self.queue(send) else {
            LinkCounters::add(&self.counters.tx_errors, n);
            return;
        };
        let mut built = true;
        for p in train.iter() {
            built &= match p {
                Out::Bytes(b) => iov.push_slice(b.get(first.header_len..).unwrap_or(&[])),
                Out::Gather(g) => {
                    queued.gathered += 1;
                    push_gather_iov(g, bursts, iov)
                }
            };
        }
        if !built {
            // More iovecs than one call takes (`train_len` keeps trains below it).
            self.unqueue_last();
            LinkCounters::add(&self.counters.tx_errors, n);
        }
    }

    /// Queues `send` (sent by [`UdpLink::flush_sends`]; what is queued for another socket,
    /// or a full batch, is sent first) and returns its iovec list, empty, to fill, and the
    /// send as queued (`None` cannot happen: both were just made).
    /// A send on a connected socket takes its ID here: the next one queued gets the next.
    fn queue(&mut self, send: Pending) -> Option<(&mut IovList, &mut Pending)> {
        let b = &self.batch;
        if b.sends.len() >= MAX_BATCH || b.sends.last().is_some_and(|q| q.fd != send.fd) {
            self.flush_sends();
        }
        if let Some(conn) = send.conn {
            self.connected.sent(conn);
        }
        let b = &mut self.batch;
        let k = b.sends.len();
        if b.iovs.len() <= k {
            b.iovs.resize_with(k + 1, IovList::default);
        }
        b.sends.push(send);
        // Both are there (`iovs` was just grown to `k + 1`, `send` just pushed).
        let iov = b.iovs.get_mut(k)?;
        iov.clear();
        Some((iov, b.sends.last_mut()?))
    }

    /// Drops the send queued last (its iovecs could not be built; nothing is sent). A
    /// connected socket's count of IDs is then one ahead: it is probed again.
    fn unqueue_last(&mut self) {
        if let Some(conn) = self.batch.sends.pop().and_then(|q| q.conn) {
            self.connected.failed(conn);
        }
    }

    /// Sends what [`UdpLink::queue`] holds: one `sendmsg` for one send, else one `sendmmsg`
    /// for all (they share a socket), and counts what went and what failed.
    fn flush_sends(&mut self) {
        let (b, counters, gso) = (&mut self.batch, &*self.counters, &mut self.gso);
        let connected = &mut self.connected;
        match (b.sends.as_slice(), b.iovs.first()) {
            ([], _) => return,
            ([q], Some(iov)) => {
                // A connected socket's send names no address (one would make the kernel
                // look the route up again, `udp_sendmsg`).
                let to = q.conn.is_none().then(|| SockaddrStorage::from(q.to));
                LinkCounters::add(&counters.tx_send_calls, 1);
                let r = sendmsg_iov(q.fd, iov, q.seg, to.as_ref());
                count_send(counters, gso, connected, q, r);
            }
            (sends, _) => {
                let mut results = [Ok(0usize); MAX_BATCH];
                let calls = sendmmsg_iov(sends, &b.iovs, &mut results);
                LinkCounters::add(&counters.tx_send_calls, calls);
                for (q, r) in sends.iter().zip(results) {
                    count_send(counters, gso, connected, q, r);
                }
            }
        }
        b.sends.clear();
    }

    /// The socket that sends from UDP source port `sport` (bound on first use; the listening
    /// socket when the port cannot be bound, counted).
    fn tx_socket(&mut self, sport: u16) -> &UdpSocket {
        if sport == self.local.port() {
            return &self.rx;
        }
        let at = match self.tx.binary_search_by_key(&sport, |(p, _)| *p) {
            Ok(at) => at,
            Err(at) => match udp_socket(SocketAddr::new(self.local.ip(), sport), true) {
                Ok(s) => {
                    self.tx.insert(at, (sport, s));
                    at
                }
                Err(_) => {
                    LinkCounters::add(&self.counters.tx_sport_fallbacks, 1);
                    return &self.rx;
                }
            },
        };
        self.tx.get(at).map_or(&self.rx, |(_, s)| s)
    }

    /// Reads what is waiting on the socket, up to about `max` packets (and at most
    /// [`RX_BUFS`] datagrams or trains), into the link's receive buffers for
    /// [`UdpLink::deliver_rx`]; returns how many datagrams (or trains) wait there. A read
    /// well short of a full train most likely emptied the socket (a peer's burst fits one
    /// train) and ends the round; full trains mean a stream, and reading goes on.
    pub fn fill_rx(&mut self, max: usize) -> usize {
        let mut packets = 0usize;
        while self.rx_filled < RX_BUFS && packets < max {
            if self.rx_bufs.len() <= self.rx_filled {
                self.rx_bufs.push(RxBuf {
                    data: vec![0; RX_HEADROOM + MAX_DATAGRAM],
                    len: 0,
                    from: self.local,
                    seg: 0,
                });
            }
            let Some(b) = self.rx_bufs.get_mut(self.rx_filled) else {
                break;
            };
            let Some(space) = b.data.get_mut(RX_HEADROOM..) else {
                break;
            };
            let trains = self.rx_mode.reads_trains();
            let (n, from, seg) = match read_datagram(&self.rx, space, &self.counters, trains) {
                Ok(got) => got,
                Err(e) => {
                    if e == nix::errno::Errno::EAGAIN {
                        self.rx_mode.empty();
                    }
                    break;
                }
            };
            if n == 0 {
                // A peer link's ID probe (`link::connected`): nothing to hand on.
                LinkCounters::add(&self.counters.rx_empty, 1);
                continue;
            }
            let seg = if seg == 0 { n.max(1) } else { seg };
            if seg < n {
                LinkCounters::add(&self.counters.rx_gro_reads, 1);
            }
            (b.len, b.from, b.seg) = (n, from, seg);
            self.rx_filled += 1;
            match self.rx_mode.read(seg < n || n >= STREAM_BYTES) {
                Switch::Keep => {}
                Switch::Off => self.set_gro(false),
                Switch::On => self.set_gro(true),
            }
            packets += n.div_ceil(seg);
            if n < GSO_MAX_BYTES / 2 {
                break;
            }
        }
        self.rx_filled
    }

    /// Turns the receiving socket's `UDP_GRO` on or off, as [`RxMode`] asked (a refusal
    /// leaves the mode as it was).
    fn set_gro(&mut self, on: bool) {
        let ok = setsockopt(&self.rx, sockopt::UdpGroSegment, &on).is_ok();
        if ok {
            LinkCounters::add(&self.counters.rx_gro_switches, 1);
        }
        if on {
            self.rx_mode.turned_on(ok);
        } else {
            self.rx_mode.turned_off(ok, Instant::now());
        }
    }

    /// Hands every packet [`UdpLink::fill_rx`] read to `deliver`, in order, as the IP packet
    /// the device takes, with its header fields and whether the link checked its ICRC (see
    /// [`RxPacket`]); returns how many. Each packet's IP + UDP header is rebuilt (as
    /// the module comment says) in the receive buffer right in front of its UDP payload,
    /// over bytes already delivered (the tail of the previous segment, or the headroom), and
    /// the ICRC is checked over the header as written: no copy, no allocation, one header
    /// build and one ICRC pass per packet. `deliver` must be done with a packet when it
    /// returns.
    pub fn deliver_rx(&mut self, mut deliver: impl FnMut(&RxPacket<'_>)) -> usize {
        let Self {
            local,
            rx_bufs,
            rx_filled,
            deltas,
            train_deltas,
            rx_hdrs,
            rx_ids,
            drop_every,
            rx_seen,
            counters,
            pcap,
            ..
        } = self;
        let mut count = 0;
        for b in rx_bufs.iter_mut().take(std::mem::take(rx_filled)) {
            let Some((mut ip, ports)) = rx_fields(*local, b.from) else {
                // No header can say where such a datagram came from: none is delivered.
                let n = b.len.div_ceil(b.seg.max(1)) as u64;
                LinkCounters::add(&counters.rx_dropped, n);
                continue;
            };
            let hl = ip.header_len() + UDP_HDR_LEN;
            let end = RX_HEADROOM + b.len;
            let mut start = RX_HEADROOM;
            let mut k = 0usize;
            // The ID a connected peer's send most likely began with (segment `k` carries it
            // + `k`), then the one segment 0 was found with.
            let mut first = rx_ids.guess(b.from);
            while start < end {
                let stop = start.saturating_add(b.seg).min(end);
                let hint = u16::try_from(k).unwrap_or(0);
                let guess = first.map(|f| f.wrapping_add(hint));
                k += 1;
                let seg_start = std::mem::replace(&mut start, stop);
                *rx_seen += 1;
                if *drop_every > 0 && *rx_seen % *drop_every == 0 {
                    LinkCounters::add(&counters.rx_injected_drops, 1);
                    continue;
                }
                let at = seg_start.saturating_sub(hl);
                let Some((hdr, payload)) = b
                    .data
                    .get_mut(at..stop)
                    .map(|p| p.split_at_mut(seg_start - at))
                else {
                    LinkCounters::add(&counters.rx_dropped, 1);
                    continue;
                };
                let Some(checked) = stamp_header(
                    counters,
                    deltas,
                    train_deltas,
                    rx_hdrs,
                    &mut ip,
                    ports,
                    hdr,
                    payload,
                    (hint, guess),
                ) else {
                    LinkCounters::add(&counters.rx_dropped, 1);
                    continue;
                };
                if k == 1
                    && let IpSpec::V4(v4) = ip
                    && checked
                {
                    // Segment 0's ID starts the train; a non-zero one is a connected
                    // peer's, whose next send takes the next ID.
                    first = (v4.id != 0).then_some(v4.id);
                    if let Some(f) = first {
                        rx_ids.saw(b.from, f);
                    }
                }
                let plen = payload.len();
                let Some(pkt) = b.data.get(at..stop) else {
                    LinkCounters::add(&counters.rx_dropped, 1);
                    continue;
                };
                LinkCounters::add(&counters.rx_packets, 1);
                LinkCounters::add(&counters.rx_bytes, plen as u64);
                if pcap.is_some() {
                    tee(pcap, pkt);
                }
                deliver(&RxPacket {
                    bytes: pkt,
                    ip: &ip,
                    ports,
                    icrc_checked: checked,
                });
                count += 1;
            }
        }
        count
    }

    /// Waits until a datagram is readable or `ms` milliseconds pass.
    #[cfg(test)]
    fn wait_readable(&self, ms: u8) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(self.rx.as_fd(), PollFlags::POLLIN)];
        // EINTR or an error: the caller comes back here anyway.
        let _ = poll(&mut fds, PollTimeout::from(ms));
    }
}

/// Reads one datagram (or `UDP_GRO` train) from `sock` into `buf`: its length, sender and
/// segment size (0: not a train). `trains`: by `recvmsg`, which reports a train's segment
/// size; else by `recvfrom`, one datagram, cheaper (`link::rx_mode`). `Err` when nothing was
/// read: `EAGAIN` (the queue is empty), or an ICMP error reported on the socket.
///
/// Raw `libc` calls rather than nix's: this is the one call of every pump round of a
/// busy-poll loop, and nix's wrapper (its `SockaddrStorage`, `RecvMsg`, control-message
/// iterator and `SocketAddr` conversion) cost ~300 instructions a call more than the call
/// itself; here the header, the address and the one `UDP_GRO` control message are read in
/// place.
fn read_datagram(
    sock: &UdpSocket,
    buf: &mut [u8],
    counters: &LinkCounters,
    trains: bool,
) -> Result<(usize, SocketAddr, usize), nix::errno::Errno> {
    loop {
        // SAFETY: all-zero bytes are a valid `sockaddr_storage` (plain integers).
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let (r, len, seg) = if trains {
            recv_train(sock, buf, &mut from)
        } else {
            recv_plain(sock, buf, &mut from)
        };
        let Ok(n) = usize::try_from(r) else {
            match nix::errno::Errno::last() {
                nix::errno::Errno::EINTR => continue,
                e => return Err(e),
            }
        };
        match sockaddr_of(&from, len) {
            Some(from) => return Ok((n, from, seg)),
            None => LinkCounters::add(&counters.rx_dropped, 1),
        }
    }
}

/// One `recvmsg` into `buf`, the sender into `from`: the call's result, the address length
/// and the `UDP_GRO` segment size.
fn recv_train(
    sock: &UdpSocket,
    buf: &mut [u8],
    from: &mut libc::sockaddr_storage,
) -> (isize, libc::socklen_t, usize) {
    // Room for one cmsghdr and a c_int (CMSG_SPACE(4) is 24 on 64-bit Linux, 16 on 32-bit),
    // aligned as a cmsghdr.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is plain integers and pointers, valid all-zero. Every pointer set in
    // it points at a local, at `from` or at `buf`, each live and exclusively borrowed for
    // the call, with the lengths given: the kernel writes at most `iov_len` bytes of
    // datagram, `msg_namelen` bytes of address and `msg_controllen` bytes of control
    // messages, and reports how much it wrote in the same fields.
    let (r, msg) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_name = std::ptr::from_mut(from).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let r = libc::recvmsg(sock.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT);
        (r, msg)
    };
    (r, msg.msg_namelen, gro_segment(&msg))
}

/// One `recvfrom` into `buf`, the sender into `from`: the call's result, the address length
/// and segment size 0.
fn recv_plain(
    sock: &UdpSocket,
    buf: &mut [u8],
    from: &mut libc::sockaddr_storage,
) -> (isize, libc::socklen_t, usize) {
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `buf` and `from` are live and exclusively borrowed for the call, with the
    // lengths given: the kernel writes at most `buf.len()` bytes of datagram and `len` bytes
    // of address, and reports the address length in `len`.
    let r = unsafe {
        libc::recvfrom(
            sock.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            std::ptr::from_mut(from).cast(),
            &raw mut len,
        )
    };
    (r, len, 0)
}

/// The `UDP_GRO` segment size among the control messages `recvmsg` wrote into `msg` (0: none,
/// the datagram is not a train). Linux `net/ipv4/udp.c` `udp_recvmsg` (and `udp6_recvmsg`)
/// adds it on a socket with `UDP_GRO` through `include/linux/udp.h` `udp_cmsg_recv`: a
/// `SOL_UDP`/`UDP_GRO` message carrying the skb's `gso_size` as an `int`, for a coalesced
/// train only.
fn gro_segment(msg: &libc::msghdr) -> usize {
    let mut seg = 0;
    // SAFETY: `msg` is the header `recvmsg` filled: its control pointer and (updated) length
    // describe control messages the kernel wrote into a buffer still live in the caller;
    // CMSG_FIRSTHDR/CMSG_NXTHDR only return headers that lie within it (or null), and a
    // header of level SOL_UDP and type UDP_GRO carries a c_int, read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                seg = usize::try_from(v).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    seg
}

/// The socket address `recvmsg` wrote into `s` (`len` bytes of it), if IPv4 or IPv6.
fn sockaddr_of(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a `sockaddr_in` (family AF_INET, length checked) at
            // the start of the storage, which is larger and at least as aligned.
            let a = unsafe { &*(std::ptr::from_ref(s).cast::<libc::sockaddr_in>()) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(std::net::SocketAddrV4::new(
                ip,
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, a `sockaddr_in6`.
            let a = unsafe { &*(std::ptr::from_ref(s).cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                std::net::Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                // As std and nix convert it: the raw field (unused by the rebuild).
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Room left before a received datagram in an [`RxBuf`]: the largest IP + UDP header
/// (IPv6), rebuilt there in front of the first segment.
const RX_HEADROOM: usize = MAX_IP_UDP_HDR_LEN;

/// The most receive buffers one pump round fills before the devices run.
const RX_BUFS: usize = 8;

/// One datagram (or `UDP_GRO` train) read by [`UdpLink::fill_rx`], waiting to be delivered.
#[derive(Debug)]
struct RxBuf {
    /// [`RX_HEADROOM`] bytes, then the datagram.
    data: Vec<u8>,
    /// Datagram bytes.
    len: usize,
    from: SocketAddr,
    /// `UDP_GRO` segment size (the datagram's length when it is not a train).
    seg: usize,
}

/// Records `packet` in the pcap file, if one is being written (wall-clock timestamp).
fn tee(pcap: &mut Option<PcapWriter<BufWriter<File>>>, packet: &[u8]) {
    if let Some(w) = pcap.as_mut() {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        if w.write_packet(ts, packet).is_err() {
            // A full disk must not stop the link: stop recording.
            *pcap = None;
        }
    }
}

/// Where a packet goes on the wire and how it is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WireOf {
    /// Its IP header's fields.
    ip: IpSpec,
    /// Its UDP ports.
    ports: UdpPorts,
    dst: IpAddr,
    sport: u16,
    /// Bytes of IP + UDP header before the UDP payload.
    header_len: usize,
    /// Bytes of UDP payload (BTH … ICRC).
    payload_len: usize,
}

/// The destination, source port and layout of a device's packet, if it is RoCEv2 over IP.
fn wire_of(packet: &[u8]) -> Option<WireOf> {
    let p = RocePacket::parse(packet).ok()?;
    let dst = p.ip().dst_addr();
    let payload_len = p.udp_payload().len();
    Some(WireOf {
        ip: *p.ip(),
        ports: p.ports(),
        dst,
        sport: p.ports().src,
        header_len: packet.len().checked_sub(payload_len)?,
        payload_len,
    })
}

/// The longest IP + UDP header: IPv6's.
const MEMO_HEADER: usize = MAX_IP_UDP_HDR_LEN;

/// The packets of one kind a device sends (a flow's ACKs, its small WRITEs) have the same
/// IP and UDP headers, byte for byte (the IPv4 ID is 0, the PSN is past them): what
/// [`wire_of`] found for the last two kinds, by their headers and packet length.
#[derive(Debug, Default)]
struct WireMemo {
    slots: [Option<(usize, [u8; MEMO_HEADER], WireOf)>; 2],
    /// The slot the next new kind replaces.
    next: usize,
}

impl WireMemo {
    /// [`wire_of`] for `packet`, or what it found for a packet of the same length whose IP and
    /// UDP headers are the same bytes (everything `WireOf` holds is read from those, and the
    /// split between headers and payload from them and the length). The send reads no more
    /// of a packet than that; the devices build their transport headers whole (a packet
    /// would be refused by its receiver otherwise, and counted there).
    fn wire_of(&mut self, packet: &[u8]) -> Option<WireOf> {
        for (len, head, w) in self.slots.iter().flatten() {
            if *len == packet.len() && same_header(head, packet, w.header_len) {
                return Some(*w);
            }
        }
        let w = wire_of(packet)?;
        let mut head = [0u8; MEMO_HEADER];
        if let (Some(dst), Some(src)) = (head.get_mut(..w.header_len), packet.get(..w.header_len)) {
            dst.copy_from_slice(src);
            if let Some(slot) = self.slots.get_mut(self.next) {
                *slot = Some((packet.len(), head, w));
                self.next = (self.next + 1) % 2;
            }
        }
        Some(w)
    }
}

/// Whether the first `n` bytes of `packet` are the IP + UDP header `head` holds
/// (`ip::same_ip_udp`: word compares, no `memcmp` per packet sent).
#[inline]
fn same_header(head: &[u8; MEMO_HEADER], packet: &[u8], n: usize) -> bool {
    head.get(..n)
        .zip(packet.get(..n))
        .is_some_and(|(h, p)| bypass_hw::roce::ip::same_ip_udp(h, p))
}

/// What [`wire_of`] finds for a packet sent as bytes (`None` for a gather packet: its burst
/// knows, [`gather_wire`], and a train of them is grouped without it).
#[inline]
fn bytes_wire(p: &Out, memo: &mut WireMemo) -> Option<WireOf> {
    match p {
        Out::Bytes(b) => memo.wire_of(b),
        Out::Gather(_) => None,
    }
}

/// What [`wire_of`] would find for gather packet `g` (from its burst in `bursts`).
fn gather_wire(g: &GatherPkt, bursts: &Gathered) -> Option<WireOf> {
    bursts.burst(g).map(|b| WireOf {
        ip: b.ip,
        ports: b.ports,
        dst: b.ip.dst_addr(),
        sport: b.ports.src,
        header_len: b.ip.header_len() + UDP_HDR_LEN,
        payload_len: g.udp_len(),
    })
}

/// What [`wire_of`] finds for packet `p` on its way out, given what [`bytes_wire`] found.
fn out_wire(p: &Out, w: Option<WireOf>, bursts: &Gathered) -> Option<WireOf> {
    match p {
        Out::Bytes(_) => w,
        Out::Gather(g) => gather_wire(g, bursts),
    }
}

/// The iovecs a packet takes in a send: its UDP payload bytes, or a gather packet's BTH
/// (+RETH), payload pieces and pad + ICRC.
fn iov_count(p: &Out) -> usize {
    match p {
        Out::Bytes(_) => 1,
        Out::Gather(g) => 2 + g.pieces(),
    }
}

/// How many packets from the front of `packets` form one segmented send: the same peer and
/// source port, equal UDP payload lengths except a shorter last one, at most
/// [`GSO_MAX_SEGS`] packets, [`GSO_MAX_BYTES`] bytes and [`IOV_MAX`] iovecs. 1 when the
/// first cannot lead one. `wires` is what [`bytes_wire`] found for each; a gather packet
/// after one of the same burst goes where that one goes: only its length is compared.
fn train_len(packets: &[Out], wires: &[Option<WireOf>], bursts: &Gathered) -> usize {
    let Some(first) = packets
        .first()
        .zip(wires.first())
        .and_then(|(p, w)| out_wire(p, *w, bursts))
    else {
        return 1;
    };
    let (mut n, mut bytes) = (1usize, first.payload_len);
    let mut iovs = packets.first().map_or(0, iov_count);
    let mut prev = packets.first();
    for (w, p) in wires.iter().zip(packets).skip(1) {
        let payload_len = match (prev, p) {
            (Some(Out::Gather(a)), Out::Gather(b)) if a.same_burst(b) => b.udp_len(),
            _ => {
                let Some(w) = out_wire(p, *w, bursts) else {
                    break;
                };
                if w.dst != first.dst || w.sport != first.sport || w.header_len != first.header_len
                {
                    break;
                }
                w.payload_len
            }
        };
        prev = Some(p);
        if n >= GSO_MAX_SEGS
            || payload_len > first.payload_len
            || bytes + payload_len > GSO_MAX_BYTES
            || iovs + iov_count(p) > IOV_MAX
        {
            break;
        }
        n += 1;
        bytes += payload_len;
        iovs += iov_count(p);
        if payload_len < first.payload_len {
            break;
        }
    }
    n
}

/// Appends gather packet `g`'s iovecs to `iov`: the UDP payload's BTH (+RETH) from its
/// header buffer, the payload from the sender's memory, the pad and ICRC. False if they do
/// not fit in one call or the payload cannot be found (nothing is sent then).
fn push_gather_iov(g: &GatherPkt, bursts: &Gathered, iov: &mut IovList) -> bool {
    iov.push_slice(g.hdr())
        && bursts.payload_iovecs(g).is_some_and(|p| iov.extend(p))
        && iov.push_slice(g.tail())
}

/// The most sends one `sendmmsg` carries (a pump round's window of 64 4 KiB packets is about
/// five segmented sends).
const MAX_BATCH: usize = 16;

/// Where [`UdpLink::tx_route`] sends a flow's packets: the socket, which connected socket it
/// is (`None`: unconnected), and the IPv4 ID its next datagram gets (0 unconnected).
#[derive(Debug, Clone, Copy)]
struct TxRoute {
    fd: std::os::fd::RawFd,
    conn: Option<u32>,
    id: u16,
}

/// One send queued by [`UdpLink::queue`]: socket, destination, segment size (`None`: one
/// datagram), and what it carries, for the counters.
#[derive(Debug)]
struct Pending {
    fd: std::os::fd::RawFd,
    to: SocketAddr,
    /// The connected socket `fd` is (`None`: an unconnected one, sent to `to`).
    conn: Option<u32>,
    seg: Option<u16>,
    packets: u64,
    gathered: u64,
}

/// The sends of one [`UdpLink::send_all`], all from one socket, and their iovec lists (kept
/// for reuse: `iovs[k]` is send `k`'s).
#[derive(Debug, Default)]
struct SendBatch {
    sends: Vec<Pending>,
    iovs: Vec<IovList>,
}

/// Writes a `UDP_SEGMENT` control message of `seg` into `control` and points `msg` at it
/// (`msg` then borrows `control`: it must not be used after `control` goes). False if it
/// does not fit.
fn set_segment(msg: &mut libc::msghdr, control: &mut [u64; 4], seg: u16) -> bool {
    // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic. `msg` is a valid msghdr whose control
    // buffer is set to `control`, which holds CMSG_SPACE(2) bytes (checked), so CMSG_FIRSTHDR
    // gives a header inside it with room for CMSG_LEN(2) bytes; the u16 is written
    // unaligned.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32);
        if space as usize > std::mem::size_of_val(control) {
            return false;
        }
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(msg);
        if c.is_null() {
            return false;
        }
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
    }
    true
}

/// Counts one send's outcome; a segmented send the kernel cannot do at all clears `gso`.
/// A failed send on a connected socket leaves its count of IDs uncertain: it is probed again.
fn count_send(
    counters: &LinkCounters,
    gso: &mut bool,
    connected: &mut Connected,
    q: &Pending,
    r: Result<usize, nix::errno::Errno>,
) {
    if q.conn.is_some() {
        LinkCounters::add(&counters.tx_connected, 1);
    }
    match r {
        Ok(bytes) => {
            LinkCounters::add(&counters.tx_packets, q.packets);
            LinkCounters::add(&counters.tx_bytes, bytes as u64);
            if q.seg.is_some() {
                LinkCounters::add(&counters.tx_gso_sends, 1);
            }
            LinkCounters::add(&counters.tx_from_memory, q.gathered);
        }
        Err(e) => {
            // A kernel or route without UDP segmentation (EINVAL, EOPNOTSUPP, EIO): send one
            // datagram at a time from now on. The train is lost either way; the transport
            // retransmits it.
            if q.seg.is_some()
                && matches!(
                    e,
                    nix::errno::Errno::EINVAL
                        | nix::errno::Errno::EOPNOTSUPP
                        | nix::errno::Errno::EIO
                        | nix::errno::Errno::ENOPROTOOPT
                )
            {
                *gso = false;
            }
            if let Some(conn) = q.conn {
                connected.failed(conn);
            }
            LinkCounters::add(&counters.tx_errors, q.packets);
        }
    }
}

/// `sendmmsg` of `sends` (all on one socket; send `k`'s iovecs in `iovs[k]`): one system call
/// for up to [`MAX_BATCH`] sends, where a pump round would make one per train. Each send's
/// outcome goes to `results[k]`: the bytes sent, or the error of the call that failed on it
/// (the kernel stops at a send that fails and returns how many it sent, the error only when
/// the first fails: Linux `net/socket.c` `__sys_sendmmsg`, "We only return an error if no
/// datagrams were able to be sent"; the ones after it are tried again). EINTR is retried.
/// Returns how many `sendmmsg` calls it made.
fn sendmmsg_iov(
    sends: &[Pending],
    iovs: &[IovList],
    results: &mut [Result<usize, nix::errno::Errno>; MAX_BATCH],
) -> u64 {
    use nix::sys::socket::SockaddrLike;
    let n = sends.len().min(MAX_BATCH).min(iovs.len());
    let Some(fd) = sends.first().map(|q| q.fd) else {
        return 0;
    };
    let mut calls = 0u64;
    let mut controls = [[0u64; 4]; MAX_BATCH];
    // A connected socket's sends name no address.
    let addrs: [Option<SockaddrStorage>; MAX_BATCH] = std::array::from_fn(|k| {
        sends
            .get(k)
            .filter(|q| q.conn.is_none())
            .map(|q| SockaddrStorage::from(q.to))
    });
    // SAFETY: `mmsghdr` is plain integers and pointers, valid all-zero.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    let built = sends
        .iter()
        .zip(iovs)
        .zip(hdrs.iter_mut().zip(controls.iter_mut()))
        .zip(addrs.iter().zip(results.iter_mut()));
    for (((q, iov), (h, control)), (to, result)) in built {
        if let Some(to) = to {
            h.msg_hdr.msg_name = to.as_ptr().cast_mut().cast();
            h.msg_hdr.msg_namelen = to.len();
        }
        h.msg_hdr.msg_iov = iov.as_iovecs().cast_mut();
        // At most IOV_MAX (1024): fits `msg_iovlen` on every target.
        h.msg_hdr.msg_iovlen = iov.len() as _;
        if let Some(seg) = q.seg
            && !set_segment(&mut h.msg_hdr, control, seg)
        {
            *result = Err(nix::errno::Errno::EINVAL);
        }
    }
    let mut done = 0usize;
    while done < n {
        let (Some(rs), Some(hs)) = (results.get_mut(done..n), hdrs.get_mut(done..n)) else {
            break;
        };
        // The run of sends from `done` whose headers were built (none: the first's control
        // message could not be built, it is not sent).
        let run = rs.iter().take_while(|r| r.is_ok()).count();
        if run == 0 {
            done += 1;
            continue;
        }
        // SAFETY: `hs[..run]` are valid headers whose every pointer (`addrs`, `iovs`' arrays,
        // `controls`, and the memory the iovecs point at: the link's buffers or host memory
        // the caller keeps until `send_all` returns) outlives the call; the kernel writes
        // only `msg_len` of each.
        let r = unsafe { libc::sendmmsg(fd, hs.as_mut_ptr(), run as _, 0) };
        calls += 1;
        match usize::try_from(r) {
            Ok(sent) if sent > 0 => {
                let sent = sent.min(run);
                for (r, h) in rs.iter_mut().zip(hs.iter()).take(sent) {
                    *r = Ok(h.msg_len as usize);
                }
                done += sent;
            }
            _ => match nix::errno::Errno::last() {
                nix::errno::Errno::EINTR if r < 0 => {}
                e => {
                    // The first of the run failed (the kernel reports an error only when
                    // nothing was sent): it is lost, the rest are tried again.
                    if let Some(first) = rs.first_mut() {
                        *first = Err(if r < 0 { e } else { nix::errno::Errno::EIO });
                    }
                    done += 1;
                }
            },
        }
    }
    calls
}

/// Linux `UDP_SEGMENT` (`include/uapi/linux/udp.h`; the `libc` crate defines it only for
/// some targets): the segment size of a segmented send, as a `SOL_UDP` control message.
const UDP_SEGMENT: libc::c_int = 103;

/// `sendmsg` of the iovecs `iov` to `to` on socket `fd` (`None`: the socket's connected
/// peer), with a `UDP_SEGMENT` control message of `seg` when given; the bytes sent. EINTR is
/// retried.
///
/// Raw `libc::sendmsg` rather than nix's: nix takes `IoSlice`s, Rust references, and a
/// gather packet's payload must stay unreferenced host memory (see `link::gather`).
fn sendmsg_iov(
    fd: std::os::fd::RawFd,
    iov: &IovList,
    seg: Option<u16>,
    to: Option<&SockaddrStorage>,
) -> Result<usize, nix::errno::Errno> {
    use nix::sys::socket::SockaddrLike;
    // Room for one cmsghdr and a u16, aligned as a cmsghdr (CMSG_SPACE(2) is 24 on 64-bit
    // Linux, 16 on 32-bit).
    let mut control = [0u64; 4];
    // At most IOV_MAX (1024), which fits `msg_iovlen` on every target (`size_t` for glibc,
    // `c_int` for musl).
    let iovlen = iov.len() as _;
    loop {
        // SAFETY: `msghdr` is plain integers and pointers, valid all-zero (no name, no
        // iovecs, no control). Every pointer set below outlives the call: `to`'s address and
        // `control` are borrowed for this block, `iov`'s array is borrowed and unchanged, and
        // the memory each iovec points at is the link's own buffers or host memory the
        // caller keeps allocated until this returns (`link::gather`).
        let r = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            if let Some(to) = to {
                msg.msg_name = to.as_ptr().cast_mut().cast();
                msg.msg_namelen = to.len();
            }
            msg.msg_iov = iov.as_iovecs().cast_mut();
            msg.msg_iovlen = iovlen;
            if let Some(seg) = seg
                && !set_segment(&mut msg, &mut control, seg)
            {
                return Err(nix::errno::Errno::EINVAL);
            }
            libc::sendmsg(fd, &raw const msg, 0)
        };
        match usize::try_from(r) {
            Ok(n) => return Ok(n),
            Err(_) => match nix::errno::Errno::last() {
                nix::errno::Errno::EINTR => continue,
                e => return Err(e),
            },
        }
    }
}

/// [`restamp_known`] for a gather packet going where `w` says: the ICRC in its tail changed
/// by `delta` (no pass over the payload) to that of IPv4 ID `id`, which it records (the pcap
/// writes its IP header from it).
fn restamp_gather(
    g: &mut GatherPkt,
    w: &WireOf,
    id: u16,
    delta: &mut impl FnMut(usize, u16) -> Option<u32>,
) -> Option<()> {
    let IpSpec::V4(_) = w.ip else {
        return Some(());
    };
    let delta = delta(g.udp_len(), id ^ g.ip_id)?;
    g.ip_id = id;
    let slot = g.icrc_mut()?;
    let icrc = bypass_hw::roce::icrc::wire_value(slot)? ^ delta;
    slot.copy_from_slice(&icrc.to_le_bytes());
    Some(())
}

/// Gives an IPv4 packet built with IP ID 0, which [`wire_of`] parsed into `w`, the IP ID `id`
/// (header checksum too) and the ICRC that goes with it (`icrc(0) ^ delta(id)`, see
/// [`Ipv4IdSolver`], `delta` here); IPv6 packets (no ID) are left as they are. The IP header
/// is rewritten only when `header` (a segmented send's headers are the kernel's: only the
/// pcap reads the packet's). `None` if it cannot be done (a length the solver has no table
/// for, a packet shorter than its headers).
fn restamp_known(
    packet: &mut [u8],
    w: &WireOf,
    id: u16,
    header: bool,
    delta: &mut impl FnMut(usize, u16) -> Option<u32>,
) -> Option<()> {
    let IpSpec::V4(v4) = w.ip else {
        return Some(());
    };
    let (ports, n) = (w.ports, w.payload_len);
    let delta = delta(n, id ^ v4.id)?;
    if header {
        IpSpec::V4(Ipv4Spec { id, ..v4 })
            .write_ip_udp(ports, n, packet)
            .ok()?;
    }
    let tail = packet.len().checked_sub(4)?;
    let icrc = bypass_hw::roce::icrc::wire_value(packet.get(tail..)?)? ^ delta;
    packet.get_mut(tail..)?.copy_from_slice(&icrc.to_le_bytes());
    Some(())
}

/// The IP header fields (IPv4: ID 0, see [`stamp_header`]) and UDP ports of a datagram from
/// `from` to `local`, rebuilt as the module comment says; `None` when the two addresses are
/// of different families.
fn rx_fields(local: SocketAddr, from: SocketAddr) -> Option<(IpSpec, UdpPorts)> {
    let ip = match (from.ip(), local.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpSpec::V4(Ipv4Spec {
            src: src.octets(),
            dst: dst.octets(),
            tos: 0,
            ttl: DEFAULT_TTL,
            id: 0,
            dont_fragment: true,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpSpec::V6(Ipv6Spec {
            src: src.octets(),
            dst: dst.octets(),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: DEFAULT_TTL,
        }),
        _ => return None,
    };
    let ports = UdpPorts {
        src: from.port(),
        dst: ROCE_V2_UDP_DPORT,
    };
    Some((ip, ports))
}

/// The ICRC of the packet whose IP + UDP header has the CRC state `crc` and whose UDP payload
/// is `payload` (one CRC pass over the payload; the payload is left as it was), or `None` when
/// the payload cannot hold a BTH and an ICRC.
fn icrc_of(crc: &IcrcHeaderState, payload: &mut [u8]) -> Option<u32> {
    let body_end = payload.len().checked_sub(ICRC_LEN)?;
    crc.icrc_in_place(payload.get_mut(..body_end)?).ok()
}

/// Writes the IP + UDP header of UDP payload `payload` into `hdr` (exactly its length) from
/// `ip` and `ports`, and checks the packet's ICRC: the one header build and the one ICRC pass
/// of a received packet (the device then takes the header as given,
/// `Device::receive_udp_in_place`). The header is written with IPv4 ID 0, from `hdrs` (a
/// copy and a kept CRC state when these fields and this length came lately, whatever the
/// packet's place in a train), and the ICRC `c0` computed over it. IPv4: the ID is 0 if
/// `c0` matches; else `guess` (a connected bypass peer's next ID, `link::connected`) if
/// `c0 ^ delta(guess)` does, or `hint` (segment `hint` of an unconnected bypass peer's
/// train), `delta` from `trains`, the table the send side stamps train segments with; else
/// the ID [`Ipv4IdSolver`] finds by XOR (rxe's random IDs, a connected peer's first; one up
/// to 64 behind `guess`, a connected peer's send after a train read one datagram at a time,
/// is not counted as recovered). The header's ID and checksum
/// are then set to the ID found (`ip::set_ipv4_id`), which is left in `ip`. True when the ICRC matches the header as
/// written; false (an ICRC no ID explains, or a payload too short to carry one) leaves the
/// check to the device, IPv4 with ID 0, which counts the error as it should. `None` only
/// when no header can be written (a datagram over 64 KiB).
#[allow(clippy::too_many_arguments)] // the receive path's state, borrowed field by field
fn stamp_header(
    counters: &LinkCounters,
    solver: &mut Ipv4IdSolver,
    trains: &mut TrainDeltas,
    hdrs: &mut HeaderCache,
    ip: &mut IpSpec,
    ports: UdpPorts,
    hdr: &mut [u8],
    payload: &mut [u8],
    (hint, guess): (u16, Option<u16>),
) -> Option<bool> {
    let n = payload.len();
    if let IpSpec::V4(v4) = ip {
        v4.id = 0;
    }
    // The header with ID 0 as `write_ip_udp` writes it, copied when these fields came lately.
    let crc = hdrs.write(ip, ports, n, hdr)?;
    let (Some(want), Some(c0)) = (
        bypass_hw::roce::icrc::wire_value(payload),
        icrc_of(crc, payload),
    ) else {
        return Some(false);
    };
    if c0 == want {
        return Some(true);
    }
    let IpSpec::V4(_) = ip else {
        return Some(false);
    };
    // With ID `id` the ICRC is `c0 ^ delta(id)` (see `Ipv4IdSolver`).
    let mut matches =
        |id: u16| id != 0 && trains.delta(solver, n, id).is_some_and(|d| c0 ^ d == want);
    let found = if let Some(g) = guess.filter(|&g| matches(g)) {
        Some(g)
    } else if matches(hint) {
        Some(hint)
    } else {
        let id = solver.solve(n, want ^ c0);
        // A connected peer's send after a train of k segments takes the train's first ID + 1,
        // k - 1 behind the guess (one ID per send, `link::connected`): read whole, the train
        // moved the guess by one; read one datagram at a time (`UDP_GRO` off,
        // `link::rx_mode`), by k. Such an ID was expected, not recovered.
        let expected = |id: u16| {
            guess.is_some_and(|g| (1..=GSO_MAX_SEGS as u16).contains(&g.wrapping_sub(id)))
        };
        if id.is_some_and(|id| id != 0 && !expected(id)) {
            LinkCounters::add(&counters.rx_ip_id_recovered, 1);
        }
        id
    };
    restamp_id(ip, hdr, found.unwrap_or(0))?;
    Some(found.is_some())
}

/// Gives header `hdr` of an IPv4 packet, as `write_ip_udp` wrote it from `ip`, the ID `id`
/// (and the checksum that goes with it: `ip::set_ipv4_id`, a few adds), `ip` with it.
fn restamp_id(ip: &mut IpSpec, hdr: &mut [u8], id: u16) -> Option<()> {
    if let IpSpec::V4(v4) = ip
        && v4.id != id
    {
        v4.id = id;
        bypass_hw::roce::ip::set_ipv4_id(hdr, id).ok()?;
    }
    Some(())
}

/// The IPv4 ID the sender hashed into the ICRC of `payload`, which a UDP socket does not
/// report: 0 when the packet checks with ID 0 (what an unconnected socket with
/// `IP_PMTUDISC_DO` sends), else the one ID whose ICRC matches, or `None`.
///
/// Linux rxe fills the ID with `__ip_select_ident` (random) in `rxe_net.c`
/// `prepare_ipv4_hdr` before `rxe_icrc_generate`, and `rxe_icrc.c` `rxe_icrc_hdr` does not
/// mask it. The ICRC is a CRC-32, affine in its input, so `icrc(id) ^ icrc(0)` is linear in
/// the 16 bits of `id`: the ID follows from the 16 single-bit differences by Gaussian
/// elimination over GF(2) (17 CRCs, only for packets that fail with ID 0). Such packets keep
/// 16 of the ICRC's 32 bits of protection against corruption. One packet at a time: the link
/// keeps an [`Ipv4IdSolver`], which computes the 16 differences once per packet length.
pub fn recover_ipv4_id(ip: &Ipv4Spec, ports: UdpPorts, payload: &[u8]) -> Option<u16> {
    Ipv4IdSolver::new().recover(ip, ports, payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Burst;
    use crate::link::gather;
    use bypass_hw::roce::{BthFields, BthOpcode, DEFAULT_PKEY, ExtFields, PacketSpec, emit};
    use std::net::Ipv4Addr;
    use std::time::Duration;

    /// The wire bytes of an `opcode` packet for QP 0x11 between `ip`'s addresses, from UDP
    /// source port `sport`, with PSN `psn` and `payload`.
    fn built(ip: IpSpec, sport: u16, opcode: BthOpcode, psn: u32, payload: &[u8]) -> Vec<u8> {
        let spec = PacketSpec {
            ip,
            ports: UdpPorts {
                src: sport,
                dst: ROCE_V2_UDP_DPORT,
            },
            bth: BthFields {
                opcode,
                pkey: DEFAULT_PKEY,
                dest_qp: 0x11,
                psn,
                ..Default::default()
            },
            ext: ExtFields::default(),
            payload,
        };
        let mut buf = vec![0u8; spec.packet_len().unwrap()];
        emit(&spec, &mut buf).unwrap();
        buf
    }

    fn packet(src: [u8; 4], dst: [u8; 4], sport: u16) -> Vec<u8> {
        let ip = IpSpec::from_gids(&Profile::ipv4_gid(src), &Profile::ipv4_gid(dst)).unwrap();
        built(ip, sport, BthOpcode::RC_SEND_ONLY, 7, b"hello rxe")
    }

    fn link(last: u8) -> UdpLink {
        UdpLink::bind(SocketAddr::new(Ipv4Addr::new(127, 0, 0, last).into(), 0)).unwrap()
    }

    /// A link on 127.0.0.1 bound to `to`'s port: a link sends to its own port number, so
    /// this is the sender whose packets reach `to`.
    fn sender_to(to: &UdpLink) -> UdpLink {
        UdpLink::bind(SocketAddr::new(
            Ipv4Addr::new(127, 0, 0, 1).into(),
            to.local_addr().port(),
        ))
        .unwrap()
    }

    /// The one packet `l` receives next, as handed to the device.
    fn recv_wait(l: &mut UdpLink) -> Vec<u8> {
        let mut got = recv_n(l, 1);
        assert_eq!(got.len(), 1, "one packet on {}", l.local_addr());
        got.remove(0)
    }

    /// The next `n` packets `l` receives, as handed to the device.
    fn recv_n(l: &mut UdpLink, n: usize) -> Vec<Vec<u8>> {
        let got: Vec<Vec<u8>> = deliver_n(l, n).into_iter().map(|(p, _)| p).collect();
        assert_eq!(got.len(), n, "{n} packets on {}", l.local_addr());
        got
    }

    #[test]
    fn a_packet_crosses_the_socket_with_its_source_port_and_a_valid_icrc() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        let sent = packet([127, 0, 0, 1], [127, 0, 0, 2], 0xc123);
        assert!(a.send(&mut sent.clone()));
        let got = recv_wait(&mut b);
        // Sent on a connected socket: with its ID, which the ICRC covers.
        assert_eq!(a.counters().tx_connected.load(Ordering::Relaxed), 1);
        assert_eq!(
            id0(&got),
            sent,
            "the rebuilt packet is the one the device built"
        );
        let p = RocePacket::parse(&got).unwrap();
        assert!(p.icrc_ok());
        assert_eq!(p.ports().src, 0xc123);
        assert_eq!(a.counters().tx_packets.load(Ordering::Relaxed), 1);
        assert_eq!(b.counters().rx_packets.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_packet_from_another_source_port_fails_the_icrc_as_rxe_would() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // Built for source port 0xc001 but sent from 0xc002: the ICRC covers the port.
        let mut sent = packet([127, 0, 0, 1], [127, 0, 0, 2], 0xc001);
        let p = RocePacket::parse(&sent).unwrap();
        let payload = p.udp_payload().to_vec();
        let hl = sent.len() - payload.len();
        sent.truncate(hl);
        let s = a.tx_socket(0xc002);
        s.send_to(&payload, b.local_addr()).unwrap();
        let got = recv_wait(&mut b);
        assert!(!RocePacket::parse(&got).unwrap().icrc_ok());
    }

    /// Sends `packet`'s UDP payload to `to` from a socket bound to its UDP source port.
    fn send_raw(from: &mut UdpLink, packet: &[u8], to: SocketAddr) {
        let p = RocePacket::parse(packet).unwrap();
        let payload = p.udp_payload().to_vec();
        from.tx_socket(p.ports().src).send_to(&payload, to).unwrap();
    }

    #[test]
    fn a_random_ipv4_id_like_rxe_sends_is_recovered_from_the_icrc() {
        let mut b = link(2);
        let mut a = link(1);
        // What rxe does: a random IP ID, hashed into the ICRC.
        let mut sent = with_id(&packet([127, 0, 0, 1], [127, 0, 0, 2], 0xc0aa), 0xbeef);
        send_raw(&mut a, &sent, b.local_addr());
        let got = recv_wait(&mut b);
        assert_eq!(got, sent, "the rebuilt header carries ID 0xbeef");
        assert!(RocePacket::parse(&got).unwrap().icrc_ok());
        assert_eq!(b.counters().rx_ip_id_recovered.load(Ordering::Relaxed), 1);

        // A corrupted payload is explained by no ID: it keeps ID 0 and fails the ICRC.
        let hl = sent.len() - RocePacket::parse(&sent).unwrap().udp_payload().len();
        sent[hl + 20] ^= 0x40;
        send_raw(&mut a, &sent, b.local_addr());
        let got = recv_wait(&mut b);
        assert!(!RocePacket::parse(&got).unwrap().icrc_ok());
    }

    /// A packet of `len` payload bytes from 127.0.0.1 to 127.0.0.2, PSN `psn`.
    fn sized(psn: u32, len: usize, sport: u16) -> Vec<u8> {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + psn as usize) as u8).collect();
        let ip = IpSpec::from_gids(
            &Profile::ipv4_gid([127, 0, 0, 1]),
            &Profile::ipv4_gid([127, 0, 0, 2]),
        )
        .unwrap();
        built(ip, sport, BthOpcode::RC_RDMA_WRITE_MIDDLE, psn, &data)
    }

    #[test]
    fn the_wire_memo_finds_what_a_parse_finds_for_packets_of_the_same_headers() {
        let mut memo = WireMemo::default();
        let ip6 = IpSpec::from_gids(&[0xfe; 16], &[0xfd; 16]).unwrap();
        let kinds = [
            sized(1, 64, 0xc000),
            sized(2, 64, 0xc000),
            sized(3, 80, 0xc000),
            sized(4, 64, 0xc001),
            built(ip6, 0xc000, BthOpcode::RC_SEND_ONLY, 5, b"six"),
            // IPv6 headers that differ in the last 8-byte word only (the source port).
            built(ip6, 0xc001, BthOpcode::RC_SEND_ONLY, 5, b"six"),
            with_id(&sized(6, 64, 0xc000), 9),
        ];
        for round in 0..3 {
            for p in &kinds {
                let w = memo.wire_of(p);
                assert!(w.is_some());
                assert_eq!(w, wire_of(p), "round {round}");
            }
        }
        // A packet no parse accepts is not taken for one of the same length.
        let mut bad = sized(7, 64, 0xc000);
        bad[9] = 6; // TCP
        assert_eq!(memo.wire_of(&bad), None);
    }

    /// [`restamp_known`], parsing the packet first.
    fn restamp_ipv4_id(packet: &mut [u8], id: u16, deltas: &mut Ipv4IdSolver) -> Option<()> {
        let w = wire_of(packet)?;
        restamp_known(packet, &w, id, true, &mut |n, id| deltas.delta(n, id))
    }

    /// `packet` as the device built it, IPv4 ID 0 (header checksum and ICRC changed with it):
    /// a link's connected sockets send with their own IDs (`link::connected`), which the
    /// ICRC covers.
    fn id0(packet: &[u8]) -> Vec<u8> {
        let mut p = packet.to_vec();
        if let Some(w) = wire_of(&p)
            && let IpSpec::V4(v4) = w.ip
            && v4.id != 0
        {
            restamp_ipv4_id(&mut p, 0, &mut Ipv4IdSolver::new()).unwrap();
        }
        p
    }

    /// `packet` with IPv4 ID `id`, header checksum and ICRC recomputed from scratch.
    fn with_id(packet: &[u8], id: u16) -> Vec<u8> {
        let p = RocePacket::parse(packet).unwrap();
        let IpSpec::V4(v4) = *p.ip() else {
            unreachable!()
        };
        let ip = IpSpec::V4(Ipv4Spec { id, ..v4 });
        let ports = p.ports();
        let mut payload = p.udp_payload().to_vec();
        let icrc = bypass_hw::roce::icrc::compute_udp_payload(&ip, ports, &payload).unwrap();
        let n = payload.len();
        payload[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        let mut out = packet.to_vec();
        ip.write_ip_udp(ports, n, &mut out).unwrap();
        let hl = out.len() - n;
        out[hl..].copy_from_slice(&payload);
        out
    }

    #[test]
    fn restamping_the_ip_id_by_delta_gives_the_icrc_a_full_pass_computes() {
        let mut d = Ipv4IdSolver::new();
        for len in [0usize, 1, 8, 255, 1024, 4096] {
            let p = sized(3, len, 0xc001);
            for id in [1u16, 2, 7, 63, 0x8001, 0xffff] {
                let mut q = p.clone();
                restamp_ipv4_id(&mut q, id, &mut d).unwrap();
                assert_eq!(q, with_id(&p, id), "len {len} id {id}");
                assert!(RocePacket::parse(&q).unwrap().icrc_ok());
            }
        }
    }

    /// `got` holds exactly `expected`'s packets from each of `sports`, in `expected`'s order:
    /// datagrams from two source sockets may interleave, so the order is compared per port.
    fn assert_same_per_port(got: &[Vec<u8>], expected: &[Vec<u8>], sports: &[u16]) {
        for &sport in sports {
            let of = |v: &[Vec<u8>]| -> Vec<Vec<u8>> {
                v.iter()
                    .filter(|p| RocePacket::parse(p).unwrap().ports().src == sport)
                    .cloned()
                    .collect()
            };
            assert_eq!(of(got), of(expected), "source port {sport:#x}");
        }
    }

    #[test]
    fn the_trains_of_one_round_leave_in_batches_and_arrive_in_order() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // The IDs of an unconnected sender's trains (connected: `connected_trains_…`).
        a.connect_sends(false);
        // More two-packet trains than one `sendmmsg` carries (the shorter second packet ends
        // each), from one source port, then two from another (a batch per socket).
        let trains = MAX_BATCH + 3;
        let mut sent = Vec::new();
        for t in 0..trains as u32 {
            sent.push(sized(2 * t, 1024, 0xc123));
            sent.push(sized(2 * t + 1, 100, 0xc123));
        }
        for t in 0..2u32 {
            sent.push(sized(100 + 2 * t, 512, 0xc124));
            sent.push(sized(101 + 2 * t, 8, 0xc124));
        }
        // Segment k of a train carries IPv4 ID k.
        let expected: Vec<Vec<u8>> = sent
            .iter()
            .enumerate()
            .map(|(i, p)| with_id(p, (i % 2) as u16))
            .collect();
        let mut batch = sent.clone();
        a.send_batch(&mut batch);
        let got = recv_n(&mut b, expected.len());
        assert_same_per_port(&got, &expected, &[0xc123, 0xc124]);
        let c = a.counters();
        assert_eq!(c.tx_packets.load(Ordering::Relaxed), expected.len() as u64);
        assert_eq!(c.tx_gso_sends.load(Ordering::Relaxed), trains as u64 + 2);
        assert_eq!(c.tx_errors.load(Ordering::Relaxed), 0);
        // Batched, not one call per train: the first port's MAX_BATCH + 3 trains in a full
        // `sendmmsg` and one of the 3 left, the other port's 2 in a third.
        assert_eq!(c.tx_send_calls.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_send_the_kernel_refuses_is_reported_and_the_rest_of_the_batch_still_goes() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let pending = |seg| Pending {
            fd: tx.as_raw_fd(),
            to,
            conn: None,
            seg,
            packets: 1,
            gathered: 0,
        };
        // The second is larger than any UDP datagram (EMSGSIZE); the third is a train.
        let (small, huge, pair) = (vec![1u8; 100], vec![2u8; 70_000], vec![3u8; 60]);
        let sends = [pending(None), pending(None), pending(Some(40))];
        let mut iovs = vec![IovList::default(), IovList::default(), IovList::default()];
        for (iov, bytes) in iovs.iter_mut().zip([&small, &huge, &pair]) {
            assert!(iov.push_slice(bytes));
        }
        let mut results = [Ok(0usize); MAX_BATCH];
        // One call sends the first and stops at the second, which a second call finds
        // refused; a third sends the train.
        assert_eq!(sendmmsg_iov(&sends, &iovs, &mut results), 3);
        assert_eq!(results[0], Ok(100));
        assert_eq!(results[1], Err(nix::errno::Errno::EMSGSIZE));
        assert_eq!(results[2], Ok(60));
        // What arrives: the first, then the train cut into its 40- and 20-byte datagrams.
        let mut buf = [0u8; 2048];
        let lens: Vec<usize> = (0..3).map(|_| rx.recv(&mut buf).unwrap()).collect();
        assert_eq!(lens, [100, 40, 20]);
    }

    #[test]
    fn a_segmented_train_arrives_as_exactly_the_datagrams_sent_one_by_one() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // The IDs of an unconnected sender's trains (connected: `connected_trains_…`).
        a.connect_sends(false);
        // Five full packets, a shorter last one, then one to another source port (a
        // second send), then an ACK-sized one for the first port again (a third).
        let mut sent: Vec<Vec<u8>> = (0..5).map(|i| sized(i, 1024, 0xc123)).collect();
        sent.push(sized(5, 100, 0xc123));
        sent.push(sized(6, 1024, 0xc124));
        sent.push(sized(7, 4, 0xc123));
        let expected: Vec<Vec<u8>> = sent
            .iter()
            .enumerate()
            .map(|(i, p)| with_id(p, if i < 6 { i as u16 } else { 0 }))
            .collect();
        let mut batch = sent.clone();
        a.send_batch(&mut batch);
        assert!(batch.is_empty());
        let got = recv_n(&mut b, expected.len());
        assert_same_per_port(&got, &expected, &[0xc123, 0xc124]);
        for p in &got {
            assert!(RocePacket::parse(p).unwrap().icrc_ok());
        }
        let c = a.counters();
        assert_eq!(c.tx_packets.load(Ordering::Relaxed), 8);
        assert_eq!(
            c.tx_gso_sends.load(Ordering::Relaxed),
            1,
            "one train of six"
        );
        let c = b.counters();
        assert_eq!(c.rx_packets.load(Ordering::Relaxed), 8);
        assert_eq!(
            c.rx_ip_id_recovered.load(Ordering::Relaxed),
            0,
            "a train's IDs are known from the segment index, not solved for"
        );
    }

    #[test]
    fn connected_trains_leave_with_the_sockets_ids_and_the_receiver_guesses_them() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // A train of four, a lone packet, a train of three (last one shorter), each send
        // from the flow's connected socket.
        let sent: Vec<Vec<u8>> = (0..4)
            .map(|i| sized(i, 256, 0xc331))
            .chain([sized(4, 8, 0xc331)])
            .chain((5..7).map(|i| sized(i, 512, 0xc331)))
            .chain([sized(7, 100, 0xc331)])
            .collect();
        let mut first = sent[..4].to_vec();
        a.send_batch(&mut first);
        a.send(&mut sent[4].clone());
        let mut last = sent[5..].to_vec();
        a.send_batch(&mut last);
        let c = a.counters();
        assert_eq!(c.tx_connected.load(Ordering::Relaxed), 3);
        assert_eq!(c.tx_id_probes.load(Ordering::Relaxed), 1);
        let got = deliver_n(&mut b, sent.len());
        assert!(
            got.iter().all(|(_, checked)| *checked),
            "every ICRC matched"
        );
        let ids: Vec<u16> = got
            .iter()
            .map(|(p, _)| match RocePacket::parse(p).unwrap().ip() {
                IpSpec::V4(v4) => v4.id,
                IpSpec::V6(_) => unreachable!(),
            })
            .collect();
        // Segment k of a send carries the send's ID + k; each send takes the next ID.
        let id = ids[0];
        let want: Vec<u16> = [0u16, 1, 2, 3, 1, 2, 3, 4]
            .iter()
            .map(|k| id.wrapping_add(*k))
            .collect();
        assert_eq!(ids, want);
        let plain: Vec<Vec<u8>> = got.iter().map(|(p, _)| id0(p)).collect();
        assert_eq!(plain, sent);
        // Only the flow's first packet needed the solver: the rest were guessed.
        assert_eq!(b.counters().rx_ip_id_recovered.load(Ordering::Relaxed), 1);
        assert_eq!(
            b.counters().rx_empty.load(Ordering::Relaxed),
            1,
            "the probe"
        );
    }

    #[test]
    fn small_datagrams_turn_gro_off_and_trains_still_arrive_as_the_datagrams_sent() {
        use super::super::rx_mode::{GRO_AFTER, PLAIN_AFTER};
        let mut b = link(2);
        let mut a = sender_to(&b);
        let switches = |l: &UdpLink| l.counters().rx_gro_switches.load(Ordering::Relaxed);
        // Small packets one at a time, as a latency ping-pong sends them: after
        // PLAIN_AFTER of them the receiving socket's UDP_GRO goes off.
        let singles: Vec<Vec<u8>> = (0..PLAIN_AFTER).map(|i| sized(i, 8, 0xc341)).collect();
        for p in &singles {
            assert!(a.send(&mut p.clone()));
            let got = recv_wait(&mut b);
            assert_eq!(id0(&got), *p);
        }
        assert_eq!(switches(&b), 1, "UDP_GRO off");
        // Trains from the same flow's connected socket now reach a socket without UDP_GRO:
        // the kernel cuts them, the link reads them one datagram at a time (draining, then
        // plain), each still exactly as sent, ICRC checked with the ID it left with.
        let trains: Vec<Vec<u8>> = (0..2 * GRO_AFTER)
            .map(|i| sized(100 + i, 1024, 0xc341))
            .collect();
        for t in trains.chunks(4) {
            a.send_batch(&mut t.to_vec());
        }
        a.send(&mut sized(200, 8, 0xc341));
        let got = deliver_n(&mut b, trains.len() + 1);
        assert!(
            got.iter().all(|(_, checked)| *checked),
            "every ICRC matched"
        );
        let plain: Vec<Vec<u8>> = got.iter().map(|(p, _)| id0(p)).collect();
        let mut want = trains.clone();
        want.push(sized(200, 8, 0xc341));
        assert_eq!(plain, want);
        // Guessed, not solved for: the flow's first packet was the only one.
        assert_eq!(b.counters().rx_ip_id_recovered.load(Ordering::Relaxed), 1);
        // GRO_AFTER stream-sized datagrams in a row turned UDP_GRO on again.
        assert_eq!(switches(&b), 2, "UDP_GRO on again");
        assert_eq!(b.counters().rx_dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn trains_of_packets_shorter_than_their_rebuilt_headers_are_delivered_in_place_exactly() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // The IDs of an unconnected sender's trains (connected: `connected_trains_…`).
        a.connect_sends(false);
        // 16-byte UDP payloads (BTH + ICRC) under a 28-byte IPv4 + UDP header: each rebuilt
        // header overwrites the segments before it. Then a second train of 1 KiB packets.
        let mut sent: Vec<Vec<u8>> = (0..6).map(|i| sized(i, 0, 0xc321)).collect();
        sent.extend((6..9).map(|i| sized(i, 1024, 0xc321)));
        let expected: Vec<Vec<u8>> = sent
            .iter()
            .enumerate()
            .map(|(i, p)| with_id(p, (if i < 6 { i } else { i - 6 }) as u16))
            .collect();
        let mut batch = sent.clone();
        a.send_batch(&mut batch);
        let got = deliver_n(&mut b, expected.len());
        for (_, checked) in &got {
            assert!(checked, "the link matched every ICRC");
        }
        let got: Vec<Vec<u8>> = got.into_iter().map(|(p, _)| p).collect();
        assert_eq!(got, expected);
        assert_eq!(a.counters().tx_gso_sends.load(Ordering::Relaxed), 2);
        assert_eq!(b.counters().rx_packets.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn the_header_fields_handed_to_the_device_are_those_its_bytes_parse_to() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // The IDs of an unconnected sender's trains (connected: `connected_trains_…`).
        a.connect_sends(false);
        // A train (segment k carries IPv4 ID k), a lone packet, and one whose ICRC no ID
        // explains: the device takes the fields as given instead of parsing the bytes, so they
        // must be what a parse of the bytes gives, the header checksum included.
        let mut batch: Vec<Vec<u8>> = (0..4).map(|i| sized(i, 64, 0xc310)).collect();
        a.send_batch(&mut batch);
        let mut bad = sized(9, 64, 0xc311);
        bad[50] ^= 0x10;
        assert!(a.send(&mut bad.clone()));
        let mut got = Vec::new();
        for _ in 0..2000 {
            if b.fill_rx(RX_BATCH) > 0 {
                b.deliver_rx(|p| {
                    let parsed = RocePacket::parse(p.bytes).expect("the rebuilt header parses");
                    assert_eq!(parsed.ip(), p.ip);
                    assert_eq!(parsed.ports(), p.ports);
                    assert_eq!(
                        p.ip.header_len() + UDP_HDR_LEN + parsed.udp_payload().len(),
                        p.bytes.len()
                    );
                    assert_eq!(parsed.icrc_ok(), p.icrc_checked);
                    got.push((parsed.ports().src, *p.ip, p.icrc_checked));
                });
            }
            if got.len() >= 5 {
                break;
            }
            b.wait_readable(1);
        }
        let ids = |sport: u16| -> Vec<(u16, bool)> {
            got.iter()
                .filter(|g| g.0 == sport)
                .map(|g| match g.1 {
                    IpSpec::V4(v4) => (v4.id, g.2),
                    IpSpec::V6(_) => unreachable!(),
                })
                .collect()
        };
        assert_eq!(
            ids(0xc310),
            vec![(0, true), (1, true), (2, true), (3, true)]
        );
        assert_eq!(
            ids(0xc311),
            vec![(0, false)],
            "no ID explains it: ID 0, unchecked"
        );
    }

    /// Every packet `l` receives until it has `n` (in order), as handed to the device, with
    /// whether the link matched its ICRC.
    fn deliver_n(l: &mut UdpLink, n: usize) -> Vec<(Vec<u8>, bool)> {
        let mut got = Vec::new();
        for _ in 0..2000 {
            if l.fill_rx(RX_BATCH) > 0 {
                l.deliver_rx(|p| got.push((p.bytes.to_vec(), p.icrc_checked)));
            }
            if got.len() >= n {
                break;
            }
            l.wait_readable(1);
        }
        got
    }

    /// A WRITE burst from 127.0.0.1 to 127.0.0.2 (`gather::tests::two_run_burst`): message
    /// `msg_len` bytes cut at `mtu`, the packets from message offset `msg_off` on, its payload
    /// in two host buffers (the first holds `split` bytes of it), the PSN wrapping inside it,
    /// AckReq on every odd packet.
    fn two_run_burst(msg_len: u32, msg_off: u32, mtu: u32, split: usize, sport: u16) -> Burst {
        crate::link::gather::tests::two_run_burst(
            (
                Profile::ipv4_gid([127, 0, 0, 1]),
                Profile::ipv4_gid([127, 0, 0, 2]),
            ),
            (msg_len, msg_off, mtu),
            split,
            (0xff_fffe, 0xaaaa_aaaa),
            sport,
        )
    }

    #[test]
    fn gather_packets_arrive_as_exactly_the_segmented_bursts_packets() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // (message length, first packet's message offset, MTU, bytes in the first run):
        // first/middle/last packets with last-packet pads 0..3, a burst that starts mid-
        // message (no RETH), only-packets with pads 0..3, the run boundary inside a packet,
        // on a packet boundary, and a burst longer than one segmented send.
        let cases: [(u32, u32, u32, usize); 11] = [
            (3 * 256 + 4, 0, 256, 300),
            (3 * 256 + 1, 0, 256, 511),
            (3 * 256 + 2, 0, 256, 256),
            (3 * 256 + 3, 0, 256, 5),
            (4 * 256 + 2, 256, 256, 400),
            (5, 0, 256, 2),
            (6, 0, 256, 3),
            (7, 0, 256, 1),
            (8, 0, 256, 4),
            (1, 0, 1024, 0),
            (100 * 1024 + 3, 0, 1024, 70_000),
        ];
        for (case, &(msg_len, msg_off, mtu, split)) in cases.iter().enumerate() {
            let sport = 0xc400 + case as u16;
            let burst = two_run_burst(msg_len, msg_off, mtu, split, sport);
            let n = burst.count as usize;
            // The reference: the burst segmented into bytes, sent as today.
            let mut bytes = burst.segment();
            assert_eq!(bytes.len(), n);
            a.send_batch(&mut bytes);
            let want = deliver_n(&mut b, n);
            // The same burst as gather packets, the payload sent from the two buffers.
            let (mut out, bursts) = gathered(burst);
            assert!(out.iter().all(|p| matches!(p, Out::Gather(_))));
            assert_eq!(out.len(), n);
            a.send_all(&mut out, &bursts);
            let got = deliver_n(&mut b, n);
            assert_eq!(want.len(), n, "case {case}");
            // Each send leaves with the next IDs of the flow's connected socket.
            let plain =
                |v: &[(Vec<u8>, bool)]| -> Vec<Vec<u8>> { v.iter().map(|(p, _)| id0(p)).collect() };
            assert_eq!(
                plain(&got),
                plain(&want),
                "case {case}: the receiver sees the same packets"
            );
            for (p, checked) in &got {
                assert!(checked, "case {case}: the link matched every ICRC");
                assert!(RocePacket::parse(p).unwrap().icrc_ok());
            }
        }
        let c = a.counters();
        assert_eq!(c.tx_errors.load(Ordering::Relaxed), 0);
        assert_eq!(c.tx_malformed.load(Ordering::Relaxed), 0);
        assert!(c.tx_gso_sends.load(Ordering::Relaxed) >= 2 * 7);
        let sent: u64 = cases
            .iter()
            .map(|&(len, off, mtu, _)| u64::from((len - off).div_ceil(mtu).max(1)))
            .sum();
        assert_eq!(c.tx_from_memory.load(Ordering::Relaxed), sent);
    }

    /// `burst` as gather packets (checked to be accepted), and the bursts they borrow from.
    fn gathered(burst: Burst) -> (Vec<Out>, Gathered) {
        let (mut out, mut bursts) = (Vec::new(), Gathered::default());
        assert!(bursts.push_burst(Box::new(burst), 0, &mut out).is_ok());
        (out, bursts)
    }

    /// The packets of a pcap file `PcapWriter` wrote (file header 24 bytes, then per packet
    /// a 16-byte record header whose bytes 8..12 are the captured length).
    fn pcap_packets(path: &Path) -> Vec<Vec<u8>> {
        let f = std::fs::read(path).unwrap();
        let mut at = 24;
        let mut out = Vec::new();
        while at + 16 <= f.len() {
            let n = u32::from_le_bytes(f[at + 8..at + 12].try_into().unwrap()) as usize;
            let p = &f[at + 16..at + 16 + n];
            // The headers as sent: the connected socket's IDs, which the ICRC covers.
            assert!(RocePacket::parse(p).unwrap().icrc_ok());
            out.push(id0(p));
            at += 16 + n;
        }
        out
    }

    #[test]
    fn the_pcap_records_gather_packets_as_the_bytes_the_segmented_burst_would_send() {
        let dir = std::env::temp_dir().join(format!("bypass-gather-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = link(2);
        let (p_bytes, p_gather) = (dir.join("bytes.pcap"), dir.join("gather.pcap"));
        let burst = two_run_burst(5 * 256 + 3, 0, 256, 700, 0xc700);
        let n = burst.count as usize;
        {
            let mut a = sender_to(&b);
            a.record_pcap(&p_bytes).unwrap();
            a.send_batch(&mut burst.segment());
        }
        {
            let mut a = sender_to(&b);
            a.record_pcap(&p_gather).unwrap();
            let (mut out, bursts) = gathered(burst);
            a.send_all(&mut out, &bursts);
        }
        let (want, got) = (pcap_packets(&p_bytes), pcap_packets(&p_gather));
        assert_eq!(want.len(), n);
        assert_eq!(got, want);
        assert_eq!(deliver_n(&mut b, 2 * n).len(), 2 * n);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_burst_over_too_many_host_runs_is_left_to_byte_segmentation() {
        use crate::iommu::HostRun;
        use crate::memory::SimMemory;
        let mut burst = two_run_burst(4096, 0, 1024, 2048, 0xc500);
        let m: Arc<dyn crate::memory::HostMemory> = Arc::new(SimMemory::new(8192).unwrap());
        let runs: Vec<HostRun> = (0..gather::MAX_RUNS + 1)
            .map(|i| HostRun {
                mem: m.clone(),
                off: 2 * i,
                len: if i == 0 { 4096 - gather::MAX_RUNS } else { 1 },
            })
            .collect();
        burst.src = crate::frame::Payload::Host(runs);
        let (mut out, mut bursts) = (Vec::new(), Gathered::default());
        assert!(bursts.push_burst(Box::new(burst), 0, &mut out).is_err());
        assert!(out.is_empty() && bursts.is_empty());
    }

    #[test]
    fn trains_are_cut_before_iov_max() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        // 64-byte packets whose payload crosses many runs: 1,000 single-byte runs and the
        // rest, so the first packets take 66 iovecs each and a 64-packet train would need
        // more than 1,024.
        use crate::iommu::HostRun;
        use crate::memory::{HostMemory, SimMemory};
        let mut burst = two_run_burst(64 * 64, 64, 64, 0, 0xc600);
        let total = 64 * 63;
        let m = Arc::new(SimMemory::new(8192).unwrap());
        let data: Vec<u8> = (0..total).map(|i| (i * 7) as u8).collect();
        assert!(m.write_at(0, &data));
        let mem: Arc<dyn HostMemory> = m;
        let mut runs: Vec<HostRun> = (0..1000)
            .map(|i| HostRun {
                mem: mem.clone(),
                off: i,
                len: 1,
            })
            .collect();
        runs.push(HostRun {
            mem: mem.clone(),
            off: 1000,
            len: total - 1000,
        });
        burst.src = crate::frame::Payload::Host(runs);
        let n = burst.count as usize;
        let mut bytes = burst.segment();
        a.send_batch(&mut bytes);
        let want = deliver_n(&mut b, n);
        let (mut out, bursts) = gathered(burst);
        let mut wires: Vec<Option<WireOf>> = {
            let mut memo = WireMemo::default();
            out.iter().map(|p| bytes_wire(p, &mut memo)).collect()
        };
        let first = train_len(&out, &wires, &bursts);
        let iovs: usize = out.iter().take(first).map(iov_count).sum();
        assert!(
            iovs <= IOV_MAX && first < n,
            "{first} packets, {iovs} iovecs"
        );
        wires.clear();
        a.send_all(&mut out, &bursts);
        let got = deliver_n(&mut b, n);
        // Cut elsewhere, the trains number their IPv4 IDs differently: compare the packets
        // with ID 0 (checksum and ICRC recomputed), and every ICRC as received.
        let with_id_0 = |v: &[(Vec<u8>, bool)]| -> Vec<Vec<u8>> {
            v.iter().map(|(p, _)| with_id(p, 0)).collect()
        };
        assert_eq!(with_id_0(&got), with_id_0(&want));
        assert!(got.iter().all(|(_, checked)| *checked));
        let c = a.counters();
        assert_eq!(c.tx_errors.load(Ordering::Relaxed), 0);
        assert!(
            c.tx_gso_sends.load(Ordering::Relaxed) > 2,
            "the 63 packets took several sends"
        );
    }

    #[test]
    fn only_packets_whose_icrc_the_link_matched_are_marked_checked() {
        let mut b = link(2);
        let mut a = sender_to(&b);
        let good = sized(1, 256, 0xc300);
        let mut bad = sized(2, 256, 0xc300);
        bad[60] ^= 0x01;
        assert!(a.send(&mut good.clone()));
        assert!(a.send(&mut bad.clone()));
        let got = deliver_n(&mut b, 2);
        assert_eq!(got.len(), 2);
        assert!(got[0].1, "a good packet's ICRC is computed once, here");
        assert!(RocePacket::parse(&got[0].0).unwrap().icrc_ok());
        assert!(!got[1].1, "a corrupted one is left to the device's check");
        assert!(!RocePacket::parse(&got[1].0).unwrap().icrc_ok());
    }

    #[test]
    fn every_nth_received_packet_is_dropped_when_asked() {
        let mut b = link(2);
        b.drop_incoming_every(3);
        let mut a = sender_to(&b);
        let mut batch: Vec<Vec<u8>> = (0..6).map(|i| sized(i, 512, 0xc200)).collect();
        a.send_batch(&mut batch);
        let got: Vec<u32> = recv_n(&mut b, 4)
            .iter()
            .map(|p| RocePacket::parse(p).unwrap().bth().psn())
            .collect();
        assert_eq!(got, vec![0, 1, 3, 4]);
        assert_eq!(b.counters().rx_injected_drops.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_device_profile_carries_the_link_address_as_gid_0() {
        let l = link(3);
        assert_eq!(
            l.profile().ports[0].gids,
            vec![Profile::ipv4_gid([127, 0, 0, 3])]
        );
    }

    #[test]
    fn unspecified_addresses_are_refused_with_a_reason() {
        let e = UdpLink::bind("0.0.0.0:4791".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("unicast"), "{e}");
    }

    #[test]
    fn ipv6_packets_cross_the_socket_too() {
        let Ok(mut b) = UdpLink::bind("[::1]:0".parse().unwrap()) else {
            // Hosts without IPv6 on loopback cannot run this; every other test still runs.
            return;
        };
        let mut a = UdpLink::bind(SocketAddr::new("::1".parse().unwrap(), 0)).unwrap();
        let g = b.gid();
        let buf = built(
            IpSpec::from_gids(&g, &g).unwrap(),
            0xc0de,
            BthOpcode::RC_SEND_ONLY,
            1,
            b"v6",
        );
        // a's port differs from b's: send straight to b's socket from the 0xc0de socket.
        let payload = RocePacket::parse(&buf).unwrap().udp_payload().to_vec();
        a.tx_socket(0xc0de)
            .send_to(&payload, b.local_addr())
            .unwrap();
        let got = recv_wait(&mut b);
        assert_eq!(got, buf);
        assert!(RocePacket::parse(&got).unwrap().icrc_ok());
    }
}
