//! # bypass-standin-cuda: a stand-in `libcuda.so.1` for a machine with no GPU
//!
//! The gpu crate loads the CUDA driver at run time (cudarc's `dynamic-loading`). On a
//! machine without NVIDIA's driver the library is simply absent; this stand-in is the other
//! case a test needs: a driver that is installed but finds no GPU, where `cuInit` returns
//! `CUDA_ERROR_NO_DEVICE` (100), as NVIDIA's does with no device node or with
//! `CUDA_VISIBLE_DEVICES` empty.
//!
//! Owns: the two functions the gpu crate calls before `cuInit` has succeeded
//! (`cuDriverGetVersion`, then `cuInit`; see `gpu/src/driver.rs`, `START_SYMBOLS`), with the
//! driver API's C signatures. Must not: export anything else (the gpu crate checks every
//! other symbol only after `cuInit` succeeds, which it never does here), keep state, or
//! print. Follows the CUDA Driver API reference ("Initialization", "Version Management")
//! and `cuda.h`'s `CUresult` values.

#![allow(non_snake_case)] // the driver API's exported names

use std::ffi::{c_int, c_uint};

/// `CUDA_SUCCESS`.
const CUDA_SUCCESS: c_int = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
const CUDA_ERROR_INVALID_VALUE: c_int = 1;
/// `CUDA_ERROR_NO_DEVICE`.
const CUDA_ERROR_NO_DEVICE: c_int = 100;
/// The version reported: CUDA 12.8 (`1000 * 12 + 10 * 8`), what the gpu crate binds.
const DRIVER_VERSION: c_int = 12080;

/// `CUresult cuDriverGetVersion(int *driverVersion)`: reports CUDA 12.8.
///
/// # Safety
/// `version` is NULL or points to a writable `int` (the driver API's contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    if version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-NULL, and the caller passes a writable int.
    unsafe { version.write(DRIVER_VERSION) };
    CUDA_SUCCESS
}

/// `CUresult cuInit(unsigned int flags)`: there is no GPU.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> c_int {
    CUDA_ERROR_NO_DEVICE
}
