//! The device-memory pool: one [`DeviceMr`] cut into equal chunks, leased out as owned
//! [`DeviceLease`]s that work requests take, as a [`crate::MemoryPool`] does for host memory.
//!
//! Owns: [`DevicePool`] and [`DeviceLease`]. Must not: register memory (the region comes
//! registered) or hand out a reference into it: a lease's bytes are read and written by
//! copies ([`DeviceLease::read`], [`DeviceLease::write`]), device memory having no CPU
//! pointer. So no Rust reference covers a lease's bytes, and a lease may be the target of a
//! receive, an RDMA READ or an atomic as well as a source (the rule that keeps a
//! [`crate::SharedLease`] out of those is about references, which a device lease has none of).
//!
//! Only regions no peer may write (no REMOTE_WRITE or REMOTE_ATOMIC) are pooled, as the host
//! pool: a lease stands for "nobody but its holder and the NIC working for it touches these
//! bytes", which a peer's WRITE would break. Leases go back to the pool when dropped, and
//! those posted come back with their completions ([`crate::Qp::reclaim`]).

use std::fmt;
use std::sync::Arc;

use crate::chunks::Chunks;
use crate::device_mr::DeviceMr;
use crate::driver::mr::MkeyAccess;
use crate::error::VerbsError;

struct Shared {
    mr: DeviceMr,
    chunk: usize,
    chunks: Chunks,
}

/// A [`DeviceMr`] cut into chunks of one size, leased out one at a time. Cloning is cheap
/// (an `Arc`); leases keep the pool (and the registration) alive.
#[derive(Clone)]
pub struct DevicePool {
    shared: Arc<Shared>,
}

impl fmt::Debug for DevicePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevicePool")
            .field("mr", &self.shared.mr)
            .field("chunk", &self.shared.chunk)
            .field("count", &self.shared.chunks.count())
            .field("leased", &self.leased())
            .finish()
    }
}

impl DevicePool {
    /// A pool of `mr.len() / chunk` chunks of `chunk` bytes over `mr`.
    ///
    /// Errors: [`VerbsError::MrAccessMode`] for a region a peer may write;
    /// [`VerbsError::PoolSize`] for `chunk == 0` or larger than the region.
    pub fn new(mr: DeviceMr, chunk: usize) -> Result<DevicePool, VerbsError> {
        if mr
            .access()
            .intersects(MkeyAccess::REMOTE_WRITE | MkeyAccess::REMOTE_ATOMIC)
        {
            return Err(VerbsError::MrAccessMode {
                what: "a device region a peer may write cannot be pooled",
                fix: "register it with LOCAL_WRITE (and REMOTE_READ) only, or copy with DeviceMr::read/write",
            });
        }
        let count = mr.len().checked_div(chunk).unwrap_or(0);
        if count == 0 {
            return Err(VerbsError::PoolSize {
                chunk,
                count,
                have: mr.len(),
            });
        }
        Ok(DevicePool {
            shared: Arc::new(Shared {
                mr,
                chunk,
                chunks: Chunks::new(count),
            }),
        })
    }

    /// Leases a chunk, of which the first `len` bytes are the lease. Lock-free, no allocation.
    ///
    /// Errors: [`VerbsError::LeaseTooLarge`] beyond the chunk size,
    /// [`VerbsError::PoolExhausted`] when every chunk is leased (posted leases come back with
    /// their completions).
    pub fn lease(&self, len: usize) -> Result<DeviceLease, VerbsError> {
        let s = &*self.shared;
        if len > s.chunk {
            return Err(VerbsError::LeaseTooLarge {
                len,
                chunk: s.chunk,
            });
        }
        match s.chunks.take() {
            Some(index) => Ok(DeviceLease {
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

    /// The size of each chunk.
    pub fn chunk_size(&self) -> usize {
        self.shared.chunk
    }

    /// How many chunks the pool has.
    pub fn capacity(&self) -> usize {
        self.shared.chunks.count()
    }

    /// How many chunks are leased now (posted ones included).
    pub fn leased(&self) -> usize {
        self.shared.chunks.leased()
    }

    /// The local key of the region.
    pub fn lkey(&self) -> u32 {
        self.shared.mr.lkey()
    }

    /// Gives the region back if no lease and no other clone of the pool is alive; the pool
    /// otherwise.
    pub fn into_mr(self) -> Result<DeviceMr, DevicePool> {
        Arc::try_unwrap(self.shared)
            .map(|s| s.mr)
            .map_err(|shared| DevicePool { shared })
    }
}

/// One leased chunk of a [`DevicePool`]: owned, exclusive, reached by copies. Dropping it
/// returns the chunk; posting it moves it into the work request until its completion.
pub struct DeviceLease {
    pool: Arc<Shared>,
    index: usize,
    len: usize,
}

impl fmt::Debug for DeviceLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceLease")
            .field("chunk", &self.index)
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceLease {
    /// The device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.pool.mr.addr() + self.offset() as u64
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.pool.mr.lkey()
    }

    /// The lease's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the lease is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk's capacity (the largest `len` it can be set to).
    pub fn capacity(&self) -> usize {
        self.pool.chunk
    }

    /// Sets the length (e.g. to a receive completion's `byte_len`).
    ///
    /// Errors: [`VerbsError::LeaseTooLarge`] beyond the chunk size.
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

    /// Which chunk this is.
    pub fn chunk_index(&self) -> usize {
        self.index
    }

    fn offset(&self) -> usize {
        self.index * self.pool.chunk
    }

    fn check(&self, off: usize, len: usize) -> Result<usize, VerbsError> {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(VerbsError::OutsideMr {
                offset: off as u64,
                len: len as u64,
                mr_len: self.len as u64,
            });
        }
        Ok(self.offset() + off)
    }

    /// Copies `dst.len()` bytes at `off` of the lease into `dst`.
    ///
    /// Errors: [`VerbsError::OutsideMr`] beyond `len()`; those of [`DeviceMr::read`].
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        let at = self.check(off, dst.len())?;
        self.pool.mr.read(at, dst)
    }

    /// Copies `src` into the lease at `off`.
    ///
    /// Errors: as [`DeviceLease::read`].
    pub fn write(&mut self, off: usize, src: &[u8]) -> Result<(), VerbsError> {
        let at = self.check(off, src.len())?;
        self.pool.mr.write(at, src)
    }
}

impl Drop for DeviceLease {
    fn drop(&mut self) {
        self.pool.chunks.give(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn device_memory_handles_move_between_threads() {
        // A lease posted on one thread comes back on the poller's; the pool is shared.
        send_sync::<DeviceMr>();
        send_sync::<DevicePool>();
        send_sync::<DeviceLease>();
    }
}
