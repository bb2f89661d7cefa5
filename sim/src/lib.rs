//! # bypass-sim: the software mlx5 NIC
//!
//! This crate will hold the device model that implements the same hardware interface as a
//! ConnectX NIC (BAR0, firmware command queue, DMA engine through an IOMMU model, RC/UD data
//! path) and speaks RoCEv2 on the wire, using only `bypass-hw` for formats.
//!
//! It has no code yet; it arrives with its own issue.

pub use bypass_hw as hw;
