//! The devices the driver talks to: the seam's traits, and the VFIO backend.
//!
//! Owns: the [`vfio`] backend (a PCI function bound to vfio-pci, on `vfio-ioctls`: BAR0
//! mmapped, `VFIO_IOMMU_MAP_DMA`, MSI-X or MSI eventfds). Must not: know any mlx5 format (the
//! rest of the driver does) or keep driver state.
//!
//! The traits themselves ([`Backend`], [`Mmio`], [`DmaMap`], [`Interrupts`]) and their
//! contract live in `bypass-seam`, which the software NIC (`bypass-sim`) implements too; they
//! are re-exported here so that a driver user needs one import path. The driver never depends
//! on the simulator: a build for hardware compiles no simulator code.

pub mod vfio;

pub use bypass_seam::{
    Backend, BackendError, DmaBufFile, DmaBufSlice, DmaMap, Exporter, HostMemory, Interrupts,
    IovaRange, MemfdRange, Mmio, PeerError, PeerMemory, Progress,
};
