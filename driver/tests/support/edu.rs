//! A driver for QEMU's `edu` educational PCI device, written against the [`Backend`] trait:
//! the proof that the VFIO backend moves registers, DMA and interrupts on a real kernel. Test
//! support of `vfio_edu.rs`, not part of the driver's API.
//!
//! Owns: edu's register map and its operations (identification, liveness, factorial, DMA
//! between host memory and the device's 4 KiB buffer, interrupt raise/acknowledge). Must
//! not: use anything but the `Backend` trait (it runs over any backend, like the mlx5 code).
//!
//! Register map: QEMU `hw/misc/edu.c` (`edu_mmio_read`, `edu_mmio_write`, `edu_dma_timer`)
//! and `docs/specs/edu.rst`. All registers are little-endian; the ones below 0x80 are 32-bit,
//! the DMA ones 64-bit (a 32-bit access to them works too). `edu` masks DMA addresses to 28
//! bits (`dma_mask`), so IOVAs given to it must be below 256 MiB. QEMU aborts on a DMA whose
//! device-side range leaves the 4 KiB buffer at 0x40000 (`edu_check_range`): [`Edu`] refuses
//! those before they reach the device.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_driver::backend::Backend;

/// PCI vendor ID of `edu`.
pub const VENDOR_ID: u32 = 0x1234;
/// PCI device ID of `edu`.
pub const DEVICE_ID: u32 = 0x11e8;

/// Identification: `0xRRrr00ed` (major, minor, 0, 0xed).
pub const REG_ID: u64 = 0x00;
/// Liveness check: reads back the bitwise inverse of what was written.
pub const REG_LIVENESS: u64 = 0x04;
/// Factorial: write n, read n! once `STATUS_COMPUTING` clears.
pub const REG_FACTORIAL: u64 = 0x08;
/// Status: bit 0 computing, bit 7 raise an interrupt when the factorial is done.
pub const REG_STATUS: u64 = 0x20;
/// Interrupt status (the OR of raised values).
pub const REG_IRQ_STATUS: u64 = 0x24;
/// Raise an interrupt with this value.
pub const REG_IRQ_RAISE: u64 = 0x60;
/// Acknowledge (clear) these interrupt status bits.
pub const REG_IRQ_ACK: u64 = 0x64;
/// DMA source address.
pub const REG_DMA_SRC: u64 = 0x80;
/// DMA destination address.
pub const REG_DMA_DST: u64 = 0x88;
/// DMA byte count.
pub const REG_DMA_COUNT: u64 = 0x90;
/// DMA command: bit 0 start/busy, bit 1 direction (1: device buffer to host), bit 2
/// interrupt on completion.
pub const REG_DMA_CMD: u64 = 0x98;

/// Status bit: a factorial is being computed.
pub const STATUS_COMPUTING: u32 = 0x01;
/// Status bit: raise an interrupt when the factorial is done.
pub const STATUS_IRQ_FACT: u32 = 0x80;
/// DMA command bit: start (reads 1 while the transfer runs).
pub const DMA_START: u64 = 0x1;
/// DMA command bit: from the device buffer to host memory.
pub const DMA_TO_HOST: u64 = 0x2;
/// DMA command bit: raise interrupt `IRQ_DMA` when done.
pub const DMA_IRQ: u64 = 0x4;
/// Interrupt status value of a finished factorial.
pub const IRQ_FACTORIAL: u32 = 0x1;
/// Interrupt status value of a finished DMA.
pub const IRQ_DMA: u32 = 0x100;
/// The device's DMA buffer as the device addresses it.
pub const DMA_BUF_ADDR: u64 = 0x40000;
/// The device's DMA buffer size.
pub const DMA_BUF_LEN: u64 = 4096;
/// The device's DMA address mask (28 bits).
pub const DMA_MASK: u64 = (1 << 28) - 1;

/// What went wrong driving `edu`.
#[derive(Debug, thiserror::Error)]
pub enum EduError {
    /// The ID register does not read as an edu device.
    #[error(
        "{name}: the ID register reads {id:#010x}, not 0x????00ed: this is not QEMU's edu device (start QEMU with `-device edu`)"
    )]
    NotEdu {
        /// Backend name.
        name: String,
        /// What was read.
        id: u32,
    },
    /// An operation did not finish.
    #[error(
        "{name}: {what} did not finish within {waited:?} (register {reg:#x} reads {value:#x}): the device is hung or Bus Master is off"
    )]
    Timeout {
        /// Backend name.
        name: String,
        /// The operation.
        what: &'static str,
        /// How long.
        waited: Duration,
        /// Register polled.
        reg: u64,
        /// Its last value.
        value: u64,
    },
    /// A DMA request the device cannot carry out.
    #[error(
        "edu DMA of {len} bytes at device offset {dev_off:#x} / host IOVA {iova:#x} is out of range: the device buffer is 4096 bytes and edu reaches only IOVAs below 2^28"
    )]
    DmaRange {
        /// Device-buffer offset.
        dev_off: u64,
        /// Host IOVA.
        iova: u64,
        /// Bytes.
        len: u64,
    },
}

/// QEMU's `edu` device over any [`Backend`].
#[derive(Debug, Clone)]
pub struct Edu {
    backend: Arc<dyn Backend>,
}

impl Edu {
    /// Checks the ID register and wraps the backend.
    pub fn new(backend: Arc<dyn Backend>) -> Result<Self, EduError> {
        let id = backend.read32(REG_ID);
        if id & 0xffff != 0x00ed {
            return Err(EduError::NotEdu {
                name: backend.name(),
                id,
            });
        }
        Ok(Self { backend })
    }

    /// The ID register (`0x010000ed` for version 1.0).
    pub fn id(&self) -> u32 {
        self.backend.read32(REG_ID)
    }

    /// Writes `v` to the liveness register and returns what it reads back (`!v`).
    pub fn liveness(&self, v: u32) -> u32 {
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write32(REG_LIVENESS, v) };
        self.backend.read32(REG_LIVENESS)
    }

    fn wait<F: Fn() -> u64>(
        &self,
        what: &'static str,
        reg: u64,
        timeout: Duration,
        busy: F,
    ) -> Result<(), EduError> {
        let start = Instant::now();
        loop {
            let v = busy();
            if v == 0 {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(EduError::Timeout {
                    name: self.backend.name(),
                    what,
                    waited: start.elapsed(),
                    reg,
                    value: v,
                });
            }
            self.backend.progress();
            std::thread::yield_now();
        }
    }

    /// Computes `n!` on the device (32-bit, wrapping as the device does). With `irq`, the
    /// device raises [`IRQ_FACTORIAL`] when done.
    pub fn factorial(&self, n: u32, irq: bool, timeout: Duration) -> Result<u32, EduError> {
        self.wait("the previous factorial", REG_STATUS, timeout, || {
            u64::from(self.backend.read32(REG_STATUS) & STATUS_COMPUTING)
        })?;
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe {
            self.backend
                .write32(REG_STATUS, if irq { STATUS_IRQ_FACT } else { 0 })
        };
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write32(REG_FACTORIAL, n) };
        self.wait("the factorial", REG_STATUS, timeout, || {
            u64::from(self.backend.read32(REG_STATUS) & STATUS_COMPUTING)
        })?;
        Ok(self.backend.read32(REG_FACTORIAL))
    }

    /// Raises an interrupt with status bits `value`.
    pub fn raise_irq(&self, value: u32) {
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write32(REG_IRQ_RAISE, value) };
    }

    /// The interrupt status register.
    pub fn irq_status(&self) -> u32 {
        self.backend.read32(REG_IRQ_STATUS)
    }

    /// Clears interrupt status bits `value`.
    pub fn ack_irq(&self, value: u32) {
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write32(REG_IRQ_ACK, value) };
    }

    fn check(dev_off: u64, iova: u64, len: u64) -> Result<(), EduError> {
        let ok = len > 0
            && dev_off.checked_add(len).is_some_and(|e| e <= DMA_BUF_LEN)
            && iova.checked_add(len - 1).is_some_and(|e| e <= DMA_MASK);
        if ok {
            Ok(())
        } else {
            Err(EduError::DmaRange { dev_off, iova, len })
        }
    }

    fn dma(
        &self,
        src: u64,
        dst: u64,
        len: u64,
        cmd: u64,
        timeout: Duration,
    ) -> Result<(), EduError> {
        self.wait("the previous DMA", REG_DMA_CMD, timeout, || {
            u64::from(self.backend.read32(REG_DMA_CMD)) & DMA_START
        })?;
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write64(REG_DMA_SRC, src) };
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write64(REG_DMA_DST, dst) };
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write64(REG_DMA_COUNT, len) };
        // SAFETY: the edu device is this test's own; its registers name IOVAs this test mapped.
        unsafe { self.backend.write64(REG_DMA_CMD, cmd | DMA_START) };
        self.wait("the DMA", REG_DMA_CMD, timeout, || {
            u64::from(self.backend.read32(REG_DMA_CMD)) & DMA_START
        })
    }

    /// Copies `len` bytes from host IOVA `iova` into the device buffer at `dev_off`, and
    /// waits until the device reports the transfer finished. The device does not report
    /// IOMMU faults: a transfer from an unmapped IOVA also "finishes" (the IOMMU drops it).
    pub fn dma_to_device(
        &self,
        iova: u64,
        dev_off: u64,
        len: u64,
        irq: bool,
        timeout: Duration,
    ) -> Result<(), EduError> {
        Self::check(dev_off, iova, len)?;
        let cmd = if irq { DMA_IRQ } else { 0 };
        self.dma(iova, DMA_BUF_ADDR + dev_off, len, cmd, timeout)
    }

    /// Copies `len` bytes from the device buffer at `dev_off` to host IOVA `iova`.
    pub fn dma_to_host(
        &self,
        dev_off: u64,
        iova: u64,
        len: u64,
        irq: bool,
        timeout: Duration,
    ) -> Result<(), EduError> {
        Self::check(dev_off, iova, len)?;
        let cmd = DMA_TO_HOST | if irq { DMA_IRQ } else { 0 };
        self.dma(DMA_BUF_ADDR + dev_off, iova, len, cmd, timeout)
    }
}
