//! Loading the CUDA driver without panicking, and opening one GPU's primary context.
//!
//! Owns: [`Gpu`] (an open device: its retained primary context, made current on each
//! calling thread before any call), [`DeviceInfo`] and [`devices`] (what `bypass gpu info`
//! lists). Must not: allocate memory (`buffer.rs` does) or use cudarc's safe layer, whose
//! paths call driver functions this module has not checked for.
//!
//! cudarc's `dynamic-loading` binds each function on first use and panics if the library or
//! the symbol is absent (`sys::culib`, `sys::load`). So every entry here first asks
//! `sys::is_culib_present()` (which only tries to `dlopen` the candidates) and then looks up
//! every symbol it will call in `sys::culib()` before calling any: the ones needed to start
//! (`cuDriverGetVersion`, `cuInit`) first, the rest once `cuInit` succeeded, so a driver that
//! finds no GPU is reported as `CUDA_ERROR_NO_DEVICE` and not as a missing symbol.
//!
//! Sources: CUDA Driver API reference ("Initialization", "Version Management", "Device
//! Management", "Primary Context Management": `cuDevicePrimaryCtxRetain`/`Release`,
//! `cuCtxSetCurrent`); perftest `src/cuda_memory.c` (`init_gpu`, `cuda_memory_init`: the
//! order of calls and the dma-buf attribute check); cudarc `src/driver/sys/mod.rs`.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute};

use crate::error::{GpuError, check};

/// Functions called before `cuInit` has succeeded (what a driver with no GPU must export).
pub const START_SYMBOLS: [&str; 2] = ["cuDriverGetVersion", "cuInit"];

/// Every other driver function this crate calls (exported names, as cudarc binds them).
pub const SYMBOLS: [&str; 16] = [
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2",
    "cuMemsetD8_v2",
    "cuMemGetHandleForAddressRange",
];

/// The driver version (`1000 * major + 10 * minor`) from which
/// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` exists.
pub const PCIE_MAPPING_MIN_DRIVER: i32 = 12080;

/// What the driver says about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// CUDA's device number (not PCI order).
    pub ordinal: usize,
    /// `cuDeviceGetName`.
    pub name: String,
    /// `cuDeviceGetPCIBusId`, as `dddd:bb:dd.f` in lower case (sysfs's spelling).
    pub pci_bus_id: String,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dma_buf: bool,
}

/// Loads the library, checks the symbols, calls `cuInit`, and returns the driver version.
fn start() -> Result<i32, GpuError> {
    // SAFETY: `is_culib_present` only tries `dlopen` on cudarc's candidate names and closes
    // what it opened; loading libcuda runs no code that could break this process's state.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoCudaLibrary { tried: tried() });
    }
    require(&START_SYMBOLS)?;
    let mut version: c_int = 0;
    // SAFETY: the symbol exists (checked above); the out-pointer is a live c_int.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
    // SAFETY: the symbol exists; cuInit takes flags only (0 is the one defined value).
    check("cuInit", unsafe { sys::cuInit(0) })?;
    require(&SYMBOLS)?;
    Ok(version)
}

/// cudarc's candidate names for libcuda, each once, in its order.
fn tried() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates("cuda") {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// Fails with [`GpuError::MissingSymbol`] for the first name the loaded library lacks.
fn require(names: &[&'static str]) -> Result<(), GpuError> {
    // SAFETY: called only after `is_culib_present()` returned true, so `culib()` finds a
    // library among the same candidates and does not reach its panic.
    let lib = unsafe { sys::culib() };
    for &symbol in names {
        // SAFETY: the symbol is only looked up, never called through this type.
        let found = unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) };
        if found.is_err() {
            return Err(GpuError::MissingSymbol { symbol });
        }
    }
    Ok(())
}

fn device_count() -> Result<usize, GpuError> {
    let mut n: c_int = 0;
    // SAFETY: `start` checked the symbol and initialised the driver; `n` is a live c_int.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

fn device_handle(ordinal: usize, count: usize) -> Result<CUdevice, GpuError> {
    let ord = c_int::try_from(ordinal)
        .ok()
        .filter(|_| ordinal < count)
        .ok_or(GpuError::NoSuchDevice { ordinal, count })?;
    let mut dev: CUdevice = 0;
    // SAFETY: driver initialised, symbol checked, ordinal below the device count.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ord) })?;
    Ok(dev)
}

fn attribute(dev: CUdevice, attr: CUdevice_attribute) -> Result<i32, GpuError> {
    let mut v: c_int = 0;
    // SAFETY: `dev` came from cuDeviceGet; `v` is a live c_int.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attr, dev)
    })?;
    Ok(v)
}

/// A C string the driver wrote into `buf`, up to its first NUL.
fn c_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `cuDeviceGetPCIBusId`'s `domain:bus:device.function` (hex, upper case) as sysfs spells
/// it: `dddd:bb:dd.f`, lower case. Text that does not parse is returned lower-cased.
pub fn normalize_bdf(text: &str) -> String {
    let parse = || -> Option<String> {
        let (dom, rest) = text.trim().split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (dev, func) = rest.split_once('.')?;
        let h = |s: &str| u32::from_str_radix(s, 16).ok();
        Some(format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            h(dom)?,
            h(bus)?,
            h(dev)?,
            h(func)?
        ))
    };
    parse().unwrap_or_else(|| text.trim().to_ascii_lowercase())
}

fn describe(ordinal: usize, dev: CUdevice) -> Result<DeviceInfo, GpuError> {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is live and its length is passed; the driver NUL-terminates.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr().cast::<c_char>(), name.len() as c_int, dev)
    })?;
    let mut bdf = [0u8; 64];
    // SAFETY: as above; 64 bytes exceed the 13 the driver documents as enough.
    check("cuDeviceGetPCIBusId", unsafe {
        sys::cuDeviceGetPCIBusId(bdf.as_mut_ptr().cast::<c_char>(), bdf.len() as c_int, dev)
    })?;
    let dma_buf = attribute(
        dev,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
    )? != 0;
    Ok(DeviceInfo {
        ordinal,
        name: c_text(&name),
        pci_bus_id: normalize_bdf(&c_text(&bdf)),
        dma_buf,
    })
}

/// Every CUDA device, in CUDA's order, with the driver version.
///
/// Errors: [`GpuError::NoCudaLibrary`] without libcuda, [`GpuError::Cuda`] with
/// `CUDA_ERROR_NO_DEVICE` when the driver finds no GPU, and any failed query.
pub fn devices() -> Result<(i32, Vec<DeviceInfo>), GpuError> {
    let version = start()?;
    let count = device_count()?;
    let list = (0..count)
        .map(|i| describe(i, device_handle(i, count)?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((version, list))
}

/// A retained primary context; released when the last holder drops it.
#[derive(Debug)]
pub(crate) struct Context {
    dev: CUdevice,
    ctx: sys::CUcontext,
    pub(crate) info: DeviceInfo,
    pub(crate) driver_version: i32,
}

// SAFETY: a CUDA context handle may be made current on, and used from, any thread (the
// driver API's contexts are not thread-affine; each call here first makes it current on
// the calling thread), and the struct is never mutated after it is built.
unsafe impl Send for Context {}
// SAFETY: as above: shared use only reads the handle and calls thread-safe driver functions.
unsafe impl Sync for Context {}

impl Context {
    /// Makes the context current on the calling thread (`cuCtxSetCurrent`).
    pub(crate) fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: `ctx` was retained by `Gpu::open` and is released only in Drop.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `dev` retained its primary context once in `Gpu::open`; this is the one
        // matching release. A failure leaves nothing to undo.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
    }
}

/// One open CUDA device: cheap to clone, shared by the buffers allocated on it.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub(crate) ctx: Arc<Context>,
}

impl Gpu {
    /// Opens device `ordinal`: loads the driver, `cuInit`, retains the primary context.
    ///
    /// Errors: [`GpuError::NoCudaLibrary`], [`GpuError::MissingSymbol`],
    /// [`GpuError::Cuda`] (`CUDA_ERROR_NO_DEVICE` from `cuInit` on a machine with no GPU),
    /// [`GpuError::NoSuchDevice`]. Never panics.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        let driver_version = start()?;
        let count = device_count()?;
        let dev = device_handle(ordinal, count)?;
        let info = describe(ordinal, dev)?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `dev` is valid; `ctx` is a live out-pointer.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let ctx = Context {
            dev,
            ctx,
            info,
            driver_version,
        };
        ctx.bind()?;
        Ok(Gpu { ctx: Arc::new(ctx) })
    }

    /// The device's name, bus id and dma-buf support.
    pub fn info(&self) -> &DeviceInfo {
        &self.ctx.info
    }

    /// `cuDriverGetVersion` (`1000 * major + 10 * minor`).
    pub fn driver_version(&self) -> i32 {
        self.ctx.driver_version
    }

    /// Waits for the device's work (`cuCtxSynchronize`), after making it current here.
    ///
    /// Errors: [`GpuError::Cuda`], with the error of an earlier asynchronous failure too.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.ctx.bind()?;
        // SAFETY: the context is current on this thread.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_print_as_sysfs_does() {
        assert_eq!(normalize_bdf("0000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(normalize_bdf("00000000:C1:00.0"), "0000:c1:00.0");
        assert_eq!(normalize_bdf("1:2:3.4"), "0001:02:03.4");
        assert_eq!(normalize_bdf("odd"), "odd");
    }

    #[test]
    fn driver_text_stops_at_nul() {
        assert_eq!(c_text(b"NVIDIA H200\0junk"), "NVIDIA H200");
        assert_eq!(c_text(b"no-nul"), "no-nul");
    }
}
