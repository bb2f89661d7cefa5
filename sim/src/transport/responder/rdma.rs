//! RDMA WRITE (with immediate), RDMA READ and the two atomics as the responder executes them,
//! the responder resources that remember READs and atomic results, and duplicate requests.
//!
//! Owns: remote accesses through rkeys (`Mkey::translate` with the QP's PD and the remote
//! right), READ responses, ATOMIC ACKNOWLEDGE, and the resource ring. Must not: change the QP
//! state (errors go back as [`Fail`]).
//!
//! Sources: rxe `rxe_resp.c` (`check_resource`, `check_length`, `check_rkey` — a zero-length
//! READ or WRITE needs no valid rkey, IBTA C9-88 —, `write_data_in`, `read_reply`,
//! `atomic_reply`, `rxe_prepare_res`, `find_resource`, `duplicate_request`); rxe
//! `rxe_mr.c` `rxe_mr_do_atomic_op` (the rkey is checked before the 8-byte alignment); the
//! kernel's `mlx5/core/main.c` `handle_hca_cap_atomic` (the operand's byte order, [`atomic`]).

use bypass_hw::cqe::CqeOpcode;
use bypass_hw::roce::opcode::{Position, psn_add, psn_compare};
use bypass_hw::roce::{Aeth, AtomicAckEth, BthOpcode, ExtFields, RocePacket};
use bypass_hw::syndrome::{AethSyndrome, CqeSyndrome};

use super::state::{Msg, Resource};
use super::{Fail, Kind, ack, advance, check_length, count, kind, mtu};
use crate::engine::rq::RecvDone;
use crate::iommu::DmaFault;
use crate::mkey::{Need, lookup};
use crate::transport::state::DataPath;

/// Why a remote access failed.
enum RemoteError {
    Access,
    Fault(DmaFault),
}

impl RemoteError {
    /// The class C error: access → NAK remote access; an IOMMU refusal behind a valid key is
    /// the responder's own failure → NAK remote operational error.
    fn fail(self, dp: &mut DataPath<'_>, consumed: bool) -> Fail {
        match self {
            Self::Access => Fail::access(consumed),
            Self::Fault(f) => {
                dp.io.dma_fault(f);
                Fail::operational(CqeSyndrome::LOCAL_PROT_ERR, consumed)
            }
        }
    }
}

/// Largest message the QP accepts (`log_msg_max`, at most 2^31 on mlx5).
pub(super) fn max_msg(dp: &DataPath<'_>, qpn: u32) -> u64 {
    let log = dp.objs.qps.get(qpn).map_or(31, |q| q.attrs.log_msg_max);
    1u64 << log.min(31)
}

pub(super) fn pd(dp: &DataPath<'_>, qpn: u32) -> u32 {
    dp.objs.qps.get(qpn).map_or(0, |q| q.pd)
}

/// Checks that `rkey` grants `need` on `[va, va + len)` to QP `qpn`.
pub(super) fn check_rkey(
    dp: &DataPath<'_>,
    qpn: u32,
    rkey: u32,
    va: u64,
    len: u64,
    need: Need,
) -> bool {
    let pd = pd(dp, qpn);
    lookup(&dp.objs.mkeys, rkey).is_some_and(|k| k.translate(pd, qpn, va, len, need).is_ok())
}

/// Writes `data` at `va` through `rkey`.
fn write_remote(
    dp: &mut DataPath<'_>,
    qpn: u32,
    rkey: u32,
    va: u64,
    data: &[u8],
    need: Need,
) -> Result<(), RemoteError> {
    let pd = pd(dp, qpn);
    let key = lookup(&dp.objs.mkeys, rkey).ok_or(RemoteError::Access)?;
    let runs = key
        .translate(pd, qpn, va, data.len() as u64, need)
        .map_err(|_| RemoteError::Access)?;
    let mut at = 0usize;
    for (iova, n) in runs {
        let n = n as usize;
        let chunk = data.get(at..at + n).ok_or(RemoteError::Access)?;
        dp.io.dma.write(iova, chunk).map_err(RemoteError::Fault)?;
        at += n;
    }
    Ok(())
}

/// Reads `buf.len()` bytes at `va` through `rkey`.
fn read_remote(
    dp: &mut DataPath<'_>,
    qpn: u32,
    rkey: u32,
    va: u64,
    buf: &mut [u8],
    need: Need,
) -> Result<(), RemoteError> {
    let pd = pd(dp, qpn);
    let key = lookup(&dp.objs.mkeys, rkey).ok_or(RemoteError::Access)?;
    let runs = key
        .translate(pd, qpn, va, buf.len() as u64, need)
        .map_err(|_| RemoteError::Access)?;
    let mut at = 0usize;
    for (iova, n) in runs {
        let n = n as usize;
        let chunk = buf.get_mut(at..at + n).ok_or(RemoteError::Access)?;
        dp.io.dma.read(iova, chunk).map_err(RemoteError::Fault)?;
        at += n;
    }
    Ok(())
}

/// Packets that have left the device so far.
fn taken(dp: &DataPath<'_>) -> u64 {
    dp.io
        .counters
        .port_xmit_packets
        .saturating_sub(dp.tp.tx_queued())
}

fn ring_cap(dp: &DataPath<'_>, qpn: u32) -> usize {
    let log = dp.objs.qps.get(qpn).map_or(0, |q| q.attrs.log_rra_max);
    1usize << log.min(16)
}

/// A ring slot for a new READ/atomic, or NAK invalid request if every resource is still
/// outstanding (rxe `check_resource`).
///
/// A resource stays busy until the last packet of its response has left the device (been
/// taken by the wire). A requester that respects the negotiated `max_rd_atomic` never has
/// more in flight than that, so it never sees the NAK; one that sends more while the responses
/// are still queued gets NAK invalid request (the error rxe names
/// `RESPST_ERR_TOO_MANY_RDMA_ATM_REQ`, IBTA §9.7.5.2.2 invalid request).
fn claim(dp: &DataPath<'_>, qpn: u32) -> Result<usize, Fail> {
    let cap = ring_cap(dp, qpn);
    let Some(qp) = dp.objs.qps.get(qpn) else {
        return Err(Fail::Drop);
    };
    let res = &qp.resp.res;
    if res.len() < cap {
        return Ok(res.len());
    }
    let slot = qp.resp.res_next % cap;
    if res.get(slot).is_some_and(|r| r.tx_end() > taken(dp)) {
        return Err(Fail::inv_req(false));
    }
    Ok(slot)
}

fn store(dp: &mut DataPath<'_>, qpn: u32, slot: usize, r: Resource) {
    let cap = ring_cap(dp, qpn);
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return;
    };
    let res = &mut qp.resp.res;
    if slot >= res.len() {
        res.push(r);
    } else if let Some(s) = res.get_mut(slot) {
        *s = r;
    }
    qp.resp.res_next = (slot + 1) % cap;
}

/// One RDMA WRITE packet.
pub(super) fn write(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) -> Result<(), Fail> {
    let position = pkt.info().position;
    let imm = pkt.imm_dt().map(|i| i.imm());
    // rxe `check_resource`: the packet carrying the immediate needs a receive WQE before
    // anything of it is written (RNR NAK otherwise; the earlier packets stay written).
    if imm.is_some() {
        match super::peek(dp, qpn) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(Fail::Rnr),
            Err(f) => {
                dp.io.dma_fault(f);
                return Err(Fail::operational(CqeSyndrome::LOCAL_QP_OP_ERR, false));
            }
        }
    }
    let consumed = imm.is_some();
    if !check_length(pkt, mtu(dp, qpn)) {
        return Err(Fail::inv_req(consumed));
    }
    let (va, rkey, total, done) = match position {
        Position::First | Position::Only => {
            let Some(reth) = pkt.reth() else {
                return Err(Fail::inv_req(consumed));
            };
            let total = reth.len();
            if u64::from(total) > max_msg(dp, qpn) || (position == Position::First && total == 0) {
                return Err(Fail::inv_req(consumed));
            }
            // C9-88: a zero-length WRITE needs no valid rkey. Otherwise the whole message's
            // range is checked at its first packet (rxe `check_rkey`).
            if total > 0
                && !check_rkey(
                    dp,
                    qpn,
                    reth.rkey(),
                    reth.va(),
                    u64::from(total),
                    Need::RemoteWrite,
                )
            {
                return Err(Fail::access(consumed));
            }
            (reth.va(), reth.rkey(), total, 0)
        }
        Position::Middle | Position::Last => match dp.objs.qps.get(qpn).map(|q| &q.resp.msg) {
            Some(&Msg::Write {
                va,
                rkey,
                total,
                done,
            }) => (va, rkey, total, done),
            _ => return Err(Fail::inv_req(consumed)),
        },
    };
    let payload = pkt.payload();
    let n = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let remaining = total.saturating_sub(done);
    // rxe `check_rkey` for WRITE: packets before the last carry less than what remains, the
    // last carries exactly what remains.
    let fits = match position {
        Position::First | Position::Middle => n < remaining,
        Position::Last | Position::Only => n == remaining,
    };
    if !fits {
        return Err(Fail::inv_req(consumed));
    }
    if n > 0 {
        let at = va.wrapping_add(u64::from(done));
        if let Err(e) = write_remote(dp, qpn, rkey, at, payload, Need::RemoteWrite) {
            return Err(e.fail(dp, consumed));
        }
    }
    let done = done + n;
    let end = matches!(position, Position::Last | Position::Only);
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return Err(Fail::Drop);
    };
    if end {
        qp.resp.msg = Msg::Idle;
        qp.resp.msn = qp.resp.msn.wrapping_add(1);
        let remote = qp.attrs.remote_qpn & 0x00ff_ffff;
        count(dp, qpn, |c| &mut c.rx_write_requests);
        if let Some(imm) = imm {
            let done = RecvDone {
                opcode: CqeOpcode::RESP_WR_IMM,
                byte_cnt: total,
                imm,
                flags_rqpn: remote,
                se: pkt.bth().se(),
            };
            super::recv_done(dp, qpn, &done);
        }
    } else {
        qp.resp.msg = Msg::Write {
            va,
            rkey,
            total,
            done,
        };
    }
    advance(dp, qpn, pkt, 1);
    Ok(())
}

/// An RDMA READ request.
pub(super) fn read(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) -> Result<(), Fail> {
    let Some(reth) = pkt.reth() else {
        return Err(Fail::inv_req(false));
    };
    let (va, rkey, len) = (reth.va(), reth.rkey(), reth.len());
    if u64::from(len) > max_msg(dp, qpn) {
        return Err(Fail::inv_req(false));
    }
    let slot = claim(dp, qpn)?;
    if len > 0 && !check_rkey(dp, qpn, rkey, va, u64::from(len), Need::RemoteRead) {
        return Err(Fail::access(false));
    }
    let psn = pkt.bth().psn();
    let npkts = len.div_ceil(mtu(dp, qpn)).max(1);
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return Err(Fail::Drop);
    };
    // rxe `execute`: the MSN counts the READ when it is accepted (C9-148), so every response
    // carries it; the expected PSN skips the PSNs the responses use.
    qp.resp.msn = qp.resp.msn.wrapping_add(1);
    qp.resp.epsn = psn_add(psn, npkts);
    count(dp, qpn, |c| &mut c.rx_read_requests);
    let tx_end = read_responses(dp, qpn, psn, va, rkey, len, true)?;
    let r = Resource::Read {
        first_psn: psn,
        last_psn: psn_add(psn, npkts - 1),
        va,
        rkey,
        len,
        tx_end,
    };
    store(dp, qpn, slot, r);
    Ok(())
}

/// Sends the responses for `len` bytes at `va` from PSN `psn` on: FIRST/MIDDLE/LAST or ONLY
/// for a new request, MIDDLE.../LAST for a replay that starts inside one (rxe `read_reply`).
/// Returns the transmit count after the last one.
fn read_responses(
    dp: &mut DataPath<'_>,
    qpn: u32,
    psn: u32,
    va: u64,
    rkey: u32,
    len: u32,
    new: bool,
) -> Result<u64, Fail> {
    let mtu = mtu(dp, qpn);
    let npkts = len.div_ceil(mtu).max(1);
    for i in 0..npkts {
        let off = i * mtu;
        let n = (len - off).min(mtu);
        let mut buf = vec![0u8; n as usize];
        if n > 0 {
            let at = va.wrapping_add(u64::from(off));
            if let Err(e) = read_remote(dp, qpn, rkey, at, &mut buf, Need::RemoteRead) {
                return Err(e.fail(dp, false));
            }
        }
        let (first, last) = (i == 0 && new, i + 1 == npkts);
        let opcode = match (first, last) {
            (true, true) => BthOpcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => BthOpcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => BthOpcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        let aeth = if opcode == BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            None
        } else {
            ack::aeth(dp, qpn, AethSyndrome::ACK_UNLIMITED)
        };
        let ext = ExtFields {
            aeth,
            ..Default::default()
        };
        ack::respond(dp, qpn, opcode, psn_add(psn, i), ext, &buf);
    }
    Ok(dp.io.counters.port_xmit_packets)
}

/// A COMPARE_SWAP or FETCH_ADD request.
///
/// The 8-byte operand in memory is big-endian: the mlx5 responder treats it so unless the
/// driver switched the device to host endianness (`atomic_caps.atomic_req_8B_endianness_mode`,
/// kernel `handle_hca_cap_atomic` with `MLX5_ATOMIC_REQ_MODE_BE = 0` /
/// `MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS = 1`, only when the device advertises
/// `supported_atomic_req_8B_endianness_mode_1`, which this one does not).
pub(super) fn atomic(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) -> Result<(), Fail> {
    let Some(a) = pkt.atomic_eth() else {
        return Err(Fail::inv_req(false));
    };
    let (va, rkey) = (a.va(), a.rkey());
    let slot = claim(dp, qpn)?;
    if !check_rkey(dp, qpn, rkey, va, 8, Need::RemoteAtomic) {
        return Err(Fail::access(false));
    }
    // rxe `rxe_mr_do_atomic_op`: RESPST_ERR_MISALIGNED_ATOMIC, after the key checks.
    if va & 7 != 0 {
        return Err(Fail::inv_req(false));
    }
    let mut cur = [0u8; 8];
    if let Err(e) = read_remote(dp, qpn, rkey, va, &mut cur, Need::RemoteAtomic) {
        return Err(e.fail(dp, false));
    }
    let orig = u64::from_be_bytes(cur);
    let new = if pkt.opcode() == BthOpcode::RC_COMPARE_SWAP {
        (orig == a.comp()).then_some(a.swap_add())
    } else {
        Some(orig.wrapping_add(a.swap_add()))
    };
    if let Some(v) = new
        && let Err(e) = write_remote(dp, qpn, rkey, va, &v.to_be_bytes(), Need::RemoteAtomic)
    {
        return Err(e.fail(dp, false));
    }
    let psn = pkt.bth().psn();
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return Err(Fail::Drop);
    };
    qp.resp.msn = qp.resp.msn.wrapping_add(1);
    qp.resp.epsn = psn_add(psn, 1);
    let msn = qp.resp.msn;
    count(dp, qpn, |c| &mut c.rx_atomic_requests);
    let tx_end = atomic_ack(dp, qpn, psn, orig, msn);
    store(
        dp,
        qpn,
        slot,
        Resource::Atomic {
            psn,
            orig,
            msn,
            tx_end,
        },
    );
    Ok(())
}

/// Sends ATOMIC ACKNOWLEDGE for PSN `psn` with the original value; returns the transmit count.
fn atomic_ack(dp: &mut DataPath<'_>, qpn: u32, psn: u32, orig: u64, msn: u32) -> u64 {
    let ext = ExtFields {
        aeth: Aeth::new(AethSyndrome::ACK_UNLIMITED, msn & 0x00ff_ffff).ok(),
        atomic_ack_eth: Some(AtomicAckEth::new(orig)),
        ..Default::default()
    };
    ack::respond(dp, qpn, BthOpcode::RC_ATOMIC_ACKNOWLEDGE, psn, ext, &[]);
    dp.io.counters.port_xmit_packets
}

/// A request with a PSN before the expected one (rxe `duplicate_request`, IBTA §9.9.1.1):
/// SEND/WRITE are acknowledged again with the last PSN processed (C9-105); a READ is replayed
/// from the resource that covers its PSN, for the part it asks for; an atomic gets its saved
/// ACK again. Anything not found in the resources is dropped (class D).
pub(super) fn duplicate(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) -> Result<(), Fail> {
    let psn = pkt.bth().psn();
    let Some(qp) = dp.objs.qps.get(qpn) else {
        return Err(Fail::Drop);
    };
    let epsn = qp.resp.epsn;
    match kind(pkt.opcode()) {
        Some(Kind::Send | Kind::Write) | None => {
            let prev = psn_add(epsn, 0x00ff_ffff);
            ack::send_ack(dp, qpn, AethSyndrome::ACK_UNLIMITED, prev);
            Ok(())
        }
        Some(Kind::Read) => {
            let Some(reth) = pkt.reth() else {
                return Err(Fail::Drop);
            };
            let (va, rkey, len) = (reth.va(), reth.rkey(), reth.len());
            let found = qp.resp.res.iter().position(|r| match *r {
                Resource::Read {
                    first_psn,
                    last_psn,
                    va: rva,
                    rkey: rrkey,
                    len: rlen,
                    ..
                } => {
                    psn_compare(psn, first_psn).is_ge()
                        && psn_compare(psn, last_psn).is_le()
                        && va >= rva
                        && va.saturating_add(u64::from(len)) <= rva.saturating_add(u64::from(rlen))
                        && rkey == rrkey
                }
                Resource::Atomic { .. } => false,
            });
            let Some(slot) = found else {
                return Err(Fail::Drop);
            };
            let new = matches!(qp.resp.res.get(slot), Some(Resource::Read { first_psn, .. }) if *first_psn == psn);
            // A replay does not hold its resource longer: a go-back-N resend replays old
            // READs and brings new ones in the same burst, and the requester only counts the
            // new ones against `max_rd_atomic` (rxe `check_resource` recycles the ring and
            // leaves the limit to the requester). Its responses are already queued as bytes.
            read_responses(dp, qpn, psn, va, rkey, len, new)?;
            Ok(())
        }
        Some(Kind::Atomic) => {
            let found = qp.resp.res.iter().enumerate().find_map(|(i, r)| match *r {
                Resource::Atomic {
                    psn: p, orig, msn, ..
                } if p == psn => Some((i, orig, msn)),
                _ => None,
            });
            let Some((slot, orig, msn)) = found else {
                return Err(Fail::Drop);
            };
            // Replayed from the saved result, never executed again; the replay does not hold
            // the resource longer (as for READs above).
            let _ = slot;
            atomic_ack(dp, qpn, psn, orig, msn);
            Ok(())
        }
    }
}
