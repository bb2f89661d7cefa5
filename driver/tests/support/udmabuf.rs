//! Making dma-bufs and memfds on a real kernel, for the VFIO dma-buf tests: a sealed memfd,
//! a udmabuf over part of it, a dma-heap system buffer, a CPU mapping of any of them, and
//! the dma-buf CPU-access brackets. Test support of `vfio_dmabuf.rs`, not the driver's API.
//!
//! Owns: the `String`-error wrappers the tests call over the seam's uapi calls
//! (`bypass_seam::sealed_memfd`, `create_udmabuf`, `dma_buf_sync`), the one uapi call only
//! tests need (`DMA_HEAP_IOCTL_ALLOC`), and [`CpuMap`], a shared mmap that is also
//! `HostMemory` (so a memfd range can be handed to `map_dma` the way the driver does).
//! Must not: map anything into an IOMMU (the backend under test does), or make a udmabuf or
//! sync a dma-buf itself (the seam does).
//!
//! Sources: `include/uapi/linux/dma-heap.h` (`struct dma_heap_allocation_data { u64 len;
//! u32 fd; u32 fd_flags; u64 heap_flags; }`, `DMA_HEAP_IOCTL_ALLOC = _IOWR('H', 0x0, ...)`),
//! `include/uapi/asm-generic/ioctl.h` (`_IOC`); the udmabuf and dma-buf uapi through
//! `bypass_seam` (its `udmabuf.rs` cites them).

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::ptr::NonNull;

use bypass_driver::backend::HostMemory;
pub use bypass_seam::SyncAccess;
use bypass_seam::SyncFlags;
use nix::libc;

/// `_IOC(dir, type, nr, size)` of `include/uapi/asm-generic/ioctl.h`.
const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

#[repr(C)]
struct HeapAlloc {
    len: u64,
    fd: u32,
    fd_flags: u32,
    heap_flags: u64,
}
const DMA_HEAP_IOCTL_ALLOC: u64 = ioc(IOC_READ | IOC_WRITE, b'H', 0, size_of::<HeapAlloc>());

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// A memfd of `len` bytes sealed with `F_SEAL_SHRINK` as `UDMABUF_CREATE` requires
/// (`bypass_seam::sealed_memfd`).
pub fn sealed_memfd(len: u64) -> Result<OwnedFd, String> {
    bypass_seam::sealed_memfd(c"bypass-vfio-dmabuf", len).map_err(|e| e.to_string())
}

/// A udmabuf over `size` bytes of `memfd` from `offset` (`bypass_seam::create_udmabuf`).
pub fn udmabuf(memfd: &OwnedFd, offset: u64, size: u64) -> Result<OwnedFd, String> {
    bypass_seam::create_udmabuf(memfd, offset, size).map_err(|e| e.to_string())
}

/// A `len`-byte buffer from the dma-heap system heap (`/dev/dma_heap/system`).
pub fn system_heap_buffer(len: u64) -> Result<OwnedFd, String> {
    let heap = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/dma_heap/system")
        .map_err(|e| format!("open /dev/dma_heap/system: {e} (CONFIG_DMABUF_HEAPS_SYSTEM)"))?;
    let mut arg = HeapAlloc {
        len,
        fd: 0,
        fd_flags: (libc::O_RDWR | libc::O_CLOEXEC) as u32,
        heap_flags: 0,
    };
    // SAFETY: DMA_HEAP_IOCTL_ALLOC reads and writes one `struct dma_heap_allocation_data`,
    // which `arg` is (repr(C), the uapi layout).
    let rc = unsafe { libc::ioctl(heap.as_raw_fd(), DMA_HEAP_IOCTL_ALLOC as _, &mut arg) };
    if rc < 0 {
        return Err(os_err("DMA_HEAP_IOCTL_ALLOC"));
    }
    // SAFETY: the kernel filled `fd` with a new dma-buf fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(arg.fd as i32) })
}

/// Brackets CPU access to a dma-buf: `start` true for `DMA_BUF_SYNC_START`, false for END
/// (`bypass_seam::dma_buf_sync`).
pub fn sync(dmabuf: &OwnedFd, start: bool, access: SyncAccess) -> Result<(), String> {
    let flags = if start {
        SyncFlags::start(access)
    } else {
        SyncFlags::end(access)
    };
    bypass_seam::dma_buf_sync(dmabuf, flags).map_err(|e| e.to_string())
}

/// A shared read-write mmap of `len` bytes of an fd from `offset`; the bytes are reached
/// through raw pointers only, so a device may write them meanwhile.
#[derive(Debug)]
pub struct CpuMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: shared memory reached only through raw pointers.
unsafe impl Send for CpuMap {}
// SAFETY: as for Send.
unsafe impl Sync for CpuMap {}

impl CpuMap {
    /// Maps `len` bytes of `fd` from `offset` (`MAP_SHARED`, read-write).
    pub fn new(fd: &OwnedFd, offset: u64, len: usize) -> Result<Self, String> {
        let off = i64::try_from(offset).map_err(|_| format!("offset {offset:#x} too large"))?;
        // SAFETY: a new mapping at an address the kernel picks; nothing existing is replaced.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap"));
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| "mmap returned NULL".to_owned())?;
        Ok(Self { ptr, len })
    }

    /// The bytes at `off..off+n`, read volatile.
    pub fn get(&self, off: usize, n: usize) -> Vec<u8> {
        assert!(off + n <= self.len, "{off:#x}+{n:#x} outside the mapping");
        // SAFETY: inside the live mapping (asserted); volatile raw reads, no reference.
        (0..n)
            .map(|i| unsafe { self.ptr.as_ptr().add(off + i).read_volatile() })
            .collect()
    }

    /// Writes `src` at `off`.
    pub fn put(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len, "write outside the mapping");
        // SAFETY: inside the live mapping (asserted); a raw copy from a distinct slice.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        }
    }
}

// SAFETY: `ptr..ptr+len` is a live shared mapping until drop, never moved, reached through
// raw pointers only.
unsafe impl HostMemory for CpuMap {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for CpuMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once, with no reference into it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `len` bytes of `fd` at `off` through `pread`.
pub fn pread(fd: &OwnedFd, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let n = nix::sys::uio::pread(fd, &mut v, off as i64).expect("pread");
    assert_eq!(n, len, "short pread");
    v
}

/// Writes `src` into `fd` at `off` through `pwrite`.
pub fn pwrite(fd: &OwnedFd, off: u64, src: &[u8]) {
    let n = nix::sys::uio::pwrite(fd, src, off as i64).expect("pwrite");
    assert_eq!(n, src.len(), "short pwrite");
}
