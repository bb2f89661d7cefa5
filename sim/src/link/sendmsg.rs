//! The UDP link's send system calls: `sendmsg` of one send and `sendmmsg` of a batch, each a
//! gather list with an optional `UDP_SEGMENT` segment size.
//!
//! Owns: [`Pending`] and [`SendBatch`] (the sends queued for one socket and their iovec
//! lists), the control message, and [`count_send`] (what a send's outcome does to the
//! counters, to segmentation and to a connected socket's ID count). Must not: decide what is
//! sent or where (`link::tx`, `link::socket`).
//!
//! Sources: `include/uapi/linux/udp.h` (`UDP_SEGMENT`); `net/socket.c` `__sys_sendmmsg` (the
//! kernel stops at the first send that fails and reports the error only when it is the
//! first). Raw `libc` calls: nix takes `IoSlice`s, Rust references, and a gather packet's
//! payload must stay unreferenced host memory (`link::gather`).

use std::net::SocketAddr;

use nix::sys::socket::SockaddrStorage;

use super::connected::Connected;
use super::counters::LinkCounters;
use super::gather::IovList;
use crate::frame::TxTrains;

/// The most UDP payload bytes one segmented (`UDP_SEGMENT`) send carries: an IPv4 datagram
/// holds at most 65,507 bytes of UDP payload (the kernel refuses more with `EMSGSIZE`).
pub(crate) const GSO_MAX_BYTES: usize = 65_000;

/// The most segments in one segmented send (Linux `UDP_MAX_SEGMENTS`, 64 before 6.9).
pub(crate) const GSO_MAX_SEGS: usize = 64;

/// The link's segmented sends as the requester sees them ([`TxTrains`]: it ends window-cut
/// WRITE bursts where a send ends).
pub(crate) const GSO_TRAINS: TxTrains = TxTrains {
    max_segments: GSO_MAX_SEGS as u32,
    max_bytes: GSO_MAX_BYTES as u32,
};

/// The most sends one `sendmmsg` carries (a pump round's window of 64 4 KiB packets is about
/// five segmented sends).
pub(super) const MAX_BATCH: usize = 16;

/// One send queued by `UdpLink::queue`: socket, destination, segment size (`None`: one
/// datagram), and what it carries, for the counters.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) fd: std::os::fd::RawFd,
    pub(super) to: SocketAddr,
    /// The connected socket `fd` is (`None`: an unconnected one, sent to `to`).
    pub(super) conn: Option<u32>,
    pub(super) seg: Option<u16>,
    pub(super) packets: u64,
    pub(super) gathered: u64,
}

/// The sends of one `UdpLink::send_all`, all from one socket, and their iovec lists (kept
/// for reuse: `iovs[k]` is send `k`'s).
#[derive(Debug, Default)]
pub(super) struct SendBatch {
    pub(super) sends: Vec<Pending>,
    pub(super) iovs: Vec<IovList>,
}

/// Writes a `UDP_SEGMENT` control message of `seg` into `control` and points `msg` at it
/// (`msg` then borrows `control`: it must not be used after `control` goes). False if it
/// does not fit.
pub(super) fn set_segment(msg: &mut libc::msghdr, control: &mut [u64; 4], seg: u16) -> bool {
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
pub(super) fn count_send(
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
            if e == nix::errno::Errno::EMSGSIZE {
                // DF is set: the route's MTU is below the packet. Count it as what it is and
                // keep the route's MTU, so the tools can name it.
                LinkCounters::add(&counters.tx_mtu_drops, q.packets);
                if let Some(mtu) = super::socket::route_mtu(q.fd, q.to, q.conn.is_some()) {
                    counters
                        .route_mtu
                        .store(u64::from(mtu), std::sync::atomic::Ordering::Relaxed);
                }
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
/// datagrams were able to be sent"; the ones after it are tried again). On a connected
/// socket a send that is lost ends the batch: each send after it was stamped with the IPv4 ID
/// after the one before it (`link::connected`), and whether the kernel gave the lost one its
/// ID is not known, so they are not made (`ECANCELED`; the transport retransmits them, by
/// then on a socket probed again). EINTR is retried. Returns how many `sendmmsg` calls it
/// made.
pub(super) fn sendmmsg_iov(
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
        let lost = run == 0 || {
            // SAFETY: `hs[..run]` are valid headers whose every pointer (`addrs`, `iovs`'
            // arrays, `controls`, and the memory the iovecs point at: the link's buffers or
            // host memory the caller keeps until `send_all` returns) outlives the call; the
            // kernel writes only `msg_len` of each.
            let r = unsafe { libc::sendmmsg(fd, hs.as_mut_ptr(), run as _, 0) };
            calls += 1;
            match usize::try_from(r) {
                Ok(sent) if sent > 0 => {
                    let sent = sent.min(run);
                    for (r, h) in rs.iter_mut().zip(hs.iter()).take(sent) {
                        *r = Ok(h.msg_len as usize);
                    }
                    done += sent;
                    false
                }
                _ => match nix::errno::Errno::last() {
                    nix::errno::Errno::EINTR if r < 0 => false,
                    e => {
                        // The first of the run failed (the kernel reports an error only when
                        // nothing was sent): it is lost.
                        if let Some(first) = rs.first_mut() {
                            *first = Err(if r < 0 { e } else { nix::errno::Errno::EIO });
                        }
                        true
                    }
                },
            }
        };
        if lost {
            if sends.get(done).is_some_and(|q| q.conn.is_some()) {
                for r in results.iter_mut().take(n).skip(done + 1) {
                    *r = Err(nix::errno::Errno::ECANCELED);
                }
                break;
            }
            // Unconnected: the rest are tried again.
            done += 1;
        }
    }
    calls
}

/// Linux `UDP_SEGMENT` (`include/uapi/linux/udp.h`; the `libc` crate defines it only for
/// some targets): the segment size of a segmented send, as a `SOL_UDP` control message.
pub(super) const UDP_SEGMENT: libc::c_int = 103;

/// `sendmsg` of the iovecs `iov` to `to` on socket `fd` (`None`: the socket's connected
/// peer), with a `UDP_SEGMENT` control message of `seg` when given; the bytes sent. EINTR is
/// retried.
///
/// Raw `libc::sendmsg` rather than nix's: nix takes `IoSlice`s, Rust references, and a
/// gather packet's payload must stay unreferenced host memory (see `link::gather`).
pub(super) fn sendmsg_iov(
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
