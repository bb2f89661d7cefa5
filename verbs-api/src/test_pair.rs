//! Two simulated NICs on one stepped fabric, for this crate's unit tests: the testbed's
//! `sim_pair`, which a unit test cannot call (the testbed links its own copy of this crate).
//!
//! Owns: [`sim_pair`]. Must not: be built outside tests.

use std::sync::Arc;

use bypass_sim::{Profile, fabric::SimFabric};

use crate::Context;
use crate::driver::DriverError;
use crate::error::VerbsError;

/// NICs 1 and 2 of a stepped fabric seeded with `seed`.
pub(crate) fn sim_pair(seed: u64) -> Result<(Arc<Context>, Arc<Context>), VerbsError> {
    let fabric = SimFabric::stepped(seed);
    let open = |id| -> Result<Arc<Context>, VerbsError> {
        let dev = fabric
            .add_device(Profile::with_id(id))
            .map_err(DriverError::from)?;
        Context::new(dev)
    };
    Ok((open(1)?, open(2)?))
}
