//! The RoCEv2 transport: what the device does with send doorbells and packets.
//!
//! Owns: the data path's entry points, each on a `DataPath` (the parts the device lends it):
//! a send doorbell (`doorbell`), receive dispatch (parse, ICRC, address and QP checks, then
//! requests to the responder and responses to the completer), and the periodic scan
//! (timers, held-back sending, receives to flush). The requester turns send WQEs into
//! request packets, the completer takes responses, the responder takes requests; `wire` puts
//! packets on the wire; `state` holds the device-wide state and the firmware's way in
//! (`QpControl`). Must not: touch rings directly (completions go through `Completions`).
//!
//! Receive checks follow rxe (`rxe_recv.c` `rxe_rcv`, `check_type_state`, `check_addr`,
//! `check_keys`): bad ICRC → dropped and counted; a destination address that is not one of
//! our GIDs, an unknown QPN, an opcode of another transport than the QP's, or a QP not yet
//! in RTR → dropped and counted as a discard; a packet for an RC or UC QP from another
//! address than its peer's (`peer::from_peer`) → dropped and counted as `rx_addr_errors`, a
//! P_Key other than the port's (`peer::pkey_ok`) as `rx_pkey_errors`, on the device and the
//! QP. Such a packet is never answered: an ACK or NAK would tell a spoofer the PSN.
//!
//! ECN (`ecn`): a CNP is recognised before the parse (the opcode table does not carry it) and
//! goes to the reaction point; a CE-marked packet that passes the checks goes to the
//! notification point, then is processed as usual. The in-process fast paths (bursts, ACKs
//! as fields) take a CE-marked frame through the per-packet path.

pub(crate) mod completer;
pub(crate) mod ecn;
pub(crate) mod peer;
pub mod requester;
pub(crate) mod responder;
pub(crate) mod state;
pub(crate) mod wire;

use bypass_hw::cmd::qp::{QpState, service_type as st};
use bypass_hw::eqe::EventType;
use bypass_hw::roce::opcode::{Direction, Transport};
use bypass_hw::roce::{IpSpec, RocePacket, UdpPorts};

use crate::engine::ledger::Ledger;
use crate::frame::{AckFrame, Burst};
use crate::objects::Qp;
use crate::table::Table;
use crate::trace::TraceEvent;
use state::DataPath;

/// A send doorbell (8-byte doorbell, or a whole WQE by BlueFlame) arrived on UAR page `uar`.
///
/// A doorbell naming an unknown QP, a QP without an SQ or of a type without a send engine
/// here, or arriving through another UAR page than the QP's, is dropped and counted
/// (`doorbell_errors`), as the hardware drops it: the UAR page is the protection domain of
/// doorbells (kernel `mlx5_ib` gives each process its own pages for that reason).
///
/// QP state (IBTA vol. 1 §10.3.1 and the QP state table 10.3.1.1, which mlx5 follows): work
/// requests may be posted in INIT and RTR but are processed only from RTS; in SQD they wait
/// for the return to RTS; in SQE and ERR new WQEs complete with WR_FLUSH_ERR. A doorbell for
/// a QP in RESET, INIT, RTR or SQD therefore does nothing now; the WQEs are fetched when the
/// QP reaches RTS (`requester::resume`).
pub(crate) fn doorbell(dp: &mut DataPath<'_>, uar: u32, ctrl: [u8; 8], bf: Option<Vec<u8>>) {
    dp.tp.quiet = None;
    let qpn = u32::from_be_bytes([ctrl[4], ctrl[5], ctrl[6], ctrl[7]]) >> 8;
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        dp.io.counters.doorbell_errors += 1;
        return;
    };
    if qp.uar != uar || qp.geom.log_sq_size.is_none() || !matches!(qp.st, st::RC | st::UD | st::UC)
    {
        dp.io.counters.doorbell_errors += 1;
        return;
    }
    match qp.state {
        QpState::Rts => {
            if crate::engine::fetch(qp, &dp.profile.caps, &mut dp.io, &mut dp.tp.bf_spare, bf) {
                dp.comp
                    .post_qp_event(&mut dp.io, EventType::WQ_CATAS_ERROR, qpn);
            }
            requester::pump(dp, qpn);
        }
        // While an SQ flush waits for bursts in flight, the WQEs posted since are flushed
        // after it (CQEs in SQ order): the waiting flush ends with `flush_posted`.
        QpState::Err | QpState::Sqer if !dp.tp.ledger.holds_errs(qpn) => {
            crate::engine::flush_posted(qp, dp.comp, &mut dp.io);
        }
        _ => {}
    }
}

/// Processes one packet from the wire (IP header through ICRC). `icrc_checked`: the link
/// already checked the ICRC and found it right (`Device::receive_icrc_checked`), so it is not
/// computed again.
pub(crate) fn receive(dp: &mut DataPath<'_>, bytes: &[u8], icrc_checked: bool) {
    dp.tp.quiet = None;
    count_and_trace(dp, bytes);
    if ecn::is_cnp(bytes) {
        ecn::receive_cnp(dp, bypass_hw::roce::Cnp::parse(bytes), icrc_checked);
        return;
    }
    let Ok(pkt) = RocePacket::parse(bytes) else {
        dp.io.counters.rx_discards += 1;
        return;
    };
    receive_packet(dp, &pkt, icrc_checked);
}

/// As [`receive`], for a packet whose IP and UDP headers (its first `ip.header_len()` + 8
/// bytes) a UDP link wrote itself from what its socket reported, `ip` and `ports`: they are taken as
/// given, not parsed again, and the IPv4 header checksum is not verified (the kernel checked
/// the one on the wire; the link's own is right by construction). The rest of the packet is
/// parsed and checked as [`receive`] does (`RocePacket::parse_udp_payload`).
pub(crate) fn receive_udp(
    dp: &mut DataPath<'_>,
    bytes: &[u8],
    ip: &IpSpec,
    ports: UdpPorts,
    icrc_checked: bool,
) {
    count_and_trace(dp, bytes);
    let udp_payload = bytes.get(ip.header_len() + bypass_hw::roce::ip::UDP_HDR_LEN..);
    if let Some(p) = udp_payload
        && bypass_hw::roce::is_cnp(p)
    {
        let cnp = bypass_hw::roce::Cnp::parse_udp_payload(*ip, ports, p);
        ecn::receive_cnp(dp, cnp, icrc_checked);
        return;
    }
    let Some(Ok(pkt)) = bytes
        .get(ip.header_len() + bypass_hw::roce::ip::UDP_HDR_LEN..)
        .map(|p| RocePacket::parse_udp_payload(*ip, ports, p))
    else {
        dp.io.counters.rx_discards += 1;
        return;
    };
    receive_packet(dp, &pkt, icrc_checked);
}

/// Counts a received packet and records it in the trace.
#[inline]
fn count_and_trace(dp: &mut DataPath<'_>, bytes: &[u8]) {
    dp.io.counters.port_rcv_packets += 1;
    dp.io.counters.port_rcv_data += bytes.len() as u64;
    let at = dp.io.now;
    dp.io.trace.record(|| TraceEvent::Packet {
        at,
        tx: false,
        bytes: bytes.to_vec(),
    });
}

/// The checks and dispatch of [`receive`] after the parse.
fn receive_packet(dp: &mut DataPath<'_>, pkt: &RocePacket<'_>, icrc_checked: bool) {
    if !icrc_checked && !pkt.icrc_ok() {
        dp.io.counters.rx_icrc_errors += 1;
        return;
    }
    if !dp.owns_gid(&crate::frame::dst_gid(pkt.ip())) {
        dp.io.counters.rx_discards += 1;
        return;
    }
    let qpn = pkt.bth().dest_qp();
    let Some(qp) = dp.objs.qps.get(qpn) else {
        dp.io.counters.rx_discards += 1;
        return;
    };
    let type_ok = match pkt.opcode().transport() {
        Transport::Rc => qp.st == st::RC,
        Transport::Ud => qp.st == st::UD,
        Transport::Uc => qp.st == st::UC,
        _ => false,
    };
    if !type_ok || !takes_packets(qp.state) {
        dp.io.counters.rx_discards += 1;
        return;
    }
    if !peer::from_peer(qp, dp.profile, pkt.ip()) {
        count_peer_error(dp, qpn, |c| &mut c.rx_addr_errors);
        return;
    }
    if !peer::pkey_ok(pkt.bth().pkey()) {
        count_peer_error(dp, qpn, |c| &mut c.rx_pkey_errors);
        return;
    }
    if ecn::ce(pkt.ip()) {
        let (qp_st, remote_qpn) = (qp.st, qp.attrs.remote_qpn);
        ecn::notify(dp, pkt, qpn, qp_st, remote_qpn);
    }
    match pkt.info().direction {
        Direction::Request => responder::handle_request(dp, qpn, pkt),
        Direction::Response => completer::handle_response(dp, qpn, pkt),
    }
}

/// Processes a burst from an in-process link: applied at once when it is the plain case
/// (the responder's checks all pass for every packet, see `responder::burst`), else segmented
/// and processed packet by packet, so every outcome is the per-packet path's.
#[inline(always)]
pub(crate) fn receive_burst(dp: &mut DataPath<'_>, b: &Burst) {
    dp.tp.quiet = None;
    if !dp.io.trace.enabled()
        && !ecn::ce(&b.ip)
        && reaches_rc_qp(dp, &b.ip, b.dest_qp)
        && responder::burst::apply(dp, b)
    {
        return;
    }
    for pkt in b.segment() {
        receive(dp, &pkt, false);
    }
}

/// Processes an ACKNOWLEDGE from an in-process link as `receive` processes its bytes (which
/// always parse and pass the ICRC check): counted, the address and QP checked, handed to the
/// completer. With a trace to record, it goes through `receive` as bytes.
#[inline(always)]
pub(crate) fn receive_ack(dp: &mut DataPath<'_>, a: &AckFrame) {
    dp.tp.quiet = None;
    if dp.io.trace.enabled() || ecn::ce(&a.ip) {
        if let Some(bytes) = a.to_wire() {
            receive(dp, &bytes, false);
        }
        return;
    }
    dp.io.counters.port_rcv_packets += 1;
    dp.io.counters.port_rcv_data += a.wire_len;
    if !reaches_rc_qp(dp, &a.ip, a.dest_qp) {
        // The checks of `receive`, in its order, for the one that failed.
        let from_elsewhere = dp.objs.qps.get(a.dest_qp).is_some_and(|qp| {
            qp.st == st::RC && takes_packets(qp.state) && !peer::from_peer(qp, dp.profile, &a.ip)
        });
        if from_elsewhere && dp.owns_gid(&crate::frame::dst_gid(&a.ip)) {
            count_peer_error(dp, a.dest_qp, |c| &mut c.rx_addr_errors);
        } else {
            dp.io.counters.rx_discards += 1;
        }
        return;
    }
    completer::handle_ack(dp, a.dest_qp, a.psn, &a.aeth);
}

/// Counts a packet dropped by a peer check (`peer`) in the device's and QP `qpn`'s
/// counters, the one `field` picks.
#[cold]
fn count_peer_error(
    dp: &mut DataPath<'_>,
    qpn: u32,
    field: impl Fn(&mut crate::counters::Counters) -> &mut u64,
) {
    *field(dp.io.counters) += 1;
    if let Some(qp) = dp.objs.qps.get_mut(qpn) {
        *field(&mut qp.counters) += 1;
    }
}

/// True if the destination address is ours, `qpn` is an RC QP in a state that takes
/// packets, and the source is its peer (the checks of `receive`, rxe
/// `check_addr`/`check_type_state`). The in-process frames are built by a sim requester or
/// responder, which always writes the default P_Key.
fn reaches_rc_qp(dp: &mut DataPath<'_>, ip: &IpSpec, qpn: u32) -> bool {
    if !dp.owns_gid(&crate::frame::dst_gid(ip)) {
        return false;
    }
    let profile = dp.profile;
    dp.objs.qps.get(qpn).is_some_and(|qp| {
        qp.st == st::RC && takes_packets(qp.state) && peer::from_peer(qp, profile, ip)
    })
}

/// True if a QP in `state` takes packets: from RTR on, not in ERR (rxe `check_type_state`).
#[inline(always)]
fn takes_packets(state: QpState) -> bool {
    matches!(
        state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::SqDraining | QpState::Sqer
    )
}

/// The periodic scan of a device step: runs every transport timer that has expired by device
/// time, lets QPs whose sending was held back (window full, waiting for a fence, freshly rung)
/// continue, and flushes receives posted to QPs in ERR. True if any timer ran, packet went out
/// or completion was written.
///
/// One pass over the QPs first says which of the three can have work; those that cannot are
/// skipped (each is a no-op when its QPs do not qualify: `requester::run_timers` acts only on
/// expired timers, `requester::resume` only on RTS QPs with work, `responder::resume` only on
/// QPs in ERR — and the requester's two are the only ones here that can move a QP to ERR, so
/// the responder's runs after them whenever they ran).
///
/// The pass is inlined into the step and the work kept out of line: the usual scan finds
/// nothing to do and should cost only the pass.
#[inline(always)]
pub(crate) fn scan(dp: &mut DataPath<'_>) -> bool {
    // Error CQEs and SQ flushes that waited for bursts in flight (`engine::ledger`), before
    // anything else.
    let flushed =
        dp.tp.ledger.flushes_waiting() && dp.tp.ledger.retry(&mut dp.objs.qps, dp.comp, &mut dp.io);
    let due = gated_pass(dp.tp, &dp.objs.qps, dp.io.now);
    if !due.any() {
        return flushed;
    }
    scan_work(dp, due) | flushed
}

/// Which of the scan's three kinds of work can be due.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Due {
    timers: bool,
    resumable: bool,
    in_err: bool,
}

impl Due {
    /// True if any can be.
    #[inline(always)]
    pub(crate) fn any(self) -> bool {
        self.timers || self.resumable || self.in_err
    }
}

/// [`scan_pass`], skipped while the transport is quiet (`Transport::quiet`); a pass that
/// finds nothing to do and no timer armed makes it quiet.
#[inline(always)]
pub(crate) fn gated_pass(tp: &mut state::Transport, qps: &Table<Qp>, now: u64) -> Due {
    if tp.is_quiet() {
        return Due {
            timers: false,
            resumable: false,
            in_err: false,
        };
    }
    let (due, armed) = scan_pass(qps, now);
    tp.quiet = (!due.any() && !armed).then(|| tp.ledger.state_changes());
    due
}

/// The scan's pass over the QPs at time `now` ([`scan`]), and whether any QP has a timer
/// armed (due or not).
#[inline(always)]
pub(crate) fn scan_pass(qps: &Table<Qp>, now: u64) -> (Due, bool) {
    let (mut timers, mut resumable, mut in_err, mut armed) = (false, false, false, false);
    for (_, qp) in qps.iter() {
        timers |= requester::timer_due(qp, now);
        armed |=
            qp.req.rnr_wait.is_some() | qp.req.ack_deadline.is_some() | qp.req.rp.wait().is_some();
        resumable |= requester::has_work(qp);
        in_err |= qp.state == QpState::Err;
    }
    (
        Due {
            timers,
            resumable,
            in_err,
        },
        armed,
    )
}

/// The work [`scan`] found may be due: timers, held-back sending, receives to flush.
#[inline(never)]
pub(crate) fn scan_work(dp: &mut DataPath<'_>, due: Due) -> bool {
    let Due {
        timers,
        resumable,
        in_err,
    } = due;
    let mut any = false;
    // A QP held at the port's gate is resumed below if it still has work; it waits again
    // if the gate still holds.
    dp.tp.tx_waiting = false;
    if timers {
        any |= requester::run_timers(dp);
    }
    if timers || resumable {
        any |= requester::resume(dp);
    }
    if timers || resumable || in_err {
        any |= responder::resume(dp);
    }
    any
}

/// The earliest pending timer; now, if a deferred SQ flush can be written
/// (`engine::ledger::Ledger::flush_ready`).
#[inline]
pub(crate) fn next_deadline(
    qps: &Table<Qp>,
    ledger: &Ledger,
    now: u64,
    quiet: bool,
) -> Option<u64> {
    // Quiet: no timer is armed (`Transport::quiet`).
    let timer = if quiet {
        None
    } else {
        requester::next_deadline(qps)
    };
    if ledger.flushes_waiting() && ledger.flush_ready() {
        return Some(timer.map_or(now, |t| t.min(now)));
    }
    timer
}
