//! The responder's per-QP state: the expected PSN, the MSN, the message in progress and the
//! responder resources kept for READ and atomic replay.
//!
//! Owns: [`RespState`], [`Msg`], [`Resource`]. Must not: act on them (that is
//! `transport::responder`).

use bypass_hw::roce::opcode::MASK_24;

use crate::engine::wqe::RecvWqe;

/// The message a QP is in the middle of receiving (rxe `qp->resp.opcode` plus the WQE/RETH
/// state it carries between packets).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Between messages.
    #[default]
    Idle,
    /// A SEND past its FIRST packet: the receive WQE it fills and the bytes placed so far.
    Send {
        /// The WQE (at the head of the RQ).
        wqe: RecvWqe,
        /// Bytes of the message received.
        offset: u64,
    },
    /// An RDMA WRITE past its FIRST packet.
    Write {
        /// Remote virtual address of the message's first byte.
        va: u64,
        /// Its rkey.
        rkey: u32,
        /// RETH DMA length.
        total: u32,
        /// Bytes written so far.
        done: u32,
    },
}

/// Responder state of a QP.
#[derive(Debug, Clone, Default)]
pub struct RespState {
    /// Expected PSN (24 bits).
    pub(crate) epsn: u32,
    /// Message sequence number: messages completed (24 bits on the wire).
    pub(crate) msn: u32,
    /// The message in progress.
    pub(crate) msg: Msg,
    /// A PSN sequence error NAK was sent and the sequence has not recovered yet.
    pub(crate) nak_sent: bool,
    /// UC: the message in progress is being dropped until a FIRST or ONLY packet (rxe
    /// `qp->resp.drop_msg`).
    pub(crate) drop_msg: bool,
    /// Responder resources (`1 << log_rra_max` at most), a ring: READ requests and atomic
    /// results kept for duplicates (rxe `qp->resp.resources`).
    pub(crate) res: Vec<Resource>,
    /// The next ring slot to use.
    pub(crate) res_next: usize,
    /// COMM_EST was reported.
    pub(crate) comm_est: bool,
    /// A DMA fault on the doorbell record was reported (so a polling flush does not repeat it).
    pub(crate) dbr_fault: bool,
    /// The SRQ WQE this QP has taken for the message it receives (its index), until the
    /// message completes: an SRQ WQE leaves the SRQ when a message starts, so no other QP
    /// takes it (QPs with their own RQ keep `None`).
    pub(crate) srq_wqe: Option<u16>,
}

impl RespState {
    /// State for a QP entering RTR expecting PSN `psn`.
    pub fn new(psn: u32) -> Self {
        Self {
            epsn: psn & MASK_24,
            ..Self::default()
        }
    }

    /// The PSN this QP expects next (QUERY_QP `next_rcv_psn`).
    pub fn epsn(&self) -> u32 {
        self.epsn
    }

    /// Forgets the message in progress (the QP entered ERR).
    pub(crate) fn forget_message(&mut self) {
        self.msg = Msg::Idle;
    }
}

/// A responder resource (rxe `struct resp_res`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resource {
    /// An RDMA READ request.
    Read {
        /// PSN of the request (first response).
        first_psn: u32,
        /// PSN of the last response.
        last_psn: u32,
        /// Requested virtual address.
        va: u64,
        /// Requested rkey.
        rkey: u32,
        /// Requested length.
        len: u32,
        /// Device transmit count after its last response was queued.
        tx_end: u64,
    },
    /// An atomic, with the value it returned.
    Atomic {
        /// PSN of the request.
        psn: u32,
        /// The original remote value.
        orig: u64,
        /// MSN its ACK carried.
        msn: u32,
        /// Device transmit count after its ACK was queued.
        tx_end: u64,
    },
}

impl Resource {
    pub(crate) fn tx_end(&self) -> u64 {
        match self {
            Self::Read { tx_end, .. } | Self::Atomic { tx_end, .. } => *tx_end,
        }
    }
}
