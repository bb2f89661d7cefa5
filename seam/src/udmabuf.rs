//! Making a CPU dma-buf from host memory, and bracketing CPU access to any dma-buf: the
//! three Linux uapi calls every user of udmabufs in the workspace needs (the `perf reg-cost`
//! benchmark, the sim's mmap path, the VFIO and verbs tests), in one place.
//!
//! Owns: [`sealed_memfd`] (a memfd that `UDMABUF_CREATE` accepts), [`create_udmabuf`]
//! (`/dev/udmabuf`, `UDMABUF_CREATE`), [`dma_buf_sync`] (`DMA_BUF_IOCTL_SYNC` with a
//! [`SyncFlags`] that can only name a valid phase and direction), and their typed errors
//! [`UdmabufError`] and [`DmaBufSyncError`]. Must not: map anything for a device or the CPU
//! (each backend does, its own way), read fdinfo (`dmabuf.rs`), or fill memory.
//!
//! Sources: memfd_create(2) and fcntl(2) (`MFD_ALLOW_SEALING`, `F_ADD_SEALS`,
//! `F_SEAL_SHRINK`); `include/uapi/linux/udmabuf.h` (`struct udmabuf_create`, `UDMABUF_CREATE`
//! = `_IOW('u', 0x42, struct udmabuf_create)`, `UDMABUF_FLAGS_CLOEXEC`);
//! `drivers/dma-buf/udmabuf.c` (`udmabuf_create`: the memfd needs `F_SEAL_SHRINK` and no
//! `F_SEAL_WRITE`, offset and size page-aligned, at most `size_limit_mb` MiB, else EINVAL);
//! `include/uapi/linux/dma-buf.h` (`struct dma_buf_sync`, `DMA_BUF_IOCTL_SYNC` =
//! `_IOW('b', 0, struct dma_buf_sync)`, `DMA_BUF_SYNC_*`); `drivers/dma-buf/dma-buf.c`
//! (`dma_buf_ioctl`: a direction is required, unknown bits are EINVAL).

use std::ffi::CStr;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

/// Where udmabufs are made.
pub const UDMABUF_DEVICE: &str = "/dev/udmabuf";

/// `struct udmabuf_create`.
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 1;

nix::ioctl_write_ptr!(
    /// `UDMABUF_CREATE`.
    udmabuf_create_ioctl,
    b'u',
    0x42,
    UdmabufCreate
);

/// `struct dma_buf_sync`.
#[repr(C)]
struct DmaBufSync {
    flags: u64,
}

nix::ioctl_write_ptr!(
    /// `DMA_BUF_IOCTL_SYNC`.
    dma_buf_sync_ioctl,
    b'b',
    0,
    DmaBufSync
);

/// Why a sealed memfd or a udmabuf could not be made.
#[derive(Debug, thiserror::Error)]
pub enum UdmabufError {
    /// A memfd call failed.
    #[error(
        "making a sealed {len}-byte memfd: {op} failed: {errno}; the host is out of memory or memfds are refused"
    )]
    Memfd {
        /// The call.
        op: &'static str,
        /// The memfd's size.
        len: u64,
        /// What the kernel said.
        errno: Errno,
    },
    /// There is no `/dev/udmabuf`.
    #[error(
        "opening {UDMABUF_DEVICE}: it does not exist; load the udmabuf module (`modprobe udmabuf`, CONFIG_UDMABUF)"
    )]
    NoDevice,
    /// `/dev/udmabuf` exists but could not be opened.
    #[error("opening {UDMABUF_DEVICE}: {source}; run as root or give the user access to it")]
    OpenDevice {
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// `UDMABUF_CREATE` failed.
    #[error("UDMABUF_CREATE of {size:#x} bytes at offset {offset:#x} of a memfd failed: {errno}; {}", create_fix(*.errno))]
    Create {
        /// The offset asked for.
        offset: u64,
        /// The size asked for.
        size: u64,
        /// What the kernel said.
        errno: Errno,
    },
}

/// The fix for a `UDMABUF_CREATE` errno.
fn create_fix(errno: Errno) -> &'static str {
    match errno {
        Errno::EINVAL => {
            "the memfd needs F_SEAL_SHRINK (and no F_SEAL_WRITE) and page-aligned offset/size, at most size_limit_mb MiB (64 by default: modprobe udmabuf size_limit_mb=1024)"
        }
        Errno::EBADF => "the fd must be a memfd (memfd_create with MFD_ALLOW_SEALING)",
        _ => "the range must lie inside the memfd and the host must have memory to pin",
    }
}

/// A `len`-byte memfd named `name` (`MFD_ALLOW_SEALING | MFD_CLOEXEC`), sealed with
/// `F_SEAL_SHRINK` as `UDMABUF_CREATE` requires (a memfd that shrank would leave a device
/// pointing at freed pages). Its pages are not touched.
///
/// Errors: [`UdmabufError::Memfd`].
pub fn sealed_memfd(name: &CStr, len: u64) -> Result<OwnedFd, UdmabufError> {
    let err = |op| move |errno| UdmabufError::Memfd { op, len, errno };
    let fd = memfd_create(name, MFdFlags::MFD_ALLOW_SEALING | MFdFlags::MFD_CLOEXEC)
        .map_err(err("memfd_create"))?;
    let size = i64::try_from(len).map_err(|_| UdmabufError::Memfd {
        op: "ftruncate",
        len,
        errno: Errno::EFBIG,
    })?;
    nix::unistd::ftruncate(&fd, size).map_err(err("ftruncate"))?;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK))
        .map_err(err("fcntl(F_ADD_SEALS, F_SEAL_SHRINK)"))?;
    Ok(fd)
}

/// A udmabuf (a dma-buf fd, close-on-exec) over `size` bytes of `memfd` from `offset`,
/// made through [`UDMABUF_DEVICE`].
///
/// Errors: [`UdmabufError::NoDevice`], [`UdmabufError::OpenDevice`],
/// [`UdmabufError::Create`].
pub fn create_udmabuf(memfd: impl AsFd, offset: u64, size: u64) -> Result<OwnedFd, UdmabufError> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(UDMABUF_DEVICE)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => UdmabufError::NoDevice,
            _ => UdmabufError::OpenDevice { source },
        })?;
    let create = |errno| UdmabufError::Create {
        offset,
        size,
        errno,
    };
    let memfd = u32::try_from(memfd.as_fd().as_raw_fd()).map_err(|_| create(Errno::EBADF))?;
    let arg = UdmabufCreate {
        memfd,
        flags: UDMABUF_FLAGS_CLOEXEC,
        offset,
        size,
    };
    // SAFETY: the ioctl reads one `struct udmabuf_create` from a live local of that layout
    // (repr(C)) and writes no user memory; `dev` is an open /dev/udmabuf.
    let raw = unsafe { udmabuf_create_ioctl(dev.as_raw_fd(), &arg) }.map_err(create)?;
    // SAFETY: UDMABUF_CREATE returned a new dma-buf fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Which side of a CPU access a [`dma_buf_sync`] marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPhase {
    /// `DMA_BUF_SYNC_START`: the CPU access begins.
    Start,
    /// `DMA_BUF_SYNC_END`: the CPU access ends.
    End,
}

/// What the CPU does with the buffer between START and END.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAccess {
    /// `DMA_BUF_SYNC_READ`.
    Read,
    /// `DMA_BUF_SYNC_WRITE`.
    Write,
    /// `DMA_BUF_SYNC_RW`.
    ReadWrite,
}

/// The flags of one `DMA_BUF_IOCTL_SYNC`: always one phase and one direction, so never the
/// EINVAL of a missing direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncFlags {
    /// START or END.
    pub phase: SyncPhase,
    /// READ, WRITE or both.
    pub access: SyncAccess,
}

impl SyncFlags {
    /// Begin a CPU access of `access`.
    pub const fn start(access: SyncAccess) -> Self {
        Self {
            phase: SyncPhase::Start,
            access,
        }
    }

    /// End a CPU access of `access`.
    pub const fn end(access: SyncAccess) -> Self {
        Self {
            phase: SyncPhase::End,
            access,
        }
    }

    /// The `struct dma_buf_sync` flags word.
    pub const fn bits(self) -> u64 {
        let phase = match self.phase {
            SyncPhase::Start => 0,
            SyncPhase::End => 1 << 2,
        };
        let access = match self.access {
            SyncAccess::Read => 1,
            SyncAccess::Write => 2,
            SyncAccess::ReadWrite => 3,
        };
        phase | access
    }
}

impl fmt::Display for SyncFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.phase {
            SyncPhase::Start => "START",
            SyncPhase::End => "END",
        };
        let access = match self.access {
            SyncAccess::Read => "READ",
            SyncAccess::Write => "WRITE",
            SyncAccess::ReadWrite => "RW",
        };
        write!(f, "{phase}|{access}")
    }
}

/// `DMA_BUF_IOCTL_SYNC` refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "DMA_BUF_IOCTL_SYNC({flags}) failed: {errno}; the fd must be a dma-buf whose exporter supports CPU access (udmabuf, a dma-heap buffer)"
)]
pub struct DmaBufSyncError {
    /// The flags asked for.
    pub flags: SyncFlags,
    /// What the kernel said (ENOTTY: not a dma-buf).
    pub errno: Errno,
}

/// Brackets CPU access to the dma-buf `fd` (`DMA_BUF_IOCTL_SYNC`): call with
/// [`SyncFlags::start`] before touching a CPU mapping of it and [`SyncFlags::end`] after.
///
/// Errors: [`DmaBufSyncError`].
pub fn dma_buf_sync(fd: impl AsFd, flags: SyncFlags) -> Result<(), DmaBufSyncError> {
    let arg = DmaBufSync {
        flags: flags.bits(),
    };
    // SAFETY: the ioctl reads one `struct dma_buf_sync` from a live local of that layout
    // (repr(C)) and writes no user memory.
    unsafe { dma_buf_sync_ioctl(fd.as_fd().as_raw_fd(), &arg) }
        .map(drop)
        .map_err(|errno| DmaBufSyncError { flags, errno })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_memfd_has_its_size_and_cannot_shrink_but_can_grow_and_be_written() {
        let fd = sealed_memfd(c"seam-udmabuf-test", 3 * 4096).unwrap();
        assert_eq!(nix::sys::stat::fstat(&fd).unwrap().st_size, 3 * 4096);
        assert_eq!(nix::unistd::ftruncate(&fd, 4096), Err(Errno::EPERM));
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).unwrap();
        assert_eq!(seals, SealFlag::F_SEAL_SHRINK.bits());
        nix::unistd::ftruncate(&fd, 4 * 4096).unwrap();
        let flags = fcntl(&fd, FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags & nix::libc::FD_CLOEXEC, nix::libc::FD_CLOEXEC);
    }

    #[test]
    fn a_memfd_too_large_for_ftruncate_is_a_typed_error() {
        let e = sealed_memfd(c"seam-udmabuf-test", u64::MAX).unwrap_err();
        assert!(
            matches!(
                e,
                UdmabufError::Memfd {
                    op: "ftruncate",
                    errno: Errno::EFBIG,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn without_the_device_create_udmabuf_says_to_load_the_module() {
        if std::path::Path::new(UDMABUF_DEVICE).exists() {
            return;
        }
        let fd = sealed_memfd(c"seam-udmabuf-test", 4096).unwrap();
        let e = create_udmabuf(&fd, 0, 4096).unwrap_err();
        assert!(matches!(e, UdmabufError::NoDevice), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("load the udmabuf module (`modprobe udmabuf`, CONFIG_UDMABUF)"));
    }

    #[test]
    fn an_einval_names_the_seal_and_alignment_rules() {
        let e = UdmabufError::Create {
            offset: 100,
            size: 4096,
            errno: Errno::EINVAL,
        };
        let msg = e.to_string();
        assert!(msg.contains("offset 0x64"), "{msg}");
        assert!(
            msg.contains(
                "the memfd needs F_SEAL_SHRINK (and no F_SEAL_WRITE) and page-aligned offset/size"
            ),
            "{msg}"
        );
    }

    #[test]
    fn sync_flags_are_the_uapi_bits() {
        let all = [SyncAccess::Read, SyncAccess::Write, SyncAccess::ReadWrite];
        let start: Vec<u64> = all.map(|a| SyncFlags::start(a).bits()).into();
        let end: Vec<u64> = all.map(|a| SyncFlags::end(a).bits()).into();
        assert_eq!(start, [1, 2, 3]);
        assert_eq!(end, [5, 6, 7]);
        assert_eq!(SyncFlags::end(SyncAccess::ReadWrite).to_string(), "END|RW");
    }

    #[test]
    fn syncing_a_memfd_is_enotty_naming_the_flags() {
        let fd = sealed_memfd(c"seam-udmabuf-test", 4096).unwrap();
        let e = dma_buf_sync(&fd, SyncFlags::start(SyncAccess::Read)).unwrap_err();
        assert_eq!(e.errno, Errno::ENOTTY);
        assert!(
            e.to_string()
                .starts_with("DMA_BUF_IOCTL_SYNC(START|READ) failed"),
            "{e}"
        );
    }
}
