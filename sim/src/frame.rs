//! What a device hands to the link and takes from it: wire bytes, a burst of consecutive RC
//! RDMA WRITE packets of one message whose payload is still in the sender's memory, or an
//! ACKNOWLEDGE as its fields.
//!
//! Owns: [`Frame`] and [`Burst`], and the segmentation of a burst into the exact wire packets
//! the per-packet path would have sent (headers, AckReq bits, RETH on the first packet of the
//! message, pad, ICRC); the one walk over a burst's payload runs (`for_each_piece`);
//! [`AckFrame`] and [`AckWriter`] (an ACK frame as those bytes, a flow's headers and their
//! ICRC state kept between ACKs). Must not: decide transport semantics (the requester builds
//! bursts, the responder applies them or, when anything differs from the plain case, segments
//! them and takes the packets one by one).
//!
//! Why a burst may carry its payload by reference: a NIC reads the source buffer by DMA when
//! it transmits, and RC semantics forbid the application to change it before the WRITE
//! completes; reading it at delivery (one copy, source → destination) is what a transmit at
//! that instant would have sent. A retransmission builds a new burst and reads it again, as
//! hardware does. Anything that needs the bytes (the trace, a jittery or lossy link, the UDP
//! link through `Device::take_tx`) gets them segmented here, ICRC included.

use std::sync::Arc;

use bypass_hw::roce::icrc::IcrcHeaderState;

use crate::header_cache::HeaderCache;
use bypass_hw::roce::opcode::{pad_len, psn_add};
use bypass_hw::roce::{
    Aeth, BTH_LEN, Bth, BthFields, BthOpcode, DEFAULT_PKEY, ExtFields, ICRC_LEN, IpSpec,
    PacketSpec, Reth, RocePacket, UdpPorts, emit,
};

use crate::iommu::HostRun;
use crate::memory::HostMemory;

/// The largest path MTU: a burst's packets carry at most this many payload bytes.
const MAX_MTU: usize = 4096;

/// Zeroes standing in for a payload when only a packet's length is wanted.
static ZEROS: [u8; MAX_MTU] = [0; MAX_MTU];

/// How the link a device sends on groups packets into one send (the UDP link's segmented
/// sends: at most `max_segments` packets of equal UDP payload, the last may be shorter, and
/// `max_bytes` of UDP payload in all). A requester told this ends a WRITE burst that the
/// window cuts short where a full send ends (`transport::requester`), so that the link's
/// sends are full; the packets and their bytes do not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxTrains {
    /// The most packets in one send.
    pub max_segments: u32,
    /// The most UDP payload bytes in one send.
    pub max_bytes: u32,
}

impl TxTrains {
    /// Packets of one send for WRITE packets of `mtu` payload bytes (BTH, payload and ICRC:
    /// the middle packets of a message), at least 1.
    pub fn packets(&self, mtu: u32) -> u32 {
        let udp = mtu.saturating_add((BTH_LEN + ICRC_LEN) as u32);
        (self.max_bytes / udp).min(self.max_segments).max(1)
    }

    /// The last place at or before packet `end` of a WRITE message (packets numbered from 0)
    /// where one of the link's sends ends, for packets of `mtu` payload bytes: the message's
    /// first send is its first two packets (the WRITE_FIRST is longer, by its RETH, than the
    /// packets after it, and a send's segments are equally long but for a shorter last, so
    /// the second packet ends it), then [`TxTrains::packets`] at a time. 0 before the first
    /// send's end.
    pub fn send_end(&self, mtu: u32, end: u32) -> u32 {
        let t = self.packets(mtu);
        if end >= 2 { 2 + (end - 2) / t * t } else { 0 }
    }
}

/// A packet or a run of packets on its way between two devices.
#[derive(Debug, Clone)]
pub enum Frame {
    /// One packet, IP header through ICRC.
    Wire(Vec<u8>),
    /// One packet from the UDP link, IP header through ICRC, whose ICRC the link has already
    /// checked (it computes it anyway, to find the IPv4 ID the socket does not report: see
    /// `link::udp`); the device does not compute it a second time. Only
    /// [`crate::Device::receive_icrc_checked`] makes one.
    WireChecked(Vec<u8>),
    /// Consecutive packets of one RDMA WRITE, payload by reference.
    Burst(Box<Burst>),
    /// An ACKNOWLEDGE (ACK, RNR NAK or NAK) as its fields.
    Ack(AckFrame),
}

impl Frame {
    /// The packets this frame stands for.
    pub fn packets(&self) -> u64 {
        match self {
            Self::Wire(_) | Self::WireChecked(_) | Self::Ack(_) => 1,
            Self::Burst(b) => u64::from(b.count),
        }
    }

    /// The destination GID (`None` for bytes that do not parse as a RoCEv2 packet).
    #[inline]
    pub fn dgid(&self) -> Option<[u8; 16]> {
        match self {
            // A CNP is outside the opcode table `RocePacket` parses.
            Self::Wire(bytes) | Self::WireChecked(bytes) => match RocePacket::parse(bytes) {
                Ok(p) => Some(p.ip().gids().1),
                Err(_) => bypass_hw::roce::Cnp::parse(bytes)
                    .ok()
                    .map(|c| dst_gid(&c.ip)),
            },
            Self::Burst(b) => Some(dst_gid(&b.ip)),
            Self::Ack(a) => Some(dst_gid(&a.ip)),
        }
    }

    /// The wire packets, in order (a burst is segmented and its payload read now).
    pub fn into_wire(self) -> Vec<Vec<u8>> {
        match self {
            Self::Wire(bytes) | Self::WireChecked(bytes) => vec![bytes],
            Self::Burst(b) => b.segment(),
            Self::Ack(a) => a.to_wire().into_iter().collect(),
        }
    }
}

/// The destination address of `ip` as a GID: `ip.gids().1` without mapping the source too.
#[inline]
pub(crate) fn dst_gid(ip: &IpSpec) -> [u8; 16] {
    match ip {
        IpSpec::V4(v) => bypass_hw::roce::ip::ipv4_to_gid(v.dst),
        IpSpec::V6(v) => v.dst,
    }
}

/// An ACKNOWLEDGE packet as its fields: what the responder would emit, without the bytes.
#[derive(Debug, Clone, Copy)]
pub struct AckFrame {
    pub(crate) ip: IpSpec,
    pub(crate) ports: UdpPorts,
    /// Destination QPN.
    pub(crate) dest_qp: u32,
    /// The PSN it acknowledges (or NAKs).
    pub(crate) psn: u32,
    /// Syndrome and MSN.
    pub(crate) aeth: Aeth,
    /// Its length on the wire.
    pub(crate) wire_len: u64,
}

impl AckFrame {
    /// The packet's spec, exactly as `responder::ack::respond` builds it.
    pub(crate) fn spec(
        ip: IpSpec,
        ports: UdpPorts,
        dest_qp: u32,
        psn: u32,
        aeth: Aeth,
    ) -> PacketSpec<'static> {
        PacketSpec {
            ip,
            ports,
            bth: BthFields {
                opcode: BthOpcode::RC_ACKNOWLEDGE,
                pkey: DEFAULT_PKEY,
                dest_qp,
                psn,
                ..BthFields::default()
            },
            ext: ExtFields {
                aeth: Some(aeth),
                ..ExtFields::default()
            },
            payload: &[],
        }
    }

    /// The wire bytes (`None` only if the spec cannot be emitted, which a frame the device
    /// built never is).
    pub fn to_wire(self) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        self.to_wire_into(&mut buf).then_some(buf)
    }

    /// The wire bytes, written into `buf` (resized to the packet; a reused buffer is not
    /// zero-filled first, `emit` writes every byte). False only if the spec cannot be
    /// emitted, which a frame the device built never is. For the cold paths (a trace, a link
    /// that wants bytes once): the UDP link's pump writes ACKs with [`AckWriter`].
    pub(crate) fn to_wire_into(self, buf: &mut Vec<u8>) -> bool {
        let spec = Self::spec(self.ip, self.ports, self.dest_qp, self.psn, self.aeth);
        let Ok(len) = spec.packet_len() else {
            return false;
        };
        buf.resize(len, 0);
        emit(&spec, buf).is_ok()
    }
}

/// The longest IP + UDP header: IPv6's.
const MAX_IP_UDP: usize = bypass_hw::roce::ip::MAX_IP_UDP_HDR_LEN;

/// The longest ACK on the wire: IPv6 + UDP headers, BTH, AETH, ICRC.
const MAX_ACK: usize = MAX_IP_UDP + BTH_LEN + std::mem::size_of::<Aeth>() + ICRC_LEN;

/// The last ACK of one flow as written: its flow (IP header fields, ports, destination QP),
/// its wire bytes (an ACK's length never changes, so neither do its IP + UDP headers), its BTH
/// (every field but the PSN stays) and the ICRC's CRC state after its headers.
#[derive(Debug, Clone)]
struct AckTemplate {
    ip: IpSpec,
    ports: UdpPorts,
    dest_qp: u32,
    wire: [u8; MAX_ACK],
    /// Bytes of `wire` in use (the packet's length).
    len: usize,
    ip_udp_len: usize,
    bth: Bth,
    crc: IcrcHeaderState,
}

/// Writes ACK frames as wire bytes for a link that sends bytes (the UDP link's pump), keeping
/// what repeats between the ACKs of a flow ([`AckTemplate`]): an ACK of the same flow as the
/// last is its PSN and AETH written into the last one's bytes, and a CRC over its BTH and AETH
/// from the state after its headers. The bytes are exactly `emit`'s ([`AckFrame::to_wire_into`]; a
/// test checks them against `emit` across flows).
#[derive(Debug, Clone, Default)]
pub(crate) struct AckWriter {
    last: Option<AckTemplate>,
}

impl AckWriter {
    /// A writer that has written nothing yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The template of `a`'s flow: the last one when it was of the same flow; `None` only if
    /// the spec cannot be emitted, which a frame the device built never is.
    fn template<'a>(
        last: &'a mut Option<AckTemplate>,
        a: &AckFrame,
    ) -> Option<&'a mut AckTemplate> {
        let same = last
            .as_ref()
            .is_some_and(|t| t.dest_qp == a.dest_qp && t.ports == a.ports && t.ip == a.ip);
        if !same {
            let spec = AckFrame::spec(a.ip, a.ports, a.dest_qp, 0, a.aeth);
            let (len, udp_len) = (spec.packet_len().ok()?, spec.udp_payload_len().ok()?);
            let bth = Bth::from_fields(&spec.bth).ok()?;
            let mut wire = [0u8; MAX_ACK];
            let ip_udp_len = spec
                .ip
                .write_ip_udp(spec.ports, udp_len, wire.get_mut(..len)?)
                .ok()?;
            let crc = IcrcHeaderState::new(wire.get(..ip_udp_len)?).ok()?;
            *last = Some(AckTemplate {
                ip: a.ip,
                ports: a.ports,
                dest_qp: a.dest_qp,
                wire,
                len,
                ip_udp_len,
                bth,
                crc,
            });
        }
        last.as_mut()
    }

    /// `a`'s wire bytes, written into `buf` (resized to the packet; every byte is written).
    /// False only if the spec cannot be emitted, which a frame the device built never is.
    pub(crate) fn write(&mut self, a: &AckFrame, buf: &mut Vec<u8>) -> bool {
        use zerocopy::IntoBytes;
        let Some(t) = Self::template(&mut self.last, a) else {
            return false;
        };
        let mut bth = t.bth;
        if bth.set_psn(a.psn).is_err() {
            return false;
        }
        let (bth, aeth) = (bth.as_bytes(), a.aeth.as_bytes());
        let (at, icrc_at) = (t.ip_udp_len, t.len.saturating_sub(ICRC_LEN));
        let Some((b, rest)) = t
            .wire
            .get_mut(at..icrc_at)
            .and_then(|c| c.split_at_mut_checked(bth.len()))
        else {
            return false;
        };
        if rest.len() != aeth.len() {
            return false;
        }
        b.copy_from_slice(bth);
        rest.copy_from_slice(aeth);
        // The ICRC over the BTH and AETH just written, from the state after the headers.
        let icrc = match t.wire.get_mut(at..icrc_at).map(|c| t.crc.icrc_in_place(c)) {
            Some(Ok(icrc)) => icrc,
            _ => return false,
        };
        let Some(slot) = t.wire.get_mut(icrc_at..t.len) else {
            return false;
        };
        slot.copy_from_slice(&icrc.to_le_bytes());
        buf.clear();
        buf.extend_from_slice(t.wire.get(..t.len).unwrap_or(&[]));
        true
    }
}

/// Packets `first_psn .. first_psn + count` of one RC RDMA WRITE (no immediate), as the
/// requester would have sent them one by one.
#[derive(Debug, Clone)]
pub struct Burst {
    pub(crate) ip: IpSpec,
    pub(crate) ports: UdpPorts,
    /// Destination QPN.
    pub(crate) dest_qp: u32,
    /// PSN of the first packet.
    pub(crate) first_psn: u32,
    /// Packets.
    pub(crate) count: u32,
    /// Path MTU the message was cut at.
    pub(crate) mtu: u32,
    /// Message offset of the first packet's first byte (a multiple of `mtu`).
    pub(crate) msg_off: u32,
    /// The message's length (RETH DMA length).
    pub(crate) msg_len: u32,
    /// RETH virtual address and rkey.
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    /// AckReq of each packet: bit `i` for packet `i` (a burst holds at most the requester's
    /// window of 128 packets, `requester::MAX_UNACKED_PSNS`, so the bits fit; no allocation).
    pub(crate) ack_req: u128,
    /// Wire bytes of all the packets (IP header through ICRC).
    pub(crate) wire_len: u64,
    /// The payload.
    pub(crate) src: Payload,
    /// For a host payload: the sending QP's count of bursts still reading its memory
    /// ([`BurstReads`]), held until the burst is applied, segmented or dropped.
    pub(crate) hold: Option<ReadHold>,
}

/// A QP's count of its by-reference bursts (payload [`Payload::Host`]) not yet read: each
/// such burst holds a [`ReadHold`] from it until it is applied, segmented, gathered by the
/// UDP link, or dropped.
///
/// Why: a burst's payload is read after the requester sent it (at delivery, rounds later on
/// a link with latency, or when the UDP link gathers it). An error CQE (a flush, WR_FLUSH_ERR,
/// above all) hands the WQE's buffer back to the application, which may then write it; while
/// a burst of that QP still reads it, that write races the read, and the receiver could see
/// bytes no transmit ever sent. So a QP's error CQEs and SQ flush wait until none of its
/// bursts is in flight (`engine::ledger`; the QP is in ERR meanwhile, and no new
/// burst can start). Success CQEs need nothing: they wait for the ACK, which follows the
/// read.
///
/// A clone starts a new count (a copied QP object has no bursts in flight).
#[derive(Debug, Default)]
pub(crate) struct BurstReads(Arc<()>);

impl Clone for BurstReads {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl BurstReads {
    /// A hold for a burst about to carry this QP's memory by reference.
    #[inline]
    pub(crate) fn hold(&self) -> ReadHold {
        ReadHold {
            _count: Arc::clone(&self.0),
        }
    }

    /// True if no burst holding this count is left: every read of this QP's memory by a burst
    /// happened before this returns true (the acquire fence pairs with the release decrement
    /// of the last hold's drop, which follows its burst's read, on any thread).
    pub(crate) fn none_in_flight(&self) -> bool {
        let none = Arc::strong_count(&self.0) == 1;
        if none {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        none
    }
}

/// One burst's share of its QP's [`BurstReads`]: dropping it (with the burst, or when the
/// burst's payload is let go) says that the burst reads the memory no more.
#[derive(Debug, Clone)]
pub(crate) struct ReadHold {
    /// Held only to be counted.
    _count: Arc<()>,
}

/// Where a burst's payload is.
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    /// In the sender's host memory (gathered from its SGEs; read at delivery).
    Host(Vec<HostRun>),
    /// Inline data the WQE carried (already in the device; a copy of a short payload, else
    /// shared with the WQE).
    Inline(crate::inline::InlineData),
}

impl Payload {
    /// Lets go of the bytes (the buffers a host payload's runs hold, a shared inline
    /// payload), keeping a run list's capacity.
    pub(crate) fn release(&mut self) {
        match self {
            Self::Host(runs) => runs.clear(),
            // A short payload held by value keeps nothing alive: left as it is (the next
            // burst's payload replaces it), not rewritten.
            Self::Inline(crate::inline::InlineData::Small { .. }) => {}
            Self::Inline(data) => *data = crate::inline::InlineData::default(),
        }
    }

    /// The run list of a host payload, emptied (its capacity kept for the next burst), leaving
    /// an empty inline payload; `None` for an inline payload.
    pub(crate) fn take_runs(&mut self) -> Option<Vec<HostRun>> {
        match std::mem::replace(self, Self::Inline(crate::inline::InlineData::default())) {
            Self::Host(mut runs) => {
                runs.clear();
                Some(runs)
            }
            Self::Inline(_) => None,
        }
    }
}

/// Payload bytes and position of packet `i` of a message cut at `mtu`, starting at `msg_off`.
pub(crate) fn packet_at(msg_off: u32, msg_len: u32, mtu: u32, i: u32) -> (u32, u32, bool, bool) {
    let off = msg_off.saturating_add(i.saturating_mul(mtu)).min(msg_len);
    let n = (msg_len - off).min(mtu);
    (off, n, off == 0, off + n >= msg_len)
}

/// The opcode of a WRITE packet by position (IBTA table 38; rxe `next_opcode`).
pub(crate) fn write_opcode(first: bool, last: bool) -> BthOpcode {
    match (first, last) {
        (true, true) => BthOpcode::RC_RDMA_WRITE_ONLY,
        (true, false) => BthOpcode::RC_RDMA_WRITE_FIRST,
        (false, false) => BthOpcode::RC_RDMA_WRITE_MIDDLE,
        (false, true) => BthOpcode::RC_RDMA_WRITE_LAST,
    }
}

impl Burst {
    /// Lets go of what the burst holds once it has been read (or dropped unread): its QP's
    /// read hold (the sender's flush and reset may go ahead, `BurstReads`) and its payload's
    /// buffers; the box stays for the device's next burst.
    pub(crate) fn let_go(&mut self) {
        self.hold = None;
        self.src.release();
    }

    /// A burst of nothing, to be filled in (`requester::send_burst` writes every field).
    pub(crate) fn blank() -> Self {
        Self {
            ip: IpSpec::V4(bypass_hw::roce::Ipv4Spec::default()),
            ports: UdpPorts { src: 0, dst: 0 },
            dest_qp: 0,
            first_psn: 0,
            count: 0,
            mtu: 0,
            msg_off: 0,
            msg_len: 0,
            raddr: 0,
            rkey: 0,
            ack_req: 0,
            wire_len: 0,
            src: Payload::Inline(crate::inline::InlineData::default()),
            hold: None,
        }
    }

    /// Whether packet `i` has AckReq set.
    pub(crate) fn acks(&self, i: u32) -> bool {
        1u128
            .checked_shl(i)
            .is_some_and(|bit| self.ack_req & bit != 0)
    }

    /// Packet `i`'s spec with `payload` (its bytes, or zeroes of its length).
    fn spec<'a>(&self, i: u32, ack_req: bool, payload: &'a [u8]) -> PacketSpec<'a> {
        let (_, _, first, last) = packet_at(self.msg_off, self.msg_len, self.mtu, i);
        PacketSpec {
            ip: self.ip,
            ports: self.ports,
            bth: BthFields {
                opcode: write_opcode(first, last),
                pkey: DEFAULT_PKEY,
                dest_qp: self.dest_qp,
                ack_req,
                psn: psn_add(self.first_psn, i),
                ..BthFields::default()
            },
            ext: ExtFields {
                reth: first.then(|| Reth::new(self.raddr, self.rkey, self.msg_len)),
                ..ExtFields::default()
            },
            payload,
        }
    }

    /// Wire length of packet `i` (what the per-packet path counts in `port_xmit_data`).
    pub(crate) fn packet_len(&self, i: u32) -> u64 {
        let (_, n, _, _) = packet_at(self.msg_off, self.msg_len, self.mtu, i);
        let zeros = ZEROS.get(..n as usize).unwrap_or(&[]);
        self.spec(i, false, zeros)
            .packet_len()
            .map_or(0, |l| l as u64)
    }

    /// Payload bytes the burst carries.
    pub(crate) fn bytes(&self) -> usize {
        match &self.src {
            Payload::Host(runs) => runs.iter().map(|r| r.len).sum(),
            Payload::Inline(bytes) => bytes.len(),
        }
    }

    /// Reads payload bytes from burst offset `at` into `out`, all of it (the DMA read a
    /// transmit does). False if the runs are shorter (cannot happen for a burst the requester
    /// built).
    pub(crate) fn read_into(&self, at: usize, out: &mut [u8]) -> bool {
        let runs = match &self.src {
            Payload::Host(runs) => runs,
            Payload::Inline(bytes) => {
                let Some(src) = at.checked_add(out.len()).and_then(|end| bytes.get(at..end)) else {
                    return false;
                };
                out.copy_from_slice(src);
                return true;
            }
        };
        let len = out.len();
        let (mut done, mut read) = (0, true);
        let walked = for_each_piece(runs, at, len, |r, off, n| {
            read &= out
                .get_mut(done..done + n)
                .is_some_and(|dst| r.mem.read_at(off, dst));
            done += n;
        });
        walked && read
    }

    /// The exact wire packets the per-packet path would have sent.
    pub fn segment(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.count as usize);
        self.segment_into(&mut out, &mut Vec::new());
        out
    }

    /// Appends the exact wire packets the per-packet path would have sent to `out`, each
    /// built in a buffer taken from `spare` when it has one (a link that sends and recycles
    /// its buffers: no allocation, and no zero-fill since `emit` writes every byte of the
    /// packet), else in a new one. The payload is read once per packet into one scratch
    /// buffer for the whole burst and emitted from there; the ICRC is computed once, by
    /// `emit`. Stops at the first packet that cannot be read or emitted (cannot happen for
    /// a burst the requester built).
    pub fn segment_into(&self, out: &mut Vec<Vec<u8>>, spare: &mut Vec<Vec<u8>>) {
        let mut scratch = vec![0u8; self.mtu.min(self.msg_len) as usize];
        for i in 0..self.count {
            let (off, n, _, _) = packet_at(self.msg_off, self.msg_len, self.mtu, i);
            let at = (off - self.msg_off) as usize;
            let Some(payload) = scratch.get_mut(..n as usize) else {
                break;
            };
            if !self.read_into(at, payload) {
                break;
            }
            let spec = self.spec(i, self.acks(i), payload);
            let Ok(len) = spec.packet_len() else {
                break;
            };
            let mut buf = spare.pop().unwrap_or_default();
            // Stale bytes are fine: `emit` writes all `len` of them.
            buf.resize(len, 0);
            if emit(&spec, &mut buf).is_err() {
                break;
            }
            out.push(buf);
        }
    }
}

/// What the wire length of a WRITE packet depends on: the IP header's length, whether it is
/// the message's first packet (RETH), its payload length.
type WriteLenKey = (usize, bool, u32);

/// The wire lengths of the last WRITE packets and ACKNOWLEDGEs a device sized, by what a
/// length depends on: the IP header's length, whether the packet is a message's first (RETH),
/// and the payload's length (`PacketSpec::packet_len`: IP + UDP + BTH + extension headers +
/// payload + pad + ICRC; addresses, QPNs, PSNs and AckReq do not change it). Saves building
/// a spec per packet on the fast path; a miss computes it as before.
#[derive(Debug, Clone, Default)]
pub(crate) struct LenMemo {
    /// (IP header length, first packet, payload length) → wire length, for the first packet
    /// of a message and for the others.
    write: [Option<(WriteLenKey, u64)>; 2],
    /// IP header length → wire length of an ACKNOWLEDGE.
    ack: Option<(usize, u64)>,
}

impl LenMemo {
    /// The wire length of packet `i` of `b` ([`Burst::packet_len`]).
    pub(crate) fn write_len(&mut self, b: &Burst, i: u32) -> u64 {
        let (_, n, first, _) = packet_at(b.msg_off, b.msg_len, b.mtu, i);
        let key = (b.ip.header_len(), first, n);
        let slot = &mut self.write[usize::from(!first)];
        match slot {
            Some((k, len)) if *k == key => *len,
            _ => {
                let len = b.packet_len(i);
                *slot = Some((key, len));
                len
            }
        }
    }

    /// The wire length of an ACKNOWLEDGE sent with `ip` (`spec`'s, computed on a miss).
    pub(crate) fn ack_len(
        &mut self,
        ip: &IpSpec,
        spec: impl FnOnce() -> PacketSpec<'static>,
    ) -> u64 {
        let key = ip.header_len();
        match self.ack {
            Some((k, len)) if k == key => len,
            _ => {
                let len = spec().packet_len().map_or(0, |l| l as u64);
                self.ack = Some((key, len));
                len
            }
        }
    }
}

impl Burst {
    /// As [`Burst::segment_into`] (the same packets, byte for byte), with the payload read
    /// straight into each packet's buffer: one copy per byte where `segment_into` reads it
    /// into scratch and `emit` copies it again. The IP + UDP header comes from `crcs`
    /// (`crate::header_cache`: `IpSpec::write_ip_udp`'s bytes, copied when the kind came
    /// lately, with the ICRC's state after them), the BTH and RETH through the `bypass_hw`
    /// views (`Bth::from_fields` with the pad count `emit` would give, `Reth`), the pad is
    /// zeroed as `emit` zeroes it (rxe sends zeroes), and the ICRC continues from the header's
    /// state over the rest of the packet (one pass).
    /// A transmit-heavy link (the UDP link) builds its packets here, keeping `crcs` (the
    /// ICRC's state after each kind of IP + UDP header it sent lately) from call to call.
    pub(crate) fn segment_direct_into(
        &self,
        out: &mut Vec<Vec<u8>>,
        spare: &mut Vec<Vec<u8>>,
        crcs: &mut HeaderCache,
    ) {
        for i in 0..self.count {
            if !self.build_direct(i, out, spare, crcs) {
                break;
            }
        }
    }

    /// Builds packet `i` (see [`Burst::segment_direct_into`]) and appends it to `out`.
    /// False if it cannot be built (cannot happen for a burst the requester built).
    fn build_direct(
        &self,
        i: u32,
        out: &mut Vec<Vec<u8>>,
        spare: &mut Vec<Vec<u8>>,
        crcs: &mut HeaderCache,
    ) -> bool {
        use zerocopy::IntoBytes;
        let (off, n, first, _) = packet_at(self.msg_off, self.msg_len, self.mtu, i);
        let n = n as usize;
        let Some(zeros) = ZEROS.get(..n) else {
            return false;
        };
        // The spec of the packet, for its lengths and header fields (payload as zeroes).
        let spec = self.spec(i, self.acks(i), zeros);
        let (Ok(len), Ok(udp_len)) = (spec.packet_len(), spec.udp_payload_len()) else {
            return false;
        };
        let mut bth = spec.bth;
        bth.pad_cnt = pad_len(n);
        let Ok(bth) = Bth::from_fields(&bth) else {
            return false;
        };
        let reth = first.then(|| Reth::new(self.raddr, self.rkey, self.msg_len));
        let mut buf = spare.pop().unwrap_or_default();
        // Stale bytes are fine: every byte up to `len` is written below.
        buf.resize(len, 0);
        let ip_udp_len = spec.ip.header_len() + bypass_hw::roce::ip::UDP_HDR_LEN;
        // The IP + UDP header, copied when this kind went lately, with the ICRC's state after
        // it.
        let Some(crc) = buf
            .get_mut(..ip_udp_len)
            .and_then(|h| crcs.write(&spec.ip, spec.ports, udp_len, h))
        else {
            return false;
        };
        let mut at = ip_udp_len;
        let headers: [&[u8]; 2] = [bth.as_bytes(), reth.as_ref().map_or(&[], |r| r.as_bytes())];
        for h in headers {
            let Some(dst) = buf.get_mut(at..at + h.len()) else {
                return false;
            };
            dst.copy_from_slice(h);
            at += h.len();
        }
        let src_at = (off - self.msg_off) as usize;
        let tail = len.saturating_sub(ICRC_LEN);
        let Some(payload) = buf.get_mut(at..at + n) else {
            return false;
        };
        if !self.read_into(src_at, payload) {
            return false;
        }
        let Some(pad) = buf.get_mut(at + n..tail) else {
            return false;
        };
        pad.fill(0);
        // The ICRC of the packet as written (`icrc::compute` would parse it first to find
        // these pieces): from the state after the masked IP + UDP header, the BTH, RETH,
        // payload and pad in one pass.
        let Some(covered) = buf.get_mut(ip_udp_len..tail) else {
            return false;
        };
        let Ok(icrc) = crc.icrc_in_place(covered) else {
            return false;
        };
        let Some(slot) = buf.get_mut(tail..) else {
            return false;
        };
        slot.copy_from_slice(&icrc.to_le_bytes());
        out.push(buf);
        true
    }
}

/// Calls `f` with each piece (host run, offset in it, bytes) of burst payload bytes
/// `at..at + len`, in order. False if the runs are shorter or a run lies outside its buffer
/// (cannot happen for a burst the requester built). The one walk over a burst's runs: the
/// link's gather transmit (`link::gather`) and `Burst::read_into`'s copy both go through it.
#[inline]
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

/// Copies the burst's payload into the destination runs, in order (the one copy of the
/// single-copy path). False if the lengths differ or a run is out of its buffer.
pub(crate) fn copy_payload(src: &Payload, dst: &[HostRun]) -> bool {
    match src {
        Payload::Host(runs) => copy_runs(runs, dst),
        Payload::Inline(bytes) => {
            let mut at = 0usize;
            for d in dst {
                let Some(chunk) = bytes.get(at..at + d.len) else {
                    return false;
                };
                if !d.mem.write_at(d.off, chunk) {
                    return false;
                }
                at += d.len;
            }
            at == bytes.len()
        }
    }
}

/// Copies host runs into host runs, in order.
fn copy_runs(src: &[HostRun], dst: &[HostRun]) -> bool {
    let (mut si, mut so) = (0usize, 0usize);
    for d in dst {
        let mut dn = 0usize;
        while dn < d.len {
            let Some(s) = src.get(si) else {
                return false;
            };
            if so >= s.len {
                si += 1;
                so = 0;
                continue;
            }
            let n = (s.len - so).min(d.len - dn);
            let mem_s: &Arc<dyn HostMemory> = &s.mem;
            if !crate::memory::copy_between(&**mem_s, s.off + so, &*d.mem, d.off + dn, n) {
                return false;
            }
            so += n;
            dn += n;
        }
    }
    true
}

/// The headers [`Burst::write_headers`] last wrote for one burst: the next packet of the same
/// opcode and payload length (every middle packet of a message after the first) differs from
/// them only in its PSN and AckReq, and gets them patched in (no BTH built from its fields, no
/// IP + UDP header written). Empty at first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacketHeads {
    /// IP + UDP header (IPv4 ID as the burst's), the first `ip_udp_len` bytes.
    ip_udp: [u8; MAX_IP_UDP],
    /// The last packet's BTH.
    bth: Bth,
    /// Its RETH (a message's first packet only).
    reth: Option<Reth>,
    /// Its opcode and payload bytes (`None`: nothing written yet).
    key: Option<(BthOpcode, u32)>,
    /// Where its payload, pad and ICRC went.
    last: GatherHeaders,
}

impl Default for PacketHeads {
    fn default() -> Self {
        Self {
            ip_udp: [0; MAX_IP_UDP],
            bth: Bth::default(),
            reth: None,
            key: None,
            last: GatherHeaders::default(),
        }
    }
}

impl PacketHeads {
    /// The IP + UDP header of the last packet written (IPv4 ID as the burst's).
    pub(crate) fn ip_udp(&self) -> &[u8] {
        self.ip_udp.get(..self.last.ip_udp_len).unwrap_or(&[])
    }

    /// The last packet's BTH.
    pub(crate) fn bth(&self) -> &Bth {
        &self.bth
    }

    /// The last packet's RETH, if it has one.
    pub(crate) fn reth(&self) -> Option<&Reth> {
        self.reth.as_ref()
    }
}

/// The headers of one WRITE packet of a burst, written by [`Burst::write_headers`] for a
/// sender that transmits the payload from where it is (a gather list) instead of copying it
/// into the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct GatherHeaders {
    /// Bytes of IP + UDP header at the front of the headers buffer (the BTH follows).
    pub ip_udp_len: usize,
    /// Offset in the burst's payload of the packet's first payload byte.
    pub payload_at: usize,
    /// Payload bytes.
    pub payload_len: usize,
    /// Pad bytes (zeroes) between the payload and the ICRC.
    pub pad: usize,
    /// UDP payload bytes (BTH through ICRC).
    pub udp_len: usize,
    /// The headers are the previous packet's with its PSN and AckReq patched (the same
    /// opcode, lengths, IP + UDP header and every other BTH field).
    pub patched: bool,
}

impl Burst {
    /// The host runs a burst's payload lies in (`None` for an inline payload).
    pub(crate) fn host_runs(&self) -> Option<&[HostRun]> {
        match &self.src {
            Payload::Host(runs) => Some(runs),
            Payload::Inline(_) => None,
        }
    }

    /// Writes packet `i`'s headers into `heads`: the IP + UDP header, BTH and RETH that
    /// [`Burst::segment_direct_into`] writes in front of the payload (IP ID as the burst's,
    /// pad count in the BTH), and says where the payload, pad and ICRC go. `None` if the
    /// packet cannot be built (cannot happen for a burst the requester built).
    ///
    /// `heads` holds what the burst's last packet got: a packet of the same opcode and length
    /// (all the middle packets of a message but the first) is written by patching its PSN
    /// and AckReq into the last BTH (the PSN and AckReq are the only BTH fields that differ
    /// between them: `spec`; the IP + UDP header depends on the length only).
    pub(crate) fn write_headers(&self, i: u32, heads: &mut PacketHeads) -> Option<GatherHeaders> {
        let (off, n, first, last) = packet_at(self.msg_off, self.msg_len, self.mtu, i);
        let payload_at = off.checked_sub(self.msg_off)? as usize;
        let opcode = write_opcode(first, last);
        if heads.key == Some((opcode, n)) {
            heads.bth.set_psn(psn_add(self.first_psn, i)).ok()?;
            heads.bth.set_ack_req(self.acks(i));
            heads.last.payload_at = payload_at;
            heads.last.patched = true;
            return Some(heads.last);
        }
        heads.key = None;
        let len = n as usize;
        let spec = self.spec(i, self.acks(i), ZEROS.get(..len)?);
        let udp_len = spec.udp_payload_len().ok()?;
        let mut bth = spec.bth;
        bth.pad_cnt = pad_len(len);
        heads.bth = Bth::from_fields(&bth).ok()?;
        heads.reth = first.then(|| Reth::new(self.raddr, self.rkey, self.msg_len));
        let ip_udp_len = spec.ip.header_len() + bypass_hw::roce::ip::UDP_HDR_LEN;
        let slot = heads.ip_udp.get_mut(..ip_udp_len)?;
        let written = spec.ip.write_ip_udp(spec.ports, udp_len, slot).ok()?;
        if written != ip_udp_len {
            return None;
        }
        heads.last = GatherHeaders {
            ip_udp_len,
            payload_at,
            payload_len: len,
            pad: usize::from(heads.bth.pad_cnt()),
            udp_len,
            patched: false,
        };
        heads.key = Some((opcode, n));
        Some(heads.last)
    }
}
