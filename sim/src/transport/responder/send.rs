//! RC SEND, SEND with immediate and SEND with invalidate: the payload into the next receive
//! WQE, packet by packet, and the receive completion at the last packet.
//!
//! Owns: the SEND half of the responder's execute step. Must not: send anything but the ACK
//! (through `advance`), or change the QP state (errors go back to the caller as [`Fail`]).
//!
//! rxe `rxe_resp.c`: `check_resource` takes the head receive WQE for a SEND (none → RNR NAK,
//! class B); `send_data_in` / `copy_data` place the payload (too long → `RESPST_ERR_LENGTH`,
//! a bad lkey → `RESPST_ERR_MALFORMED_WQE`); `do_complete` at the END packet. mlx5 reports the
//! receive side of those errors as LOCAL_LENGTH_ERR and LOCAL_PROT_ERR (`mlx5dv.h`
//! `MLX5_CQE_SYNDROME_*`); the requester gets NAK invalid request (rxe `RESPST_ERR_LENGTH`) and
//! NAK remote operational error (rxe `RESPST_ERR_MALFORMED_WQE`).

use bypass_hw::cqe::CqeOpcode;
use bypass_hw::roce::RocePacket;
use bypass_hw::roce::opcode::Position;
use bypass_hw::syndrome::CqeSyndrome;

use super::state::Msg;
use super::{Fail, advance, check_length, mtu};
use crate::engine::rq::{RecvDone, ScatterError};
use crate::transport::state::DataPath;

/// Maps a scatter failure to the class C error it is.
pub(super) fn scatter_fail(dp: &mut DataPath<'_>, e: ScatterError) -> Fail {
    match e {
        ScatterError::Length => Fail::inv_req_with(CqeSyndrome::LOCAL_LENGTH_ERR),
        ScatterError::Protection => Fail::operational(CqeSyndrome::LOCAL_PROT_ERR, true),
        ScatterError::Fault(f) => {
            dp.io.dma_fault(f);
            Fail::operational(CqeSyndrome::LOCAL_PROT_ERR, true)
        }
    }
}

impl Fail {
    /// NAK invalid request with the consumed receive WQE completing with `cqe`.
    pub(super) fn inv_req_with(cqe: CqeSyndrome) -> Self {
        match Self::inv_req(true) {
            Self::Fatal { nak, .. } => Self::Fatal {
                nak,
                cqe,
                consumed: true,
            },
            other => other,
        }
    }
}

/// One SEND packet (its PSN is the expected one and its opcode continues the sequence).
pub(super) fn send(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) -> Result<(), Fail> {
    let position = pkt.info().position;
    let (wqe, offset) = match position {
        Position::First | Position::Only => match super::peek(dp, qpn) {
            Ok(Some(w)) => (w, 0),
            Ok(None) => return Err(Fail::Rnr),
            Err(f) => {
                dp.io.dma_fault(f);
                return Err(Fail::operational(CqeSyndrome::LOCAL_QP_OP_ERR, false));
            }
        },
        Position::Middle | Position::Last => {
            let Some(qp) = dp.objs.qps.get_mut(qpn) else {
                return Err(Fail::Drop);
            };
            match std::mem::take(&mut qp.resp.msg) {
                Msg::Send { wqe, offset } => (wqe, offset),
                // check_op_seq let only a SEND continuation through.
                _ => return Err(Fail::inv_req(false)),
            }
        }
    };
    if !check_length(pkt, mtu(dp, qpn)) {
        return Err(Fail::inv_req(true));
    }
    let payload = pkt.payload();
    super::scatter(dp, qpn, &wqe, offset, payload).map_err(|e| scatter_fail(dp, e))?;
    let offset = offset + payload.len() as u64;
    let last = matches!(position, Position::Last | Position::Only);
    let Some(qp) = dp.objs.qps.get_mut(qpn) else {
        return Err(Fail::Drop);
    };
    if last {
        qp.resp.msg = Msg::Idle;
        qp.resp.msn = qp.resp.msn.wrapping_add(1);
        let (opcode, imm) = if let Some(imm) = pkt.imm_dt() {
            (CqeOpcode::RESP_SEND_IMM, imm.imm())
        } else if let Some(ieth) = pkt.ieth() {
            (CqeOpcode::RESP_SEND_INV, ieth.rkey())
        } else {
            (CqeOpcode::RESP_SEND, 0)
        };
        let done = RecvDone {
            opcode,
            byte_cnt: u32::try_from(offset).unwrap_or(u32::MAX),
            imm,
            flags_rqpn: qp.attrs.remote_qpn & 0x00ff_ffff,
            se: pkt.bth().se(),
        };
        super::recv_done(dp, qpn, &done);
    } else {
        qp.resp.msg = Msg::Send { wqe, offset };
    }
    advance(dp, qpn, pkt, 1);
    Ok(())
}
