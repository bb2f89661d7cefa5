//! Memory regions over a dma-buf: `ibv_reg_dmabuf_mr`.
//!
//! Owns: [`DmaBufSource`] (a dma-buf and what else the caller knows about reaching it: a
//! udmabuf's backing memfd, a [`PeerMemory`] for memory the CPU cannot map), [`DmaBufMr`] (an
//! MTT mkey over the pages of a dma-buf range the backend mapped with
//! [`crate::backend::DmaMap::map_dmabuf`]) and the registration rules. Must not: map the
//! dma-buf itself (each backend does, its own way) or pin anything: the exporter keeps a
//! dma-buf's pages, so nothing is `mlock`ed or charged to `RLIMIT_MEMLOCK`.
//!
//! Rules, checked before anything is mapped, as `man 3 ibv_reg_dmabuf_mr` and the kernel
//! state them (`drivers/infiniband/core/uverbs_std_types_mr.c`
//! `UVERBS_HANDLER(UVERBS_METHOD_REG_DMABUF_MR)`: offset and IOVA ranges must not wrap;
//! `drivers/infiniband/core/umem_dmabuf.c` `ib_umem_dmabuf_get`: `offset + size` within the
//! dma-buf; `drivers/infiniband/hw/mlx5/mr.c` `mlx5_ib_reg_user_mr_dmabuf`: IOVA and offset
//! with the same offset in a page): the MR is `len` bytes from `offset` of the dma-buf,
//! addressed from `iova`; access only the five flags the man page lists (of which
//! [`MkeyAccess`] spells four: relaxed ordering is a hint the C ABI accepts and drops);
//! `len > 0`. Then the range is rounded out to pages, given an IOVA range from the driver's
//! allocator, mapped, and covered by CREATE_MKEY in MTT mode with `start_addr = iova`.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use bypass_seam::{DmaBufFile, DmaBufSlice, MemfdRange, PAGE_SIZE, PeerMemory};

use crate::error::{DriverError, Result};
use crate::mr::{MkeyAccess, create_mkey_input_pages, destroy_mkey, exec_create_mkey};
use crate::pd::Pd;
use crate::redact::{Addr, Key};

const PAGE: u64 = PAGE_SIZE as u64;

/// A dma-buf to register, and how a backend can reach it.
#[derive(Debug, Clone)]
pub struct DmaBufSource {
    /// The dma-buf (fd, size, exporter).
    pub file: DmaBufFile,
    /// For a udmabuf: its memfd at the offset of the dma-buf's byte 0 (VFIO maps that; the
    /// CPU reaches the MR's bytes through it where there is no peer).
    pub backing: Option<MemfdRange>,
    /// For memory the CPU cannot map (CUDA): copies into and out of the whole dma-buf from
    /// its byte 0 (the sim's device path, and the CPU's).
    pub peer: Option<Arc<dyn PeerMemory>>,
}

impl DmaBufSource {
    /// A dma-buf with no backing memfd and no peer (a CPU-mappable exporter's, which the
    /// sim `mmap`s).
    pub fn new(file: DmaBufFile) -> Self {
        Self {
            file,
            backing: None,
            peer: None,
        }
    }

    /// The dma-buf `fd`, its size and exporter read from `/proc/self/fdinfo`.
    ///
    /// Errors: [`DriverError::NotADmaBuf`] (a memfd, a plain file: the text says which fd
    /// and the fix).
    pub fn from_fd(fd: OwnedFd) -> Result<Self> {
        let file = DmaBufFile::from_fd(fd).map_err(|reason| DriverError::NotADmaBuf { reason })?;
        Ok(Self::new(file))
    }
}

/// Where a dma-buf MR lies: the bytes of the dma-buf it covers and the address it is known by.
/// `Debug` redacts the address ([`crate::redact`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DmaBufRange {
    /// First byte, in the dma-buf.
    pub offset: u64,
    /// Bytes.
    pub len: usize,
    /// The address SGEs and peers use for the first byte.
    pub iova: u64,
}

impl std::fmt::Debug for DmaBufRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBufRange")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("iova", &Addr(self.iova))
            .finish()
    }
}

impl DmaBufRange {
    /// Checks `ibv_reg_dmabuf_mr`'s rules for this range of a dma-buf of `size` bytes from
    /// `exporter`, with `access`; returns the page-rounded span `(first, len)` to map.
    ///
    /// Errors: [`DriverError::DmaBufAccess`], [`DriverError::DmaBufEmpty`],
    /// [`DriverError::DmaBufOutOfRange`], [`DriverError::DmaBufIovaOffset`],
    /// [`DriverError::DmaBufIovaWraps`].
    pub fn check(&self, size: u64, exporter: &str, access: MkeyAccess) -> Result<(u64, usize)> {
        let allowed = MkeyAccess::LOCAL_WRITE
            | MkeyAccess::REMOTE_WRITE
            | MkeyAccess::REMOTE_READ
            | MkeyAccess::REMOTE_ATOMIC;
        if !allowed.contains(access) {
            return Err(DriverError::DmaBufAccess {
                bits: access.bits(),
            });
        }
        let Self { offset, len, iova } = *self;
        if len == 0 {
            return Err(DriverError::DmaBufEmpty { offset });
        }
        let end = offset
            .checked_add(len as u64)
            .filter(|&e| e <= size)
            .ok_or_else(|| DriverError::DmaBufOutOfRange {
                offset,
                len,
                size,
                exporter: exporter.to_owned(),
            })?;
        if iova % PAGE != offset % PAGE {
            return Err(DriverError::DmaBufIovaOffset { offset, iova });
        }
        if iova.checked_add(len as u64).is_none() {
            return Err(DriverError::DmaBufIovaWraps { iova, len });
        }
        let first = offset - offset % PAGE;
        let last = end
            .checked_next_multiple_of(PAGE)
            .ok_or(DriverError::DmaBufIovaWraps { iova, len })?;
        let span = usize::try_from(last - first).map_err(|_| DriverError::BadDmaLength { len })?;
        Ok((first, span))
    }
}

/// A registered range of a dma-buf. Dropping it deregisters (a failed unmap is logged).
/// `Debug` redacts the key and the address ([`crate::redact`]).
pub struct DmaBufMr {
    pd: Arc<Pd>,
    src: DmaBufSource,
    range: DmaBufRange,
    access: MkeyAccess,
    key: u32,
    /// The IOVA range mapped (whole pages), `None` once torn down.
    mapped: Option<(u64, usize)>,
}

impl std::fmt::Debug for DmaBufMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBufMr")
            .field("pd", &self.pd)
            .field("src", &self.src)
            .field("range", &self.range)
            .field("access", &self.access)
            .field("key", &Key(self.key))
            .field("mapped", &self.mapped.is_some())
            .finish()
    }
}

impl DmaBufMr {
    /// Registers `range` of `src` with `access` (`ibv_reg_dmabuf_mr`).
    ///
    /// Errors: the rules of [`DmaBufRange::check`] (nothing is mapped then);
    /// [`DriverError::IovaExhausted`]; the backend's [`crate::backend::BackendError::DmaBuf`]
    /// (an exporter it cannot map, with the fix); CREATE_MKEY failures.
    pub fn register(
        pd: &Arc<Pd>,
        src: &DmaBufSource,
        range: DmaBufRange,
        access: MkeyAccess,
    ) -> Result<Self> {
        let file = &src.file;
        let (first, span) = range.check(file.size(), file.exporter().name(), access)?;
        let dma = pd.hca().dma();
        // Mapped so that device addresses agree with the key's addresses (`range.iova`) on as
        // many low bits as the IOVA space allows: the key then takes large MTT pages.
        let map_iova = dma.alloc_iova_like(span as u64, range.iova & !(PAGE - 1))?;
        let slice = DmaBufSlice {
            file: file.clone(),
            offset: first,
            len: span,
            backing: src.backing.clone(),
            peer: src.peer.clone(),
        };
        // SAFETY: `map_iova` was just allocated from the mapper's free IOVA space for `span`.
        if let Err(e) = unsafe { dma.dev().map_dmabuf(map_iova, &slice) } {
            dma.free_iova(map_iova, span);
            return Err(e.into());
        }
        let mut mr = Self {
            pd: pd.clone(),
            src: src.clone(),
            range,
            access,
            key: 0,
            mapped: Some((map_iova, span)),
        };
        let pages: Vec<u64> = (0..span as u64 / PAGE)
            .map(|k| map_iova + k * PAGE)
            .collect();
        let variant = pd.next_key_variant();
        // On an error `mr` drops here (no key yet): the mapping goes, then the IOVA range.
        let i = create_mkey_input_pages(
            pd.pdn(),
            range.iova,
            range.len,
            access,
            variant,
            &pages,
            pd.hca().caps().mkey_max_page_shift(),
        )?;
        mr.key = exec_create_mkey(pd, &i, variant)?;
        tracing::debug!(
            pdn = pd.pdn(),
            len = range.len,
            exporter = file.exporter().name(),
            "CREATE_MKEY (dma-buf)"
        );
        Ok(mr)
    }

    /// DESTROY_MKEY, then the unmap and the IOVA range's release.
    ///
    /// Errors: [`DriverError::StillMapped`] when the unmap failed: the device may still reach
    /// the dma-buf (its IOVA range is leaked).
    pub fn deregister(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some((iova, span)) = self.mapped.take() else {
            return Ok(());
        };
        if self.key != 0 {
            destroy_mkey(&self.pd, self.key);
        }
        let dma = self.pd.hca().dma();
        // SAFETY: this MR's own mapping; its mkey was destroyed just above, so the device no
        // longer reaches the range.
        if let Err(e) = unsafe { dma.dev().unmap_dma(iova, span) } {
            // The mapped range starts at the page of the address peers use: redacted.
            tracing::error!(iova = %Addr(iova), span, error = %e, "unmapping a dma-buf failed; its IOVA range is leaked");
            return Err(DriverError::StillMapped {
                addr: self.range.iova,
                len: self.range.len,
            });
        }
        dma.free_iova(iova, span);
        Ok(())
    }

    /// The local key (equal to the remote key).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The address SGEs and peers use for the first byte (the IOVA asked for).
    pub fn addr(&self) -> u64 {
        self.range.iova
    }

    /// Bytes registered (exact).
    pub fn len(&self) -> usize {
        self.range.len
    }

    /// Always false (a zero-length registration is refused).
    pub fn is_empty(&self) -> bool {
        self.range.len == 0
    }

    /// Offset of the first byte in the dma-buf.
    pub fn offset(&self) -> u64 {
        self.range.offset
    }

    /// The access rights.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }

    /// The dma-buf and the ways to reach it.
    pub fn source(&self) -> &DmaBufSource {
        &self.src
    }

    /// The IOVA range the backend mapped (whole pages): `(iova, bytes)`.
    pub fn mapped(&self) -> Option<(u64, usize)> {
        self.mapped
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// An SGE over `len` bytes at `off` in the region (not checked, as [`crate::mr::Mr::sge`]).
    pub fn sge(&self, off: u64, len: u32) -> crate::post::Sge {
        crate::post::Sge {
            addr: self.range.iova.wrapping_add(off),
            length: len,
            lkey: self.key,
        }
    }
}

impl Drop for DmaBufMr {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::error!(error = %e, "deregistering a dma-buf");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(offset: u64, len: usize, iova: u64) -> DmaBufRange {
        DmaBufRange { offset, len, iova }
    }

    const RW: MkeyAccess = MkeyAccess::LOCAL_WRITE.union(MkeyAccess::REMOTE_WRITE);

    #[test]
    fn a_range_is_rounded_out_to_pages() {
        assert_eq!(
            r(0x1ff0, 0x20, 0x5ff0).check(0x4000, "t", RW).unwrap(),
            (0x1000, 0x2000)
        );
        assert_eq!(r(0, 0x4000, 0).check(0x4000, "t", RW).unwrap(), (0, 0x4000));
        assert_eq!(
            r(0x3fff, 1, 0xfff)
                .check(0x4000, "t", MkeyAccess::all())
                .unwrap(),
            (0x3000, 0x1000)
        );
    }

    #[test]
    fn each_rule_has_its_error() {
        assert!(matches!(
            r(0, 0x10, 0).check(0x1000, "t", MkeyAccess::from_bits_retain(1 << 4)),
            Err(DriverError::DmaBufAccess { bits: 0x10 })
        ));
        assert!(matches!(
            r(0x10, 0, 0x10).check(0x1000, "t", RW),
            Err(DriverError::DmaBufEmpty { offset: 0x10 })
        ));
        assert!(matches!(
            r(0x800, 0x801, 0x800).check(0x1000, "t", RW),
            Err(DriverError::DmaBufOutOfRange { size: 0x1000, .. })
        ));
        assert!(matches!(
            r(u64::MAX, 2, 0xfff).check(u64::MAX, "t", RW),
            Err(DriverError::DmaBufOutOfRange { .. })
        ));
        assert!(matches!(
            r(0x10, 0x10, 0x20).check(0x1000, "t", RW),
            Err(DriverError::DmaBufIovaOffset {
                offset: 0x10,
                iova: 0x20
            })
        ));
        assert!(matches!(
            r(0xff0, 0x20, u64::MAX - 0xf).check(0x2000, "t", RW),
            Err(DriverError::DmaBufIovaWraps { .. })
        ));
    }
}
