//! A WRITE's packets as one burst on an in-process link (`crate::frame`): how many the next
//! burst takes, and sending them with the payload left in the sender's memory.
//!
//! Owns: [`send_burst`], [`burst_count`], [`train_wait`]. Must not: send a retransmission
//! from host memory as a burst (its WQE may complete before the burst is read), or change
//! what goes on the wire: packets, PSNs, AckReq bits and counters are those the requester
//! would send one by one.

use bypass_hw::roce::opcode::{psn_add, psn_diff};

use super::{Ctx, MAX_PKT_PER_ACK, MAX_UNACKED_PSNS, ReqState, Sender, count_retransmits};
use crate::engine::gather;
use crate::engine::wqe::Sge;
use crate::frame::{Burst, Frame, Payload, TxTrains, packet_at};
use crate::inline::InlineData;
use crate::transport::wire::Route;

/// What [`send_burst`] needs of the WRITE WQE it sends.
pub(super) struct BurstMsg<'a> {
    pub(super) len: u32,
    pub(super) raddr: u64,
    pub(super) rkey: u32,
    pub(super) inline: Option<&'a InlineData>,
    pub(super) sges: &'a [Sge],
}

/// Sends the rest of RDMA WRITE `w` (as much as the window allows) as one burst on an
/// in-process link (`crate::frame`): the same packets, PSNs, AckReq bits, counters and timer
/// as [`send_rc`] one packet at a time, the payload left in place for the responder to copy
/// once. Returns whether the burst ends the message (the caller then finishes the WQE), or
/// `None` (nothing changed) when the per-packet path must run instead: an empty
/// message, a route the port cannot take, or a local key or mapping that would refuse (the
/// per-packet path reports those). Inline data travels in the burst itself.
#[inline(always)]
pub(super) fn send_burst(
    s: &mut Sender<'_, '_>,
    c: &Ctx,
    req: &mut ReqState,
    w: &BurstMsg<'_>,
    count: u32,
) -> Option<bool> {
    let mtu = c.mtu;
    let off = req.cur_pkt.saturating_mul(mtu).min(w.len);
    let left = w.len - off;
    if left == 0 || count == 0 {
        return None;
    }
    // A retransmission from host memory goes packet by packet (its payload copied now, under
    // the device's step): its WQE may complete before a burst would be read (an ACK of the
    // first transmission arriving after the timer fired), and the application owns the buffer
    // from its completion on. A first transmission cannot complete before the responder has
    // read it (in-process: applied in order; UDP: read when sent).
    if w.inline.is_none() && psn_diff(req.max_psn, req.psn) > 0 {
        return None;
    }
    let bytes = u64::from(count)
        .saturating_mul(u64::from(mtu))
        .min(u64::from(left));
    let attrs = s.attrs;
    let route = Route {
        port: attrs.path.port,
        path: &attrs.path,
        src_qpn: c.qpn,
    };
    let (ip, ports) =
        crate::transport::wire::qp_headers(s.headers, s.tp, s.profile, &s.cong.status, route)?;
    // A box (and run list) the device got back from a burst it received: no allocation, and
    // the burst is written in place (no copy of it into the box).
    let mut burst =
        s.tp.burst_spare
            .pop()
            .unwrap_or_else(|| Box::new(Burst::blank()));
    let src = match w.inline {
        // The whole inline payload (the usual case): shared, not copied.
        Some(data) if off == 0 && bytes as usize == data.len() => {
            Some(Payload::Inline(data.clone()))
        }
        Some(data) => data
            .get(off as usize..off as usize + bytes as usize)
            .map(|part| Payload::Inline(InlineData::from(part))),
        None => {
            let mut runs = burst.src.take_runs().unwrap_or_default();
            gather::resolve(
                s.mkeys,
                s.io.dma,
                (c.pd, c.qpn),
                w.sges,
                (u64::from(off), bytes as usize),
                &mut runs,
            )
            .map(|()| Payload::Host(runs))
        }
    };
    let Some(src) = src else {
        // Refused (the per-packet path reports why): the box goes back for the next burst.
        s.tp.burst_spare.push(burst);
        return None;
    };
    burst.src = src;
    // A payload by reference holds its QP's count of bursts in flight (`frame::BurstReads`),
    // so that a flush of the QP waits for its read; an inline one needs none.
    burst.hold = match burst.src {
        Payload::Host(_) => Some(s.tp.ledger.hold_read(c.qpn)),
        Payload::Inline(_) => None,
    };
    burst.ip = ip;
    burst.ports = ports;
    burst.dest_qp = c.remote_qpn;
    burst.first_psn = req.psn;
    burst.count = count;
    burst.mtu = mtu;
    burst.msg_off = off;
    burst.msg_len = w.len;
    burst.raddr = w.raddr;
    burst.rkey = w.rkey;
    // What `emit` and `transport::wire::send` do for each of the packets, in closed form.
    let first_psn = req.psn;
    let ends = packet_at(off, w.len, mtu, count - 1).3;
    // Packets below `max_psn` are retransmissions; the rest move it.
    let behind =
        u32::try_from(psn_diff(req.max_psn, first_psn).clamp(0, count as i32)).unwrap_or(0);
    if behind > 0 {
        count_retransmits(s, u64::from(behind));
    }
    if behind < count {
        req.max_psn = psn_add(first_psn, count);
    }
    // AckReq every MAX_PKT_PER_ACK packets since the last one that had it, and on the last
    // packet of the message; `noack` counts the packets since.
    // `count` is at most the window (MAX_UNACKED_PSNS = 128 packets), so the bits fit a u128.
    let mut ack_req = 0u128;
    let mut at = (MAX_PKT_PER_ACK - 1).saturating_sub(req.noack);
    let mut last_ack = None;
    while at < count {
        ack_req |= 1u128.checked_shl(at).unwrap_or(0);
        last_ack = Some(at);
        at += MAX_PKT_PER_ACK;
    }
    if ends {
        ack_req |= 1u128.checked_shl(count - 1).unwrap_or(0);
        last_ack = Some(count - 1);
    }
    req.noack = match last_ack {
        Some(k) => count - 1 - k,
        None => req.noack + count,
    };
    burst.ack_req = ack_req;
    // Only the first packet (RETH) and the last (shorter) can differ from the middle ones.
    let mut wire = s.tp.len_memo.write_len(&burst, 0);
    if count > 1 {
        wire += s.tp.len_memo.write_len(&burst, count - 1);
    }
    if count > 2 {
        wire += u64::from(count - 2) * s.tp.len_memo.write_len(&burst, 1);
    }
    burst.wire_len = wire;
    s.io.counters.port_xmit_packets += u64::from(count);
    s.io.counters.port_xmit_data += wire;
    if req.ack_deadline.is_none() {
        req.ack_deadline = c.ack_timeout.map(|t| s.io.now.saturating_add(t));
    }
    req.psn = psn_add(first_psn, count);
    if !ends {
        req.cur_pkt += count;
    }
    s.tp.tx.push_back(Frame::Burst(burst));
    Some(ends)
}

/// The packets the next burst of a WRITE of `len` bytes sends: the rest of the message, as
/// much as the window allows (at most 128 packets, the window; also the width of
/// `Burst::ack_req`). When the window cuts it short and the link groups packets into sends
/// (`trains`), the burst ends where one of the link's sends ends
/// ([`crate::frame::TxTrains::send_end`]), so that a burst that starts at such an end fills
/// all its sends; the rest of the
/// window waits for the next ACK. 0 then (nothing to send now) when the cut leaves nothing,
/// but only if a packet asking for an ACK is in flight (the last such packet is unacknowledged:
/// `noack`, the packets since it, is below those in flight), so that the ACK that opens the
/// window is sure to come, or the retransmit timer runs; otherwise the window's packets go
/// out as they are. Packets, PSNs and AckReq bits are the same either way: only where a
/// burst ends, and so how soon a packet leaves, changes.
#[inline(always)]
pub(super) fn burst_count(trains: Option<TxTrains>, mtu: u32, req: &ReqState, len: u32) -> u32 {
    let mtu = mtu.max(1);
    let first = req.cur_pkt;
    let left = len.saturating_sub(first.saturating_mul(mtu)).div_ceil(mtu);
    let in_flight = psn_diff(req.psn, req.una);
    let window = u32::try_from(MAX_UNACKED_PSNS - in_flight).unwrap_or(0);
    let count = left.min(window).min(u128::BITS);
    let Some(trains) = trains else {
        return count;
    };
    if count == left {
        return count;
    }
    let aligned = trains.send_end(mtu, first.saturating_add(count));
    match aligned.checked_sub(first) {
        Some(n) if n > 0 => n,
        _ if i64::from(in_flight) > i64::from(req.noack) => 0,
        _ => count,
    }
}

/// Whether the WRITE of `len` bytes being sent waits for an ACK before its next burst:
/// [`burst_count`] gave `count` = 0 though packets are left (an empty message, or one whose
/// packets are all out, does not wait).
#[inline(always)]
pub(super) fn train_wait(mtu: u32, req: &ReqState, len: u32, count: u32) -> bool {
    count == 0 && req.cur_pkt.saturating_mul(mtu.max(1)) < len
}
