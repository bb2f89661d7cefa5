//! The UDP link's receive side: reads into reused buffers, `UDP_GRO` trains, and delivery in
//! place.
//!
//! Owns: `UdpLink::fill_rx` (one `recvmsg` per train with `UDP_GRO` on, one `recvfrom` per
//! datagram with it off, as `link::rx_mode` says) and `UdpLink::deliver_rx`: each segment's
//! IP and UDP header is rebuilt in front of its payload, over bytes already delivered, its IPv4 ID
//! found from the ICRC (`link::stamp`), and the packet handed on where it lies, no copy and no
//! allocation. Must not: write into a device (the caller's closure does), or build a header
//! other than by `link::stamp`.
//!
//! Sources: `net/ipv4/udp.c` `udp_recvmsg` and `include/linux/udp.h` `udp_cmsg_recv` (the
//! `UDP_GRO` segment size as a `SOL_UDP` control message); the receiving socket is bound to one
//! address, so a datagram's destination is that address (no `IP_PKTINFO`).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use bypass_hw::roce::IpSpec;
use bypass_hw::roce::ip::{MAX_IP_UDP_HDR_LEN, UDP_HDR_LEN};
use nix::sys::socket::{setsockopt, sockopt};

use super::counters::LinkCounters;
use super::rule::{Packet, Seen, Verdict};
use super::rx_mode::{STREAM_BYTES, Switch};
use super::sendmsg::GSO_MAX_BYTES;
use super::stamp::{check_icrc, rx_fields, write_header};
use super::udp::{RxPacket, UdpLink, wall_ns};

/// The largest UDP payload a link receives (a 4096-byte MTU packet is ~4.2 KiB; a UDP datagram
/// can be up to 64 KiB).
pub(super) const MAX_DATAGRAM: usize = 65_536;

/// The most datagrams received per pump round before the devices run.
pub(crate) const RX_BATCH: usize = 64;

/// Room left before a received datagram in an [`RxBuf`]: the largest IP + UDP header
/// (IPv6), rebuilt there in front of the first segment.
pub(super) const RX_HEADROOM: usize = MAX_IP_UDP_HDR_LEN;

/// The most receive buffers one pump round fills before the devices run.
pub(super) const RX_BUFS: usize = 8;

/// One datagram (or `UDP_GRO` train) read by [`UdpLink::fill_rx`], waiting to be delivered.
#[derive(Debug)]
pub(super) struct RxBuf {
    /// [`RX_HEADROOM`] bytes, then the datagram.
    pub(super) data: Vec<u8>,
    /// Datagram bytes.
    pub(super) len: usize,
    pub(super) from: SocketAddr,
    /// `UDP_GRO` segment size (the datagram's length when it is not a train).
    pub(super) seg: usize,
}

/// Receive buffer `i`, allocated (full size, once) the first time it is used; `None` only
/// when `i` skips a buffer never allocated, which the callers' `i == rx_filled` rules out.
fn rx_buf(bufs: &mut Vec<RxBuf>, i: usize, local: SocketAddr) -> Option<&mut RxBuf> {
    if bufs.len() == i {
        bufs.push(RxBuf {
            data: vec![0; RX_HEADROOM + MAX_DATAGRAM],
            len: 0,
            from: local,
            seg: 0,
        });
    }
    bufs.get_mut(i)
}

impl UdpLink {
    /// Reads what is waiting on the socket, up to about `max` packets (and at most
    /// `RX_BUFS` datagrams or trains), into the link's receive buffers for
    /// [`UdpLink::deliver_rx`]; returns how many datagrams (or trains) wait there. A read
    /// well short of a full train most likely emptied the socket (a peer's burst fits one
    /// train) and ends the round; full trains mean a stream, and reading goes on.
    pub fn fill_rx(&mut self, max: usize) -> usize {
        let mut packets = 0usize;
        while self.rx_filled < RX_BUFS && packets < max {
            let Some(b) = rx_buf(&mut self.rx_bufs, self.rx_filled, self.local) else {
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

    /// Places `datagram`, as received from `from`, in the next receive buffer exactly as
    /// [`UdpLink::fill_rx`] leaves one it read (a `UDP_GRO` train of `seg`-byte segments when
    /// `seg` is non-zero and below its length), for [`UdpLink::deliver_rx`]: the link's
    /// datagram handling without a socket, for fuzzing and tests. Returns how many datagrams
    /// wait then; an empty datagram (a peer's ID probe) is counted in `rx_empty` and not
    /// placed, nor is one when the buffers are full or it is longer than a UDP datagram.
    #[doc(hidden)]
    pub fn push_rx(&mut self, from: SocketAddr, datagram: &[u8], seg: usize) -> usize {
        let n = datagram.len();
        if n == 0 {
            LinkCounters::add(&self.counters.rx_empty, 1);
            return self.rx_filled;
        }
        if self.rx_filled >= RX_BUFS || n > MAX_DATAGRAM {
            return self.rx_filled;
        }
        let Some(b) = rx_buf(&mut self.rx_bufs, self.rx_filled, self.local) else {
            return self.rx_filled;
        };
        let Some(space) = b.data.get_mut(RX_HEADROOM..RX_HEADROOM + n) else {
            return self.rx_filled;
        };
        space.copy_from_slice(datagram);
        let seg = if seg == 0 || seg > n { n } else { seg };
        if seg < n {
            LinkCounters::add(&self.counters.rx_gro_reads, 1);
        }
        (b.len, b.from, b.seg) = (n, from, seg);
        self.rx_filled += 1;
        self.rx_filled
    }

    /// Forgets what receiving taught the link about its peers (the IPv4 ID each is expected
    /// to send next) and drops the datagrams waiting for [`UdpLink::deliver_rx`]; the caches
    /// that only make receiving faster (ICRC deltas by length, header CRC states) stay, and
    /// so do the counters. After it, the link delivers datagrams exactly as a freshly bound
    /// one would (a fuzz target's reset between inputs).
    #[doc(hidden)]
    pub fn forget_rx(&mut self) {
        self.rx_ids = Default::default();
        self.rx_filled = 0;
    }

    /// Turns the receiving socket's `UDP_GRO` on or off, as `RxMode` asked (a refusal
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
            counters,
            rules,
            rng,
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
                let at = seg_start.saturating_sub(hl);
                let split = seg_start - at;
                let Some(pkt) = b.data.get_mut(at..stop) else {
                    LinkCounters::add(&counters.rx_dropped, 1);
                    continue;
                };
                let Some(crc) = pkt.split_at_mut_checked(split).and_then(|(hdr, payload)| {
                    write_header(rx_hdrs, &mut ip, ports, hdr, payload.len())
                }) else {
                    LinkCounters::add(&counters.rx_dropped, 1);
                    continue;
                };
                // The packet as it arrives, before the link checks it: the rules' say (a
                // corruption, a drop) comes first, as on any wire.
                if !rules.is_empty() {
                    let mut p = Packet {
                        bytes: pkt,
                        src: 0,
                        now_ns: wall_ns(),
                    };
                    if rules.on_packet(&mut p, rng) == Verdict::Drop {
                        LinkCounters::add(&counters.rx_injected_drops, 1);
                        continue;
                    }
                }
                let Some((hdr, payload)) = pkt.split_at_mut_checked(split) else {
                    LinkCounters::add(&counters.rx_dropped, 1);
                    continue;
                };
                let Some(checked) = check_icrc(
                    counters,
                    deltas,
                    train_deltas,
                    crc,
                    &mut ip,
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
                let pkt = &*pkt;
                LinkCounters::add(&counters.rx_packets, 1);
                LinkCounters::add(&counters.rx_bytes, plen as u64);
                if rules.watched() {
                    rules.seen(pkt, wall_ns(), Seen::Delivered);
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
    pub(super) fn wait_readable(&self, ms: u8) {
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
/// iterator and `SocketAddr` conversion) cost more than the call itself; here the header,
/// the address and the one `UDP_GRO` control message are read in place.
pub(super) fn read_datagram(
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
pub(super) fn recv_train(
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
pub(super) fn recv_plain(
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
pub(super) fn gro_segment(msg: &libc::msghdr) -> usize {
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
pub(super) fn sockaddr_of(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
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
