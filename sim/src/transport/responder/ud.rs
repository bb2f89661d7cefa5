//! UD receive: Q_Key check, the 40-byte GRH at the head of the receive buffer, the payload
//! after it, and the receive completion. UD never acknowledges and never NAKs.
//!
//! Owns: the UD half of the responder. Must not: send packets.
//!
//! The GRH area (40 bytes) for RoCEv2, as mlx5 hardware fills it and as the consumers of it
//! read it: over IPv6 it is the IPv6 header as received; over IPv4 the first 20 bytes are
//! undefined (we write zeros, as rxe does) and the last 20 are the IPv4 header as received.
//! Sources: rxe `rxe_resp.c` `execute` (`union rdma_network_hdr`: `reserved[20]` then
//! `roce4grh`, or the IPv6 header), the kernel's `ib_get_rdma_header_version` /
//! rdma-core `verbs.c` `get_grh_header_version` (they look for an IPv4 header at byte 20).
//! The CQE's `flags_rqpn` says a GRH is present (bits 29:28, `g`) and which L3 header the
//! packet had (bits 25:24: `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6` 1, `_IPV4` 2), as the kernel's
//! `mlx5_ib` `handle_responder` decodes it; the low 24 bits are the source QPN from the DETH.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::cqe::CqeOpcode;
use bypass_hw::roce::RocePacket;
use bypass_hw::roce::ip::{IPV4_HDR_LEN, IpSpec, UDP_HDR_LEN};
use bypass_hw::syndrome::CqeSyndrome;

use super::{count, mtu};
use crate::engine::rq::{RecvDone, ScatterError};
use crate::transport::state::DataPath;

/// Bytes of the GRH area at the head of a UD receive buffer.
pub(crate) const GRH_LEN: usize = 40;
/// `flags_rqpn` bits 29:28 = 1: a GRH was scattered (kernel `handle_responder`: `g`).
const CQE_GRH_PRESENT: u32 = 1 << 28;
/// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6` (kernel `include/linux/mlx5/device.h`).
const L3_IPV6: u32 = 0x1;
/// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4`.
const L3_IPV4: u32 = 0x2;

/// The GRH area for `pkt` and its L3 type, rebuilt from the header fields the parser kept
/// (the parser accepts no IPv4 options or IPv6 extension headers, so the rebuilt header is
/// the received one byte for byte).
fn grh(pkt: &RocePacket<'_>) -> Option<([u8; GRH_LEN], u32)> {
    let mut hdr = [0u8; GRH_LEN + UDP_HDR_LEN];
    pkt.ip()
        .write_ip_udp(pkt.ports(), pkt.udp_payload().len(), &mut hdr)
        .ok()?;
    let mut out = [0u8; GRH_LEN];
    match pkt.ip() {
        IpSpec::V4(_) => {
            out[GRH_LEN - IPV4_HDR_LEN..].copy_from_slice(hdr.get(..IPV4_HDR_LEN)?);
            Some((out, L3_IPV4))
        }
        IpSpec::V6(_) => {
            out.copy_from_slice(hdr.get(..GRH_LEN)?);
            Some((out, L3_IPV6))
        }
    }
}

/// A UD SEND (with immediate) for QP `qpn`.
pub(super) fn receive(dp: &mut DataPath<'_>, qpn: u32, pkt: &RocePacket<'_>) {
    let Some(qp) = dp.objs.qps.get(qpn) else {
        return;
    };
    let Some(deth) = pkt.deth() else {
        count(dp, qpn, |c| &mut c.rx_discards);
        return;
    };
    // IBTA C10-15 / rxe `check_keys`: a datagram whose Q_Key differs from the QP's is dropped.
    let payload = pkt.payload();
    if deth.qkey() != qp.attrs.q_key || payload.len() > mtu(dp, qpn) as usize {
        count(dp, qpn, |c| &mut c.rx_discards);
        return;
    }
    let Some((grh, l3)) = grh(pkt) else {
        count(dp, qpn, |c| &mut c.rx_discards);
        return;
    };
    let wqe = match super::peek(dp, qpn) {
        Ok(Some(w)) => w,
        Ok(None) => {
            // No receive posted: the datagram is lost (class D, no RNR on UD).
            count(dp, qpn, |c| &mut c.out_of_buffer);
            return;
        }
        Err(f) => {
            dp.io.dma_fault(f);
            return;
        }
    };
    // The whole datagram is checked against the WQE first, so nothing is written when it
    // cannot fit.
    let placed = if GRH_LEN as u64 + payload.len() as u64 > wqe.capacity() {
        Err(ScatterError::Length)
    } else {
        super::scatter(dp, qpn, &wqe, 0, &grh)
            .and_then(|()| super::scatter(dp, qpn, &wqe, GRH_LEN as u64, payload))
    };
    match placed {
        Ok(()) => {
            let imm = pkt.imm_dt().map(|i| i.imm());
            let done = RecvDone {
                opcode: if imm.is_some() {
                    CqeOpcode::RESP_SEND_IMM
                } else {
                    CqeOpcode::RESP_SEND
                },
                byte_cnt: (GRH_LEN + payload.len()) as u32,
                imm: imm.unwrap_or(0),
                flags_rqpn: CQE_GRH_PRESENT | (l3 << 24) | (deth.src_qp() & 0x00ff_ffff),
                se: pkt.bth().se(),
            };
            super::recv_done(dp, qpn, &done);
        }
        Err(e) => {
            // A completion error moves the QP to ERR (IBTA §10.8.3.3), flushing the rest.
            let syndrome = match e {
                ScatterError::Length => {
                    count(dp, qpn, |c| &mut c.resp_local_length_error);
                    CqeSyndrome::LOCAL_LENGTH_ERR
                }
                ScatterError::Protection => CqeSyndrome::LOCAL_PROT_ERR,
                ScatterError::Fault(f) => {
                    dp.io.dma_fault(f);
                    CqeSyndrome::LOCAL_PROT_ERR
                }
            };
            super::recv_error(dp, qpn, syndrome);
            dp.set_qp_state(qpn, QpState::Err);
        }
    }
}
