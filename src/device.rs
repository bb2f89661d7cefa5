//! Opening the device a command runs on, from `-d/--device`.
//!
//! Owns: the mapping from a [`DeviceSpec`] to an open driver object (today: devices on an
//! in-process sim fabric) and the error a user sees when a backend is not available. Must not
//! print, and must not know what a command does with the device.

use std::sync::Arc;

use bypass_driver::backend::sim::SimFabric;
use bypass_driver::{DriverError, Hca};
use bypass_sim::Profile;

use crate::args::DeviceSpec;

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A VFIO device was asked for, and this build has no VFIO backend yet.
    #[error(
        "device {0}: the VFIO backend is not part of this build yet, so real NICs cannot be opened: use -d sim (the default) for an in-process simulated ConnectX NIC"
    )]
    VfioUnavailable(String),
    /// The driver failed to add or bring up the device.
    #[error("opening {device}: {source}")]
    Driver {
        /// The device being opened.
        device: String,
        /// What the driver reported.
        #[source]
        source: DriverError,
    },
}

/// Opens one device of `spec` for control-path use (`devinfo`). A sim device lives on its own
/// stepped fabric (deterministic; `seed` seeds it), which the returned `Hca` keeps alive.
pub fn open_hca(spec: &DeviceSpec, seed: u64) -> Result<Hca, DeviceError> {
    match spec {
        DeviceSpec::Vfio(addr) => Err(DeviceError::VfioUnavailable(addr.clone())),
        DeviceSpec::Sim => {
            let driver = |source| DeviceError::Driver {
                device: spec.to_string(),
                source,
            };
            let fabric = SimFabric::stepped(seed);
            let backend = fabric.add_device(Profile::with_id(1)).map_err(driver)?;
            Hca::open(backend as Arc<_>).map_err(driver)
        }
    }
}
