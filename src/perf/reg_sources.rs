//! The memory `perf reg-cost` registers, made ready before the clock starts: a filled `Vec`,
//! a filled and sealed memfd, and a udmabuf over such a memfd.
//!
//! Owns: making each kind ([`Held`]), filling its pages so that no page is faulted in under
//! the clock, and [`SourceError`]. Must not: register anything or time anything
//! (`reg_cost.rs` does both), or make a memfd or udmabuf itself (`bypass_seam::sealed_memfd`
//! and `create_udmabuf` do; the driver takes any dma-buf fd).
//!
//! Sources: memfd_create(2) with `MFD_ALLOW_SEALING` and `F_SEAL_SHRINK` (a registered
//! memfd that shrinks would leave the device pointing at freed pages, and udmabuf refuses
//! a memfd without that seal); `drivers/dma-buf/udmabuf.c` (`udmabuf_create`: page-aligned
//! offset and size, at most `size_limit_mb` MiB, 64 by default, which is why large sizes
//! fail there with EINVAL; the seam's `udmabuf.rs` makes the call and names that fix).

use std::os::fd::OwnedFd;
use std::sync::Arc;

use bypass_seam::{UdmabufError, create_udmabuf, sealed_memfd};
use bypass_verbs::{DmaBufSource, MemfdRange};
use nix::errno::Errno;

/// Where a udmabuf comes from.
pub const UDMABUF: &str = bypass_seam::UDMABUF_DEVICE;
/// Bytes written per call when filling a memfd.
const FILL_CHUNK: usize = 1 << 20;

/// Why a source could not be made (the size is then reported as not registered).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A memfd call failed.
    #[error(
        "making a {len}-byte memfd: {op} failed: {errno}; the host is out of memory or memfds are refused"
    )]
    Memfd {
        /// The call.
        op: &'static str,
        /// The memfd's size.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// The udmabuf could not be made.
    #[error("making a udmabuf of {len} bytes: {source}")]
    Udmabuf {
        /// The size asked for.
        len: usize,
        /// Why (the seam names the fix).
        #[source]
        source: UdmabufError,
    },
    /// The fd the kernel returned is not a dma-buf the driver recognises.
    #[error("the udmabuf of {len} bytes: {reason}")]
    NotADmaBuf {
        /// The size.
        len: usize,
        /// The driver's reason.
        reason: String,
    },
}

/// Memory ready to register, kept between rounds.
pub enum Held {
    /// A filled `Vec` (given back by each deregistration).
    Vec(Vec<u8>),
    /// A filled, shrink-sealed memfd of the size.
    Memfd(Arc<OwnedFd>),
    /// A udmabuf over a filled memfd, with that memfd as its backing.
    DmaBuf(DmaBufSource),
}

/// A `len`-byte memfd, sealed against shrinking, every page written (with ones).
pub fn filled_memfd(len: usize) -> Result<Arc<OwnedFd>, SourceError> {
    let err = |op| move |errno| SourceError::Memfd { op, len, errno };
    let fd = sealed_memfd(c"bypass-reg-cost", len as u64).map_err(|e| match e {
        UdmabufError::Memfd { op, errno, .. } => SourceError::Memfd { op, len, errno },
        other => SourceError::Udmabuf { len, source: other },
    })?;
    let ones = vec![1u8; FILL_CHUNK.min(len)];
    let mut at = 0usize;
    while at < len {
        let n = (len - at).min(ones.len());
        let wrote = nix::sys::uio::pwrite(&fd, &ones[..n], at as i64).map_err(err("pwrite"))?;
        if wrote == 0 {
            return Err(SourceError::Memfd {
                op: "pwrite",
                len,
                errno: Errno::EIO,
            });
        }
        at += wrote;
    }
    Ok(Arc::new(fd))
}

/// A udmabuf over a new filled memfd of `len` bytes, described with that memfd as its
/// backing (what a type1 VFIO backend maps; the sim maps the dma-buf itself).
pub fn udmabuf(len: usize) -> Result<DmaBufSource, SourceError> {
    let memfd = filled_memfd(len)?;
    let dfd = create_udmabuf(&*memfd, 0, len as u64)
        .map_err(|source| SourceError::Udmabuf { len, source })?;
    let mut src = DmaBufSource::from_fd(dfd).map_err(|e| SourceError::NotADmaBuf {
        len,
        reason: e.to_string(),
    })?;
    src.backing = Some(MemfdRange {
        fd: memfd,
        offset: 0,
    });
    Ok(src)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_memfd_has_its_size_ones_and_cannot_shrink() {
        let fd = filled_memfd(3 * 4096 + 100).unwrap();
        let st = nix::sys::stat::fstat(&*fd).unwrap();
        assert_eq!(st.st_size, 3 * 4096 + 100);
        let mut b = [0u8; 8];
        nix::sys::uio::pread(&*fd, &mut b, 3 * 4096 + 92).unwrap();
        assert_eq!(b, [1; 8]);
        assert_eq!(
            nix::unistd::ftruncate(&*fd, 4096),
            Err(Errno::EPERM),
            "sealed against shrinking"
        );
    }

    #[test]
    fn a_udmabuf_without_the_device_names_it() {
        if std::path::Path::new(UDMABUF).exists() {
            return;
        }
        let e = udmabuf(4096)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("opening /dev/udmabuf"), "{e}");
        assert!(e.contains("load the udmabuf module"), "{e}");
    }
}
