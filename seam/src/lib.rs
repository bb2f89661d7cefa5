//! # bypass-seam: the device seam
//!
//! What a driver needs from a device and a device offers to a driver, and nothing else: BAR0
//! MMIO ([`Mmio`]), DMA mapping at IOVAs with the host-memory contract the device reads
//! through ([`DmaMap`], [`HostMemory`]), interrupts ([`Interrupts`]), and [`Backend`], the
//! three together with a name and a way to let a simulated device move.
//!
//! Owns: those traits, [`IovaRange`], [`CallerPages`] (application memory as a device maps
//! it), [`DmaBufSlice`] and [`PeerMemory`] (dma-bufs and GPU memory as a device maps them),
//! [`Progress`], [`BackendError`], the locked-memory accounting both sides check
//! before they pin ([`MemlockState`]) and the udmabuf / `DMA_BUF_IOCTL_SYNC` uapi calls
//! ([`create_udmabuf`], [`dma_buf_sync`]). Must not: know any mlx5
//! format (`bypass-hw`), keep driver or device state, or depend on either side: the driver
//! (`bypass-driver`) and the software NIC (`bypass-sim`) both depend on this crate, never on
//! each other.
//!
//! The traits are split as vm-memory splits guest memory: the data path holds only [`Mmio`]
//! (a doorbell is one call through it), the DMA mapper only [`DmaMap`], an event queue only
//! [`Interrupts`]. Every method is shaped so that the VFIO implementation is a thin wrapper
//! over a syscall or a volatile access (`vfio-ioctls`, `VFIO_IOMMU_MAP_DMA`, eventfds).

mod caller;
mod dma;
mod dmabuf;
mod error;
mod irq;
mod memlock;
mod mmio;
mod peer;
mod udmabuf;

use std::any::Any;
use std::fmt;

pub use caller::CallerPages;
pub use dma::{DmaMap, HostMemory, IovaRange, PAGE_SIZE, copy_small};
pub use dmabuf::{DmaBufFile, DmaBufSlice, Exporter, MemfdRange, parse_fdinfo};
pub use error::BackendError;
pub use irq::Interrupts;
pub use memlock::MemlockState;
pub use mmio::Mmio;
pub use peer::{PeerError, PeerMemory};
pub use udmabuf::{
    DmaBufSyncError, SyncAccess, SyncFlags, SyncPhase, UDMABUF_DEVICE, UdmabufError,
    create_udmabuf, dma_buf_sync, sealed_memfd,
};

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

/// A whole device as the driver opens it: MMIO, DMA mapping and interrupts, plus a name and
/// progress. Object-safe: the driver holds an `Arc<dyn Backend>` and hands each part the
/// capability it needs (`Arc<dyn Backend>` coerces to `Arc<dyn Mmio>` and the others).
///
/// All methods take `&self` and are callable from any thread; implementations serialise
/// internally where they must (a sim takes its world's lock; VFIO needs nothing). `Any` lets
/// a caller that knows the concrete backend (a test reading a sim device's counters) get it
/// back from the trait object.
pub trait Backend: Mmio + DmaMap + Interrupts + Any + Send + Sync + fmt::Debug {
    /// A short name for messages and `devinfo` (`sim0`, or the PCI address `0000:3b:00.0`).
    fn name(&self) -> String;

    /// Lets the device move: the driver calls it in every wait loop. A no-op returning
    /// [`Progress::Running`] for hardware and a threaded sim; a stepped sim runs its world
    /// until idle, then advances virtual time to the next scheduled event.
    fn progress(&self) -> Progress;

    /// True for a stepped (deterministic) sim: nothing happens unless the driver calls
    /// [`Backend::progress`], so a wait must step it rather than sleep on an eventfd. False
    /// (the default) for hardware and a threaded sim, which raise interrupts on their own.
    fn is_stepped(&self) -> bool {
        false
    }

    /// A name for a command syndrome, where the backend knows one (a sim knows its own
    /// firmware's; real firmware syndromes are opaque, so VFIO returns `None`).
    fn syndrome_name(&self, _syndrome: u32) -> Option<&'static str> {
        None
    }

    /// The NUMA node the device is attached to, where the platform says (a PCI function's
    /// sysfs `numa_node`); `None` when it is unknown (`-1`: the firmware gave no proximity
    /// information) and for a device with no place in the machine (a sim, the default). The
    /// driver prefers that node for the DMA memory it allocates for the device.
    fn numa_node(&self) -> Option<u32> {
        None
    }
}
