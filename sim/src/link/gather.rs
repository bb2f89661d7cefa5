//! Packets the UDP link sends as gather lists: a WRITE burst's packets whose payload is sent
//! by the kernel straight from the sender's registered memory (`sendmsg` iovecs), with only
//! the headers, the pad and the ICRC in the link's own buffers.
//!
//! Owns: [`Out`] (a packet on its way out: bytes, or headers + a payload reference),
//! [`GatherPkt`] (BTH (+RETH), pad + ICRC, where its payload is) and [`Gathered`] (a round's
//! bursts and the payload iovecs of every gather packet). Must not: send anything (the link
//! does, `link::tx`), or build RoCE headers by hand (`Burst::write_headers` writes them through
//! the `bypass_hw` views; `IcrcHasher` masks them as `icrc::compute` does). The bytes on the
//! wire are exactly those of `Burst::segment_direct_into`.
//!
//! Soundness: a gather packet holds no Rust reference into host memory; the kernel reads the
//! payload through raw iovecs (as a NIC's DMA read, outside the Rust abstract machine) while
//! the round's bursts — and through their `HostRun`s the `Arc<dyn HostMemory>` buffers — are
//! kept alive by the link until `sendmsg` returns, so the memory is allocated throughout
//! (`HostMemory`'s contract: valid for as long as the value lives). The ICRC pass borrows
//! each payload piece as `&[u8]` for the length of one CRC update; see [`crc_piece`] for why
//! nothing writes it meanwhile.

use bypass_hw::roce::icrc::IcrcHasher;
use bypass_hw::roce::ip::UDP_HDR_LEN;
use bypass_hw::roce::{BTH_LEN, Bth, ICRC_LEN, IpSpec, Reth};
use zerocopy::IntoBytes;

use crate::frame::{Burst, PacketHeads, for_each_piece};
use crate::iommu::HostRun;
use crate::link::psn_deltas::PsnDeltaCache;

/// The most host runs a burst may span to be sent as gather packets: any one packet's
/// iovecs (BTH + RETH, payload pieces, pad + ICRC) then fit one `sendmsg` ([`IOV_MAX`]); the
/// link cuts trains before they would not. A more scattered burst (it takes more than 1,000
/// separate pieces of memory) is segmented into bytes instead.
pub(crate) const MAX_RUNS: usize = IOV_MAX - 2;

/// Zeroes for the pad.
const PAD: [u8; 3] = [0; 3];

/// Bytes of the longest transport header a WRITE packet carries: BTH and RETH.
const HDR_MAX: usize = BTH_LEN + std::mem::size_of::<Reth>();

/// A packet on its way out of the UDP link.
#[derive(Debug)]
pub(crate) enum Out {
    /// The whole packet, IP header through ICRC.
    Bytes(Vec<u8>),
    /// A WRITE packet whose payload stays in the sender's memory.
    Gather(GatherPkt),
}

/// The parts of a WRITE packet sent as a gather list; what its burst's packets share is in
/// the round's [`Gathered`] (this is pushed per packet: kept small).
#[derive(Debug)]
pub(crate) struct GatherPkt {
    /// BTH (+ RETH): the UDP payload's first `hdr_len` bytes.
    hdr: [u8; HDR_MAX],
    hdr_len: u8,
    /// Pad (zeroes) then the ICRC, `tail_len` bytes.
    tail: [u8; 3 + ICRC_LEN],
    tail_len: u8,
    /// The IPv4 ID the ICRC is computed for: the burst's, until the link re-stamps it.
    pub ip_id: u16,
    /// The burst (index in the round's [`Gathered`]).
    burst: u32,
    /// UDP payload bytes (BTH through ICRC).
    udp_len: u32,
    /// Payload offset in the burst and bytes (read again only for the pcap).
    at: u32,
    len: u32,
    /// The payload's iovecs: `pieces` from index `pieces_at` of the round's list.
    pieces_at: u32,
    pieces: u32,
}

impl GatherPkt {
    /// The BTH (+ RETH) bytes.
    pub(crate) fn hdr(&self) -> &[u8] {
        self.hdr.get(..usize::from(self.hdr_len)).unwrap_or(&[])
    }

    /// The pad and ICRC bytes.
    pub(crate) fn tail(&self) -> &[u8] {
        self.tail.get(..usize::from(self.tail_len)).unwrap_or(&[])
    }

    /// The ICRC bytes (the last four of the tail).
    pub(crate) fn icrc_mut(&mut self) -> Option<&mut [u8]> {
        let end = usize::from(self.tail_len);
        let start = end.checked_sub(ICRC_LEN)?;
        self.tail.get_mut(start..end)
    }

    /// Whether `other` is a packet of the same burst (same destination, source port and
    /// IP + UDP header length).
    pub(crate) fn same_burst(&self, other: &GatherPkt) -> bool {
        self.burst == other.burst
    }

    /// UDP payload bytes (BTH through ICRC).
    pub(crate) fn udp_len(&self) -> usize {
        self.udp_len as usize
    }

    /// Payload iovecs (host-memory pieces) the packet takes.
    pub(crate) fn pieces(&self) -> usize {
        self.pieces as usize
    }
}

/// A round's gathered bursts: kept (and with them the host memory their packets' iovecs
/// point into) until the round's send returns, what their packets share, and the payload
/// iovecs of every gather packet, built once while the ICRC pass walks the same pieces.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// The round's bursts (boxed as the device sent them), with the device they came from.
    bursts: Vec<(Box<Burst>, usize)>,
    /// Boxes of bursts sent and let go, with their device: [`Gathered::take_spent`] hands
    /// them back (`Device::recycle_burst`) so that the device's next burst is built in one
    /// of them (no allocation per WRITE).
    spent: Vec<(usize, Box<Burst>)>,
    pieces: Vec<RawIov>,
    /// How the ICRC of a middle packet changes with its PSN (kept across rounds).
    psn_deltas: PsnDeltaCache,
}

impl Gathered {
    /// Lets the bursts go (the send that read their memory has returned): what they held
    /// (the QP's read hold, the host memory) now, their boxes kept for
    /// [`Gathered::take_spent`]; keeps capacity and the PSN deltas.
    pub(crate) fn clear(&mut self) {
        for (mut b, dev) in self.bursts.drain(..) {
            // Read: its sender's flush may go ahead (`frame::BurstReads`).
            b.let_go();
            self.spent.push((dev, b));
        }
        self.pieces.clear();
    }

    /// The boxes of the bursts let go since the last call, with the device each came from.
    pub(crate) fn take_spent(&mut self) -> std::vec::Drain<'_, (usize, Box<Burst>)> {
        self.spent.drain(..)
    }

    /// No burst held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.bursts.is_empty()
    }

    /// `g`'s burst (what its packets share: their IP and UDP header fields).
    pub(crate) fn burst(&self, g: &GatherPkt) -> Option<&Burst> {
        self.bursts.get(g.burst as usize).map(|(b, _)| &**b)
    }

    /// The iovecs of `g`'s payload (pointing into host memory this keeps allocated: valid
    /// while `self` is kept and not cleared).
    pub(crate) fn payload_iovecs(&self, g: &GatherPkt) -> Option<&[RawIov]> {
        let at = g.pieces_at as usize;
        self.pieces.get(at..at.checked_add(g.pieces as usize)?)
    }

    /// Gather packet `g` as one buffer, IP header through ICRC, its IP header with the
    /// IPv4 ID its ICRC is for (for the pcap only: the send never assembles it). The payload
    /// is read from the burst again (`Burst::read_into`), not through the iovecs the send
    /// gives the kernel: the pcap shows the packet as built; that the iovecs carry the same
    /// bytes is `link::udp`'s test `gather_packets_arrive_as_exactly_the_segmented_bursts_packets`.
    pub(crate) fn assemble(&self, g: &GatherPkt) -> Option<Vec<u8>> {
        let b = self.burst(g)?;
        let ip = match b.ip {
            IpSpec::V4(v4) => IpSpec::V4(bypass_hw::roce::Ipv4Spec { id: g.ip_id, ..v4 }),
            v6 => v6,
        };
        let mut p = vec![0u8; ip.header_len() + UDP_HDR_LEN];
        ip.write_ip_udp(b.ports, g.udp_len(), &mut p).ok()?;
        p.extend_from_slice(g.hdr());
        let start = p.len();
        p.resize(start + g.len as usize, 0);
        if !b.read_into(g.at as usize, p.get_mut(start..)?) {
            return None;
        }
        p.extend_from_slice(g.tail());
        Some(p)
    }

    /// Appends burst `b`'s packets (from device `dev`) to `out` as gather packets, keeping `b`
    /// for the send, their payload iovecs found in the walk their ICRC pass makes over the
    /// same pieces. The packets are those of `Burst::segment_direct_into`: the same headers,
    /// the payload read from the same runs, zero pad, and the ICRC of the whole packet with
    /// IPv4 ID 0 (one CRC pass over the payload pieces, no assembled copy; the link re-stamps
    /// segment `k` of a train with its send's ID + `k`). Only what differs is done per packet:
    /// a middle packet's headers are the previous one's with PSN and AckReq patched
    /// (`Burst::write_headers`), and its CRC continues from the state after the headers of the
    /// last packet built in full, changed at the end by the PSN/AckReq difference
    /// (`link::psn_deltas`). Returns `b` back, touching nothing, if it is not a host-memory burst the link can send
    /// that way (inline payload, too many runs): the caller then segments it into bytes.
    /// Stops at the first packet that cannot be built (cannot happen for a burst the
    /// requester built).
    pub(crate) fn push_burst(
        &mut self,
        b: Box<Burst>,
        dev: usize,
        out: &mut Vec<Out>,
    ) -> Result<(), Box<Burst>> {
        let Some(runs) = b.host_runs() else {
            return Err(b);
        };
        if runs.len() > MAX_RUNS {
            return Err(b);
        }
        let Ok(index) = u32::try_from(self.bursts.len()) else {
            return Err(b);
        };
        let ip_id = match b.ip {
            IpSpec::V4(v) => v.id,
            IpSpec::V6(_) => 0,
        };
        let mut heads = PacketHeads::default();
        // The CRC state after the headers of the last packet built in full, and its BTH.
        let mut reference: Option<(IcrcHasher, Bth)> = None;
        out.reserve(b.count as usize);
        for i in 0..b.count {
            let Some(g) = b.write_headers(i, &mut heads) else {
                break;
            };
            // A patched packet's headers differ from the last fully built one's only in
            // AckReq and PSN: its CRC starts from that one's state after the headers, and
            // the difference is applied at the end (`link::psn_deltas`).
            let (mut h, psn_from) = match (&reference, g.patched) {
                (Some((rh, rb)), true) => (rh.clone(), Some(*rb)),
                _ => {
                    let Ok(h) = IcrcHasher::new(heads.ip_udp(), heads.bth().as_bytes()) else {
                        break;
                    };
                    reference = Some((h.clone(), *heads.bth()));
                    (h, None)
                }
            };
            let mut hdr = [0u8; HDR_MAX];
            let (bth, ext) = hdr.split_at_mut(BTH_LEN);
            bth.copy_from_slice(heads.bth().as_bytes());
            let mut hdr_len = BTH_LEN;
            // A middle packet has no extension header and no pad: no empty CRC updates.
            if let Some(reth) = heads.reth() {
                let reth = reth.as_bytes();
                let Some(slot) = ext.get_mut(..reth.len()) else {
                    break;
                };
                slot.copy_from_slice(reth);
                h.update(reth);
                hdr_len += reth.len();
            }
            let pieces_at = self.pieces.len();
            let Ok(pieces_at32) = u32::try_from(pieces_at) else {
                break;
            };
            let pieces = &mut self.pieces;
            let walked = for_each_piece(runs, g.payload_at, g.payload_len, |r, off, n| {
                pieces.push(crc_piece(r, off, n, &mut h));
            });
            let Some(pad) = PAD.get(..g.pad).filter(|_| walked) else {
                self.pieces.truncate(pieces_at);
                break;
            };
            if !pad.is_empty() {
                h.update(pad);
            }
            let mut tail = [0u8; 3 + ICRC_LEN];
            let tail_len = g.pad + ICRC_LEN;
            let Some(slot) = tail.get_mut(g.pad..tail_len) else {
                self.pieces.truncate(pieces_at);
                break;
            };
            let mut icrc = h.finish();
            if let Some(from) = psn_from {
                let rest = g.udp_len.checked_sub(BTH_LEN + ICRC_LEN);
                let Some(d) =
                    rest.and_then(|rest| self.psn_deltas.get(heads.ip_udp(), &from, rest))
                else {
                    self.pieces.truncate(pieces_at);
                    break;
                };
                icrc ^= d.delta(&from, heads.bth());
            }
            slot.copy_from_slice(&icrc.to_le_bytes());
            // All fit: a burst's payload offsets and lengths are below its message length (a
            // u32), its pieces fewer than its runs (below IOV_MAX), the headers and the tail
            // a few dozen bytes. Checked anyway: a value that did not fit would send a wrong
            // packet, where stopping here leaves the rest to the transport's retransmission.
            let (Ok(hdr_len), Ok(tail_len), Ok(udp_len), Ok(at), Ok(len), Ok(count)) = (
                u8::try_from(hdr_len),
                u8::try_from(tail_len),
                u32::try_from(g.udp_len),
                u32::try_from(g.payload_at),
                u32::try_from(g.payload_len),
                u32::try_from(self.pieces.len() - pieces_at),
            ) else {
                self.pieces.truncate(pieces_at);
                break;
            };
            out.push(Out::Gather(GatherPkt {
                hdr,
                hdr_len,
                tail,
                tail_len,
                ip_id,
                burst: index,
                udp_len,
                at,
                len,
                pieces_at: pieces_at32,
                pieces: count,
            }));
        }
        self.bursts.push((b, dev));
        Ok(())
    }
}

/// Feeds payload piece `off..off + n` of run `r` (as [`for_each_piece`] gives it) to `h`,
/// with no copy, and returns its iovec.
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
fn crc_piece(r: &HostRun, off: usize, n: usize, h: &mut IcrcHasher) -> RawIov {
    // The pointer is in bounds (checked by `for_each_piece`); `wrapping_add` keeps this free
    // of `unsafe` (no reference or read is made from it here).
    let start = r.mem.base().as_ptr().wrapping_add(off).cast_const();
    // SAFETY: `off..off + n` lies inside the buffer (checked by `for_each_piece`, the only
    // caller's source of pieces), which `HostMemory`'s contract keeps allocated and readable
    // while `r.mem` lives (borrowed here); nothing writes it while this borrow lives (see the
    // function's doc), and the borrow ends with this function.
    let bytes = unsafe { std::slice::from_raw_parts(start, n) };
    h.update(bytes);
    RawIov {
        base: start as usize,
        len: n,
    }
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

    /// Adds `parts` (a gather packet's payload, [`Gathered::payload_iovecs`]); false (adding
    /// nothing) when they would take the list past [`IOV_MAX`].
    pub(crate) fn extend(&mut self, parts: &[RawIov]) -> bool {
        if self.parts.len() + parts.len() > IOV_MAX {
            return false;
        }
        // One or two pieces a packet: element by element, no `memcpy` call.
        for p in parts {
            self.parts.push(*p);
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

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use bypass_hw::roce::{ROCE_V2_UDP_DPORT, RocePacket, UdpPorts};

    use super::*;
    use crate::memory::{HostMemory, SimMemory};
    use crate::profile::Profile;

    /// A WRITE burst between `src` and `dst` GIDs from UDP source port `sport`: message
    /// `msg_len` bytes cut at `mtu`, the packets from message offset `msg_off` on, first PSN
    /// `psn`, AckReq bits `ack_req`, its payload in two host buffers (the first holds `split`
    /// bytes of it). The UDP link's tests build theirs here too.
    pub(crate) fn two_run_burst(
        gids: ([u8; 16], [u8; 16]),
        (msg_len, msg_off, mtu): (u32, u32, u32),
        split: usize,
        (psn, ack_req): (u32, u128),
        sport: u16,
    ) -> Burst {
        let bytes = (msg_len - msg_off) as usize;
        let data: Vec<u8> = (0..bytes).map(|i| (i * 29 + 3) as u8).collect();
        let (a, b) = data.split_at(split.min(bytes));
        let m1 = Arc::new(SimMemory::new(bytes + 64).unwrap());
        let m2 = Arc::new(SimMemory::new(bytes + 64).unwrap());
        assert!(m1.write_at(64, a) && m2.write_at(3, b));
        let mut runs = vec![HostRun {
            mem: m1,
            off: 64,
            len: a.len(),
        }];
        if !b.is_empty() {
            runs.push(HostRun {
                mem: m2,
                off: 3,
                len: b.len(),
            });
        }
        let mut burst = Burst::blank();
        burst.ip = IpSpec::from_gids(&gids.0, &gids.1).unwrap();
        burst.ports = UdpPorts {
            src: sport,
            dst: ROCE_V2_UDP_DPORT,
        };
        burst.dest_qp = 0xabcde;
        burst.first_psn = psn;
        burst.count = (msg_len - msg_off).div_ceil(mtu).max(1);
        burst.mtu = mtu;
        burst.msg_off = msg_off;
        burst.msg_len = msg_len;
        burst.raddr = 0x1234_5678_9000;
        burst.rkey = 0x42;
        burst.ack_req = ack_req;
        burst.src = crate::frame::Payload::Host(runs);
        burst
    }

    /// (message length, first packet's message offset, MTU), bytes in the first run, first
    /// PSN, AckReq bits.
    type Case = ((u32, u32, u32), usize, u32, u128);

    #[test]
    fn gather_packets_are_the_segmented_bursts_bytes_for_patched_headers_and_psn_deltas() {
        let v4 = (
            Profile::ipv4_gid([10, 0, 0, 1]),
            Profile::ipv4_gid([10, 0, 0, 2]),
        );
        let v6 = (
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1],
        );
        // Middle packets by the dozen (their headers patched, their ICRCs by PSN delta),
        // across a PSN wrap and every AckReq pattern, for both IP versions, several lengths,
        // bursts that start and end mid-message and a run boundary inside a packet.
        let cases: [Case; 6] = [
            (
                (40 * 256 + 3, 0, 256),
                1000,
                0x00ff_fff0,
                0x5555_aaaa_0f0f_f0f0,
            ),
            ((40 * 256, 512, 256), 7, 0x00ff_ffff, u128::MAX),
            ((30 * 1024 + 1, 0, 1024), 4096, 0, 1 << 29),
            ((64 * 4096, 4096, 4096), 100_000, 0x0012_3456, 0),
            ((20 * 512 + 2, 0, 512), 0, 0x00ff_fffe, 0xffff_0000),
            ((40 * 256 + 3, 0, 256), 5, 7, 0x1234_5678_9abc_def0),
        ];
        let mut gathered = Gathered::default();
        for gids in [v4, v6] {
            for (case, &(shape, split, psn, ack_req)) in cases.iter().enumerate() {
                let b = two_run_burst(gids, shape, split, (psn, ack_req), 0xc0de);
                let want = b.segment();
                let mut out = Vec::new();
                gathered.clear();
                assert!(gathered.push_burst(Box::new(b), 0, &mut out).is_ok());
                assert_eq!(out.len(), want.len(), "case {case}");
                for (i, (p, want)) in out.iter().zip(&want).enumerate() {
                    let Out::Gather(g) = p else {
                        panic!("case {case}: packet {i} is not a gather packet");
                    };
                    let got = gathered.assemble(g).unwrap();
                    assert_eq!(&got, want, "case {case}, packet {i}");
                    assert!(RocePacket::parse(&got).unwrap().icrc_ok());
                }
            }
        }
    }

    #[test]
    fn a_sent_burst_lets_its_memory_go_and_keeps_its_box_for_the_device() {
        let v4 = (
            Profile::ipv4_gid([10, 0, 0, 1]),
            Profile::ipv4_gid([10, 0, 0, 2]),
        );
        let b = Box::new(two_run_burst(v4, (3000, 0, 1024), 1000, (7, 0), 0xc0de));
        let boxed: *const Burst = &*b;
        let mut gathered = Gathered::default();
        let mut out = Vec::new();
        assert!(gathered.push_burst(b, 3, &mut out).is_ok());
        assert!(
            gathered.take_spent().next().is_none(),
            "kept until the send"
        );
        gathered.clear();
        assert!(gathered.is_empty());
        let spent: Vec<_> = gathered.take_spent().collect();
        assert_eq!(spent.len(), 1);
        let (dev, b) = &spent[0];
        assert_eq!(*dev, 3, "back to the device that sent it");
        assert!(std::ptr::eq(&**b, boxed), "the same box");
        assert!(b.hold.is_none());
        assert!(
            b.host_runs().is_some_and(<[_]>::is_empty),
            "no host memory kept alive"
        );
        assert!(gathered.take_spent().next().is_none());
    }
}
