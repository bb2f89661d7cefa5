//! UC requests: SEND, SEND with immediate, RDMA WRITE and WRITE with immediate, with no ACK,
//! no NAK and no duplicate handling; a lost packet costs the rest of its message.
//!
//! Owns: the UC PSN rule and what a failed UC request costs (the message is dropped, nothing
//! else). Must not: send anything (UC has no responses) or change the QP state. The data
//! placement is the RC responder's own (`send::send`, `rdma::write`): UC opcodes carry the
//! same headers as their RC twins (IBTA vol. 1 table 38: opcode `0x20 | low five bits`).
//!
//! Sources: rxe `rxe_resp.c` — `check_psn` for `IB_QPT_UC`: a packet whose PSN is not the
//! expected one, or any packet while the message is being dropped (`qp->resp.drop_msg`), is
//! dropped unless it starts a message (FIRST or ONLY), which resynchronises the expected PSN;
//! `check_op_seq` for UC: a packet that does not continue the message in progress drops it;
//! the error states (`RESPST_ERR_RNR`, `_LENGTH`, `_RKEY_VIOLATION`, ...) for a UC QP set
//! `drop_msg` instead of answering. IBTA vol. 1 §9.7.? (UC: "the responder silently drops
//! the rest of the message and waits for the next FIRST or ONLY"). A SEND's receive WQE is
//! only taken at its last packet (`engine::rq::complete`), so an abandoned SEND leaves it at
//! the head of the RQ for the next message, as rxe reuses `qp->resp.wqe`.

use bypass_hw::roce::opcode::{Position, psn_add, psn_diff};
use bypass_hw::roce::{BthOpcode, RocePacket};

use super::state::Msg;
use super::{Fail, Kind, check_op_seq, count, kind, rdma, send};
use crate::transport::state::DataPath;

/// One UC request packet for QP `qpn`.
pub(super) fn receive(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) {
    let psn = pkt.bth().psn();
    let position = pkt.info().position;
    let starts = matches!(position, Position::First | Position::Only);
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return;
    };
    if qp.resp.drop_msg || psn_diff(psn, qp.resp.epsn) != 0 {
        // Whatever was in progress is lost (its WRITE data stays where it was written).
        qp.resp.msg = Msg::Idle;
        if !starts {
            qp.resp.drop_msg = true;
            // The next packet after this one, if the sequence goes on without another loss.
            qp.resp.epsn = psn_add(psn, 1);
            count(dp, qpn, |c| &mut c.out_of_sequence);
            return;
        }
        qp.resp.drop_msg = false;
        qp.resp.epsn = psn;
        count(dp, qpn, |c| &mut c.out_of_sequence);
    }
    // The RC twin of the opcode: same headers, same placement.
    let k = kind(BthOpcode(pkt.opcode().0 & 0x1f));
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return;
    };
    let checked = match k {
        // READ and atomics do not exist on UC (IBTA table 38 has no UC opcode for them).
        Some(k @ (Kind::Send | Kind::Write)) if k == Kind::Send || qp.attrs.rwe => {
            check_op_seq(&qp.resp.msg, position, k)
        }
        _ => Err(Fail::Drop),
    };
    let done = checked.and_then(|()| match k {
        Some(Kind::Send) => send::send(dp, qpn, pkt),
        _ => rdma::write(dp, qpn, pkt),
    });
    if let Err(f) = done {
        if f == Fail::Rnr {
            // No receive WQE: rxe's `RESPST_ERR_RNR` on UC drops the message.
            count(dp, qpn, |c| &mut c.out_of_buffer);
        }
        drop_message(dp, qpn, psn);
    }
}

/// A UC request failed a check: its message is dropped silently (rxe sets `drop_msg`).
fn drop_message(dp: &mut DataPath<'_>, qpn: u32, psn: u32) {
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return;
    };
    qp.resp.msg = Msg::Idle;
    qp.resp.drop_msg = true;
    qp.resp.epsn = psn_add(psn, 1);
    count(dp, qpn, |c| &mut c.rx_discards);
}
