//! Memory regions over memory the CPU does not own as plain bytes: a dma-buf
//! (`ibv_reg_dmabuf_mr`) or a range of a memfd.
//!
//! Owns: [`DeviceMr`] (the registration, its keys, and the CPU's copies into and out of it)
//! and the [`Pd`] entry points [`Pd::register_dmabuf`] and [`Pd::register_memfd`]. Must not:
//! check the registration rules or map anything (the driver's `dmabuf_mr` and `memfd_mr` do),
//! or hand out a reference into the bytes: device memory has no CPU pointer, and a memfd's
//! pages are shared with every other mapping of it, so the CPU reaches both by copies only
//! (crate docs, rule 6), never a `&[u8]`.
//!
//! The CPU's path into a dma-buf MR is the source's `peer` when there is one (CUDA copies),
//! else its `backing` memfd (a udmabuf's pages are that memfd's), else none
//! ([`VerbsError::NoCpuAccess`]): the device's path is the backend's business. Local message
//! buffers over such memory come from a [`crate::DevicePool`].

use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::driver::backend::PeerMemory;
pub use crate::driver::dmabuf_mr::DmaBufSource;
use crate::driver::dmabuf_mr::{DmaBufMr, DmaBufRange};
use crate::driver::memfd_mr::{FdMapping, MemfdMr};
use crate::driver::mr::MkeyAccess;
use crate::endpoint::RemoteBuffer;
use crate::error::VerbsError;
use crate::pd::Pd;

/// How the CPU reaches a dma-buf MR's bytes.
enum Cpu {
    /// Through the peer, from this offset in it (the MR's first byte).
    Peer(Arc<dyn PeerMemory>, usize),
    /// Through a mapping of the backing memfd (exactly the MR's bytes).
    Mapping(FdMapping),
    /// No way.
    None,
}

enum Inner {
    DmaBuf { mr: DmaBufMr, cpu: Cpu },
    Memfd(MemfdMr),
}

/// A registered dma-buf or memfd range: keys for work requests and peers, copies for the CPU.
/// Dropping it deregisters (a failed unmap is logged and the memory kept mapped).
pub struct DeviceMr {
    inner: Inner,
    lkey: u32,
    addr: u64,
    len: usize,
    access: MkeyAccess,
    _pd: Pd,
}

impl fmt::Debug for DeviceMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMr")
            .field(
                "kind",
                &match &self.inner {
                    Inner::DmaBuf { .. } => "dma-buf",
                    Inner::Memfd(_) => "memfd",
                },
            )
            .field("addr", &crate::driver::redact::Addr(self.addr))
            .field("len", &self.len)
            .field("lkey", &crate::driver::redact::Key(self.lkey))
            .field("access", &self.access)
            .finish()
    }
}

impl DeviceMr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key (equal to the local key).
    pub fn rkey(&self) -> u32 {
        self.lkey
    }

    /// The address work requests and peers use for the first byte (the IOVA).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (an empty registration is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access rights.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }

    /// What a peer needs to reach the region.
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr,
            rkey: self.lkey,
            len: self.len as u64,
        }
    }

    /// The driver's dma-buf registration, for a dma-buf MR.
    pub fn dmabuf(&self) -> Option<&DmaBufMr> {
        match &self.inner {
            Inner::DmaBuf { mr, .. } => Some(mr),
            Inner::Memfd(_) => None,
        }
    }

    /// The driver's memfd registration, for a memfd MR.
    pub fn memfd(&self) -> Option<&MemfdMr> {
        match &self.inner {
            Inner::DmaBuf { .. } => None,
            Inner::Memfd(m) => Some(m),
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), VerbsError> {
        if offset.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(VerbsError::OutsideMr {
                offset: offset as u64,
                len: len as u64,
                mr_len: self.len as u64,
            });
        }
        Ok(())
    }

    fn exporter(&self) -> String {
        self.dmabuf()
            .map_or("memfd", |m| m.source().file.exporter().name())
            .to_owned()
    }

    /// Copies `dst.len()` bytes at `offset` of the region into `dst` (through the peer, or
    /// the CPU's mapping).
    ///
    /// Errors: [`VerbsError::OutsideMr`], [`VerbsError::DeviceCopy`] (the peer's copy
    /// failed), [`VerbsError::NoCpuAccess`].
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        self.check(offset, dst.len())?;
        match &self.inner {
            Inner::Memfd(m) => match m.mapping() {
                Some(map) => Ok(map.read(offset, dst)?),
                None => Err(self.no_cpu()),
            },
            Inner::DmaBuf { cpu, .. } => match cpu {
                Cpu::Peer(p, at) => Ok(p.read_at(at + offset, dst)?),
                Cpu::Mapping(map) => Ok(map.read(offset, dst)?),
                Cpu::None => Err(self.no_cpu()),
            },
        }
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// Errors: as [`DeviceMr::read`].
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        self.check(offset, src.len())?;
        match &self.inner {
            Inner::Memfd(m) => match m.mapping() {
                Some(map) => Ok(map.write(offset, src)?),
                None => Err(self.no_cpu()),
            },
            Inner::DmaBuf { cpu, .. } => match cpu {
                Cpu::Peer(p, at) => Ok(p.write_at(at + offset, src)?),
                Cpu::Mapping(map) => Ok(map.write(offset, src)?),
                Cpu::None => Err(self.no_cpu()),
            },
        }
    }

    fn no_cpu(&self) -> VerbsError {
        VerbsError::NoCpuAccess {
            exporter: self.exporter(),
        }
    }

    /// Deregisters: DESTROY_MKEY, then the unmap (and for a memfd the pages' release and the
    /// process's mapping).
    ///
    /// Errors: the driver's [`crate::driver::DriverError::StillMapped`]: the device may still
    /// reach the memory, which stays mapped for good.
    pub fn deregister(self) -> Result<(), VerbsError> {
        match self.inner {
            Inner::DmaBuf { mr, cpu } => {
                let r = mr.deregister();
                drop(cpu);
                Ok(r?)
            }
            Inner::Memfd(m) => Ok(m.deregister()?),
        }
    }
}

impl Pd {
    /// Registers `len` bytes of the dma-buf `src` from `offset`, addressed from `iova`
    /// (`ibv_reg_dmabuf_mr`: `iova` with the page offset of `offset`; access only
    /// LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
    ///
    /// Errors: the driver's rule errors (`DmaBufAccess`, `DmaBufEmpty`, `DmaBufOutOfRange`,
    /// `DmaBufIovaOffset`, `DmaBufIovaWraps`: nothing is mapped then), the backend's
    /// `DmaBuf` refusal (an exporter it cannot reach, with the fix), CREATE_MKEY failures;
    /// `Memfd` when the backing memfd cannot be mapped for the CPU.
    pub fn register_dmabuf(
        &self,
        src: &DmaBufSource,
        offset: u64,
        len: usize,
        iova: u64,
        access: MkeyAccess,
    ) -> Result<DeviceMr, VerbsError> {
        let range = DmaBufRange { offset, len, iova };
        let mr = DmaBufMr::register(self.driver(), src, range, access)?;
        let cpu = match (&src.peer, &src.backing) {
            (Some(p), _) => match usize::try_from(offset) {
                Ok(at) => Cpu::Peer(p.clone(), at),
                Err(_) => Cpu::None,
            },
            (None, Some(b)) => {
                let at = b.offset.checked_add(offset).ok_or(VerbsError::OutsideMr {
                    offset,
                    len: len as u64,
                    mr_len: src.file.size(),
                })?;
                // On an error `mr` drops here and is deregistered.
                Cpu::Mapping(FdMapping::new(b.fd.clone(), at, len)?)
            }
            (None, None) => Cpu::None,
        };
        Ok(DeviceMr {
            lkey: mr.lkey(),
            addr: mr.addr(),
            len,
            access,
            inner: Inner::DmaBuf { mr, cpu },
            _pd: self.clone(),
        })
    }

    /// Registers `len` bytes of the memfd `fd` from `offset`, addressed from `iova` (`None`:
    /// the address of this process's `MAP_SHARED` mapping of them), as application memory
    /// (pinned, charged to `RLIMIT_MEMLOCK` where the backend does not pin).
    ///
    /// Errors: the driver's `BadDmaLength` (0 bytes), `MemfdOutOfRange`, `Memfd` (`fstat` or
    /// `mmap` refused), and those of application memory (`IovaOffsetMismatch`, the memlock
    /// limit, CREATE_MKEY).
    pub fn register_memfd(
        &self,
        fd: Arc<OwnedFd>,
        offset: u64,
        len: usize,
        iova: Option<u64>,
        access: MkeyAccess,
    ) -> Result<DeviceMr, VerbsError> {
        let m = MemfdMr::register(self.driver(), fd, offset, len, iova, access)?;
        let (lkey, addr) = m.user_mr().map_or((0, 0), |u| (u.lkey(), u.addr()));
        Ok(DeviceMr {
            inner: Inner::Memfd(m),
            lkey,
            addr,
            len,
            access,
            _pd: self.clone(),
        })
    }
}
