//! Completion polling: the owner-bit rule over the CQ ring, each CQE's `wr_id` found in its
//! QP's per-slot array, the consumer index published in the CQ doorbell record once per poll.
//! Every poll form ([`CqPoller::poll`], [`CqPoller::poll_one`], their `_seq` and `_raw`
//! forms, [`CqPoller::start_poll`] with its [`CqPollGuard`]) takes CQEs through one step: the
//! fast step (a successful requester CQE of the last QP found: one test, one compare), else
//! the cold step ([`CqPoller`]'s `take_cold`: any other CQE software owns, looked up in the
//! QP table); a [`WorkCompletion`] is assembled from the CQE and the step's result alike.
//!
//! Follows rdma-core `providers/mlx5/cq.c`: `get_sw_cqe` (owner bit vs `ci & nent`, opcode not
//! INVALID), `udma_from_device_barrier` right after the ownership check, `mlx5_parse_cqe`
//! (a send CQE retires up to `wqe_counter`; a receive the RQ's tail), the extended poll
//! `mlx5_start_poll` / `mlx5_next_poll` / `mlx5_end_poll` (lazy `ibv_wc_read_*`), and
//! `update_cons_index` (`dbrec[SET_CI] = ci & 0xffffff` after the batch).
//!
//! Owns: [`CqPoller`], [`CqPollGuard`], [`CqGeometryError`]. Must not: decode CQE fields
//! beyond what finding the `wr_id` needs (`completion.rs`), allocate, lock, make syscalls or
//! format (the consumer side shared with QP attach/detach and [`QpTable::clean`] is only ever
//! tried, never waited for), or arm the CQ (`cq.rs`).

use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use std::sync::Arc;

use bypass_hw::cqe::{Cqe64, CqeOpcode};
use zerocopy::IntoBytes;

use crate::barrier::{udma_from_device_barrier, udma_to_device_barrier};
use crate::completion::CQE_SIZE;
pub use crate::completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion, decode};
pub use crate::qp_table::QpTable;
use crate::qp_table::{Held, HeldRef, cqe_qpn_key};
use crate::wq::RingPtr;

/// The bits of `op_own ^ parity` that are all 0 exactly for a CQE the fast step takes: the
/// owner bit equal to the lap parity (rdma-core `get_sw_cqe`; the opcode then is not INVALID
/// either) and the opcode nibble `MLX5_CQE_REQ` (0), a successful requester CQE. Bits 1..=3
/// (solicited, CQE format) do not matter.
const FAST_MASK: u8 = 0xf1;

/// The rotated `op_own ^ parity` of a software-owned CQE is below this ([`sw_owns_x`]).
const SW_OWNS_BELOW: u8 = 0x78;

/// [`bypass_hw::cqe::sw_owns`] (rdma-core `cq.c` `get_sw_cqe`: the opcode is not
/// `MLX5_CQE_INVALID` and the owner bit equals the consumer index's lap parity) from `x =
/// op_own ^ parity` as one comparison: rotated right by one, the owner mismatch is bit 7 and
/// the opcode bits 3..7, so the CQE is software's exactly when the result is below `0x78`.
#[inline(always)]
const fn sw_owns_x(x: u8) -> bool {
    x.rotate_right(1) < SW_OWNS_BELOW
}

/// True for the CQE opcodes that complete a receive-queue WQE (responder opcodes and
/// RESP_ERR: RESP_WR_IMM, RESP_SEND, RESP_SEND_IMM, RESP_SEND_INV are 1..=4, RESP_ERR 14).
#[inline(always)]
const fn completes_a_receive(op: CqeOpcode) -> bool {
    (0x401e_u32 >> (op.0 & 0xf)) & 1 != 0
}

/// What a poll step took: the completed WQE's `wr_id` (0 for a QP not attached to the CQ) and
/// the CQE's opcode.
#[derive(Debug, Clone, Copy)]
struct Taken {
    wr_id: u64,
    opcode: CqeOpcode,
}

/// What the fast step at the consumer index found.
#[derive(Debug, Clone, Copy)]
enum Fast {
    /// It took a successful requester CQE of the cached QP: its `wr_id`, and the CQE (kept,
    /// not recomputed: the retire's store may alias the poller's fields).
    Took(u64, NonNull<Cqe64>),
    /// Software owns no CQE there.
    Empty,
    /// Software owns a CQE the fast step does not take (another opcode, another QP): its
    /// opcode, for the cold step.
    Cold(CqeOpcode),
}

/// What the first step of a one-shot or extended poll ([`CqPoller::acquire_fast`]) found.
enum FastStep<'t> {
    /// The fast step took the CQE at consumer index `ci` (its `wr_id`); the consumer side is
    /// held, by `held`.
    Took {
        /// The consumer side.
        held: Held<'t>,
        /// The consumer index of the CQE taken.
        ci: u64,
        /// The completed WQE's `wr_id`.
        wr_id: u64,
        /// The CQE.
        p: NonNull<Cqe64>,
    },
    /// Nothing to take, or another poll or a clean holds the consumer side: not held.
    Nothing,
    /// A software-owned CQE of `opcode` at consumer index `ci` that the fast step does not
    /// take (the caller's cold path does); the consumer side is held, its `Held` kept: the
    /// cold path takes it back ([`Held::resume`]), so that the hot path passes it nothing.
    Cold {
        /// The consumer index of that CQE.
        ci: u64,
        /// Its opcode.
        opcode: CqeOpcode,
    },
}

/// Why [`CqPoller::new`] refused a ring: each names what does not fit and the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CqGeometryError {
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
}

// SAFETY: the pointers are addresses inside `ring` and `dbr` (which are `Send` and `Sync`, see
// `RingPtr`); what crosses threads is the right to poll, exercised through `&mut self` and the
// table's consumer side.
unsafe impl Send for CqPoller {}
// SAFETY: as for `Send`; `&self` methods only read ring bytes with volatile loads, and what
// they change in the table they change through its `Held`, which one thread at a time has.
unsafe impl Sync for CqPoller {}

impl CqPoller {
    /// A poller over `ring` (`nent` 64-byte CQEs: the size every CQ of the driver is created
    /// with, `cq.rs` deriving its `cqe_sz` from the same constant) with its doorbell record at
    /// the start of `dbr` (8 bytes: CI word, arm word).
    ///
    /// Errors ([`CqGeometryError`]): `nent` not a power of two, `nent * 64` beyond the ring, or
    /// a doorbell record shorter than 8 bytes or not 4-byte aligned.
    pub fn new(
        ring: RingPtr,
        nent: u32,
        dbr: RingPtr,
        table: Arc<QpTable>,
    ) -> Result<Self, CqGeometryError> {
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

    /// Removes the unpolled CQEs of QP `qpn` from this CQ (see [`QpTable::clean`]).
    pub fn clean(&self, qpn: u32) -> u32 {
        self.table.clean(&self.ring, self.nent, &self.dbr, qpn)
    }

    /// The raw 64 bytes of the CQE at consumer index `ci` (owned by software or not), read with
    /// volatile loads (research access).
    pub fn cqe_bytes(&self, ci: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        self.ring
            .read(((ci & self.mask) as usize) * CQE_SIZE, &mut b);
        b
    }

    // ---- The ring.

    /// The address of the CQE of consumer index `ci` (inside the ring, whatever `ci`).
    #[inline(always)]
    fn cqe_ptr(&self, ci: u64) -> NonNull<Cqe64> {
        let slot = (ci & u64::from(self.mask)) as usize;
        // SAFETY: `slot < nent` (`mask == nent - 1`, `nent` a power of two) and
        // `nent * 64 <= ring.len()` (checked in `new`), so the 64 bytes at `cqe0 + slot * 64`
        // are inside the ring, which stays mapped while `self` lives.
        unsafe { self.cqe0.add(slot * CQE_SIZE) }.cast()
    }

    /// The CQE at consumer index `ci`, which a step of this poll has taken.
    ///
    /// # Safety
    /// A step of the poll holding the consumer side found the CQE software's (owner bit checked,
    /// read barrier passed), and the consumer index has not been published past it since: the
    /// device does not write it until then, and the reference must not outlive that.
    #[inline(always)]
    unsafe fn taken_cqe(&self, ci: u64) -> &Cqe64 {
        // SAFETY: inside the ring (`cqe_ptr`), `Cqe64` has alignment 1 and accepts any bytes;
        // the caller's contract keeps the device off it.
        unsafe { self.cqe_ptr(ci).as_ref() }
    }

    /// The lap parity the owner bit of the CQE at `ci` must have to be software's (0 or 1).
    #[inline(always)]
    fn parity(&self, ci: u64) -> u8 {
        u8::from(ci & u64::from(self.nent) != 0)
    }

    /// Moves the consumer count to `ci` and publishes the consumer index in the doorbell
    /// record (rdma-core `update_cons_index`), the consumer side held by `held`.
    #[inline(always)]
    fn publish_ci(&self, held: HeldRef<'_>, ci: u64) {
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

    // ---- The one step every poll form takes.

    /// The fast step at consumer index `ci` (`held`: the consumer side of `self.table`): a
    /// software-owned successful requester CQE of the cached QP, retired (the QP's SQ tail
    /// moved past it); else what is there for the cold step, or nothing.
    #[inline(always)]
    fn take_fast(&self, held: HeldRef<'_>, ci: u64) -> Fast {
        // SAFETY: byte 63 of a CQE inside the ring (`cqe_ptr`); volatile: the device writes it
        // concurrently.
        let op_own = unsafe { self.cqe_ptr(ci).cast::<u8>().add(63).read_volatile() };
        // The lap parity folded into the owner bit: 0 in every bit of `FAST_MASK` exactly for
        // a software-owned `MLX5_CQE_REQ` (one test); the same byte gives the ownership of
        // other opcodes.
        let x = op_own ^ self.parity(ci);
        if x & FAST_MASK != 0 {
            return if sw_owns_x(x) {
                Fast::Cold(CqeOpcode(x >> 4))
            } else {
                Fast::Empty
            };
        }
        // Software's: read nothing else of the CQE before this barrier.
        udma_from_device_barrier();
        // SAFETY: software's (owner bit checked, barrier passed) until the consumer index is
        // published past it, after this step.
        let cqe = unsafe { self.taken_cqe(ci) };
        let key = cqe_qpn_key(u32::from_ne_bytes(cqe.sop_drop_qpn.to_bytes()));
        let Some(w) = held.cached(key) else {
            return Fast::Cold(CqeOpcode::REQ);
        };
        Fast::Took(w.complete_send_word(send_word(cqe)), self.cqe_ptr(ci))
    }

    /// The cold step: the CQE `p` of `opcode`, which the fast step found software's and did
    /// not take. Its QP is looked up in the table (a requester CQE: past the cache, which the
    /// fast step missed) and its WQE retired: a receive CQE the RQ's oldest, a send CQE every
    /// SQ WQE up to `wqe_counter` (rdma-core `mlx5_parse_cqe`). No second ownership test; the
    /// read barrier only where the fast step did not pass it (another opcode than REQ).
    ///
    /// # Safety
    /// `p` is a CQE of this poller's ring that the fast step of a poll holding the consumer
    /// side (`held`) found software's with opcode `opcode`, not yet given back (the consumer
    /// index not published past it).
    #[cold]
    #[inline(never)]
    unsafe fn take_cold(held: HeldRef<'_>, p: NonNull<Cqe64>, opcode: CqeOpcode) -> Taken {
        if opcode != CqeOpcode::REQ {
            // The fast step stopped at the opcode, before its barrier.
            udma_from_device_barrier();
        }
        // SAFETY: inside the ring and software's (the caller's contract; the barrier above or
        // the fast step's) until the consumer index is published past it, after this step;
        // `Cqe64` has alignment 1 and accepts any bytes.
        let cqe = unsafe { p.as_ref() };
        let word = u32::from_ne_bytes(cqe.sop_drop_qpn.to_bytes());
        let qpn = u32::from_be(word) & 0x00ff_ffff;
        let w = if opcode == CqeOpcode::REQ {
            held.find_uncached(qpn, cqe_qpn_key(word))
        } else {
            held.find(qpn)
        };
        let wr_id = match w {
            None => 0,
            Some(w) if completes_a_receive(opcode) => recv_wr_id(w, cqe),
            Some(w) => w.complete_send_word(send_word(cqe)),
        };
        Taken { wr_id, opcode }
    }

    /// [`CqPoller::take_cold`], then the completion: out of line, so that the batch poll's
    /// fast step keeps its registers and its own decode.
    ///
    /// # Safety
    /// As [`CqPoller::take_cold`].
    #[cold]
    #[inline(never)]
    unsafe fn cold_completion(
        held: HeldRef<'_>,
        p: NonNull<Cqe64>,
        opcode: CqeOpcode,
    ) -> WorkCompletion {
        // SAFETY: the caller's contract, passed on; the CQE stays software's while read here.
        unsafe {
            let t = Self::take_cold(held, p, opcode);
            completion(held, p.as_ref(), t)
        }
    }

    /// One step at `ci`: the fast step, else the cold one; `None` when software owns no CQE
    /// there.
    #[inline(always)]
    fn step(&self, held: HeldRef<'_>, ci: u64) -> Option<Taken> {
        match self.take_fast(held, ci) {
            Fast::Took(wr_id, _) => Some(Taken {
                wr_id,
                opcode: CqeOpcode::REQ,
            }),
            Fast::Empty => None,
            // SAFETY: the fast step found `p` software's, with `held` held.
            Fast::Cold(opcode) => Some(unsafe { Self::take_cold(held, self.cqe_ptr(ci), opcode) }),
        }
    }

    /// The first step of a one-shot or extended poll: take the consumer side, then the fast
    /// step at the consumer index; the side is released again when there is nothing to take.
    #[inline(always)]
    fn acquire_fast(&self) -> FastStep<'_> {
        let Some(held) = self.table.try_acquire() else {
            return FastStep::Nothing;
        };
        let ci = held.get().ci();
        match self.take_fast(held.get(), ci) {
            Fast::Took(wr_id, p) => FastStep::Took { held, ci, wr_id, p },
            Fast::Empty => {
                held.release();
                FastStep::Nothing
            }
            Fast::Cold(opcode) => {
                held.keep();
                FastStep::Cold { ci, opcode }
            }
        }
    }

    // ---- The poll forms.

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
            match this.take_fast(held.get(), ci) {
                Fast::Took(wr_id, p) => {
                    let t = Taken {
                        wr_id,
                        opcode: CqeOpcode::REQ,
                    };
                    // SAFETY: the fast step took the CQE at `p` (consumer index `ci`): inside
                    // the ring, software's until the consumer index is published past it, only
                    // after the loop.
                    *slot = completion(held.get(), unsafe { p.as_ref() }, t);
                }
                Fast::Empty => break,
                Fast::Cold(opcode) => {
                    let p = this.cqe_ptr(ci);
                    // SAFETY: the fast step found the CQE at `p` software's, the side held;
                    // the consumer index is published past it only after the loop.
                    *slot = unsafe { Self::cold_completion(held.get(), p, opcode) }
                }
            }
            ci = ci.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            this.publish_ci(held.get(), ci);
        }
        held.release();
        (n, first)
    }

    /// Polls one completion.
    #[inline]
    pub fn poll_one(&mut self) -> Option<WorkCompletion> {
        self.poll_one_in(|wc, _, _| wc)
    }

    /// [`CqPoller::poll_one`] with the completion's sequence number: the consumer count
    /// ([`CqPoller::consumed`]) its CQE brought the CQ to, taken while the poll holds the
    /// consumer side, so that no QP destroy or reset (whose clean needs that side) falls
    /// between taking the CQE and numbering it. See [`QpTable::consumed`] for what the number
    /// proves.
    #[inline]
    pub fn poll_one_seq(&mut self) -> Option<(WorkCompletion, u64)> {
        self.poll_one_in(|wc, _, seq| (wc, seq))
    }

    /// Polls one completion and returns the CQE's 64 bytes too (research access; copies the
    /// CQE, so not for the hot path).
    pub fn poll_raw(&mut self) -> Option<(WorkCompletion, [u8; 64])> {
        self.poll_one_in(|wc, cqe, _| (wc, raw(cqe)))
    }

    /// [`CqPoller::poll_raw`] with the completion's sequence number (as
    /// [`CqPoller::poll_one_seq`]).
    pub fn poll_raw_seq(&mut self) -> Option<(WorkCompletion, [u8; 64], u64)> {
        self.poll_one_in(|wc, cqe, seq| (wc, raw(cqe), seq))
    }

    /// The body of the one-completion forms: the first step, then `make` of the completion,
    /// its CQE and its sequence number, then the consumer index published and the side
    /// released. The cold path is called in tail position (so the caller keeps no stack frame
    /// for it), with the consumer side held (its contract).
    #[inline(always)]
    fn poll_one_in<T, F>(&mut self, make: F) -> Option<T>
    where
        F: FnOnce(WorkCompletion, &Cqe64, u64) -> T,
    {
        let this: &CqPoller = self;
        match this.acquire_fast() {
            FastStep::Took { held, ci, wr_id, p } => {
                let t = Taken {
                    wr_id,
                    opcode: CqeOpcode::REQ,
                };
                // SAFETY: the fast step took the CQE at `p` (consumer index `ci`): inside the
                // ring, software's until `finish` publishes past it, last.
                Some(unsafe { this.finish(held, ci, p.as_ref(), t, make) })
            }
            FastStep::Nothing => None,
            // SAFETY: `Cold`: `acquire_fast` took the consumer side and kept it for this call
            // (`Held::keep`); no other `Held` of it exists.
            FastStep::Cold { ci, opcode } => unsafe { this.poll_one_cold(ci, opcode, make) },
        }
    }

    /// [`CqPoller::poll_one_in`]'s cold path: the cold step, then [`CqPoller::finish`]. Out
    /// of line and in tail position, so the one-completion forms keep no frame for it.
    ///
    /// # Safety
    /// This thread holds the table's consumer side, its `Held` kept (`Held::keep`) for this
    /// call, no other `Held` of it exists, and the fast step found a CQE of `opcode` software's
    /// at `ci` (a [`FastStep::Cold`]).
    #[cold]
    #[inline(never)]
    unsafe fn poll_one_cold<T, F>(&self, ci: u64, opcode: CqeOpcode, make: F) -> Option<T>
    where
        F: FnOnce(WorkCompletion, &Cqe64, u64) -> T,
    {
        // SAFETY: the caller's contract above.
        let held = unsafe { Held::resume(&self.table) };
        // SAFETY: the fast step found the CQE at `ci` software's (the caller's contract); the
        // cold step takes it and `finish` publishes past it, last.
        unsafe {
            let t = Self::take_cold(held.get(), self.cqe_ptr(ci), opcode);
            Some(self.finish(held, ci, self.taken_cqe(ci), t, make))
        }
    }

    /// The end of a one-completion poll: `make` of the completion a step took at `ci` (its
    /// CQE `cqe`), the CQE and its sequence number; then the consumer index published past it
    /// and the side released.
    ///
    /// # Safety
    /// `cqe` is the CQE at `ci`, which a step of this poll (the side held by `held`) took; it
    /// is not read after this call.
    #[inline(always)]
    unsafe fn finish<T, F>(&self, held: Held<'_>, ci: u64, cqe: &Cqe64, t: Taken, make: F) -> T
    where
        F: FnOnce(WorkCompletion, &Cqe64, u64) -> T,
    {
        let wc = completion(held.get(), cqe, t);
        let r = make(wc, cqe, ci.wrapping_add(1));
        self.publish_ci(held.get(), ci.wrapping_add(1));
        held.release();
        r
    }

    /// Takes the oldest unpolled completion (rdma-core `mlx5_start_poll`), or `None` if there
    /// is none (or a QP destroy/reset is cleaning this CQ right now: try again later). The
    /// guard reads its fields on demand, moves to the next with
    /// [`CqPollGuard::next_poll`], and publishes the consumer index when it drops.
    #[inline(always)]
    pub fn start_poll(&mut self) -> Option<CqPollGuard<'_>> {
        // Shared from here on; the `&mut` borrow keeps other polls out while the guard lives.
        let this: &CqPoller = self;
        match this.acquire_fast() {
            FastStep::Took {
                held, ci, wr_id, ..
            } => Some(CqPollGuard {
                poller: this,
                held: ManuallyDrop::new(held),
                wr_id,
                ci,
                opcode: CqeOpcode::REQ,
            }),
            FastStep::Nothing => None,
            FastStep::Cold { ci, opcode } => {
                // SAFETY: `Cold`: `acquire_fast` took the consumer side and kept it for this
                // call; no other `Held` of it exists.
                let t = unsafe { this.start_poll_cold(ci, opcode) };
                // SAFETY: `start_poll_cold` kept the side held, its `Held` kept for this one.
                let held = unsafe { Held::resume(&this.table) };
                Some(CqPollGuard {
                    poller: this,
                    wr_id: t.wr_id,
                    // Read again, not kept from `acquire_fast`: a `ci` live across the cold
                    // call costs the fast path a register (and its spill).
                    ci: held.get().ci(),
                    held: ManuallyDrop::new(held),
                    opcode: t.opcode,
                })
            }
        }
    }

    /// [`CqPoller::start_poll`]'s cold path: the cold step at the consumer index `ci`, the
    /// side kept held for the guard.
    ///
    /// # Safety
    /// As [`CqPoller::poll_one_cold`].
    #[cold]
    #[inline(never)]
    unsafe fn start_poll_cold(&self, ci: u64, opcode: CqeOpcode) -> Taken {
        // SAFETY: the caller's contract above.
        let held = unsafe { Held::resume(&self.table) };
        // SAFETY: the fast step found the CQE at `ci` software's (the caller's contract).
        let t = unsafe { Self::take_cold(held.get(), self.cqe_ptr(ci), opcode) };
        // Held on: the guard `start_poll` builds takes the side back (`Held::resume`).
        held.keep();
        t
    }
}

/// The completion a step took (`t`) from the CQE `cqe`: decoded, with the `wr_id`, and for a
/// receive the index of the receive WQE it completed ([`WorkCompletion::wqe_index`]).
#[inline(always)]
fn completion(held: HeldRef<'_>, cqe: &Cqe64, t: Taken) -> WorkCompletion {
    let mut wc = decode(cqe).with_wr_id(t.wr_id);
    if completes_a_receive(t.opcode)
        && let Some(index) = rq_index(held, wc.qpn())
    {
        wc.set_wqe_index(index);
    }
    wc
}

/// CQE bytes 60..64 (`wqe_counter`, `signature`, `op_own`) as one big-endian word, which
/// [`crate::wq::WqShared::complete_send_word`] retires by: a constant range, so one load and
/// a byte swap.
#[inline(always)]
fn send_word(cqe: &Cqe64) -> u32 {
    cqe.as_bytes()
        .get(60..64)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_be_bytes)
}

/// The CQE's 64 bytes.
fn raw(cqe: &Cqe64) -> [u8; 64] {
    zerocopy::transmute!(*cqe)
}

/// Retires the receive WQE a receive CQE of `w`'s QP names (out of line: the requester
/// CQEs of the cold step do not pay for the SRQ case's `wqe_counter` read).
#[cold]
#[inline(never)]
fn recv_wr_id(w: &crate::wq::WqShared, cqe: &Cqe64) -> u64 {
    w.complete_recv_at(cqe.wqe_counter.get())
}

/// The index (modulo 2^16) of the receive WQE that QP `qpn`'s last receive completion, just
/// taken, completed (rdma-core `handle_responder` takes `wq->tail` for a non-SRQ receive and
/// does not read `wqe_counter`): the step moved its receive tail past it, and only the holder
/// of the consumer side moves it. `None` for a QP no longer attached (its completion keeps the
/// CQE's `wqe_counter`).
#[cold]
#[inline(never)]
fn rq_index(held: HeldRef<'_>, qpn: u32) -> Option<u16> {
    // A QP on an SRQ keeps the CQE's `wqe_counter`: the SRQ WQE's index.
    held.find(qpn)
        .filter(|w| w.srq().is_none())
        .map(|w| w.rq_tail().wrapping_sub(1) as u16)
}

/// The current CQE of a poll in progress, and the right to take more. While it lives the
/// CQ's consumer side is held (as by one `poll` call: a QP destroy or reset that must clean
/// the CQ waits for it, so keep it short) and the CQEs it walked over stay software's: the
/// consumer index is published when it drops ([`CqPollGuard::end_poll`]).
///
/// Leaking it (`mem::forget`) keeps the CQ held: later polls find nothing and a QP destroy or
/// reset on this CQ waits forever. Let it drop.
///
/// Every CQE it reaches is retired at once (its `wr_id` looked up, the QP's SQ or RQ tail
/// moved), as [`CqPoller::poll_one`] does; the other fields are read from the CQE when asked
/// (every accessor goes through [`WorkCompletion`], so a lazy read and `poll_one` cannot
/// disagree).
#[derive(Debug)]
pub struct CqPollGuard<'a> {
    /// Shared, but reborrowed from the `&mut` that `start_poll` took: no other poll of this
    /// CQ can start while the guard lives.
    poller: &'a CqPoller,
    /// The consumer side of `poller.table`, held while the guard lives (released in `Drop`,
    /// after the consumer index is published).
    held: ManuallyDrop<Held<'a>>,
    wr_id: u64,
    /// Consumer index of the current CQE (free-running, as `QpTable::ci`): software's until
    /// the consumer index is published past it, which happens in `Drop`, after the last read
    /// of it.
    ci: u64,
    /// The current CQE's opcode, kept so that `is_ok`/`status` need no second read of the
    /// CQE (and fold to constants where the poll knows it).
    opcode: CqeOpcode,
}

impl CqPollGuard<'_> {
    /// Moves to the next completion (rdma-core `mlx5_next_poll`); false if there is none yet,
    /// and the guard then still shows the previous one (already consumed: read nothing more
    /// from it, end the poll).
    #[inline(always)]
    pub fn next_poll(&mut self) -> bool {
        let ci = self.ci.wrapping_add(1);
        let Some(t) = self.poller.step(self.held.get(), ci) else {
            return false;
        };
        self.ci = ci;
        self.wr_id = t.wr_id;
        self.opcode = t.opcode;
        true
    }

    /// Ends the poll: publishes the consumer index past the last CQE taken (rdma-core
    /// `mlx5_end_poll` → `update_cons_index`) and releases the CQ. Same as dropping the guard.
    #[inline]
    pub fn end_poll(self) {}

    /// The CQE decoded, without the receive WQE index (what every field accessor but
    /// [`CqPollGuard::wqe_index`] reads: no table lookup on a receive completion).
    #[inline(always)]
    fn decoded(&self) -> WorkCompletion {
        // SAFETY: the guard's step took the CQE at `ci`, and only `Drop` publishes past it,
        // after every borrow of `self` ended.
        decode(unsafe { self.poller.taken_cqe(self.ci) }).with_wr_id(self.wr_id)
    }

    /// The whole completion, decoded (the same value [`CqPoller::poll_one`] returns).
    #[inline(always)]
    pub fn completion(&self) -> WorkCompletion {
        let t = Taken {
            wr_id: self.wr_id,
            opcode: self.opcode,
        };
        // SAFETY: as in `decoded`.
        completion(
            self.held.get(),
            unsafe { self.poller.taken_cqe(self.ci) },
            t,
        )
    }

    /// The `wr_id` (`ibv_wc_read_wr_id`; for a send, the one `wqe_counter` names).
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The current completion's sequence number: the consumer count
    /// ([`CqPoller::consumed`]) its CQE brings the CQ to, known while the guard holds the
    /// consumer side (the same number [`CqPoller::poll_one_seq`] gives; see
    /// [`QpTable::consumed`] for what it proves).
    #[inline(always)]
    pub fn seq(&self) -> u64 {
        self.ci.wrapping_add(1)
    }

    /// Success, or the syndrome (`wc.status`).
    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        if self.is_ok() {
            WcStatus::Success
        } else {
            self.decoded().status()
        }
    }

    /// True when the request succeeded (from the opcode kept when the CQE was taken: no
    /// read of the CQE; the same test as [`WorkCompletion::is_ok`]).
    #[inline(always)]
    pub fn is_ok(&self) -> bool {
        !matches!(self.opcode, CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR)
    }

    /// What completed (`ibv_wc_read_opcode`).
    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        self.decoded().opcode()
    }

    /// Bytes received, read, or 8 for atomics (`ibv_wc_read_byte_len`).
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.decoded().byte_len()
    }

    /// Immediate data or invalidated rkey (`ibv_wc_read_imm_data`).
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.decoded().imm()
    }

    /// The local QP (`ibv_wc_read_qp_num`).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.decoded().qpn()
    }

    /// The remote QP of a receive (`ibv_wc_read_src_qp`).
    #[inline(always)]
    pub fn src_qp(&self) -> u32 {
        self.decoded().src_qp()
    }

    /// Flags (`ibv_wc_read_wc_flags`).
    #[inline(always)]
    pub fn flags(&self) -> WcFlags {
        self.decoded().flags()
    }

    /// The WQE index the completion names (for a receive, the receive WQE's).
    #[inline(always)]
    pub fn wqe_index(&self) -> u16 {
        self.completion().wqe_index()
    }

    /// The vendor syndrome of an error completion (`ibv_wc_read_vendor_err`).
    #[inline(always)]
    pub fn vendor_err(&self) -> u8 {
        self.decoded().vendor_err()
    }
}

impl Drop for CqPollGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.poller
            .publish_ci(self.held.get(), self.ci.wrapping_add(1));
        // SAFETY: this is the guard's drop: `held` is not used after this, so the side is
        // released exactly once, here.
        unsafe { ManuallyDrop::take(&mut self.held) }.release();
    }
}

#[cfg(test)]
mod tests;
