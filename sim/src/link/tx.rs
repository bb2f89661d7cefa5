//! The UDP link's transmit side: trains, batches and gather packets.
//!
//! Owns: `UdpLink::send_all` and what it calls: a run of packets to one peer from one source
//! port, equally long but for a shorter last, goes out as one segmented send (`UDP_SEGMENT`,
//! Linux `udp_send_skb`); the sends of one socket are queued and leave together in one
//! `sendmmsg` (`link::sendmsg`); a WRITE burst whose payload lies in host memory is sent as
//! gather lists pointing into the sender's memory (`link::gather`), so the kernel's copy is the
//! only one. A flow's sends leave on its connected socket once its next IPv4 ID is known
//! (`link::connected`), else on the source port's unconnected one (ID 0), and each packet is
//! re-stamped for the ID it leaves with (`link::stamp`): segment `k` of a train gets the send's
//! ID + `k` (`net/ipv4/af_inet.c` `inet_gso_segment`). Must not: build a packet (the device
//! did), or set socket options (`link::socket`).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use bypass_hw::roce::ip::UDP_HDR_LEN;
use nix::sys::socket::SockaddrStorage;

use super::counters::LinkCounters;
use super::gather::{GatherPkt, Gathered, IOV_MAX, IovList, Out};
use super::sendmsg::{GSO_MAX_BYTES, GSO_MAX_SEGS};
use super::sendmsg::{MAX_BATCH, Pending, count_send, sendmmsg_iov, sendmsg_iov};
use super::socket::udp_socket;
use super::stamp::{WireMemo, WireOf, restamp_gather, restamp_known, wire_of};
use super::udp::UdpLink;

impl UdpLink {
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
    pub(super) fn send_known(&mut self, packet: &mut [u8], w: &WireOf) -> bool {
        let to = SocketAddr::new(w.dst, self.local.port());
        let route = self.tx_route(w.sport, to);
        if route.id != 0 {
            // The IP header is only read by a rule that watches (the pcap tee).
            let header = self.rules.watched();
            let (solver, table) = (&mut self.deltas, &mut self.train_deltas);
            let mut delta = |len: usize, id: u16| table.delta(solver, len, id);
            if restamp_known(packet, w, route.id, header, &mut delta).is_none() {
                LinkCounters::add(&self.counters.tx_malformed, 1);
                return false;
            }
        }
        self.show_sent(packet);
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
    /// one `sendmmsg` (up to [`MAX_BATCH`]; a window of 4 KiB WRITE packets is about five
    /// trains, one system call).
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
    /// with that ID only when a rule sees it (the pcap tee shows the header as sent).
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
    pub(super) fn send_gathered(
        &mut self,
        g: &mut GatherPkt,
        w: Option<WireOf>,
        bursts: &Gathered,
    ) {
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
        if self.rules.watched() {
            let p = bursts.assemble(g).unwrap_or_default();
            self.show_sent(&p);
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
    pub(super) fn send_train(
        &mut self,
        train: &mut [Out],
        wires: &[Option<WireOf>],
        bursts: &Gathered,
    ) {
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
        // header is only read by a rule that watches (the pcap tee), and re-stamped only
        // for it.
        let header = self.rules.watched();
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
        if header {
            for p in train.iter() {
                match p {
                    Out::Bytes(b) => self.show_sent(b),
                    Out::Gather(g) => {
                        let b = bursts.assemble(g).unwrap_or_default();
                        self.show_sent(&b);
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
    pub(super) fn queue(&mut self, send: Pending) -> Option<(&mut IovList, &mut Pending)> {
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
    pub(super) fn unqueue_last(&mut self) {
        if let Some(conn) = self.batch.sends.pop().and_then(|q| q.conn) {
            self.connected.failed(conn);
        }
    }

    /// Sends what [`UdpLink::queue`] holds: one `sendmsg` for one send, else one `sendmmsg`
    /// for all (they share a socket), and counts what went and what failed.
    pub(super) fn flush_sends(&mut self) {
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
}

impl UdpLink {
    /// Where a send from source port `sport` to `to` leaves: the flow's connected socket
    /// when its next IPv4 ID is known (with that ID), else the port's unconnected socket
    /// (ID 0). The listening port's own sends stay on the listening socket.
    pub(super) fn tx_route(&mut self, sport: u16, to: SocketAddr) -> TxRoute {
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

    /// The socket that sends from UDP source port `sport` (bound on first use; the listening
    /// socket when the port cannot be bound, counted).
    pub(super) fn tx_socket(&mut self, sport: u16) -> &UdpSocket {
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
}

/// Where [`UdpLink::tx_route`] sends a flow's packets: the socket, which connected socket it
/// is (`None`: unconnected), and the IPv4 ID its next datagram gets (0 unconnected).
#[derive(Debug, Clone, Copy)]
pub(super) struct TxRoute {
    pub(super) fd: std::os::fd::RawFd,
    pub(super) conn: Option<u32>,
    pub(super) id: u16,
}

/// What [`wire_of`] finds for a packet sent as bytes (`None` for a gather packet: its burst
/// knows, [`gather_wire`], and a train of them is grouped without it).
#[inline]
pub(super) fn bytes_wire(p: &Out, memo: &mut WireMemo) -> Option<WireOf> {
    match p {
        Out::Bytes(b) => memo.wire_of(b),
        Out::Gather(_) => None,
    }
}

/// What [`wire_of`] would find for gather packet `g` (from its burst in `bursts`).
pub(super) fn gather_wire(g: &GatherPkt, bursts: &Gathered) -> Option<WireOf> {
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
pub(super) fn out_wire(p: &Out, w: Option<WireOf>, bursts: &Gathered) -> Option<WireOf> {
    match p {
        Out::Bytes(_) => w,
        Out::Gather(g) => gather_wire(g, bursts),
    }
}

/// The iovecs a packet takes in a send: its UDP payload bytes, or a gather packet's BTH
/// (+RETH), payload pieces and pad + ICRC.
pub(super) fn iov_count(p: &Out) -> usize {
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
pub(super) fn train_len(packets: &[Out], wires: &[Option<WireOf>], bursts: &Gathered) -> usize {
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
pub(super) fn push_gather_iov(g: &GatherPkt, bursts: &Gathered, iov: &mut IovList) -> bool {
    iov.push_slice(g.hdr())
        && bursts.payload_iovecs(g).is_some_and(|p| iov.extend(p))
        && iov.push_slice(g.tail())
}
