//! # bypass-driver: the mlx5 user-space driver
//!
//! The driver layer of bypass (see `DESIGN.md`): the [`backend::Backend`] trait at the device
//! seam (BAR MMIO, DMA mapping, interrupts) with its sim implementation
//! ([`backend::sim`], feature `sim`, on by default), pinned DMA memory and the IOVA allocator
//! ([`dma`]), the firmware command queue ([`cmdq`]), device bring-up and teardown
//! ([`hca::Hca`]), firmware pages ([`pages`]) and event queues ([`eq`]).
//!
//! Everything hangs off an [`Hca`]: no globals. Control-path calls serialise on a mutex and
//! may allocate; the data path (rings, doorbells) builds on [`Hca::alloc_dma`],
//! [`Hca::backend`] and [`Hca::uar_index`] without either.
//!
//! ```no_run
//! use std::sync::Arc;
//! use bypass_driver::{Hca, backend::sim::SimFabric};
//! let fabric = SimFabric::stepped(1);
//! let dev = fabric.add_device(bypass_sim::Profile::default())?;
//! let hca = Hca::open(dev)?;
//! println!("{}", hca.device_info());
//! # Ok::<(), bypass_driver::DriverError>(())
//! ```

pub mod backend;
pub mod barrier;
mod bringup;
pub mod cmdq;
pub mod cq;
pub mod dma;
pub mod eq;
pub mod error;
pub mod hca;
pub mod mr;
pub mod pages;
pub mod pd;
pub mod poll;
pub mod poll_guard;
pub mod post;
pub mod post_refused;
pub mod post_write;
pub mod qp;
pub mod qp_attr;
pub mod qp_table;
pub mod uar;
pub mod wq;

pub use bypass_hw as hw;
#[cfg(feature = "sim")]
pub use bypass_sim as sim;
pub use error::{DriverError, Result};
pub use hca::{Caps, DeviceInfo, Hca, HcaConfig, Port};
