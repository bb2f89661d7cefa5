//! Packets the UDP link sends as gather lists: a WRITE burst's packets whose payload is sent
//! by the kernel straight from the sender's registered memory (`sendmsg` iovecs), with only
//! the headers, the pad and the ICRC in the link's own buffers.
//!
//! Owns: [`Out`] (a packet on its way out: bytes, or headers + a payload reference),
//! [`push_burst`] (a burst's packets as gather packets, ICRC computed from the pieces) and
//! [`payload_iovecs`] (the iovecs of a gather packet's payload). Must not: send anything (the
//! link does, `link::udp`), or build RoCE headers by hand (`Burst::write_headers` writes them
//! through the `bypass_hw` views; `IcrcHasher` masks them as `icrc::compute` does).
//!
//! The bytes on the wire are exactly those of `Burst::segment_direct_into`: the same headers,
//! the payload read from the same runs, zero pad, and the ICRC of the whole packet with IPv4
//! ID 0 (one CRC pass over the payload pieces, no assembled copy); the link re-stamps segment
//! `k` of a train with ID `k` by XOR, as for any packet.
//!
//! Soundness: a gather packet holds no Rust reference into host memory; the kernel reads the
//! payload through raw iovecs (as a NIC's DMA read, outside the Rust abstract machine) while
//! the round's bursts — and through their `HostRun`s the `Arc<dyn HostMemory>` buffers — are
//! kept alive by the link until `sendmsg` returns, so the memory is allocated throughout
//! (`HostMemory`'s contract: valid for as long as the value lives). The ICRC pass borrows
//! each payload piece as `&[u8]` for the length of one CRC update; see [`crc_pieces`] for why
//! nothing writes it meanwhile.

use std::net::IpAddr;

use bypass_hw::roce::icrc::IcrcHasher;
use bypass_hw::roce::{BTH_LEN, ICRC_LEN, IpSpec, UdpPorts};

use crate::frame::{Burst, IpUdpMemo};
use crate::iommu::HostRun;

/// The most host runs a burst may span to be sent as gather packets: any one packet's
/// iovecs (BTH + RETH, payload pieces, pad + ICRC) then fit one `sendmsg` ([`IOV_MAX`]); the
/// link cuts trains before they would not. A more scattered burst (it takes more than 1,000
/// separate pieces of memory) is segmented into bytes as before.
pub(crate) const MAX_RUNS: usize = IOV_MAX - 2;

/// Zeroes for the pad.
const PAD: [u8; 3] = [0; 3];

/// A packet on its way out of the UDP link.
#[derive(Debug)]
pub(crate) enum Out {
    /// The whole packet, IP header through ICRC.
    Bytes(Vec<u8>),
    /// A WRITE packet whose payload stays in the sender's memory.
    Gather(GatherPkt),
}

/// The parts of a WRITE packet sent as a gather list.
#[derive(Debug)]
pub(crate) struct GatherPkt {
    /// IP + UDP + BTH (+ RETH) headers (IPv4 ID 0 until the link re-stamps it).
    pub head: Vec<u8>,
    /// Where the packet goes and its lengths, as `wire_of` would find them.
    pub ip: IpSpec,
    /// `ip`'s destination address.
    pub dst: IpAddr,
    /// UDP ports.
    pub ports: UdpPorts,
    /// Bytes of IP + UDP header at the front of `head`.
    pub ip_udp_len: usize,
    /// UDP payload bytes (BTH through ICRC).
    pub udp_len: usize,
    /// The burst (index in the round's burst list) and the payload's offset and length in it.
    pub burst: usize,
    /// Payload offset in the burst.
    pub at: usize,
    /// Payload bytes.
    pub len: usize,
    /// Payload pieces (host runs it spans).
    pub pieces: usize,
    /// Pad (zeroes) then the ICRC, `tail_len` bytes.
    pub tail: [u8; 3 + ICRC_LEN],
    /// Bytes of `tail` sent.
    pub tail_len: usize,
}

impl GatherPkt {
    /// The ICRC bytes (the last four of the tail).
    pub(crate) fn icrc_mut(&mut self) -> Option<&mut [u8]> {
        let start = self.tail_len.checked_sub(ICRC_LEN)?;
        self.tail.get_mut(start..self.tail_len)
    }
}

/// Calls `f` with each piece (host run, offset in it, bytes) of burst payload bytes
/// `at..at + len`, in order. False if the runs are shorter or a run lies outside its buffer
/// (cannot happen for a burst the requester built). The one walk over a burst's runs: the
/// gather transmit here and `Burst::read_into`'s copy both go through it.
pub(crate) fn for_each_piece(
    runs: &[HostRun],
    mut at: usize,
    len: usize,
    mut f: impl FnMut(&HostRun, usize, usize),
) -> bool {
    let mut done = 0;
    for r in runs {
        if done == len {
            break;
        }
        if at >= r.len {
            at -= r.len;
            continue;
        }
        let n = (r.len - at).min(len - done);
        let in_buffer = r
            .off
            .checked_add(at)
            .and_then(|s| s.checked_add(n))
            .is_some_and(|end| end <= r.mem.len());
        if !in_buffer {
            return false;
        }
        f(r, r.off + at, n);
        done += n;
        at = 0;
    }
    done == len
}

/// Feeds payload bytes `at..at + len` of `runs` to `h`, piece by piece (no copy); returns the
/// pieces, or `None` if the runs do not hold them.
///
/// Why nothing writes these bytes while they are borrowed (the guarantee
/// `Burst::read_into` relies on too): the link runs this under the world lock, during the
/// round that took the burst from its device, and
/// - the application cannot: the buffer of a posted WRITE is moved into the QP with its
///   lease until the completion is polled (`bypass-verbs` crate docs, "Soundness" rules 2
///   and 3: `verbs-api/src/lib.rs`, `verbs-api/src/pool.rs`), or is a frozen `SharedLease`,
///   read-only while any clone lives (rule 7, `verbs-api/src/shared.rs`); the `unsafe`
///   driver-level post hands the same promise to its caller; the requester only builds a
///   burst for a WQE not yet completed;
/// - no device of this world can: devices write host memory only while they are stepped or
///   handed a packet, which happens under the world lock this runs under.
pub(crate) fn crc_pieces(
    runs: &[HostRun],
    at: usize,
    len: usize,
    h: &mut IcrcHasher,
) -> Option<usize> {
    let mut pieces = 0usize;
    let ok = for_each_piece(runs, at, len, |r, off, n| {
        // SAFETY: `off..off + n` lies inside the buffer (checked by `for_each_piece`), which
        // `HostMemory`'s contract keeps allocated and readable while `r.mem` lives (borrowed
        // here); nothing writes it while this borrow lives (see the function's doc), and
        // the borrow ends with this closure.
        let bytes = unsafe { std::slice::from_raw_parts(r.mem.base().as_ptr().add(off), n) };
        h.update(bytes);
        pieces += 1;
    });
    ok.then_some(pieces)
}

/// Appends burst `b`'s packets to `out` as gather packets (headers in buffers taken from
/// `spare`), keeping `b` in `bursts` for the send; returns false, touching nothing, if the
/// burst is not a host-memory burst the link can send that way (inline payload, too many
/// runs): the caller then segments it into bytes. Stops at the first packet that cannot be
/// built (cannot happen for a burst the requester built).
pub(crate) fn push_burst(
    b: Box<Burst>,
    bursts: &mut Vec<Burst>,
    out: &mut Vec<Out>,
    spare: &mut Vec<Vec<u8>>,
) -> Result<(), Box<Burst>> {
    let Some(runs) = b.host_runs() else {
        return Err(b);
    };
    if runs.len() > MAX_RUNS {
        return Err(b);
    }
    let index = bursts.len();
    let dst = match b.ip {
        IpSpec::V4(v) => IpAddr::from(v.dst),
        IpSpec::V6(v) => IpAddr::from(v.dst),
    };
    let mut memo = IpUdpMemo::default();
    for i in 0..b.count {
        let mut head = spare.pop().unwrap_or_default();
        let Some(g) = b.write_headers(i, &mut head, &mut memo) else {
            break;
        };
        let (Some(ip_udp), Some(bth), Some(ext)) = (
            head.get(..g.ip_udp_len),
            head.get(g.ip_udp_len..g.ip_udp_len + BTH_LEN),
            head.get(g.ip_udp_len + BTH_LEN..),
        ) else {
            break;
        };
        let Ok(mut h) = IcrcHasher::new(ip_udp, bth) else {
            break;
        };
        // A middle packet has no extension header and no pad: no empty CRC updates.
        if !ext.is_empty() {
            h.update(ext);
        }
        let Some(pieces) = crc_pieces(runs, g.payload_at, g.payload_len, &mut h) else {
            break;
        };
        let Some(pad) = PAD.get(..g.pad) else {
            break;
        };
        if !pad.is_empty() {
            h.update(pad);
        }
        let mut tail = [0u8; 3 + ICRC_LEN];
        let tail_len = g.pad + ICRC_LEN;
        let Some(slot) = tail.get_mut(g.pad..tail_len) else {
            break;
        };
        slot.copy_from_slice(&h.finish().to_le_bytes());
        out.push(Out::Gather(GatherPkt {
            head,
            ip: b.ip,
            dst,
            ports: b.ports,
            ip_udp_len: g.ip_udp_len,
            udp_len: g.udp_len,
            burst: index,
            at: g.payload_at,
            len: g.payload_len,
            pieces,
            tail,
            tail_len,
        }));
    }
    bursts.push(*b);
    Ok(())
}

/// Appends the iovecs of `p`'s payload (pieces of `bursts[p.burst]`'s runs) to `iov`.
/// False if the burst or its runs are not there (cannot happen for a packet `push_burst`
/// built from them).
///
/// The iovecs point into host memory that `bursts` keeps allocated: they are only valid
/// while the caller keeps `bursts` alive and unchanged (it sends them before it lets go of
/// the bursts).
pub(crate) fn payload_iovecs(p: &GatherPkt, bursts: &[Burst], iov: &mut IovList) -> bool {
    let Some(runs) = bursts.get(p.burst).and_then(|b| b.host_runs()) else {
        return false;
    };
    let mut ok = true;
    let walked = for_each_piece(runs, p.at, p.len, |r, off, n| {
        // The pointer is in bounds (checked by `for_each_piece`); `wrapping_add` keeps this
        // free of `unsafe` (no reference or read is made here; the kernel reads it).
        ok &= iov.push(r.mem.base().as_ptr().wrapping_add(off).cast_const(), n);
    });
    ok && walked
}

/// The most iovecs one `sendmsg` takes (Linux `UIO_MAXIOV`, `IOV_MAX` = 1024).
pub(crate) const IOV_MAX: usize = 1024;

/// One iovec as plain integers: the layout of `libc::iovec` (a pointer and a `size_t`, both
/// pointer-sized on every Linux target: checked below), without its raw pointer, so the link
/// that keeps a list of them stays `Send`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawIov {
    base: usize,
    len: usize,
}

const _: () = assert!(
    std::mem::size_of::<RawIov>() == std::mem::size_of::<libc::iovec>()
        && std::mem::align_of::<RawIov>() == std::mem::align_of::<libc::iovec>()
);

/// An iovec list for one `sendmsg`, reused.
#[derive(Debug, Default)]
pub(crate) struct IovList {
    parts: Vec<RawIov>,
}

impl IovList {
    /// Empties the list (keeps its capacity).
    pub(crate) fn clear(&mut self) {
        self.parts.clear();
    }

    /// Adds `len` bytes at `ptr`; false (adding nothing) when the list holds [`IOV_MAX`].
    pub(crate) fn push(&mut self, ptr: *const u8, len: usize) -> bool {
        if self.parts.len() >= IOV_MAX {
            return false;
        }
        if len > 0 {
            self.parts.push(RawIov {
                base: ptr as usize,
                len,
            });
        }
        true
    }

    /// Adds `bytes` (the link's own buffer).
    pub(crate) fn push_slice(&mut self, bytes: &[u8]) -> bool {
        self.push(bytes.as_ptr(), bytes.len())
    }

    /// The list as `libc::iovec`s (same layout) for `msghdr.msg_iov`.
    pub(crate) fn as_iovecs(&self) -> *const libc::iovec {
        self.parts.as_ptr().cast()
    }

    /// How many.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }
}
