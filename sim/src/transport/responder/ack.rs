//! Packets the responder sends back: ACK, RNR NAK and NAK (opcode ACKNOWLEDGE), READ
//! responses and ATOMIC ACKNOWLEDGE, all to the QP's remote end over its primary path.
//!
//! Owns: the BTH and AETH of responses. Must not: change transport state (the caller decides
//! the PSN and syndrome and advances its own counters).
//!
//! rxe `rxe_resp.c` `send_ack` / `send_atomic_ack` / `prepare_ack_packet`: the response goes to
//! the QP's destination QPN with the default P_Key, AckReq and SE clear, and the AETH carries
//! the syndrome and the responder's current MSN.

use bypass_hw::roce::opcode::MASK_24;
use bypass_hw::roce::{Aeth, BthFields, BthOpcode, DEFAULT_PKEY, ExtFields, IpSpec, UdpPorts};
use bypass_hw::syndrome::AethSyndrome;

use crate::frame::{AckFrame, Frame};
use crate::io::Io;
use crate::transport::state::{DataPath, Transport};
use crate::transport::wire::{Route, ecn_current, qp_headers, send};

/// Sends a response packet of `opcode` with PSN `psn` from QP `qpn` to its remote QP.
/// Returns false if it could not be sent (no such QP, bad path).
pub(crate) fn respond(
    dp: &mut DataPath<'_>,
    qpn: u32,
    opcode: BthOpcode,
    psn: u32,
    ext: ExtFields,
    payload: &[u8],
) -> bool {
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return false;
    };
    let bth = BthFields {
        opcode,
        ..ack_bth(qp.attrs.remote_qpn, psn)
    };
    let fast_ack = match (dp.tp.fast_tx && !dp.io.trace.enabled(), opcode, ext.aeth) {
        (true, BthOpcode::RC_ACKNOWLEDGE, Some(aeth)) if payload.is_empty() => Some(aeth),
        _ => None,
    };
    // The in-process link carries an ACKNOWLEDGE as its fields (`crate::frame`), with the
    // QP's headers once built (no copy of its path then).
    let kept = qp
        .headers
        .filter(|h| ecn_current(h, &dp.cong.status, qp.attrs.path.tclass));
    if let (Some(aeth), Some((ip, ports))) = (fast_ack, kept) {
        push_ack(dp.tp, &mut dp.io, ip, ports, &bth, aeth);
        return true;
    }
    let path = qp.attrs.path.clone();
    let route = Route {
        port: path.port,
        path: &path,
        src_qpn: qpn,
    };
    if let Some(aeth) = fast_ack
        && let Some((ip, ports)) =
            qp_headers(&mut qp.headers, dp.tp, dp.profile, &dp.cong.status, route)
    {
        push_ack(dp.tp, &mut dp.io, ip, ports, &bth, aeth);
        return true;
    }
    send(
        dp.tp,
        dp.profile,
        &dp.cong.status,
        &mut dp.io,
        route,
        bth,
        ext,
        payload,
    )
    .is_some()
}

/// The BTH of a response to `remote_qpn` with PSN `psn` (opcode ACKNOWLEDGE; `respond` sets
/// the others'): the default P_Key, AckReq and SE clear.
#[inline]
fn ack_bth(remote_qpn: u32, psn: u32) -> BthFields {
    BthFields {
        opcode: BthOpcode::RC_ACKNOWLEDGE,
        pkey: DEFAULT_PKEY,
        dest_qp: remote_qpn & MASK_24,
        psn: psn & MASK_24,
        ..Default::default()
    }
}

/// Queues an ACKNOWLEDGE as its fields, counted as the packet `send` would have built.
fn push_ack(
    tp: &mut Transport,
    io: &mut Io<'_>,
    ip: IpSpec,
    ports: UdpPorts,
    bth: &BthFields,
    aeth: Aeth,
) {
    let wire_len = tp.len_memo.ack_len(&ip, || {
        AckFrame::spec(ip, ports, bth.dest_qp, bth.psn, aeth)
    });
    io.counters.port_xmit_packets += 1;
    io.counters.port_xmit_data += wire_len;
    tp.tx.push_back(Frame::Ack(AckFrame {
        ip,
        ports,
        dest_qp: bth.dest_qp,
        psn: bth.psn,
        aeth,
        wire_len,
    }));
}

/// The AETH for `syndrome` with the QP's current MSN.
pub(crate) fn aeth(dp: &DataPath<'_>, qpn: u32, syndrome: AethSyndrome) -> Option<Aeth> {
    let msn = dp.objs.qps.get(qpn)?.resp.msn;
    Aeth::new(syndrome, msn & MASK_24).ok()
}

/// Sends an ACKNOWLEDGE (ACK, RNR NAK or NAK, by `syndrome`) with PSN `psn`.
pub(crate) fn send_ack(dp: &mut DataPath<'_>, qpn: u32, syndrome: AethSyndrome, psn: u32) -> bool {
    let Some(qp) = dp.objs.qps.get(qpn) else {
        return false;
    };
    let Ok(a) = Aeth::new(syndrome, qp.resp.msn & MASK_24) else {
        return false;
    };
    // What `respond` does for an ACKNOWLEDGE on the in-process link once the QP's headers are
    // built, without building the extension headers it would not use.
    let kept = qp
        .headers
        .filter(|h| ecn_current(h, &dp.cong.status, qp.attrs.path.tclass));
    if let (true, Some((ip, ports))) = (dp.tp.fast_tx && !dp.io.trace.enabled(), kept) {
        let bth = ack_bth(qp.attrs.remote_qpn, psn);
        push_ack(dp.tp, &mut dp.io, ip, ports, &bth, a);
        return true;
    }
    let ext = ExtFields {
        aeth: Some(a),
        ..Default::default()
    };
    respond(dp, qpn, BthOpcode::RC_ACKNOWLEDGE, psn, ext, &[])
}
