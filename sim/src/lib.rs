//! # bypass-sim: the software mlx5 NIC
//!
//! A device model that implements the same hardware interface as a ConnectX NIC and speaks
//! RoCEv2 on the wire, using only `bypass-hw` for formats, so that a driver (bypass's own, or
//! a team's test suite) runs unchanged against it.
//!
//! A [`Device`] is a thin owner of parts, each with its own type, and lends each piece of work
//! the parts it touches: BAR0's MMIO decode (init segment, UAR pages, latched doorbells,
//! BlueFlame), the firmware (the command queue and the handlers over the object tables), the
//! [`iommu`] in front of host [`memory`], the transport engine (send and receive queues,
//! requester, responder, completer, the burst ledger), and the completions and events (CQs,
//! EQs, interrupts). [`counters`] and [`trace`] show what it did. A [`World`] steps devices on
//! a simulated network with seeded [`faults`] and a [`pcap`] tee; [`link`] carries a device's
//! packets over a real UDP socket; [`fabric`] puts devices behind the seam's backend traits
//! (`bypass-seam`), stepped, threaded or on a UDP link.

mod bar0;
mod buffer;
pub mod cong;
pub mod counters;
pub mod device;
pub mod dmabuf_mmap;
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
mod mtu;
pub mod net;
mod object_counts;
mod objects;
pub mod pcap;
pub mod profile;
mod ring;
mod snapshot;
mod srq;
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
pub use object_counts::ObjectCounts;
pub use profile::Profile;
pub use world::{LinkConfig, World};
