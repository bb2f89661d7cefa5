//! Memory regions over a memfd range, and the CPU's view of memfd pages.
//!
//! Owns: [`MemfdMr`] (a range of a memfd, `mmap`ed `MAP_SHARED` into this process and
//! registered as application memory) and [`FdMapping`] (such a mapping, reached by copies:
//! what a memfd MR and a udmabuf's backing memfd are read and written through). Must not:
//! pin, account or map pages for the device itself: the registration is a
//! [`crate::user_mr::UserMr`], so `DmaMapper::pin_caller` does `MADV_DONTFORK`, the
//! `RLIMIT_MEMLOCK` check and `mlock` (where the backend does not pin), the IOVA and
//! `map_dma`, exactly as for any application memory.
//!
//! The size comes from `fstat` (`st_size`, what `lseek(SEEK_END)` reports for shmem); a range
//! past it is refused before anything is mapped. A memfd that shrinks under a mapping makes
//! its pages fault (SIGBUS), so callers should seal it (`F_SEAL_SHRINK`), as udmabuf
//! requires. Sources: `man 2 memfd_create`, `man 2 mmap` (`MAP_SHARED` of a file at an
//! offset), `drivers/dma-buf/udmabuf.c` (`udmabuf_create`: `F_SEAL_SHRINK` required).

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{DriverError, Result};
use crate::mr::MkeyAccess;
use crate::pd::Pd;
use crate::redact::Addr;
use crate::user_mr::UserMr;

/// `len` bytes of an fd from `offset`, mapped `MAP_SHARED` read-write and reached by copies
/// (the mapping covers the pages holding them; memmap2 rounds the offset down). `Debug`
/// redacts the mapping's address (a memfd MR is known to peers by it).
pub struct FdMapping {
    map: MmapRaw,
    fd: Arc<OwnedFd>,
}

impl std::fmt::Debug for FdMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdMapping")
            .field("addr", &Addr(self.map.as_ptr() as u64))
            .field("len", &self.map.len())
            .finish_non_exhaustive()
    }
}

impl FdMapping {
    /// Maps `len` bytes of `fd` from `offset`.
    ///
    /// Errors: [`DriverError::BadDmaLength`] for `len == 0`; [`DriverError::Memfd`] when
    /// `mmap` refuses.
    pub fn new(fd: Arc<OwnedFd>, offset: u64, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(DriverError::BadDmaLength { len });
        }
        let map = MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_raw(fd.as_raw_fd())
            .map_err(|source| DriverError::Memfd {
                op: "mmap",
                fd: fd.as_raw_fd(),
                source,
            })?;
        Ok(Self { map, fd })
    }

    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        NonNull::new(self.map.as_mut_ptr()).unwrap_or(NonNull::dangling())
    }

    /// Bytes mapped (as asked).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false (an empty mapping is refused).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The fd mapped.
    pub fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    /// Copies `dst.len()` bytes at `off` out of the mapping.
    ///
    /// Errors: [`DriverError::DmaOutOfRange`] outside it.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let p = self.at(off, dst.len())?;
        // SAFETY: `p..p + dst.len()` is inside the live mapping (`at`); the bytes are shared
        // with the device and other mappings, so they are copied through raw pointers only.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the mapping at `off`.
    ///
    /// Errors: [`DriverError::DmaOutOfRange`] outside it.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        let p = self.at(off, src.len())?;
        // SAFETY: as in `read`, the other way.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    fn at(&self, off: usize, len: usize) -> Result<*mut u8> {
        if off.checked_add(len).is_none_or(|e| e > self.map.len()) {
            return Err(DriverError::DmaOutOfRange {
                off,
                len,
                buf_len: self.map.len(),
            });
        }
        // SAFETY: `off <= len()` (checked), inside (or at the end of) the mapping.
        Ok(unsafe { self.map.as_mut_ptr().add(off) })
    }
}

/// The size of the file behind `fd` (`fstat`'s `st_size`).
///
/// Errors: [`DriverError::Memfd`] when `fstat` fails.
pub fn fd_size(fd: &OwnedFd) -> Result<u64> {
    let fail = |source| DriverError::Memfd {
        op: "fstat",
        fd: fd.as_raw_fd(),
        source,
    };
    let file = std::fs::File::from(fd.try_clone().map_err(fail)?);
    Ok(file.metadata().map_err(fail)?.len())
}

/// A registered range of a memfd. Dropping it deregisters, then unmaps (a failed
/// deregistration leaks the mapping: the device may still reach it).
#[derive(Debug)]
pub struct MemfdMr {
    // Declared before `map`: the registration goes before the mapping it covers.
    mr: Option<UserMr>,
    map: Option<FdMapping>,
    offset: u64,
}

impl MemfdMr {
    /// Registers `len` bytes of `fd` from `offset` with `access`, addressed from `iova`
    /// (`None`: the address of the process's mapping of them).
    ///
    /// Errors: [`DriverError::BadDmaLength`] for `len == 0`, [`DriverError::MemfdOutOfRange`],
    /// [`DriverError::Memfd`], and those of [`UserMr::register`] (IOVA rules, the memlock
    /// limit, CREATE_MKEY).
    pub fn register(
        pd: &Arc<Pd>,
        fd: Arc<OwnedFd>,
        offset: u64,
        len: usize,
        iova: Option<u64>,
        access: MkeyAccess,
    ) -> Result<Self> {
        if len == 0 {
            return Err(DriverError::BadDmaLength { len });
        }
        let size = fd_size(&fd)?;
        if offset.checked_add(len as u64).is_none_or(|e| e > size) {
            return Err(DriverError::MemfdOutOfRange { offset, len, size });
        }
        let map = FdMapping::new(fd, offset, len)?;
        // SAFETY: the mapping stays until the registration is gone: `teardown` drops it only
        // after a successful deregistration and leaks it otherwise. Its bytes are reached
        // only through raw pointers (`FdMapping`'s copies), never a Rust reference.
        let mr = unsafe { UserMr::register(pd, map.ptr(), len, iova, access)? };
        Ok(Self {
            mr: Some(mr),
            map: Some(map),
            offset,
        })
    }

    /// DESTROY_MKEY, the pages' release, then the unmap.
    ///
    /// Errors: [`DriverError::StillMapped`]: the device may still reach the pages, whose
    /// mapping is then kept for good.
    pub fn deregister(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(mr) = self.mr.take() else {
            return Ok(());
        };
        match mr.deregister() {
            Ok(()) => {
                self.map = None;
                Ok(())
            }
            Err(e) => {
                std::mem::forget(self.map.take());
                Err(e)
            }
        }
    }

    /// The registration (keys, IOVA, MTT pages).
    pub fn user_mr(&self) -> Option<&UserMr> {
        self.mr.as_ref()
    }

    /// The process's mapping of the registered bytes.
    pub fn mapping(&self) -> Option<&FdMapping> {
        self.map.as_ref()
    }

    /// Offset of the first byte in the memfd.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Drop for MemfdMr {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::error!(error = %e, "deregistering a memfd range");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use nix::sys::memfd::{MFdFlags, memfd_create};

    fn memfd(len: i64) -> Arc<OwnedFd> {
        let fd = memfd_create(c"memfd-mr-test", MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, len).unwrap();
        Arc::new(fd)
    }

    #[test]
    fn two_mappings_of_one_memfd_see_each_others_bytes() {
        let fd = memfd(3 * 4096);
        let a = FdMapping::new(fd.clone(), 4093, 5000).unwrap();
        let b = FdMapping::new(fd.clone(), 0, 3 * 4096).unwrap();
        a.write(0, b"abc").unwrap();
        let mut got = [0u8; 3];
        b.read(4093, &mut got).unwrap();
        assert_eq!(&got, b"abc");
        assert_eq!(a.len(), 5000);
        assert!(a.read(4999, &mut [0; 2]).is_err());
        assert_eq!(fd_size(&fd).unwrap(), 3 * 4096);
    }
}
