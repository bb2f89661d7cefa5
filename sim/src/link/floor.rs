//! The kernel's share of a UDP link's round trip: what a WRITE ping-pong over the link costs
//! in socket calls alone, with no device behind them.
//!
//! Owns: [`link_pingpong_rtts`] and [`segmented_stream_rate`] (the floors `bypass perf
//! compare-udp` prints beside its plain UDP and TCP baselines) and [`write_round_trip_lens`]
//! (the UDP payload lengths of the packets a WRITE round trip puts on the wire). Must not:
//! touch a device or the link's sockets; it binds its own.
//!
//! Why it exists: in a WRITE ping-pong each side's reply leaves as one send of the WRITE
//! alone, followed by a second send of the ACK of the peer's WRITE held for it (see
//! `link::udp`), both on a socket `connect`ed to the peer (`link::connected`); each is read
//! with its own `recvfrom` on the unconnected receiving socket, whose `UDP_GRO` the link
//! turns off while only small datagrams arrive (`link::rx_mode`). Those calls cost something
//! other than a plain one-datagram `sendto`/`recvfrom` ping-pong; what is measured here, in
//! the same run, so that the link's own overhead is the difference above this floor. A
//! WRITE stream goes out as segmented sends of 4 KiB-MTU packets read with `UDP_GRO`; what
//! those calls alone carry, with the same window of unacknowledged bytes, is the streaming
//! floor.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bypass_hw::roce::BthOpcode;
use bypass_hw::roce::packet::udp_payload_len;

use super::udp::{GSO_MAX_BYTES, GSO_MAX_SEGS};
use nix::sys::socket::{
    ControlMessage, MsgFlags, SockaddrStorage, recvmsg, sendmsg, setsockopt, sockopt,
};

/// The UDP payload lengths (BTH .. ICRC) of an RC RDMA WRITE ONLY of `size` bytes (not
/// inline or inline: the same on the wire) and of the ACK that answers it.
pub fn write_round_trip_lens(size: usize) -> Option<(usize, usize)> {
    Some((
        udp_payload_len(BthOpcode::RC_RDMA_WRITE_ONLY, size)?,
        udp_payload_len(BthOpcode::RC_ACKNOWLEDGE, 0)?,
    ))
}

/// The UDP payload length (BTH .. ICRC) of a full RDMA WRITE MIDDLE packet at path MTU
/// `mtu`: the datagrams of a WRITE stream.
pub fn write_stream_segment_len(mtu: usize) -> Option<usize> {
    udp_payload_len(BthOpcode::RC_RDMA_WRITE_MIDDLE, mtu)
}

/// A ping-pong between `a` and `b` where each side sends what a UDP link sends in a WRITE
/// ping-pong: a `request`-byte datagram, then an `ack`-byte one (the ACK of the peer's last
/// request) in a second send, both from a sending socket connected to the peer (`link::udp`
/// sends a round's requests before the ACKs held for them), read by the peer with `recvfrom`
/// on its receiving socket, `UDP_GRO` off, as a link reads single small datagrams
/// (`link::rx_mode`): the request when it arrives, the ACK on the way to the next request
/// (where the link's next wait-loop round reads it). The round-trip times in ns,
/// `iters` of them after `warmup` untimed ones; port 0 in `a` or `b` binds a free port.
/// `threads` 2: each side in its own thread, busy-polling and yielding between polls (as the
/// link's wait loops and the plain ping-pong baseline do); 1: both sides in this thread, one
/// after the other (as `bypass perf compare-udp --rtt-threads 1` runs the two NICs). This is
/// the socket calls' share of that loop. A `request` no longer than `ack` is refused
/// (`InvalidInput`): the reader tells them apart by length.
pub fn link_pingpong_rtts(
    a: SocketAddr,
    b: SocketAddr,
    (request, ack): (usize, usize),
    (iters, warmup): (usize, usize),
    threads: u8,
) -> io::Result<Vec<u64>> {
    if request <= ack {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let sa = UdpSocket::bind(a)?;
    let sb = UdpSocket::bind(b)?;
    for s in [&sa, &sb] {
        s.set_nonblocking(true)?;
    }
    // The sending sockets, as the link's: one per side, connected to the peer's receiving
    // socket (port 0 in `a` or `b` bound a free port: connect to the one bound).
    // `to_b`: a's socket to b; `to_a`: b's to a.
    let (to_b, to_a) = (
        connected(a, sb.local_addr()?)?,
        connected(b, sa.local_addr()?)?,
    );
    let pair = Pair {
        req: vec![0x5au8; request],
        ack: vec![0x11u8; ack],
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let total = iters + warmup;
    let mut rtts = Vec::with_capacity(iters);
    if threads < 2 {
        let mut buf = vec![0u8; 65_536];
        for i in 0..total {
            let t0 = Instant::now();
            pair.send(&to_b)?;
            pair.recv(&sb, &mut buf, deadline, false)?;
            pair.send(&to_a)?;
            pair.recv(&sa, &mut buf, deadline, false)?;
            if i >= warmup {
                rtts.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
        }
        return Ok(rtts);
    }
    std::thread::scope(|s| {
        let echo = s.spawn(|| -> io::Result<()> {
            let mut buf = vec![0u8; 65_536];
            for _ in 0..total {
                pair.recv(&sb, &mut buf, deadline, true)?;
                pair.send(&to_a)?;
            }
            Ok(())
        });
        let mut buf = vec![0u8; 65_536];
        let timed = (|| -> io::Result<()> {
            for i in 0..total {
                let t0 = Instant::now();
                pair.send(&to_b)?;
                pair.recv(&sa, &mut buf, deadline, true)?;
                if i >= warmup {
                    rtts.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                }
            }
            Ok(())
        })();
        let echoed = echo
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        timed.and(echoed)
    })?;
    Ok(rtts)
}

/// The two datagrams one side of [`link_pingpong_rtts`] sends.
struct Pair {
    req: Vec<u8>,
    ack: Vec<u8>,
}

impl Pair {
    /// The request, then the ACK, each in its own send on `to`, a socket connected to the
    /// peer (no address, as the link sends on one).
    fn send(&self, to: &UdpSocket) -> io::Result<()> {
        for d in [&self.req, &self.ack] {
            sendmsg::<SockaddrStorage>(
                to.as_raw_fd(),
                &[IoSlice::new(d)],
                &[],
                MsgFlags::empty(),
                None,
            )
            .map_err(io::Error::from)?;
        }
        Ok(())
    }

    /// Reads datagrams on `on` (`recvfrom`) until the peer's request, into `buf`; an ACK read
    /// on the way is the one sent after the peer's previous request. `yielding`: yields the
    /// core between empty polls.
    fn recv(
        &self,
        on: &UdpSocket,
        buf: &mut [u8],
        deadline: Instant,
        yielding: bool,
    ) -> io::Result<()> {
        loop {
            match on.recv_from(buf) {
                Ok((n, _)) if n > self.ack.len() => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    if yielding {
                        std::thread::yield_now();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A sending socket on `local`'s address (any port) connected to `to`, the link's own
/// (`link::connected`: `IP_PMTUDISC_DO`, shared port).
fn connected(local: SocketAddr, to: SocketAddr) -> io::Result<UdpSocket> {
    super::connected::connected_socket(SocketAddr::new(local.ip(), 0), to).map_err(io::Error::from)
}

/// Streams `total` bytes of UDP payload from `a` to `b` as segmented sends of `seg`-byte
/// datagrams (as many as fit one send), read by a second thread with `recvmsg` on a
/// `UDP_GRO` socket; the sender keeps at most `window` bytes ahead of what the reader has
/// read (the role the RC window and its ACKs play for the link, without packets); port 0 in
/// `a` or `b` binds a free port. Both
/// threads busy-poll and yield between polls, as the link's threads do. Returns the bytes
/// per second the reader got, from the first send to the last byte read.
pub fn segmented_stream_rate(
    a: SocketAddr,
    b: SocketAddr,
    seg: usize,
    total: u64,
    window: u64,
) -> io::Result<f64> {
    let sa = UdpSocket::bind(a)?;
    let sb = UdpSocket::bind(b)?;
    let b_bound = sb.local_addr()?;
    sb.set_nonblocking(true)?;
    setsockopt(&sb, sockopt::UdpGroSegment, &true).map_err(io::Error::from)?;
    if setsockopt(&sb, sockopt::RcvBufForce, &(32usize << 20)).is_err() {
        // Without CAP_NET_ADMIN the window below still fits the default buffer.
        let _ = setsockopt(&sb, sockopt::RcvBuf, &(32usize << 20));
    }
    let segs = (GSO_MAX_BYTES / seg.max(1)).clamp(1, GSO_MAX_SEGS);
    let seg16 = u16::try_from(seg).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let train = vec![0x5au8; seg * segs];
    let got = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(60);
    let reader = {
        let got = got.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut cmsg = nix::cmsg_space!(libc::c_int);
            let mut n = 0u64;
            while n < total && Instant::now() < deadline {
                let mut iov = [IoSliceMut::new(&mut buf)];
                match recvmsg::<SockaddrStorage>(
                    sb.as_raw_fd(),
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::MSG_DONTWAIT,
                ) {
                    Ok(m) => {
                        n += m.bytes as u64;
                        got.store(n, Ordering::Release);
                    }
                    Err(_) => std::thread::yield_now(),
                }
            }
        })
    };
    // Port 0 binds any free port: send to the one bound, connected as a link's sends are.
    sa.connect(b_bound)?;
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < total && Instant::now() < deadline {
        if sent.saturating_sub(got.load(Ordering::Acquire)) >= window {
            std::thread::yield_now();
            continue;
        }
        let len = usize::try_from(total - sent).map_or(train.len(), |r| r.min(train.len()));
        let iov = [IoSlice::new(train.get(..len).unwrap_or(&[]))];
        let cm = [ControlMessage::UdpGsoSegments(&seg16)];
        sent += sendmsg::<SockaddrStorage>(sa.as_raw_fd(), &iov, &cm, MsgFlags::empty(), None)
            .map_err(io::Error::from)? as u64;
    }
    while got.load(Ordering::Acquire) < total && Instant::now() < deadline {
        std::thread::yield_now();
    }
    let secs = t0.elapsed().as_secs_f64();
    let _ = reader.join();
    let n = got.load(Ordering::Acquire);
    if n < total {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the reader got {n} of {total} bytes in 60 s (datagrams dropped?)"),
        ));
    }
    Ok(n as f64 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_8_byte_write_and_its_ack_are_40_and_20_bytes_of_udp_payload() {
        // BTH 12 + RETH 16 + 8 + ICRC 4; BTH 12 + AETH 4 + ICRC 4.
        assert_eq!(write_round_trip_lens(8), Some((40, 20)));
        // A payload of 5 is padded to 8.
        assert_eq!(write_round_trip_lens(5), Some((40, 20)));
        // BTH 12 + 4096 + ICRC 4.
        assert_eq!(write_stream_segment_len(4096), Some(4112));
    }

    #[test]
    fn the_segmented_stream_delivers_every_byte_it_is_asked_for() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        // 100 datagrams of 4112 B, 64 KiB in flight at most.
        let rate = segmented_stream_rate(any, any, 4112, 411_200, 64 << 10).unwrap();
        assert!(rate > 0.0);
    }

    #[test]
    fn the_link_pingpong_times_every_round_trip_it_is_asked_for() {
        // Port 0: each side binds a free port (no probe-and-rebind race).
        let a: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for threads in [1, 2] {
            let rtts = link_pingpong_rtts(a, b, (40, 20), (20, 2), threads).unwrap();
            assert_eq!(rtts.len(), 20);
            assert!(rtts.iter().all(|&ns| ns > 0));
        }
        // The reader tells the request from the ACK by its length.
        let same = link_pingpong_rtts(a, b, (20, 20), (1, 0), 1).unwrap_err();
        assert_eq!(same.kind(), io::ErrorKind::InvalidInput);
    }
}
