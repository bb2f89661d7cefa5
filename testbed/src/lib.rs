//! # bypass-testbed: simulated NICs, opened through the real driver
//!
//! The one crate that depends on both the verbs API (`bypass-verbs`, over the driver) and the
//! software NIC (`bypass-sim`), so that neither of those depends on the other: an application
//! for hardware compiles no simulator, and a test still starts in one line.
//!
//! Owns: [`SimPair`] and [`SimContext`] (the simulated-NIC constructors of a
//! [`Context`], and the way back from a context to its sim device), and [`DeviceSpec`], the
//! device selector the CLI and the C library share.
//! Must not: add behaviour of its own: every device object is made by the driver, every
//! packet by the sim.
//!
//! ```
//! use bypass_testbed::SimContext;
//! use bypass_verbs::Context;
//! let pair = Context::sim_pair(1)?; // two simulated NICs on a stepped (deterministic) fabric
//! assert_ne!(pair.a.gid(1)?, pair.b.gid(1)?);
//! assert_eq!(pair.a.sim().map(|d| d.id()), Some(0));
//! # Ok::<(), bypass_verbs::VerbsError>(())
//! ```

use std::any::Any;
use std::sync::Arc;

use bypass_driver::DriverError;
use bypass_driver::backend::Backend;
use bypass_verbs::{Context, VerbsError};

pub mod device_spec;
pub use device_spec::DeviceSpec;

pub use bypass_sim::Profile;
pub use bypass_sim::fabric::{FabricOptions, SimBackend, SimFabric};

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

/// Simulated NICs as verbs contexts: `Context::sim_pair(seed)`, `Context::open_sim(&fabric,
/// id)`, and `ctx.sim()` for a context's sim device (its counters, pages and trace through
/// `with_device`). Implemented for [`Context`] only; bring it into scope with `use`.
pub trait SimContext {
    /// Adds a simulated NIC with `Profile::with_id(id)` (its GID is `10.0.0.id`) to `fabric`
    /// and opens it (bring-up through the driver, as for any device).
    fn open_sim(fabric: &SimFabric, id: u8) -> Result<Arc<Context>, VerbsError>;

    /// Two simulated NICs on a new stepped fabric seeded with `seed` (deterministic: the
    /// fabric moves only while the driver waits, e.g. in `Cq::wait`).
    fn sim_pair(seed: u64) -> Result<SimPair, VerbsError>;

    /// The sim device behind this context, or `None` when it is not a simulated NIC.
    fn sim(&self) -> Option<&SimBackend>;

    /// Why QP `qpn` of this context ended in TRANSPORT_RETRY_EXC, when it is its size: the
    /// port dropped the QP's packets as larger than its Ethernet MTU (the QP's
    /// `tx_mtu_drops`), as [`VerbsError::RetryExcMtu`] naming the counts, both MTUs and the
    /// fix. `None` when no packet of the QP was dropped for size (or not a sim).
    fn retry_exc_cause(&self, qpn: u32) -> Option<VerbsError>;
}

impl SimContext for Context {
    fn open_sim(fabric: &SimFabric, id: u8) -> Result<Arc<Context>, VerbsError> {
        let dev = fabric
            .add_device(Profile::with_id(id))
            .map_err(DriverError::from)?;
        Context::new(dev)
    }

    fn sim_pair(seed: u64) -> Result<SimPair, VerbsError> {
        let fabric = SimFabric::stepped(seed);
        let a = Self::open_sim(&fabric, 1)?;
        let b = Self::open_sim(&fabric, 2)?;
        Ok(SimPair { fabric, a, b })
    }

    fn sim(&self) -> Option<&SimBackend> {
        // SAFETY: the sim is only downcast to and read (counters, MTUs) through it; nothing
        // maps, unmaps or rings a doorbell.
        let backend: &dyn Backend = unsafe { &**self.hca().backend() };
        (backend as &dyn Any).downcast_ref::<SimBackend>()
    }

    fn retry_exc_cause(&self, qpn: u32) -> Option<VerbsError> {
        let (drops, eth_mtu, path_mtu) = self
            .sim()?
            .with_device(|d| {
                let drops = d.qp_counters(qpn)?.tx_mtu_drops;
                Some((drops, d.port_mtu(1)?, d.qp_path_mtu(qpn)?))
            })
            .ok()??;
        if drops == 0 {
            return None;
        }
        Some(VerbsError::RetryExcMtu {
            qpn,
            drops,
            eth_mtu,
            why: bypass_verbs::driver::hw::roce::mtu::TooLarge { path_mtu, eth_mtu },
        })
    }
}
