//! The extended poll: a guard over the CQ's consumer side that reads each CQE's fields on
//! demand and publishes the consumer index once, when it ends — rdma-core's
//! `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` with the lazy `ibv_wc_read_*`
//! accessors (`providers/mlx5/cq.c` `mlx5_start_poll`, `mlx5_next_poll`, `mlx5_end_poll`:
//! `wr_id` and status are known as soon as the entry is taken, everything else is read from
//! the CQE when asked; `update_cons_index` runs in `end_poll`).
//!
//! Owns: [`CqPollGuard`] and [`CqPoller::start_poll`]. Must not: decode differently from
//! [`crate::poll::WorkCompletion`] (every accessor goes through it, so a lazy read and
//! `poll_one` cannot disagree), allocate, lock, make syscalls or format.

use core::ptr::NonNull;
use std::sync::atomic::Ordering;

use bypass_hw::cqe::Cqe64;

use crate::poll::{
    CqPoller, QpTable, WcFlags, WcOpcode, WcStatus, WorkCompletion, decode, retire_on,
};

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
    poller: &'a mut CqPoller,
    /// Consumer index of the current CQE.
    ci: u32,
    /// The current CQE: software's until the consumer index moves past it, which happens in
    /// `Drop`, after the last read through this pointer.
    cqe: NonNull<Cqe64>,
    wr_id: u64,
}

impl CqPoller {
    /// Takes the oldest unpolled completion (rdma-core `mlx5_start_poll`), or `None` if there
    /// is none (or a QP destroy/reset is cleaning this CQ right now: try again later). The
    /// guard reads its fields on demand, moves to the next with
    /// [`CqPollGuard::next_poll`], and publishes the consumer index when it drops.
    #[inline(always)]
    pub fn start_poll(&mut self) -> Option<CqPollGuard<'_>> {
        if !self.table.try_acquire() {
            return None;
        }
        let ci = self.table.ci.load(Ordering::Relaxed);
        let Some(cqe) = self.next_cqe(ci) else {
            self.table.release();
            return None;
        };
        let at = NonNull::from(cqe);
        let wc = decode(cqe);
        // The QP in its home slot of the table: retire here. Otherwise (a QPN collision, or
        // no such QP) the rest of the work is the cold path's, so that nothing of this
        // function stays live across a call.
        let Some(w) = self.table.lookup_home(wc.qpn()) else {
            return Some(self.start_poll_slow(ci, at));
        };
        let wr_id = retire_on(w, &wc);
        Some(CqPollGuard {
            poller: self,
            ci,
            cqe: at,
            wr_id,
        })
    }

    /// [`CqPoller::start_poll`] of a CQE whose QP is not in its home slot: the probing
    /// lookup (or none: `wr_id` 0, nothing retired, as [`CqPoller::poll_one`]).
    #[cold]
    #[inline(never)]
    fn start_poll_slow(&mut self, ci: u32, at: NonNull<Cqe64>) -> CqPollGuard<'_> {
        // SAFETY: `at` is the software-owned CQE `start_poll` just took (see `CqPollGuard::cqe`).
        let mut wc = decode(unsafe { at.as_ref() });
        self.retire(&mut wc);
        CqPollGuard {
            poller: self,
            ci,
            cqe: at,
            wr_id: wc.wr_id(),
        }
    }
}

impl CqPollGuard<'_> {
    /// Moves to the next completion (rdma-core `mlx5_next_poll`); false if there is none yet,
    /// and the guard then still shows the previous one (already consumed: read nothing more
    /// from it, end the poll).
    #[inline(always)]
    pub fn next_poll(&mut self) -> bool {
        let ci = self.ci.wrapping_add(1);
        let Some(cqe) = self.poller.next_cqe(ci) else {
            return false;
        };
        let at = NonNull::from(cqe);
        let wc = decode(cqe);
        self.ci = ci;
        self.cqe = at;
        self.wr_id = match self.poller.table.lookup_home(wc.qpn()) {
            Some(w) => retire_on(w, &wc),
            None => retire_probing(&self.poller.table, wc),
        };
        true
    }

    /// Ends the poll: publishes the consumer index past the last CQE taken (rdma-core
    /// `mlx5_end_poll` → `update_cons_index`) and releases the CQ. Same as dropping the guard.
    #[inline]
    pub fn end_poll(self) {}

    #[inline(always)]
    fn cqe(&self) -> &Cqe64 {
        // SAFETY: `cqe` points at a 64-byte CQE inside the ring (`CqPoller::next_cqe`) that
        // software owns (owner bit checked, read barrier passed) and that the device does not
        // write again before the consumer index moves past it, which only `Drop` does (after
        // every borrow of `self` ended); `Cqe64` has alignment 1 and accepts any bytes.
        unsafe { self.cqe.as_ref() }
    }

    /// The whole completion, decoded (the same value [`CqPoller::poll_one`] returns).
    #[inline(always)]
    pub fn completion(&self) -> WorkCompletion {
        decode(self.cqe()).with_wr_id(self.wr_id)
    }

    /// The `wr_id` (`ibv_wc_read_wr_id`; for a send, the one `wqe_counter` names).
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Success, or the syndrome (`wc.status`).
    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        self.completion().status()
    }

    /// True when the request succeeded.
    #[inline(always)]
    pub fn is_ok(&self) -> bool {
        self.completion().is_ok()
    }

    /// What completed (`ibv_wc_read_opcode`).
    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        self.completion().opcode()
    }

    /// Bytes received, read, or 8 for atomics (`ibv_wc_read_byte_len`).
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.completion().byte_len()
    }

    /// Immediate data or invalidated rkey (`ibv_wc_read_imm_data`).
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.completion().imm()
    }

    /// The local QP (`ibv_wc_read_qp_num`).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.completion().qpn()
    }

    /// The remote QP of a receive (`ibv_wc_read_src_qp`).
    #[inline(always)]
    pub fn src_qp(&self) -> u32 {
        self.completion().src_qp()
    }

    /// Flags (`ibv_wc_read_wc_flags`).
    #[inline(always)]
    pub fn flags(&self) -> WcFlags {
        self.completion().flags()
    }

    /// The WQE index the CQE carries.
    #[inline(always)]
    pub fn wqe_index(&self) -> u16 {
        self.completion().wqe_index()
    }

    /// The vendor syndrome of an error completion (`ibv_wc_read_vendor_err`).
    #[inline(always)]
    pub fn vendor_err(&self) -> u8 {
        self.completion().vendor_err()
    }
}

/// The retire step of [`CqPollGuard::next_poll`] when the CQE's QP is not in its home slot:
/// the probing lookup (or none: `wr_id` 0, nothing retired). By value, so the guard stays in
/// registers.
#[cold]
#[inline(never)]
fn retire_probing(table: &QpTable, mut wc: WorkCompletion) -> u64 {
    table.retire(&mut wc);
    wc.wr_id()
}

impl Drop for CqPollGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.poller.publish_ci(self.ci.wrapping_add(1));
        self.poller.table.release();
    }
}
