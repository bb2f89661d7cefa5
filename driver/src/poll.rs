//! Completion polling: the owner-bit rule over the CQ ring, CQEs decoded into a plain `Copy`
//! [`WorkCompletion`], the `wr_id` looked up in the QP's per-slot array, the consumer index
//! published in the CQ doorbell record once per batch.
//!
//! Follows rdma-core `providers/mlx5/cq.c`: `get_sw_cqe` (owner bit vs `ci & nent`, opcode not
//! INVALID), `udma_from_device_barrier` right after the ownership check, `mlx5_parse_cqe` /
//! `handle_good_req` / `handle_responder` (opcode and flag mapping, READ/atomic byte counts,
//! GRH flag from `flags_rqpn` bits 29:28), `mlx5_handle_error_cqe` (syndrome of the error
//! CQE; `wqe_counter` names the failed send WQE), `update_cons_index` (`dbrec[SET_CI] =
//! ci & 0xffffff` after the batch).
//!
//! Owns: [`WorkCompletion`], [`WcStatus`], [`WcOpcode`], [`WcFlags`], [`QpTable`] (which QPs
//! report to a CQ) and [`CqPoller`]. Must not: allocate, lock, make syscalls or format on the
//! polling path (the consumer flag shared with QP attach/detach and [`QpTable::clean`] is only
//! ever tried, never waited for), or arm the CQ (that is `cq.rs`).

use core::ptr::NonNull;
use std::sync::Arc;

use bypass_hw::cqe::{Cqe64, CqeOpcode};
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::WqeOpcode;
use zerocopy::IntoBytes;

use crate::barrier::{udma_from_device_barrier, udma_to_device_barrier};
use crate::poll_guard::FastStep;
pub use crate::qp_table::QpTable;
use crate::qp_table::{Held, HeldRef};
use crate::wq::{RingPtr, WqShared};

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

    /// True for a receive-queue completion (a responder CQE or RESP_ERR), which completes
    /// the receive queue's oldest WQE.
    #[inline(always)]
    pub(crate) const fn completes_a_receive(&self) -> bool {
        self.is_recv_cqe()
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

    /// True for a receive-queue CQE (responder opcodes and RESP_ERR): the RQ's oldest WQE
    /// completed.
    #[inline(always)]
    const fn is_recv_cqe(&self) -> bool {
        // Bits 1..=4 (RESP_WR_IMM, RESP_SEND, RESP_SEND_IMM, RESP_SEND_INV) and 14 (RESP_ERR).
        (0x401e_u32 >> (self.op_own() >> 4)) & 1 != 0
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

    /// The index of the WQE completed: for a send, the CQE's `wqe_counter` (the send WQE's
    /// first WQEBB); for a receive, the receive WQE's index (modulo 2^16) as the driver
    /// matched it (receive queues complete in order; see `retire_on`). A completion of a QP
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

/// Captures a CQE, with `wr_id` left 0 (see [`CqPoller`] for the lookup).
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

/// Fills the completion's `wr_id` and retires its WQE(s) in its QP's bookkeeping (nothing if
/// no QP of that number reports to the CQ whose consumer side `held` holds).
#[inline(always)]
pub(crate) fn retire(held: HeldRef<'_>, wc: &mut WorkCompletion) {
    if let Some(w) = held.find(wc.qpn()) {
        wc.wr_id = retire_on(w, wc);
    }
}

/// Retires the WQE(s) `wc` completes in QP bookkeeping `w` and returns the `wr_id`: a receive
/// CQE the RQ's oldest WQE, a send CQE every SQ WQE up to the one `wqe_counter` names.
///
/// A receive CQE's [`WorkCompletion::wqe_index`] becomes the index of the receive WQE it
/// completes (the RQ's tail before this one, modulo 2^16): a receive queue completes in
/// order, so that is the WQE, whatever the CQE's `wqe_counter` holds (rdma-core
/// `providers/mlx5/cq.c` `handle_responder`, from `mlx5_parse_cqe`, takes `wq->tail` for a
/// non-SRQ receive and does not read `wqe_counter`). The safe verbs layer matches a receive
/// completion to its buffers by it.
#[inline(always)]
pub(crate) fn retire_on(w: &WqShared, wc: &mut WorkCompletion) -> u64 {
    // A successful requester CQE (opcode 0: the top nibble of the word is 0) first, the
    // common case, with one comparison; then the table test of the other opcodes.
    if wc.tail() >> 60 == 0 || !wc.is_recv_cqe() {
        w.complete_send(wc.wqe_index())
    } else {
        // The caller holds the CQ's consumer side (`retire`'s `Held`): nobody else moves the
        // tail meanwhile.
        wc.set_wqe_index(w.rq_tail() as u16);
        w.complete_recv()
    }
}

/// [`bypass_hw::cqe::sw_owns`] (rdma-core `cq.c` `get_sw_cqe`: the opcode is not
/// `MLX5_CQE_INVALID` and the owner bit equals the consumer index's lap parity `odd_lap`) as
/// one comparison: `op_own ^ odd_lap` rotated right by one puts the owner mismatch in bit 7 and
/// the opcode in bits 3..7, so the CQE is software's exactly when the result is below `0x78`
/// (bit 7 clear, and the opcode bits not all ones). `sw_owns_fast_agrees_with_sw_owns` checks
/// every byte and parity.
#[inline(always)]
fn sw_owns_fast(op_own: u8, odd_lap: bool) -> bool {
    (op_own ^ u8::from(odd_lap)).rotate_right(1) < SW_OWNS_BELOW
}

/// See [`sw_owns_fast`]: the rotated `op_own ^ parity` of a software-owned CQE is below this.
pub(crate) const SW_OWNS_BELOW: u8 = 0x78;

/// Why [`CqPoller::new`] refused a ring: each names what does not fit and the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CqGeometryError {
    /// A CQE size other than 64 bytes.
    #[error(
        "a CQ with {0}-byte CQEs: the poller reads 64-byte CQEs only (its hot path shifts by a \
         constant 6; the driver creates every CQ with cqe_sz 64): create the CQ with 64-byte CQEs"
    )]
    CqeSize(usize),
    /// `nent` is not a power of two.
    #[error("a CQ of {0} entries: the owner-bit rule needs a power of two: round it up")]
    Entries(u32),
    /// The ring is shorter than `nent` CQEs.
    #[error("a CQ ring of {ring} bytes cannot hold {nent} 64-byte CQEs: allocate nent * 64 bytes")]
    RingTooSmall {
        /// The ring's length in bytes.
        ring: usize,
        /// The entries asked for.
        nent: u32,
    },
    /// The doorbell record is shorter than 8 bytes or its CI word is not 4-byte aligned.
    #[error(
        "a CQ doorbell record of {len} bytes at a misaligned or short place: give it 8 bytes, \
         4-byte aligned (rdma-core allocates 64)"
    )]
    Doorbell {
        /// The doorbell record's length in bytes.
        len: usize,
    },
}

/// The CQE size the poller reads (rdma-core's default `cqe_sz`; the driver creates no other).
pub(crate) const CQE_SIZE: usize = 64;

/// The consumer side of a CQ ring: consumer index, the owner-bit rule, the doorbell record.
#[derive(Debug)]
pub struct CqPoller {
    ring: RingPtr,
    nent: u32,
    dbr: RingPtr,
    pub(crate) table: Arc<QpTable>,
    // Precomputed in `new`, which checks the geometry once so that the hot path needs no
    // per-access bounds checks: the first CQE and the doorbell record's CI word (4-byte
    // aligned, checked).
    cqe0: NonNull<u8>,
    dbr_ci: NonNull<u32>,
    /// `nent - 1`.
    mask: u32,
    /// What the cold path of `start_poll` took (see `poll_guard.rs`): written and read only
    /// inside `start_poll`, which holds `&mut self`.
    pub(crate) taken: core::cell::Cell<crate::poll_guard::Taken>,
}

// SAFETY: the pointers are addresses inside `ring` and `dbr` (which are `Send` and `Sync`, see
// `RingPtr`); what crosses threads is the right to poll, exercised through `&mut self` and the
// table's consumer flag.
unsafe impl Send for CqPoller {}
// SAFETY: as for `Send`; `&self` methods only read ring bytes with volatile loads (what they
// change in the table, they change through its `Held`, which one thread at a time has), except
// through `taken`, a `Cell` that only `start_poll` touches, under its `&mut self` (so never
// from two threads at once).
unsafe impl Sync for CqPoller {}

impl CqPoller {
    /// A poller over `ring` (`nent` CQEs of `cqe_size` bytes: 64, the only size the driver
    /// creates) with its doorbell record at the start of `dbr` (8 bytes: CI word, arm word).
    ///
    /// Errors ([`CqGeometryError`]): another CQE size, `nent` not a power of two, `nent * 64`
    /// beyond the ring, or a doorbell record shorter than 8 bytes or not 4-byte aligned.
    pub fn new(
        ring: RingPtr,
        nent: u32,
        cqe_size: usize,
        dbr: RingPtr,
        table: Arc<QpTable>,
    ) -> Result<Self, CqGeometryError> {
        if cqe_size != CQE_SIZE {
            return Err(CqGeometryError::CqeSize(cqe_size));
        }
        if !nent.is_power_of_two() {
            return Err(CqGeometryError::Entries(nent));
        }
        let fits = (nent as usize)
            .checked_mul(CQE_SIZE)
            .is_some_and(|b| b <= ring.len());
        if !fits {
            return Err(CqGeometryError::RingTooSmall {
                ring: ring.len(),
                nent,
            });
        }
        let dbr_ci = dbr.base().cast::<u32>();
        if dbr.len() < 8 || !dbr_ci.as_ptr().is_aligned() {
            return Err(CqGeometryError::Doorbell { len: dbr.len() });
        }
        let cqe0 = ring.base();
        Ok(Self {
            ring,
            nent,
            dbr,
            table,
            cqe0,
            dbr_ci,
            mask: nent - 1,
            taken: core::cell::Cell::new(crate::poll_guard::Taken {
                wr_id: 0,
                opcode: None,
            }),
        })
    }

    /// The consumer index (CQEs consumed, 24 bits used by the device): the low 32 bits of
    /// [`CqPoller::consumed`].
    pub fn consumer_index(&self) -> u32 {
        self.table.consumed() as u32
    }

    /// CQEs consumed since the CQ was created (free-running, 64 bits): the count the `*_seq`
    /// poll forms number completions by (see [`QpTable::consumed`]).
    pub fn consumed(&self) -> u64 {
        self.table.consumed()
    }

    /// Entries in the ring.
    pub fn nent(&self) -> u32 {
        self.nent
    }

    /// The doorbell record memory (CI word at 0, arm word at 4).
    pub fn dbr(&self) -> &RingPtr {
        &self.dbr
    }

    /// The ring memory.
    pub fn ring(&self) -> &RingPtr {
        &self.ring
    }

    /// Byte offset of the CQE of consumer index `ci`.
    #[inline(always)]
    fn cqe_off(&self, ci: u32) -> usize {
        ((ci & self.mask) as usize) * CQE_SIZE
    }

    /// The address of the CQE of consumer index `ci` (inside the ring, whatever `ci`).
    #[inline(always)]
    pub(crate) fn cqe_ptr(&self, ci: u64) -> NonNull<Cqe64> {
        let slot = (ci & u64::from(self.mask)) as usize;
        // SAFETY: `slot < nent` (`mask == nent - 1`, `nent` a power of two) and
        // `nent * 64 <= ring.len()` (checked in `new`), so the 64 bytes at `cqe0 + slot * 64`
        // are inside the ring, which stays mapped while `self` lives.
        unsafe { self.cqe0.add(slot * CQE_SIZE) }.cast()
    }

    /// The CQE's `op_own` byte, read with a volatile load (the device writes it concurrently).
    #[inline(always)]
    pub(crate) fn op_own(p: NonNull<Cqe64>) -> u8 {
        // SAFETY: `p` is a CQE inside the ring (`cqe_ptr`); byte 63 is inside it.
        unsafe { p.cast::<u8>().add(63).read_volatile() }
    }

    /// The lap parity the owner bit of the CQE at `ci` must have to be software's (0 or 1).
    #[inline(always)]
    pub(crate) fn parity(&self, ci: u64) -> u8 {
        u8::from(ci & u64::from(self.nent) != 0)
    }

    /// The CQE at the consumer index if software owns it (rdma-core `get_sw_cqe`), after the
    /// `udma_from_device_barrier` that keeps its other fields from being read early.
    #[inline(always)]
    pub(crate) fn next_cqe(&self, ci: u64) -> Option<&Cqe64> {
        let p = self.cqe_ptr(ci);
        if !sw_owns_fast(Self::op_own(p), ci & u64::from(self.nent) != 0) {
            return None;
        }
        udma_from_device_barrier();
        // SAFETY: inside the ring (`cqe_ptr`); `Cqe64` has alignment 1 and accepts any bytes.
        // Software owns this CQE (checked above) and the device does not write it again until
        // the consumer index moves past it and the ring laps, which needs `publish_ci` after
        // this reference is gone (it lives only inside one poll step).
        Some(unsafe { p.as_ref() })
    }

    /// Moves the consumer count to `ci` and publishes the consumer index in the doorbell
    /// record (rdma-core `update_cons_index`), the consumer side held by `held`.
    #[inline(always)]
    pub(crate) fn publish_ci(&self, held: HeldRef<'_>, ci: u64) {
        held.set_ci(ci);
        // Keep the CQE reads above from being moved after the store that gives the entries
        // back to the device (a compiler fence on x86-64, whose loads are not reordered with
        // later stores; `dmb oshst` on aarch64).
        udma_to_device_barrier();
        // SAFETY: the CI word is the first 4 bytes of the doorbell record (at least 8 bytes,
        // 4-byte aligned: checked in `new`); volatile: the device reads it concurrently.
        unsafe {
            self.dbr_ci
                .write_volatile((ci as u32 & 0x00ff_ffff).to_be())
        };
    }

    /// Polls up to `out.len()` completions into `out`; returns how many. Writes the doorbell
    /// record once, after the batch. Returns 0 without waiting while a QP destroy or reset is
    /// cleaning this CQ.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.poll_counted(out).0
    }

    /// [`CqPoller::poll`] that also returns the sequence number of `out[0]`: the consumer
    /// count ([`CqPoller::consumed`]) once its CQE is consumed, taken while the poll holds the
    /// consumer side; `out[i]` has that plus `i` (meaningless when it returns 0 completions).
    #[inline]
    pub fn poll_seq(&mut self, out: &mut [WorkCompletion]) -> (usize, u64) {
        let (n, ci) = self.poll_counted(out);
        (n, ci.wrapping_add(1))
    }

    /// The body of [`CqPoller::poll`]: how many, and the consumer index of the first.
    #[inline(always)]
    fn poll_counted(&mut self, out: &mut [WorkCompletion]) -> (usize, u64) {
        let this: &CqPoller = self;
        let Some(held) = this.table.try_acquire() else {
            return (0, 0);
        };
        let first = held.get().ci();
        let mut ci = first;
        let mut n = 0;
        for slot in out.iter_mut() {
            let wc = match this.take_fast(held.get(), ci) {
                // SAFETY: `take_fast` found the CQE at `p` software's and passed the read
                // barrier; it stays so until the consumer index is published past it, below;
                // inside the ring, and `Cqe64` has alignment 1 and accepts any bytes.
                Ok((wr_id, p)) => decode(unsafe { p.as_ref() }).with_wr_id(wr_id),
                Err(false) => break,
                Err(true) => match this.take_general(held.get(), ci) {
                    Some(wc) => wc,
                    None => break,
                },
            };
            *slot = wc;
            ci = ci.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            this.publish_ci(held.get(), ci);
        }
        held.release();
        (n, first)
    }

    /// The general step at `ci` (the side held by `held`): the owner-bit rule, the whole
    /// decode, the table lookup and retire; for the CQEs the fast step leaves (other opcodes,
    /// other QPs).
    #[cold]
    #[inline(never)]
    fn take_general(&self, held: HeldRef<'_>, ci: u64) -> Option<WorkCompletion> {
        self.general_step(held, ci)
    }

    /// The body of [`CqPoller::take_general`], inlined into each cold path that takes it
    /// (the poll guard's too: a call layer more cost its cache-filling polls a dozen
    /// instructions).
    #[inline(always)]
    pub(crate) fn general_step(&self, held: HeldRef<'_>, ci: u64) -> Option<WorkCompletion> {
        let cqe = self.next_cqe(ci)?;
        let mut wc = decode(cqe);
        retire(held, &mut wc);
        Some(wc)
    }

    /// Polls one completion.
    #[inline]
    pub fn poll_one(&mut self) -> Option<WorkCompletion> {
        self.poll_one_in(|wc, _| wc, Self::poll_one_held)
    }

    /// [`CqPoller::poll_one`] with the completion's sequence number: the consumer count
    /// ([`CqPoller::consumed`]) its CQE brought the CQ to, taken while the poll holds the
    /// consumer side, so that no QP destroy or reset (whose clean needs that side) falls
    /// between taking the CQE and numbering it. See [`QpTable::consumed`] for what the number
    /// proves.
    #[inline]
    pub fn poll_one_seq(&mut self) -> Option<(WorkCompletion, u64)> {
        self.poll_one_in(|wc, ci| (wc, ci.wrapping_add(1)), Self::poll_one_held_seq)
    }

    /// The body of [`CqPoller::poll_one`] and [`CqPoller::poll_one_seq`]: `fast` makes the
    /// result of a CQE the fast step took (from the completion and its consumer index), `slow`
    /// is the cold path, called in tail position (so the caller keeps no stack frame for it),
    /// only with the consumer side held (its contract).
    #[inline(always)]
    fn poll_one_in<T>(
        &mut self,
        fast: impl FnOnce(WorkCompletion, u64) -> T,
        slow: unsafe fn(&Self, u64) -> Option<T>,
    ) -> Option<T> {
        let this: &CqPoller = self;
        match this.acquire_fast(&this.table) {
            FastStep::Taken { held, ci, wr_id, p } => {
                // SAFETY: `take_fast` found the CQE at `p` (consumer index `ci`) software's and
                // passed the read barrier; it stays so until `publish_ci` below; inside the
                // ring (`cqe_ptr`), and `Cqe64` has alignment 1 and accepts any bytes.
                let wc = decode(unsafe { p.as_ref() }).with_wr_id(wr_id);
                this.publish_ci(held.get(), ci.wrapping_add(1));
                held.release();
                Some(fast(wc, ci))
            }
            FastStep::Nothing => None,
            // SAFETY: `Slow`: `acquire_fast` took the consumer side and kept it for this call
            // (`Held::keep`); no other `Held` of it exists.
            FastStep::Slow { ci } => unsafe { slow(this, ci) },
        }
    }

    /// [`CqPoller::poll_one`] of a software-owned CQE the fast step did not take (another
    /// opcode, another QP), with the flag held: the general decode and retire, then the
    /// consumer index published and the flag released. Out of line and in tail position, so
    /// `poll_one` keeps no frame for it.
    ///
    /// # Safety
    /// This thread holds the table's consumer side, its `Held` kept (`Held::keep`) for this
    /// call, and no other `Held` of it exists (a `FastStep::Slow`).
    #[cold]
    #[inline(never)]
    unsafe fn poll_one_held(&self, ci: u64) -> Option<WorkCompletion> {
        // SAFETY: the caller's contract above.
        let held = unsafe { Held::resume(&self.table) };
        let r = self.take_general(held.get(), ci);
        if r.is_some() {
            self.publish_ci(held.get(), ci.wrapping_add(1));
        }
        held.release();
        r
    }

    /// [`CqPoller::poll_one_held`] for [`CqPoller::poll_one_seq`]: with the sequence number.
    ///
    /// # Safety
    /// As [`CqPoller::poll_one_held`].
    #[cold]
    #[inline(never)]
    unsafe fn poll_one_held_seq(&self, ci: u64) -> Option<(WorkCompletion, u64)> {
        let seq = ci.wrapping_add(1);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.poll_one_held(ci) }.map(|wc| (wc, seq))
    }

    /// Polls one completion and returns the CQE's 64 bytes too (research access; copies the
    /// CQE, so not for the hot path).
    pub fn poll_raw(&mut self) -> Option<(WorkCompletion, [u8; 64])> {
        self.poll_raw_seq().map(|(wc, raw, _)| (wc, raw))
    }

    /// [`CqPoller::poll_raw`] with the completion's sequence number (as
    /// [`CqPoller::poll_one_seq`]).
    pub fn poll_raw_seq(&mut self) -> Option<(WorkCompletion, [u8; 64], u64)> {
        self.poll_with(|cqe| -> [u8; 64] { zerocopy::transmute!(*cqe) })
    }

    /// One completion, `f` applied to its CQE, and its sequence number.
    #[inline(always)]
    fn poll_with<R>(&mut self, f: impl FnOnce(&Cqe64) -> R) -> Option<(WorkCompletion, R, u64)> {
        let held = self.table.try_acquire()?;
        let ci = held.get().ci();
        let Some(cqe) = self.next_cqe(ci) else {
            held.release();
            return None;
        };
        let r = f(cqe);
        let mut wc = decode(cqe);
        retire(held.get(), &mut wc);
        let seq = ci.wrapping_add(1);
        self.publish_ci(held.get(), seq);
        held.release();
        Some((wc, r, seq))
    }

    /// Removes the unpolled CQEs of QP `qpn` from this CQ (see [`QpTable::clean`]).
    pub fn clean(&self, qpn: u32) -> u32 {
        self.table.clean(&self.ring, self.nent, &self.dbr, qpn)
    }

    /// The raw 64 bytes of the CQE at consumer index `ci` (owned by software or not), read with
    /// volatile loads (research access).
    pub fn cqe_bytes(&self, ci: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        self.ring.read(self.cqe_off(ci), &mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wq::tests::TestRing;
    use crate::wq::{RqRing, SqRing};
    use bypass_hw::cqe::{CQE_INVALID_OP_OWN, ErrCqe, MLX5_CQE_OWNER_MASK, make_op_own, sw_owns};
    use zerocopy::{FromZeros, IntoBytes};

    struct Fixture {
        _cq: TestRing,
        _dbr: TestRing,
        poller: CqPoller,
        table: Arc<QpTable>,
    }

    fn fixture(nent: u32) -> Fixture {
        let mut cq = TestRing::new(64 * nent as usize);
        let mut dbr = TestRing::new(64);
        let ring = cq.ring();
        for k in 0..nent as usize {
            ring.write(k * 64 + 63, &[CQE_INVALID_OP_OWN | 1]);
        }
        let table = Arc::new(QpTable::new());
        let poller = CqPoller::new(ring, nent, 64, dbr.ring(), table.clone()).unwrap();
        Fixture {
            _cq: cq,
            _dbr: dbr,
            poller,
            table,
        }
    }

    #[test]
    fn a_ring_the_poller_cannot_read_is_refused_with_what_does_not_fit() {
        let mut cq = TestRing::new(64 * 8);
        let mut dbr = TestRing::new(64);
        let table = Arc::new(QpTable::new());
        let refused =
            |ring, nent, size, dbr| CqPoller::new(ring, nent, size, dbr, table.clone()).err();
        assert_eq!(
            refused(cq.ring(), 8, 128, dbr.ring()),
            Some(CqGeometryError::CqeSize(128))
        );
        assert_eq!(
            refused(cq.ring(), 6, 64, dbr.ring()),
            Some(CqGeometryError::Entries(6))
        );
        assert_eq!(
            refused(cq.ring(), 16, 64, dbr.ring()),
            Some(CqGeometryError::RingTooSmall {
                ring: 512,
                nent: 16
            })
        );
        let mut short = [0u32; 1];
        let base = std::ptr::NonNull::new(short.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `short` outlives the ring, which the refused poller never reads.
        let short = unsafe { RingPtr::new(base, 4) }.unwrap();
        assert_eq!(
            refused(cq.ring(), 8, 64, short),
            Some(CqGeometryError::Doorbell { len: 4 })
        );
        assert!(refused(cq.ring(), 8, 64, dbr.ring()).is_none());
    }

    fn put(f: &Fixture, index: u32, cqe: &Cqe64) {
        f.poller
            .ring
            .write((index & (f.poller.nent - 1)) as usize * 64, cqe.as_bytes());
    }

    fn req(qpn: u32, counter: u16, op: WqeOpcode, owner: bool) -> Cqe64 {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set((u32::from(op.0) << 24) | qpn);
        c.wqe_counter.set(counter);
        c.byte_cnt.set(20);
        c.op_own = make_op_own(CqeOpcode::REQ, 0, false, owner);
        c
    }

    #[test]
    fn owner_bit_rule_and_ci_publication() {
        let mut f = fixture(4);
        let mut out = [decode(&Cqe64::new_zeroed()); 4];
        assert_eq!(f.poller.poll(&mut out), 0, "a fresh ring is all invalid");
        // Lap 0: owner 0. Three CQEs.
        for i in 0..3 {
            put(&f, i, &req(5, i as u16, WqeOpcode::RDMA_READ, false));
        }
        assert_eq!(f.poller.poll(&mut out), 3);
        assert_eq!(out[0].opcode(), WcOpcode::RdmaRead);
        assert_eq!(out[0].byte_len(), 20);
        let mut ci = [0u8; 4];
        f.poller.dbr.read(0, &mut ci);
        assert_eq!(u32::from_be_bytes(ci), 3);
        // Slot 3 of lap 0, then slot 0 of lap 1 (owner 1).
        put(&f, 3, &req(5, 3, WqeOpcode::SEND, false));
        put(&f, 4, &req(5, 4, WqeOpcode::SEND, false));
        assert_eq!(
            f.poller.poll(&mut out),
            1,
            "a lap-0 owner bit at ci 4 is stale"
        );
        put(&f, 4, &req(5, 4, WqeOpcode::SEND_IMM, true));
        let wc = f.poller.poll_one().unwrap();
        assert_eq!(
            (wc.opcode(), wc.flags()),
            (WcOpcode::Send, WcFlags::WITH_IMM)
        );
        assert_eq!(f.poller.consumer_index(), 5);
    }

    #[test]
    fn wr_ids_come_from_the_qp_slot_arrays() {
        let mut f = fixture(8);
        let sh = Arc::new(WqShared::new(9, 8, 4));
        f.table.attach(sh.clone());
        let mut sqm = TestRing::new(8 * 64);
        let mut sq = SqRing::new(sqm.ring());
        sq.commit(&sh, 0, 2, 0xaa);
        sq.commit(&sh, 2, 1, 0xbb);
        let mut rqm = TestRing::new(4 * 64);
        let mut rq = RqRing::new(rqm.ring(), 64);
        rq.commit(&sh, 0x11);
        rq.commit(&sh, 0x22);
        put(&f, 0, &req(9, 2, WqeOpcode::RDMA_WRITE, false));
        let mut r = Cqe64::new_zeroed();
        r.sop_drop_qpn.set(9);
        r.flags_rqpn.set((2 << 28) | 0x77);
        r.byte_cnt.set(100);
        r.imm_inval_pkey.set(0x1234);
        r.op_own = make_op_own(CqeOpcode::RESP_SEND_IMM, 0, true, false);
        put(&f, 1, &r);
        let wc = f.poller.poll_one().unwrap();
        assert_eq!((wc.wr_id(), wc.opcode()), (0xbb, WcOpcode::RdmaWrite));
        assert_eq!(
            sh.sq_tail(),
            3,
            "the unsignaled WQE before it is retired too"
        );
        let wc = f.poller.poll_one().unwrap();
        assert_eq!(wc.wr_id(), 0x11);
        assert_eq!((wc.byte_len(), wc.src_qp(), wc.imm()), (100, 0x77, 0x1234));
        assert!(
            wc.flags()
                .contains(WcFlags::WITH_IMM | WcFlags::GRH | WcFlags::SOLICITED | WcFlags::RECV)
        );
        f.table.detach(9);
        put(&f, 2, &req(9, 2, WqeOpcode::RDMA_WRITE, false));
        assert_eq!(
            f.poller.poll_one().unwrap().wr_id,
            0,
            "a detached QP's wr_id is unknown"
        );
    }

    #[test]
    fn a_receive_completion_names_the_receive_wqe_it_completed_whatever_wqe_counter_holds() {
        let mut f = fixture(8);
        let sh = Arc::new(WqShared::new(9, 8, 4));
        f.table.attach(sh.clone());
        let mut rqm = TestRing::new(4 * 64);
        let mut rq = RqRing::new(rqm.ring(), 64);
        for k in 0..4 {
            rq.commit(&sh, 0x10 + k);
        }
        // Receive CQEs whose `wqe_counter` holds junk (rdma-core does not read it for an RQ),
        // one of them a flushed receive (RESP_ERR).
        let recv = |counter: u16, op: CqeOpcode| {
            let mut r = Cqe64::new_zeroed();
            r.sop_drop_qpn.set(9);
            r.wqe_counter.set(counter);
            r.op_own = make_op_own(op, 0, false, false);
            r
        };
        put(&f, 0, &recv(0xabcd, CqeOpcode::RESP_SEND));
        put(&f, 1, &recv(0x7777, CqeOpcode::RESP_SEND));
        put(&f, 2, &recv(0x0003, CqeOpcode::RESP_SEND));
        put(&f, 3, &recv(0xffff, CqeOpcode::RESP_ERR));
        let (wc, _) = f.poller.poll_one_seq().unwrap();
        assert_eq!((wc.wr_id(), wc.wqe_index()), (0x10, 0));
        let (wc, _, _) = f.poller.poll_raw_seq().unwrap();
        assert_eq!((wc.wr_id(), wc.wqe_index()), (0x11, 1));
        {
            let mut g = f.poller.start_poll().unwrap();
            assert_eq!((g.wr_id(), g.wqe_index()), (0x12, 2));
            assert_eq!(g.completion().wqe_index(), 2);
            assert!(g.next_poll());
            assert_eq!((g.wr_id(), g.wqe_index(), g.is_ok()), (0x13, 3, false));
        }
        assert_eq!(sh.rq_tail(), 4);
        // A send completion keeps its `wqe_counter`.
        put(&f, 4, &req(9, 0x55, WqeOpcode::SEND, false));
        let mut out = [decode(&Cqe64::new_zeroed()); 2];
        assert_eq!(f.poller.poll(&mut out), 1);
        assert_eq!(out[0].wqe_index(), 0x55);
    }

    #[test]
    fn sw_owns_fast_agrees_with_sw_owns() {
        assert_eq!(
            MLX5_CQE_OWNER_MASK, 1,
            "the rotation assumes the owner bit is bit 0"
        );
        for op_own in 0..=255u8 {
            for ci in [0u32, 8] {
                assert_eq!(
                    sw_owns_fast(op_own, ci & 8 != 0),
                    sw_owns(op_own, ci, 8),
                    "op_own {op_own:#x}, ci {ci}"
                );
            }
        }
    }

    #[test]
    fn clean_drops_one_qps_cqes_across_the_wrap_and_keeps_the_rest_in_order() {
        let mut f = fixture(4);
        // Consume two, so the four pending CQEs are at 2, 3 (lap 0) and 4, 5 (lap 1, owner 1).
        put(&f, 0, &req(5, 0, WqeOpcode::SEND, false));
        put(&f, 1, &req(5, 1, WqeOpcode::SEND, false));
        assert_eq!(f.poller.poll(&mut [decode(&Cqe64::new_zeroed()); 2]), 2);
        put(&f, 2, &req(9, 0, WqeOpcode::SEND, false));
        put(&f, 3, &req(5, 2, WqeOpcode::SEND, false));
        put(&f, 4, &req(9, 1, WqeOpcode::SEND, true));
        // Slot 5 (index 1 of lap 1) still holds lap 0's CQE: not produced yet.
        assert_eq!(f.poller.clean(9), 2);
        assert_eq!(f.poller.consumer_index(), 4);
        let mut ci = [0u8; 4];
        f.poller.dbr.read(0, &mut ci);
        assert_eq!(
            u32::from_be_bytes(ci),
            4,
            "the new consumer index is published"
        );
        let wc = f.poller.poll_one().unwrap();
        assert_eq!(
            (wc.qpn(), wc.wqe_index()),
            (5, 2),
            "moved to slot 4 with lap 1's owner bit"
        );
        assert!(f.poller.poll_one().is_none());
        assert_eq!(f.poller.clean(9), 0, "nothing left to drop");
    }

    #[test]
    fn every_poll_form_numbers_its_completion_with_the_consumer_count_which_passes_2_pow_32_and_only_grows()
     {
        let mut f = fixture(4);
        // Start three CQEs short of 2^32: the count must not wrap with the ring arithmetic.
        let start: u64 = (1 << 32) - 3;
        let held = f.table.try_acquire().unwrap();
        held.get().set_ci(start);
        held.release();
        // QP 5 is attached (its send completions take the fast path once the first has filled
        // the last-QP cache), its WQE at index i posted with wr_id 0x100 + i.
        let sh = Arc::new(WqShared::new(5, 8, 4));
        f.table.attach(sh.clone());
        let mut sqm = TestRing::new(8 * 64);
        let mut sq = SqRing::new(sqm.ring());
        for i in 0..8u32 {
            let idx = (start as u32).wrapping_add(i);
            sq.commit(&sh, idx, 1, 0x100 + u64::from(idx & 7));
        }
        let wr = |ci: u64| 0x100 + (ci & 7);
        // A SEND CQE of `qpn` at consumer index `ci`, with the owner bit of its lap.
        let at = |f: &Fixture, ci: u64, qpn: u32| {
            put(
                f,
                ci as u32,
                &req(qpn, ci as u16, WqeOpcode::SEND, ci & 4 != 0),
            );
        };
        at(&f, start, 5);
        let (wc, seq) = f.poller.poll_one_seq().unwrap();
        assert_eq!((wc.wqe_index(), seq), (start as u16, start + 1));
        assert_eq!(wc.wr_id(), wr(start));
        assert_eq!(
            f.poller.consumed(),
            seq,
            "the number is the count after the CQE"
        );

        at(&f, start + 1, 5);
        let (wc, raw, seq) = f.poller.poll_raw_seq().unwrap();
        assert_eq!((wc.wqe_index(), seq), ((start + 1) as u16, start + 2));
        assert_eq!(wc.wr_id(), wr(start + 1));
        assert_eq!(raw[63] >> 4, CqeOpcode::REQ.0);

        // The extended poll across 2^32.
        at(&f, start + 2, 5);
        at(&f, start + 3, 5);
        {
            let mut g = f.poller.start_poll().unwrap();
            assert_eq!((g.seq(), g.wr_id()), (start + 3, wr(start + 2)));
            assert!(g.next_poll());
            assert_eq!((g.seq(), g.wqe_index()), (start + 4, (start + 3) as u16));
            assert!(!g.next_poll());
        }
        assert_eq!(f.poller.consumed(), (1 << 32) + 1);
        assert_eq!(f.poller.consumer_index(), 1, "the low 32 bits");
        let mut dbr = [0u8; 4];
        f.poller.dbr.read(0, &mut dbr);
        assert_eq!(
            u32::from_be_bytes(dbr),
            1,
            "the doorbell record takes the low 24 bits"
        );

        // A clean drops QP 9's CQE: the count moves up by the dropped CQE, never down.
        at(&f, start + 4, 9);
        at(&f, start + 5, 5);
        assert_eq!(f.poller.clean(9), 1);
        assert_eq!(f.poller.consumed(), start + 5);
        assert_eq!(f.poller.clean(9), 0);
        assert_eq!(
            f.poller.consumed(),
            start + 5,
            "nothing dropped, nothing counted"
        );

        // The batch poll: `out[0]` has the returned number, `out[i]` that plus `i`.
        at(&f, start + 6, 5);
        let mut out = [decode(&Cqe64::new_zeroed()); 4];
        assert_eq!(f.poller.poll_seq(&mut out), (2, start + 6));
        let got: Vec<_> = out[..2].iter().map(WorkCompletion::wqe_index).collect();
        assert_eq!(got, [(start + 5) as u16, (start + 6) as u16]);
        assert_eq!(f.poller.consumed(), start + 7);
        assert!(f.poller.poll_one_seq().is_none());
        assert_eq!(f.poller.poll_seq(&mut out).0, 0);
        assert_eq!(f.poller.consumed(), start + 7);
    }

    #[test]
    fn error_cqes_carry_the_syndrome_and_the_failed_wqe() {
        let mut f = fixture(4);
        let sh = Arc::new(WqShared::new(3, 4, 0));
        f.table.attach(sh.clone());
        let mut sqm = TestRing::new(4 * 64);
        let mut sq = SqRing::new(sqm.ring());
        sq.commit(&sh, 0, 1, 0x42);
        let mut e = ErrCqe::new_zeroed();
        e.syndrome = CqeSyndrome::LOCAL_PROT_ERR.0;
        e.vendor_err_synd = 0x7;
        e.s_wqe_opcode_qpn
            .set((u32::from(WqeOpcode::SEND.0) << 24) | 3);
        e.wqe_counter.set(0);
        e.op_own = make_op_own(CqeOpcode::REQ_ERR, 0, false, false);
        let c: Cqe64 = zerocopy::transmute!(e);
        put(&f, 0, &c);
        let (wc, raw) = f.poller.poll_raw().unwrap();
        assert_eq!(wc.status(), WcStatus::Error(CqeSyndrome::LOCAL_PROT_ERR));
        assert!(
            wc.status()
                .to_string()
                .starts_with("LOCAL_PROT_ERR (0x4): a local SGE's lkey")
        );
        assert_eq!(
            (wc.wr_id(), wc.opcode(), wc.vendor_err()),
            (0x42, WcOpcode::Send, 7)
        );
        assert_eq!(raw, *c.as_bytes());
        assert_eq!(f.poller.cqe_bytes(0), raw);
    }

    /// Fills a fixture with the same mix of CQEs: sends and receives of QP 9, a send of QP 25
    /// (same home slot as 9 in a 16-slot table: found by probing), an error CQE, and a CQE of
    /// a QPN nobody attached. Returns the QPs' bookkeeping.
    fn mixed(f: &Fixture) -> (Arc<WqShared>, Arc<WqShared>, Vec<(TestRing, TestRing)>) {
        let (a, b) = (
            Arc::new(WqShared::new(9, 8, 4)),
            Arc::new(WqShared::new(25, 8, 4)),
        );
        f.table.attach(a.clone());
        f.table.attach(b.clone());
        let mut keep = Vec::new();
        for (sh, id) in [(&a, 0xa0u64), (&b, 0xb0)] {
            let (mut sqm, mut rqm) = (TestRing::new(8 * 64), TestRing::new(4 * 64));
            let mut sq = SqRing::new(sqm.ring());
            sq.commit(sh, 0, 1, id);
            sq.commit(sh, 1, 2, id + 1);
            let mut rq = RqRing::new(rqm.ring(), 64);
            rq.commit(sh, id + 2);
            keep.push((sqm, rqm));
        }
        put(f, 0, &req(9, 0, WqeOpcode::RDMA_WRITE, false));
        put(f, 1, &req(25, 1, WqeOpcode::SEND_IMM, false));
        let mut r = Cqe64::new_zeroed();
        r.sop_drop_qpn.set(9);
        r.flags_rqpn.set((2 << 28) | 0x77);
        r.byte_cnt.set(100);
        r.imm_inval_pkey.set(0x1234);
        r.op_own = make_op_own(CqeOpcode::RESP_WR_IMM, 0, true, false);
        put(f, 2, &r);
        let mut e = ErrCqe::new_zeroed();
        e.syndrome = CqeSyndrome::REMOTE_ACCESS_ERR.0;
        e.vendor_err_synd = 0x88;
        e.s_wqe_opcode_qpn
            .set((u32::from(WqeOpcode::RDMA_READ.0) << 24) | 9);
        e.wqe_counter.set(1);
        e.op_own = make_op_own(CqeOpcode::REQ_ERR, 0, false, false);
        put(f, 3, &zerocopy::transmute!(e));
        put(f, 4, &req(0x77, 3, WqeOpcode::SEND, false));
        (a, b, keep)
    }

    /// Every completion `poll_one` takes from `f`, oldest first: the reference the other
    /// poll styles are compared with.
    fn poll_one_all(f: &mut Fixture) -> Vec<WorkCompletion> {
        let mut all = Vec::new();
        while let Some(wc) = f.poller.poll_one() {
            all.push(wc);
        }
        all
    }

    /// Asserts that each work queue of `x` has the same SQ and RQ tails as its twin in `y`
    /// (two [`mixed`] fixtures polled in different ways freed the same slots).
    fn assert_same_tails(x: [&Arc<WqShared>; 2], y: [&Arc<WqShared>; 2]) {
        for (x, y) in x.into_iter().zip(y) {
            assert_eq!((x.sq_tail(), x.rq_tail()), (y.sq_tail(), y.rq_tail()));
        }
    }

    #[test]
    fn the_extended_poll_reads_the_same_completions_as_poll_one() {
        let (mut fa, mut fb) = (fixture(8), fixture(8));
        let (a1, b1, _k1) = mixed(&fa);
        let (a2, b2, _k2) = mixed(&fb);
        let want = poll_one_all(&mut fa);
        assert_eq!(want.len(), 5);
        let mut got = Vec::new();
        {
            let mut p = fb.poller.start_poll().expect("five CQEs are ready");
            loop {
                let wc = p.completion();
                // Each lazy accessor reads what the full decode does.
                assert_eq!(
                    (p.wr_id(), p.status(), p.is_ok(), p.opcode(), p.byte_len()),
                    (
                        wc.wr_id(),
                        wc.status(),
                        wc.is_ok(),
                        wc.opcode(),
                        wc.byte_len()
                    )
                );
                assert_eq!(
                    (p.imm(), p.qpn(), p.src_qp(), p.flags(), p.wqe_index()),
                    (wc.imm(), wc.qpn(), wc.src_qp(), wc.flags(), wc.wqe_index())
                );
                assert_eq!(p.vendor_err(), wc.vendor_err());
                got.push(wc);
                if !p.next_poll() {
                    break;
                }
            }
            assert_eq!(
                p.wr_id(),
                got[4].wr_id(),
                "an empty next_poll keeps the last one"
            );
            p.end_poll();
        }
        assert_eq!(got, want);
        assert_eq!(
            got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
            [0xa0, 0xb1, 0xa2, 0xa1, 0],
            "the colliding QP is found by probing; an unknown QPN has no wr_id"
        );
        assert_same_tails([&a1, &b1], [&a2, &b2]);
        let (mut ca, mut cb) = ([0u8; 4], [0u8; 4]);
        fa.poller.dbr.read(0, &mut ca);
        fb.poller.dbr.read(0, &mut cb);
        assert_eq!((u32::from_be_bytes(cb), fb.poller.consumer_index()), (5, 5));
        assert_eq!(ca, cb);
        assert!(fb.poller.start_poll().is_none(), "nothing more");
    }

    #[test]
    fn the_batch_poll_reads_the_same_completions_as_poll_one() {
        let (mut fa, mut fb) = (fixture(8), fixture(8));
        let (a1, b1, _k1) = mixed(&fa);
        let (a2, b2, _k2) = mixed(&fb);
        let want = poll_one_all(&mut fa);
        let mut out = [decode(&Cqe64::new_zeroed()); 3];
        let mut got = Vec::new();
        loop {
            let n = fb.poller.poll(&mut out);
            got.extend_from_slice(&out[..n]);
            if n < out.len() {
                break;
            }
        }
        assert_eq!(got, want, "fast and general steps mixed in one batch");
        assert_eq!(
            got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
            [0xa0, 0xb1, 0xa2, 0xa1, 0]
        );
        assert_same_tails([&a1, &b1], [&a2, &b2]);
        assert_eq!(fb.poller.consumer_index(), 5);
    }

    #[test]
    fn the_extended_poll_publishes_the_consumer_index_when_it_ends() {
        let mut f = fixture(4);
        put(&f, 0, &req(5, 0, WqeOpcode::SEND, false));
        put(&f, 1, &req(5, 1, WqeOpcode::SEND, false));
        {
            let mut p = f.poller.start_poll().unwrap();
            assert!(p.next_poll());
            assert!(!p.next_poll());
        }
        assert_eq!(f.poller.consumer_index(), 2);
        // One CQE, guard dropped without next_poll: the index moves by one.
        put(&f, 2, &req(5, 2, WqeOpcode::SEND, false));
        assert_eq!(f.poller.start_poll().unwrap().wqe_index(), 2);
        assert_eq!(f.poller.consumer_index(), 3);
        // While a QP destroy or reset holds the consumer side, the poll takes nothing.
        put(&f, 3, &req(5, 3, WqeOpcode::SEND, false));
        let held = f.table.try_acquire().unwrap();
        assert!(f.poller.start_poll().is_none());
        held.release();
        assert_eq!(f.poller.start_poll().unwrap().wqe_index(), 3);
    }
}
