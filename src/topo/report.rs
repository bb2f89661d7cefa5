//! What `bypass topo` prints: the matrix in `nvidia-smi topo -m`'s form with its legend, each
//! device's NUMA node and local CPUs, and warnings that say what is wrong, why it matters
//! and what to change; or, for scripts, one `NIC_BDF GPU_BDF CLASS` line per pair.
//!
//! Owns: the text. Must not read files or decide classes (`classify` does).
//! Sources: nvidia-smi's `topo -m` layout and legend wording; the seed's §5.1 (GPU and NIC
//! under one switch, one NUMA node) and §5.4 (50 → 95 Gb/s after moving the NIC under the
//! GPU's switch).

use std::fmt::Write;

use super::classify::{Link, classify};
use super::sysfs::{PciFunction, Tree};

/// nvidia-smi's legend, for the classes sysfs can show (NV# needs NVML).
const LEGEND: &str = "\
Legend:
  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe switch
";

/// `NIC_BDF GPU_BDF CLASS` for every NIC–GPU pair, NICs then GPUs in BDF order.
pub fn pairs(tree: &Tree) -> String {
    let mut out = String::new();
    for nic in &tree.nics {
        for gpu in &tree.gpus {
            let class = classify(&nic.place, &gpu.place).name();
            let _ = writeln!(out, "{} {} {class}", nic.bdf, gpu.bdf);
        }
    }
    out
}

/// The whole report. `cuda` holds each GPU's CUDA device number when known.
pub fn full(tree: &Tree, cuda: Option<Vec<u32>>) -> String {
    let mut out = String::new();
    if tree.nics.is_empty() && tree.gpus.is_empty() {
        out.push_str(
            "No Mellanox NIC (vendor 0x15b3, class 0x02xxxx) or NVIDIA GPU (vendor 0x10de, \
             class 0x03xxxx) found under sys/bus/pci/devices.\n",
        );
        return out;
    }
    let devices: Vec<(String, &PciFunction)> = names(tree);
    matrix(&mut out, &devices);
    out.push('\n');
    out.push_str(LEGEND);
    out.push_str("\nDevices:\n");
    for (name, d) in &devices {
        let numa = d
            .place
            .numa_node
            .map_or("unknown".to_string(), |n| n.to_string());
        let path = std::iter::once(d.place.host_bridge.as_str())
            .chain(d.place.bridges.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" > ");
        let _ = writeln!(
            out,
            "  {name:<6}{}  {:04x}:{:04x}  driver {}  NUMA {numa}  CPUs {}  via {path}",
            d.bdf,
            d.vendor,
            d.device,
            d.driver.as_deref().unwrap_or("none"),
            d.local_cpus.as_deref().unwrap_or("unknown"),
        );
    }
    for (node, cpus) in &tree.nodes {
        let _ = writeln!(out, "  node{node} CPUs {cpus}");
    }
    if tree.gpus.is_empty() {
        out.push_str("No NVIDIA GPU (vendor 0x10de, class 0x03xxxx) found: NICs only.\n");
    } else {
        match cuda {
            None => out.push_str(
                "GPU numbers follow PCI order, not CUDA's (cuDeviceGetPCIBusId maps those).\n",
            ),
            Some(ords) => {
                for (i, o) in ords.iter().enumerate() {
                    let _ = writeln!(out, "  GPU{i} = CUDA device {o}");
                }
            }
        }
    }
    let warnings = warnings(tree);
    if !warnings.is_empty() {
        out.push_str("\nWarnings:\n");
        for w in warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}

/// `NIC0…` then `GPU0…`, each in BDF order.
fn names(tree: &Tree) -> Vec<(String, &PciFunction)> {
    let nics = tree
        .nics
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("NIC{i}"), d));
    let gpus = tree
        .gpus
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("GPU{i}"), d));
    nics.chain(gpus).collect()
}

fn matrix(out: &mut String, devices: &[(String, &PciFunction)]) {
    let w = devices
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(4)
        .max(4)
        + 2;
    let _ = write!(out, "{:w$}", "");
    for (name, _) in devices {
        let _ = write!(out, "{name:<w$}");
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    for (row, a) in devices {
        let _ = write!(out, "{row:<w$}");
        for (col, b) in devices {
            let cell = if row == col {
                "X"
            } else {
                classify(&a.place, &b.place).name()
            };
            let _ = write!(out, "{cell:<w$}");
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
}

/// The seed's §5.1/§5.4 checks: per GPU, its nearest NIC under its switch and on its NUMA
/// node; per device, a known `numa_node`.
fn warnings(tree: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (i, gpu) in tree.gpus.iter().enumerate() {
        let nearest = tree
            .nics
            .iter()
            .enumerate()
            .map(|(n, nic)| (classify(&nic.place, &gpu.place), n, nic))
            .min_by_key(|(link, n, _)| (*link, *n));
        let Some((link, n, nic)) = nearest else { break };
        if link >= Link::Phb {
            out.push(format!(
                "GPU{i} ({}) has no NIC under its PCIe switch: the nearest, NIC{n} ({}), is {}, \
                 so GPUDirect RDMA traffic crosses {}; the seed's §5.4 case went from 50 to 95 \
                 Gb/s by moving the NIC under the GPU's switch.",
                gpu.bdf,
                nic.bdf,
                link.name(),
                match link {
                    Link::Phb => "the host bridge",
                    Link::Node => "host bridges",
                    _ => "host bridges and the interconnect between NUMA nodes",
                }
            ));
        }
        if let Some(node) = gpu.place.numa_node {
            let same = tree
                .nics
                .iter()
                .any(|nic| nic.place.numa_node == Some(node));
            if !same {
                out.push(format!(
                    "GPU{i} ({}) is on NUMA node {node} and no NIC is: its RDMA traffic crosses \
                     the SMP interconnect (QPI/UPI) between nodes; put a NIC on node {node}, or \
                     use a GPU on a NIC's node.",
                    gpu.bdf
                ));
            }
        }
    }
    for (name, d) in names(tree) {
        if d.place.numa_node.is_none() {
            out.push(format!(
                "{name} ({}): numa_node is -1 (unknown): the firmware gave no proximity \
                 information (common in VMs), so across host bridges NODE cannot be told from \
                 SYS and is shown as SYS; pin work to its local CPUs ({}) instead.",
                d.bdf,
                d.local_cpus.as_deref().unwrap_or("unknown")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::sysfs::{Kind, Placement};

    fn dev(kind: Kind, bdf: &str, host: &str, bridges: &[&str], numa: Option<u32>) -> PciFunction {
        PciFunction {
            bdf: bdf.to_string(),
            kind,
            vendor: if kind == Kind::Nic { 0x15b3 } else { 0x10de },
            device: 0x1234,
            place: Placement {
                host_bridge: host.to_string(),
                bridges: bridges.iter().map(|b| b.to_string()).collect(),
                numa_node: numa,
            },
            local_cpus: Some("0-3".to_string()),
            driver: None,
        }
    }

    fn two_socket() -> Tree {
        Tree {
            nics: vec![dev(
                Kind::Nic,
                "0000:03:00.0",
                "pci0000:00",
                &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
                Some(0),
            )],
            gpus: vec![
                dev(
                    Kind::Gpu,
                    "0000:04:00.0",
                    "pci0000:00",
                    &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"],
                    Some(0),
                ),
                dev(
                    Kind::Gpu,
                    "0000:81:00.0",
                    "pci0000:80",
                    &["0000:80:01.0"],
                    Some(1),
                ),
            ],
            nodes: vec![(0, "0-3".into()), (1, "4-7".into())],
        }
    }

    #[test]
    fn pairs_are_one_line_each_and_nothing_else() {
        assert_eq!(
            pairs(&two_socket()),
            "0000:03:00.0 0000:04:00.0 PIX\n0000:03:00.0 0000:81:00.0 SYS\n"
        );
    }

    #[test]
    fn the_matrix_is_symmetric_with_x_on_the_diagonal() {
        let out = full(&two_socket(), None);
        let rows: Vec<&str> = out.lines().take(4).collect();
        assert_eq!(
            rows[0].split_whitespace().collect::<Vec<_>>(),
            ["NIC0", "GPU0", "GPU1"]
        );
        assert_eq!(
            rows[1].split_whitespace().collect::<Vec<_>>(),
            ["NIC0", "X", "PIX", "SYS"]
        );
        assert_eq!(
            rows[2].split_whitespace().collect::<Vec<_>>(),
            ["GPU0", "PIX", "X", "SYS"]
        );
        assert_eq!(
            rows[3].split_whitespace().collect::<Vec<_>>(),
            ["GPU1", "SYS", "SYS", "X"]
        );
    }

    #[test]
    fn a_gpu_far_from_every_nic_is_warned_about_switch_and_node() {
        let w = warnings(&two_socket());
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("GPU1 (0000:81:00.0) has no NIC under its PCIe switch"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("NIC0 (0000:03:00.0), is SYS") && w[0].contains("50 to 95 Gb/s"));
        assert!(
            w[1].starts_with("GPU1 (0000:81:00.0) is on NUMA node 1 and no NIC is"),
            "{}",
            w[1]
        );
    }

    #[test]
    fn unknown_numa_nodes_are_warned_about_per_device() {
        let mut t = two_socket();
        t.nics[0].place.numa_node = None;
        let w = warnings(&t);
        assert!(
            w.iter()
                .any(|l| l.starts_with("NIC0 (0000:03:00.0): numa_node is -1")),
            "{w:?}"
        );
        // a GPU with a known node and no NIC known to share it
        assert!(
            w.iter()
                .any(|l| l.starts_with("GPU0 (0000:04:00.0) is on NUMA node 0")),
            "{w:?}"
        );
    }

    #[test]
    fn no_gpu_gives_the_nic_matrix_and_says_so() {
        let mut t = two_socket();
        t.gpus.clear();
        let out = full(&t, None);
        assert!(out.starts_with("      NIC0\nNIC0  X\n"), "{out}");
        assert!(out.contains("No NVIDIA GPU"), "{out}");
        assert!(!out.contains("Warnings"), "{out}");
    }

    #[test]
    fn no_device_says_so() {
        assert!(full(&Tree::default(), None).starts_with("No Mellanox NIC"));
    }

    #[test]
    fn known_cuda_ordinals_are_listed() {
        let out = full(&two_socket(), Some(vec![1, 0]));
        assert!(
            out.contains("GPU0 = CUDA device 1") && out.contains("GPU1 = CUDA device 0"),
            "{out}"
        );
    }
}
