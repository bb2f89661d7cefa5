//! The extended poll: a guard over the CQ's consumer side that reads each CQE's fields on
//! demand and publishes the consumer index once, when it ends — rdma-core's
//! `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` with the lazy `ibv_wc_read_*`
//! accessors (`providers/mlx5/cq.c` `mlx5_start_poll`, `mlx5_next_poll`, `mlx5_end_poll`:
//! `wr_id` and status are known as soon as the entry is taken, everything else is read from
//! the CQE when asked; `update_cons_index` runs in `end_poll`).
//!
//! Owns: [`CqPollGuard`], [`CqPoller::start_poll`], and the fast step every poll starts with
//! (`CqPoller::acquire_fast`, `CqPoller::take_fast`). Must not: decode differently from
//! [`crate::poll::WorkCompletion`] (every accessor goes through it, so a lazy read and
//! `poll_one` cannot disagree), allocate, lock, make syscalls or format.

use core::ptr::NonNull;

use bypass_hw::cqe::{Cqe64, CqeOpcode};
use zerocopy::IntoBytes;

use crate::barrier::udma_from_device_barrier;
use crate::poll::{CqPoller, SW_OWNS_BELOW, WcFlags, WcOpcode, WcStatus, WorkCompletion, decode};
use crate::qp_table::{Held, HeldRef, QpTable, cqe_qpn_key};

/// The current CQE of a poll in progress, and the right to take more. While it lives the
/// CQ's consumer side is held (as by one `poll` call: a QP destroy or reset that must clean
/// the CQ waits for it, so keep it short) and the CQEs it walked over stay software's: the
/// consumer index is published when it drops ([`CqPollGuard::end_poll`]).
///
/// Leaking it (`mem::forget`) keeps the CQ held: later polls find nothing and a QP destroy or
/// reset on this CQ waits forever. Let it drop.
///
/// Every CQE it reaches is retired at once (its `wr_id` looked up, the QP's SQ or RQ tail
/// moved), as [`CqPoller::poll_one`] does; the other fields are read from the CQE when asked.
#[derive(Debug)]
pub struct CqPollGuard<'a> {
    /// Shared, but reborrowed from the `&mut` that `start_poll` took: no other poll of this
    /// CQ can start while the guard lives.
    poller: &'a CqPoller,
    /// The consumer side of `poller.table`, held while the guard lives (released in `Drop`,
    /// after the consumer index is published).
    held: Held<'a>,
    wr_id: u64,
    /// Consumer index of the current CQE (free-running, as `QpTable::ci`): software's until
    /// the consumer index is published past it, which happens in `Drop`, after the last read
    /// of it.
    ci: u64,
    /// The current CQE's opcode (`op_own >> 4`), kept so that `is_ok`/`status` need no
    /// second read of the CQE (and fold to constants where the poll knows it).
    opcode: CqeOpcode,
}

/// What the cold path of a poll step took: the `wr_id` and the CQE's opcode, or nothing
/// (`opcode: None`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) wr_id: u64,
    pub(crate) opcode: Option<CqeOpcode>,
}

/// The bits of `op_own ^ parity` that are all 0 exactly for a CQE the fast path takes: the
/// owner bit equal to the lap parity (rdma-core `get_sw_cqe`; the opcode then is not INVALID
/// either) and the opcode nibble `MLX5_CQE_REQ` (0), a successful requester CQE. Bits 1..=3
/// (solicited, CQE format) do not matter.
const FAST_MASK: u8 = 0xf1;

/// What the first step of a poll ([`CqPoller::acquire_fast`]) found.
pub(crate) enum FastStep<'t> {
    /// The fast step took the CQE at consumer index `ci` (its `wr_id`, its address `p`); the
    /// consumer side is held, by `held`.
    Taken {
        /// The consumer side.
        held: Held<'t>,
        /// The consumer index of the CQE taken.
        ci: u64,
        /// The completed WQE's `wr_id`.
        wr_id: u64,
        /// The CQE, software's until the consumer index is published past it.
        p: NonNull<Cqe64>,
    },
    /// Nothing to take, or another poll or a clean holds the consumer side: not held.
    Nothing,
    /// A software-owned CQE at consumer index `ci` that the fast step does not take (the
    /// caller's cold path does); the consumer side is held, its `Held` kept: the cold
    /// path takes it back ([`Held::resume`]), so that the hot path passes it nothing (a
    /// `Held` passed to the call is a pointer the hot path must compute early: measured, 5
    /// instructions more on every `start_poll`).
    Slow {
        /// The consumer index of that CQE.
        ci: u64,
    },
}

impl CqPoller {
    /// The first step every poll shares: take the consumer side (`table`, which is
    /// `self.table`), then the fast step at the consumer index; the side is released again
    /// when there is nothing to take.
    #[inline(always)]
    pub(crate) fn acquire_fast<'t>(&self, table: &'t QpTable) -> FastStep<'t> {
        let Some(held) = table.try_acquire() else {
            return FastStep::Nothing;
        };
        let ci = held.get().ci();
        match self.take_fast(held.get(), ci) {
            Ok((wr_id, p)) => FastStep::Taken { held, ci, wr_id, p },
            Err(false) => {
                held.release();
                FastStep::Nothing
            }
            Err(true) => {
                held.keep();
                FastStep::Slow { ci }
            }
        }
    }

    /// The fast step of a poll at consumer index `ci`: a software-owned successful requester
    /// CQE of the cached QP, retired (its `wr_id` returned with the CQE's address, the QP's SQ
    /// tail moved past it).
    /// `Err(true)` for any other CQE that software owns (another opcode, another QP: the
    /// caller's cold path takes it), `Err(false)` when there is none (not software's: the
    /// caller returns without a call). `held` is the consumer side of `self.table`.
    #[inline(always)]
    pub(crate) fn take_fast(
        &self,
        held: HeldRef<'_>,
        ci: u64,
    ) -> Result<(u64, NonNull<Cqe64>), bool> {
        self.take_req(ci, |key| held.cached(key))
    }

    /// [`CqPoller::take_fast`] with the QP found by `lookup` (from the CQE's [`qpn_key`]):
    /// the cache on the hot path; the home slot ([`HeldRef::find_home`]) on the poll guard's
    /// cold one, where a CQE of another QP than the last would otherwise take the whole
    /// decode (two QPs alternating on a CQ: 126 instructions a `start_poll` became 105).
    /// Trying the home slot on the hot path itself measured 55 for that case, but 41 for the
    /// cache hit (40 now: the miss block sat in the hit's straight line, whatever the hint).
    ///
    /// [`qpn_key`]: crate::qp_table::qpn_key
    #[inline(always)]
    fn take_req<'h>(
        &self,
        ci: u64,
        lookup: impl FnOnce(u32) -> Option<&'h crate::wq::WqShared>,
    ) -> Result<(u64, NonNull<Cqe64>), bool> {
        let p = self.cqe_ptr(ci);
        // `op_own` with the lap parity folded into the owner bit: 0 in every bit of
        // `FAST_MASK` exactly for a software-owned `MLX5_CQE_REQ` (one test, the byte kept
        // for the ownership test of other opcodes, which `sw_owns_fast` makes of the same
        // xor).
        let x = Self::op_own(p) ^ self.parity(ci);
        if x & FAST_MASK != 0 {
            return Err(x.rotate_right(1) < SW_OWNS_BELOW);
        }
        udma_from_device_barrier();
        // SAFETY: inside the ring (`cqe_ptr`), software's (owner bit checked, read barrier
        // passed) until the consumer index is published past it, after this step; `Cqe64` has
        // alignment 1 and accepts any bytes.
        let cqe = unsafe { p.as_ref() };
        let key = cqe_qpn_key(u32::from_ne_bytes(cqe.sop_drop_qpn.to_bytes()));
        let Some(w) = lookup(key) else {
            return Err(true);
        };
        // `wqe_counter`, `signature`, `op_own` (bytes 60..64): a constant range, so the `get`
        // never fails and this is one load and a byte swap.
        let word = cqe
            .as_bytes()
            .get(60..64)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_be_bytes);
        Ok((w.complete_send_word(word), p))
    }

    /// The poll guard's cold step at `ci`: a successful requester CQE of a QP in its home slot
    /// as the fast step takes one, else the general step ([`CqPoller::general_step`]: the
    /// owner-bit rule, any opcode, the table lookup and retire); kept as the guard keeps it:
    /// the `wr_id` and the CQE's opcode, or nothing (`opcode: None`) when software owns no
    /// CQE there.
    #[cold]
    #[inline(never)]
    fn take_slow(&self, held: HeldRef<'_>, ci: u64) -> Taken {
        match self.take_req(ci, |key| held.find_home(key)) {
            Ok((wr_id, _)) => Taken {
                wr_id,
                opcode: Some(CqeOpcode::REQ),
            },
            Err(false) => Taken {
                wr_id: 0,
                opcode: None,
            },
            Err(true) => self.guard_general_step(held, ci),
        }
    }

    /// [`CqPoller::take_slow`] past the home slot: the general step (out of line, so that the
    /// home-slot case above saves no registers for it).
    #[cold]
    #[inline(never)]
    fn guard_general_step(&self, held: HeldRef<'_>, ci: u64) -> Taken {
        match self.general_step(held, ci) {
            Some(wc) => Taken {
                wr_id: wc.wr_id(),
                opcode: Some(wc.cqe_opcode()),
            },
            None => Taken {
                wr_id: 0,
                opcode: None,
            },
        }
    }

    /// [`CqPoller::start_poll`]'s cold path ([`FastStep::Slow`]: the consumer side held, its
    /// `Held` kept): the general step at the consumer index, its result left in
    /// `self.taken`; the side released when there is nothing to take. Returns `self` (or
    /// `None`), so that nothing of the caller's stays live across this call and the hot path
    /// needs no stack frame (returning the whole guard from here put it in memory on every
    /// path: 36.3 instructions per CQE of `start_poll` + 15 `next_poll` became 45.3).
    ///
    /// # Safety
    /// This thread holds the table's consumer side, its `Held` kept (`Held::keep`) for this
    /// call, and no other `Held` of it exists (a `FastStep::Slow`).
    #[cold]
    #[inline(never)]
    unsafe fn start_poll_slow(&self) -> Option<&Self> {
        // SAFETY: the caller's contract above.
        let held = unsafe { Held::resume(&self.table) };
        let t = self.take_slow(held.get(), held.get().ci());
        self.taken.set(t);
        if t.opcode.is_none() {
            held.release();
            return None;
        }
        // Held on: the guard `start_poll` builds takes the side back (`Held::resume`).
        held.keep();
        Some(self)
    }

    /// Takes the oldest unpolled completion (rdma-core `mlx5_start_poll`), or `None` if there
    /// is none (or a QP destroy/reset is cleaning this CQ right now: try again later). The
    /// guard reads its fields on demand, moves to the next with
    /// [`CqPollGuard::next_poll`], and publishes the consumer index when it drops.
    #[inline(always)]
    pub fn start_poll(&mut self) -> Option<CqPollGuard<'_>> {
        // Shared from here on; the `&mut` borrow keeps other polls out while the guard lives.
        let this: &CqPoller = self;
        match this.acquire_fast(&this.table) {
            FastStep::Taken {
                held, ci, wr_id, ..
            } => {
                return Some(CqPollGuard {
                    poller: this,
                    held,
                    wr_id,
                    ci,
                    opcode: CqeOpcode::REQ,
                });
            }
            FastStep::Nothing => return None,
            FastStep::Slow { .. } => {}
        }
        // SAFETY: `Slow`: `acquire_fast` took the consumer side and kept it for this call; no
        // other `Held` of it exists.
        let poller = unsafe { this.start_poll_slow() }?;
        let taken = poller.taken.get();
        // SAFETY: `start_poll_slow` returned `Some`: it took a CQE and kept the side held, its
        // `Held` kept for this one.
        let held = unsafe { Held::resume(&poller.table) };
        let Some(opcode) = taken.opcode else {
            // Not reached: `start_poll_slow` returns `Some` only with an opcode.
            held.release();
            return None;
        };
        Some(CqPollGuard {
            poller,
            wr_id: taken.wr_id,
            ci: held.get().ci(),
            held,
            opcode,
        })
    }
}

impl CqPollGuard<'_> {
    /// Moves to the next completion (rdma-core `mlx5_next_poll`); false if there is none yet,
    /// and the guard then still shows the previous one (already consumed: read nothing more
    /// from it, end the poll).
    #[inline(always)]
    pub fn next_poll(&mut self) -> bool {
        let ci = self.ci.wrapping_add(1);
        let (wr_id, opcode) = match self.poller.take_fast(self.held.get(), ci) {
            Ok((wr_id, _)) => (wr_id, CqeOpcode::REQ),
            Err(false) => return false,
            Err(true) => {
                let t = self.poller.take_slow(self.held.get(), ci);
                let Some(op) = t.opcode else { return false };
                (t.wr_id, op)
            }
        };
        self.ci = ci;
        self.wr_id = wr_id;
        self.opcode = opcode;
        true
    }

    /// Ends the poll: publishes the consumer index past the last CQE taken (rdma-core
    /// `mlx5_end_poll` → `update_cons_index`) and releases the CQ. Same as dropping the guard.
    #[inline]
    pub fn end_poll(self) {}

    #[inline(always)]
    fn cqe(&self) -> &Cqe64 {
        // SAFETY: the CQE at `ci` is inside the ring (`CqPoller::cqe_ptr`), software's (owner
        // bit checked, read barrier passed when it was taken) and the device does not write
        // it again before the consumer index is published past it, which only `Drop` does
        // (after every borrow of `self` ended); `Cqe64` has alignment 1 and accepts any bytes.
        unsafe { self.poller.cqe_ptr(self.ci).as_ref() }
    }

    /// The CQE decoded, without the receive WQE index (what every field accessor but
    /// [`CqPollGuard::wqe_index`] reads: no table lookup on a receive completion).
    #[inline(always)]
    fn decoded(&self) -> WorkCompletion {
        decode(self.cqe()).with_wr_id(self.wr_id)
    }

    /// The whole completion, decoded (the same value [`CqPoller::poll_one`] returns).
    #[inline(always)]
    pub fn completion(&self) -> WorkCompletion {
        let wc = self.decoded();
        if wc.completes_a_receive() {
            return self.with_rq_index(wc);
        }
        wc
    }

    /// `wc`, a receive completion, with the index of the receive WQE it completed (as
    /// `poll::retire_on` sets it): its QP's receive tail was moved past it when the guard
    /// took it, and only the guard's holder moves it.
    #[cold]
    #[inline(never)]
    fn with_rq_index(&self, mut wc: WorkCompletion) -> WorkCompletion {
        if let Some(w) = self.held.get().find(wc.qpn()) {
            wc.set_wqe_index(w.rq_tail().wrapping_sub(1) as u16);
        }
        wc
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

    /// The WQE index the CQE carries.
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
        // SAFETY: this is the guard's drop: `held` is not used after this read, and `Held` has
        // no drop of its own, so the side is released exactly once, here.
        unsafe { core::ptr::read(&self.held) }.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::cqe::sw_owns;

    #[test]
    fn the_fast_test_takes_exactly_software_owned_requester_cqes() {
        for op_own in 0..=255u8 {
            for ci in [0u32, 8] {
                let x = op_own ^ u8::from(ci & 8 != 0);
                let owned = sw_owns(op_own, ci, 8);
                assert_eq!(
                    x & FAST_MASK == 0,
                    owned && op_own >> 4 == CqeOpcode::REQ.0,
                    "op_own {op_own:#x}, ci {ci}"
                );
                assert_eq!(
                    x.rotate_right(1) < SW_OWNS_BELOW,
                    owned,
                    "op_own {op_own:#x}, ci {ci}"
                );
            }
        }
    }
}
