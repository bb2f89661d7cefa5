//! # bypass-driver: the mlx5 user-space driver
//!
//! This crate will hold the driver layer (see `DESIGN.md` in the repository's docs and the
//! README): the `Backend` trait at the device seam (BAR MMIO, DMA mapping, interrupts) with its
//! VFIO and sim implementations, pinned DMA memory and the IOVA allocator, the firmware
//! command queue, device bring-up, and the queues, doorbells and completion rings.
//!
//! It has no code yet: the formats it will use live in [`bypass_hw`], and the driver itself
//! arrives with its own issue. Nothing here pretends to work before then.

pub use bypass_hw as hw;

pub mod barrier;
pub mod poll;
pub mod post;
pub mod uar;
pub mod wq;
