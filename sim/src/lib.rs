//! # bypass-sim: the software mlx5 NIC
//!
//! A device model that implements the same hardware interface as a ConnectX NIC (BAR0,
//! firmware command queue, DMA through an IOMMU model, RC/UD data path) and speaks RoCEv2 on
//! the wire, using only `bypass-hw` for formats.
//!
//! Modules so far: [`memory`] (host memory a device can reach) and [`iommu`] (IOVA
//! translation, bounds-checked DMA). The device model, firmware and transport follow.

pub mod buffer;
pub mod iommu;
pub mod memory;
pub mod mkey;
pub mod ring;

pub use bypass_hw as hw;
