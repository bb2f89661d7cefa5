//! The seam between the driver and a device: BAR0 MMIO, DMA mapping, interrupts, progress.
//!
//! Owns: the [`Backend`] trait and its contract, and [`IovaRange`]. Must not: know any mlx5
//! format (that is `bypass-hw` and the rest of the driver) or keep driver state.
//!
//! Two implementations: [`sim::SimBackend`] (in-process `bypass-sim` devices, feature `sim`)
//! and [`vfio::VfioBackend`] (a PCI function bound to vfio-pci, on `vfio-ioctls`: BAR0
//! mmapped, `VFIO_IOMMU_MAP_DMA`, MSI-X or MSI eventfds). Every method is shaped so that the VFIO one is a thin wrapper over a
//! syscall or a volatile access, and no caller changes when it arrives:
//! - MMIO values are what a `write_volatile`/`read_volatile` of that width stores/loads on
//!   this CPU: the driver passes `x.to_be()` for the big-endian device registers and reads
//!   with `u32::from_be`. MMIO never fails at run time on real hardware (a dead device reads
//!   all ones), so the methods return plain values; an access outside BAR0 or one the device
//!   refuses is counted ([`Backend::mmio_errors`]) and traced, never a panic.
//! - DMA: the backend maps whole [`DmaRegion`]s at IOVAs the driver chose inside
//!   [`Backend::iova_ranges`] (the IOMMU's apertures, `VFIO_IOMMU_GET_INFO`), never IOVA = VA.
//! - Interrupts: one eventfd per MSI-X vector (what `VFIO_DEVICE_SET_IRQS` takes), readable
//!   for `poll`/`epoll`; [`Backend::wait_irq`] blocks on one.
//! - [`Backend::progress`]: the driver calls it in every wait loop. A device with its own
//!   clock (hardware, a threaded sim) ignores it; a stepped sim runs its world there.

#[cfg(feature = "sim")]
pub mod sim;
pub mod vfio;

use std::fmt;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use crate::dma::DmaRegion;
use crate::error::DriverError;

/// One IOVA aperture the IOMMU accepts: `start..=last` (inclusive, as VFIO's
/// `vfio_iova_range` reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable IOVA.
    pub start: u64,
    /// Last usable IOVA (inclusive).
    pub last: u64,
}

impl IovaRange {
    /// The legacy x86 apertures rdma-core uses when VFIO reports none
    /// (`mlx5_vfio.c` `mlx5_vfio_init_device_dma`: `[0x10000, 0xFEDFFFFF]` and
    /// `[0xFEF00000, 2^39-1]`, skipping the MSI window at 0xFEE00000).
    pub const LEGACY: [IovaRange; 2] = [
        IovaRange {
            start: 0x1_0000,
            last: 0xfedf_ffff,
        },
        IovaRange {
            start: 0xfef0_0000,
            last: (1 << 39) - 1,
        },
    ];
}

/// Whether a device may still move without the driver doing anything (see
/// [`Backend::progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The device runs on its own (hardware, a threaded sim) or did work just now: waiting
    /// longer can help.
    Running,
    /// A stepped simulation that has nothing left to do and nothing scheduled: whatever the
    /// driver waits for will never happen unless the driver acts first.
    Idle,
}

/// The device seam. Object-safe: the driver holds an `Arc<dyn Backend>`.
///
/// All methods take `&self` and are callable from any thread; implementations serialise
/// internally where they must (a sim takes its world's lock; VFIO needs nothing).
pub trait Backend: Send + Sync + fmt::Debug {
    /// A short name for messages and `devinfo` (`sim0`, or the PCI address `0000:3b:00.0`).
    fn name(&self) -> String;

    /// BAR0's length in bytes. Every MMIO offset must be below it.
    fn bar0_len(&self) -> u64;

    /// A 32-bit MMIO read at BAR0 offset `off` (4-byte aligned): the value a
    /// `read_volatile::<u32>` of the mapped register returns (bus bytes in memory order; the
    /// caller converts with `u32::from_be`). A refused read returns `u32::MAX`, as a PCI
    /// master abort does, and is counted.
    fn read32(&self, off: u64) -> u32;

    /// A 32-bit MMIO write: `v` is what a `write_volatile::<u32>` stores (pass `x.to_be()`
    /// for big-endian registers). Refused writes are counted, never a panic.
    fn write32(&self, off: u64, v: u32);

    /// A 64-bit MMIO write, one store of exactly 8 bytes (doorbells: pass `x.to_be()`).
    fn write64(&self, off: u64, v: u64);

    /// One 64-byte BlueFlame chunk at `off` (64-byte aligned): eight ordered 64-bit stores of
    /// `chunk[0..8]` in order, each as a `write_volatile::<u64>` would store it (rdma-core
    /// `mmio_memcpy_x64`; never a byte copy). The caller fences before and after.
    fn write_bf(&self, off: u64, chunk: &[u64; 8]);

    /// MMIO accesses refused so far (outside BAR0, wrong width, unallocated UAR page).
    fn mmio_errors(&self) -> u64 {
        0
    }

    /// The IOVA apertures the IOMMU accepts (VFIO: `VFIO_IOMMU_GET_INFO`'s IOVA-range
    /// capability, or [`IovaRange::LEGACY`]). The driver allocates every IOVA inside them.
    fn iova_ranges(&self) -> Vec<IovaRange>;

    /// Maps all of `region` at `iova` for device read and write (`VFIO_IOMMU_MAP_DMA`).
    /// `iova` is page-aligned and inside [`Backend::iova_ranges`]; the backend keeps
    /// `region` alive until it is unmapped.
    fn map_dma(&self, iova: u64, region: Arc<DmaRegion>) -> Result<(), DriverError>;

    /// Unmaps the mapping made at `iova` of `len` bytes (`VFIO_IOMMU_UNMAP_DMA`). After it
    /// returns the device can no longer reach the memory.
    fn unmap_dma(&self, iova: u64, len: usize) -> Result<(), DriverError>;

    /// True when [`Backend::map_dma`] pins the memory itself and charges it to
    /// `RLIMIT_MEMLOCK` (VFIO type1: `vfio_iommu_type1.c` `vfio_pin_pages_remote` →
    /// `vfio_lock_acct`). The driver then does not `mlock` the regions it maps: the pin keeps
    /// them resident, and an mlock as well would charge the limit twice.
    fn pins_on_map(&self) -> bool {
        false
    }

    /// Number of MSI-X vectors (each has an eventfd). A VFIO device without MSI-X offers its
    /// MSI vectors here instead.
    fn irq_vectors(&self) -> u16;

    /// The eventfd that MSI-X `vector` signals, for `poll`/`epoll`; `None` if there is no
    /// such vector. Reading it (8 bytes) clears it; [`Backend::wait_irq`] does that.
    fn irq_fd(&self, vector: u16) -> Option<BorrowedFd<'_>>;

    /// Waits up to `timeout` for an interrupt on `vector` and consumes it (clears the
    /// eventfd). Returns `Ok(true)` if one arrived, `Ok(false)` on timeout, or at once when
    /// the device is a stepped sim that can no longer raise one ([`Progress::Idle`]).
    fn wait_irq(&self, vector: u16, timeout: Duration) -> Result<bool, DriverError>;

    /// Lets the device move: the driver calls it in every wait loop. No-op returning
    /// [`Progress::Running`] for hardware and a threaded sim; a stepped sim runs its world
    /// until idle, then advances virtual time to the next scheduled event.
    fn progress(&self) -> Progress;

    /// A name for a command syndrome, where the backend knows one (a sim knows its own
    /// firmware's; real firmware syndromes are opaque, so VFIO returns `None`).
    fn syndrome_name(&self, _syndrome: u32) -> Option<&'static str> {
        None
    }
}
