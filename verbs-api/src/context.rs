//! The device context: an open HCA (the driver's [`Hca`]) shared by every object made from
//! it, its ports and GIDs, and the sim conveniences that open simulated NICs for examples and
//! tests.
//!
//! Owns: [`Context`] and [`SimPair`]. Must not: create device objects other than through the
//! driver, or keep global state (every object holds an `Arc<Context>` instead).

use std::sync::Arc;

use crate::driver::backend::sim::{SimBackend, SimFabric};
use crate::driver::backend::{Backend, Progress};
use crate::driver::sim::Profile;
use crate::driver::{DeviceInfo, Hca, Port};
use crate::endpoint::{Gid, Mtu};
use crate::error::VerbsError;
use crate::pd::Pd;

/// An open device. Cheap to share (`Arc<Context>`); the device is torn down (every firmware
/// page returned) when the last object made from it is dropped.
#[derive(Debug)]
pub struct Context {
    hca: Arc<Hca>,
    sim: Option<Arc<SimBackend>>,
}

/// Two simulated NICs on one stepped (deterministic) fabric, opened: what tests and examples
/// start from.
#[derive(Debug)]
pub struct SimPair {
    /// The fabric both NICs are on (run it, inspect its devices).
    pub fabric: SimFabric,
    /// The first NIC (`Profile::with_id(1)`).
    pub a: Arc<Context>,
    /// The second NIC (`Profile::with_id(2)`).
    pub b: Arc<Context>,
}

impl Context {
    /// Opens the device behind `backend` (brings it up: command queue, pages, EQs, UAR). The
    /// VFIO backend plugs in here too.
    pub fn new(backend: Arc<dyn Backend>) -> Result<Arc<Self>, VerbsError> {
        Ok(Arc::new(Context {
            hca: Arc::new(Hca::open(backend)?),
            sim: None,
        }))
    }

    /// Adds a simulated NIC with `Profile::with_id(id)` (its GID is `10.0.0.id`) to `fabric`
    /// and opens it.
    pub fn open_sim(fabric: &SimFabric, id: u8) -> Result<Arc<Self>, VerbsError> {
        let dev = fabric.add_device(Profile::with_id(id))?;
        let backend: Arc<dyn Backend> = dev.clone();
        Ok(Arc::new(Context {
            hca: Arc::new(Hca::open(backend)?),
            sim: Some(dev),
        }))
    }

    /// Two simulated NICs on a new stepped fabric seeded with `seed` (deterministic: the
    /// fabric moves only while the driver waits, e.g. in [`crate::Cq::wait`]).
    ///
    /// ```
    /// let pair = bypass_verbs::Context::sim_pair(1)?;
    /// assert_ne!(pair.a.gid(1)?, pair.b.gid(1)?);
    /// # Ok::<(), bypass_verbs::VerbsError>(())
    /// ```
    pub fn sim_pair(seed: u64) -> Result<SimPair, VerbsError> {
        let fabric = SimFabric::stepped(seed);
        let a = Self::open_sim(&fabric, 1)?;
        let b = Self::open_sim(&fabric, 2)?;
        Ok(SimPair { fabric, a, b })
    }

    /// The driver's device (commands, caps, DMA; research access).
    pub fn hca(&self) -> &Arc<Hca> {
        &self.hca
    }

    /// The sim backend, when the context is a simulated NIC (its device's counters, pages,
    /// trace through `with_device`).
    pub fn sim(&self) -> Option<&Arc<SimBackend>> {
        self.sim.as_ref()
    }

    /// A summary of the device (`ibv_devinfo`).
    pub fn device_info(&self) -> DeviceInfo {
        self.hca.device_info()
    }

    /// The ports (index 0 is port 1).
    pub fn ports(&self) -> &[Port] {
        self.hca.ports()
    }

    /// Port `num` (1-based).
    pub fn port(&self, num: u8) -> Option<&Port> {
        self.hca.port(num)
    }

    /// GID index 0 of port `num` (RoCEv2: the port's IP address).
    pub fn gid(&self, port: u8) -> Result<Gid, VerbsError> {
        self.port(port)
            .and_then(|p| p.valid_gids().next().map(|(_, g)| Gid(*g)))
            .ok_or(VerbsError::PortUnusable {
                port,
                what: "GID at index 0",
            })
    }

    /// The active path MTU of port `num` (the largest IB MTU its Ethernet MTU carries).
    pub fn active_mtu(&self, port: u8) -> Result<Mtu, VerbsError> {
        self.port(port)
            .and_then(|p| Mtu::from_bytes(p.active_mtu()))
            .ok_or(VerbsError::PortUnusable {
                port,
                what: "active MTU",
            })
    }

    /// Lets the device move: a stepped sim runs its world until idle; hardware and threaded
    /// sims ignore it. Waits ([`crate::Cq::wait`]) call it; a busy-polling loop on a stepped sim
    /// must call it too.
    pub fn progress(&self) -> Progress {
        self.hca.backend().progress()
    }

    /// Pages lent to the firmware now.
    pub fn firmware_pages(&self) -> usize {
        self.hca.firmware_pages()
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Pd, VerbsError> {
        Pd::alloc(self)
    }
}
