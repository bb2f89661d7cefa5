//! A CPU-mappable dma-buf as the simulated device reaches it: `mmap`ed, and every copy
//! bracketed with `DMA_BUF_IOCTL_SYNC`.
//!
//! Owns: [`MappedDmaBuf`] (a `MAP_SHARED` mapping of whole pages of a dma-buf fd, a
//! [`PeerMemory`] whose copies start with `SYNC_START` and end with `SYNC_END`, both
//! read-write, as `include/uapi/linux/dma-buf.h` asks of a CPU access) and [`DmaBufMapError`].
//! Must not: decide which dma-bufs may be mapped (the fabric's `map_dmabuf` does: only a
//! CPU-mappable exporter without a `PeerMemory`), or hand out a pointer into the mapping
//! (the IOMMU treats it as peer memory: copies only, never its fast paths).
//!
//! The sim is software, so its "DMA" into a dma-buf is a CPU access: the exporter's
//! `begin_cpu_access`/`end_cpu_access` (reached through the ioctl) keep the buffer coherent
//! with other devices; the ioctl itself is `bypass_seam::dma_buf_sync`. Sources: `include/uapi/linux/dma-buf.h` (`struct dma_buf_sync`,
//! `DMA_BUF_IOCTL_SYNC` = `_IOW('b', 0, struct dma_buf_sync)`, the `DMA_BUF_SYNC_*` flags),
//! `drivers/dma-buf/dma-buf.c` (`dma_buf_mmap_internal`: the offset is in pages and must lie
//! inside the buffer; `dma_buf_ioctl`), `drivers/dma-buf/udmabuf.c` (`mmap_udmabuf`:
//! `MAP_SHARED` only).

use std::ffi::c_void;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use bypass_seam::{PAGE_SIZE, PeerError, PeerMemory, SyncAccess, SyncFlags, dma_buf_sync};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

/// Why a dma-buf could not be mapped for the CPU.
#[derive(Debug, thiserror::Error)]
pub enum DmaBufMapError {
    /// Offset or length not whole pages, or zero length.
    #[error(
        "mapping {len:#x} bytes at offset {offset:#x} of a dma-buf: both must be whole pages of {PAGE_SIZE:#x} bytes, the length non-zero (the driver rounds registrations out to pages)"
    )]
    Unaligned {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: usize,
    },
    /// `mmap` refused.
    #[error(
        "mmap of {len:#x} bytes at offset {offset:#x} of the {exporter} dma-buf (fd {fd}) failed: {source}: the exporter must support CPU mmap (MAP_SHARED) and the range must lie inside the buffer"
    )]
    Mmap {
        /// The exporter's name.
        exporter: String,
        /// The fd.
        fd: i32,
        /// Offset.
        offset: u64,
        /// Length.
        len: usize,
        /// The errno.
        source: nix::Error,
    },
}

/// Whole pages of a CPU-mappable dma-buf, mapped `MAP_SHARED` and reached by copies, each
/// bracketed with `DMA_BUF_IOCTL_SYNC`. Unmapped on drop.
pub struct MappedDmaBuf {
    fd: Arc<OwnedFd>,
    ptr: NonNull<c_void>,
    len: usize,
    exporter: String,
}

// SAFETY: the mapping is owned (unmapped only on drop) and reached only by copies through
// raw pointers inside its bounds; a dma-buf mapping may be accessed from any thread.
unsafe impl Send for MappedDmaBuf {}
// SAFETY: as above: no method hands out a reference into the mapping.
unsafe impl Sync for MappedDmaBuf {}

impl fmt::Debug for MappedDmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedDmaBuf")
            .field("fd", &self.fd.as_raw_fd())
            .field("len", &self.len)
            .field("exporter", &self.exporter)
            .finish()
    }
}

impl MappedDmaBuf {
    /// Maps `len` bytes of the dma-buf `fd` from `offset` (both whole pages), read-write,
    /// `MAP_SHARED`. `exporter` names it in messages.
    ///
    /// Errors: [`DmaBufMapError::Unaligned`], [`DmaBufMapError::Mmap`].
    pub fn new(
        fd: Arc<OwnedFd>,
        offset: u64,
        len: usize,
        exporter: &str,
    ) -> Result<Self, DmaBufMapError> {
        let page = PAGE_SIZE as u64;
        let (Some(size), Ok(off)) = (
            std::num::NonZeroUsize::new(len),
            libc::off_t::try_from(offset),
        ) else {
            return Err(DmaBufMapError::Unaligned { offset, len });
        };
        if !offset.is_multiple_of(page) || !len.is_multiple_of(PAGE_SIZE) {
            return Err(DmaBufMapError::Unaligned { offset, len });
        }
        // SAFETY: a new shared mapping chosen by the kernel (no address hint, no MAP_FIXED):
        // nothing existing is replaced; the memory is reached only by raw-pointer copies.
        let ptr = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                off,
            )
        }
        .map_err(|source| DmaBufMapError::Mmap {
            exporter: exporter.to_owned(),
            fd: fd.as_raw_fd(),
            offset,
            len,
            source,
        })?;
        Ok(Self {
            fd,
            ptr,
            len,
            exporter: exporter.to_owned(),
        })
    }

    /// Runs `copy` between SYNC_START and SYNC_END, after checking the range.
    fn bracketed(
        &self,
        op: &'static str,
        offset: usize,
        len: usize,
        copy: impl FnOnce(*mut u8),
    ) -> Result<(), PeerError> {
        let err = |reason: String| PeerError {
            op,
            exporter: self.exporter.clone(),
            offset,
            len,
            reason,
        };
        if offset.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(err(format!(
                "outside the {:#x}-byte mapping: the IOMMU maps only what the driver registered",
                self.len
            )));
        }
        dma_buf_sync(&*self.fd, SyncFlags::start(SyncAccess::ReadWrite)).map_err(|e| {
            err(format!(
                "DMA_BUF_IOCTL_SYNC(START) failed: {}: the exporter refused CPU access",
                e.errno
            ))
        })?;
        // SAFETY: `offset + len <= self.len` (checked), inside the live mapping.
        copy(unsafe { self.ptr.as_ptr().cast::<u8>().add(offset) });
        dma_buf_sync(&*self.fd, SyncFlags::end(SyncAccess::ReadWrite)).map_err(|e| {
            err(format!(
                "DMA_BUF_IOCTL_SYNC(END) failed: {}: the exporter refused to end CPU access",
                e.errno
            ))
        })
    }
}

impl PeerMemory for MappedDmaBuf {
    fn len(&self) -> usize {
        self.len
    }

    fn exporter(&self) -> &str {
        &self.exporter
    }

    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), PeerError> {
        let n = dst.len();
        let d = dst.as_mut_ptr();
        self.bracketed("read", offset, n, |p| {
            // SAFETY: `p..p + n` is inside the mapping (`bracketed` checked), `d` a distinct
            // slice of `n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(p, d, n) }
        })
    }

    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), PeerError> {
        let n = src.len();
        let s = src.as_ptr();
        self.bracketed("write", offset, n, |p| {
            // SAFETY: as in `read_at`, the other way.
            unsafe { std::ptr::copy_nonoverlapping(s, p, n) }
        })
    }
}

impl Drop for MappedDmaBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of this length, used by nothing after this.
        if let Err(e) = unsafe { munmap(self.ptr, self.len) } {
            tracing::warn!(error = %e, len = self.len, "munmap of a dma-buf mapping failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use nix::sys::memfd::{MFdFlags, memfd_create};

    fn memfd(pages: usize) -> Arc<OwnedFd> {
        let fd = memfd_create(c"dmabuf-mmap-test", MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, (pages * PAGE_SIZE) as libc::off_t).unwrap();
        Arc::new(fd)
    }

    #[test]
    fn ranges_must_be_whole_pages() {
        let fd = memfd(2);
        for (off, len) in [(1, PAGE_SIZE), (0, 100), (0, 0)] {
            assert!(matches!(
                MappedDmaBuf::new(fd.clone(), off, len, "udmabuf"),
                Err(DmaBufMapError::Unaligned { .. })
            ));
        }
    }

    #[test]
    fn a_refused_sync_is_a_peer_error_naming_the_ioctl() {
        // A memfd maps but is not a dma-buf: DMA_BUF_IOCTL_SYNC fails (ENOTTY), and the copy
        // reports it instead of touching the memory unsynchronised.
        let m = MappedDmaBuf::new(memfd(2), PAGE_SIZE as u64, PAGE_SIZE, "udmabuf").unwrap();
        assert_eq!(m.len(), PAGE_SIZE);
        let e = m.read_at(0, &mut [0u8; 4]).unwrap_err();
        assert!(e.reason.contains("DMA_BUF_IOCTL_SYNC(START)"), "{e}");
        assert_eq!((e.op, e.exporter.as_str()), ("read", "udmabuf"));
        let e = m.write_at(PAGE_SIZE - 1, &[0u8; 2]).unwrap_err();
        assert!(e.reason.contains("outside"), "{e}");
    }
}
