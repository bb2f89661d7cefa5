//! # bypass-driver: the mlx5 user-space driver
//!
//! The driver layer of bypass (see `docs/DESIGN.md`): it talks to a device through the seam's
//! traits ([`backend::Backend`]: BAR MMIO, DMA mapping, interrupts), and ships one backend of
//! its own, [`backend::vfio`]. Pinned DMA memory and the IOVA allocator ([`dma`]), the
//! firmware command queue ([`cmdq`]), device bring-up and teardown ([`hca::Hca`]), firmware
//! pages ([`pages`]), event queues ([`eq`]), and the data path: QPs, rings and doorbells
//! ([`qp`]: requests in [`post`], the WQE writer in [`wqe`], the send doorbell in
//! [`doorbell`], the rings in [`wq`]), CQs and their poll ([`cq`], [`poll`], completions in
//! [`completion`]).
//!
//! The driver never depends on the simulator. A simulated NIC (`bypass-sim`'s
//! `fabric::SimFabric`) implements the same seam and plugs in where a VFIO device does.
//!
//! Everything hangs off an [`Hca`]: no globals. Control-path calls serialise on a mutex and
//! may allocate; the data path (rings, doorbells) builds on [`Hca::alloc_dma`],
//! [`Hca::backend`] and [`Hca::uar_index`] without either.
//!
//! ```
//! use bypass_driver::Hca;
//! use bypass_sim::{Profile, fabric::SimFabric}; // a dev-dependency: any backend plugs in here
//! let fabric = SimFabric::stepped(1);
//! let dev = fabric.add_device(Profile::default())?;
//! let hca = Hca::open(dev)?;
//! assert!(hca.device_info().to_string().contains("sim0"));
//! # Ok::<(), bypass_driver::DriverError>(())
//! ```

pub mod async_events;
pub mod backend;
pub mod barrier;
pub mod bfregs;
mod bringup;
pub mod cmdq;
pub mod comp_channel;
pub mod completion;
pub mod cong;
pub mod cq;
pub mod cq_events;
pub mod dbrec;
pub mod dma;
pub mod dmabuf_mr;
pub mod doorbell;
pub mod eq;
pub mod error;
pub mod hca;
pub mod limits;
pub mod memfd_mr;
pub mod mr;
pub mod mtt_pages;
pub mod numa;
pub mod pages;
pub mod pd;
pub mod pin_table;
pub mod poll;
pub mod post;
pub mod qp;
pub mod qp_attr;
pub mod qp_geometry;
pub mod qp_states;
pub mod qp_table;
pub mod redact;
pub mod srq;
pub mod uar;
pub mod user_dma;
pub mod user_mr;
pub mod wq;
pub mod wqe;

pub use bypass_hw as hw;
pub use error::{DriverError, Result};
pub use hca::{Caps, DeviceInfo, Hca, HcaConfig, Port};
