//! A burst of RDMA WRITE packets (`crate::frame::Burst`) applied at once: one copy from the
//! sender's memory to ours, the expected PSN moved past every packet, the ACKs the packets'
//! AckReq bits ask for.
//!
//! Owns: deciding whether a burst is the plain case, and applying it. Must not: apply anything
//! unless every check every packet would pass is known to pass first. When one would not
//! (PSN not the expected one, a message in progress that does not match, another MTU, a key
//! or mapping that refuses, a trace to record), [`apply`] returns false having changed
//! nothing, and the caller processes the segmented packets one by one, so every error, NAK
//! and counter is the per-packet path's.
//!
//! The checks are those `rc_request` → `check_and_execute` → `rdma::write` make for each
//! packet (rxe `rxe_resp.c` `check_psn`, `check_op_seq`, `check_op_valid`, `check_length`,
//! `check_rkey`, `write_data_in`, `acknowledge`), for packets the requester built by
//! construction right in length, pad and opcode sequence.

use bypass_hw::roce::opcode::{psn_add, psn_diff};
use bypass_hw::syndrome::AethSyndrome;

use super::rdma::{check_rkey, max_msg, pd};
use super::state::Msg;
use super::{ack, comm_est, count, mtu};
use crate::engine::gather::IovaRuns;
use crate::frame::{Burst, Payload, copy_payload, packet_at};
use crate::iommu::Dir;
use crate::mkey::{Need, lookup};
use crate::transport::state::DataPath;

/// Applies `b` to its QP if it is the plain case; false (nothing changed) otherwise.
#[inline(never)]
pub(crate) fn apply(dp: &mut DataPath<'_>, b: &Burst) -> bool {
    let qpn = b.dest_qp;
    let copied = plain(dp, b).is_some_and(|iovas| write_payload(dp, &b.src, &iovas));
    if !copied {
        return false;
    }
    dp.io.counters.port_rcv_packets += u64::from(b.count);
    dp.io.counters.port_rcv_data += b.wire_len;
    comm_est(dp, qpn);
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        qp.resp.nak_sent = false;
    }
    // The state after each packet matters only where something observes it: the ACKs (their
    // AETH carries the MSN) and the end of the burst. Packets in between only move it along.
    let end = b.count.saturating_sub(1);
    // The set AckReq bits before the end, lowest first, then the end (visited once).
    let below_end = 1u128.checked_shl(end).map_or(u128::MAX, |bit| bit - 1);
    let mut bits = b.ack_req & below_end;
    loop {
        let i = if bits == 0 {
            end
        } else {
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            i
        };
        let psn = psn_add(b.first_psn, i);
        let (off, n, _, last) = packet_at(b.msg_off, b.msg_len, b.mtu, i);
        let Some(qp) = dp.objs.qps.get_mut(qpn) else {
            return true;
        };
        qp.resp.epsn = psn_add(psn, 1);
        if last {
            qp.resp.msg = Msg::Idle;
            qp.resp.msn = qp.resp.msn.wrapping_add(1);
            count(dp, qpn, |c| &mut c.rx_write_requests);
        } else {
            qp.resp.msg = Msg::Write {
                va: b.raddr,
                rkey: b.rkey,
                total: b.msg_len,
                done: off + n,
            };
        }
        if b.acks(i) {
            ack::send_ack(dp, qpn, AethSyndrome::ACK_UNLIMITED, psn);
        }
        if i == end {
            return true;
        }
    }
}

/// Copies the payload to the destination IOVA runs; false (nothing copied) if the IOMMU
/// would refuse a run or the lengths differ.
///
/// An inline payload bound for one contiguous range held by one mapping (the short WRITE of a
/// latency test) is written through the IOMMU at once; everything else is resolved into host
/// runs first and copied run to run. Both copy the same bytes to the same place, and both
/// count nothing on a refusal: the caller's per-packet fallback reports it.
fn write_payload(dp: &mut DataPath<'_>, src: &Payload, iovas: &IovaRuns) -> bool {
    if let (Payload::Inline(bytes), Some((iova, n))) = (src, iovas.single())
        && n > 0
        && n == bytes.len() as u64
        && dp.io.dma.write_within_one(iova, bytes)
    {
        return true;
    }
    // The destination runs go into the device's reused buffer (no allocation per burst); it
    // is emptied again before it goes back, so it keeps no buffer alive.
    let mut dst = std::mem::take(&mut dp.tp.runs_spare);
    dst.clear();
    let copied = iovas
        .resolve_into(dp.io.dma, Dir::Write, &mut dst)
        .is_some()
        && copy_payload(src, &dst);
    dst.clear();
    dp.tp.runs_spare = dst;
    copied
}

/// The destination's IOVA runs, if every packet of `b` would pass the responder's checks.
fn plain(dp: &mut DataPath<'_>, b: &Burst) -> Option<IovaRuns> {
    let qpn = b.dest_qp;
    let qp = dp.objs.qps.get(qpn)?;
    let starts = b.msg_off == 0;
    let in_order = psn_diff(b.first_psn, qp.resp.epsn) == 0;
    let seq_ok = match qp.resp.msg {
        Msg::Idle => starts,
        Msg::Write {
            va,
            rkey,
            total,
            done,
        } => !starts && va == b.raddr && rkey == b.rkey && total == b.msg_len && done == b.msg_off,
        Msg::Send { .. } => false,
    };
    let bytes = b.bytes();
    let sized = b.count > 0
        && b.msg_len > 0
        && b.mtu == mtu(dp, qpn)
        && u64::from(b.msg_len) <= max_msg(dp, qpn)
        && bytes as u64 <= u64::from(b.msg_len - b.msg_off);
    if !(in_order && seq_ok && qp.attrs.rwe && sized) {
        return None;
    }
    // The whole message's range is checked at its first packet; when the burst is the whole
    // message, the translation below is that same check.
    let whole = starts && bytes as u64 == u64::from(b.msg_len);
    if starts
        && !whole
        && !check_rkey(
            dp,
            qpn,
            b.rkey,
            b.raddr,
            u64::from(b.msg_len),
            Need::RemoteWrite,
        )
    {
        return None;
    }
    let key = lookup(&dp.objs.mkeys, b.rkey)?;
    let va = b.raddr.wrapping_add(u64::from(b.msg_off));
    let runs = key
        .translate(pd(dp, qpn), qpn, va, bytes as u64, Need::RemoteWrite)
        .ok()?;
    let mut iovas = IovaRuns::default();
    for (iova, n) in runs {
        iovas.push(iova, n);
    }
    Some(iovas)
}
