//! GPU memory: one `cuMemAlloc` allocation, its dma-buf export, and its copy-only view.
//!
//! Owns: [`GpuBuffer`] (an allocation rounded up to 64 KiB, freed when the buffer and every
//! [`CudaPeer`] over it are gone), its host helpers (`copy_from_host`, `copy_to_host`,
//! `fill`, `memcpy_dtod`), [`DmaBufExport`] and [`CudaPeer`] (the seam's
//! [`PeerMemory`] over the exported range). Must not: register anything (`mr.rs` does) or
//! map the dma-buf (NVIDIA's exporter `nv_dmabuf` refuses `mmap`).
//!
//! The export follows perftest's `cuda_allocate_device_memory_buffer`: allocate the size
//! rounded up to 64 KiB (the GPU's page), round the pointer down to the host page
//! (`aligned`), export `aligned_size = roundup(len + (dptr - aligned), page)` bytes from
//! `aligned` with `cuMemGetHandleForAddressRange(.., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
//! flags)`, and register at dma-buf offset `dptr - aligned` with iova `dptr`. The PCIe
//! mapping flag (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, driver 12.8) asks for a
//! mapping through the PCIe BAR, which data-direct NICs need.
//!
//! Every call first makes the buffer's context current on the calling thread, so buffers
//! and peers may be used from any thread (the sim's DMA runs on its own).

use std::ffi::{c_int, c_void};
use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use bypass_seam::{DmaBufFile, Exporter, PAGE_SIZE, PeerError, PeerMemory};
use bypass_verbs::driver::redact::Addr;
use cudarc::driver::sys::{self, CUmemRangeFlags, CUmemRangeHandleType};

use crate::driver::{Context, Gpu, PCIE_MAPPING_MIN_DRIVER};
use crate::error::{GpuError, check};

/// The granularity perftest allocates GPU buffers in (`ACCEL_PAGE_SIZE`).
pub const GPU_ALLOC_ALIGN: usize = 64 * 1024;

/// The device memory itself: freed when the last holder (buffer or peer) drops it.
struct Allocation {
    ctx: Arc<Context>,
    dptr: u64,
    alloc_len: usize,
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Allocation(GPU{} {:?}+{:#x})",
            self.ctx.info.ordinal,
            Addr(self.dptr),
            self.alloc_len
        )
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: `dptr` came from cuMemAlloc_v2 in this context and is freed once,
            // here, after every user (buffer, peers) is gone. A failure leaves nothing to do.
            let _ = unsafe { sys::cuMemFree_v2(self.dptr) };
        }
    }
}

impl Allocation {
    /// `[dptr + off, + len)` when it lies within `size` bytes, else `OutOfRange`.
    fn at(&self, op: &'static str, off: usize, len: usize, size: usize) -> Result<u64, GpuError> {
        match off.checked_add(len) {
            Some(end) if end <= size => Ok(self.dptr + off as u64),
            _ => Err(GpuError::OutOfRange {
                op,
                offset: off,
                len,
                size,
            }),
        }
    }
}

/// GPU memory of one device.
#[derive(Debug)]
pub struct GpuBuffer {
    mem: Arc<Allocation>,
    len: usize,
}

impl Gpu {
    /// Allocates `len` bytes (`cuMemAlloc`, rounded up to 64 KiB) on this device. The
    /// contents are undefined until written.
    ///
    /// Errors: [`GpuError::BadSize`] for zero bytes or a size that overflows when rounded,
    /// [`GpuError::Cuda`] (`CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn alloc(&self, len: usize) -> Result<GpuBuffer, GpuError> {
        let alloc_len = len
            .checked_next_multiple_of(GPU_ALLOC_ALIGN)
            .filter(|_| len > 0)
            .ok_or(GpuError::BadSize { op: "alloc", len })?;
        self.ctx.bind()?;
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: the context is current here; `dptr` is a live out-pointer.
        check("cuMemAlloc_v2", unsafe {
            sys::cuMemAlloc_v2(&mut dptr, alloc_len)
        })?;
        Ok(GpuBuffer {
            mem: Arc::new(Allocation {
                ctx: self.ctx.clone(),
                dptr,
                alloc_len,
            }),
            len,
        })
    }
}

/// A dma-buf of a [`GpuBuffer`] and where the buffer lies in it (perftest's export).
/// `Debug` redacts the device pointer (the address peers use) unless `BYPASS_LOG_KEYS=1`.
#[derive(Clone)]
pub struct DmaBufExport {
    /// The dma-buf (`nv_dmabuf`, `aligned_size` bytes from the host page below the buffer).
    pub file: DmaBufFile,
    /// Byte offset of the buffer's first byte in the dma-buf.
    pub offset: u64,
    /// The address to register at: the buffer's device pointer.
    pub iova: u64,
    /// The buffer's bytes.
    pub len: usize,
    /// The dma-buf's bytes reached by copies, from its byte 0 (what the sim uses).
    pub peer: Arc<CudaPeer>,
}

impl fmt::Debug for DmaBufExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBufExport")
            .field("file", &self.file)
            .field("offset", &self.offset)
            .field("iova", &Addr(self.iova))
            .field("len", &self.len)
            .field("peer", &self.peer)
            .finish()
    }
}

impl GpuBuffer {
    /// Bytes asked for (the allocation may be larger).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes (never: `alloc` refuses zero).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device pointer of byte 0.
    pub fn dptr(&self) -> u64 {
        self.mem.dptr
    }

    /// The device's CUDA ordinal.
    pub fn ordinal(&self) -> usize {
        self.mem.ctx.info.ordinal
    }

    /// Copies `src` to byte `off` (`cuMemcpyHtoD`).
    ///
    /// Errors: [`GpuError::OutOfRange`], [`GpuError::Cuda`].
    pub fn copy_from_host(&self, off: usize, src: &[u8]) -> Result<(), GpuError> {
        let at = self.mem.at("copy_from_host", off, src.len(), self.len)?;
        self.mem.ctx.bind()?;
        // SAFETY: `[at, + src.len())` lies in this live allocation; `src` is readable.
        check("cuMemcpyHtoD_v2", unsafe {
            sys::cuMemcpyHtoD_v2(at, src.as_ptr().cast::<c_void>(), src.len())
        })
    }

    /// Copies `dst.len()` bytes at `off` into `dst` (`cuMemcpyDtoH`).
    ///
    /// Errors: [`GpuError::OutOfRange`], [`GpuError::Cuda`].
    pub fn copy_to_host(&self, off: usize, dst: &mut [u8]) -> Result<(), GpuError> {
        let at = self.mem.at("copy_to_host", off, dst.len(), self.len)?;
        self.mem.ctx.bind()?;
        // SAFETY: `[at, + dst.len())` lies in this live allocation; `dst` is writable.
        check("cuMemcpyDtoH_v2", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast::<c_void>(), at, dst.len())
        })
    }

    /// Sets `len` bytes from `off` to `byte` (`cuMemsetD8`).
    ///
    /// Errors: [`GpuError::OutOfRange`], [`GpuError::Cuda`].
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<(), GpuError> {
        let at = self.mem.at("fill", off, len, self.len)?;
        self.mem.ctx.bind()?;
        // SAFETY: the range lies in this live allocation.
        check("cuMemsetD8_v2", unsafe {
            sys::cuMemsetD8_v2(at, byte, len)
        })
    }

    /// Copies `len` bytes from `src` at `src_off` to this buffer at `dst_off`
    /// (`cuMemcpyDtoD`, synchronous). Both buffers must be on one device.
    ///
    /// Errors: [`GpuError::CrossDevice`], [`GpuError::OutOfRange`], [`GpuError::Cuda`].
    pub fn memcpy_dtod(
        &self,
        dst_off: usize,
        src: &GpuBuffer,
        src_off: usize,
        len: usize,
    ) -> Result<(), GpuError> {
        if src.ordinal() != self.ordinal() {
            return Err(GpuError::CrossDevice {
                src: src.ordinal(),
                dst: self.ordinal(),
            });
        }
        let to = self.mem.at("memcpy_dtod", dst_off, len, self.len)?;
        let from = src.mem.at("memcpy_dtod", src_off, len, src.len)?;
        self.mem.ctx.bind()?;
        // SAFETY: both ranges lie in live allocations of the current context.
        check("cuMemcpyDtoD_v2", unsafe {
            sys::cuMemcpyDtoD_v2(to, from, len)
        })?;
        // SAFETY: as above; the copy is ordered on the null stream, this waits for it.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// Exports the buffer as a dma-buf, as perftest does (module comment). `pcie_mapping`
    /// sets `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (needs driver 12.8).
    ///
    /// Errors: [`GpuError::DmaBufUnsupported`], [`GpuError::DriverTooOld`] for the PCIe
    /// flag on an older driver, [`GpuError::Cuda`] from `cuMemGetHandleForAddressRange`.
    pub fn export_dmabuf(&self, pcie_mapping: bool) -> Result<DmaBufExport, GpuError> {
        let ctx = &self.mem.ctx;
        if !ctx.info.dma_buf {
            return Err(GpuError::DmaBufUnsupported {
                ordinal: ctx.info.ordinal,
            });
        }
        if pcie_mapping && ctx.driver_version < PCIE_MAPPING_MIN_DRIVER {
            return Err(GpuError::DriverTooOld {
                version: ctx.driver_version,
            });
        }
        let page = PAGE_SIZE as u64;
        let dptr = self.mem.dptr;
        let aligned = dptr & !(page - 1);
        let offset = dptr - aligned;
        let aligned_size = (self.len as u64 + offset).next_multiple_of(page);
        let flags = if pcie_mapping {
            CUmemRangeFlags::CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE as u64
        } else {
            0
        };
        ctx.bind()?;
        let mut fd: c_int = -1;
        // SAFETY: the context is current; `[aligned, + aligned_size)` is the host-page
        // rounding of this live allocation's used bytes, the range the driver documents
        // for the dma-buf handle type (perftest exports the same); the handle out-pointer
        // is a live c_int, the size this handle type writes.
        check("cuMemGetHandleForAddressRange", unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut c_int).cast::<c_void>(),
                aligned,
                aligned_size as usize,
                CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                flags,
            )
        })?;
        if fd < 0 {
            return Err(GpuError::Cuda {
                call: "cuMemGetHandleForAddressRange (returned no fd)",
                code: 999,
                name: "CUDA_ERROR_UNKNOWN".into(),
            });
        }
        // SAFETY: the driver returned a new dma-buf fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let peer = Arc::new(CudaPeer {
            mem: self.mem.clone(),
            base: aligned,
            len: aligned_size as usize,
            skip: offset as usize,
        });
        Ok(DmaBufExport {
            file: DmaBufFile::from_parts(fd, aligned_size, Exporter::Nvidia),
            offset,
            iova: dptr,
            len: self.len,
            peer,
        })
    }
}

/// A dma-buf of GPU memory reached by CUDA copies (`cuMemcpyDtoH`/`cuMemcpyHtoD`), from
/// the dma-buf's byte 0: how a simulated NIC does a GPU's peer-to-peer DMA.
pub struct CudaPeer {
    mem: Arc<Allocation>,
    /// Device address of the dma-buf's byte 0 (the host page at or below the buffer).
    base: u64,
    /// The dma-buf's bytes.
    len: usize,
    /// Bytes from `base` before the allocation: never accessed (they are not this
    /// buffer's, and no registration covers them).
    skip: usize,
}

impl fmt::Debug for CudaPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaPeer({:?}, {:?}+{:#x})",
            self.mem,
            Addr(self.base),
            self.len
        )
    }
}

impl CudaPeer {
    /// The device address of `[offset, + len)`, or why it cannot be reached.
    fn at(&self, op: &'static str, offset: usize, len: usize) -> Result<u64, PeerError> {
        let end = offset.checked_add(len);
        let inside = offset >= self.skip
            && end.is_some_and(|e| e <= self.len && e - self.skip <= self.mem.alloc_len);
        if inside {
            return Ok(self.base + offset as u64);
        }
        Err(self.error(
            op,
            offset,
            len,
            format!(
                "outside the memory (the buffer is bytes {:#x}..{:#x} of the dma-buf): keep accesses within the registered range",
                self.skip,
                self.len.min(self.skip + self.mem.alloc_len)
            ),
        ))
    }

    fn error(&self, op: &'static str, offset: usize, len: usize, reason: String) -> PeerError {
        PeerError {
            op,
            exporter: Exporter::Nvidia.name().to_owned(),
            offset,
            len,
            reason,
        }
    }
}

impl PeerMemory for CudaPeer {
    fn len(&self) -> usize {
        self.len
    }

    fn exporter(&self) -> &str {
        Exporter::Nvidia.name()
    }

    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), PeerError> {
        let at = self.at("read", offset, dst.len())?;
        let len = dst.len();
        let mut copy = || -> Result<(), GpuError> {
            self.mem.ctx.bind()?;
            // SAFETY: `[at, + dst.len())` lies in the live allocation (checked by `at`).
            check("cuMemcpyDtoH_v2", unsafe {
                sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast::<c_void>(), at, dst.len())
            })
        };
        copy().map_err(|e| self.error("read", offset, len, e.to_string()))
    }

    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), PeerError> {
        let at = self.at("write", offset, src.len())?;
        let copy = || -> Result<(), GpuError> {
            self.mem.ctx.bind()?;
            // SAFETY: `[at, + src.len())` lies in the live allocation (checked by `at`).
            check("cuMemcpyHtoD_v2", unsafe {
                sys::cuMemcpyHtoD_v2(at, src.as_ptr().cast::<c_void>(), src.len())
            })
        };
        copy().map_err(|e| self.error("write", offset, src.len(), e.to_string()))
    }
}
