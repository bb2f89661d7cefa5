//! The gpu crate's errors: every way opening a GPU, allocating, exporting or copying fails.
//!
//! Owns: [`GpuError`] and [`cuda_name`] (a `CUresult`'s name, taken from cudarc's enum so
//! that naming an error never calls into the driver). Must not: call CUDA (an error is
//! described from what the caller already has), or format a cudarc `DriverError` with its
//! `Display`/`Debug` (those call `cuGetErrorString`, a driver symbol that a broken or
//! stand-in library may lack, and cudarc panics on a missing symbol).
//!
//! Each message names the operation, the cause and the fix. The CUDA error names and codes
//! are the driver API's (`CUresult` in `cuda.h`, "Error Handling" in the CUDA Driver API
//! reference); `CUDA_ERROR_NO_DEVICE` (100) is what `cuInit` returns on a machine whose
//! driver is installed but that has no usable GPU.
//!
//! Sources: CUDA Driver API reference (`cuInit`, `cuDriverGetVersion`,
//! `cuMemGetHandleForAddressRange`); cudarc `src/driver/sys/mod.rs` (`is_culib_present`,
//! `culib`, `load`), `src/driver/result.rs` (`DriverError`).

use cudarc::driver::sys::CUresult;

/// `CUDA_ERROR_NO_DEVICE`: the driver is there, no GPU is.
pub const CUDA_ERROR_NO_DEVICE: u32 = 100;

/// The name of a `CUresult` (`CUDA_ERROR_NO_DEVICE`), from cudarc's enum: no driver call.
pub fn cuda_name(code: CUresult) -> String {
    format!("{code:?}")
}

/// Why a GPU operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// No CUDA driver library (`libcuda.so.1`) could be loaded.
    #[error(
        "opening CUDA: no CUDA driver library could be loaded (libcuda.so.1 and {} other names tried on the loader's path): install the NVIDIA driver (it ships libcuda.so.1), or point LD_LIBRARY_PATH at the folder that holds it",
        tried.len().saturating_sub(1)
    )]
    NoCudaLibrary {
        /// The names tried, in the loader's order.
        tried: Vec<String>,
    },
    /// The library loaded but lacks a function this crate calls.
    #[error(
        "opening CUDA: the CUDA driver library has no {symbol}: it is older than CUDA 12.8 (this crate binds 12.8's API) or not NVIDIA's; install an NVIDIA driver for CUDA 12.8 or later"
    )]
    MissingSymbol {
        /// The function's exported name.
        symbol: &'static str,
    },
    /// The driver is older than the API this crate uses.
    #[error(
        "opening CUDA: the driver supports CUDA {major}.{minor}, this crate needs 12.8 (cuMemGetHandleForAddressRange's PCIe mapping flag): upgrade the NVIDIA driver",
        major = version / 1000,
        minor = (version % 1000) / 10
    )]
    DriverTooOld {
        /// `cuDriverGetVersion`'s value (1000 * major + 10 * minor).
        version: i32,
    },
    /// A CUDA call returned an error.
    #[error("{call} failed with {name} ({code}){}", cuda_fix(*code))]
    Cuda {
        /// The driver function (and what it was doing).
        call: &'static str,
        /// The `CUresult` value.
        code: u32,
        /// The `CUresult` name.
        name: String,
    },
    /// The ordinal names no device.
    #[error(
        "opening CUDA device {ordinal}: the driver reports {count} device(s): pick an ordinal below {count} (`bypass gpu info` lists them)"
    )]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// The device cannot export dma-bufs.
    #[error(
        "exporting GPU memory of device {ordinal} as a dma-buf: the device reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0: use the open NVIDIA kernel modules (nvidia-open) on Linux 5.12 or later"
    )]
    DmaBufUnsupported {
        /// The device.
        ordinal: usize,
    },
    /// An access outside a buffer.
    #[error(
        "{op} of {len} bytes at offset {offset:#x} of a {size}-byte GPU buffer: the range is outside the buffer; keep offset + len within it"
    )]
    OutOfRange {
        /// `copy_from_host`, `copy_to_host`, `fill` or `memcpy_dtod`.
        op: &'static str,
        /// Offset of the access.
        offset: usize,
        /// Bytes.
        len: usize,
        /// The buffer's bytes.
        size: usize,
    },
    /// A size of zero, or one that overflows when rounded up to the allocation granularity.
    #[error(
        "{op} of {len} bytes: GPU memory is allocated in 64 KiB units and this size is zero or overflows when rounded up; ask for 1 byte to a few GiB"
    )]
    BadSize {
        /// `alloc` or `GpuPool::new`.
        op: &'static str,
        /// Bytes asked for (saturated when the product overflowed).
        len: usize,
    },
    /// Two buffers from different devices in one device-to-device copy.
    #[error(
        "memcpy_dtod between CUDA devices {src} and {dst}: cuMemcpyDtoD copies within one context; copy through the host or use buffers of one device"
    )]
    CrossDevice {
        /// The source's device.
        src: usize,
        /// The destination's device.
        dst: usize,
    },
}

/// The fix to print after a CUDA error, for the codes a user can act on.
fn cuda_fix(code: u32) -> &'static str {
    match code {
        CUDA_ERROR_NO_DEVICE => {
            ": no CUDA-capable GPU is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES and /dev/nvidia*"
        }
        2 => ": the GPU is out of memory: free GPU memory or ask for less",
        3 => ": the driver is not initialised (cuInit failed before): check the NVIDIA driver",
        35 => ": the NVIDIA kernel module is older than libcuda: reboot or reinstall the driver",
        101 => ": no such device: `bypass gpu info` lists the ordinals",
        801 => ": not supported here: the dma-buf export needs the open NVIDIA kernel modules",
        _ => "",
    }
}

impl GpuError {
    /// The error of a failed CUDA call.
    pub fn cuda(call: &'static str, code: CUresult) -> Self {
        Self::Cuda {
            call,
            code: code as u32,
            name: cuda_name(code),
        }
    }

    /// True when this machine has no usable GPU: no driver library, or a driver that finds
    /// no device. `gpu-check.sh` and the tests skip (exit 77) on these, and fail on the rest.
    pub fn is_no_gpu(&self) -> bool {
        match self {
            Self::NoCudaLibrary { .. } => true,
            Self::Cuda { code, .. } => *code == CUDA_ERROR_NO_DEVICE,
            Self::NoSuchDevice { count, .. } => *count == 0,
            _ => false,
        }
    }
}

/// `Ok` for `CUDA_SUCCESS`, else [`GpuError::Cuda`] naming `call`.
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<(), GpuError> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::cuda(call, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_is_named_and_counts_as_no_gpu() {
        let e = GpuError::cuda("cuInit", CUresult::CUDA_ERROR_NO_DEVICE);
        assert_eq!(
            e,
            GpuError::Cuda {
                call: "cuInit",
                code: 100,
                name: "CUDA_ERROR_NO_DEVICE".into()
            }
        );
        assert!(e.is_no_gpu());
        let text = e.to_string();
        assert!(
            text.starts_with("cuInit failed with CUDA_ERROR_NO_DEVICE (100)"),
            "{text}"
        );
        assert!(text.contains("nvidia-smi"), "{text}");
    }

    #[test]
    fn other_errors_are_not_no_gpu() {
        let oom = GpuError::cuda("cuMemAlloc_v2", CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert!(!oom.is_no_gpu());
        assert!(oom.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY (2)"));
        assert!(
            GpuError::NoCudaLibrary {
                tried: vec!["libcuda.so.1".into()]
            }
            .is_no_gpu()
        );
        assert!(!GpuError::MissingSymbol { symbol: "cuInit" }.is_no_gpu());
    }

    #[test]
    fn driver_version_prints_as_major_minor() {
        let e = GpuError::DriverTooOld { version: 12020 };
        assert!(e.to_string().contains("CUDA 12.2"), "{e}");
    }
}
