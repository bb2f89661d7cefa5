//! Memory regions the API allocates and registers: pinned DMA memory under one memory key.
//!
//! Memory a peer may write can change at any moment without a local completion, so an
//! [`Mr`] never hands out `&[u8]` into its bytes: [`Mr::read`] and [`Mr::write`] copy through
//! raw pointers (crate docs, rule 6). The region is the backing of a [`crate::MemoryPool`]
//! too, which is how local message buffers are leased.
//!
//! Owns: [`Mr`]. Must not: register memory it did not allocate, or build commands.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::driver::mr::{MkeyAccess, Mr as DriverMr};
use crate::endpoint::RemoteBuffer;
use crate::error::VerbsError;
use crate::pd::Pd;
use crate::pool::PoolMemory;

/// A registered memory region (DESTROY_MKEY and the memory's release when dropped; a pool
/// built on it keeps it alive while any lease exists).
#[derive(Debug)]
pub struct Mr {
    inner: DriverMr,
    // Keeps the PD (and context) alive as long as the key exists.
    _pd: Pd,
}

impl Mr {
    /// Allocates whole pages for `len` bytes and registers exactly `len` of them: the mkey's
    /// length is `len` (`mkc.len`), so the device refuses a peer's access past it with a
    /// remote access error even though the page holding byte `len` is mapped (the kernel's
    /// `ib_umem_get` also pins whole pages and registers the length asked). The rounding stays
    /// inside the MTT and the allocation; [`Mr::len`] and [`Mr::remote`] say `len`.
    pub(crate) fn register(pd: &Pd, len: usize, access: MkeyAccess) -> Result<Self, VerbsError> {
        let buf = pd.context().hca().dma().alloc_for_key(len.max(1))?;
        let inner = DriverMr::register_range(pd.driver(), Arc::new(buf), 0, len, access)?;
        Ok(Mr {
            inner,
            _pd: pd.clone(),
        })
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// The address work requests use for byte 0.
    pub fn addr(&self) -> u64 {
        self.inner.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> MkeyAccess {
        self.inner.access()
    }

    /// What a peer needs to READ, WRITE or run atomics on the whole region (send it with
    /// [`crate::exchange`]; slice it with [`RemoteBuffer::slice`]).
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.rkey(),
            len: self.len() as u64,
        }
    }

    /// Copies `src` into the region at `offset` (refused outside the region).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        self.check(offset, src.len())?;
        Ok(self.inner.buf().write(self.inner.offset() + offset, src)?)
    }

    /// Copies `dst.len()` bytes at `offset` out of the region (refused outside the region).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        self.check(offset, dst.len())?;
        Ok(self.inner.buf().read(self.inner.offset() + offset, dst)?)
    }

    /// The big-endian `u64` at `offset`: how an atomic target is laid out in memory (the
    /// responder reads and writes it in network order, and the old value lands in the
    /// requester's buffer in the same form).
    pub fn read_u64_be(&self, offset: usize) -> Result<u64, VerbsError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Stores `v` big-endian at `offset` (an atomic target; see [`Mr::read_u64_be`]).
    pub fn write_u64_be(&self, offset: usize, v: u64) -> Result<(), VerbsError> {
        self.write(offset, &v.to_be_bytes())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), VerbsError> {
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(VerbsError::OutsideMr {
                offset: offset as u64,
                len: len as u64,
                mr_len: self.len() as u64,
            });
        }
        Ok(())
    }
}

// SAFETY: the region is a pinned DmaBuf held (through the driver's Mr) as long as `self`;
// it stays registered under `lkey()` until `self` drops (DESTROY_MKEY in the driver Mr's
// drop); `iova()` is the address SGEs use for byte 0 (the driver's MRs are addressed by
// host address, as ibverbs). The pool registers with local access only, and `Mr` hands out
// no references of its own, so the pool's leases are the only references into it.
unsafe impl PoolMemory for Mr {
    fn base(&self) -> NonNull<u8> {
        self.inner
            .buf()
            .ptr_at(self.inner.offset(), 0)
            .unwrap_or_else(|_| self.inner.buf().as_ptr())
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn iova(&self) -> u64 {
        self.inner.addr()
    }
    fn lkey(&self) -> u32 {
        self.inner.lkey()
    }
}

#[cfg(test)]
#[path = "mr_exact_tests.rs"]
mod exact_tests;
