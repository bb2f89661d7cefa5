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

use std::path::{Path, PathBuf};

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
        report::full(&tree, cuda_ordinals(&opts.sysfs, &tree.gpus))
    };
    print!("{out}");
    Ok(())
}

/// Each GPU's CUDA device number, in `gpus`' order: CUDA need not number GPUs in PCI order,
/// and `cuDeviceGetPCIBusId` maps an ordinal to its BDF. `None` (the report then says its
/// GPU numbers are PCI order) for a captured tree (`--sysfs` not `/`: this machine's CUDA
/// does not describe it), when CUDA is absent, or when some GPU has no CUDA device.
fn cuda_ordinals(sysfs_root: &Path, gpus: &[sysfs::PciFunction]) -> Option<Vec<u32>> {
    if sysfs_root != Path::new("/") || gpus.is_empty() {
        return None;
    }
    let (_, cuda) = bypass_gpu::devices().ok()?;
    match_ordinals(gpus.iter().map(|g| g.bdf.as_str()), &cuda)
}

/// The CUDA ordinal of each BDF, or `None` if any BDF has none.
fn match_ordinals<'a>(
    bdfs: impl Iterator<Item = &'a str>,
    cuda: &[bypass_gpu::DeviceInfo],
) -> Option<Vec<u32>> {
    bdfs.map(|bdf| {
        let want = bypass_gpu::normalize_bdf(bdf);
        cuda.iter()
            .find(|d| d.pci_bus_id == want)
            .and_then(|d| u32::try_from(d.ordinal).ok())
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(ordinal: usize, bdf: &str) -> bypass_gpu::DeviceInfo {
        bypass_gpu::DeviceInfo {
            ordinal,
            name: "GPU".into(),
            pci_bus_id: bdf.into(),
            dma_buf: true,
        }
    }

    #[test]
    fn ordinals_follow_the_bus_ids_not_the_order() {
        let cuda = [dev(0, "0000:3b:00.0"), dev(1, "0000:1b:00.0")];
        let got = match_ordinals(["0000:1B:00.0", "0000:3b:00.0"].into_iter(), &cuda);
        assert_eq!(got, Some(vec![1, 0]));
    }

    #[test]
    fn a_gpu_cuda_does_not_list_gives_none() {
        let cuda = [dev(0, "0000:3b:00.0")];
        assert_eq!(match_ordinals(["0000:1b:00.0"].into_iter(), &cuda), None);
    }
}
