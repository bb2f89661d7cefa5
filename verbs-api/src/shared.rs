//! Shared (frozen) leases: one registered buffer that many outstanding SENDs and WRITEs read
//! at once, as perftest's `ib_write_bw` posts every WRITE from the same local buffer.
//!
//! A [`SharedLease`] is a [`Lease`] frozen behind an `Arc`. Freezing gives up `&mut` until
//! [`SharedLease::try_unfreeze`] proves no other handle exists, so while any clone lives (the
//! clones parked in a QP by posted work requests included) safe code and the NIC only read the
//! bytes. The NIC only reads the gather list of a SEND or WRITE, so concurrent reads are sound; a
//! shared lease is refused wherever the NIC would write: receives, the local buffer of a READ or an
//! atomic ([`crate::VerbsError::SharedBufferWritten`]). Each clone keeps the chunk (and the pool
//! and its registration) alive; a work request's clone drops when its completion, or a later one of
//! the same queue, is reclaimed.
//!
//! Owns: the frozen handle. Must not: lease or register memory (the pool does).
//! Sources: rdma-core `providers/mlx5/qp.c` `set_data_ptr_seg` (the same gather segment for
//! SEND and WRITE, read by DMA); perftest `run_iter_bw` (one source buffer for every WRITE).

use std::fmt;
use std::sync::Arc;

use crate::pool::Lease;

/// A read-only lease that may be posted by many work requests at once. Cloning is one atomic
/// increment (no allocation), so a streaming loop can post the same source every time.
///
/// ```
/// # fn f(mut lease: bypass_verbs::Lease) {
/// lease.as_mut_slice().fill(7);
/// let src = lease.freeze(); // read-only from here on
/// let again = src.clone(); // post `src` and `again` in two WRITEs at once
/// assert_eq!(src.as_slice()[0], 7);
/// drop(again);
/// let mut lease = src.try_unfreeze().expect("no other handle left"); // writable again
/// lease.as_mut_slice()[0] = 8;
/// # }
/// ```
#[derive(Clone)]
pub struct SharedLease {
    inner: Arc<Lease>,
}

impl SharedLease {
    pub(crate) fn new(lease: Lease) -> Self {
        SharedLease {
            inner: Arc::new(lease),
        }
    }

    /// The bytes (read-only: neither safe code nor the NIC writes them while shared).
    pub fn as_slice(&self) -> &[u8] {
        self.inner.as_slice()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.inner.iova()
    }

    /// The local key of the pool's registration.
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }

    /// How many handles exist (this one, other clones, and those parked in QPs by posted
    /// work requests whose completions were not reclaimed yet).
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// The writable lease back, if this is the last handle (every work request that posted
    /// it has had its completion reclaimed and every other clone is dropped); otherwise the
    /// shared lease itself, unchanged.
    pub fn try_unfreeze(self) -> Result<Lease, SharedLease> {
        Arc::try_unwrap(self.inner).map_err(|inner| SharedLease { inner })
    }
}

impl fmt::Debug for SharedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLease")
            .field("lease", &*self.inner)
            .field("handles", &self.handles())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::outstanding::Outstanding;
    use crate::pool::MemoryPool;
    use crate::pool::tests::HeapMemory;
    use crate::wr::SgeList;

    fn pool() -> MemoryPool {
        MemoryPool::from_memory(HeapMemory::new(64 * 4), 64, 4).unwrap()
    }

    #[test]
    fn a_shared_lease_is_readable_by_every_clone_and_keeps_its_chunk() {
        let p = pool();
        let mut l = p.lease(16).unwrap();
        l.as_mut_slice().fill(0xab);
        let idx = l.chunk_index();
        let s = l.freeze();
        let c = s.clone();
        assert_eq!(s.handles(), 2);
        assert_eq!((s.iova(), s.lkey(), s.len()), (c.iova(), c.lkey(), 16));
        assert_eq!(s.iova(), 0x10_0000 + (idx * 64) as u64);
        assert!(c.as_slice().iter().all(|&b| b == 0xab));
        drop(s);
        assert_eq!(p.leased(), 1, "a clone still holds the chunk");
        drop(c);
        assert_eq!(p.leased(), 0, "the last handle returned it");
    }

    #[test]
    fn unfreezing_is_refused_while_a_posted_request_holds_a_clone() {
        let p = pool();
        let s = p.lease(8).unwrap().freeze();
        let mut sq = Outstanding::new(8);
        // Two WQEs posted from the same shared buffer.
        sq.park(0, 1, SgeList::one(s.clone()), 0);
        sq.park(1, 1, SgeList::one(s.clone()), 0);
        assert_eq!(s.handles(), 3);
        let s = s.try_unfreeze().expect_err("two WQEs still read it");
        // The completion of WQE 0 releases one clone; WQE 1 still holds the other.
        drop(sq.complete(0, 1));
        let s = s.try_unfreeze().expect_err("WQE 1 still reads it");
        drop(sq.complete(1, 2));
        let mut l = s.try_unfreeze().expect("every completion reclaimed");
        l.as_mut_slice()[0] = 1;
        assert_eq!(p.leased(), 1);
        drop(l);
        assert_eq!(p.leased(), 0);
    }

    #[test]
    fn destroying_the_queue_releases_its_clones() {
        let p = pool();
        let s = p.lease(8).unwrap().freeze();
        let mut sq = Outstanding::new(4);
        sq.park(0, 1, SgeList::one(s.clone()), 0);
        sq.clear();
        assert!(s.try_unfreeze().is_ok());
    }
}
