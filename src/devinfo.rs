//! `bypass devinfo`: what `ibv_devinfo` shows (firmware version, capabilities, ports, GIDs,
//! MTU) for a device opened through bypass's own driver.
//!
//! Owns: that command's options and output, and `--vfio BDF` (what VFIO says about a PCI
//! function: regions, interrupts, the IOMMU; for an mlx5 function the bring-up result). Must
//! not format the device fields itself beyond the header: the driver's `DeviceInfo` Display is
//! the one format.

use std::sync::Arc;

use bypass_driver::backend::vfio::{VfioBackend, VfioError};
use bypass_driver::{DriverError, Hca};
use clap::Args;

use crate::args::DeviceSpec;
use crate::device::{DeviceError, open_hca};

/// PCI vendor ID of Mellanox/NVIDIA ConnectX functions.
const MELLANOX_VENDOR: u32 = 0x15b3;

/// Why `bypass devinfo` failed.
#[derive(Debug, thiserror::Error)]
pub enum DevinfoError {
    /// Opening the `-d` device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Opening the `--vfio` device failed.
    #[error(transparent)]
    Vfio(#[from] VfioError),
    /// The mlx5 bring-up over VFIO failed.
    #[error("{bdf}: mlx5 bring-up over VFIO failed: {source}")]
    Bringup {
        /// PCI address.
        bdf: String,
        /// What the driver reported.
        #[source]
        source: DriverError,
    },
}

/// Options of `bypass devinfo`.
#[derive(Args, Debug)]
pub struct DevinfoOpts {
    /// The device: `sim` (an in-process simulated ConnectX NIC), `udp:ADDR[:PORT]` (a
    /// simulated NIC on a UDP socket) or `vfio:BDF` / a PCI address of a NIC bound to vfio-pci
    /// (shown as `--vfio BDF` shows it).
    #[arg(short = 'd', long, default_value = "sim")]
    pub device: DeviceSpec,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Show what VFIO reports for the PCI function at BDF (bound to vfio-pci): regions,
    /// interrupts, IOMMU apertures; for an mlx5 function also bring it up and show it.
    #[arg(long, value_name = "BDF", conflicts_with = "device")]
    pub vfio: Option<String>,
}

/// Opens the device, prints its summary and closes it (teardown returns every page).
pub fn run(opts: &DevinfoOpts) -> Result<(), DevinfoError> {
    if let Some(bdf) = &opts.vfio {
        return run_vfio(bdf);
    }
    if let DeviceSpec::Vfio(bdf) = &opts.device {
        return run_vfio(bdf);
    }
    let hca = open_hca(&opts.device, opts.seed)?;
    print!("{}", hca.device_info());
    Ok(())
}

/// `--vfio BDF`: open the function through the VFIO backend and print what it offers.
fn run_vfio(addr: &str) -> Result<(), DevinfoError> {
    let vfio = VfioBackend::open(addr)?;
    let (vendor, device) = vfio.ids();
    println!(
        "vfio device {} ({vendor:04x}:{device:04x}), IOMMU group {}",
        vfio.bdf(),
        vfio.group()
    );
    println!("regions:");
    for r in vfio.regions() {
        println!("  {r}");
    }
    println!("interrupts:");
    for i in vfio.irq_infos() {
        println!("  {:<6} {} vector(s)", i.name, i.count);
    }
    println!(
        "  enabled: {:?}, {} eventfd(s)",
        vfio.irq_kind(),
        bypass_driver::backend::Interrupts::irq_vectors(vfio.as_ref())
    );
    let iommu = vfio.iommu_info();
    println!(
        "iommu: page sizes {}, DMA mappings available {}",
        iommu.page_sizes_text(),
        iommu
            .dma_avail
            .map_or("unknown".to_owned(), |n| n.to_string())
    );
    for r in &iommu.ranges {
        println!("  IOVA {:#x}..={:#x}", r.start, r.last);
    }
    println!(
        "reset: {}",
        if vfio.reset_supported() {
            "VFIO_DEVICE_RESET available"
        } else {
            "not available"
        }
    );
    if vendor == MELLANOX_VENDOR {
        let bdf = vfio.bdf().to_owned();
        let hca =
            Hca::open(vfio as Arc<_>).map_err(|source| DevinfoError::Bringup { bdf, source })?;
        print!("{}", hca.device_info());
    } else {
        println!("not an mlx5 function (vendor {vendor:#06x}): no bring-up");
    }
    Ok(())
}
