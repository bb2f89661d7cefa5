//! # bypass-sim: the software mlx5 NIC
//!
//! A device model that implements the same hardware interface as a ConnectX NIC and speaks
//! RoCEv2 on the wire, using only `bypass-hw` for formats, so that a driver (bypass's own, or
//! a team's test suite) runs unchanged against it.
//!
//! - [`device`]: BAR0 as MMIO callbacks (init segment, command doorbell, UAR pages with CQ/EQ
//!   doorbells and BlueFlame registers); doorbells are latched and acted on in
//!   [`Device::step`](device::Device::step).
//! - [`iommu`] + [`memory`]: every device access to host memory goes through IOVA
//!   translation, bounds-checked; a miss is a fault reported as the hardware would.
//! - `firmware`: the command queue and every command handler, bring-up order, firmware pages,
//!   object tables ([`objects`], [`table`], [`mkey`]) with the capabilities' limits.
//! - `engine` + [`transport`]: the data path, RC and UD, as RoCEv2 packets.
//! - [`ring`], `events`: CQ/EQ rings, completions, events, interrupts.
//! - [`link`]: wires outside the stepped world (a UDP socket speaking RoCEv2 like rxe).
//! - [`counters`], [`trace`]: what `rdma statistic` would show, and an optional event log.
//! - [`faults`], [`pcap`]: seeded link faults for the stepped [`World`], and a pcap writer.
//! - [`fabric`]: devices on a world as the seam's backends (`bypass-seam`): stepped, threaded,
//!   or on a UDP link, opened by a driver as it opens a VFIO device.

mod bar0;
mod buffer;
pub mod counters;
pub mod device;
mod engine;
mod events;
pub mod fabric;
pub mod faults;
mod firmware;
mod frame;
mod header_cache;
mod inline;
mod io;
pub mod iommu;
pub mod link;
pub mod memory;
mod mkey;
mod objects;
pub mod pcap;
pub mod profile;
mod ring;
mod table;
pub mod trace;
pub mod transport;
pub mod world;

#[cfg(test)]
pub(crate) mod testkit;

#[cfg(test)]
mod e2e_tests;

#[cfg(test)]
mod frame_tests;

pub use device::{Device, MmioError};
pub use firmware::Stage;
pub use firmware::syndromes;
pub use profile::Profile;
pub use world::{LinkConfig, World};
