//! Completions as the poller hands them out: [`WorkCompletion`] (a plain `Copy` value of the
//! CQE bytes its accessors decode lazily, and the `wr_id`), [`WcStatus`], [`WcOpcode`],
//! [`WcFlags`], and [`decode`], which captures a CQE.
//!
//! Follows rdma-core `providers/mlx5/cq.c`: `handle_good_req` / `handle_responder` (opcode
//! and flag mapping, READ/atomic byte counts, the GRH flag from `flags_rqpn` bits 29:28),
//! `mlx5_handle_error_cqe` (the syndrome of an error CQE; `wqe_counter` names the failed send
//! WQE), over `struct mlx5_cqe64` / `mlx5_err_cqe` (mlx5dv.h).
//!
//! Owns: the completion types, [`decode`] and the CQE size the driver reads. Must not: touch
//! the CQ ring, the consumer index or QP bookkeeping (`poll.rs`), allocate or format except in
//! `Display`/`Debug`.

use bypass_hw::cqe::{Cqe64, CqeOpcode};
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::WqeOpcode;
use zerocopy::IntoBytes;

/// The CQE size the driver creates CQs with and reads (rdma-core's default `cqe_sz`).
pub(crate) const CQE_SIZE: usize = core::mem::size_of::<Cqe64>();
const _: () = assert!(CQE_SIZE == 64);

/// Whether a work request succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// It did.
    Success,
    /// It failed; the syndrome names why and how to fix it (`Display` prints both).
    Error(CqeSyndrome),
}

impl WcStatus {
    /// True for [`WcStatus::Success`].
    pub const fn is_ok(self) -> bool {
        matches!(self, Self::Success)
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Success => f.write_str("SUCCESS"),
            Self::Error(s) => s.fmt(f),
        }
    }
}

/// What completed (ibverbs `enum ibv_wc_opcode`, as rdma-core `cq.c` maps mlx5 opcodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND or SEND_IMM (requester).
    Send,
    /// An RDMA WRITE or WRITE_IMM (requester).
    RdmaWrite,
    /// An RDMA READ (requester).
    RdmaRead,
    /// A compare-and-swap (requester).
    CompSwap,
    /// A fetch-and-add (requester).
    FetchAdd,
    /// A receive consumed by a SEND / SEND_IMM / SEND_INV (responder).
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate (responder).
    RecvRdmaWithImm,
    /// A requester completion of another WQE opcode (the raw mlx5 opcode).
    OtherSend(WqeOpcode),
    /// A CQE of an opcode this driver does not decode (the raw CQE opcode).
    Other(CqeOpcode),
}

impl WcOpcode {
    /// True for receive-side completions.
    pub const fn is_recv(self) -> bool {
        matches!(self, Self::Recv | Self::RecvRdmaWithImm)
    }
}

bitflags::bitflags! {
    /// Completion flags (ibverbs `IBV_WC_*` flags).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u8 {
        /// `imm` holds immediate data.
        const WITH_IMM = 1 << 0;
        /// `imm` holds the invalidated rkey.
        const WITH_INV = 1 << 1;
        /// A GRH (40 bytes) precedes the data in the receive buffer (UD).
        const GRH = 1 << 2;
        /// The solicited-event bit was set.
        const SOLICITED = 1 << 3;
        /// The completion is from the receive queue.
        const RECV = 1 << 4;
    }
}

/// One completion: the `wr_id` and the CQE bytes the accessors decode from (lazily: polling
/// copies two 16-byte blocks and one word, and decodes only what finding the `wr_id` needs).
/// A plain `Copy` value of 48 bytes: nothing in it borrows the CQ.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    wr_id: u64,
    /// CQE bytes 0x20..0x30 as two little-endian words: `srqn_uidx`, `imm_inval_pkey` (bytes
    /// 4..8), the `app` fields, `byte_cnt` (bytes 12..16).
    mid: [u64; 2],
    /// CQE bytes 0x30..0x40 as two little-endian words: `timestamp` (of an error CQE:
    /// `vendor_err_synd` at byte 6, `syndrome` at 7), then `sop_drop_qpn`, `wqe_counter`,
    /// `signature`, `op_own`.
    hi: [u64; 2],
    /// `flags_rqpn` (CQE bytes 0x18..0x1c), big-endian as stored.
    flags_rqpn: u32,
}

/// Byte offsets in the 64-byte CQE (`struct mlx5_cqe64` / `mlx5_err_cqe`, mlx5dv.h).
const OFF_FLAGS_RQPN: usize = 0x18;
const OFF_MID: usize = 0x20;
const OFF_HI: usize = 0x30;

impl WorkCompletion {
    /// The `wr_id` of the work request (for a send: the one `wqe_counter` names, which also
    /// retires the unsignaled WQEs before it).
    #[inline]
    pub const fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The same completion with `wr_id` set (the lazy poll's full decode).
    #[inline(always)]
    pub(crate) const fn with_wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = wr_id;
        self
    }

    /// CQE bytes 0x38..0x40 (`sop_drop_qpn`, `wqe_counter`, `signature`, `op_own`) as one
    /// little-endian word (so a big-endian field in it reads back with `swap_bytes`, on any
    /// host).
    #[inline(always)]
    const fn tail(&self) -> u64 {
        self.hi[1]
    }

    /// Sets the WQE index ([`WorkCompletion::wqe_index`]: `wqe_counter`, CQE bytes
    /// 0x3c..0x3e, big-endian, in `hi[1]` bits 32..48).
    #[inline(always)]
    pub(crate) const fn set_wqe_index(&mut self, index: u16) {
        self.hi[1] = (self.hi[1] & !(0xffff << 32)) | ((index.swap_bytes() as u64) << 32);
    }

    /// CQE bytes 0x36..0x38 (`vendor_err_synd`, `syndrome` of an error CQE), little-endian.
    #[inline(always)]
    const fn err(&self) -> u16 {
        (self.hi[0] >> 48) as u16
    }

    /// `imm_inval_pkey` (host order).
    #[inline(always)]
    const fn imm_raw(&self) -> u32 {
        ((self.mid[0] >> 32) as u32).swap_bytes()
    }

    /// `byte_cnt` (host order).
    #[inline(always)]
    const fn byte_cnt(&self) -> u32 {
        ((self.mid[1] >> 32) as u32).swap_bytes()
    }

    /// `flags_rqpn` (host order).
    #[inline(always)]
    const fn flags_rqpn(&self) -> u32 {
        u32::from_be(self.flags_rqpn)
    }

    #[inline(always)]
    const fn op_own(&self) -> u8 {
        (self.hi[1] >> 56) as u8
    }

    #[inline(always)]
    pub(crate) const fn cqe_opcode(&self) -> CqeOpcode {
        CqeOpcode(self.op_own() >> 4)
    }

    /// `sop_drop_qpn` / `s_wqe_opcode_qpn`: WQE opcode in 31:24, QPN in 23:0.
    #[inline(always)]
    const fn sop_drop_qpn(&self) -> u32 {
        (self.tail() as u32).swap_bytes()
    }

    #[inline(always)]
    const fn wqe_opcode(&self) -> WqeOpcode {
        WqeOpcode((self.sop_drop_qpn() >> 24) as u8)
    }

    /// True for an error CQE (REQ_ERR or RESP_ERR).
    #[inline(always)]
    const fn is_error(&self) -> bool {
        matches!(self.cqe_opcode(), CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR)
    }

    /// Success, or the syndrome.
    pub const fn status(&self) -> WcStatus {
        if self.is_error() {
            WcStatus::Error(CqeSyndrome((self.err() >> 8) as u8))
        } else {
            WcStatus::Success
        }
    }

    /// True when the request succeeded.
    #[inline]
    pub const fn is_ok(&self) -> bool {
        !self.is_error()
    }

    /// What completed (for error completions of sends: the failed WQE's opcode; for receive
    /// errors: [`WcOpcode::Recv`]). rdma-core `cq.c` `handle_good_req` / `handle_responder` /
    /// `mlx5_handle_error_cqe`.
    pub const fn opcode(&self) -> WcOpcode {
        match self.cqe_opcode() {
            CqeOpcode::REQ | CqeOpcode::REQ_ERR => send_opcode(self.wqe_opcode()).0,
            CqeOpcode::RESP_WR_IMM => WcOpcode::RecvRdmaWithImm,
            CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV
            | CqeOpcode::RESP_ERR => WcOpcode::Recv,
            other => WcOpcode::Other(other),
        }
    }

    /// Bytes received (receives), read (READ) or 8 (atomics); 0 otherwise.
    pub const fn byte_len(&self) -> u32 {
        match self.cqe_opcode() {
            CqeOpcode::REQ => match send_opcode(self.wqe_opcode()).0 {
                WcOpcode::RdmaRead => self.byte_cnt(),
                WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
                _ => 0,
            },
            CqeOpcode::RESP_WR_IMM
            | CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV => self.byte_cnt(),
            _ => 0,
        }
    }

    /// Immediate data (with [`WcFlags::WITH_IMM`]) or invalidated rkey ([`WcFlags::WITH_INV`]);
    /// 0 otherwise.
    pub const fn imm(&self) -> u32 {
        match self.cqe_opcode() {
            CqeOpcode::RESP_WR_IMM | CqeOpcode::RESP_SEND_IMM | CqeOpcode::RESP_SEND_INV => {
                self.imm_raw()
            }
            _ => 0,
        }
    }

    /// The local QP.
    #[inline]
    pub const fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }

    /// The remote QP (successful receives; 0 otherwise).
    pub const fn src_qp(&self) -> u32 {
        match self.cqe_opcode() {
            CqeOpcode::RESP_WR_IMM
            | CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV => self.flags_rqpn() & 0x00ff_ffff,
            _ => 0,
        }
    }

    /// The `sl` rdma-core's mlx5 provider reports for a successful receive (`handle_responder`:
    /// `flags_rqpn` bits 27:24); 0 otherwise. On RoCE the low two bits are the received
    /// packet's L3 header type (1 IPv6, 2 IPv4: the kernel's `mlx5_ib` `handle_responder`),
    /// which tells where in the GRH area the destination address sits (UCX's `ud_verbs`
    /// checks it there).
    pub const fn sl(&self) -> u8 {
        match self.cqe_opcode() {
            CqeOpcode::RESP_WR_IMM
            | CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV => ((self.flags_rqpn() >> 24) & 0xf) as u8,
            _ => 0,
        }
    }

    /// The index of the WQE completed: for a send, the CQE's `wqe_counter` (the send WQE's
    /// first WQEBB); for a receive, the receive WQE's index (modulo 2^16) as the driver
    /// matched it (receive queues complete in order; see `poll.rs`). A completion of a QP
    /// no longer attached to the CQ keeps the CQE's `wqe_counter`.
    #[inline]
    pub const fn wqe_index(&self) -> u16 {
        ((self.tail() >> 32) as u16).swap_bytes()
    }

    /// Flags.
    pub const fn flags(&self) -> WcFlags {
        let mut f = 0u8;
        match self.cqe_opcode() {
            CqeOpcode::REQ if send_opcode(self.wqe_opcode()).1 => f |= WcFlags::WITH_IMM.bits(),
            CqeOpcode::RESP_WR_IMM
            | CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV => {
                // rdma-core `handle_responder`.
                f |= WcFlags::RECV.bits();
                match self.cqe_opcode() {
                    CqeOpcode::RESP_WR_IMM | CqeOpcode::RESP_SEND_IMM => {
                        f |= WcFlags::WITH_IMM.bits()
                    }
                    CqeOpcode::RESP_SEND_INV => f |= WcFlags::WITH_INV.bits(),
                    _ => {}
                }
                // `g = (flags_rqpn >> 28) & 3` (rdma-core `handle_responder`).
                if (self.flags_rqpn() >> 28) & 3 != 0 {
                    f |= WcFlags::GRH.bits();
                }
                if self.op_own() & 0x2 != 0 {
                    f |= WcFlags::SOLICITED.bits();
                }
            }
            CqeOpcode::RESP_ERR => f |= WcFlags::RECV.bits(),
            _ => {}
        }
        WcFlags::from_bits_retain(f)
    }

    /// The vendor syndrome of an error completion (0 otherwise).
    pub const fn vendor_err(&self) -> u8 {
        if self.is_error() { self.err() as u8 } else { 0 }
    }
}

impl core::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("imm", &self.imm())
            .field("qpn", &self.qpn())
            .field("src_qp", &self.src_qp())
            .field("wqe_index", &self.wqe_index())
            .field("flags", &self.flags())
            .field("vendor_err", &self.vendor_err())
            .finish()
    }
}

const fn send_opcode(op: WqeOpcode) -> (WcOpcode, bool) {
    // rdma-core `cq.c` `handle_good_req`.
    match op {
        WqeOpcode::RDMA_WRITE_IMM => (WcOpcode::RdmaWrite, true),
        WqeOpcode::RDMA_WRITE => (WcOpcode::RdmaWrite, false),
        WqeOpcode::SEND_IMM => (WcOpcode::Send, true),
        WqeOpcode::SEND | WqeOpcode::SEND_INVAL => (WcOpcode::Send, false),
        WqeOpcode::RDMA_READ => (WcOpcode::RdmaRead, false),
        WqeOpcode::ATOMIC_CS => (WcOpcode::CompSwap, false),
        WqeOpcode::ATOMIC_FA => (WcOpcode::FetchAdd, false),
        other => (WcOpcode::OtherSend(other), false),
    }
}

/// Captures a CQE, with `wr_id` left 0 (see [`crate::poll::CqPoller`] for the lookup).
#[inline]
pub fn decode(cqe: &Cqe64) -> WorkCompletion {
    let b = cqe.as_bytes();
    // Constant ranges inside the 64-byte CQE: the `get`s never fail and compile to plain loads.
    let w64 = |o: usize| {
        b.get(o..o + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_le_bytes)
    };
    let block = |o: usize| [w64(o), w64(o + 8)];
    let flags_rqpn = b
        .get(OFF_FLAGS_RQPN..OFF_FLAGS_RQPN + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_ne_bytes);
    WorkCompletion {
        wr_id: 0,
        mid: block(OFF_MID),
        hi: block(OFF_HI),
        flags_rqpn,
    }
}
