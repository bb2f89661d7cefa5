//! The QPs that report completions to one CQ, and the CQ's consumer state shared between the
//! poller and the control path: the consumer index, the flag that gives one party at a time
//! the right to move it, the open-addressed QP table with the one-entry "last QP" cache the
//! poller compares a CQE's QPN with first, and the clean of a destroyed or reset QP's CQEs.
//!
//! Follows rdma-core `providers/mlx5/cq.c`: the CQ lock that orders polls against
//! `__mlx5_cq_clean` (here a flag the poller only tries), `mlx5_parse_cqe`'s QPN lookup with
//! the last resource found kept (`cur_rsc`), and `__mlx5_cq_clean` itself.
//!
//! Owns: [`QpTable`] (attach, detach, [`QpTable::clean`]), `Held` and `HeldRef` (the flag
//! held: the only way to the lookup, its cache and the consumer count's writes), and the QPN
//! key the poller compares raw CQE bytes with. Must not: decode CQEs beyond the QPN
//! (`completion.rs`, `poll.rs`), or wait on the polling side (the poller only tries the flag;
//! only the control path spins).

use core::cell::{Cell, UnsafeCell};
use core::marker::PhantomData;
use core::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bypass_hw::cqe::{Cqe64, MLX5_CQE_OWNER_MASK, cqe_slot, sw_owns};
use zerocopy::{FromZeros, IntoBytes};

use crate::barrier::{udma_from_device_barrier, udma_to_device_barrier};
use crate::completion::CQE_SIZE;
use crate::wq::{RingPtr, WqShared};

/// One slot of the QP table: a QPN (`EMPTY_QPN` when free) and its bookkeeping (for a free
/// slot, the table's placeholder, never returned: no CQE carries `EMPTY_QPN`). Not an
/// `Option`, so a hit needs no second test.
#[derive(Debug, Clone)]
struct Slot {
    qpn: u32,
    wq: Arc<WqShared>,
}

/// No QPN has bit 24 or above set (QPNs are 24 bits), so this never matches a CQE's.
const EMPTY_QPN: u32 = u32::MAX;

/// A key no CQE has: a CQE's key is below 2^24 ([`cqe_qpn_key`]).
const EMPTY_KEY: u32 = u32::MAX;

/// The QPN key of a CQE whose bytes 56..60 (`sop_drop_qpn` / `s_wqe_opcode_qpn`, the same
/// place in good and error CQEs) read, in native order, `word`: the three big-endian QPN
/// bytes 57..60 as they lie, byte 56 (the WQE opcode) dropped, so the poller compares the
/// CQE's word with no byte swap (one shift on a little-endian host, one mask on a big-endian
/// one).
#[inline(always)]
pub(crate) const fn cqe_qpn_key(word: u32) -> u32 {
    #[cfg(target_endian = "little")]
    let key = word >> 8;
    #[cfg(target_endian = "big")]
    let key = word & 0x00ff_ffff;
    key
}

/// QPN `qpn` as [`cqe_qpn_key`] reads it from a CQE of that QP. Any host order.
#[inline(always)]
pub(crate) const fn qpn_key(qpn: u32) -> u32 {
    cqe_qpn_key(u32::from_ne_bytes(qpn.to_be_bytes()))
}

/// The last QP the poller found: its [`qpn_key`] and bookkeeping.
#[derive(Debug, Clone, Copy)]
struct Cached {
    key: u32,
    /// Points at a `WqShared` that an `Arc` in the table's slots (or its placeholder) keeps
    /// alive: every change of the slots resets the cache first (under the flag).
    wq: NonNull<WqShared>,
}

/// Bit 0 of [`QpTable::busy`]: the consumer side is held.
const BUSY: u32 = 1;

/// The QPs that report completions to one CQ, so the poller can find a completion's `wr_id`,
/// and the CQ's consumer state (consumer index and the flag that gives one party at a time the
/// right to move it: the poller, or a QP's destroy/reset cleaning its CQEs out of the ring).
///
/// The poller compares a CQE's QPN with the last QP it found first (one compare, no pointer
/// chase: one QP per CQ, or bursts of one QP's completions, hit it); otherwise the QPs sit in
/// an open-addressed table indexed by `qpn & mask` (linear probing, at most half full). The
/// table, the cache and the consumer index are touched only by the holder of `busy`, through
/// the `Held` that taking it gives: the poller tries it once per poll (never waits: a poll
/// that finds it taken returns nothing), the control path (QP attach, detach, CQ clean) spins
/// until it gets it.
#[derive(Debug)]
pub struct QpTable {
    /// [`BUSY`] while held; taken with one `lock bts` on x86-64 (`fetch_or` of one bit whose
    /// old value alone is tested), released with a plain store.
    busy: AtomicU32,
    /// The consumer count: CQEs consumed (polled, or dropped by [`QpTable::clean`]) since the
    /// CQ was created, free-running over 64 bits (never wraps in practice; the doorbell record
    /// takes its low 24 bits, the ring slot and lap parity its low bits). Only the holder of
    /// `busy` changes it, and only upwards: it is the sequence the verbs layer's completion
    /// proofs are numbered by (see [`QpTable::consumed`]).
    ci: AtomicU64,
    cache: UnsafeCell<Cached>,
    slots: UnsafeCell<Box<[Slot]>>,
    /// What free slots hold (an empty queue pair's bookkeeping under `EMPTY_QPN`).
    placeholder: Arc<WqShared>,
    /// QPs in `slots` (touched, like `slots`, only by the holder of `busy`).
    live: UnsafeCell<usize>,
}

// SAFETY: `slots` and `cache` are read and written only through a `Held` (made only when `busy`
// was taken with `Acquire`, given back with `Release` by `Held::release`; not `Sync`, so one
// thread at a time uses it), so accesses from different threads never overlap and each sees
// the previous holder's writes; `cache.wq` points into an `Arc` the table holds
// (`Cached::wq`), and `WqShared` is `Sync`; everything else is atomic.
unsafe impl Sync for QpTable {}
// SAFETY: as for `Sync`: the cached pointer is to data the table itself keeps alive.
unsafe impl Send for QpTable {}

impl Default for QpTable {
    fn default() -> Self {
        Self::new()
    }
}

impl QpTable {
    /// An empty table.
    pub fn new() -> Self {
        let placeholder = Arc::new(WqShared::new(EMPTY_QPN, 0, 0));
        Self {
            busy: AtomicU32::new(0),
            ci: AtomicU64::new(0),
            cache: UnsafeCell::new(Cached {
                key: EMPTY_KEY,
                wq: NonNull::from(&*placeholder),
            }),
            slots: UnsafeCell::new(build_slots(&[], &placeholder)),
            placeholder,
            live: UnsafeCell::new(0),
        }
    }

    /// CQEs consumed so far (polled, or dropped by [`QpTable::clean`]): the free-running
    /// consumer count, which only grows.
    ///
    /// Every poll form hands back, with each completion, the count its CQE brought this to
    /// (`CqPoller::poll_one_seq` and its siblings, `CqPollGuard::seq`), taken while the
    /// poll holds the consumer side. A work request posted when this reads `c` completes with
    /// a CQE that count numbers above `c` (its CQE lands at or past the consumer index, and
    /// [`QpTable::clean`] only moves CQEs forward); a CQE taken before a QP's destroy or
    /// reset has a count at most what this reads after it (the clean takes the consumer side,
    /// so it runs after that poll released it, and the count never decreases). The verbs
    /// layer compares the two to refuse a completion polled before the WQE now at its ring
    /// slot was posted.
    ///
    /// Ordering: a poll or clean stores the count before it releases the consumer side
    /// (`Release`); whoever is ordered after that release (the next holder, which takes the
    /// side with `Acquire`, and everything that holder happens-before, such as a post on a QP
    /// created after a destroy whose clean took the side) reads at least that count, by
    /// coherence of this one atomic (the guarantee does not rest on this load's `Acquire`,
    /// which is a plain load on x86-64).
    #[inline]
    pub fn consumed(&self) -> u64 {
        self.ci.load(Ordering::Acquire)
    }

    /// Runs `f` on the slots while holding the consumer side (control path), with the cache
    /// reset first: whatever `f` changes, no cached pointer outlives the slot that kept it.
    fn with_slots<R>(&self, f: impl FnOnce(&mut Box<[Slot]>, &mut usize) -> R) -> R {
        let held = self.acquire_blocking();
        held.get().forget_cached();
        // SAFETY: `held` holds `busy`: nobody else touches `slots` or `live` until it is
        // released, and the cache (reset above) points into no slot this may replace.
        let r = f(unsafe { &mut *held.table.slots.get() }, unsafe {
            &mut *held.table.live.get()
        });
        held.release();
        r
    }

    /// Adds a QP (no-op if its QPN is already there). O(1) amortised: the QP goes into the
    /// first free slot from its home one; only when that would make the table more than half
    /// full is it rebuilt, at twice the size (so a CQ shared by 64k QPs costs each attach
    /// what the first one did).
    pub fn attach(&self, wq: Arc<WqShared>) {
        self.with_slots(|slots, live| {
            if slot_of(slots, wq.qpn()).is_some() {
                return;
            }
            if (*live + 1) * 2 > slots.len() {
                let mut all = live_wqs(slots, EMPTY_QPN);
                all.push(wq);
                *slots = build_slots(&all, &self.placeholder);
            } else {
                put(slots, wq);
            }
            *live += 1;
        });
    }

    /// Removes QP `qpn` (and forgets it if it is the cached one). O(1) expected: the slot is
    /// emptied and the entries probing past it move back (backward-shift deletion, so no
    /// tombstone ever lengthens a probe); the table shrinks when an eighth full.
    pub fn detach(&self, qpn: u32) {
        self.with_slots(|slots, live| {
            let Some(i) = slot_of(slots, qpn) else {
                return;
            };
            *live -= 1;
            if slots.len() > 16 && *live * 8 < slots.len() {
                *slots = build_slots(&live_wqs(slots, qpn), &self.placeholder);
                return;
            }
            take_out(slots, i, &self.placeholder);
        });
    }

    /// Linear probing past the home slot (rare: out of line, so that the pollers that inline
    /// [`HeldRef::find`] keep their registers).
    #[cold]
    #[inline(never)]
    fn probe(slots: &[Slot], qpn: u32) -> Option<&Arc<WqShared>> {
        let mask = slots.len().wrapping_sub(1);
        let start = qpn as usize & mask;
        for k in 1..slots.len() {
            let s = slots.get((start + k) & mask)?;
            if s.qpn == qpn {
                return Some(&s.wq);
            }
            if s.qpn == EMPTY_QPN {
                return None;
            }
        }
        None
    }

    /// Takes the consumer side, waiting (control path only) while the poller holds it.
    fn acquire_blocking(&self) -> Held<'_> {
        loop {
            if let Some(held) = self.try_acquire() {
                return held;
            }
            std::thread::yield_now();
        }
    }

    /// Takes the consumer side if free (the poller: never waits): one `lock bts` on x86-64.
    /// [`Held::release`] gives it back.
    #[inline(always)]
    pub(crate) fn try_acquire(&self) -> Option<Held<'_>> {
        // Made only when taken (`then`, not `then_some`: no `Held` of a failed try exists).
        (self.busy.fetch_or(BUSY, Ordering::Acquire) & BUSY == 0).then(|| Held {
            table: self,
            _one_thread: PhantomData,
        })
    }

    /// Removes every CQE of QP `qpn` still unpolled in the CQ ring, moving the others up and the
    /// consumer index past the freed slots, and publishes the new consumer index; returns how
    /// many CQEs it dropped. Waits while a poll is in progress (control path: QP destroy and
    /// reset). It takes the consumer side even when the ring holds no CQE of `qpn`: that is
    /// what orders a QP's destroy or reset after every poll that took one of its CQEs (see
    /// [`QpTable::consumed`]); the consumer count only grows (by the dropped CQEs).
    ///
    /// Why: the firmware reuses QP numbers; a CQE of a destroyed (or reset) QP left in the ring
    /// would be taken, after a new QP got the same number, for a completion of the new QP's
    /// WQE, and its owner may release buffers the NIC still uses. rdma-core
    /// `providers/mlx5/cq.c` `__mlx5_cq_clean` (called from `mlx5_destroy_qp` and the
    /// modify-to-RESET path of `mlx5_modify_qp`): find the producer by the owner bit (at most
    /// `nent - 1` entries past the consumer index), walk back to the consumer index dropping
    /// the QP's CQEs and copying each kept CQE `freed` slots forward with the destination's own
    /// owner bit, then advance the consumer index by `freed`.
    ///
    /// `ring`/`nent`/`dbr` must describe the CQ this table belongs to; its CQEs are 64 bytes
    /// (the only size the driver creates and the poller reads).
    pub fn clean(&self, ring: &RingPtr, nent: u32, dbr: &RingPtr, qpn: u32) -> u32 {
        let held = self.acquire_blocking();
        let count = held.get().ci();
        // The ring arithmetic below needs only the low 32 bits (slot and lap parity).
        let ci = count as u32;
        let off = |i: u32| cqe_slot(i, nent) as usize * CQE_SIZE;
        let mut prod = ci;
        while prod.wrapping_sub(ci) < nent - 1 && sw_owns(ring.read_u8(off(prod) + 63), prod, nent)
        {
            prod = prod.wrapping_add(1);
        }
        // The CQEs up to `prod` are software's: read their contents only after their owner bits.
        udma_from_device_barrier();
        let mut freed = 0u32;
        let mut cqe = Cqe64::new_zeroed();
        // A QP on an SRQ: the receive CQEs dropped here give their SRQ WQEs back to its free
        // list (rdma-core `__mlx5_cq_clean`: `mlx5_free_srq_wqe` for a responder CQE).
        let srq = held.get().find(qpn).and_then(|w| w.srq().cloned());
        while prod != ci {
            prod = prod.wrapping_sub(1);
            ring.read(off(prod), cqe.as_mut_bytes());
            // `sop_drop_qpn` (`s_wqe_opcode_qpn` in an error CQE, the same bytes): the QPN in
            // the low 24 bits, for good and error CQEs alike.
            if cqe.qpn() == qpn {
                freed += 1;
                // Responder opcodes (RESP_WR_IMM 1 ..= RESP_SEND_INV 4, RESP_ERR 14).
                if let Some(s) = &srq
                    && (0x401e_u32 >> (cqe.op_own >> 4)) & 1 != 0
                {
                    s.complete(cqe.wqe_counter.get());
                }
            } else if freed > 0 {
                let dst = off(prod.wrapping_add(freed));
                let owner = ring.read_u8(dst + CQE_SIZE - 1) & MLX5_CQE_OWNER_MASK;
                cqe.op_own = (cqe.op_own & !MLX5_CQE_OWNER_MASK) | owner;
                ring.write(dst, cqe.as_bytes());
            }
        }
        if freed > 0 {
            // The dropped CQEs count as consumed: the count moves up, never down.
            let count = count.wrapping_add(u64::from(freed));
            held.get().set_ci(count);
            // The moved CQEs must be in memory before the slots are given back.
            udma_to_device_barrier();
            dbr.write_be32(0, (count as u32) & 0x00ff_ffff);
        }
        held.release();
        freed
    }
}

/// The consumer side of a [`QpTable`], held: made only by [`QpTable::try_acquire`] (or the
/// control path's blocking take), given back by [`Held::release`], which consumes it. What
/// only the holder may touch, the QP lookup with its cache and the consumer count's writes, is
/// reached through it ([`Held::get`]), so the compiler checks the rule: no lookup without the
/// side held, and no looked-up bookkeeping borrowed past its release. A reference to the table
/// and nothing more. Not `Sync` (a lookup writes the cache: one thread at a time uses it); it
/// may move to another thread, as a poll guard may.
///
/// Released explicitly, not on drop: a release in `Drop` would give every poll that calls out
/// of line (the cold paths) an unwinding landing pad and the registers it keeps live. One
/// dropped without [`Held::release`] or [`Held::keep`] leaves the side held, so that polls
/// find nothing and the next QP destroy or reset on the CQ waits forever: debug builds panic
/// when that happens (release builds have no drop code at all).
#[derive(Debug)]
#[must_use = "the consumer side stays held until `Held::release`"]
pub(crate) struct Held<'t> {
    table: &'t QpTable,
    _one_thread: PhantomData<Cell<()>>,
}

impl<'t> Held<'t> {
    /// The side of `table`, already held: what a hot path that let its `Held` go
    /// ([`Held::keep`], to pass nothing to a cold call) takes back in that call.
    ///
    /// # Safety
    /// `busy` of `table` must be held, by the caller's thread, and no other `Held` of it live
    /// (the one kept is the only one; this one is what releases the side).
    #[inline(always)]
    pub(crate) unsafe fn resume(table: &'t QpTable) -> Self {
        debug_assert!(table.busy.load(Ordering::Relaxed) & BUSY != 0);
        Held {
            table,
            _one_thread: PhantomData,
        }
    }

    /// Lets this `Held` go with the side still held, for a later [`Held::resume`] in the same
    /// thread to take back (a hot path handing the side to a cold call without passing it).
    #[inline(always)]
    pub(crate) fn keep(self) {
        core::mem::forget(self);
    }

    /// Releases the side (a plain store with `Release`: everything done while holding it is
    /// seen by the next holder, which takes it with `Acquire`).
    #[inline(always)]
    pub(crate) fn release(self) {
        self.table.busy.store(0, Ordering::Release);
        core::mem::forget(self);
    }

    /// The hold, borrowed: what the lookups and the consumer count are reached through,
    /// passed by value (one pointer in a register; a `&Held` handed to an out-of-line call
    /// would keep its owner in memory).
    #[inline(always)]
    pub(crate) fn get(&self) -> HeldRef<'_> {
        HeldRef {
            table: self.table,
            _this_thread: PhantomData,
        }
    }
}

/// Debug builds only: a `Held` that reaches its drop was neither released nor kept, which
/// would leave the consumer side held for good (see [`Held`]). Not while unwinding: a panic
/// elsewhere may drop one, and a second panic would abort.
#[cfg(debug_assertions)]
impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!(
                "a QpTable Held was dropped without Held::release or Held::keep: the CQ's \
                 consumer side stays held, polls find nothing and the next QP destroy or reset \
                 on this CQ would wait forever"
            );
        }
    }
}

/// A borrow of a [`Held`]: the consumer side held for as long as `'h`. Copied freely within
/// the thread that holds the side (not `Send` or `Sync`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldRef<'h> {
    table: &'h QpTable,
    _this_thread: PhantomData<*const ()>,
}

impl<'h> HeldRef<'h> {
    /// The consumer count (see [`QpTable::consumed`]).
    #[inline(always)]
    pub(crate) fn ci(self) -> u64 {
        self.table.ci.load(Ordering::Relaxed)
    }

    /// Moves the consumer count to `ci` (a poll, after taking CQEs up to it; the doorbell
    /// record is the caller's). `Relaxed`: the release of the side ([`Held::release`]) orders
    /// it before the next holder.
    #[inline(always)]
    pub(crate) fn set_ci(self, ci: u64) {
        self.table.ci.store(ci, Ordering::Relaxed);
    }

    /// The bookkeeping of the QP whose [`qpn_key`] is `key` if it is the cached one (the
    /// poller's first test: one compare).
    #[inline(always)]
    pub(crate) fn cached(self, key: u32) -> Option<&'h WqShared> {
        // SAFETY: the side is held (for `'h`), so nobody writes `cache` while we read it.
        let c = unsafe { *self.table.cache.get() };
        if c.key == key {
            // SAFETY: `c.wq` points at a `WqShared` an `Arc` of this table keeps alive until
            // the next change of the slots, which needs the side (`with_slots`): not within
            // `'h`, which the returned borrow does not outlive.
            Some(unsafe { c.wq.as_ref() })
        } else {
            None
        }
    }

    /// The bookkeeping of QP `qpn` (the cache, its home slot, then probing), which becomes
    /// the cached one.
    #[inline(always)]
    pub(crate) fn find(self, qpn: u32) -> Option<&'h WqShared> {
        let key = qpn_key(qpn);
        match self.cached(key) {
            Some(w) => Some(w),
            None => self.find_uncached(qpn, key),
        }
    }

    /// [`HeldRef::find`] past the cache, for QP `qpn` whose [`qpn_key`] is `key`: the home
    /// slot (the common case, the table at most half full), then probing out of line; a hit
    /// becomes the cached one. The poller's cold step calls it directly for a requester CQE,
    /// whose QP the fast step already missed in the cache.
    #[inline(always)]
    pub(crate) fn find_uncached(self, qpn: u32, key: u32) -> Option<&'h WqShared> {
        let slots = self.slots();
        let s = Self::home(slots, qpn);
        let w = if s.qpn == qpn {
            &s.wq
        } else {
            QpTable::probe(slots, qpn)?
        };
        Some(self.remember(key, w))
    }

    /// The slots, for as long as the side is held.
    #[inline(always)]
    fn slots(self) -> &'h [Slot] {
        // SAFETY: the side is held for `'h`, so nobody replaces or mutates `slots` while this
        // shared borrow lives.
        unsafe { &*self.table.slots.get() }
    }

    /// QP `qpn`'s home slot in `slots` (whoever holds it).
    #[inline(always)]
    fn home(slots: &'h [Slot], qpn: u32) -> &'h Slot {
        let i = qpn as usize & slots.len().wrapping_sub(1);
        debug_assert!(i < slots.len());
        // SAFETY: `slots` always has a power-of-two length of at least 16 (`new`,
        // `build_slots`), so `qpn & (len - 1) < len`.
        unsafe { slots.get_unchecked(i) }
    }

    /// Makes `w`, the bookkeeping of the QP whose key is `key`, the cached one; returns it.
    #[inline(always)]
    fn remember(self, key: u32, w: &'h Arc<WqShared>) -> &'h WqShared {
        // SAFETY: the side is held: nobody else reads or writes `cache`; `w` is held by an
        // `Arc` in `slots`, which stays until the next `with_slots` resets the cache.
        unsafe {
            *self.table.cache.get() = Cached {
                key,
                wq: NonNull::from(&**w),
            };
        }
        w
    }

    /// Empties the cache (before the slots change: no cached pointer outlives its slot).
    fn forget_cached(self) {
        // SAFETY: the side is held: nobody else reads or writes `cache`.
        unsafe {
            *self.table.cache.get() = Cached {
                key: EMPTY_KEY,
                wq: NonNull::from(&*self.table.placeholder),
            };
        }
    }
}

/// The slot holding QP `qpn`, probing linearly from its home slot to the first free one.
fn slot_of(slots: &[Slot], qpn: u32) -> Option<usize> {
    let mask = slots.len().wrapping_sub(1);
    let start = qpn as usize & mask;
    (0..slots.len())
        .map(|k| (start + k) & mask)
        .take_while(|&i| slots.get(i).is_some_and(|s| s.qpn != EMPTY_QPN))
        .find(|&i| slots.get(i).is_some_and(|s| s.qpn == qpn))
}

/// The QPs in `slots` but `except`.
fn live_wqs(slots: &[Slot], except: u32) -> Vec<Arc<WqShared>> {
    slots
        .iter()
        .filter(|s| s.qpn != EMPTY_QPN && s.qpn != except)
        .map(|s| s.wq.clone())
        .collect()
}

/// Puts `w` in the first free slot from its home one (the table has one: at most half full).
fn put(slots: &mut [Slot], w: Arc<WqShared>) {
    let mask = slots.len().wrapping_sub(1);
    let start = w.qpn() as usize & mask;
    for k in 0..slots.len() {
        if let Some(s) = slots.get_mut((start + k) & mask)
            && s.qpn == EMPTY_QPN
        {
            *s = Slot {
                qpn: w.qpn(),
                wq: w,
            };
            return;
        }
    }
}

/// Empties slot `hole` and moves back each entry of the probe run after it whose home slot
/// is not between the hole and it (cyclically), so that every lookup still reaches its QP
/// before a free slot (linear probing's deletion without tombstones, Knuth vol. 3, 6.4,
/// Algorithm R).
fn take_out(slots: &mut [Slot], mut hole: usize, placeholder: &Arc<WqShared>) {
    let mask = slots.len().wrapping_sub(1);
    if let Some(s) = slots.get_mut(hole) {
        *s = Slot {
            qpn: EMPTY_QPN,
            wq: placeholder.clone(),
        };
    }
    let mut j = (hole + 1) & mask;
    while let Some(qpn) = slots.get(j).map(|s| s.qpn).filter(|&q| q != EMPTY_QPN) {
        let home = qpn as usize & mask;
        if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
            slots.swap(hole, j);
            hole = j;
        }
        j = (j + 1) & mask;
    }
}

/// An open-addressed table of `wqs`: a power of two of at least 16 slots and at least twice
/// as many as QPs, each QP at `qpn & mask` or the next free slot after it.
fn build_slots(wqs: &[Arc<WqShared>], placeholder: &Arc<WqShared>) -> Box<[Slot]> {
    let n = (wqs.len() * 2).max(16).next_power_of_two();
    let empty = Slot {
        qpn: EMPTY_QPN,
        wq: placeholder.clone(),
    };
    let mut slots = vec![empty; n];
    let mask = n - 1;
    for w in wqs {
        let start = w.qpn() as usize & mask;
        for k in 0..n {
            if let Some(s) = slots.get_mut((start + k) & mask)
                && s.qpn == EMPTY_QPN
            {
                *s = Slot {
                    qpn: w.qpn(),
                    wq: w.clone(),
                };
                break;
            }
        }
    }
    slots.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_and_detach_in_place_keep_every_qp_reachable() {
        let t = QpTable::new();
        // Miri interprets every probe: fewer QPs there, still enough to grow the table and
        // collide on home slots.
        let n: u32 = if cfg!(miri) { 90 } else { 600 };
        // QPNs that collide on their home slots at every table size up to 4096.
        let qpns: Vec<u32> = (0..n)
            .map(|k| if k % 3 == 0 { k << 12 } else { k })
            .collect();
        for &q in &qpns {
            t.attach(Arc::new(WqShared::new(q, 1, 1)));
        }
        let reachable = |t: &QpTable, live: &[u32]| {
            let h = t.try_acquire().unwrap();
            let slots = h.get().slots();
            let ok = live.iter().all(|&q| slot_of(slots, q).is_some());
            let count = slots.iter().filter(|s| s.qpn != EMPTY_QPN).count();
            h.release();
            (ok, count)
        };
        assert_eq!(reachable(&t, &qpns), (true, n as usize));
        let (gone, kept): (Vec<u32>, Vec<u32>) = qpns.iter().partition(|&&q| q % 2 == 0);
        for &q in &gone {
            t.detach(q);
            t.detach(q);
        }
        assert_eq!(reachable(&t, &kept), (true, kept.len()));
        let h = t.try_acquire().unwrap();
        assert!(gone.iter().all(|&q| slot_of(h.get().slots(), q).is_none()));
        h.release();
        for &q in &kept {
            t.detach(q);
        }
        assert_eq!(reachable(&t, &[]), (true, 0));
    }

    #[test]
    fn the_qpn_key_is_the_cqe_word_with_the_opcode_byte_cleared() {
        for qpn in [0u32, 1, 9, 0x12_3456, 0xff_ffff] {
            for op in [0u8, 0x08, 0xff] {
                let mut bytes = [0u8; 4];
                bytes.copy_from_slice(&((u32::from(op) << 24) | qpn).to_be_bytes());
                assert_eq!(cqe_qpn_key(u32::from_ne_bytes(bytes)), qpn_key(qpn));
            }
            assert_ne!(qpn_key(qpn), EMPTY_KEY, "no CQE matches the empty cache");
        }
        assert_ne!(qpn_key(1), qpn_key(0x100));
    }

    #[test]
    fn the_cache_follows_lookups_and_forgets_a_detached_qp() {
        let t = QpTable::new();
        let a = Arc::new(WqShared::new(9, 8, 4));
        let b = Arc::new(WqShared::new(25, 8, 4));
        t.attach(a.clone());
        t.attach(b.clone());
        let h = t.try_acquire().unwrap();
        assert!(h.get().cached(qpn_key(9)).is_none(), "nothing found yet");
        assert_eq!(h.get().find(9).map(WqShared::qpn), Some(9));
        assert_eq!(h.get().cached(qpn_key(9)).map(WqShared::qpn), Some(9));
        // QP 25 shares QP 9's home slot in a 16-slot table: found by probing, then cached.
        assert_eq!(h.get().find(25).map(WqShared::qpn), Some(25));
        assert!(
            h.get().cached(qpn_key(9)).is_none(),
            "one entry: the last QP found"
        );
        assert_eq!(h.get().cached(qpn_key(25)).map(WqShared::qpn), Some(25));
        assert!(h.get().find(0x77).is_none());
        assert_eq!(
            h.get().cached(qpn_key(25)).map(WqShared::qpn),
            Some(25),
            "a miss keeps the cache"
        );
        h.release();
        t.detach(25);
        let h = t.try_acquire().unwrap();
        assert!(h.get().cached(qpn_key(25)).is_none(), "detach forgets it");
        assert!(h.get().find(25).is_none());
        assert_eq!(h.get().find(9).map(WqShared::qpn), Some(9));
        h.release();
        // Attaching another QP resets the cache too (the slots are rebuilt).
        t.attach(Arc::new(WqShared::new(3, 1, 1)));
        let h = t.try_acquire().unwrap();
        assert!(h.get().cached(qpn_key(9)).is_none());
        assert!(t.try_acquire().is_none(), "held: a second try fails");
        h.release();
        let h = t.try_acquire().expect("released");
        h.release();
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "dropped without Held::release")]
    fn a_held_dropped_without_release_panics_in_debug_builds() {
        let t = QpTable::new();
        let h = t.try_acquire().unwrap();
        drop(h);
    }

    #[test]
    fn a_released_or_kept_held_is_not_reported() {
        let t = QpTable::new();
        t.try_acquire().unwrap().release();
        let h = t.try_acquire().unwrap();
        h.keep();
        // SAFETY: the side is held by this thread (kept just above); this is its only `Held`.
        unsafe { Held::resume(&t) }.release();
        assert!(t.try_acquire().map(Held::release).is_some());
    }
}
