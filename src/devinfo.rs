//! `bypass devinfo`: what `ibv_devinfo` shows (firmware version, capabilities, ports, GIDs,
//! MTU) for a device opened through bypass's own driver.
//!
//! Owns: that command's options and output. Must not format the device fields itself beyond
//! the header: the driver's `DeviceInfo` Display is the one format.

use clap::Args;

use crate::args::DeviceSpec;
use crate::device::{DeviceError, open_hca};

/// Options of `bypass devinfo`.
#[derive(Args, Debug)]
pub struct DevinfoOpts {
    /// The device: `sim` (an in-process simulated ConnectX NIC) or a PCI address of a NIC
    /// bound to vfio-pci.
    #[arg(short = 'd', long, default_value = "sim")]
    pub device: DeviceSpec,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Opens the device, prints its summary and closes it (teardown returns every page).
pub fn run(opts: &DevinfoOpts) -> Result<(), DeviceError> {
    let hca = open_hca(&opts.device, opts.seed)?;
    print!("{}", hca.device_info());
    Ok(())
}
