//! The class of the path between two PCI functions, as `nvidia-smi topo -m` names it.
//!
//! Owns: `Link` and `classify`, a pure function of two `Placement`s. Must not read files.
//! Sources: NVML `nvmlGpuTopologyLevel_t` (SINGLE "only need traverse a single PCIe switch",
//! MULTIPLE "need not traverse a host bridge", HOSTBRIDGE "connected to the same host
//! bridge", NODE "same NUMA node but possibly multiple host bridges", SYSTEM) and
//! nvidia-smi's legend; NCCL's topology (src/graph/topo.cc) likewise treats a switch, its
//! upstream port with its downstream ports, as one hop.
//! Rule: different host bridges: NODE if both numa_nodes are known and equal, else SYS
//! (unknown cannot be shown to share a node). Same host bridge, different root ports (or one
//! on the root bus itself): PHB. Same root port: count the switches the path crosses; at most
//! one: PIX, more: PXB. Port types are taken from position, since sysfs shows them only in
//! config space past 64 bytes (root only): the bridge on the root bus is the root port, then
//! bridges alternate switch upstream port (odd index), downstream port (even index).

use super::sysfs::Placement;

/// A path class, nearest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Link {
    /// At most one PCIe switch.
    Pix,
    /// Several switches, no host bridge.
    Pxb,
    /// Through one host bridge.
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across NUMA nodes (or nodes unknown).
    Sys,
}

impl Link {
    /// The name nvidia-smi prints.
    pub fn name(self) -> &'static str {
        match self {
            Link::Pix => "PIX",
            Link::Pxb => "PXB",
            Link::Phb => "PHB",
            Link::Node => "NODE",
            Link::Sys => "SYS",
        }
    }
}

/// The class of the path between `a` and `b` (see the module's rule).
pub fn classify(a: &Placement, b: &Placement) -> Link {
    if a.host_bridge != b.host_bridge {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x == y => Link::Node,
            _ => Link::Sys,
        };
    }
    let shared = a
        .bridges
        .iter()
        .zip(&b.bridges)
        .take_while(|(x, y)| x == y)
        .count();
    if shared == 0 {
        return Link::Phb;
    }
    // Below the deepest shared bridge each side crosses one switch per upstream port; if
    // that shared bridge is itself an upstream port, the path turns inside its switch.
    let upstream_below = |chain: &[String]| (shared..chain.len()).filter(|i| i % 2 == 1).count();
    let turn = usize::from((shared - 1) % 2 == 1);
    let switches = turn + upstream_below(&a.bridges) + upstream_below(&b.bridges);
    if switches <= 1 { Link::Pix } else { Link::Pxb }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(host: &str, bridges: &[&str], numa: Option<u32>) -> Placement {
        Placement {
            host_bridge: host.to_string(),
            bridges: bridges.iter().map(|b| b.to_string()).collect(),
            numa_node: numa,
        }
    }

    const RP: &str = "0000:40:00.0";
    const UP: &str = "0000:41:00.0";
    const DN_A: &str = "0000:42:00.0";
    const DN_B: &str = "0000:42:01.0";
    const DN_C: &str = "0000:42:02.0";
    const UP2: &str = "0000:45:00.0";
    const DN2_A: &str = "0000:46:00.0";
    const DN2_B: &str = "0000:46:01.0";

    #[test]
    fn two_downstream_ports_of_one_switch_are_pix() {
        let a = at("pci0000:40", &[RP, UP, DN_A], Some(0));
        let b = at("pci0000:40", &[RP, UP, DN_B], Some(0));
        assert_eq!(classify(&a, &b), Link::Pix);
        assert_eq!(classify(&b, &a), Link::Pix);
    }

    #[test]
    fn functions_of_one_device_are_pix() {
        // a dual-port NIC: both functions under the same downstream port, no switch crossed
        let a = at("pci0000:40", &[RP, UP, DN_A], Some(0));
        assert_eq!(classify(&a, &a.clone()), Link::Pix);
        let r = at("pci0000:40", &[RP], Some(0));
        assert_eq!(classify(&r, &r.clone()), Link::Pix);
    }

    #[test]
    fn a_nested_switch_makes_pxb_and_its_own_ports_pix() {
        let top = at("pci0000:40", &[RP, UP, DN_A], Some(0));
        let deep_a = at("pci0000:40", &[RP, UP, DN_C, UP2, DN2_A], Some(0));
        let deep_b = at("pci0000:40", &[RP, UP, DN_C, UP2, DN2_B], Some(0));
        assert_eq!(classify(&top, &deep_a), Link::Pxb);
        assert_eq!(classify(&deep_a, &top), Link::Pxb);
        assert_eq!(classify(&deep_a, &deep_b), Link::Pix);
    }

    #[test]
    fn two_root_ports_of_one_host_bridge_are_phb() {
        let a = at("pci0000:40", &[RP, UP, DN_A], Some(0));
        let b = at("pci0000:40", &["0000:40:01.0"], Some(0));
        assert_eq!(classify(&a, &b), Link::Phb);
        let on_root_bus = at("pci0000:40", &[], Some(0));
        assert_eq!(classify(&a, &on_root_bus), Link::Phb);
    }

    #[test]
    fn host_bridges_on_one_node_are_node_else_sys() {
        let a = at("pci0000:40", &[RP], Some(0));
        assert_eq!(
            classify(&a, &at("pci0000:60", &["0000:60:00.0"], Some(0))),
            Link::Node
        );
        assert_eq!(
            classify(&a, &at("pci0000:80", &["0000:80:00.0"], Some(1))),
            Link::Sys
        );
    }

    #[test]
    fn an_unknown_node_across_host_bridges_is_sys() {
        let a = at("pci0000:40", &[RP], None);
        let b = at("pci0000:60", &["0000:60:00.0"], None);
        assert_eq!(classify(&a, &b), Link::Sys);
        // under one host bridge the node does not matter
        let c = at("pci0000:40", &["0000:40:01.0"], None);
        assert_eq!(classify(&a, &c), Link::Phb);
    }

    #[test]
    fn classes_order_nearest_first() {
        assert!(Link::Pix < Link::Pxb && Link::Pxb < Link::Phb);
        assert!(Link::Phb < Link::Node && Link::Node < Link::Sys);
    }
}
