//! The WQE writer: every send WQE and every receive WQE, written straight into the SQ/RQ
//! rings, one segment writer per segment kind and one send body ([`write_wqe`]) specialised by
//! the request shapes it takes: the common ones (RC SGE lists that do not cross the ring's
//! end, straight-line stores) and all of them (UD, inline, atomics, wrapping WQEs).
//!
//! Follows rdma-core `providers/mlx5/qp.c`: `_mlx5_post_send` (segment order per opcode: ctrl;
//! UD: datagram; RDMA and atomics: raddr; atomics: atomic; then data or inline; `fm_ce_se`;
//! a WQE that crosses `sq.qend` continues at the SQ start), `set_raddr_seg`, `set_atomic_seg`,
//! `set_datagram_seg`, `set_data_ptr_seg`, `set_data_inl_seg`; the extended post
//! (`mlx5_send_wr_rdma_write` + `mlx5_send_wr_set_sge`: the same segments from ctrl words
//! precomputed per QP); `mlx5_post_recv` (data segments, then an `MLX5_INVALID_LKEY`
//! terminator when the list is shorter than the stride).
//!
//! Owns: [`SendLimits`], [`WriteTemplate`], [`Written`], the segment writers, [`write_wqe`]
//! and [`write_recv`]. Must not: ring doorbells or touch barriers (`doorbell.rs`), check QP
//! state (`qp.rs`), allocate, lock or format: this is the data path.

use core::convert::Infallible;
use core::sync::atomic::{Ordering, compiler_fence};

use bypass_hw::wqe::{
    AtomicSeg, DataSeg, MAX_WQE_DS, MLX5_ATOMIC_SIZE, MLX5_EXTENDED_UD_AV, MLX5_INLINE_SEG,
    MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_FENCE, MLX5_WQE_CTRL_SOLICITED, RaddrSeg, WqeOpcode,
    inline_ds,
};
use zerocopy::IntoBytes;

use crate::post::{
    Payload, PostError, RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge, UC_READ_ATOMIC_WHY,
    UD_RDMA_WHY, UdDest,
};
use crate::wq::{RingPtr, RqRing, SqRing, WqShared};

/// The limits a QP's send path checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendLimits {
    /// QP number (for the ctrl segment and errors).
    pub qpn: u32,
    /// UD (datagram segment, SEND only) or RC.
    pub ud: bool,
    /// UC: RC's segments without READ or atomics ([`SendLimits::uc`]; `new` leaves it off).
    pub uc: bool,
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
    /// The most SGEs the common shapes take: `max_sge`, but at most [`FAST_MAX_SGE`], so that
    /// their WQE (ctrl, raddr, one segment per SGE) always fits in `MAX_WQE_DS` without a
    /// check. Private: only [`SendLimits::new`] sets it.
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
            uc: false,
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

    /// The same limits for a UC QP: its WQEs are RC's (ctrl, raddr for a WRITE, data; rdma-core
    /// `_mlx5_post_send` builds the raddr segment for `IBV_QPT_UC` as for RC), and a READ or
    /// atomic is refused at post time ([`UC_READ_ATOMIC_WHY`]).
    pub const fn uc(self) -> Self {
        Self { uc: true, ..self }
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

/// A send WQE written to the ring: where it is, its size, and the first 8 bytes of its ctrl
/// segment (the doorbell value). Made only by this module's writers, so `slot` is always
/// inside the ring (`start & (wqebbs in the ring - 1)`): the doorbell relies on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// WQEBB index of its first block (the producer counter, wrapping).
    start: u32,
    /// Where its first block is in the ring: `start & (wqebbs in the ring - 1)`.
    slot: u32,
    /// Size in 16-byte units.
    ds: u8,
    /// Size in WQEBBs.
    wqebbs: u32,
    /// The first 8 bytes of the ctrl segment as stored (`opmod_idx_opcode`, `qpn_ds`), as one
    /// native word: what the 8-byte doorbell writes.
    doorbell: u64,
}

impl Written {
    /// The one-WQEBB RDMA WRITE ([`write_rdma_write`]) just before `sq.cur_post`, whose
    /// [`Written::doorbell`] is `doorbell`: what a batch of them keeps of its last WQE.
    #[inline(always)]
    pub fn last_rdma_write(sq: &SqRing, doorbell: u64) -> Self {
        let start = sq.cur_post.wrapping_sub(1);
        Self {
            start,
            slot: start & sq.wqebbs.wrapping_sub(1),
            ds: WRITE_DS,
            wqebbs: 1,
            doorbell,
        }
    }

    /// WQEBB index of its first block (wrapping).
    #[inline(always)]
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Its first block's place in the ring (always below the ring's WQEBB count).
    #[inline(always)]
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Size in 16-byte units.
    #[inline(always)]
    pub fn ds(&self) -> u8 {
        self.ds
    }

    /// Size in WQEBBs.
    #[inline(always)]
    pub fn wqebbs(&self) -> u32 {
        self.wqebbs
    }

    /// The 8-byte doorbell's value: the ctrl segment's first 8 bytes as a native word.
    #[inline(always)]
    pub fn doorbell(&self) -> u64 {
        self.doorbell
    }
}

// ---- Segment writers: each returns its 16-byte segment as two native words in memory order.

/// Word 0 of the ctrl segment without the WQE index (`struct mlx5_wqe_ctrl_seg`:
/// `opmod_idx_opcode` with opmod 0, then `qpn_ds`, each big-endian).
#[inline(always)]
const fn ctrl_word0(opcode: WqeOpcode, qpn_ds: u32) -> u64 {
    (((opcode.0 as u64) << 32) | qpn_ds as u64).to_be()
}

/// The WQE index field of ctrl word 0 (`opmod_idx_opcode` bits 23:8, the low 16 bits of the
/// producer counter: rdma-core `(sq.cur_post & 0xffff) << 8`).
#[inline(always)]
fn ctrl_index(idx: u32) -> u64 {
    #[cfg(target_endian = "little")]
    // Memory bytes 1, 2 are bits 8..24 of the word: the byte-swapped index shifted right by 8.
    let w = u64::from((idx & 0xffff).swap_bytes() >> 8);
    #[cfg(target_endian = "big")]
    let w = u64::from(idx & 0xffff) << 40;
    w
}

/// Word 1 of the ctrl segment: `signature` 0, `dci_stream_channel_id` 0, `fm_ce_se`, `imm`
/// (big-endian; host order in `imm`).
#[inline(always)]
const fn ctrl_word1(fm_ce_se: u8, imm: u32) -> u64 {
    (((fm_ce_se as u64) << 32) | imm as u64).to_be()
}

/// The ctrl segment of the WQE at WQEBB index `idx`: `word0` ([`ctrl_word0`]) with the index,
/// and `word1` ([`ctrl_word1`]). rdma-core `_mlx5_post_send` / `_common_wqe_init`.
#[inline(always)]
fn ctrl_seg(word0: u64, idx: u32, word1: u64) -> [u64; 2] {
    [word0 | ctrl_index(idx), word1]
}

/// The remote-address segment (`struct mlx5_wqe_raddr_seg`; rdma-core `set_raddr_seg`).
#[inline(always)]
fn raddr_seg(remote: &RemoteAddr) -> [u64; 2] {
    zerocopy::transmute!(RaddrSeg::new(remote.addr, remote.rkey))
}

/// The atomic segment (`struct mlx5_wqe_atomic_seg`; rdma-core `set_atomic_seg`).
#[inline(always)]
fn atomic_seg(a: AtomicSeg) -> [u64; 2] {
    zerocopy::transmute!(a)
}

/// The datagram segment of a UD send (`struct mlx5_wqe_datagram_seg`, 48 bytes: the address
/// vector with `MLX5_EXTENDED_UD_AV` in the remote QPN word; rdma-core `set_datagram_seg`).
#[inline(always)]
fn datagram_seg(dest: &UdDest) -> [[u64; 2]; 3] {
    let mut av = *dest.av();
    av.dqp_dct
        .set((av.dqp_dct.get() & 0x00ff_ffff) | MLX5_EXTENDED_UD_AV);
    zerocopy::transmute!(av)
}

/// A data segment (`struct mlx5_wqe_data_seg`: `byte_count`, `lkey`, `addr`, big-endian;
/// rdma-core `set_data_ptr_seg`).
#[inline(always)]
fn data_seg(s: &Sge) -> [u64; 2] {
    #[cfg(target_endian = "little")]
    {
        // Word 0 is `byte_count` then `lkey`, each big-endian: the byte swap of
        // `byte_count << 32 | lkey`, i.e. of `lkey << 32 | byte_count` rotated by 32 (one
        // 64-bit load, `bswap`, `ror` when the two fields are adjacent, as in `Sge`).
        let w0 = (u64::from(s.lkey) << 32 | u64::from(s.length))
            .swap_bytes()
            .rotate_right(32);
        [w0, s.addr.to_be()]
    }
    #[cfg(target_endian = "big")]
    {
        zerocopy::transmute!(DataSeg::new(s.length, s.lkey, s.addr))
    }
}

/// The terminator of a receive list shorter than the stride (`MLX5_INVALID_LKEY`; rdma-core
/// `mlx5_post_recv`).
#[inline(always)]
fn recv_terminator() -> [u64; 2] {
    zerocopy::transmute!(DataSeg::end_of_list())
}

/// Where one send WQE's segments go: the WQE's first block in the SQ ring. With `wrap` (a
/// constant where the writer is specialised) each segment's offset is masked into the ring, so
/// a WQE that crosses the end continues at the start; without it the caller checked that the
/// whole WQE lies before the end.
#[derive(Clone, Copy)]
struct WqeOut<'r> {
    ring: &'r RingPtr,
    /// Byte offset of the WQE's first block in the ring (a multiple of 64).
    at: usize,
    /// The address of that block (computed once: the stores below may alias anything, so a
    /// base read per segment would be a load per segment).
    p: *mut u8,
    wrap: bool,
}

impl<'r> WqeOut<'r> {
    /// The WQE whose first block is WQEBB `slot` (`< sq.wqebbs`) of `sq`.
    #[inline(always)]
    fn new(sq: &'r SqRing, slot: u32, wrap: bool) -> Self {
        Self {
            ring: &sq.ring,
            at: (slot as usize) << 6,
            p: sq.wqe_ptr(slot).cast(),
            wrap,
        }
    }

    /// Stores segment `seg` (16 bytes at WQE offset `16 * seg`).
    ///
    /// # Safety
    /// Without `wrap`: `at + 16 * (seg + 1) <= ring.len()`. Either way the bytes must be the
    /// caller's WQE's, which the device does not read before the doorbell.
    #[inline(always)]
    unsafe fn put(&self, seg: usize, w: [u64; 2]) {
        if self.wrap {
            // Masked: a 16-byte segment at a multiple of 16 never straddles the end.
            self.ring.write(self.at + 16 * seg, w.as_bytes());
        } else {
            // SAFETY: `at + 16 * (seg + 1) <= ring.len()` (the caller's contract), and `p` is
            // the ring's base plus `at`: inside the ring, which is valid for writes
            // (`RingPtr::new`). Unaligned stores: no alignment assumed.
            unsafe {
                let p = self.p.add(16 * seg).cast::<u64>();
                p.write_unaligned(w[0]);
                p.add(1).write_unaligned(w[1]);
            }
        }
    }

    /// Stores `data` as an inline-data segment at segment `seg` (rdma-core `set_data_inl_seg`:
    /// the header `len | MLX5_INLINE_SEG`, the bytes, padding to 16, zeroed so that WQE bytes
    /// are deterministic), masked into the ring; returns its size in DS.
    #[inline(always)]
    fn put_inline(&self, seg: usize, data: &[u8]) -> usize {
        let off = self.at + 16 * seg;
        self.ring
            .write(off, &(data.len() as u32 | MLX5_INLINE_SEG).to_be_bytes());
        self.ring.write(off + 4, data);
        let used = 4 + data.len();
        let pad = used.next_multiple_of(16) - used;
        self.ring.write(off + used, &[0u8; 16][..pad]);
        inline_ds(data.len())
    }
}

// ---- The send WQE writer.

/// The request shapes a specialisation of [`write_wqe`] takes.
pub trait Shapes {
    /// What it returns for a request it leaves to the general specialisation: `()` for
    /// [`Common`], nothing at all ([`Infallible`]) for [`All`], which takes every request.
    type Left;
    /// True for [`All`]: UD, inline, atomics and WQEs across the ring's end are written too.
    const ALL: bool;
    /// `Some` where a request shape is left to [`All`].
    fn left() -> Option<Self::Left>;
}

/// The common shapes, on an RC QP (the caller's check: a UD send needs the datagram segment):
/// SEND, SEND_IMM, RDMA WRITE, WRITE_IMM and READ gathering at most
/// `min(max_send_sge, FAST_MAX_SGE)` SGEs, in a WQE that does not cross the ring's end.
#[derive(Debug)]
pub enum Common {}

/// Every request.
#[derive(Debug)]
pub enum All {}

impl Shapes for Common {
    type Left = ();
    const ALL: bool = false;
    #[inline(always)]
    fn left() -> Option<()> {
        Some(())
    }
}

impl Shapes for All {
    type Left = Infallible;
    const ALL: bool = true;
    #[inline(always)]
    fn left() -> Option<Infallible> {
        None
    }
}

/// Why [`write_wqe`] wrote nothing: the request was refused, or (`Left`) it is of a shape
/// this specialisation leaves to [`All`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop<L> {
    /// Refused: nothing of it reaches the ring.
    Refused(PostError),
    /// Left to the general specialisation.
    Left(L),
}

#[cold]
fn bad(qpn: u32, opcode: WqeOpcode, why: &'static str) -> PostError {
    PostError::BadRequest { qpn, opcode, why }
}

#[cold]
fn sq_full(qpn: u32, need: u32, free: u32) -> PostError {
    PostError::SqFull { qpn, need, free }
}

/// Writes the WQE of `wr` at the SQ's `cur_post`, records its `wr_id` and advances
/// `cur_post`; the doorbell record and doorbell are the caller's. One body for every send
/// request, specialised by `S` ([`Common`] or [`All`]): the checks and segments a shape
/// cannot have fold away.
///
/// Segment order as rdma-core `_mlx5_post_send`: ctrl; UD: datagram; RDMA WRITE/READ and
/// atomics: raddr; atomics: atomic; then the data segments or the inline segment. Checks, in
/// this order: RDMA or atomic on UD, a UD send without destination, the atomic's one 8-byte
/// SGE, the SGE count, inline on READ/atomics, the inline length, the WQE size, the SQ space.
#[inline(always)]
pub fn write_wqe<S: Shapes>(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Result<Written, Stop<S::Left>> {
    let qpn = lim.qpn;
    if let Payload::Inline(_) = wr.payload
        && let Some(l) = S::left()
    {
        return Err(Stop::Left(l));
    }
    // Constants per opcode (a table lookup), then the fields by reference, each match on its
    // own, so that no per-opcode branch ends up on the common path and the remote address is
    // loaded where it is stored.
    let opcode = match wr.op {
        SendOp::Write { .. } => WqeOpcode::RDMA_WRITE,
        SendOp::Send => WqeOpcode::SEND,
        SendOp::SendImm { .. } => WqeOpcode::SEND_IMM,
        SendOp::WriteImm { .. } => WqeOpcode::RDMA_WRITE_IMM,
        SendOp::Read { .. } => WqeOpcode::RDMA_READ,
        SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => match S::left() {
            Some(l) => return Err(Stop::Left(l)),
            None => wr.op.opcode(),
        },
    };
    let mut raddr = match &wr.op {
        SendOp::Write { remote } | SendOp::WriteImm { remote, .. } | SendOp::Read { remote } => {
            Some(remote)
        }
        _ => None,
    };
    let imm = match wr.op {
        SendOp::SendImm { imm } | SendOp::WriteImm { imm, .. } => imm,
        _ => 0,
    };
    // Atomics: raddr, then the atomic segment (the common shapes have none).
    let atomic = match &wr.op {
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } if S::ALL => {
            raddr = Some(remote);
            Some(AtomicSeg::compare_swap(*compare, *swap))
        }
        SendOp::FetchAdd { remote, add } if S::ALL => {
            raddr = Some(remote);
            Some(AtomicSeg::fetch_add(*add))
        }
        _ => None,
    };
    if S::ALL
        && lim.uc
        && matches!(
            opcode,
            WqeOpcode::RDMA_READ | WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA
        )
    {
        return Err(Stop::Refused(bad(qpn, opcode, UC_READ_ATOMIC_WHY)));
    }
    let ud = if S::ALL && lim.ud {
        if raddr.is_some() {
            return Err(Stop::Refused(bad(qpn, opcode, UD_RDMA_WHY)));
        }
        let Some(d) = wr.ud else {
            return Err(Stop::Refused(bad(
                qpn,
                opcode,
                "on a UD QP needs a destination: set SendWr::ud (UdDest::roce)",
            )));
        };
        Some(d)
    } else {
        None
    };
    // DS count: ctrl + [datagram 3] + [raddr] + [atomic] + data or inline.
    let mut ds = 1 + if ud.is_some() { 3 } else { 0 } + raddr.is_some() as usize;
    let (sges, inline): (&[Sge], Option<&[u8]>) = match wr.payload {
        Payload::Sges(sges) => {
            if atomic.is_some() {
                if sges.len() != 1 || sges.first().is_some_and(|s| s.length != MLX5_ATOMIC_SIZE) {
                    return Err(Stop::Refused(bad(
                        qpn,
                        opcode,
                        "needs exactly one 8-byte SGE for the original value (rdma-core MLX5_ATOMIC_SIZE)",
                    )));
                }
                ds += 2;
            } else {
                let max = if S::ALL {
                    lim.max_sge
                } else {
                    lim.fast_max_sge
                };
                if sges.len() > max {
                    if let Some(l) = S::left() {
                        return Err(Stop::Left(l));
                    }
                    return Err(Stop::Refused(PostError::TooManySges {
                        qpn,
                        queue: "send",
                        got: sges.len(),
                        max: lim.max_sge,
                    }));
                }
                ds += sges.len();
            }
            (sges, None)
        }
        Payload::Inline(data) => {
            // The common shapes left inline payloads at the top: only `All` gets here.
            if atomic.is_some() || matches!(wr.op, SendOp::Read { .. }) {
                return Err(Stop::Refused(bad(
                    qpn,
                    opcode,
                    "cannot take inline data (its result lands in local memory): pass one SGE of registered memory",
                )));
            }
            if data.len() > lim.max_inline {
                return Err(Stop::Refused(PostError::InlineTooLong {
                    qpn,
                    len: data.len(),
                    max: lim.max_inline,
                }));
            }
            ds += inline_ds(data.len());
            (&[], Some(data))
        }
    };
    // The common shapes hold at most 2 + FAST_MAX_SGE = MAX_WQE_DS segments.
    if S::ALL && ds > MAX_WQE_DS as usize {
        return Err(Stop::Refused(bad(
            qpn,
            opcode,
            "does not fit in one WQE (more than 63 16-byte segments): use fewer SGEs or less inline data",
        )));
    }
    debug_assert!(ds <= MAX_WQE_DS as usize);
    // `ds <= 63`: `ds.div_ceil(4)`, with no overflow to handle.
    let wqebbs = ((ds + 3) >> 2) as u32;
    // In use: `cur_post - tail`, at most `sq.wqebbs` (the tail only trails `cur_post`: WQEs
    // complete in order).
    let tail = shared.sq_tail();
    if sq.cur_post.wrapping_sub(tail).wrapping_add(wqebbs) > sq.wqebbs {
        return Err(Stop::Refused(sq_full(qpn, wqebbs, sq.free(tail))));
    }
    // `wqebbs >= 1` fit, so the ring has at least one WQEBB and `wqebbs - 1` is its mask.
    let start = sq.cur_post;
    let slot = start & (sq.wqebbs - 1);
    if slot + wqebbs > sq.wqebbs
        && let Some(l) = S::left()
    {
        return Err(Stop::Left(l));
    }
    let out = WqeOut::new(sq, slot, S::ALL);
    let ctrl = ctrl_seg(
        ctrl_word0(opcode, lim.qpn_shifted | ds as u32),
        start,
        ctrl_word1(lim.fm_ce_se(wr.flags), imm),
    );
    let mut seg = 0usize;
    // SAFETY: each `put` writes one of the WQE's `ds` segments (`seg < ds <= 4 * wqebbs`), in
    // WQEBBs this poster owns (the space check passed) that the device does not read before
    // the doorbell; without `wrap` (the common shapes) `slot + wqebbs <= sq.wqebbs` (checked
    // above), so every one lies before the ring's end.
    unsafe {
        out.put(seg, ctrl);
        seg += 1;
        if let Some(d) = ud {
            for w in datagram_seg(d) {
                out.put(seg, w);
                seg += 1;
            }
        }
        if let Some(r) = raddr {
            out.put(seg, raddr_seg(r));
            seg += 1;
        }
        if let Some(a) = atomic {
            out.put(seg, atomic_seg(a));
            seg += 1;
        }
        if let [s] = sges {
            out.put(seg, data_seg(s));
        } else {
            for s in sges {
                out.put(seg, data_seg(s));
                seg += 1;
            }
        }
    }
    if let Some(data) = inline {
        out.put_inline(seg, data);
    }
    sq.commit(shared, start, wqebbs, wr.wr_id);
    Ok(Written {
        start,
        slot,
        ds: ds as u8,
        wqebbs,
        doorbell: ctrl[0],
    })
}

/// [`write_wqe`] of the common shapes (`Err(Stop::Left(()))` for any other request, with
/// nothing written), on an RC QP.
#[inline(always)]
pub fn write_common(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Result<Written, Stop<()>> {
    debug_assert!(!lim.ud && !lim.uc);
    write_wqe::<Common>(sq, shared, lim, wr)
}

/// [`write_wqe`] of every request, out of line (UD, inline, atomics, wrapping WQEs).
#[inline(never)]
pub fn write_any(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Result<Written, PostError> {
    match write_wqe::<All>(sq, shared, lim, wr) {
        Ok(w) => Ok(w),
        Err(Stop::Refused(e)) => Err(e),
        Err(Stop::Left(never)) => match never {},
    }
}

/// The WQE of `wr` on any QP: the common shapes inline (RC), the rest through [`write_any`].
#[inline]
pub fn write_send(
    sq: &mut SqRing,
    shared: &WqShared,
    lim: &SendLimits,
    wr: &SendWr<'_>,
) -> Result<Written, PostError> {
    if !lim.ud && !lim.uc {
        match write_common(sq, shared, lim, wr) {
            Ok(w) => return Ok(w),
            Err(Stop::Refused(e)) => return Err(e),
            Err(Stop::Left(())) => {}
        }
    }
    write_any(sq, shared, lim, wr)
}

// ---- The extended post of a one-SGE RDMA WRITE.

/// Segments of a one-SGE RDMA WRITE: ctrl, raddr, data.
pub const WRITE_DS: u8 = 3;

/// A QP's ctrl segment for a one-SGE RDMA WRITE, precomputed at creation: word 0 without the
/// WQE index (`ctrl_word0` of `MLX5_OPCODE_RDMA_WRITE`, `qpn << 8 | 3`) and word 1 for each
/// value of [`SendFlags`] (`sq_sig_all` folded in). Only the index changes per post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTemplate {
    word0: u64,
    /// Word 1 for each `SendFlags` value (`flags.bits() & 7`).
    word1: [u64; 8],
}

impl WriteTemplate {
    /// The template of the QP whose send limits are `lim`.
    pub fn new(lim: &SendLimits) -> Self {
        let mut word1 = [0u64; 8];
        for (bits, w) in (0u8..).zip(word1.iter_mut()) {
            *w = ctrl_word1(lim.fm_ce_se(SendFlags::from_bits_retain(bits)), 0);
        }
        Self {
            word0: ctrl_word0(WqeOpcode::RDMA_WRITE, lim.qpn_shifted | u32::from(WRITE_DS)),
            word1,
        }
    }
}

/// Writes the one-WQEBB WQE of an RDMA WRITE of `local` to `remote` at the SQ's `cur_post`
/// (rdma-core `mlx5_send_wr_rdma_write` + `mlx5_send_wr_set_sge`: the segments of
/// [`write_wqe`], the ctrl words from `tpl`), records `wr_id` and advances `cur_post`; the
/// doorbell record and doorbell are the caller's. The same bytes and bookkeeping as
/// [`write_send`] of the equivalent [`SendWr`].
///
/// Checks: the SQ has a free WQEBB ([`SqRing::reserve_one`]); `None` if not, with nothing
/// written. A one-WQEBB WQE never crosses the ring's end. The caller checks the QP's state
/// and type (RC, able to send, `max_send_sge >= 1`).
#[inline(always)]
pub fn write_rdma_write(
    sq: &mut SqRing,
    shared: &WqShared,
    tpl: &WriteTemplate,
    wr_id: u64,
    local: &Sge,
    remote: &RemoteAddr,
    flags: SendFlags,
) -> Option<Written> {
    if !sq.reserve_one(shared) {
        return None;
    }
    Some(write_rdma_write_reserved(
        sq, shared, tpl, wr_id, local, remote, flags,
    ))
}

/// [`write_rdma_write`] of a WQEBB already reserved ([`SqRing::reserve_one`] or
/// [`SqRing::take_credit`] returned true, and nothing moved `cur_post` since).
#[inline(always)]
pub fn write_rdma_write_reserved(
    sq: &mut SqRing,
    shared: &WqShared,
    tpl: &WriteTemplate,
    wr_id: u64,
    local: &Sge,
    remote: &RemoteAddr,
    flags: SendFlags,
) -> Written {
    let start = sq.cur_post;
    // The bookkeeping first, so that `wr_id` and the `WqShared` pointer are dead before the
    // segments are computed (fewer values live at once: no callee-saved registers). Nobody
    // reads it before the doorbell: the poller retires this slot only on a CQE for it.
    sq.commit_reserved(shared, start, wr_id);
    compiler_fence(Ordering::Release);
    // `wqebbs` is a power of two, at least 1 (one WQEBB is reserved): `wqebbs - 1` is the mask.
    let slot = start & (sq.wqebbs - 1);
    let out = WqeOut::new(sq, slot, false);
    let ctrl = ctrl_seg(tpl.word0, start, tpl.word1[usize::from(flags.bits() & 7)]);
    // SAFETY: `slot < wqebbs`, so the three segments lie in WQEBB `slot`, inside the ring; the
    // slot is this poster's (reserved) and the device does not read it before the doorbell.
    // One segment at a time, each computed next to its stores (the compiler fences emit no
    // instruction; they keep fewer values live at once).
    unsafe {
        out.put(0, ctrl);
        compiler_fence(Ordering::Release);
        out.put(1, raddr_seg(remote));
        compiler_fence(Ordering::Release);
        out.put(2, data_seg(local));
    }
    Written {
        start,
        slot,
        ds: WRITE_DS,
        wqebbs: 1,
        doorbell: ctrl[0],
    }
}

// ---- Receive WQEs.

/// Writes the receive WQE of `wr` at the RQ's head: one data segment per SGE, then the
/// terminator if the list is shorter than the stride (rdma-core `mlx5_post_recv`). Advances
/// `head`; the doorbell record is the caller's.
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
    let mut off = (rq.head & (rq.wqes - 1)) as usize * rq.stride;
    for s in wr.sges {
        rq.ring.write(off, data_seg(s).as_bytes());
        off += 16;
    }
    if wr.sges.len() < max {
        rq.ring.write(off, recv_terminator().as_bytes());
    }
    rq.commit(shared, wr.wr_id);
    Ok(())
}
#[cfg(test)]
mod tests;
