//! GPU memory as memory regions: one buffer registered through its dma-buf, and the
//! "register once, lease slices" pool over it.
//!
//! Owns: [`register`] (a [`GpuBuffer`]'s dma-buf registered as `ibv_reg_dmabuf_mr` does:
//! dma-buf offset, length, iova = the device pointer), [`GpuMr`] (the region with the buffer
//! it covers, so the memory outlives it) and [`GpuPool`] (one allocation, one MR, leased in
//! chunks through the verbs crate's `DevicePool`). Must not: check registration rules or map
//! anything (`Pd::register_dmabuf` and the backend do), or copy bytes itself (the MR's
//! `read`/`write` go through the [`crate::CudaPeer`] on the sim).
//!
//! Sources: perftest `src/perftest_resources.c` (`create_single_mr`: `ibv_reg_dmabuf_mr(pd,
//! dmabuf_offset, size, (uint64_t)addr, dmabuf_fd, flags)` for CUDA buffers), rdma-core
//! `libibverbs/verbs.c` (`ibv_reg_dmabuf_mr`), the seed's pool pattern (bypass-verbs
//! `MemoryPool`).

use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::{DeviceLease, DeviceMr, DevicePool, DmaBufSource, Pd, VerbsError};

use crate::{DmaBufExport, Gpu, GpuBuffer, GpuError};

/// Registering or leasing GPU memory failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuMrError {
    /// Allocating or exporting the memory.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The verbs call.
    #[error("{op} of {len} bytes of GPU {ordinal} memory at iova {iova:#x}: {source}")]
    Verbs {
        /// `register_dmabuf`, `DevicePool::new` or `lease`.
        op: &'static str,
        /// The device.
        ordinal: usize,
        /// Bytes.
        len: usize,
        /// The address.
        iova: u64,
        /// The verbs error (it names the rule broken and the fix).
        #[source]
        source: VerbsError,
    },
}

/// A registered GPU buffer: the MR and the buffer it covers (dropped after the MR).
#[derive(Debug)]
pub struct GpuMr {
    /// The region (lkey, rkey, remote(), read/write by copies).
    pub mr: DeviceMr,
    /// How it was exported.
    pub export: DmaBufExport,
    /// The memory: outlives the MR (fields drop in order).
    pub buf: GpuBuffer,
}

/// The verbs source of an export: its file, no memfd, and the CUDA peer the sim copies
/// through.
fn source(export: &DmaBufExport) -> DmaBufSource {
    DmaBufSource {
        file: export.file.clone(),
        backing: None,
        peer: Some(export.peer.clone()),
    }
}

/// Exports `buf` (`pcie_mapping` as [`GpuBuffer::export_dmabuf`]) and registers all of it
/// with `access` at iova = its device pointer.
///
/// Errors: [`GpuMrError::Gpu`] from the export, [`GpuMrError::Verbs`] from the
/// registration.
pub fn register_export(
    pd: &Pd,
    buf: &GpuBuffer,
    access: MkeyAccess,
    pcie_mapping: bool,
) -> Result<(DeviceMr, DmaBufExport), GpuMrError> {
    let export = buf.export_dmabuf(pcie_mapping)?;
    let mr = pd
        .register_dmabuf(
            &source(&export),
            export.offset,
            export.len,
            export.iova,
            access,
        )
        .map_err(|source| GpuMrError::Verbs {
            op: "register_dmabuf",
            ordinal: buf.ordinal(),
            len: export.len,
            iova: export.iova,
            source,
        })?;
    Ok((mr, export))
}

/// Registers all of `buf` on `pd` (the default, non-PCIe dma-buf mapping).
///
/// The MR reaches the memory through the export's peer, which holds the allocation, so the
/// memory stays allocated while the MR is registered even if `buf` is dropped first.
///
/// Errors: as [`register_export`].
pub fn register(pd: &Pd, buf: &GpuBuffer, access: MkeyAccess) -> Result<DeviceMr, GpuMrError> {
    register_export(pd, buf, access, false).map(|(mr, _)| mr)
}

impl Gpu {
    /// Allocates `len` bytes and registers them on `pd` with `access` (`pcie_mapping` as
    /// [`GpuBuffer::export_dmabuf`]).
    ///
    /// Errors: as [`Gpu::alloc`] and [`register_export`].
    pub fn alloc_mr(
        &self,
        pd: &Pd,
        len: usize,
        access: MkeyAccess,
        pcie_mapping: bool,
    ) -> Result<GpuMr, GpuMrError> {
        let buf = self.alloc(len)?;
        let (mr, export) = register_export(pd, &buf, access, pcie_mapping)?;
        Ok(GpuMr { mr, export, buf })
    }
}

/// GPU memory registered once and leased in chunks (local access only, as the host pool).
#[derive(Debug)]
pub struct GpuPool {
    pool: DevicePool,
    buf: GpuBuffer,
}

impl GpuPool {
    /// Allocates `chunk * count` bytes on `gpu`, registers them on `pd` for local access
    /// (`pcie_mapping` as [`GpuBuffer::export_dmabuf`]) and cuts them into `count` chunks.
    ///
    /// Errors: [`GpuError::BadSize`] for a zero or overflowing size, and as
    /// [`register_export`] and `DevicePool::new`.
    pub fn new(
        gpu: &Gpu,
        pd: &Pd,
        chunk: usize,
        count: usize,
        pcie_mapping: bool,
    ) -> Result<Self, GpuMrError> {
        let len = chunk
            .checked_mul(count)
            .filter(|&n| n > 0)
            .ok_or(GpuError::BadSize {
                op: "GpuPool::new",
                len: chunk.saturating_mul(count),
            })?;
        let buf = gpu.alloc(len)?;
        let (mr, export) = register_export(pd, &buf, MkeyAccess::LOCAL_WRITE, pcie_mapping)?;
        let pool = DevicePool::new(mr, chunk).map_err(|source| GpuMrError::Verbs {
            op: "DevicePool::new",
            ordinal: buf.ordinal(),
            len,
            iova: export.iova,
            source,
        })?;
        Ok(Self { pool, buf })
    }

    /// A chunk holding `len` bytes (given back when the lease, or the completion of the
    /// work request it was posted in, drops).
    ///
    /// Errors: [`GpuMrError::Verbs`] when no chunk is free or `len` exceeds one.
    pub fn lease(&self, len: usize) -> Result<DeviceLease, GpuMrError> {
        self.pool.lease(len).map_err(|source| GpuMrError::Verbs {
            op: "lease",
            ordinal: self.buf.ordinal(),
            len,
            iova: self.buf.dptr(),
            source,
        })
    }

    /// The pool's GPU memory (host copies of the whole region).
    pub fn buffer(&self) -> &GpuBuffer {
        &self.buf
    }
}
