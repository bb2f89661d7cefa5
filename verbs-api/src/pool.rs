//! The memory pool: one registered region cut into equal chunks, leased out as owned
//! [`Lease`]s that return to the pool when dropped. The free set is an atomic bitmap
//! (`chunks.rs`), so a lease is taken and returned from any thread without a lock or an
//! allocation.
//!
//! A [`Lease`] is the unit of the soundness design (see the crate docs): it is the only handle
//! to its bytes, so whoever holds it may take `&mut [u8]`; posting a work request *moves* the
//! lease into the QP, which keeps it until the completion is polled, so no safe code can touch
//! the bytes while the NIC may access them.
//!
//! Owns: the chunk bitmap and the leases. Must not: register memory itself (the region comes
//! registered, see `PoolMemory`) or talk to the device.
//! Sources: ixy.rs's `Mempool` (fixed-size buffers of one pinned region, returned on drop).

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::chunks::Chunks;
use crate::error::VerbsError;

/// Registered memory a pool carves up: a base pointer, a length, the device address of byte 0
/// and the keys. Implemented by the crate's memory regions.
///
/// # Safety
/// `base()..base()+len()` must stay valid for reads and writes, pinned and registered with
/// the device under `lkey()` at `iova()`, for as long as the value lives; nothing else may
/// create references into that memory.
pub(crate) unsafe trait PoolMemory: Send + Sync {
    fn base(&self) -> NonNull<u8>;
    fn len(&self) -> usize;
    fn iova(&self) -> u64;
    fn lkey(&self) -> u32;
}

struct PoolShared {
    mem: Arc<dyn PoolMemory>,
    chunk: usize,
    /// Which chunks are leased.
    chunks: Chunks,
}

/// A registered region cut into `count` chunks of `chunk` bytes, leased out one at a time.
///
/// Cloning the pool is cheap (an `Arc`); leases keep the pool (and its registration) alive.
#[derive(Clone)]
pub struct MemoryPool {
    shared: Arc<PoolShared>,
}

impl fmt::Debug for MemoryPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPool")
            .field("chunk", &self.shared.chunk)
            .field("count", &self.shared.chunks.count())
            .field("leased", &self.leased())
            .finish()
    }
}

impl MemoryPool {
    /// A pool over `mem`, which must hold at least `chunk * count` bytes.
    pub(crate) fn from_memory(
        mem: Arc<dyn PoolMemory>,
        chunk: usize,
        count: usize,
    ) -> Result<Self, VerbsError> {
        let need = chunk.checked_mul(count);
        if chunk == 0 || count == 0 || need.is_none_or(|n| n > mem.len()) {
            return Err(VerbsError::PoolSize {
                chunk,
                count,
                have: mem.len(),
            });
        }
        Ok(MemoryPool {
            shared: Arc::new(PoolShared {
                mem,
                chunk,
                chunks: Chunks::new(count),
            }),
        })
    }

    /// Ends the pool if nothing else holds it (no lease alive, no clone): otherwise gives it
    /// back. Lets an owned region hand its memory back only once no lease can reach it.
    pub(crate) fn try_close(self) -> Result<(), Self> {
        Arc::try_unwrap(self.shared)
            .map(drop)
            .map_err(|shared| MemoryPool { shared })
    }

    /// The size of each chunk (the largest lease).
    pub fn chunk_size(&self) -> usize {
        self.shared.chunk
    }

    /// How many chunks the pool has.
    pub fn capacity(&self) -> usize {
        self.shared.chunks.count()
    }

    /// How many chunks are leased now (including those held by posted work requests).
    pub fn leased(&self) -> usize {
        self.shared.chunks.leased()
    }

    /// Leases a chunk, of which the first `len` bytes are the lease. Lock-free, no allocation.
    ///
    /// Errors: [`VerbsError::PoolExhausted`] when every chunk is leased (leases come back when
    /// dropped, and those moved into work requests when their completions are polled);
    /// [`VerbsError::LeaseTooLarge`] when `len` exceeds the chunk size.
    pub fn lease(&self, len: usize) -> Result<Lease, VerbsError> {
        let s = &*self.shared;
        if len > s.chunk {
            return Err(VerbsError::LeaseTooLarge {
                len,
                chunk: s.chunk,
            });
        }
        match s.chunks.take() {
            Some(index) => Ok(Lease {
                pool: self.shared.clone(),
                index,
                len,
            }),
            None => Err(VerbsError::PoolExhausted {
                count: s.chunks.count(),
                chunk: s.chunk,
            }),
        }
    }
}

/// One leased chunk of a [`MemoryPool`]: owned, exclusive access to `len()` bytes of
/// registered memory. Dropping it returns the chunk. Not `Clone`: there is exactly one
/// handle to the bytes, which is what lets posting take it by value.
pub struct Lease {
    pool: Arc<PoolShared>,
    index: usize,
    len: usize,
}

impl Lease {
    /// The lease's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the lease is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk's capacity (the largest `len` it can be resized to).
    pub fn capacity(&self) -> usize {
        self.pool.chunk
    }

    /// Sets the length (e.g. to the `byte_len` of a receive completion). Refused beyond the
    /// chunk size.
    pub fn set_len(&mut self, len: usize) -> Result<(), VerbsError> {
        if len > self.pool.chunk {
            return Err(VerbsError::LeaseTooLarge {
                len,
                chunk: self.pool.chunk,
            });
        }
        self.len = len;
        Ok(())
    }

    fn offset(&self) -> usize {
        self.index * self.pool.chunk
    }

    fn ptr(&self) -> NonNull<u8> {
        // SAFETY: index < count and chunk * count <= mem.len() (checked at pool creation), so
        // the offset stays inside the region `base()` points to.
        unsafe { self.pool.mem.base().add(self.offset()) }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the chunk lies inside the registered region (see `ptr`), which lives as long
        // as `self.pool`; this lease is the only handle to the chunk (the bitmap bit is ours)
        // and it is not posted (posting moves the lease away), so the device does not access it.
        unsafe { std::slice::from_raw_parts(self.ptr().as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr().as_ptr(), self.len) }
    }

    /// The device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.pool.mem.iova() + self.offset() as u64
    }

    /// The local key of the pool's registration.
    pub fn lkey(&self) -> u32 {
        self.pool.mem.lkey()
    }

    /// Freezes the lease into a [`crate::SharedLease`]: read-only, cloneable, postable as the
    /// source of many SENDs/WRITEs at once (see `shared`). Allocates once (the shared count).
    pub fn freeze(self) -> crate::shared::SharedLease {
        crate::shared::SharedLease::new(self)
    }

    /// Which chunk this is (for research and tests).
    pub fn chunk_index(&self) -> usize {
        self.index
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("chunk", &self.index)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.chunks.give(self.index);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Heap memory standing in for a registration (keys are fake): for tests of the pool only.
    pub(crate) struct HeapMemory {
        ptr: NonNull<u8>,
        len: usize,
    }

    impl HeapMemory {
        pub(crate) fn new(len: usize) -> Arc<Self> {
            let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
            let ptr = NonNull::from(Box::leak(b)).cast::<u8>();
            Arc::new(HeapMemory { ptr, len })
        }
    }

    impl Drop for HeapMemory {
        fn drop(&mut self) {
            // SAFETY: ptr/len came from Box::leak of a Box<[u8]> of this length in `new`.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ))
            });
        }
    }

    // SAFETY: the memory is a leaked box freed only on drop; it is plain bytes.
    unsafe impl Send for HeapMemory {}
    // SAFETY: as above; the pool hands out disjoint chunks.
    unsafe impl Sync for HeapMemory {}

    // SAFETY: the box lives until drop; nothing else references it.
    unsafe impl PoolMemory for HeapMemory {
        fn base(&self) -> NonNull<u8> {
            self.ptr
        }
        fn len(&self) -> usize {
            self.len
        }
        fn iova(&self) -> u64 {
            0x10_0000
        }
        fn lkey(&self) -> u32 {
            0x1234
        }
    }

    fn pool(chunk: usize, count: usize) -> MemoryPool {
        MemoryPool::from_memory(HeapMemory::new(chunk * count), chunk, count).unwrap()
    }

    #[test]
    fn leases_are_disjoint_and_return_on_drop() {
        let p = pool(256, 70);
        let mut ls: Vec<Lease> = (0..70).map(|_| p.lease(100).unwrap()).collect();
        assert_eq!(p.leased(), 70);
        let mut idx: Vec<usize> = ls.iter().map(|l| l.chunk_index()).collect();
        idx.sort_unstable();
        idx.dedup();
        assert_eq!(idx.len(), 70);
        for (i, l) in ls.iter_mut().enumerate() {
            l.as_mut_slice().fill(i as u8);
        }
        for (i, l) in ls.iter().enumerate() {
            assert!(l.as_slice().iter().all(|&b| b == i as u8));
            assert_eq!(l.iova(), 0x10_0000 + (l.chunk_index() * 256) as u64);
        }
        ls.truncate(10);
        assert_eq!(p.leased(), 10);
        drop(ls);
        assert_eq!(p.leased(), 0);
    }

    #[test]
    fn exhaustion_is_a_typed_error_that_says_what_to_do() {
        let p = pool(64, 3);
        let _a = p.lease(64).unwrap();
        let _b = p.lease(64).unwrap();
        let c = p.lease(64).unwrap();
        let err = p.lease(1).unwrap_err();
        assert!(matches!(err, VerbsError::PoolExhausted { count: 3, .. }));
        assert!(err.to_string().contains("poll"), "{err}");
        drop(c);
        assert!(p.lease(1).is_ok());
    }

    #[test]
    fn lease_larger_than_a_chunk_is_refused() {
        let p = pool(64, 3);
        assert!(matches!(
            p.lease(65),
            Err(VerbsError::LeaseTooLarge { len: 65, chunk: 64 })
        ));
        let mut l = p.lease(8).unwrap();
        assert!(l.set_len(65).is_err());
        l.set_len(64).unwrap();
        assert_eq!(l.as_slice().len(), 64);
    }

    #[test]
    fn pool_larger_than_its_memory_is_refused() {
        assert!(MemoryPool::from_memory(HeapMemory::new(100), 64, 2).is_err());
    }

    #[test]
    fn leases_can_be_returned_from_other_threads() {
        let p = pool(64, 128);
        let ls: Vec<Lease> = (0..128).map(|_| p.lease(64).unwrap()).collect();
        std::thread::spawn(move || drop(ls)).join().unwrap();
        assert_eq!(p.leased(), 0);
    }
}
