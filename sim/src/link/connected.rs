//! Connected sending sockets, and the IPv4 IDs they stamp.
//!
//! Owns: [`Connected`], one UDP socket per (source port, peer) `connect`ed to the peer (the
//! kernel keeps its route, `sk_dst_cache`, where an unconnected send looks it up each time,
//! `udp_sendmsg` → `ip_route_output_flow`), with the IPv4 ID the kernel stamps on its next
//! datagram; [`RxIds`], the receive side's guess of the ID a connected peer sends next. Must
//! not: build or parse RoCE packets, or send anything but the probe (the link sends through
//! these sockets).
//!
//! A connected socket numbers its datagrams from a random per-socket counter set at `connect`
//! (`include/net/ip.h` `ip_select_ident_segs`; `net/ipv4/datagram.c` `__ip4_datagram_connect`):
//! one ID per send (`__ip_make_skb`), segment `k` of a segmented send the send's ID + `k` where
//! the kernel segments in software (`inet_gso_segment`). The ICRC covers the ID, so the link
//! learns the counter once by a probe ([`probe`]), counts one ID per send from there, and
//! probes again when a send fails; until the ID is known, or where it cannot be (no transmit
//! timestamps, more peers than [`MAX_CONNECTED`]), a flow goes out unconnected, with ID 0.
//! IPv6 has no ID: its connected sockets need no probe.

use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use nix::sys::socket::{
    MsgFlags, SockaddrStorage, TimestampingFlag, connect, recvmsg, setsockopt, sockopt,
};

use super::counters::LinkCounters;

/// The most connected sockets a link keeps (one per source port and peer): beyond, flows go
/// out unconnected (ID 0).
pub(crate) const MAX_CONNECTED: usize = 256;

/// Reads of the error queue a probe gets before the link gives up on the socket, one per
/// send the flow makes meanwhile (a device that timestamps late shows the packet a few
/// sends after the probe).
const PROBE_READS: u16 = 64;

/// Probes in a row the kernel may refuse (an unreachable peer's ICMP errors) before the link
/// gives up on the socket: each one costs the sends that meet it three system calls more.
const PROBE_SENDS: u8 = 8;

/// What the link knows of a connected socket's next IPv4 ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NextId {
    /// The ID the kernel stamps on the socket's next datagram (IPv6: 0, unused).
    Known(u16),
    /// A probe is out: its looped-back copy has not been read yet (reads so far).
    Probing(u16),
    /// A send failed: the count may be off; the next use probes again (probes the kernel
    /// refused so far).
    Stale(u8),
    /// No ID can be learned here (no socket, no transmit timestamps): unconnected for good.
    Never,
}

#[derive(Debug)]
struct Entry {
    sport: u16,
    to: SocketAddr,
    /// The port `sock` is bound to (`sport`, or the kernel's pick for `sport` 0).
    bound: u16,
    sock: Option<UdpSocket>,
    next: NextId,
}

/// Where a send goes on a connected socket: its descriptor, which socket (for
/// [`Connected::sent`]/[`Connected::failed`]), and the IPv4 ID its first datagram gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    pub fd: RawFd,
    pub conn: u32,
    pub id: u16,
}

/// The link's connected sending sockets (see the module comment).
#[derive(Debug, Default)]
pub(crate) struct Connected {
    entries: Vec<Entry>,
    /// `(source port, peer)` → index into `entries`, sorted (a binary search per send;
    /// entries never move, so a queued send's index stays valid).
    index: Vec<((u16, SocketAddr), u32)>,
    /// The entry the last look-up found (a flow's sends come in runs).
    last: Option<u32>,
}

impl Connected {
    /// The connected socket sending from `sport` on `local` to `to`, with the ID its next
    /// datagram gets; `None` when the flow goes out unconnected for now (its ID is being
    /// learned, or cannot be). Creates the socket and probes it on first use; the probes go
    /// to `counters`. `queued(fd)`: sends on socket `fd` wait in the caller's batch. A socket
    /// whose count went stale is probed again only when none do: a probe sent ahead of them
    /// would take the ID the count gives the first of them, and every ID after it would be
    /// one off for good.
    pub(crate) fn route(
        &mut self,
        local: IpAddr,
        sport: u16,
        to: SocketAddr,
        counters: &LinkCounters,
        queued: impl Fn(RawFd) -> bool,
    ) -> Option<Route> {
        let at = match self.last {
            Some(at)
                if self
                    .entries
                    .get(at as usize)
                    .is_some_and(|e| e.sport == sport && e.to == to) =>
            {
                at
            }
            _ => {
                let at = self.find_or_add(local, sport, to, counters)?;
                self.last = Some(at);
                at
            }
        };
        let e = self.entries.get_mut(at as usize)?;
        let sock = e.sock.as_ref()?;
        match e.next {
            NextId::Known(id) => {
                return Some(Route {
                    fd: sock.as_raw_fd(),
                    conn: at,
                    id,
                });
            }
            NextId::Never => return None,
            NextId::Stale(_) if queued(sock.as_raw_fd()) => {}
            NextId::Stale(refused) => {
                e.next = probe(sock, (e.bound, e.to), counters, refused);
            }
            NextId::Probing(reads) => {
                e.next = match looped_id(sock, e.bound, e.to) {
                    Some(id) => learned(sock, id),
                    None if reads >= PROBE_READS => {
                        LinkCounters::add(&counters.tx_id_probe_failures, 1);
                        NextId::Never
                    }
                    None => NextId::Probing(reads + 1),
                };
            }
        }
        None
    }

    /// The socket of `conn` (a [`Route`]'s).
    #[cfg(test)]
    fn socket(&self, conn: u32) -> Option<&UdpSocket> {
        self.entries.get(conn as usize)?.sock.as_ref()
    }

    /// A send on `conn` was handed to the kernel: the next gets the next ID.
    pub(crate) fn sent(&mut self, conn: u32) {
        if let Some(e) = self.entries.get_mut(conn as usize)
            && let NextId::Known(id) = e.next
        {
            e.next = NextId::Known(id.wrapping_add(1));
        }
    }

    /// A send on `conn` failed or was taken back: whether the kernel stamped an ID is not
    /// known, so the next use probes again (IPv6: nothing to learn).
    pub(crate) fn failed(&mut self, conn: u32) {
        if let Some(e) = self.entries.get_mut(conn as usize)
            && e.to.is_ipv4()
            && let NextId::Known(_) = e.next
        {
            e.next = NextId::Stale(0);
        }
    }

    fn find_or_add(
        &mut self,
        local: IpAddr,
        sport: u16,
        to: SocketAddr,
        counters: &LinkCounters,
    ) -> Option<u32> {
        let key = (sport, to);
        match self.index.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.index.get(i).map(|(_, at)| *at),
            Err(i) => {
                if self.entries.len() >= MAX_CONNECTED || local.is_ipv4() != to.is_ipv4() {
                    return None;
                }
                let at = u32::try_from(self.entries.len()).ok()?;
                let sock = connected_socket(SocketAddr::new(local, sport), to).ok();
                let bound = sock
                    .as_ref()
                    .and_then(|s| s.local_addr().ok())
                    .map_or(sport, |a| a.port());
                let next = match &sock {
                    None => NextId::Never,
                    Some(_) if to.is_ipv6() => NextId::Known(0),
                    Some(s) => probe(s, (bound, to), counters, 0),
                };
                self.entries.push(Entry {
                    sport,
                    to,
                    bound,
                    sock,
                    next,
                });
                self.index.insert(i, (key, at));
                Some(at)
            }
        }
    }
}

/// A sending socket bound to `local` (shared, as the link's unconnected ones) and connected
/// to `to`.
pub(crate) fn connected_socket(local: SocketAddr, to: SocketAddr) -> Result<UdpSocket, nix::Error> {
    let s = super::socket::sending_socket(local).map_err(|_| nix::errno::Errno::EINVAL)?;
    connect(s.as_raw_fd(), &SockaddrStorage::from(to))?;
    Ok(s)
}

/// Sends the empty probe datagram on `sock` with a software transmit timestamp asked for,
/// and reads its looped-back copy if it is there already (loopback, veth and tap loop it
/// back within the send); `(bound, to)`: its bound port and peer. `refused`: the probes
/// before this one the kernel refused.
///
/// The probe carries no payload: rxe drops it unread (`rxe_recv.c` `rxe_rcv`: shorter than a
/// BTH), a bypass link skips it. The kernel loops the packet as sent, headers included, back
/// to the socket's error queue (`SOF_TIMESTAMPING_TX_SOFTWARE`,
/// `Documentation/networking/timestamping.rst`), with its headers only where
/// `net.core.tstamp_allow_data` is 1 (the default) or the process has `CAP_NET_RAW`
/// (`net/core/skbuff.c` `skb_may_tx_timestamp`); elsewhere every probe reads nothing and the
/// flows go out unconnected.
fn probe(
    sock: &UdpSocket,
    (bound, to): (u16, SocketAddr),
    counters: &LinkCounters,
    refused: u8,
) -> NextId {
    let flags = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE;
    if setsockopt(sock, sockopt::Timestamping, &flags).is_err() {
        LinkCounters::add(&counters.tx_id_probe_failures, 1);
        return NextId::Never;
    }
    // Whatever an earlier probe left in the error queue is not this one's.
    while recvmsg::<()>(
        sock.as_raw_fd(),
        &mut [IoSliceMut::new(&mut [0u8; 64])],
        None,
        MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
    )
    .is_ok()
    {}
    LinkCounters::add(&counters.tx_id_probes, 1);
    if sock.send(&[]).is_err() {
        // Refused (an ICMP error reported on the socket, say): try again on the next use, a
        // few times.
        if refused + 1 >= PROBE_SENDS {
            LinkCounters::add(&counters.tx_id_probe_failures, 1);
            return NextId::Never;
        }
        return NextId::Stale(refused + 1);
    }
    match looped_id(sock, bound, to) {
        Some(id) => learned(sock, id),
        None => NextId::Probing(1),
    }
}

/// The probe on `sock` left with ID `id`: the next datagram gets the next one. The socket
/// stops asking for timestamps; one that cannot stop would queue a copy of every send in an
/// error queue nothing reads, so its flow goes unconnected for good instead.
fn learned(sock: &UdpSocket, id: u16) -> NextId {
    match setsockopt(sock, sockopt::Timestamping, &TimestampingFlag::empty()) {
        Ok(()) => NextId::Known(id.wrapping_add(1)),
        Err(_) => NextId::Never,
    }
}

/// The IPv4 ID of the probe the error queue of `sock` (bound to port `sport`, connected to
/// `to`) holds, if it is there. Only the looped-back packet is read: with no room for the
/// control messages (the timestamps) the kernel only flags them cut (`MSG_CTRUNC`).
fn looped_id(sock: &UdpSocket, sport: u16, to: SocketAddr) -> Option<u16> {
    let mut buf = [0u8; 128];
    let n = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            None,
            MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        )
        .ok()?
        .bytes
    };
    probe_id(buf.get(..n)?, sport, to)
}

/// The IPv4 ID in `packet`, the probe as the error queue returns it: the IP packet, behind a
/// link-layer header on devices that have one (Ethernet: 14 bytes, loopback's included).
/// `None` unless it is an empty UDP datagram from `sport` to `to`.
pub(crate) fn probe_id(packet: &[u8], sport: u16, to: SocketAddr) -> Option<u16> {
    let IpAddr::V4(dst) = to.ip() else {
        return None;
    };
    [0usize, 14].into_iter().find_map(|at| {
        let ip = packet.get(at..at + 28)?;
        let ihl = usize::from(ip.first()? & 0x0f) * 4;
        let ok = ip.first()? >> 4 == 4
            && ihl == 20
            && *ip.get(9)? == 17
            && ip.get(16..20)? == dst.octets()
            && ip.get(20..22)? == sport.to_be_bytes()
            && ip.get(22..24)? == to.port().to_be_bytes()
            && ip.get(24..26)? == 8u16.to_be_bytes();
        ok.then(|| u16::from_be_bytes([ip[4], ip[5]]))
    })
}

/// The receive side's guesses of the IPv4 ID a connected peer's next datagram carries: per
/// sender (address and source port), the ID after the last one found. A peer's segmented
/// send carries `ID + k` in segment `k`, the next send `ID + 1` (see the module comment).
#[derive(Debug, Default)]
pub(crate) struct RxIds {
    slots: [Option<(SocketAddr, u16)>; 8],
    /// The slot the next new sender replaces.
    next: usize,
}

impl RxIds {
    /// The ID `from`'s next datagram most likely carries, if it sent with a non-zero ID lately.
    pub(crate) fn guess(&self, from: SocketAddr) -> Option<u16> {
        self.slots
            .iter()
            .flatten()
            .find(|(a, _)| *a == from)
            .map(|(_, id)| *id)
    }

    /// `from`'s last datagram (or segmented send) began with ID `first`.
    pub(crate) fn saw(&mut self, from: SocketAddr, first: u16) {
        let next = first.wrapping_add(1);
        if let Some(s) = self.slots.iter_mut().flatten().find(|(a, _)| *a == from) {
            s.1 = next;
            return;
        }
        if let Some(s) = self.slots.get_mut(self.next) {
            *s = Some((from, next));
        }
        self.next = (self.next + 1) % self.slots.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn bound(ip: [u8; 4]) -> UdpSocket {
        UdpSocket::bind((Ipv4Addr::from(ip), 0)).unwrap()
    }

    #[test]
    fn a_probe_learns_the_id_the_kernel_stamps_next() {
        let none = |_| false;
        let peer = bound([127, 0, 0, 2]);
        let to = peer.local_addr().unwrap();
        let mut c = Connected::default();
        let n = LinkCounters::default();
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let probes = |n: &LinkCounters| n.tx_id_probes.load(std::sync::atomic::Ordering::Relaxed);
        // Loopback loops the probe back within the send: known at once.
        let r = c
            .route(local, 0, to, &n, none)
            .expect("loopback timestamps its packets");
        assert_eq!(probes(&n), 1);
        // The probe arrived empty; sends from here on carry the counted IDs.
        let mut buf = [0u8; 16];
        assert_eq!(peer.recv(&mut buf).unwrap(), 0);
        c.socket(r.conn).unwrap().send(b"x").unwrap();
        c.sent(r.conn);
        let r2 = c.route(local, 0, to, &n, none).unwrap();
        assert_eq!(r2.id, r.id.wrapping_add(1));
        assert_eq!(r2.fd, r.fd);
        // A failed send makes the count uncertain: the next use probes again, but not while
        // sends on the socket wait in the caller's batch (they would go out after the probe,
        // each with the ID after the one the count gave it).
        c.failed(r2.conn);
        let queued_here = |fd| fd == r2.fd;
        assert_eq!(c.route(local, 0, to, &n, queued_here), None, "sends wait");
        assert_eq!(probes(&n), 1, "no probe ahead of queued sends");
        assert_eq!(c.route(local, 0, to, &n, none), None, "probing again");
        let r3 = c.route(local, 0, to, &n, none).unwrap();
        assert_eq!(probes(&n), 2);
        // The second probe took r2's ID (nothing was sent with it).
        assert_eq!(r3.id, r2.id.wrapping_add(1));
    }

    #[test]
    fn a_socket_whose_probes_the_kernel_refuses_eight_times_goes_unconnected_for_good() {
        let peer = bound([127, 0, 0, 2]);
        let to = peer.local_addr().unwrap();
        let mut c = Connected::default();
        let n = LinkCounters::default();
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let r = c.route(local, 0, to, &n, |_| false).unwrap();
        // From here on the kernel refuses every send on the socket (EPIPE), probes included.
        nix::sys::socket::shutdown(r.fd, nix::sys::socket::Shutdown::Write).unwrap();
        assert!(c.socket(r.conn).unwrap().send(b"x").is_err());
        c.failed(r.conn);
        // Each use sends a probe the kernel refuses: unconnected meanwhile.
        for refused in 1..=PROBE_SENDS {
            assert_eq!(c.route(local, 0, to, &n, |_| false), None);
            assert_eq!(load(&n.tx_id_probes), 1 + u64::from(refused));
            let given_up = u64::from(refused == PROBE_SENDS);
            assert_eq!(load(&n.tx_id_probe_failures), given_up, "probe {refused}");
        }
        // Given up: no more probes, unconnected for good.
        for _ in 0..3 {
            assert_eq!(c.route(local, 0, to, &n, |_| false), None);
        }
        assert_eq!(load(&n.tx_id_probes), 1 + u64::from(PROBE_SENDS));
        assert_eq!(load(&n.tx_id_probe_failures), 1);
    }

    /// The IPv4 ID of the next packet `sock`'s error queue loops back (timestamps on), and
    /// its UDP length.
    fn looped(sock: &UdpSocket) -> Option<(u16, u16)> {
        let mut buf = [0u8; 256];
        let n = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut [IoSliceMut::new(&mut buf)],
            None,
            MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        )
        .ok()?
        .bytes;
        let p = buf.get(..n)?;
        [0usize, 14].into_iter().find_map(|at| {
            let ip = p.get(at..at + 28)?;
            (ip[0] == 0x45 && ip[9] == 17).then(|| {
                (
                    u16::from_be_bytes([ip[4], ip[5]]),
                    u16::from_be_bytes([ip[24], ip[25]]),
                )
            })
        })
    }

    #[test]
    fn the_kernel_stamps_the_ids_the_count_gives_a_train_and_the_send_after_it() {
        use nix::sys::socket::{ControlMessage, SockaddrStorage, sendmsg};
        let peer = bound([127, 0, 0, 2]);
        let to = peer.local_addr().unwrap();
        let mut c = Connected::default();
        let n = LinkCounters::default();
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let r = c.route(local, 0, to, &n, |_| false).unwrap();
        let sock = c.socket(r.conn).unwrap();
        // Ask the kernel to loop every send back, as the probe did, to read its IDs.
        let flags = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE;
        setsockopt(sock, sockopt::Timestamping, &flags).unwrap();
        // A segmented send of four 16-byte datagrams, counted as the link counts one send.
        let seg = 16u16;
        let train = [0x5au8; 64];
        sendmsg::<SockaddrStorage>(
            sock.as_raw_fd(),
            &[std::io::IoSlice::new(&train)],
            &[ControlMessage::UdpGsoSegments(&seg)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        c.sent(r.conn);
        // The kernel's own record: the train left with the ID the count gave it (the
        // segments take it + k as the kernel cuts them, `inet_gso_segment`).
        let (id, udp_len) = looped(c.socket(r.conn).unwrap()).expect("the train looped back");
        assert_eq!(udp_len, 8 + 64, "the train, before segmentation");
        assert_eq!(id, r.id);
        // The send after it takes the next ID: one per send, not one per segment.
        let r2 = c.route(local, 0, to, &n, |_| false).unwrap();
        c.socket(r2.conn).unwrap().send(b"after").unwrap();
        let (id2, _) = looped(c.socket(r2.conn).unwrap()).expect("the send looped back");
        assert_eq!(id2, r2.id);
        assert_eq!(r2.id, r.id.wrapping_add(1));
    }

    #[test]
    fn the_probe_is_found_behind_an_ethernet_header_or_none() {
        let to: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        let mut ip = vec![0x45, 0, 0, 28, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0];
        ip.extend([10, 0, 0, 1, 10, 0, 0, 2]);
        ip.extend(0xc001u16.to_be_bytes());
        ip.extend(4791u16.to_be_bytes());
        ip.extend([0, 8, 0, 0]);
        assert_eq!(probe_id(&ip, 0xc001, to), Some(0x1234));
        let mut eth = vec![0u8; 12];
        eth.extend([8, 0]);
        eth.extend(&ip);
        assert_eq!(probe_id(&eth, 0xc001, to), Some(0x1234));
        // Another flow's packet, or one with a payload, is not the probe.
        assert_eq!(probe_id(&ip, 0xc002, to), None);
        let mut longer = ip.clone();
        longer[25] = 9;
        assert_eq!(probe_id(&longer, 0xc001, to), None);
        assert_eq!(probe_id(&ip[..20], 0xc001, to), None);
    }

    #[test]
    fn the_receive_guess_follows_each_sender() {
        let a: SocketAddr = "10.0.0.1:49153".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:49154".parse().unwrap();
        let mut ids = RxIds::default();
        assert_eq!(ids.guess(a), None);
        ids.saw(a, 0xffff);
        ids.saw(b, 7);
        assert_eq!(ids.guess(a), Some(0));
        assert_eq!(ids.guess(b), Some(8));
        // More senders than slots: the oldest is forgotten, nothing breaks.
        for p in 0..20u16 {
            ids.saw(SocketAddr::new(a.ip(), 50_000 + p), p);
        }
        assert_eq!(ids.guess(a), None);
        assert_eq!(ids.guess(SocketAddr::new(a.ip(), 50_019)), Some(20));
    }
}
