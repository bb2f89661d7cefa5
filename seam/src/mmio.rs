//! BAR0 MMIO as the driver issues it.
//!
//! Owns: the [`Mmio`] trait and its value contract. Must not: interpret registers (the driver
//! and the device model do).
//!
//! Values are what a `write_volatile`/`read_volatile` of that width stores/loads on this CPU:
//! the driver passes `x.to_be()` for the big-endian device registers and reads with
//! `u32::from_be`. MMIO never fails at run time on real hardware (a dead device reads all
//! ones), so the methods return plain values; an access outside BAR0 or one the device refuses
//! is counted ([`Mmio::mmio_errors`]) and traced, never a panic. Sources: rdma-core
//! `util/mmio.h` (`mmio_write64_be`, `mmio_memcpy_x64`), `providers/mlx5/mlx5_vfio.c`.

/// BAR0 of one device: 32-bit reads, 32- and 64-bit writes, 64-byte BlueFlame chunks.
///
/// The writes are `unsafe`: a write to BAR0 can point the device at any IOVA (the command
/// queue's address, a doorbell of a WQE the caller did not build) and so make it read or write
/// any memory mapped for it, the driver's own rings included.
///
/// # Safety (of every write method)
/// The caller owns the device's state machine: it writes only registers whose effect it has
/// set up (a doorbell for a ring it built and keeps mapped, the command queue's address of a
/// queue it owns), so the device can only reach memory the caller mapped for that purpose.
/// The driver is the one such caller; an application never needs these methods.
///
/// Safe code holding a backend cannot ring a doorbell:
/// ```compile_fail,E0133
/// fn ring(bar: &dyn bypass_seam::Mmio) {
///     bar.write64(0x800, 0);
/// }
/// ```
pub trait Mmio: Send + Sync {
    /// BAR0's length in bytes. Every MMIO offset must be below it.
    fn bar0_len(&self) -> u64;

    /// A 32-bit MMIO read at BAR0 offset `off` (4-byte aligned): the value a
    /// `read_volatile::<u32>` of the mapped register returns (bus bytes in memory order; the
    /// caller converts with `u32::from_be`). A refused read returns `u32::MAX`, as a PCI
    /// master abort does, and is counted.
    fn read32(&self, off: u64) -> u32;

    /// A 32-bit MMIO write: `v` is what a `write_volatile::<u32>` stores (pass `x.to_be()`
    /// for big-endian registers). Refused writes are counted, never a panic.
    ///
    /// # Safety
    /// See the trait's contract: the write's effect on the device is the caller's to own.
    unsafe fn write32(&self, off: u64, v: u32);

    /// A 64-bit MMIO write, one store of exactly 8 bytes (doorbells: pass `x.to_be()`).
    ///
    /// # Safety
    /// See the trait's contract: the write's effect on the device is the caller's to own.
    unsafe fn write64(&self, off: u64, v: u64);

    /// One 64-byte BlueFlame chunk at `off` (64-byte aligned): eight ordered 64-bit stores of
    /// `chunk[0..8]` in order, each as a `write_volatile::<u64>` would store it (rdma-core
    /// `mmio_memcpy_x64`; never a byte copy). The caller fences before and after.
    ///
    /// # Safety
    /// See the trait's contract: the write's effect on the device is the caller's to own.
    unsafe fn write_bf(&self, off: u64, chunk: &[u64; 8]);

    /// MMIO accesses refused so far (outside BAR0, wrong width, unallocated UAR page).
    fn mmio_errors(&self) -> u64 {
        0
    }
}
