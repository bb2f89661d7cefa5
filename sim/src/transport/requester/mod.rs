//! The requester: send WQEs → request packets, in-order send completions, go-back-N.
//!
//! Owns: `pump` (send what the window, the READ/atomic limit and fences allow), the `Sender`
//! a QP's send side works through, go-back-N `rewind` and in-order completion
//! (`complete_ready`); bursts are in `burst`, timers in `timers`, the per-QP state in `state`.
//! Must not: parse responses (that is the completer) or fetch WQEs (the engine).
//!
//! UC goes the RC way packet by packet with UC opcodes, no AckReq, and completes each WQE once
//! its last packet is sent; UD sends one packet per WQE and completes it at once.
//!
//! Follows rxe (`rxe_req.c` `rxe_requester`, `next_opcode`, `update_wqe_psn`,
//! `check_init_depth`, `req_retry`): one PSN per packet, READ reserves `max(1, ceil(len /
//! mtu))` PSNs, AckReq on the last packet of a message and after every `RXE_MAX_PKT_PER_ACK`
//! packets without one, at most `RXE_MAX_UNACKED_PSNS` PSNs in flight, at most
//! `2^log_sra_max` READ/atomics outstanding. Every WQE keeps its PSN range and local buffers
//! until it completes, so a retransmission (from any PSN, mid-message or mid-READ) is a
//! `rewind` followed by `pump`.

use bypass_hw::cmd::qp::{QpState, service_type as st};
use bypass_hw::eqe::EventType;
use bypass_hw::roce::opcode::{psn_add, psn_diff};
use bypass_hw::roce::{
    AtomicEth, BthFields, BthOpcode, DEFAULT_PKEY, Deth, ExtFields, ImmDt, IpSpec, Reth, UdpPorts,
};
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::WqeOpcode;

use super::state::{DataPath, Transport};
use super::wire::Route;
use crate::cong::Cong;
use crate::counters::Counters;
use crate::engine::cqe::{self, SendCq};
use crate::engine::gather;
use crate::engine::wqe::{Fence, SendWqe};
use crate::events::Completions;
use crate::io::Io;
use crate::mkey::{Mkey, Need};
use crate::objects::{AddressPath, Objects, Qp, QpAttrs};
use crate::profile::Profile;
use crate::table::Table;
pub(crate) use state::ReqState;

mod burst;
pub(crate) mod state;
mod timers;

use burst::{BurstMsg, burst_count, send_burst, train_wait};
pub(crate) use timers::{next_deadline, rnr_timer_ns, run_timers, timer_due};

/// rxe `RXE_MAX_UNACKED_PSNS`: PSNs that may be sent and not yet acknowledged.
pub const MAX_UNACKED_PSNS: i32 = 128;
/// rxe `RXE_MAX_PKT_PER_ACK`: packets sent without AckReq before one asks for an ACK.
pub const MAX_PKT_PER_ACK: u32 = 64;

/// The constants of a QP the requester and completer read while they work on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// QP number.
    pub qpn: u32,
    /// Service type.
    pub st: u8,
    /// Protection domain.
    pub pd: u32,
    /// State.
    pub state: QpState,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Remote QPN (RC).
    pub remote_qpn: u32,
    /// The QP's Q_Key (UD).
    pub q_key: u32,
    /// Transport retry limit (7 = infinite).
    pub retry_count: u8,
    /// RNR retry limit (7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding READ/atomic limit.
    pub sra_max: usize,
    /// The ACK timeout in ns, if any.
    pub ack_timeout: Option<u64>,
}

/// The context of `qp`.
#[inline]
fn ctx(qp: &Qp) -> Ctx {
    let a = &qp.attrs;
    Ctx {
        qpn: qp.qpn,
        st: qp.st,
        pd: qp.pd,
        state: qp.state,
        // The PRM's path MTUs are 256..4096; a QP without one sends at the minimum.
        mtu: a.mtu.clamp(256, 4096),
        remote_qpn: a.remote_qpn & 0x00ff_ffff,
        q_key: a.q_key,
        retry_count: a.retry_count,
        rnr_retry: a.rnr_retry,
        sra_max: 1usize << a.log_sra_max.min(16),
        ack_timeout: match a.path.ack_timeout {
            0 => None,
            // `ack_timeout` is a 5-bit field: 4.096 µs << 31 is the longest timeout.
            t => Some(4096u64 << t.min(31)),
        },
    }
}

/// One QP's send side at work: the pieces of the QP the requester and completer touch besides
/// its [`ReqState`] (borrowed in place, next to this), and the parts its packets and
/// completions go through.
pub(crate) struct Sender<'a, 'io> {
    /// The QP's attributes (its primary path).
    pub(crate) attrs: &'a QpAttrs,
    /// The QP's counters.
    pub(crate) counters: &'a mut Counters,
    /// The headers of the QP's primary path, once built (`wire::qp_headers`).
    pub(crate) headers: &'a mut Option<(IpSpec, UdpPorts)>,
    /// Where the QP's send CQEs go.
    pub(crate) cq: SendCq,
    /// Memory keys (local buffers).
    pub(crate) mkeys: &'a Table<Mkey>,
    /// CQs, EQs, interrupts.
    pub(crate) comp: &'a mut Completions,
    /// The transport's device-wide state (the wire queue, spares, caches, ledger).
    pub(crate) tp: &'a mut Transport,
    /// The device's profile (GIDs).
    pub(crate) profile: &'a Profile,
    /// Congestion control: the RP's status and parameters (ECN marking, pacing).
    pub(crate) cong: &'a Cong,
    /// DMA, counters, trace, time.
    pub(crate) io: &'a mut Io<'io>,
}

/// Lends QP `qpn`'s send side to `f`: its constants, its [`ReqState`] in place and the
/// [`Sender`] beside it. `None` if there is no such QP.
#[inline(always)]
pub(crate) fn with_sender<R>(
    dp: &mut DataPath<'_>,
    qpn: u32,
    f: impl FnOnce(&mut Sender<'_, '_>, &Ctx, &mut ReqState) -> R,
) -> Option<R> {
    let DataPath {
        objs,
        comp,
        tp,
        cong,
        profile,
        io,
    } = dp;
    let Objects { qps, mkeys, .. } = &mut **objs;
    let qp = qps.get_mut(qpn)?;
    let c = ctx(qp);
    let cq = SendCq::of(qp);
    let Qp {
        req,
        attrs,
        counters,
        headers,
        ..
    } = qp;
    let mut s = Sender {
        attrs,
        counters,
        headers,
        cq,
        mkeys,
        comp,
        tp,
        profile,
        cong,
        io,
    };
    Some(f(&mut s, &c, req))
}

/// Adds to a counter of the QP and of the device.
pub(crate) fn count(s: &mut Sender<'_, '_>, f: impl Fn(&mut Counters)) {
    f(s.io.counters);
    f(s.counters);
}

/// Uses one retry of a `limit` (7 = infinite, IBTA §9.7.5.2.8 / rxe). False if none is left.
pub(crate) fn use_retry(used: &mut u8, limit: u8) -> bool {
    if limit >= 7 {
        return true;
    }
    if *used < limit {
        *used += 1;
        true
    } else {
        false
    }
}

/// Go-back-N: the next packet sent will be the one with PSN `psn` (rxe `req_retry`: back to
/// the first unacknowledged WQE, skipping its acknowledged packets; a READ restarts at
/// `va + npsn * mtu`).
pub(crate) fn rewind(req: &mut ReqState, psn: u32) {
    for (i, w) in req.wqes.iter_mut().enumerate() {
        if !w.started {
            break;
        }
        if w.done || w.error.is_some() || w.opcode == WqeOpcode::NOP {
            continue;
        }
        if psn_diff(w.last_psn, psn) >= 0 {
            let k = psn_diff(psn, w.first_psn).max(0) as u32;
            req.cur = i;
            req.cur_pkt = if w.opcode == WqeOpcode::RDMA_READ {
                k
            } else {
                k.min(npkts_hint(w))
            };
            if w.opcode == WqeOpcode::RDMA_READ {
                w.resp_pkts = k;
            }
            req.psn = psn_add(w.first_psn, req.cur_pkt);
            req.noack = 0;
            return;
        }
    }
}

/// An upper bound on the packets of `w` (used to keep a rewind inside the message).
fn npkts_hint(w: &SendWqe) -> u32 {
    psn_diff(w.last_psn, w.first_psn).max(0) as u32
}

/// Completes, in order, the WQEs at the head of the queue that are done (a CQE if signaled)
/// or failed (an error CQE; then the QP must go to ERR: returns true).
///
/// Inlined where it is called: usually the head is still waiting (nothing to complete) and
/// only the timer check runs.
#[inline]
pub(crate) fn complete_ready(s: &mut Sender<'_, '_>, req: &mut ReqState) -> bool {
    if req
        .wqes
        .front()
        .is_some_and(|w| w.done || w.error.is_some())
    {
        return complete_head(s, req);
    }
    if !req.outstanding() {
        req.ack_deadline = None;
    }
    false
}

/// [`complete_ready`] when the head WQE is done or failed.
#[inline(never)]
fn complete_head(s: &mut Sender<'_, '_>, req: &mut ReqState) -> bool {
    while let Some(w) = req.wqes.front() {
        if let Some(synd) = w.error {
            let (index, opcode) = (w.index, w.opcode);
            req.wqes.pop_front();
            req.cur = req.cur.saturating_sub(1);
            // Held back while a burst of the QP still reads its memory (the WQE's own, after
            // a retry timeout on a slow link, or a later one's): `engine::ledger`.
            let e = crate::engine::ledger::PendingErr {
                index,
                opcode,
                syndrome: synd,
            };
            s.tp.ledger
                .post_err_when_read(s.cq, s.counters, s.comp, s.io, e);
            return true;
        }
        if !w.done {
            break;
        }
        if w.signaled {
            let byte_cnt = match w.opcode {
                WqeOpcode::RDMA_READ => w.len,
                WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => 8,
                _ => 0,
            };
            cqe::post_ok(s.cq, s.comp, s.io, w.index, w.opcode, byte_cnt);
        }
        req.wqes.pop_front();
        req.cur = req.cur.saturating_sub(1);
    }
    if !req.outstanding() {
        req.ack_deadline = None;
    }
    false
}

/// What one requester step did.
enum Step {
    /// A packet went out.
    Sent,
    /// Something changed without a packet (a NOP, an error found): go round again.
    Progress,
    /// Nothing more can be sent now.
    Stall,
}

/// Sends everything QP `qpn` may send now, and completes what is complete. True if a packet
/// went out.
pub(crate) fn pump(dp: &mut DataPath<'_>, qpn: u32) -> bool {
    let pumped = with_sender(dp, qpn, |s, c, req| {
        // SQ_DRAINING goes on with the messages it started (`step` starts no other).
        if c.state != QpState::Rts && c.state != QpState::SqDraining {
            return (false, After::Nothing);
        }
        let mut sent = false;
        // Each iteration sends a packet or changes a WQE; the window bounds the packets.
        loop {
            if complete_ready(s, req) {
                return (sent, After::of(c, true));
            }
            match step(s, c, req) {
                Step::Sent => sent = true,
                Step::Progress => {}
                Step::Stall => return (sent, After::of(c, false)),
            }
        }
    });
    let Some((sent, after)) = pumped else {
        return false;
    };
    after.run(dp, qpn);
    sent
}

/// What a QP's send side must do once its completions are written (decided inside
/// [`with_sender`] from the QP's constants, so the common case costs no lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Nothing.
    Nothing,
    /// A WQE failed: the QP goes to this state (ERR for RC; SQE for UD and UC, IBTA vol. 1
    /// §10.3.1 "Send Queue Error": a send error there affects the send queue alone, the
    /// error CQE then WR_FLUSH_ERR for the rest of the SQ, as entering ERR writes them).
    Fail(QpState),
    /// The QP is draining: the drain may be over (`engine::drain`).
    CheckDrain,
}

impl After {
    /// What follows for QP `c` after completions that failed a WQE if `failed`.
    #[inline(always)]
    pub(crate) fn of(c: &Ctx, failed: bool) -> Self {
        if failed {
            Self::Fail(if c.st == st::UD || c.st == st::UC {
                QpState::Sqer
            } else {
                QpState::Err
            })
        } else if c.state == QpState::SqDraining {
            Self::CheckDrain
        } else {
            Self::Nothing
        }
    }

    /// Does it for QP `qpn`.
    #[inline(always)]
    pub(crate) fn run(self, dp: &mut DataPath<'_>, qpn: u32) {
        match self {
            Self::Nothing => {}
            Self::Fail(to) => dp.set_qp_state(qpn, to),
            Self::CheckDrain => {
                crate::engine::drain::finish_if_drained(&mut dp.objs.qps, dp.comp, &mut dp.io, qpn);
            }
        }
    }
}

/// Sends the next packet of the current WQE, starting it first if needed.
fn step(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState) -> Step {
    if req.rnr_wait.is_some() {
        return Step::Stall;
    }
    let cur = req.cur;
    let Some(w) = req.wqes.get(cur) else {
        return Step::Stall;
    };
    if w.error.is_some() {
        // Waits for the WQEs before it; `complete_ready` reports it at the head.
        return Step::Stall;
    }
    if w.done {
        req.cur += 1;
        req.cur_pkt = 0;
        return Step::Progress;
    }
    if !w.started {
        if c.state == QpState::SqDraining {
            // No new message while draining: it waits for SQD→RTS.
            return Step::Stall;
        }
        match start(s, c, req) {
            Ok(true) => {}
            Ok(false) => return Step::Stall,
            Err(synd) => {
                if let Some(w) = req.wqes.get_mut(cur) {
                    w.error = Some(synd);
                }
                return Step::Progress;
            }
        }
    }
    let Some(w) = req.wqes.get(cur) else {
        return Step::Stall;
    };
    if w.done {
        return Step::Progress;
    }
    if c.st == st::RC && psn_diff(req.psn, req.una) >= MAX_UNACKED_PSNS {
        return Step::Stall;
    }
    // The port takes packets only as fast as its wire sends them (back-pressure from a
    // switched network): the scan resumes this QP once the link took some.
    if s.tp.tx_held() {
        return Step::Stall;
    }
    // A rate-limited QP sends when its pacer allows, one packet at a time (a burst would go
    // faster than its rate): held back, it waits for the scan (`timers`).
    let limited = req.rp.limited();
    if limited && !req.rp.gate(&s.cong.rp, s.profile.line_rate_mbps, s.io.now) {
        return Step::Stall;
    }
    // An RC WRITE on the fast path goes as a burst of this many packets (computed once for
    // the wait below and the burst).
    let burst = (!limited && c.st == st::RC && s.tp.fast_tx && w.opcode == WqeOpcode::RDMA_WRITE)
        .then(|| burst_count(s.tp.tx_trains, c.mtu, req, w.len));
    if burst.is_some_and(|count| train_wait(c.mtu, req, w.len, count)) {
        // The rest of the window would start a send the link cannot fill: wait for the ACK
        // that is on its way.
        return Step::Stall;
    }
    let r = if c.st == st::UD {
        send_ud(s, c, req)
    } else {
        send_rc(s, c, req, burst)
    };
    match r {
        Ok(()) => Step::Sent,
        Err(synd) => {
            if let Some(w) = req.wqes.get_mut(cur) {
                w.error = Some(synd);
            }
            Step::Progress
        }
    }
}

/// Starts `wqes[cur]`: fence and READ/atomic limits (Ok(false) = wait), local key checks
/// (Err = its error), PSN range.
fn start(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState) -> Result<bool, CqeSyndrome> {
    let cur = req.cur;
    let Some(w) = req.wqes.get(cur) else {
        return Ok(false);
    };
    let before = || req.wqes.iter().take(cur).filter(|b| !b.done);
    let rd_atomic = before().filter(|b| b.is_read_or_atomic()).count();
    match w.fence {
        Fence::ReadAtomic if rd_atomic > 0 => return Ok(false),
        Fence::All if before().count() > 0 => return Ok(false),
        _ => {}
    }
    if w.is_read_or_atomic() && rd_atomic >= c.sra_max {
        return Ok(false);
    }
    // Local buffers: gather lists need LocalRead, READ/atomic result buffers LocalWrite.
    if w.inline.is_none() {
        let need = if w.is_read_or_atomic() {
            Need::LocalWrite
        } else {
            Need::LocalRead
        };
        gather::check(s.mkeys, c.pd, c.qpn, &w.sges, need).map_err(|e| e.syndrome())?;
    }
    if c.st == st::UC && w.is_read_or_atomic() {
        // UC has no READ or atomic opcodes (IBTA table 38); the drivers refuse them at post
        // time, a WQE that carries one anyway is a local QP operation error.
        return Err(CqeSyndrome::LOCAL_QP_OP_ERR);
    }
    if c.st == st::UD && w.opcode != WqeOpcode::NOP && w.len > c.mtu {
        // A UD message must fit one packet. mlx5 completes an oversized UD send with a local
        // length error (IBTA C10-93.1.1 leaves the choice to the CA; rxe drops it silently).
        return Err(CqeSyndrome::LOCAL_LENGTH_ERR);
    }
    let psns = match w.opcode {
        WqeOpcode::NOP => 0,
        WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => 1,
        _ if c.st == st::UD => 1,
        _ => w.len.div_ceil(c.mtu).max(1),
    };
    let psn = req.psn;
    let Some(w) = req.wqes.get_mut(cur) else {
        return Ok(false);
    };
    w.started = true;
    w.first_psn = psn;
    w.last_psn = psn_add(psn, psns.saturating_sub(1));
    w.resp_pkts = 0;
    req.cur_pkt = 0;
    if psns == 0 {
        // A NOP sends nothing and completes in order.
        w.sent = true;
        w.done = true;
    }
    Ok(true)
}

/// Sends one request packet and does the PSN and AckReq bookkeeping.
fn emit(
    s: &mut Sender<'_, '_>,
    c: &Ctx,
    req: &mut ReqState,
    path: &AddressPath,
    bth: BthFields,
    ext: ExtFields,
    payload: &[u8],
) {
    if psn_diff(bth.psn, req.max_psn) < 0 {
        count(s, |k| k.retransmits += 1);
    } else {
        req.max_psn = psn_add(bth.psn, 1);
    }
    let route = Route {
        port: path.port,
        path,
        src_qpn: c.qpn,
    };
    // A route the port cannot take is a packet lost on the way: the timer recovers it.
    let sent = super::wire::send(
        s.tp,
        s.profile,
        &s.cong.status,
        s.io,
        route,
        bth,
        ext,
        payload,
    );
    if let Some(len) = sent
        && req.rp.limited()
    {
        let now = s.io.now;
        req.rp
            .sent(&s.cong.rp, s.profile.line_rate_mbps, len as u64, now);
    }
    if c.st == st::RC && req.ack_deadline.is_none() {
        req.ack_deadline = c.ack_timeout.map(|t| s.io.now.saturating_add(t));
    }
}

/// The BTH of a request packet.
fn bth(opcode: BthOpcode, dest_qp: u32, psn: u32, ack_req: bool, se: bool) -> BthFields {
    BthFields {
        opcode,
        se,
        pkey: DEFAULT_PKEY,
        dest_qp,
        ack_req,
        psn,
        ..BthFields::default()
    }
}

/// The payload of `w` from `off`, `n` bytes: inline bytes or a gather.
fn payload(
    s: &mut Sender<'_, '_>,
    c: &Ctx,
    w: &SendWqe,
    off: u32,
    n: u32,
) -> Result<Vec<u8>, CqeSyndrome> {
    if let Some(p) = &w.inline {
        let (a, b) = (off as usize, off as usize + n as usize);
        return p
            .get(a..b)
            .map(<[u8]>::to_vec)
            .ok_or(CqeSyndrome::LOCAL_QP_OP_ERR);
    }
    gather::gather(
        s.mkeys,
        s.io.dma,
        c.pd,
        c.qpn,
        &w.sges,
        u64::from(off),
        n as usize,
    )
    .map_err(|e| e.report(s.io))
}

/// One RC packet of `wqes[cur]`, or, for a WRITE on the fast path, a burst of `burst`
/// packets ([`burst_count`]; None otherwise).
fn send_rc(
    s: &mut Sender<'_, '_>,
    c: &Ctx,
    req: &mut ReqState,
    burst: Option<u32>,
) -> Result<(), CqeSyndrome> {
    let cur = req.cur;
    if let Some(count) = burst {
        // The WQE's buffers are lent out of the queue for the burst (no copy of them, no
        // move of the whole WQE), and put back before the queue moves on.
        if let Some(slot) = req.wqes.get_mut(cur) {
            let sges = std::mem::take(&mut slot.sges);
            let inline = slot.inline.take();
            let msg = BurstMsg {
                len: slot.len,
                raddr: slot.raddr,
                rkey: slot.rkey,
                inline: inline.as_ref(),
                sges: &sges,
            };
            let sent = send_burst(s, c, req, &msg, count);
            if let Some(slot) = req.wqes.get_mut(cur) {
                slot.sges = sges;
                slot.inline = inline;
            }
            match sent {
                Some(true) => {
                    finish_wqe(req, cur);
                    return Ok(());
                }
                Some(false) => return Ok(()),
                None => {}
            }
        }
    }
    // The WQE is read in place (no copy of its gather list per packet): every field is read
    // before `emit` takes the requester state.
    let Some(w) = req.wqes.get(cur) else {
        return Ok(());
    };
    let psn = req.psn;
    let mtu = c.mtu;
    match w.opcode {
        WqeOpcode::RDMA_READ => {
            let off = req.cur_pkt.saturating_mul(mtu).min(w.len);
            let reth = Reth::new(w.raddr.wrapping_add(u64::from(off)), w.rkey, w.len - off);
            let ext = ExtFields {
                reth: Some(reth),
                ..Default::default()
            };
            let b = bth(
                BthOpcode::RC_RDMA_READ_REQUEST,
                c.remote_qpn,
                psn,
                true,
                false,
            );
            // The responses use every reserved PSN: they are all "sent" as far as the
            // completer's staleness check goes.
            let end = psn_add(w.last_psn, 1);
            let attrs = s.attrs;
            emit(s, c, req, &attrs.path, b, ext, &[]);
            if psn_diff(end, req.max_psn) > 0 {
                req.max_psn = end;
            }
            req.noack = 0;
            req.psn = end;
            finish_wqe(req, cur);
        }
        WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => {
            let op = if w.opcode == WqeOpcode::ATOMIC_CS {
                BthOpcode::RC_COMPARE_SWAP
            } else {
                BthOpcode::RC_FETCH_ADD
            };
            let ext = ExtFields {
                atomic_eth: Some(AtomicEth::new(w.raddr, w.rkey, w.swap_add, w.compare)),
                ..Default::default()
            };
            let attrs = s.attrs;
            emit(
                s,
                c,
                req,
                &attrs.path,
                bth(op, c.remote_qpn, psn, true, false),
                ext,
                &[],
            );
            req.noack = 0;
            req.psn = psn_add(psn, 1);
            finish_wqe(req, cur);
        }
        _ => {
            let off = req.cur_pkt.saturating_mul(mtu).min(w.len);
            let n = (w.len - off).min(mtu);
            let first = req.cur_pkt == 0;
            let last = off + n >= w.len;
            let data = payload(s, c, w, off, n)?;
            let (op, reth, imm) = rc_opcode(w, first, last);
            // UC: the same packets with the UC opcode (`0x20 |` the RC one's low five bits),
            // never asking for an ACK: none comes (IBTA §9.7.2; rxe `next_opcode_uc`).
            let uc = c.st == st::UC;
            let op = if uc { BthOpcode(op.0 | 0x20) } else { op };
            let ack_req = !uc && (last || req.noack + 1 >= MAX_PKT_PER_ACK);
            // SE goes on the last packet of a solicited SEND or WRITE with immediate
            // (IBTA §9.2: SE is valid on the last packet of a message that consumes a receive).
            let se = last
                && w.solicited
                && matches!(
                    w.opcode,
                    WqeOpcode::SEND | WqeOpcode::SEND_IMM | WqeOpcode::RDMA_WRITE_IMM
                );
            let ext = ExtFields {
                reth: reth.then(|| Reth::new(w.raddr, w.rkey, w.len)),
                imm_dt: imm.then(|| ImmDt::new(w.imm)),
                ..Default::default()
            };
            let attrs = s.attrs;
            emit(
                s,
                c,
                req,
                &attrs.path,
                bth(op, c.remote_qpn, psn, ack_req, se),
                ext,
                &data,
            );
            req.noack = if ack_req { 0 } else { req.noack + 1 };
            req.psn = psn_add(psn, 1);
            if last {
                if uc {
                    // Complete once the last packet is sent: no ACK, no retransmission
                    // (rxe `rxe_comp.c` completes UC WQEs at `wqe->state == wqe_state_done`).
                    if let Some(w) = req.wqes.get_mut(cur) {
                        w.done = true;
                    }
                }
                finish_wqe(req, cur);
            } else {
                req.cur_pkt += 1;
            }
        }
    }
    Ok(())
}

fn count_retransmits(s: &mut Sender<'_, '_>, n: u64) {
    count(s, |k| k.retransmits += n);
}

/// The last packet of `wqes[cur]` went out: on to the next WQE.
fn finish_wqe(req: &mut ReqState, cur: usize) {
    if let Some(w) = req.wqes.get_mut(cur) {
        w.sent = true;
    }
    req.cur = cur + 1;
    req.cur_pkt = 0;
}

/// The BTH opcode of an RC SEND/WRITE packet, and whether it carries RETH and ImmDt
/// (rxe `next_opcode`; IBTA table 38).
fn rc_opcode(w: &SendWqe, first: bool, last: bool) -> (BthOpcode, bool, bool) {
    use BthOpcode as B;
    let imm = last && matches!(w.opcode, WqeOpcode::SEND_IMM | WqeOpcode::RDMA_WRITE_IMM);
    let write = matches!(w.opcode, WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM);
    let op = match (write, first, last, imm) {
        (false, true, true, false) => B::RC_SEND_ONLY,
        (false, true, true, true) => B::RC_SEND_ONLY_WITH_IMMEDIATE,
        (false, true, false, _) => B::RC_SEND_FIRST,
        (false, false, false, _) => B::RC_SEND_MIDDLE,
        (false, false, true, false) => B::RC_SEND_LAST,
        (false, false, true, true) => B::RC_SEND_LAST_WITH_IMMEDIATE,
        (true, true, true, false) => B::RC_RDMA_WRITE_ONLY,
        (true, true, true, true) => B::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (true, true, false, _) => B::RC_RDMA_WRITE_FIRST,
        (true, false, false, _) => B::RC_RDMA_WRITE_MIDDLE,
        (true, false, true, false) => B::RC_RDMA_WRITE_LAST,
        (true, false, true, true) => B::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    };
    (op, write && first, imm)
}

/// The one packet of a UD send; it completes as soon as it is sent (UD has no ACKs).
fn send_ud(s: &mut Sender<'_, '_>, c: &Ctx, req: &mut ReqState) -> Result<(), CqeSyndrome> {
    let cur = req.cur;
    // Read in place, as `send_rc` reads it.
    let Some(w) = req.wqes.get(cur) else {
        return Ok(());
    };
    let Some(ud) = w.ud else {
        return Err(CqeSyndrome::LOCAL_QP_OP_ERR);
    };
    let data = payload(s, c, w, 0, w.len)?;
    // A Q_Key with its high bit set means "use the QP's Q_Key" (IBTA §10.2.5 C10-15; rdma-core
    // leaves the choice to the device by copying the WR's value).
    let qkey = if ud.qkey & 0x8000_0000 != 0 {
        c.q_key
    } else {
        ud.qkey
    };
    let deth = Deth::new(qkey, c.qpn).map_err(|_| CqeSyndrome::LOCAL_QP_OP_ERR)?;
    let imm = w.opcode == WqeOpcode::SEND_IMM;
    let ext = ExtFields {
        deth: Some(deth),
        imm_dt: imm.then(|| ImmDt::new(w.imm)),
        ..Default::default()
    };
    let op = if imm {
        BthOpcode::UD_SEND_ONLY_WITH_IMMEDIATE
    } else {
        BthOpcode::UD_SEND_ONLY
    };
    let path = AddressPath {
        rgid: ud.rgid,
        rmac: ud.rmac,
        src_addr_index: ud.sgid_index,
        hop_limit: ud.hop_limit,
        tclass: ud.tclass,
        flow_label: ud.flow_label,
        port: s.attrs.path.port,
        ..AddressPath::default()
    };
    let psn = req.psn;
    emit(
        s,
        c,
        req,
        &path,
        bth(op, ud.dqpn, psn, false, w.solicited),
        ext,
        &data,
    );
    req.psn = psn_add(psn, 1);
    if let Some(w) = req.wqes.get_mut(cur) {
        w.done = true;
    }
    finish_wqe(req, cur);
    Ok(())
}

/// Continues held-back sending: fetches WQEs posted before the QP reached RTS, and sends what
/// the window and limits now allow. True if a packet went out.
pub(crate) fn resume(dp: &mut DataPath<'_>) -> bool {
    // A QP with no fetched WQE and nothing left to fetch has nothing to resume (`pump` would
    // find no WQE and stall): skipping it keeps an idle device's step free of work. The QPs
    // are visited in number order by a cursor (no list is collected: a scan allocates
    // nothing), each looked up after the previous one ran, as a collected list would be.
    //
    // Behind the port's back-pressure (`Transport::tx_gate`) the first QP visited takes the
    // room the link freed, so the visit starts after the last QP that sent and wraps
    // around: QPs share the port round-robin, as the send scheduler arbitrates them.
    let start = if dp.tp.tx_gate.is_some() {
        dp.tp.resume_from
    } else {
        0
    };
    let mut sent = resume_range(dp, start, u32::MAX);
    if start > 0 {
        sent |= resume_range(dp, 0, start);
    }
    sent
}

/// [`resume`] over the QPs numbered `from..end`.
fn resume_range(dp: &mut DataPath<'_>, mut from: u32, end: u32) -> bool {
    let mut sent = false;
    loop {
        let next = dp
            .objs
            .qps
            .iter_from(from)
            .take_while(|&(n, _)| n < end)
            .find(|(_, qp)| has_work(qp))
            .map(|(n, qp)| (n, qp.req.fresh));
        let Some((qpn, fresh)) = next else {
            return sent;
        };
        if fresh && let Some(qp) = dp.objs.qps.get_mut(qpn) {
            qp.req.fresh = false;
            let caps = &dp.profile.caps;
            if crate::engine::fetch(qp, caps, &mut dp.io, &mut dp.tp.bf_spare, None) {
                dp.comp
                    .post_qp_event(&mut dp.io, EventType::WQ_CATAS_ERROR, qpn);
            }
        }
        let Some(after) = qpn.checked_add(1) else {
            return sent | pump(dp, qpn);
        };
        if pump(dp, qpn) {
            sent = true;
            dp.tp.resume_from = after;
        }
        from = after;
    }
}

/// Whether `qp` has sending `resume` would continue: in RTS with a doorbell not yet acted on,
/// or a fetched WQE `pump` could act on.
///
/// A QP whose every fetched WQE went out and whose oldest one still waits for its ACK (the
/// usual state between a WRITE and its ACK) has none: `pump` would find nothing to send
/// (`cur` is past the queue) and nothing to complete (`complete_ready` stops at a head that
/// is started, not done and not failed, and leaves the timer alone while it is outstanding).
pub(crate) fn has_work(qp: &Qp) -> bool {
    let req = &qp.req;
    let waiting = req.cur >= req.wqes.len()
        && req
            .wqes
            .front()
            .is_some_and(|w| w.started && !w.done && w.error.is_none());
    if qp.state == QpState::Rts {
        return req.fresh || (!req.wqes.is_empty() && !waiting);
    }
    // Draining: only the message in progress at `cur` (a WQE it has not started waits).
    qp.state == QpState::SqDraining
        && req
            .wqes
            .get(req.cur)
            .is_some_and(|w| w.started && !w.done && w.error.is_none())
}

#[cfg(test)]
mod tests;
