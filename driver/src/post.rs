//! The send and receive work requests and the code that writes them straight into the SQ/RQ
//! rings: ctrl, remote-address, atomic, datagram, data and inline segments as `bypass_hw::wqe`
//! layouts, the WQE's size in DS/WQEBBs, the space check, and the receive list terminator.
//!
//! Follows rdma-core `providers/mlx5/qp.c` `_mlx5_post_send` (segment order per opcode, the
//! `fm_ce_se` flags, `set_data_inl_seg`, atomics with one 8-byte data segment, UD's datagram
//! segment after ctrl) and `mlx5_post_recv` (data segments then an `MLX5_INVALID_LKEY`
//! terminator when the list is shorter than the stride).
//!
//! Owns: [`SendWr`], [`RecvWr`], [`Sge`], [`SendOp`], [`SendFlags`], [`Payload`], [`UdDest`],
//! [`PostError`], and the ring writers. Must not: ring doorbells or touch barriers (that is
//! [`crate::qp::Qp::post_send`]), allocate, lock or format: this is the data path.

use bypass_hw::wqe::{
    AtomicSeg, Av, CtrlSeg, DataSeg, DgramParams, InlineSeg, MAX_WQE_DS, MLX5_ATOMIC_SIZE,
    MLX5_EXTENDED_UD_AV, MLX5_INLINE_SEG, MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_FENCE,
    MLX5_WQE_CTRL_SOLICITED, RaddrSeg, WqeOpcode, inline_ds,
};
use zerocopy::IntoBytes;
use zerocopy::byteorder::big_endian::{U16, U32};

use crate::wq::{RingPtr, RqRing, SqRing, WqShared};

/// One gather/scatter entry: `length` bytes at `addr` (an address inside a registered region)
/// under local key `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Address inside the memory region (the region's start address plus an offset).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// A remote buffer: an address inside the peer's memory region and its rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// What a send work request does (RC: all of them; UD: `Send` and `SendImm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: the payload lands in the peer's next receive WQE.
    Send,
    /// SEND with immediate data (delivered in the peer's receive completion).
    SendImm {
        /// Immediate data (host order; it travels big-endian).
        imm: u32,
    },
    /// RDMA WRITE of the payload to `remote`.
    Write {
        /// Destination.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate data (consumes a receive WQE at the peer).
    WriteImm {
        /// Destination.
        remote: RemoteAddr,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from `remote` into the payload's SGEs.
    Read {
        /// Source.
        remote: RemoteAddr,
    },
    /// 8-byte compare-and-swap at `remote`; the original value lands in the single 8-byte SGE.
    CompareSwap {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch-and-add at `remote`; the original value lands in the single 8-byte SGE.
    FetchAdd {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
}

impl SendOp {
    /// For SEND, SEND_IMM, RDMA WRITE, WRITE_IMM and READ: the remote address (RDMA ones) and
    /// the immediate (0 without one); `None` for atomics.
    #[inline(always)]
    pub const fn rc_plain(&self) -> Option<(Option<RemoteAddr>, u32)> {
        match *self {
            Self::Send => Some((None, 0)),
            Self::SendImm { imm } => Some((None, imm)),
            Self::Write { remote } | Self::Read { remote } => Some((Some(remote), 0)),
            Self::WriteImm { remote, imm } => Some((Some(remote), imm)),
            Self::CompareSwap { .. } | Self::FetchAdd { .. } => None,
        }
    }

    /// The mlx5 opcode (rdma-core `mlx5_ib_opcode[]`).
    pub const fn opcode(&self) -> WqeOpcode {
        match self {
            Self::Send => WqeOpcode::SEND,
            Self::SendImm { .. } => WqeOpcode::SEND_IMM,
            Self::Write { .. } => WqeOpcode::RDMA_WRITE,
            Self::WriteImm { .. } => WqeOpcode::RDMA_WRITE_IMM,
            Self::Read { .. } => WqeOpcode::RDMA_READ,
            Self::CompareSwap { .. } => WqeOpcode::ATOMIC_CS,
            Self::FetchAdd { .. } => WqeOpcode::ATOMIC_FA,
        }
    }
}

bitflags::bitflags! {
    /// Per-request flags (ibverbs `IBV_SEND_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u8 {
        /// Generate a completion (`MLX5_WQE_CTRL_CQ_UPDATE`); implied when the QP has
        /// `sq_sig_all`.
        const SIGNALED = 1 << 0;
        /// Set the solicited-event bit (`MLX5_WQE_CTRL_SOLICITED`).
        const SOLICITED = 1 << 1;
        /// Wait for earlier RDMA READs and atomics before this WQE (`MLX5_WQE_CTRL_FENCE`).
        const FENCE = 1 << 2;
    }
}

/// Where a send's data comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Gathered by the NIC's DMA from registered memory (the only copy).
    Sges(&'a [Sge]),
    /// Copied into the WQE (up to the QP's `max_inline_data`; SEND, SEND_IMM, WRITE,
    /// WRITE_IMM only). No registration needed.
    Inline(&'a [u8]),
}

/// The destination of a UD send: the address vector (`mlx5_wqe_av`) with the remote QPN and
/// Q_Key filled in, ready to copy into the datagram segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    av: Av,
}

impl UdDest {
    /// A RoCE v2 destination: remote QP `dqpn` with Q_Key `qkey`, at `rgid` (IPv6 or
    /// IPv4-mapped), through remote MAC `rmac`, from local GID index `sgid_index`.
    ///
    /// Encoded as rdma-core `mlx5_create_ah` (`providers/mlx5/verbs.c`): extended AV,
    /// `grh_gid_fl = 1 << 30 | sgid_index << 20 | flow_label`, hop limit, traffic class, rgid,
    /// rmac; `mlx5dv_set_dgram_seg` puts `dqpn | MLX5_EXTENDED_UD_AV` and the Q_Key.
    pub fn roce(
        dqpn: u32,
        qkey: u32,
        rgid: [u8; 16],
        rmac: [u8; 6],
        sgid_index: u8,
        hop_limit: u8,
    ) -> Self {
        let av = Av::new(&DgramParams {
            key: u64::from(qkey) << 32,
            dqp_dct: dqpn & 0x00ff_ffff,
            ext: true,
            hop_limit,
            rmac,
            grh_gid_fl: (1 << 30) | (u32::from(sgid_index) << 20),
            rgid,
            ..Default::default()
        });
        // `dqp_dct` is masked to 24 bits above, so `Av::new` cannot refuse it.
        let av = av.unwrap_or_else(|_| zerocopy::FromZeros::new_zeroed());
        Self { av }
    }

    /// The address vector as the WQE will carry it.
    pub fn av(&self) -> &Av {
        &self.av
    }

    /// The destination QPN.
    pub fn dqpn(&self) -> u32 {
        self.av.dqpn()
    }
}

/// A send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// The caller's id, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The data.
    pub payload: Payload<'a>,
    /// Flags.
    pub flags: SendFlags,
    /// UD only: where to send.
    pub ud: Option<&'a UdDest>,
}

impl<'a> SendWr<'a> {
    /// A signaled request of `op` gathering `sges`.
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> Self {
        Self {
            wr_id,
            op,
            payload: Payload::Sges(sges),
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }
}

/// A receive work request: scatter the incoming message over `sges`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// The caller's id, returned in the completion.
    pub wr_id: u64,
    /// Where the data lands (for UD, the first 40 bytes receive the GRH).
    pub sges: &'a [Sge],
}

/// Why a work request was not posted. Nothing of a refused request reaches the ring; requests
/// of the same list before it were posted (and their doorbell rung).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The send queue has no room for the WQE.
    #[error(
        "QP {qpn:#x}: send queue full (the WQE needs {need} WQEBBs, {free} are free): poll the send CQ to retire completed WQEs, signal at least one WQE in every SQ-depth of unsignaled ones, or create the QP with a deeper SQ"
    )]
    SqFull {
        /// QP number.
        qpn: u32,
        /// WQEBBs the WQE needs.
        need: u32,
        /// WQEBBs free.
        free: u32,
    },
    /// The receive queue is full.
    #[error(
        "QP {qpn:#x}: receive queue full ({depth} receives outstanding): poll the receive CQ, or create the QP with a deeper RQ"
    )]
    RqFull {
        /// QP number.
        qpn: u32,
        /// The RQ depth.
        depth: u32,
    },
    /// More SGEs than the queue allows.
    #[error(
        "QP {qpn:#x}: {got} SGEs but the {queue} queue takes at most {max}: split the request or create the QP with a larger max_{queue}_sge"
    )]
    TooManySges {
        /// QP number.
        qpn: u32,
        /// "send" or "recv".
        queue: &'static str,
        /// SGEs in the request.
        got: usize,
        /// The limit.
        max: usize,
    },
    /// Inline data longer than the QP's `max_inline_data`.
    #[error(
        "QP {qpn:#x}: {len} bytes of inline data but the QP allows {max}: send from registered memory (SGEs) or create the QP with a larger max_inline_data"
    )]
    InlineTooLong {
        /// QP number.
        qpn: u32,
        /// Bytes asked.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The operation is not valid on this QP or with this payload.
    #[error("QP {qpn:#x}: {opcode} {why}")]
    BadRequest {
        /// QP number.
        qpn: u32,
        /// The opcode.
        opcode: WqeOpcode,
        /// What is wrong and how to fix it.
        why: &'static str,
    },
    /// The QP is not in a state that accepts this post.
    #[error("QP {qpn:#x} is in {state}: {fix}")]
    BadState {
        /// QP number.
        qpn: u32,
        /// The state name.
        state: &'static str,
        /// What to do.
        fix: &'static str,
    },
}

/// [`PostError::BadRequest`]'s reason for an RDMA or atomic request on a UD QP.
pub(crate) const UD_RDMA_WHY: &str =
    "is not available on a UD QP (UD carries SEND and SEND_IMM only): use an RC QP";

/// The limits a QP's send path checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendLimits {
    /// QP number (for the ctrl segment and errors).
    pub qpn: u32,
    /// UD (datagram segment, SEND only) or RC.
    pub ud: bool,
    /// Max SGEs per send.
    pub max_sge: usize,
    /// Max inline bytes.
    pub max_inline: usize,
    /// Every WQE signaled (`sq_sig_all`).
    pub sig_all: bool,
    /// `(qpn & 0xffffff) << 8`, the ctrl segment's `qpn_ds` without the DS count.
    pub qpn_shifted: u32,
    /// The ctrl segment's `fm_ce_se` for each value of [`SendFlags`] (`sig_all` folded in),
    /// so the data path looks it up instead of testing each flag.
    pub fm_ce_se: [u8; 8],
    /// The most SGEs the fast path takes: `max_sge`, but at most [`FAST_MAX_SGE`], so that its
    /// WQE (ctrl, raddr, one segment per SGE) always fits in `MAX_WQE_DS` without a check.
    /// Private: only [`SendLimits::new`] sets it.
    fast_max_sge: usize,
}

/// The most SGEs a WQE with ctrl and raddr segments holds: `MAX_WQE_DS - 2`.
pub const FAST_MAX_SGE: usize = MAX_WQE_DS as usize - 2;

impl SendLimits {
    /// The limits of QP `qpn` (precomputes [`SendLimits::qpn_shifted`]).
    pub const fn new(qpn: u32, ud: bool, max_sge: usize, max_inline: usize, sig_all: bool) -> Self {
        Self {
            qpn,
            ud,
            max_sge,
            max_inline,
            sig_all,
            qpn_shifted: (qpn & 0x00ff_ffff) << 8,
            fast_max_sge: if max_sge < FAST_MAX_SGE {
                max_sge
            } else {
                FAST_MAX_SGE
            },
            fm_ce_se: [
                fm_ce_se_of(sig_all, 0),
                fm_ce_se_of(sig_all, 1),
                fm_ce_se_of(sig_all, 2),
                fm_ce_se_of(sig_all, 3),
                fm_ce_se_of(sig_all, 4),
                fm_ce_se_of(sig_all, 5),
                fm_ce_se_of(sig_all, 6),
                fm_ce_se_of(sig_all, 7),
            ],
        }
    }

    /// `fm_ce_se` of the ctrl segment for `flags` (rdma-core `_mlx5_post_send`).
    #[inline(always)]
    pub const fn fm_ce_se(&self, flags: SendFlags) -> u8 {
        self.fm_ce_se[(flags.bits() & 7) as usize]
    }
}

/// `fm_ce_se` for the [`SendFlags`] bits `flags` (rdma-core `_mlx5_post_send`: CQ_UPDATE when
/// signaled or `sq_sig_all`, SOLICITED, FENCE).
const fn fm_ce_se_of(sig_all: bool, flags: u8) -> u8 {
    let mut f = 0u8;
    if sig_all || flags & SendFlags::SIGNALED.bits() != 0 {
        f |= MLX5_WQE_CTRL_CQ_UPDATE;
    }
    if flags & SendFlags::SOLICITED.bits() != 0 {
        f |= MLX5_WQE_CTRL_SOLICITED;
    }
    if flags & SendFlags::FENCE.bits() != 0 {
        f |= MLX5_WQE_CTRL_FENCE;
    }
    f
}

/// A WQE written to the ring: its size and the first 8 bytes of its ctrl segment (the
/// doorbell value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// WQEBB index of its first block (the producer counter, wrapping).
    pub start: u32,
    /// Where its first block is in the ring: `start & (wqebbs in the ring - 1)`.
    pub slot: u32,
    /// True when the WQE continues at the start of the ring (its blocks are not contiguous).
    pub wraps: bool,
    /// Size in 16-byte units.
    pub ds: u8,
    /// Size in WQEBBs.
    pub wqebbs: u32,
    /// `ctrl.opmod_idx_opcode << 32 | ctrl.qpn_ds` (what the 8-byte doorbell carries).
    pub doorbell: u64,
    /// True when the payload was inline (rdma-core prefers BlueFlame then).
    pub inline: bool,
}

/// Where one WQE's bytes go: straight through a pointer when the whole WQE lies before the
/// ring's end (checked once, here), else through the ring's masked, wrapping writes (rdma-core:
/// a WQE that crosses `sq.qend` continues at the SQ start).
struct WqeOut<'r> {
    ring: &'r RingPtr,
    base: usize,
    /// Bytes writable at `ring.base() + base` without wrapping; 0 when the WQE wraps.
    room: usize,
}

impl<'r> WqeOut<'r> {
    #[inline(always)]
    fn new(sq: &'r SqRing, base: usize, wqebbs: u32) -> Self {
        let len = (wqebbs as usize) << 6;
        let base = base & (sq.ring.len() - 1);
        let room = if base + len <= sq.ring.len() { len } else { 0 };
        Self {
            ring: &sq.ring,
            base,
            room,
        }
    }

    /// Writes `bytes` at WQE offset `off`.
    #[inline(always)]
    fn put(&self, off: usize, bytes: &[u8]) {
        if off + bytes.len() <= self.room {
            // SAFETY: `base + off + len <= base + room <= ring.len()` (checked in `new` and
            // here): inside the ring, which is valid for writes (`RingPtr::new`); the slots
            // belong to this poster (the space check passed) and the device does not read
            // them before the doorbell; `bytes` is a separate Rust slice.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.ring.base().as_ptr().add(self.base + off),
                    bytes.len(),
                )
            };
        } else {
            self.ring.write(self.base + off, bytes);
        }
    }
}

#[cold]
fn bad(qpn: u32, opcode: WqeOpcode, why: &'static str) -> PostError {
    PostError::BadRequest { qpn, opcode, why }
}

/// Writes the WQE of `wr` at the SQ's `cur_post` and records its `wr_id`; advances
/// `cur_post`. The doorbell record and doorbell are the caller's.
///
/// Segment order as rdma-core `_mlx5_post_send`: ctrl; UD: datagram (48 bytes); RDMA
/// WRITE/READ/atomics: raddr; atomics: atomic segment; then the data segments or the inline
/// segment. Each 16-byte segment may land past the ring's end and continue at its start.
#[inline]
pub fn write_send(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Result<Written, PostError> {
    match write_send_fast(sq, shared, lim, wr) {
        Some(r) => r,
        None => write_send_general(sq, shared, lim, wr),
    }
}

/// The common case: an RC SEND, SEND_IMM, RDMA WRITE, WRITE_IMM or READ gathering an SGE list
/// whose WQE does not cross the ring's end. `None` for every other request, which
/// [`write_send`] (the general path) takes; nothing is written then.
///
/// Callers on the data path call this first and the general path only on `None`, each with its
/// own doorbell, so the fast path's result stays in registers.
#[inline(always)]
pub fn write_send_fast(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Option<Result<Written, PostError>> {
    if lim.ud {
        return None;
    }
    write_send_fast_rc(sq, shared, lim, wr)
}

/// [`write_send_fast`] for a QP the caller knows is RC (`!lim.ud`; a UD QP's sends need the
/// datagram segment, which only the general path writes).
#[inline(always)]
pub(crate) fn write_send_fast_rc(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Option<Result<Written, PostError>> {
    debug_assert!(!lim.ud);
    let Payload::Sges(sges) = wr.payload else {
        return None;
    };
    // Two matches instead of one: the first is all constants (a table lookup), the second
    // only reads the fields, so no per-opcode branch ends up on the path.
    let opcode = match wr.op {
        SendOp::Write { .. } => WqeOpcode::RDMA_WRITE,
        SendOp::Send => WqeOpcode::SEND,
        SendOp::SendImm { .. } => WqeOpcode::SEND_IMM,
        SendOp::WriteImm { .. } => WqeOpcode::RDMA_WRITE_IMM,
        SendOp::Read { .. } => WqeOpcode::RDMA_READ,
        SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => return None,
    };
    // A reference, so the address and key are loaded where the segment is written, not kept
    // in registers (or spilled) across the checks.
    let raddr = match &wr.op {
        SendOp::Write { remote } | SendOp::WriteImm { remote, .. } | SendOp::Read { remote } => {
            Some(remote)
        }
        _ => None,
    };
    let imm = match wr.op {
        SendOp::SendImm { imm } | SendOp::WriteImm { imm, .. } => imm,
        _ => 0,
    };
    write_rc_sges(sq, shared, lim, wr, opcode, raddr, imm, sges)
}

/// The common case on its own, so it compiles to straight-line code: an RC SEND, SEND_IMM,
/// RDMA WRITE, WRITE_IMM or READ gathering an SGE list. Same checks, same bytes as
/// [`write_send_general`] (ctrl, raddr for RDMA, one data segment per SGE), written as
/// 16-byte segments through one pointer checked once for the whole WQE. A WQE that would cross
/// the ring's end goes to the general path (which wraps it segment by segment).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn write_rc_sges(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
    opcode: WqeOpcode,
    raddr: Option<&RemoteAddr>,
    imm: u32,
    sges: &[Sge],
) -> Option<Result<Written, PostError>> {
    // More SGEs than the QP takes (or than fit with ctrl and raddr): the general path refuses
    // them with the error that says which.
    if sges.len() > lim.fast_max_sge {
        return None;
    }
    // ctrl + [raddr] + data: at most 2 + FAST_MAX_SGE = MAX_WQE_DS.
    let ds = 1 + raddr.is_some() as usize + sges.len();
    debug_assert!(ds <= MAX_WQE_DS as usize);
    // `ds <= 63`: no overflow, and the same as `ds.div_ceil(4)` in two instructions.
    let wqebbs = ((ds + 3) >> 2) as u32;
    // In use: `cur_post - tail` (at most `sq.wqebbs`; a larger value, from a bad tail, also
    // refuses the post).
    let tail = shared.sq_tail();
    if sq.cur_post.wrapping_sub(tail).wrapping_add(wqebbs) > sq.wqebbs {
        return Some(Err(sq_full(lim.qpn, wqebbs, sq.free(tail))));
    }
    // `free >= wqebbs >= 1`, so the ring has at least one WQEBB and `wqebbs - 1` is its mask.
    let start = sq.cur_post;
    let slot = start & (sq.wqebbs - 1);
    if slot + wqebbs > sq.wqebbs {
        return None;
    }
    let opmod_idx_opcode = ((start & 0xffff) << 8) | u32::from(opcode.0);
    let qpn_ds = lim.qpn_shifted | ds as u32;
    let ctrl = CtrlSeg {
        opmod_idx_opcode: U32::new(opmod_idx_opcode),
        qpn_ds: U32::new(qpn_ds),
        signature: 0,
        dci_stream_channel_id: U16::ZERO,
        fm_ce_se: lim.fm_ce_se(wr.flags),
        imm: U32::new(imm),
    };
    let p = sq.wqe_ptr(slot);
    let mut seg = 0usize;
    // SAFETY: each `put_seg` below writes one of the WQE's `ds` segments, which lie in WQEBBs
    // `slot..slot + wqebbs`: inside the ring (`slot + wqebbs <= sq.wqebbs`, checked above, and
    // `SqRing::wqe_ptr`'s contract); they belong to this poster (the space check passed) and
    // the device does not read them before the doorbell.
    unsafe {
        put_seg(p, seg, zerocopy::transmute!(ctrl));
        seg += 1;
        if let Some(r) = raddr {
            put_seg(p, seg, zerocopy::transmute!(RaddrSeg::new(r.addr, r.rkey)));
            seg += 1;
        }
        if let [s] = sges {
            put_seg(
                p,
                seg,
                zerocopy::transmute!(DataSeg::new(s.length, s.lkey, s.addr)),
            );
        } else {
            for s in sges {
                put_seg(
                    p,
                    seg,
                    zerocopy::transmute!(DataSeg::new(s.length, s.lkey, s.addr)),
                );
                seg += 1;
            }
        }
    }
    sq.commit(shared, start, wqebbs, wr.wr_id);
    Some(Ok(Written {
        start,
        slot,
        wraps: false,
        ds: ds as u8,
        wqebbs,
        doorbell: (u64::from(opmod_idx_opcode) << 32) | u64::from(qpn_ds),
        inline: false,
    }))
}

/// Stores 16-byte segment number `seg` of the WQE at `p` as two 64-bit stores.
///
/// # Safety
/// `p + 16 * seg .. + 16` must be inside the SQ ring, in a slot this poster owns.
#[inline(always)]
unsafe fn put_seg(p: *mut u64, seg: usize, w: [u64; 2]) {
    // SAFETY: the caller guarantees the 16 bytes are inside the ring and ours; unaligned
    // stores, so the ring's alignment does not matter.
    unsafe {
        p.add(2 * seg).write_unaligned(w[0]);
        p.add(2 * seg + 1).write_unaligned(w[1]);
    }
}

#[cold]
fn sq_full(qpn: u32, need: u32, free: u32) -> PostError {
    PostError::SqFull { qpn, need, free }
}

/// Every request (the fast path's are written the same way): UD, inline, atomics, and WQEs that
/// cross the ring's end.
#[inline(never)]
pub fn write_send_general(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Result<Written, PostError> {
    let opcode = wr.op.opcode();
    let qpn = lim.qpn;
    let (raddr, atomic, imm): (Option<RemoteAddr>, Option<AtomicSeg>, u32) = match wr.op {
        SendOp::Send => (None, None, 0),
        SendOp::SendImm { imm } => (None, None, imm),
        SendOp::Write { remote } | SendOp::Read { remote } => (Some(remote), None, 0),
        SendOp::WriteImm { remote, imm } => (Some(remote), None, imm),
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => (
            Some(remote),
            Some(AtomicSeg::compare_swap(compare, swap)),
            0,
        ),
        SendOp::FetchAdd { remote, add } => (Some(remote), Some(AtomicSeg::fetch_add(add)), 0),
    };
    if lim.ud && raddr.is_some() {
        return Err(bad(qpn, opcode, UD_RDMA_WHY));
    }
    let ud = match (lim.ud, wr.ud) {
        (true, Some(d)) => Some(d),
        (true, None) => {
            return Err(bad(
                qpn,
                opcode,
                "on a UD QP needs a destination: set SendWr::ud (UdDest::roce)",
            ));
        }
        (false, _) => None,
    };
    // DS count: ctrl + [datagram 3] + [raddr] + [atomic] + data.
    let mut ds: usize = 1 + if ud.is_some() { 3 } else { 0 } + raddr.is_some() as usize;
    let inline = match wr.payload {
        Payload::Sges(sges) => {
            if atomic.is_some() {
                if sges.len() != 1 || sges.first().is_some_and(|s| s.length != MLX5_ATOMIC_SIZE) {
                    return Err(bad(
                        qpn,
                        opcode,
                        "needs exactly one 8-byte SGE for the original value (rdma-core MLX5_ATOMIC_SIZE)",
                    ));
                }
                ds += 2;
            } else {
                if sges.len() > lim.max_sge {
                    return Err(PostError::TooManySges {
                        qpn,
                        queue: "send",
                        got: sges.len(),
                        max: lim.max_sge,
                    });
                }
                ds += sges.len();
            }
            false
        }
        Payload::Inline(data) => {
            if atomic.is_some() || matches!(wr.op, SendOp::Read { .. }) {
                return Err(bad(
                    qpn,
                    opcode,
                    "cannot take inline data (its result lands in local memory): pass one SGE of registered memory",
                ));
            }
            if data.len() > lim.max_inline {
                return Err(PostError::InlineTooLong {
                    qpn,
                    len: data.len(),
                    max: lim.max_inline,
                });
            }
            ds += inline_ds(data.len());
            true
        }
    };
    if ds > MAX_WQE_DS as usize {
        return Err(bad(
            qpn,
            opcode,
            "does not fit in one WQE (more than 63 16-byte segments): use fewer SGEs or less inline data",
        ));
    }
    let wqebbs = ds.div_ceil(4) as u32;
    let free = sq.free(shared.sq_tail());
    if wqebbs > free {
        return Err(PostError::SqFull {
            qpn,
            need: wqebbs,
            free,
        });
    }

    let start = sq.cur_post;
    let base = sq.offset_of(start);
    let fm_ce_se = lim.fm_ce_se(wr.flags);
    let opmod_idx_opcode = ((start & 0xffff) << 8) | u32::from(opcode.0);
    let qpn_ds = ((qpn & 0x00ff_ffff) << 8) | ds as u32;
    let ctrl = CtrlSeg {
        opmod_idx_opcode: U32::new(opmod_idx_opcode),
        qpn_ds: U32::new(qpn_ds),
        signature: 0,
        dci_stream_channel_id: U16::ZERO,
        fm_ce_se,
        imm: U32::new(imm),
    };
    let out = WqeOut::new(sq, base, wqebbs);
    out.put(0, ctrl.as_bytes());
    let mut off = 16;
    if let Some(d) = ud {
        let mut av = *d.av();
        av.dqp_dct
            .set((av.dqp_dct.get() & 0x00ff_ffff) | MLX5_EXTENDED_UD_AV);
        out.put(off, av.as_bytes());
        off += 48;
    }
    if let Some(r) = raddr {
        out.put(off, RaddrSeg::new(r.addr, r.rkey).as_bytes());
        off += 16;
    }
    if let Some(a) = atomic {
        out.put(off, a.as_bytes());
        off += 16;
    }
    match wr.payload {
        Payload::Sges(sges) => {
            for s in sges {
                out.put(off, DataSeg::new(s.length, s.lkey, s.addr).as_bytes());
                off += 16;
            }
        }
        Payload::Inline(data) => {
            // rdma-core `set_data_inl_seg`: header `len | MLX5_INLINE_SEG`, the bytes, padding
            // to 16 (zeroed here so WQE bytes are deterministic).
            let header = InlineSeg {
                byte_count: U32::new(data.len() as u32 | MLX5_INLINE_SEG),
            };
            out.put(off, header.as_bytes());
            out.put(off + InlineSeg::SIZE_BYTES, data);
            let used = InlineSeg::SIZE_BYTES + data.len();
            let pad = used.next_multiple_of(16) - used;
            out.put(off + used, &[0u8; 16][..pad]);
        }
    }
    sq.commit(shared, start, wqebbs, wr.wr_id);
    let slot = start & (sq.wqebbs - 1);
    Ok(Written {
        start,
        slot,
        wraps: slot + wqebbs > sq.wqebbs,
        ds: ds as u8,
        wqebbs,
        doorbell: (u64::from(opmod_idx_opcode) << 32) | u64::from(qpn_ds),
        inline,
    })
}

/// Writes the receive WQE of `wr` at the RQ's head: one data segment per SGE, then the
/// `MLX5_INVALID_LKEY` terminator if the list is shorter than the stride (rdma-core
/// `mlx5_post_recv`). Advances `head`; the doorbell record is the caller's.
#[inline]
pub fn write_recv(
    rq: &mut RqRing,
    shared: &WqShared,
    qpn: u32,
    wr: &RecvWr<'_>,
) -> Result<(), PostError> {
    let max = rq.max_sge();
    if wr.sges.len() > max {
        return Err(PostError::TooManySges {
            qpn,
            queue: "recv",
            got: wr.sges.len(),
            max,
        });
    }
    if rq.free(shared.rq_tail()) == 0 {
        return Err(PostError::RqFull {
            qpn,
            depth: rq.wqes,
        });
    }
    let base = (rq.head & (rq.wqes - 1)) as usize * rq.stride;
    let mut off = base;
    for s in wr.sges {
        rq.ring
            .write(off, DataSeg::new(s.length, s.lkey, s.addr).as_bytes());
        off += 16;
    }
    if wr.sges.len() < max {
        rq.ring.write(off, DataSeg::end_of_list().as_bytes());
    }
    rq.commit(shared, wr.wr_id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wq::tests::TestRing;
    use bypass_hw::view::View;

    fn lim(ud: bool) -> SendLimits {
        SendLimits::new(0x123, ud, 4, 128, false)
    }

    fn bytes(sq: &SqRing, off: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        sq.ring.read(off, &mut v);
        v
    }

    #[test]
    fn rdma_write_is_ctrl_raddr_data_in_one_wqebb() {
        let mut t = TestRing::new(8 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 8, 0);
        let sge = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 0x77,
        }];
        let wr = SendWr::new(
            9,
            SendOp::Write {
                remote: RemoteAddr {
                    addr: 0xdead_0000,
                    rkey: 0x55,
                },
            },
            &sge,
        );
        let w = write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
        assert_eq!((w.start, w.ds, w.wqebbs, w.inline), (0, 3, 1, false));
        let b = bytes(&sq, 0, 48);
        let c = CtrlSeg::view(&b).unwrap();
        assert_eq!(c.opcode(), WqeOpcode::RDMA_WRITE);
        assert_eq!((c.qpn(), c.ds(), c.wqe_index()), (0x123, 3, 0));
        assert!(c.cq_update());
        assert_eq!(w.doorbell, c.doorbell_word());
        let r = RaddrSeg::view(&b[16..]).unwrap();
        assert_eq!((r.raddr(), r.rkey()), (0xdead_0000, 0x55));
        let d = DataSeg::view(&b[32..]).unwrap();
        assert_eq!((d.addr(), d.byte_count(), d.lkey()), (0x1000, 64, 0x77));
        assert_eq!(sq.cur_post, 1);
        assert_eq!(sh.complete_send(0), 9);
    }

    #[test]
    fn the_fast_path_writes_the_same_bytes_as_the_general_path() {
        let remote = RemoteAddr {
            addr: 0x1122_3344_5566_7788,
            rkey: 0xabcd_ef01,
        };
        let ops = [
            SendOp::Send,
            SendOp::SendImm { imm: 0xdead_beef },
            SendOp::Write { remote },
            SendOp::WriteImm { remote, imm: 7 },
            SendOp::Read { remote },
        ];
        let sges: Vec<Sge> = (0..4)
            .map(|k| Sge {
                addr: 0x1000 * (k + 1),
                length: 100 + k as u32,
                lkey: 0x50 + k as u32,
            })
            .collect();
        for sig_all in [false, true] {
            let lim = SendLimits::new(0x123, false, 4, 128, sig_all);
            for op in ops {
                for n in 0..=4 {
                    for flags in 0..8u8 {
                        let wr = SendWr {
                            flags: SendFlags::from_bits_retain(flags),
                            ..SendWr::new(0x99, op, &sges[..n])
                        };
                        let (mut ta, mut tb) = (TestRing::new(8 * 64), TestRing::new(8 * 64));
                        let (mut a, mut b) = (SqRing::new(ta.ring()), SqRing::new(tb.ring()));
                        let (sa, sb) = (WqShared::new(0x123, 8, 0), WqShared::new(0x123, 8, 0));
                        // Start at WQEBB 5 of 8 so that 2-WQEBB WQEs still fit before the end.
                        for (sq, sh) in [(&mut a, &sa), (&mut b, &sb)] {
                            sq.commit(sh, 0, 5, 0);
                            sh.complete_send(0);
                        }
                        let wa = write_send_fast(&mut a, &sa, &lim, &wr)
                            .expect("the fast path takes RC SGE requests")
                            .unwrap();
                        let wb = write_send_general(&mut b, &sb, &lim, &wr).unwrap();
                        assert_eq!(wa, wb, "{op:?} with {n} SGEs, flags {flags:#x}");
                        assert_eq!(bytes(&a, 0, 8 * 64), bytes(&b, 0, 8 * 64));
                        assert_eq!((a.cur_post, sa.complete_send(5)), (b.cur_post, 0x99));
                    }
                }
            }
        }
    }

    #[test]
    fn the_fast_path_leaves_wrapping_wqes_ud_inline_and_atomics_to_the_general_path() {
        let mut t = TestRing::new(4 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 4, 0);
        sq.cur_post = 3;
        sq.commit(&sh, 3, 0, 0);
        sh.complete_send(3);
        let sges = [Sge::default(); 4];
        // 5 DS = 2 WQEBBs from the last block: it would cross the ring's end.
        let wr = SendWr::new(1, SendOp::Send, &sges);
        assert!(write_send_fast(&mut sq, &sh, &lim(false), &wr).is_none());
        assert_eq!((sq.cur_post, bytes(&sq, 0, 256)), (3, vec![0; 256]));
        assert!(
            write_send_fast(&mut sq, &sh, &lim(true), &wr).is_none(),
            "UD"
        );
        let inline = SendWr {
            payload: Payload::Inline(&[1, 2, 3]),
            ..SendWr::new(1, SendOp::Send, &[])
        };
        assert!(write_send_fast(&mut sq, &sh, &lim(false), &inline).is_none());
        let fa = SendOp::FetchAdd {
            remote: RemoteAddr::default(),
            add: 1,
        };
        let one = [Sge {
            length: 8,
            ..Sge::default()
        }];
        let atomic = SendWr::new(1, fa, &one);
        assert!(write_send_fast(&mut sq, &sh, &lim(false), &atomic).is_none());
        assert_eq!(sq.cur_post, 3);
        // The general path writes the wrapping WQE (`a_multi_wqebb_wqe_wraps_to_the_ring_start`).
        assert_eq!(
            write_send(&mut sq, &sh, &lim(false), &wr).unwrap().wqebbs,
            2
        );
    }

    #[test]
    fn fm_ce_se_follows_the_flags_and_sq_sig_all() {
        let quiet = SendLimits::new(1, false, 1, 0, false);
        let all = SendLimits::new(1, false, 1, 0, true);
        assert_eq!(quiet.fm_ce_se(SendFlags::empty()), 0);
        assert_eq!(all.fm_ce_se(SendFlags::empty()), MLX5_WQE_CTRL_CQ_UPDATE);
        assert_eq!(
            quiet.fm_ce_se(SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE),
            MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED | MLX5_WQE_CTRL_FENCE
        );
        assert_eq!(quiet.fm_ce_se(SendFlags::FENCE), MLX5_WQE_CTRL_FENCE);
    }

    #[test]
    fn a_multi_wqebb_wqe_wraps_to_the_ring_start() {
        let mut t = TestRing::new(4 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 4, 0);
        // Move producer and tail to block 3 (as after three retired WQEBBs).
        sq.cur_post = 2;
        sq.commit(&sh, 2, 1, 0);
        sh.complete_send(2);
        assert_eq!((sq.cur_post, sq.free(sh.sq_tail())), (3, 4));
        let sges = [Sge {
            addr: 1,
            length: 2,
            lkey: 3,
        }; 4];
        // SEND with 4 SGEs: 5 DS = 2 WQEBBs, starting at the last block.
        let w = write_send(
            &mut sq,
            &sh,
            &lim(false),
            &SendWr::new(1, SendOp::Send, &sges),
        )
        .unwrap();
        assert_eq!((w.start, w.ds, w.wqebbs), (3, 5, 2));
        let b = bytes(&sq, 192, 64);
        assert_eq!(CtrlSeg::view(&b).unwrap().wqe_index(), 3);
        // The fourth SGE (segment 4) is the first segment of block 0.
        let first = bytes(&sq, 0, 16);
        assert_eq!(DataSeg::view(&first).unwrap().lkey(), 3);
        assert_eq!(sq.cur_post, 5);
    }

    #[test]
    fn inline_send_pads_and_counts_ds() {
        let mut t = TestRing::new(8 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 8, 0);
        let data = [7u8; 20];
        let wr = SendWr {
            payload: Payload::Inline(&data),
            ..SendWr::new(1, SendOp::SendImm { imm: 0xabcd }, &[])
        };
        let w = write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
        // ctrl + inline(4 + 20 -> 32 bytes = 2 DS).
        assert_eq!((w.ds, w.inline), (3, true));
        let b = bytes(&sq, 0, 48);
        assert_eq!(CtrlSeg::view(&b).unwrap().imm(), 0xabcd);
        assert_eq!(&b[16..20], &(20u32 | MLX5_INLINE_SEG).to_be_bytes());
        assert_eq!(&b[20..40], &[7u8; 20]);
        assert_eq!(&b[40..48], &[0u8; 8]);
        let long = [0u8; 129];
        let wr = SendWr {
            payload: Payload::Inline(&long),
            ..SendWr::new(1, SendOp::Send, &[])
        };
        assert!(matches!(
            write_send(&mut sq, &sh, &lim(false), &wr),
            Err(PostError::InlineTooLong {
                len: 129,
                max: 128,
                ..
            })
        ));
    }

    #[test]
    fn atomics_take_one_eight_byte_sge_and_one_wqebb() {
        let mut t = TestRing::new(8 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 8, 0);
        let sge = [Sge {
            addr: 0x10,
            length: 8,
            lkey: 1,
        }];
        let op = SendOp::CompareSwap {
            remote: RemoteAddr { addr: 8, rkey: 2 },
            compare: 5,
            swap: 6,
        };
        let w = write_send(&mut sq, &sh, &lim(false), &SendWr::new(1, op, &sge)).unwrap();
        assert_eq!((w.ds, w.wqebbs), (4, 1));
        let b = bytes(&sq, 0, 64);
        let a = AtomicSeg::view(&b[32..]).unwrap();
        assert_eq!((a.compare(), a.swap_add()), (5, 6));
        let bad_sge = [Sge {
            length: 4,
            ..sge[0]
        }];
        assert!(matches!(
            write_send(&mut sq, &sh, &lim(false), &SendWr::new(1, op, &bad_sge)),
            Err(PostError::BadRequest { .. })
        ));
    }

    #[test]
    fn ud_send_carries_the_datagram_segment() {
        let mut t = TestRing::new(8 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 8, 0);
        let dest = UdDest::roce(0x456, 0x1111, [1; 16], [2; 6], 0, 64);
        let sge = [Sge {
            addr: 0x10,
            length: 8,
            lkey: 1,
        }];
        let mut wr = SendWr::new(1, SendOp::Send, &sge);
        assert!(write_send(&mut sq, &sh, &lim(true), &wr).is_err());
        wr.ud = Some(&dest);
        let w = write_send(&mut sq, &sh, &lim(true), &wr).unwrap();
        assert_eq!((w.ds, w.wqebbs), (5, 2));
        let b = bytes(&sq, 0, 80);
        let av = Av::view(&b[16..]).unwrap();
        assert_eq!((av.dqpn(), av.qkey(), av.extended()), (0x456, 0x1111, true));
        let write = SendOp::Write {
            remote: RemoteAddr::default(),
        };
        assert!(write_send(&mut sq, &sh, &lim(true), &SendWr::new(1, write, &sge)).is_err());
    }

    #[test]
    fn a_full_send_queue_is_an_error_not_an_overwrite() {
        let mut t = TestRing::new(2 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x123, 2, 0);
        let wr = SendWr::new(1, SendOp::Send, &[]);
        write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
        write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
        let before = bytes(&sq, 0, 128);
        assert!(matches!(
            write_send(&mut sq, &sh, &lim(false), &wr),
            Err(PostError::SqFull {
                need: 1,
                free: 0,
                ..
            })
        ));
        assert_eq!(bytes(&sq, 0, 128), before);
        assert_eq!(sh.complete_send(1), 1);
        write_send(&mut sq, &sh, &lim(false), &wr).unwrap();
    }

    #[test]
    fn receive_lists_end_with_the_invalid_lkey_terminator() {
        let mut t = TestRing::new(2 * 64);
        let mut rq = RqRing::new(t.ring(), 64);
        let sh = WqShared::new(0x123, 0, 2);
        let sge = [Sge {
            addr: 0x40,
            length: 100,
            lkey: 9,
        }];
        write_recv(
            &mut rq,
            &sh,
            0x123,
            &RecvWr {
                wr_id: 5,
                sges: &sge,
            },
        )
        .unwrap();
        let mut b = [0u8; 32];
        rq.ring.read(0, &mut b);
        assert_eq!(DataSeg::view(&b).unwrap().lkey(), 9);
        assert!(DataSeg::view(&b[16..]).unwrap().is_end_of_list());
        write_recv(
            &mut rq,
            &sh,
            0x123,
            &RecvWr {
                wr_id: 6,
                sges: &sge,
            },
        )
        .unwrap();
        assert!(matches!(
            write_recv(
                &mut rq,
                &sh,
                0x123,
                &RecvWr {
                    wr_id: 7,
                    sges: &sge
                }
            ),
            Err(PostError::RqFull { .. })
        ));
        assert!(matches!(
            write_recv(
                &mut rq,
                &sh,
                0x123,
                &RecvWr {
                    wr_id: 7,
                    sges: &[sge[0]; 5]
                }
            ),
            Err(PostError::TooManySges { .. })
        ));
        assert_eq!(sh.complete_recv(), 5);
    }
}
