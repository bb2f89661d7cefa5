//! # bypass-gpu: CUDA memory for bypass, loaded at run time
//!
//! Owns: opening a CUDA device ([`Gpu`], [`devices`]), allocating GPU memory
//! ([`GpuBuffer`]), exporting it as a dma-buf ([`DmaBufExport`], perftest's way), and the
//! seam's [`bypass_seam::PeerMemory`] over it ([`CudaPeer`]) through which the sim reaches
//! it, and its registration ([`register`], [`GpuPool`]: one allocation, one MR, leases). Must not touch: the driver, the sim or the verbs crate's internals; it only uses
//! their public API (the seam types, and `Pd::register_dmabuf` in `mr.rs`).
//!
//! cudarc with `dynamic-loading` binds libcuda at run time, so this crate builds and its
//! tests run on machines with no CUDA at all; every entry checks that the library and each
//! function it calls exist before calling it (cudarc panics otherwise), and reports a typed
//! [`GpuError`] instead: [`GpuError::NoCudaLibrary`] without libcuda,
//! `CUDA_ERROR_NO_DEVICE` from `cuInit` without a GPU. Bindings stay at CUDA 12.8
//! (`cuda-12080`): newer bindings would bind symbols older drivers lack.
//!
//! Sources: CUDA Driver API reference; perftest `src/cuda_memory.c`; cudarc
//! `src/driver/sys/mod.rs` (the loader).

#![deny(unsafe_op_in_unsafe_fn)]

mod buffer;
mod driver;
mod error;
mod mr;

pub use buffer::{CudaPeer, DmaBufExport, GPU_ALLOC_ALIGN, GpuBuffer};
pub use driver::{
    DeviceInfo, Gpu, PCIE_MAPPING_MIN_DRIVER, START_SYMBOLS, SYMBOLS, devices, normalize_bdf,
};
pub use error::{CUDA_ERROR_NO_DEVICE, GpuError, cuda_name};
pub use mr::{GpuMr, GpuMrError, GpuPool, register, register_export};
