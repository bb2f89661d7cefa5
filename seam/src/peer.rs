//! Memory a device reaches only by copies: the seam's view of peer (GPU) memory.
//!
//! Owns: [`PeerMemory`] (memory with no CPU pointer a device may use: it is read and written
//! by copies, each of which may fail) and [`PeerError`]. Must not: allocate, export or map
//! anything (the `gpu` crate allocates CUDA memory and implements this trait; a backend maps
//! it with [`crate::DmaMap::map_dmabuf`]).
//!
//! A real NIC reaches GPU memory by PCIe peer-to-peer DMA through the dma-buf's pages; a
//! simulated NIC runs on the CPU, and CUDA memory is not CPU-mappable (NVIDIA's exporter,
//! `nv_dmabuf`, refuses `mmap`), so the sim reaches it through CUDA copies
//! (`cuMemcpyDtoH`/`cuMemcpyHtoD`) in its DMA path: that is what peer-to-peer DMA is, seen
//! from a device that is software. A CPU-mappable dma-buf whose CPU accesses must be
//! bracketed with `DMA_BUF_IOCTL_SYNC` is reached the same way. Sources: perftest
//! `src/cuda_memory.c` (export and registration), `include/uapi/linux/dma-buf.h`
//! (`dma_buf_sync`).

use std::fmt;

/// Device memory a device reaches by copies (GPU memory seen from a simulated NIC).
///
/// Offsets are bytes from the start of the memory; an access is all or nothing: on an error
/// nothing was read into `dst` that the caller may use, and the memory may have been written
/// in part only where [`PeerMemory::write_at`] says so.
pub trait PeerMemory: Send + Sync + fmt::Debug {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// True for a zero-length memory.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Who exported it (the dma-buf exporter's name: `nv_dmabuf`, `udmabuf`, `system`), for
    /// messages.
    fn exporter(&self) -> &str;

    /// Copies `dst.len()` bytes at `offset` into `dst`.
    ///
    /// Errors: [`PeerError`] when the range is outside the memory or the copy failed.
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), PeerError>;

    /// Copies `src` to `offset`. On an error the range may be partly written.
    ///
    /// Errors: [`PeerError`] when the range is outside the memory or the copy failed.
    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), PeerError>;
}

/// A copy to or from [`PeerMemory`] that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} of {len} bytes at offset {offset:#x} of {exporter} memory failed: {reason}")]
pub struct PeerError {
    /// `read` or `write`.
    pub op: &'static str,
    /// The exporter's name.
    pub exporter: String,
    /// Offset of the access.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    /// Why, with the fix where there is one (a CUDA error's name, "outside the memory").
    pub reason: String,
}
