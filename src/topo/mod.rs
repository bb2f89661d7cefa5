//! `bypass topo`: the PCIe/NUMA placement of the NICs and GPUs, as `nvidia-smi topo -m` shows
//! it, and the seed's section 5.1/5.4 checks on it (GPUDirect RDMA wants the NIC under the GPU's
//! PCIe switch and on its NUMA node).
//!
//! Owns: the command's options and its flow: read the tree (`sysfs`), classify each pair
//! (`classify`), print (`report`). Must not touch devices: it only reads sysfs files, so it
//! needs no privileges and runs on a captured tree (`--sysfs ROOT`) as on `/`.
//! Sources: NVML's `nvmlGpuTopologyLevel_t` and `nvidia-smi topo -m`'s legend; the kernel's
//! sysfs PCI layout (Documentation/ABI/testing/sysfs-bus-pci).

mod classify;
mod report;
mod sysfs;

use std::path::PathBuf;

use clap::Args;

pub use sysfs::{MAX_CPUS, TopoError, format_cpulist, parse_cpulist};

/// Options of `bypass topo`.
#[derive(Args, Debug)]
pub struct TopoOpts {
    /// Root of the sysfs tree to read: `/` (this machine) or a captured copy holding
    /// `sys/bus/pci/devices` (e.g. tests/fixtures/topo/numa2).
    #[arg(long, value_name = "ROOT", default_value = "/")]
    pub sysfs: PathBuf,
    /// One line per NIC–GPU pair, `NIC_BDF GPU_BDF CLASS`, and nothing else (for scripts).
    #[arg(long)]
    pub pairs: bool,
}

/// Reads the tree and prints the matrix (or the pairs).
pub fn run(opts: &TopoOpts) -> Result<(), TopoError> {
    let tree = sysfs::read_tree(&opts.sysfs)?;
    let out = if opts.pairs {
        report::pairs(&tree)
    } else {
        report::full(&tree, cuda_ordinals(&tree.gpus))
    };
    print!("{out}");
    Ok(())
}

/// Hook for CUDA device numbers: CUDA need not number GPUs in PCI order
/// (`cuDeviceGetPCIBusId` maps an ordinal to its BDF). The tree has no CUDA code yet, so
/// this returns `None` and the report says its GPU numbers are PCI order. When CUDA lands,
/// return the ordinal of each GPU in `gpus` (same order) here.
fn cuda_ordinals(_gpus: &[sysfs::PciFunction]) -> Option<Vec<u32>> {
    None
}
