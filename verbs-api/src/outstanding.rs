//! The per-queue table of buffers owned by outstanding work requests: a pre-sized array
//! indexed by the WQE's ring index (SQ: the WQEBB index the WQE starts at, which the CQE's
//! `wqe_counter` names; RQ: the receive WQE index, `WorkCompletion::wqe_index`), so parking
//! and reclaiming allocate nothing. A completion is matched by the index it names, never as
//! "the oldest outstanding". A buffer parked at index `i` leaves the table only when
//! - a completion for `i` or a later index of the same queue is reclaimed (mlx5 writes a
//!   queue's CQEs in order, so the NIC is done with every WQE up to `i`); or
//! - the queue is destroyed or reset (the NIC no longer touches its WQEs); or
//! - the driver reuses the index for a new WQE (only once that slot's completion was seen;
//!   otherwise the post fails with "queue full").
//!
//! Stale completions release nothing, so reclaiming in any order is sound.
//!
//! Owns: the table. Must not: decide when the NIC is done (the caller proves it with a polled
//! completion).
//! Sources: rdma-core `providers/mlx5/cq.c` `mlx5_parse_cqe` (`wq->tail` advances to
//! `wqe_head[wqe_ctr] + 1`, retiring the unsignaled WQEs before it).

use crate::wr::SgeList;

/// One ring slot: the buffers of the WQE that starts there, and how many completions its CQ
/// had produced when it was posted.
#[derive(Debug, Default)]
struct Slot {
    bufs: SgeList,
    posted_at: u64,
}

/// Buffers of outstanding WQEs of one queue.
#[derive(Debug)]
pub(crate) struct Outstanding {
    slots: Box<[Slot]>,
    /// Ring size minus one (the size is a power of two, at most 2^15).
    mask: u32,
    /// Ring positions posted so far (free-running).
    head: u32,
    /// Ring positions known complete (free-running).
    tail: u32,
}

impl Outstanding {
    /// A table for a ring of `size` entries (a power of two).
    pub(crate) fn new(size: u32) -> Self {
        let size = size.clamp(1, 1 << 15).next_power_of_two();
        Outstanding {
            slots: (0..size).map(|_| Slot::default()).collect(),
            mask: size - 1,
            head: 0,
            tail: 0,
        }
    }

    /// Parks the buffers of a WQE that starts at free-running position `pos` and spans `n`
    /// entries (n WQEBBs), posted when its CQ had produced `posted_at` completions. Whatever
    /// was parked at that index before belonged to a WQE the driver knows is complete (it let
    /// us reuse the index), so it is dropped, returning its leases to their pools.
    pub(crate) fn park(&mut self, pos: u32, n: u32, bufs: SgeList, posted_at: u64) {
        if let Some(s) = self.slots.get_mut((pos & self.mask) as usize) {
            if bufs.is_empty() && s.bufs.is_empty() {
                // An inline or empty request over an empty slot: nothing to keep or drop.
                s.posted_at = posted_at;
            } else {
                *s = Slot { bufs, posted_at };
            }
        }
        let end = pos.wrapping_add(n.max(1));
        // Only move forward (pos is always at the head in practice).
        if end.wrapping_sub(self.tail) > self.head.wrapping_sub(self.tail) {
            self.head = end;
        }
        // Entries behind the ring (overwritten): the driver proved them complete.
        if self.head.wrapping_sub(self.tail) > self.mask + 1 {
            self.tail = self.head.wrapping_sub(self.mask + 1);
        }
    }

    /// A completion, the `seq`-th its CQ produced, was polled for the WQE whose 16-bit
    /// counter is `counter` (the CQE's `wqe_counter`: the free-running position modulo
    /// 2^16). Releases every parked entry up to it: returns the buffers of that WQE and drops
    /// (returns to their pools) those of earlier unsignaled WQEs.
    ///
    /// A stale completion releases nothing: one whose position is not outstanding (already
    /// released, or overwritten by a later lap: an empty list), or one polled before the WQE
    /// now at that position was posted (`seq <= posted_at`: a completion of a QP that had
    /// this number before, or of a WQE before a reset, cannot name a WQE posted after it was
    /// polled): `Err(posted_at)` of the WQE there.
    pub(crate) fn complete(&mut self, counter: u16, seq: u64) -> Result<SgeList, u64> {
        let outstanding = self.head.wrapping_sub(self.tail);
        // Positions are compared modulo 2^16, the width of `wqe_counter`; the ring holds at
        // most 2^15, so an outstanding position is never ambiguous.
        let dist = u32::from(counter.wrapping_sub(self.tail as u16));
        if dist >= outstanding {
            return Ok(SgeList::new());
        }
        let at = (self.tail.wrapping_add(dist) & self.mask) as usize;
        let Some(slot) = self.slots.get(at) else {
            return Ok(SgeList::new());
        };
        if slot.posted_at >= seq {
            return Err(slot.posted_at);
        }
        for k in 0..dist {
            let i = self.tail.wrapping_add(k) & self.mask;
            if let Some(s) = self.slots.get_mut(i as usize) {
                drop(s.bufs.take());
            }
        }
        self.tail = self.tail.wrapping_add(dist + 1);
        Ok(match self.slots.get_mut(at) {
            Some(s) if !s.bufs.is_empty() => s.bufs.take(),
            _ => SgeList::new(),
        })
    }

    /// The queue was reset or destroyed: the NIC no longer touches any WQE, drop everything.
    pub(crate) fn clear(&mut self) {
        for s in self.slots.iter_mut() {
            drop(s.bufs.take());
        }
        self.head = 0;
        self.tail = 0;
    }

    /// How many ring positions are outstanding.
    pub(crate) fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::MemoryPool;
    use crate::pool::tests::HeapMemory;

    fn pool() -> MemoryPool {
        MemoryPool::from_memory(HeapMemory::new(64 * 32), 64, 32).unwrap()
    }

    fn one(p: &MemoryPool, tag: u8) -> SgeList {
        let mut l = p.lease(8).unwrap();
        l.as_mut_slice().fill(tag);
        SgeList::one(l)
    }

    fn tag(l: Result<SgeList, u64>) -> Option<u8> {
        l.ok()?
            .into_leases()
            .next()
            .and_then(|l| l.as_slice().first().copied())
    }

    #[test]
    fn completion_returns_its_buffers_and_drops_earlier_unsignaled_ones() {
        let p = pool();
        let mut o = Outstanding::new(8);
        for i in 0..4u32 {
            o.park(i, 1, one(&p, i as u8), 0);
        }
        assert_eq!(p.leased(), 4);
        assert_eq!(tag(o.complete(2, 1)), Some(2));
        assert_eq!(
            p.leased(),
            1,
            "0 and 1 returned to the pool, 2 handed back and dropped"
        );
        assert_eq!(o.outstanding(), 1);
        assert_eq!(tag(o.complete(3, 2)), Some(3));
        assert_eq!(p.leased(), 0);
    }

    #[test]
    fn stale_completion_releases_nothing() {
        let p = pool();
        let mut o = Outstanding::new(8);
        o.park(0, 1, one(&p, 0), 0);
        o.park(1, 1, one(&p, 1), 0);
        assert_eq!(tag(o.complete(0, 1)), Some(0));
        assert!(o.complete(0, 2).unwrap().is_empty(), "already released");
        assert!(o.complete(5, 2).unwrap().is_empty(), "never posted");
        assert_eq!(p.leased(), 1, "WQE 1 is still outstanding");
    }

    #[test]
    fn multi_wqebb_wqes_and_wrap_around_keep_buffers_until_completion() {
        let p = pool();
        let mut o = Outstanding::new(8);
        let mut pos = 0u32;
        for lap in 0..10u32 {
            let start = pos;
            o.park(pos, 3, one(&p, lap as u8), u64::from(lap));
            pos = pos.wrapping_add(3);
            assert_eq!(p.leased(), 1);
            assert_eq!(
                tag(o.complete(start as u16, u64::from(lap) + 1)),
                Some(lap as u8)
            );
            assert_eq!(p.leased(), 0);
        }
    }

    #[test]
    fn a_completion_kept_while_its_slot_is_reposted_releases_nothing() {
        let p = pool();
        let mut o = Outstanding::new(4);
        for i in 0..4u32 {
            o.park(i, 1, one(&p, i as u8), 0);
        }
        // Position 0 completed (seq 1) but its completion is kept; the slot is reposted.
        o.park(4, 1, one(&p, 4), 1);
        assert_eq!(
            p.leased(),
            4,
            "position 0's buffer went back when overwritten"
        );
        assert!(
            o.complete(0, 1).unwrap().is_empty(),
            "position 0 is behind the window: positions 1..=4 stay parked"
        );
        assert_eq!(p.leased(), 4);
        assert_eq!(tag(o.complete(1, 2)), Some(1));
        assert_eq!(tag(o.complete(4, 5)), Some(4));
        assert_eq!(p.leased(), 0);
    }

    #[test]
    fn completion_polled_before_the_wqe_was_posted_releases_nothing() {
        let p = pool();
        let mut o = Outstanding::new(4);
        // Lap 1: positions 0..4, completions polled as seq 1..=4; the one for position 3 is
        // kept (not reclaimed) while the ring wraps.
        for i in 0..4u32 {
            o.park(i, 1, one(&p, i as u8), u64::from(i));
        }
        assert_eq!(tag(o.complete(2, 3)), Some(2));
        // The driver reuses the slots; positions 4..8 are posted after 4 completions.
        for i in 4..8u32 {
            o.park(i, 1, one(&p, i as u8), 4);
        }
        // The old completion for position 3 (seq 4) names slot 3, now WQE 7: position 3 is
        // behind the window (the 16-bit counter tells the laps apart), nothing released.
        assert!(o.complete(3, 4).unwrap().is_empty());
        assert_eq!(p.leased(), 4, "WQEs 4..8 stay parked");
        assert_eq!(tag(o.complete(7, 5)), Some(7));
        // After a reset positions restart at 0: a completion polled before the new WQE was
        // posted cannot release it, and says so with the WQE's `posted_at`.
        o.clear();
        o.park(0, 1, one(&p, 9), 10);
        assert_eq!(o.complete(0, 10).err(), Some(10));
        assert_eq!(o.complete(0, 7).err(), Some(10));
        assert_eq!(p.leased(), 1, "still parked");
        assert_eq!(tag(o.complete(0, 11)), Some(9));
    }

    #[test]
    fn clear_returns_everything() {
        let p = pool();
        let mut o = Outstanding::new(4);
        for i in 0..4 {
            o.park(i, 1, one(&p, 0), 0);
        }
        o.clear();
        assert_eq!(p.leased(), 0);
        assert_eq!(o.outstanding(), 0);
    }
}
