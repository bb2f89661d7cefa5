//! # bypass-standin-cuda-host: a stand-in `libcuda.so.1` whose GPUs are host memory
//!
//! The gpu crate's paths past `cuInit` (allocation, copies, the dma-buf export, the sim
//! reaching CUDA memory through `CudaPeer`, `bypass gpu check`) cannot run on a machine
//! without a GPU. This library stands in for the driver there: `BYPASS_CUDA_HOST_DEVICES`
//! (1 or 2, default 1) devices whose "device memory" is host memory. Every copy is checked
//! against the live allocations, as the real driver checks its virtual addresses, so an
//! address the gpu crate gets wrong fails with `CUDA_ERROR_INVALID_VALUE` instead of
//! passing silently; and `cuMemAlloc` returns pointers 256 bytes past a host page (the
//! driver's documented minimum alignment), so the export's offset arithmetic is exercised.
//!
//! Owns: exactly the functions the gpu crate calls (`gpu/src/driver.rs`: `START_SYMBOLS`,
//! `SYMBOLS`), with the driver API's C signatures. Must not: stand in for anything else
//! (a missing symbol is the gpu crate's `MissingSymbol` error, which is right), or claim to
//! be NVIDIA's: the device name says what it is. `cuMemGetHandleForAddressRange` returns a
//! memfd (not a dma-buf: the sim reaches the memory through the peer and never reads it).
//! Follows the CUDA Driver API reference (Initialization, Device, Primary Context, Memory
//! Management) and `cuda.h`'s `CUresult` and attribute values.

#![allow(non_snake_case)] // the driver API's exported names

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_INVALID_VALUE: c_int = 1;
const CUDA_ERROR_OUT_OF_MEMORY: c_int = 2;
const CUDA_ERROR_NOT_INITIALIZED: c_int = 3;
const CUDA_ERROR_INVALID_DEVICE: c_int = 101;
const CUDA_ERROR_INVALID_CONTEXT: c_int = 201;
/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
const ATTR_DMA_BUF_SUPPORTED: c_int = 124;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
const HANDLE_DMA_BUF_FD: c_int = 1;
/// Host page.
const PAGE: usize = 4096;
/// How far past a page each allocation starts.
const SKEW: usize = 256;

static INIT: AtomicBool = AtomicBool::new(false);

/// Live allocations: device pointer → (bytes, device, the `malloc`ed base).
static ALLOCS: Mutex<BTreeMap<u64, (usize, c_int, usize)>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// The current context: 0 none, else device + 1.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

fn devices() -> c_int {
    match std::env::var("BYPASS_CUDA_HOST_DEVICES").as_deref() {
        Ok("2") => 2,
        _ => 1,
    }
}

fn ready() -> Result<(), c_int> {
    if INIT.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_INITIALIZED)
    }
}

fn current_device() -> Result<c_int, c_int> {
    ready()?;
    match CURRENT.with(Cell::get) {
        0 => Err(CUDA_ERROR_INVALID_CONTEXT),
        n => Ok(n as c_int - 1),
    }
}

/// `Ok` when `[ptr, + len)` lies within one live allocation.
fn inside(ptr: u64, len: usize) -> Result<(), c_int> {
    let map = ALLOCS.lock().map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    match map.range(..=ptr).next_back() {
        Some((&base, &(size, _, _))) if ptr + len as u64 <= base + size as u64 => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn code(r: Result<(), c_int>) -> c_int {
    r.err().unwrap_or(CUDA_SUCCESS)
}

/// Writes `v` to `out` unless it is NULL.
///
/// # Safety
/// `out` is NULL or writable for a `T`.
unsafe fn put<T>(out: *mut T, v: T) -> Result<(), c_int> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, writable by the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}

/// Copies `text` and a NUL into `buf` of `len` bytes.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
unsafe fn put_text(buf: *mut c_char, len: c_int, text: &str) -> Result<(), c_int> {
    let len = usize::try_from(len).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    if buf.is_null() || len <= text.len() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `buf` holds `len` > text.len() bytes; the ranges cannot overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// `cuDriverGetVersion`: CUDA 12.8.
///
/// # Safety
/// `v` is NULL or points to a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    code(unsafe { put(v, 12080) })
}

/// `cuInit`: succeeds.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> c_int {
    INIT.store(true, Ordering::Release);
    CUDA_SUCCESS
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// `n` is NULL or points to a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    code(ready().and_then(|()| unsafe { put(n, devices()) }))
}

/// `cuDeviceGet`: device handle = ordinal.
///
/// # Safety
/// `dev` is NULL or points to a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> c_int {
    let r = ready().and_then(|()| {
        if (0..devices()).contains(&ordinal) {
            // SAFETY: the caller's contract.
            unsafe { put(dev, ordinal) }
        } else {
            Err(CUDA_ERROR_INVALID_DEVICE)
        }
    });
    code(r)
}

fn valid(dev: c_int) -> Result<(), c_int> {
    ready()?;
    if (0..devices()).contains(&dev) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_DEVICE)
    }
}

/// `cuDeviceGetName`.
///
/// # Safety
/// `name` is NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> c_int {
    // SAFETY: the caller's contract.
    code(
        valid(dev)
            .and_then(|()| unsafe { put_text(name, len, "bypass host-memory CUDA stand-in") }),
    )
}

/// `cuDeviceGetPCIBusId`: `0000:0N:00.0` in the driver's upper-case form.
///
/// # Safety
/// `id` is NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(id: *mut c_char, len: c_int, dev: c_int) -> c_int {
    let text = format!("0000:{:02X}:00.0", 0xC1 + dev);
    // SAFETY: the caller's contract.
    code(valid(dev).and_then(|()| unsafe { put_text(id, len, &text) }))
}

/// `cuDeviceGetAttribute`: dma-buf supported; every other attribute 0.
///
/// # Safety
/// `v` is NULL or points to a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(v: *mut c_int, attr: c_int, dev: c_int) -> c_int {
    let value = c_int::from(attr == ATTR_DMA_BUF_SUPPORTED);
    // SAFETY: the caller's contract.
    code(valid(dev).and_then(|()| unsafe { put(v, value) }))
}

/// `cuDevicePrimaryCtxRetain`: the context handle is device + 1.
///
/// # Safety
/// `ctx` is NULL or points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> c_int {
    // SAFETY: the caller's contract.
    code(valid(dev).and_then(|()| unsafe { put(ctx, (dev as usize + 1) as *mut c_void) }))
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> c_int {
    code(valid(dev))
}

/// `cuCtxSetCurrent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> c_int {
    let n = ctx as usize;
    let r = ready().and_then(|()| {
        if n == 0 || valid(n as c_int - 1).is_ok() {
            CURRENT.with(|c| c.set(n));
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_CONTEXT)
        }
    });
    code(r)
}

/// `cuCtxSynchronize`: copies are synchronous here.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> c_int {
    code(current_device().map(|_| ()))
}

/// `cuMemAlloc_v2`: host memory, 256 bytes past a page.
///
/// # Safety
/// `dptr` is NULL or points to a writable u64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut c_ulonglong, size: usize) -> c_int {
    let r = current_device().and_then(|dev| {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // The device pointer is SKEW bytes past the first page boundary in the block, and an
        // export covers whole host pages around the allocation: room for a page before that
        // boundary (calloc's block need not be aligned), the skew, and the last page's rest.
        let total = size
            .checked_add(2 * PAGE + SKEW)
            .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        // SAFETY: a plain allocation; freed in cuMemFree_v2.
        let base = unsafe { libc::calloc(1, total) } as usize;
        if base == 0 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let ptr = (base.next_multiple_of(PAGE) + SKEW) as u64;
        if let Ok(mut m) = ALLOCS.lock() {
            m.insert(ptr, (size, dev, base));
        }
        // SAFETY: the caller's contract.
        unsafe { put(dptr, ptr) }
    });
    code(r)
}

/// `cuMemFree_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(dptr: c_ulonglong) -> c_int {
    let r = current_device().and_then(|_| {
        let gone = ALLOCS.lock().ok().and_then(|mut m| m.remove(&dptr));
        let (_, _, base) = gone.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: `base` came from calloc in cuMemAlloc_v2 and is freed once.
        unsafe { libc::free(base as *mut c_void) };
        Ok(())
    });
    code(r)
}

/// Copies `n` bytes after checking the device side(s).
///
/// # Safety
/// Host pointers are valid for `n` bytes; device ones were checked by the callers.
unsafe fn copy(dst: u64, src: u64, n: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
}

/// `cuMemcpyHtoD_v2`.
///
/// # Safety
/// `src` is readable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: c_ulonglong, src: *const c_void, n: usize) -> c_int {
    let r = current_device().and_then(|_| inside(dst, n)).map(|()| {
        // SAFETY: `dst` lies in a live allocation; `src` is the caller's.
        unsafe { copy(dst, src as u64, n) }
    });
    code(r)
}

/// `cuMemcpyDtoH_v2`.
///
/// # Safety
/// `dst` is writable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: c_ulonglong, n: usize) -> c_int {
    let r = current_device().and_then(|_| inside(src, n)).map(|()| {
        // SAFETY: `src` lies in a live allocation; `dst` is the caller's.
        unsafe { copy(dst as u64, src, n) }
    });
    code(r)
}

/// `cuMemcpyDtoD_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoD_v2(dst: c_ulonglong, src: c_ulonglong, n: usize) -> c_int {
    let r = current_device()
        .and_then(|_| inside(dst, n))
        .and_then(|()| inside(src, n))
        .map(|()| {
            // SAFETY: both ranges lie in live allocations.
            unsafe { copy(dst, src, n) }
        });
    code(r)
}

/// `cuMemsetD8_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2(dst: c_ulonglong, v: c_uchar, n: usize) -> c_int {
    let r = current_device().and_then(|_| inside(dst, n)).map(|()| {
        // SAFETY: the range lies in a live allocation.
        unsafe { std::ptr::write_bytes(dst as *mut u8, v, n) }
    });
    code(r)
}

/// `cuMemGetHandleForAddressRange`: a memfd of `size` bytes for a range aligned to the host
/// page (the driver's rule) that starts at the page of an allocation.
///
/// # Safety
/// `handle` is NULL or points to a writable int (the dma-buf fd handle type).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetHandleForAddressRange(
    handle: *mut c_void,
    dptr: c_ulonglong,
    size: usize,
    kind: c_int,
    _flags: c_ulonglong,
) -> c_int {
    let r = current_device().and_then(|_| {
        let aligned = dptr.is_multiple_of(PAGE as u64) && size.is_multiple_of(PAGE) && size > 0;
        if kind != HANDLE_DMA_BUF_FD || !aligned {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // The range starts at the page of an allocation (which begins SKEW bytes into it).
        inside(dptr + SKEW as u64, 1)?;
        // SAFETY: plain syscalls on a fresh memfd.
        let fd = unsafe { libc::memfd_create(c"bypass-cuda-host".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: `fd` is the memfd just made.
        if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            // SAFETY: closing the memfd just made.
            unsafe { libc::close(fd) };
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: the caller's contract (an int for the dma-buf fd handle type).
        unsafe { put(handle.cast::<c_int>(), fd) }
    });
    code(r)
}
