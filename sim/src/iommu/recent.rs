//! The IOMMU's remembered mappings: the last few host mappings accesses went through, each
//! with its host address, so an access inside one is a compare and a copy.
//!
//! Owns: [`Recent`] and [`Cached`]. Must not: remember a peer mapping (one reached by copies
//! through `PeerMemory`, which has no host address), or outlive a mapping: the IOMMU empties
//! it whenever a mapping goes away.
//!
//! A ping-pong touches about four mappings per message (SQ ring, doorbell record, CQ ring,
//! buffer), so four slots, replaced oldest first, turn most accesses into a compare and a
//! copy instead of a tree search. Each slot keeps the mapping's host address next to the
//! `Arc` that keeps the buffer alive, which is what makes copying through it sound: the
//! pointer never outlives the buffer, and the `HostMemory` contract lets any thread copy
//! through it. The IOMMU's `remember_mapping` is the only producer (it refuses peer
//! mappings and ranges outside the buffer); `read`, `write`, `write_within_one` and
//! `within_one` are the consumers.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{Dir, Perm};
use crate::memory::HostMemory;

/// Slots of [`Recent`].
pub(super) const RECENT: usize = 4;

/// A mapping an access went through lately: its IOVA range, buffer and rights.
#[derive(Clone)]
pub(super) struct Cached {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) mem: Arc<dyn HostMemory>,
    pub(super) offset: usize,
    pub(super) perm: Perm,
    /// The mapping's first byte in host memory (`mem.base() + offset`), so that an access
    /// inside the mapping copies without asking `mem` for its base and length again.
    pub(super) host: NonNull<u8>,
}

impl Cached {
    /// The offset of `iova` into this mapping, if the mapping holds the whole of
    /// `iova..iova + len` and allows `dir` (the test [`Recent::hit`] and [`Recent::host`]
    /// share).
    #[inline(always)]
    fn within(&self, iova: u64, len: usize, dir: Dir) -> Option<u64> {
        // `iova - start` below the mapping's length: `start <= iova < end` in one compare
        // (a remembered mapping is never empty); then the range's end within the mapping.
        let within = iova.wrapping_sub(self.start);
        let ok = match dir {
            Dir::Read => self.perm.read,
            Dir::Write => self.perm.write,
        };
        (ok && within < self.end - self.start && len as u64 <= self.end - iova).then_some(within)
    }
}

// SAFETY: `host` points into the buffer `mem` keeps alive (the `Arc` is held beside it), whose
// bytes the `HostMemory` contract (a `Send + Sync` trait) lets any thread read and write
// through raw pointers. The pointer is only an address of that buffer: sending or sharing a
// `Cached` shares nothing `mem` does not already allow.
unsafe impl Send for Cached {}
// SAFETY: as for `Send`.
unsafe impl Sync for Cached {}

/// The last few mappings accesses went through (a ping-pong touches about four: SQ ring,
/// doorbell record, CQ ring, buffer), so that an access inside one costs a compare, not a
/// tree search. Emptied whenever a mapping goes away.
#[derive(Default, Clone)]
pub(super) struct Recent {
    slots: [Option<Cached>; RECENT],
    next: usize,
}

impl Recent {
    /// The slot and the offset into its buffer of `iova..iova + len`, if a remembered
    /// mapping holds the whole range and allows `dir`.
    #[inline]
    pub(super) fn hit(&self, iova: u64, len: usize, dir: Dir) -> Option<(usize, usize)> {
        for (i, c) in self.slots.iter().enumerate() {
            let Some(c) = c else { continue };
            if let Some(within) = c.within(iova, len, dir) {
                let within = usize::try_from(within).ok()?;
                return Some((i, c.offset.checked_add(within)?));
            }
        }
        None
    }

    /// The host address of `iova..iova + len`, if a remembered mapping holds the whole range
    /// and allows `dir`: [`Recent::hit`] for the accesses that copy at once.
    #[inline]
    pub(super) fn host(&self, iova: u64, len: usize, dir: Dir) -> Option<NonNull<u8>> {
        for c in self.slots.iter().flatten() {
            if let Some(within) = c.within(iova, len, dir) {
                // `within + len` is inside the mapping, which `Iommu::map` checked lies inside
                // the buffer, so the address is inside the allocation `host` points into.
                let within = usize::try_from(within).ok()?;
                // SAFETY: in bounds of the mapping's host range (above), itself inside the
                // buffer `mem` keeps allocated.
                return Some(unsafe { c.host.add(within) });
            }
        }
        None
    }

    /// The buffer of slot `i` (one [`Recent::hit`] returned).
    pub(super) fn mem(&self, i: usize) -> Option<&Arc<dyn HostMemory>> {
        self.slots.get(i)?.as_ref().map(|c| &c.mem)
    }

    /// Remembers `c`, replacing the oldest slot.
    pub(super) fn remember(&mut self, c: Cached) {
        if let Some(slot) = self.slots.get_mut(self.next % RECENT) {
            *slot = Some(c);
        }
        self.next = self.next.wrapping_add(1);
    }

    /// Forgets everything (a mapping went away).
    pub(super) fn clear(&mut self) {
        self.slots = Default::default();
    }
}
