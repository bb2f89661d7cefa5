//! The responder: request packets → receives, RDMA WRITE/READ/atomics, ACK/NAK/RNR.
//!
//! (Being written: see the responder work item.)

use bypass_hw::roce::RocePacket;

use crate::device::Device;

/// Responder state of a QP.
#[derive(Debug, Clone, Default)]
pub struct RespState {}

impl RespState {
    /// State for a QP entering RTR expecting PSN `psn`.
    pub fn new(_psn: u32) -> Self {
        Self {}
    }

    /// The PSN this QP expects next (QUERY_QP `next_rcv_psn`).
    pub fn epsn(&self) -> u32 {
        0
    }
}

/// A request packet for QP `qpn`.
pub(crate) fn handle_request(_dev: &mut Device, _qpn: u32, _pkt: &RocePacket<'_>) {}

/// Completes every outstanding receive WQE of `qpn` with WR_FLUSH_ERR.
pub(crate) fn flush_rq(_dev: &mut Device, _qpn: u32) {}
