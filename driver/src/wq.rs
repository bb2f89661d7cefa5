//! Work-queue rings in DMA memory and the bookkeeping the send and receive paths share with
//! completion polling: producer counters, free-space arithmetic, the per-slot `wr_id` arrays.
//!
//! Follows rdma-core `providers/mlx5/qp.c` (`mlx5_get_send_wqe`, `sq.cur_post` counted in
//! WQEBBs, wrap of a WQE's segments to the start of the SQ at `sq.qend`, `wqe_head`/`wrid`
//! indexed by `cur_post & (wqe_cnt - 1)`) and `providers/mlx5/cq.c` (`mlx5_parse_cqe`: a send
//! completion retires every WQE up to the one `wqe_counter` names; receives complete in order
//! from `rq.tail`).
//!
//! Owns: [`RingPtr`] (a bounds-masked view of ring memory), [`SqRing`], [`RqRing`],
//! [`WqShared`]. Must not: build WQE contents (that is `wqe.rs`), ring doorbells, or decode
//! CQEs (that is `poll.rs`).

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Ring memory: `len` bytes at `base`, `len` a power of two, every access masked into range
/// (so no offset arithmetic can leave the ring).
///
/// The memory belongs to a DMA buffer that the object holding this ring keeps alive; the device
/// reads (SQ, RQ) or writes (CQ) it concurrently, so Rust never holds a reference into it for
/// longer than one access, and only to bytes the device is not using at that time.
#[derive(Debug)]
pub struct RingPtr {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `RingPtr` is an address range, not data; what crosses threads is the right to write
// WQE slots (owned by one `&mut` poster at a time) or read CQE slots (one `&mut` poller). The
// memory itself is a DMA buffer that stays mapped while the owning object lives.
unsafe impl Send for RingPtr {}
// SAFETY: as for `Send`; the shared (`&self`) methods only read, and reads of slots the device
// may be writing go through `read_volatile`.
unsafe impl Sync for RingPtr {}

impl RingPtr {
    /// A ring over `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must be valid for reads and writes, and stay so (and not be handed to
    /// safe code as a `&`/`&mut` slice) for as long as the returned value lives. `len` must be a
    /// power of two (checked: otherwise `None`).
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Option<Self> {
        len.is_power_of_two().then_some(Self { base, len })
    }

    /// The ring's length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a ring has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The base address (for research access and tests).
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.len - 1
    }

    /// Writes `bytes` at ring offset `off` (masked), continuing at offset 0 when the write
    /// reaches the end of the ring (rdma-core: a WQE's segments continue at the SQ start).
    /// Bytes beyond one full lap are dropped (callers never write more than a WQE).
    #[inline(always)]
    pub fn write(&self, off: usize, bytes: &[u8]) {
        let off = off & self.mask();
        let n = bytes.len();
        if n <= self.len - off {
            // SAFETY: `off + n <= len`, so the destination is inside the ring (valid for writes
            // by `new`'s contract); `bytes` is a separate Rust slice, so they do not overlap.
            unsafe {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(off), n)
            };
        } else {
            self.write_split(off, bytes);
        }
    }

    #[cold]
    fn write_split(&self, off: usize, bytes: &[u8]) {
        let first = self.len - off;
        let (a, b) = bytes.split_at(first.min(bytes.len()));
        let b = &b[..b.len().min(self.len)];
        // SAFETY: `off + a.len() == len` and `b.len() <= len`: both ranges are inside the ring,
        // which is valid for writes; the source is a separate Rust slice.
        unsafe {
            core::ptr::copy_nonoverlapping(a.as_ptr(), self.base.as_ptr().add(off), a.len());
            core::ptr::copy_nonoverlapping(b.as_ptr(), self.base.as_ptr(), b.len());
        }
    }

    /// Reads `out.len()` bytes at ring offset `off` (masked, wrapping like [`RingPtr::write`])
    /// with volatile loads, so a concurrent device write is never assumed stable.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        let mask = self.mask();
        for (k, b) in out.iter_mut().enumerate() {
            let at = (off.wrapping_add(k)) & mask;
            // SAFETY: `at < len`: inside the ring, valid for reads by `new`'s contract.
            *b = unsafe { self.base.as_ptr().add(at).read_volatile() };
        }
    }

    /// Reads one byte at `off` (masked) with a volatile load (a CQE's `op_own`).
    #[inline(always)]
    pub fn read_u8(&self, off: usize) -> u8 {
        let at = off & self.mask();
        // SAFETY: `at < len`: inside the ring, valid for reads by `new`'s contract.
        unsafe { self.base.as_ptr().add(at).read_volatile() }
    }

    /// Reads the eight big-endian-stored `u64` words of the 64-byte block at `off` (rounded
    /// down to 64, masked) as they are in memory, for a BlueFlame copy.
    #[inline(always)]
    pub fn read_block64(&self, off: usize) -> [u64; 8] {
        let at = (off & self.mask()) & !63;
        let mut out = [0u64; 8];
        if at + 64 <= self.len {
            let src = self.base.as_ptr().wrapping_add(at).cast::<[u64; 8]>();
            // SAFETY: `at + 64 <= len`: the 64-byte block is inside the ring (valid for reads);
            // the read is unaligned, so the ring's alignment does not matter.
            out = unsafe { src.read_unaligned() };
        }
        out
    }

    /// A handle on the 4-byte-aligned big-endian word at `off` (a doorbell-record word), for
    /// stores with no per-store checks; `None` if it is not inside the ring or not aligned.
    pub fn word32(&self, off: usize) -> Option<Word32> {
        if off.checked_add(4)? > self.len {
            return None;
        }
        let p = self.base.as_ptr().wrapping_add(off).cast::<u32>();
        p.is_aligned().then(|| Word32 {
            // SAFETY: `off + 4 <= len`: inside the ring, so not null.
            p: unsafe { NonNull::new_unchecked(p) },
        })
    }

    /// Stores `v` big-endian at `off` (masked, rounded down to 4) with one volatile 32-bit
    /// store (a doorbell record word the device reads concurrently).
    #[inline(always)]
    pub fn write_be32(&self, off: usize, v: u32) {
        let at = (off & self.mask()) & !3;
        if at + 4 > self.len {
            return;
        }
        let p = self.base.as_ptr().wrapping_add(at).cast::<u32>();
        if p.is_aligned() {
            // SAFETY: `at + 4 <= len` (inside the ring, valid for writes) and `p` is aligned.
            unsafe { p.write_volatile(v.to_be()) };
        } else {
            for (k, b) in v.to_be_bytes().into_iter().enumerate() {
                // SAFETY: `at + k < len`: inside the ring, valid for writes.
                unsafe { self.base.as_ptr().add(at + k).write_volatile(b) };
            }
        }
    }

    /// A shared view of `T` at ring offset `off`, if it fits before the ring's end.
    ///
    /// # Safety
    /// The device must not write those bytes while the reference lives (a CQE software owns and
    /// has not yet given back by updating the consumer index).
    #[inline(always)]
    pub unsafe fn view<T: zerocopy::FromBytes + zerocopy::Unaligned + zerocopy::Immutable>(
        &self,
        off: usize,
    ) -> Option<&T> {
        let at = off & self.mask();
        if at + core::mem::size_of::<T>() > self.len {
            return None;
        }
        // SAFETY: the range is inside the ring (checked), `T` has alignment 1 (`Unaligned`)
        // and accepts any bytes (`FromBytes`); the caller guarantees no concurrent write.
        Some(unsafe { &*self.base.as_ptr().add(at).cast::<T>() })
    }
}

/// One aligned 32-bit word of ring memory (a doorbell-record word), checked once by
/// [`RingPtr::word32`]; it is valid as long as the ring it came from.
#[derive(Debug)]
pub struct Word32 {
    p: NonNull<u32>,
}

// SAFETY: an address inside a `RingPtr` (which is `Send`/`Sync`); stores are volatile and
// made through `&mut self` of the owning queue.
unsafe impl Send for Word32 {}
// SAFETY: as for `Send`; `&self` has no methods that write.
unsafe impl Sync for Word32 {}

impl Word32 {
    /// Stores `v` big-endian with one volatile 32-bit store.
    #[inline(always)]
    pub fn write_be(&mut self, v: u32) {
        // SAFETY: aligned and inside the ring (`RingPtr::word32`), which outlives this handle
        // (its owner keeps both, the handle declared first); volatile: the device reads it.
        unsafe { self.p.as_ptr().write_volatile(v.to_be()) }
    }
}

/// One SQ slot's bookkeeping: 16 bytes, so that a slot's byte offset is its index shifted by
/// [`SQ_SLOT_SHIFT`].
#[derive(Debug, Default)]
struct SqSlot {
    wr_id: AtomicU64,
    next: AtomicU32,
}

/// log2 of `size_of::<SqSlot>()`.
const SQ_SLOT_SHIFT: u32 = 4;
const _: () = assert!(core::mem::size_of::<SqSlot>() == 1 << SQ_SLOT_SHIFT);

/// The bookkeeping shared between a QP's poster (which fills slots) and the poller of its CQs
/// (which retires them): per-slot `wr_id`s and where the SQ/RQ tails are.
///
/// Atomics, so that the poster and the poller may run on different threads without a lock:
/// the poller publishes a new tail with `Release` after reading the retired slots' `wr_id`s,
/// and the poster reads it with `Acquire` before reusing those slots (on x86-64 both are plain
/// moves).
#[derive(Debug)]
pub struct WqShared {
    qpn: u32,
    /// Per SQ slot: the `wr_id`, and `cur_post` just after the WQE that starts at this slot
    /// (rdma-core keeps `wqe_head`); one array, so one lookup per completion. Its length is a
    /// power of two (at least 1) fixed at creation, so `index & sq_mask` is always in bounds.
    sq_slots: Box<[SqSlot]>,
    /// `sq_slots.len() - 1`.
    sq_mask: u32,
    /// `sq_mask << SQ_SLOT_SHIFT`: masks a byte offset into `sq_slots`.
    sq_off_mask: u32,
    sq_tail: AtomicU32,
    /// Per RQ slot: the `wr_id`; a power of two (at least 1) long, like `sq_slots`.
    rq_wrid: Box<[AtomicU64]>,
    /// `rq_wrid.len() - 1`.
    rq_mask: u32,
    rq_tail: AtomicU32,
    /// The SRQ the QP receives from: its receive completions index the SRQ's `wr_id`s.
    srq: Option<std::sync::Arc<crate::srq::SrqShared>>,
}

impl WqShared {
    /// Bookkeeping for QP `qpn` with `sq_wqebbs` send slots and `rq_wqes` receive slots (powers
    /// of two, or 0 for a missing queue).
    pub fn new(qpn: u32, sq_wqebbs: u32, rq_wqes: u32) -> Self {
        // At least one slot, a power of two: the masks below then keep every index in bounds
        // (a missing queue never completes anything, so its single slot is never read).
        let sq_len = sq_wqebbs.max(1).next_power_of_two();
        let rq_len = rq_wqes.max(1).next_power_of_two();
        Self {
            qpn,
            sq_slots: (0..sq_len).map(|_| SqSlot::default()).collect(),
            sq_mask: sq_len - 1,
            sq_off_mask: (sq_len - 1) << SQ_SLOT_SHIFT,
            sq_tail: AtomicU32::new(0),
            rq_wrid: (0..rq_len).map(|_| AtomicU64::new(0)).collect(),
            rq_mask: rq_len - 1,
            rq_tail: AtomicU32::new(0),
            srq: None,
        }
    }

    /// The same bookkeeping for a QP that receives from `srq`.
    pub fn on_srq(mut self, srq: std::sync::Arc<crate::srq::SrqShared>) -> Self {
        self.srq = Some(srq);
        self
    }

    /// The SRQ the QP receives from, if any.
    pub fn srq(&self) -> Option<&std::sync::Arc<crate::srq::SrqShared>> {
        self.srq.as_ref()
    }

    /// Retires the receive WQE a receive CQE names: the RQ's oldest ([`WqShared::complete_recv`]),
    /// or for a QP on an SRQ the SRQ WQE `wqe_counter` names, which goes back to the SRQ's
    /// free list (rdma-core `cq.c` `handle_responder`).
    #[inline(always)]
    pub fn complete_recv_at(&self, wqe_counter: u16) -> u64 {
        match &self.srq {
            None => self.complete_recv(),
            Some(s) => s.complete(wqe_counter),
        }
    }

    /// The SQ slot of WQEBB `index` (masked, so always in bounds).
    #[inline(always)]
    fn sq_slot(&self, index: u32) -> &SqSlot {
        let i = (index & self.sq_mask) as usize;
        debug_assert!(i < self.sq_slots.len());
        // SAFETY: `sq_slots.len() == sq_mask + 1` (a power of two, set in `new` and never
        // changed), so `index & sq_mask < sq_slots.len()`.
        unsafe { self.sq_slots.get_unchecked(i) }
    }

    /// The RQ slot of receive WQE `index` (masked, so always in bounds).
    #[inline(always)]
    fn rq_slot(&self, index: u32) -> &AtomicU64 {
        let i = (index & self.rq_mask) as usize;
        debug_assert!(i < self.rq_wrid.len());
        // SAFETY: `rq_wrid.len() == rq_mask + 1` (set in `new`, never changed), so
        // `index & rq_mask < rq_wrid.len()`.
        unsafe { self.rq_wrid.get_unchecked(i) }
    }

    /// The QP number.
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Retires the send WQE whose first WQEBB index is `wqe_counter` (and every unsignaled one
    /// before it): returns its `wr_id` (rdma-core `mlx5_parse_cqe`: `wc->wr_id =
    /// wrid[idx]; sq.tail = wqe_head[idx] + 1`).
    #[inline(always)]
    pub fn complete_send(&self, wqe_counter: u16) -> u64 {
        self.retire_send(self.sq_slot(u32::from(wqe_counter)))
    }

    /// [`WqShared::complete_send`] from CQE bytes 60..64 read as one big-endian word (`wqe_counter`
    /// in 31:16, then `signature`, `op_own`): the slot's byte offset is one shift and one mask
    /// of it (no 16-bit swap, no separate scaling).
    #[inline(always)]
    pub fn complete_send_word(&self, word: u32) -> u64 {
        let off = (word >> (16 - SQ_SLOT_SHIFT)) & self.sq_off_mask;
        debug_assert!(((off >> SQ_SLOT_SHIFT) as usize) < self.sq_slots.len());
        // SAFETY: `off` is a multiple of the slot size (the mask's low `SQ_SLOT_SHIFT` bits are
        // 0) and at most `sq_mask << SQ_SLOT_SHIFT`, so it addresses slot `off >> SQ_SLOT_SHIFT
        // <= sq_mask < sq_slots.len()`, inside the array and aligned.
        let s = unsafe { &*self.sq_slots.as_ptr().byte_add(off as usize) };
        self.retire_send(s)
    }

    /// Retires the send WQE of slot `s` and the unsignaled ones before it: its `wr_id`, the
    /// SQ tail moved to the producer counter just after it.
    #[inline(always)]
    fn retire_send(&self, s: &SqSlot) -> u64 {
        let wr_id = s.wr_id.load(Ordering::Relaxed);
        self.sq_tail
            .store(s.next.load(Ordering::Relaxed), Ordering::Release);
        wr_id
    }

    /// Retires the oldest receive WQE (receives complete in order: rdma-core `cq.c` reads
    /// `rq.wrid[rq.tail & (wqe_cnt - 1)]` and increments `rq.tail`): returns its `wr_id`.
    #[inline(always)]
    pub fn complete_recv(&self) -> u64 {
        let tail = self.rq_tail.load(Ordering::Relaxed);
        let wr_id = self.rq_slot(tail).load(Ordering::Relaxed);
        self.rq_tail.store(tail.wrapping_add(1), Ordering::Release);
        wr_id
    }

    /// Records the send WQE that starts at WQEBB `start`: its `wr_id`, and `next`, the producer
    /// counter just after it (what its completion moves the tail to).
    #[inline(always)]
    pub fn record_send(&self, start: u32, next: u32, wr_id: u64) {
        let s = self.sq_slot(start);
        s.wr_id.store(wr_id, Ordering::Relaxed);
        s.next.store(next, Ordering::Relaxed);
    }

    /// Starts over after a reset to RST: every counter back to 0.
    pub fn reset(&self) {
        self.sq_tail.store(0, Ordering::Release);
        self.rq_tail.store(0, Ordering::Release);
    }

    /// The send tail (WQEBBs retired).
    #[inline(always)]
    pub fn sq_tail(&self) -> u32 {
        self.sq_tail.load(Ordering::Acquire)
    }

    /// The receive tail (receive WQEs retired).
    #[inline(always)]
    pub fn rq_tail(&self) -> u32 {
        self.rq_tail.load(Ordering::Acquire)
    }
}

/// The send queue's producer side: the ring, `cur_post` (WQEBBs produced, wrapping) and the
/// free-space rule.
#[derive(Debug)]
pub struct SqRing {
    /// The SQ part of the WQ buffer.
    pub ring: RingPtr,
    /// WQEBBs in the ring (a power of two).
    pub wqebbs: u32,
    /// WQEBBs produced so far (rdma-core `sq.cur_post`), wrapping. Code that moves it other
    /// than through [`SqRing::commit`], [`SqRing::reserve_one`] + [`SqRing::commit_reserved`]
    /// or [`SqRing::reset`] must call [`SqRing::forget_credits`].
    pub cur_post: u32,
    /// WQEBBs known free without reading the published tail: at most `wqebbs - (cur_post -
    /// tail)` for the tail the poller has published (it only moves forward between resets:
    /// WQEs complete in order), so a WQEBB [`SqRing::reserve_one`] takes from it is one whose
    /// completion software has already seen. Refilled from the tail only when it runs out
    /// (rdma-core `mlx5_wq_overflow` reads `wq->tail` on every post; the tail only grows, so
    /// reading it less often only ever refuses more, never less, until the refill). Negative
    /// only just after a failed [`SqRing::take_credit`], which the caller follows with
    /// [`SqRing::reserve_one`] or [`SqRing::forget_credits`]; every reader treats it as 0.
    credits: i32,
}

impl SqRing {
    /// A send ring over `ring` (its length a multiple of 64).
    pub fn new(ring: RingPtr) -> Self {
        let wqebbs = (ring.len() / 64) as u32;
        Self {
            ring,
            wqebbs,
            cur_post: 0,
            credits: 0,
        }
    }

    /// Takes the WQEBB at `cur_post` for a one-WQEBB WQE: true if it is free (then write it
    /// and [`SqRing::commit_reserved`] it), false if the ring is full. One decrement while
    /// credits last; the published tail is read only when they run out.
    #[inline(always)]
    pub fn reserve_one(&mut self, shared: &WqShared) -> bool {
        if self.credits > 0 {
            self.credits -= 1;
            true
        } else {
            self.refill_one(shared)
        }
    }

    /// [`SqRing::reserve_one`] without the refill: true (and one credit taken) while credits
    /// last, false when they ran out; then the caller must use [`SqRing::reserve_one`] (out of
    /// line) or [`SqRing::forget_credits`] before anything else (the failed decrement left
    /// the count negative). The decrement is unconditional, so this is one read-modify-write
    /// and a sign test.
    #[inline(always)]
    pub fn take_credit(&mut self) -> bool {
        self.credits = self.credits.wrapping_sub(1);
        self.credits >= 0
    }

    /// [`SqRing::reserve_one`] out of credits: the space rule against the published tail (in
    /// use `cur_post - tail`; a full ring, or a bad tail past `cur_post`, refuses), and the
    /// credits left after this WQEBB.
    #[cold]
    #[inline(never)]
    fn refill_one(&mut self, shared: &WqShared) -> bool {
        let in_use = self.cur_post.wrapping_sub(shared.sq_tail());
        if in_use >= self.wqebbs {
            self.credits = 0;
            return false;
        }
        // `wqebbs - in_use - 1 < wqebbs`, and `wqebbs` (a ring's WQEBBs) is far below
        // `i32::MAX`; saturate anyway rather than trust it.
        self.credits = i32::try_from(self.wqebbs - in_use - 1).unwrap_or(i32::MAX);
        true
    }

    /// Records the one-WQEBB WQE at `start` (== `cur_post`, reserved with
    /// [`SqRing::reserve_one`]) and advances `cur_post` past it.
    #[inline(always)]
    pub fn commit_reserved(&mut self, shared: &WqShared, start: u32, wr_id: u64) {
        let next = start.wrapping_add(1);
        shared.record_send(start, next, wr_id);
        self.cur_post = next;
    }

    /// Drops the credits (the next [`SqRing::reserve_one`] reads the tail): for code that
    /// moves `cur_post` by hand.
    pub fn forget_credits(&mut self) {
        self.credits = 0;
    }

    /// Starts over after a reset to RST (with [`WqShared::reset`]): `cur_post` 0, no credits.
    pub fn reset(&mut self) {
        self.cur_post = 0;
        self.credits = 0;
    }

    /// WQEBBs free, given the tail the poller published.
    #[inline(always)]
    pub fn free(&self, tail: u32) -> u32 {
        self.wqebbs.saturating_sub(self.cur_post.wrapping_sub(tail))
    }

    /// The byte offset of WQEBB `index` (masked into the ring).
    #[inline(always)]
    pub fn offset_of(&self, index: u32) -> usize {
        ((index & (self.wqebbs - 1)) as usize) << 6
    }

    /// The address of WQEBB `slot` (`slot < wqebbs` for an address inside the ring: the ring
    /// holds `wqebbs * 64` bytes, [`SqRing::new`]). Computing it is safe; storing through it
    /// is the caller's `unsafe`.
    #[inline(always)]
    pub fn wqe_ptr(&self, slot: u32) -> *mut u64 {
        self.ring
            .base()
            .as_ptr()
            .wrapping_add((slot as usize) << 6)
            .cast()
    }

    /// Records the `wr_id` and end of the WQE starting at `start` of `wqebbs` blocks, and
    /// advances `cur_post` past it.
    #[inline(always)]
    pub fn commit(&mut self, shared: &WqShared, start: u32, wqebbs: u32, wr_id: u64) {
        let next = start.wrapping_add(wqebbs);
        shared.record_send(start, next, wr_id);
        self.cur_post = next;
        // These WQEBBs were checked against the tail, not taken from the credits: the credits
        // must not count them as free any more. Dropping them all is one store; the next
        // `reserve_one` reads the tail again.
        self.credits = 0;
    }
}

/// The receive queue's producer side.
#[derive(Debug)]
pub struct RqRing {
    /// The RQ part of the WQ buffer.
    pub ring: RingPtr,
    /// Receive WQEs in the ring (a power of two).
    pub wqes: u32,
    /// Bytes per receive WQE (`16 << log_rq_stride`).
    pub stride: usize,
    /// Receive WQEs posted so far (rdma-core `rq.head`), wrapping.
    pub head: u32,
}

impl RqRing {
    /// A receive ring over `ring` with `stride`-byte WQEs.
    pub fn new(ring: RingPtr, stride: usize) -> Self {
        let wqes = (ring.len() / stride.max(16)) as u32;
        Self {
            ring,
            wqes,
            stride,
            head: 0,
        }
    }

    /// Receive WQEs free, given the tail the poller published.
    #[inline(always)]
    pub fn free(&self, tail: u32) -> u32 {
        self.wqes.saturating_sub(self.head.wrapping_sub(tail))
    }

    /// Data segments one receive WQE holds (the stride / 16).
    pub fn max_sge(&self) -> usize {
        self.stride / 16
    }

    /// Records the `wr_id` of the WQE at `head` and advances `head`.
    #[inline(always)]
    pub fn commit(&mut self, shared: &WqShared, wr_id: u64) {
        shared.rq_slot(self.head).store(wr_id, Ordering::Relaxed);
        self.head = self.head.wrapping_add(1);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A heap ring for unit tests (64-byte aligned).
    pub(crate) struct TestRing {
        mem: Vec<u128>,
    }

    impl TestRing {
        pub(crate) fn new(len: usize) -> Self {
            Self {
                mem: vec![0u128; len / 16],
            }
        }
        pub(crate) fn ring(&mut self) -> RingPtr {
            let len = self.mem.len() * 16;
            let p = NonNull::new(self.mem.as_mut_ptr().cast::<u8>()).unwrap();
            // SAFETY: the Vec outlives every ring made from it in these tests, and tests only
            // read it back through the ring.
            unsafe { RingPtr::new(p, len) }.unwrap()
        }
    }

    #[test]
    fn ring_write_wraps_to_the_start() {
        let mut t = TestRing::new(128);
        let r = t.ring();
        r.write(120, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let mut out = [0u8; 10];
        r.read(120, &mut out);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let mut head = [0u8; 2];
        r.read(0, &mut head);
        assert_eq!(head, [9, 10]);
        // Offsets past the end are masked.
        r.write(128 + 4, &[0xaa]);
        assert_eq!(r.read_u8(4), 0xaa);
    }

    #[test]
    fn non_power_of_two_rings_are_refused() {
        let mut v = vec![0u8; 96];
        let p = NonNull::new(v.as_mut_ptr()).unwrap();
        // SAFETY: `v` outlives the (refused) ring.
        assert!(unsafe { RingPtr::new(p, 96) }.is_none());
    }

    #[test]
    fn sq_free_space_follows_the_published_tail() {
        let mut t = TestRing::new(4 * 64);
        let shared = WqShared::new(7, 4, 0);
        let mut sq = SqRing::new(t.ring());
        assert_eq!(sq.free(shared.sq_tail()), 4);
        sq.commit(&shared, 0, 2, 100);
        sq.commit(&shared, 2, 1, 101);
        assert_eq!(sq.free(shared.sq_tail()), 1);
        // A completion of the second WQE retires both (the first was unsignaled).
        assert_eq!(shared.complete_send(2), 101);
        assert_eq!(sq.free(shared.sq_tail()), 4);
        // Counters wrap past u32::MAX without losing the arithmetic.
        sq.cur_post = u32::MAX;
        let s2 = WqShared::new(7, 4, 0);
        s2.sq_tail.store(u32::MAX - 1, Ordering::Relaxed);
        assert_eq!(sq.free(s2.sq_tail()), 3);
        assert_eq!(sq.offset_of(5), 64);
    }

    #[test]
    fn sq_credits_never_cover_a_wqebb_the_tail_has_not_freed() {
        let mut t = TestRing::new(4 * 64);
        let shared = WqShared::new(7, 4, 0);
        let mut sq = SqRing::new(t.ring());
        // No credits yet: the fast test fails and the refill reads the tail (4 free).
        assert!(!sq.take_credit());
        assert!(sq.reserve_one(&shared));
        sq.commit_reserved(&shared, 0, 10);
        // A general-path post of two WQEBBs checked against the tail: the credits are dropped,
        // and the refill finds the one WQEBB left.
        sq.commit(&shared, 1, 2, 11);
        assert!(!sq.take_credit());
        assert!(sq.reserve_one(&shared), "one WQEBB left");
        sq.commit_reserved(&shared, 3, 12);
        assert_eq!(sq.free(shared.sq_tail()), 0);
        assert!(
            !sq.take_credit() && !sq.reserve_one(&shared),
            "full: refused"
        );
        // A completion frees the first three; the refill sees them.
        shared.complete_send(1);
        assert!(!sq.take_credit());
        for start in 4..7 {
            assert!(sq.reserve_one(&shared));
            sq.commit_reserved(&shared, start, u64::from(start));
        }
        assert!(!sq.reserve_one(&shared));
        // A reset drops them: after it the tail is read again.
        sq.reset();
        shared.reset();
        assert!(!sq.take_credit());
        assert!(sq.reserve_one(&shared));
        // A QP that moves `cur_post` by hand forgets them.
        sq.forget_credits();
        assert!(!sq.take_credit());
    }

    #[test]
    fn receives_complete_in_order() {
        let mut t = TestRing::new(4 * 64);
        let shared = WqShared::new(7, 0, 4);
        let mut rq = RqRing::new(t.ring(), 64);
        assert_eq!((rq.wqes, rq.max_sge()), (4, 4));
        for id in 10..14 {
            rq.commit(&shared, id);
        }
        assert_eq!(rq.free(shared.rq_tail()), 0);
        assert_eq!(shared.complete_recv(), 10);
        assert_eq!(shared.complete_recv(), 11);
        assert_eq!(rq.free(shared.rq_tail()), 2);
    }
}
