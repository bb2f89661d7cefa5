//! The burst ledger: which QPs' memory by-reference bursts still read, and what waits for
//! those reads.
//!
//! Owns: [`Ledger`]: per QP, the count of its bursts in flight ([`BurstReads`]) and the error
//! CQEs held behind them (an error completion, then the SQ flush, in SQ order); the QPs whose
//! held CQEs the steps retry; the commands (2RST_QP, DESTROY_QP) that wait for a QP's bursts;
//! and writing the held CQEs once the reads are done. Must not: decide that a WQE fails (the
//! requester and completer do) or decode commands (the firmware finds the QP a command names
//! and asks [`Ledger::reads_in_flight`]).
//!
//! Why: an error CQE (a flush above all) hands the WQE's buffers back to the application; a
//! burst still reading them would race its writes and carry bytes no transmit sent (a NIC reads
//! the buffer when it transmits, before any completion). 2RST_QP and DESTROY_QP hand them back
//! too, so they wait as a NIC quiesces a QP's DMA before completing them (the kernel frees or
//! reuses the buffers once `mlx5_core_qp_modify` to RESET or `mlx5_core_destroy_qp` returns).

use std::collections::VecDeque;

use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::WqeOpcode;

use super::cqe::SendCq;
use crate::counters::Counters;
use crate::events::Completions;
use crate::frame::{BurstReads, ReadHold};
use crate::io::Io;
use crate::objects::Qp;
use crate::table::Table;

/// A requester error CQE not written yet: it waits for bursts of its QP still reading the
/// QP's memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingErr {
    /// The WQE's index.
    pub index: u16,
    /// Its opcode.
    pub opcode: WqeOpcode,
    /// Why it failed (WR_FLUSH_ERR for a flush).
    pub syndrome: CqeSyndrome,
}

/// One QP's share of the ledger.
#[derive(Debug, Default, Clone)]
struct QpEntry {
    /// Its bursts still reading its memory.
    reads: BurstReads,
    /// Error CQEs waiting for those bursts, in SQ order. `None`: nothing waits.
    held: Option<VecDeque<PendingErr>>,
}

/// Bursts in flight and what waits for them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Ledger {
    /// By QPN; made at a QP's first burst or held CQE, dropped with the QP.
    qps: Vec<Option<QpEntry>>,
    /// QPs whose error CQEs are held, retried by the steps until none is left.
    flushes: Vec<u32>,
    /// Commands (slot, QPN) whose 2RST_QP / DESTROY_QP waits for the QP's bursts.
    commands: Vec<(u8, u32)>,
    /// QP state changes so far (`engine::set_qp_state`): the transport's quiet scan is valid
    /// only while this has not moved (`Transport::quiet`).
    state_changes: u64,
}

impl Ledger {
    /// Counts a QP state change.
    #[inline(always)]
    pub(crate) fn note_state_change(&mut self) {
        self.state_changes = self.state_changes.wrapping_add(1);
    }

    /// QP state changes so far.
    #[inline(always)]
    pub(crate) fn state_changes(&self) -> u64 {
        self.state_changes
    }

    fn entry(&self, qpn: u32) -> Option<&QpEntry> {
        self.qps.get(qpn as usize)?.as_ref()
    }

    fn entry_mut(&mut self, qpn: u32) -> &mut QpEntry {
        let i = qpn as usize;
        if self.qps.len() <= i {
            self.qps.resize_with(i + 1, || None);
        }
        self.qps[i].get_or_insert_with(QpEntry::default)
    }

    /// A hold for a burst about to carry QP `qpn`'s memory by reference.
    #[inline]
    pub(crate) fn hold_read(&mut self, qpn: u32) -> ReadHold {
        self.entry_mut(qpn).reads.hold()
    }

    /// True if a by-reference burst of QP `qpn` still reads its memory.
    pub(crate) fn reads_in_flight(&self, qpn: u32) -> bool {
        self.entry(qpn).is_some_and(|e| !e.reads.none_in_flight())
    }

    /// True if error CQEs of QP `qpn` wait for its bursts.
    pub(crate) fn holds_errs(&self, qpn: u32) -> bool {
        self.entry(qpn).is_some_and(|e| e.held.is_some())
    }

    /// True if nothing of QP `qpn` waits and no burst of it reads: its error CQEs go now.
    fn quiet(&self, qpn: u32) -> bool {
        self.entry(qpn)
            .is_none_or(|e| e.held.is_none() && e.reads.none_in_flight())
    }

    /// Queues `errs` behind QP `qpn`'s held error CQEs (the first makes the steps retry it).
    fn hold(&mut self, qpn: u32, errs: impl Iterator<Item = PendingErr>) {
        let e = self.entry_mut(qpn);
        let first = e.held.is_none();
        e.held.get_or_insert_with(Default::default).extend(errs);
        if first {
            self.flushes.push(qpn);
        }
    }

    /// The error CQEs held for QP `qpn`, if its bursts are all read.
    fn take_held(&mut self, qpn: u32) -> Option<VecDeque<PendingErr>> {
        self.qps
            .get_mut(qpn as usize)?
            .as_mut()
            .filter(|e| e.reads.none_in_flight())
            .and_then(|e| e.held.take())
    }

    /// QP `qpn` went back to RESET: what it held is forgotten (its bursts are still counted).
    pub(crate) fn drop_held(&mut self, qpn: u32) {
        if let Some(Some(e)) = self.qps.get_mut(qpn as usize) {
            e.held = None;
        }
    }

    /// QP `qpn` was destroyed: its share goes (a QP made later with its number starts with
    /// nothing in flight).
    pub(crate) fn forget(&mut self, qpn: u32) {
        if let Some(e) = self.qps.get_mut(qpn as usize) {
            *e = None;
        }
    }

    /// Every QP was destroyed (TEARDOWN_HCA, DISABLE_HCA, a fast teardown).
    pub(crate) fn forget_all(&mut self) {
        self.qps.clear();
    }

    /// True if held error CQEs wait for a retry.
    #[inline]
    pub(crate) fn flushes_waiting(&self) -> bool {
        !self.flushes.is_empty()
    }

    /// True if a command waits for a QP's bursts.
    #[inline]
    pub(crate) fn commands_waiting(&self) -> bool {
        !self.commands.is_empty()
    }

    /// True if anything waits (held CQEs or commands): the device has work once the bursts
    /// are read.
    #[inline]
    pub(crate) fn waiting(&self) -> bool {
        self.flushes_waiting() || self.commands_waiting()
    }

    /// True if held error CQEs can be written now (their QP's bursts are all read).
    pub(crate) fn flush_ready(&self) -> bool {
        self.flushes.iter().any(|&qpn| {
            self.entry(qpn)
                .is_some_and(|e| e.held.is_some() && e.reads.none_in_flight())
        })
    }

    /// Keeps the command in `slot` until no burst of QP `qpn` reads its memory.
    pub(crate) fn wait_command(&mut self, slot: u8, qpn: u32) {
        self.commands.push((slot, qpn));
    }

    /// The next waiting command, from position `*at` on, whose QP no burst reads any more,
    /// taken off the list (in slot order; `*at` moves past those still waiting).
    pub(crate) fn next_command(&mut self, at: &mut usize) -> Option<u8> {
        while let Some(&(slot, qpn)) = self.commands.get(*at) {
            if self.reads_in_flight(qpn) {
                *at += 1;
            } else {
                self.commands.remove(*at);
                return Some(slot);
            }
        }
        None
    }

    /// True if a waiting command can run now.
    pub(crate) fn command_ready(&self) -> bool {
        self.commands
            .iter()
            .any(|&(_, qpn)| !self.reads_in_flight(qpn))
    }
}

impl Ledger {
    /// Writes requester error CQE `e` of QP `qpn` now, unless a burst of the QP still reads
    /// its memory or earlier error CQEs of the QP wait: then it waits behind them, and
    /// [`Ledger::retry`] writes them all, then flushes the WQEs posted since, once those
    /// bursts are applied, segmented or dropped (a bounded number of steps later; the QP is in
    /// ERR meanwhile, so no new burst starts).
    pub(crate) fn post_err_when_read(
        &mut self,
        cq: SendCq,
        qp_counters: &mut Counters,
        comp: &mut Completions,
        io: &mut Io<'_>,
        e: PendingErr,
    ) {
        if self.quiet(cq.qpn) {
            super::cqe::post_err(cq, qp_counters, comp, io, e.index, e.opcode, e.syndrome);
            return;
        }
        self.hold(cq.qpn, std::iter::once(e));
    }

    /// Writes the flush CQEs `errs` of QP `qpn` (SQ order) and then flushes the WQEs posted
    /// since (`engine::flush_posted`), now or, while bursts of the QP still read its memory,
    /// once they are read.
    pub(crate) fn flush_when_read(
        &mut self,
        qps: &mut Table<Qp>,
        comp: &mut Completions,
        io: &mut Io<'_>,
        qpn: u32,
        errs: impl Iterator<Item = PendingErr>,
    ) {
        if self.quiet(qpn) {
            post_errs(qps, comp, io, qpn, errs);
        } else {
            self.hold(qpn, errs);
        }
    }

    /// Writes the error CQEs held for `qpn`'s bursts now if those bursts are all read (a
    /// 2RST_QP about to forget them waited for the reads).
    pub(crate) fn post_held(
        &mut self,
        qps: &mut Table<Qp>,
        comp: &mut Completions,
        io: &mut Io<'_>,
        qpn: u32,
    ) {
        if !qps.contains(qpn) {
            return;
        }
        if let Some(errs) = self.take_held(qpn) {
            post_errs(qps, comp, io, qpn, errs);
        }
    }

    /// Writes the held error CQEs, then flushes the WQEs posted since, for the QPs that have
    /// no burst in flight any more. Returns true if it wrote any. A QP destroyed or reset
    /// meanwhile has nothing left to complete.
    pub(crate) fn retry(
        &mut self,
        qps: &mut Table<Qp>,
        comp: &mut Completions,
        io: &mut Io<'_>,
    ) -> bool {
        let mut any = false;
        let mut i = 0;
        while let Some(&qpn) = self.flushes.get(i) {
            let ready = match self.qps.get_mut(qpn as usize).and_then(Option::as_mut) {
                Some(e) if e.held.is_some() && !e.reads.none_in_flight() => {
                    i += 1;
                    continue;
                }
                Some(e) => e.held.take(),
                None => None,
            };
            self.flushes.swap_remove(i);
            if let Some(errs) = ready {
                post_errs(qps, comp, io, qpn, errs);
                any = true;
            }
        }
        any
    }
}

/// Writes the error CQEs `errs` of QP `qpn` (WQE order) and then what follows its flush.
fn post_errs(
    qps: &mut Table<Qp>,
    comp: &mut Completions,
    io: &mut Io<'_>,
    qpn: u32,
    errs: impl IntoIterator<Item = PendingErr>,
) {
    let Some(qp) = qps.get_mut(qpn) else {
        return;
    };
    let cq = SendCq::of(qp);
    for e in errs {
        super::cqe::post_err(
            cq,
            &mut qp.counters,
            comp,
            io,
            e.index,
            e.opcode,
            e.syndrome,
        );
    }
    super::flush_posted(qp, comp, io);
}
