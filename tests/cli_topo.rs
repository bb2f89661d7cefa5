//! `bypass topo` on sysfs trees: the fixture captured from the QEMU guest built by
//! `scripts/guest/run-guest.sh --topo numa2` (IDs rewritten by scripts/topo-fixture.sh), and
//! small trees built here for the cases that fixture lacks (a GPU with no NIC on its node, no
//! GPU, no device, a broken tree).

mod cli_support;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cli_support::bypass;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topo/numa2");

/// Every NIC–GPU pair of the numa2 guest and its class, from how run-guest.sh builds it:
/// pci0000:00 (no NUMA node): root port > NIC 01:00.0.
/// pci0000:40 (node 0): root port 40:00.0 > switch 41 > ports 42:00 (NIC 43:00.0), 42:01
///   (GPU 44:00.0), 42:02 > switch 45 > ports 46:00 (GPU 47:00.0), 46:01 (NIC 48:00.0);
///   root port 40:01.0 > GPU 49:00.0.
/// pci0000:60 (node 0): root port > GPU 61:00.0.
/// pci0000:80 (node 1): root port 80:00.0 > NIC 81:00.0; root port 80:01.0 > GPU 82:00.0.
const PAIRS: &[(&str, &str, &str)] = &[
    // NIC on pcie.0 with numa_node -1: every other host bridge is SYS (node unknown)
    ("0000:01:00.0", "0000:44:00.0", "SYS"),
    ("0000:01:00.0", "0000:47:00.0", "SYS"),
    ("0000:01:00.0", "0000:49:00.0", "SYS"),
    ("0000:01:00.0", "0000:61:00.0", "SYS"),
    ("0000:01:00.0", "0000:82:00.0", "SYS"),
    // NIC on the top switch
    ("0000:43:00.0", "0000:44:00.0", "PIX"), // two ports of one switch
    ("0000:43:00.0", "0000:47:00.0", "PXB"), // top switch, then the nested one
    ("0000:43:00.0", "0000:49:00.0", "PHB"), // other root port, same host bridge
    ("0000:43:00.0", "0000:61:00.0", "NODE"), // other host bridge, node 0 both
    ("0000:43:00.0", "0000:82:00.0", "SYS"), // node 0 to node 1
    // NIC on the nested switch
    ("0000:48:00.0", "0000:44:00.0", "PXB"),
    ("0000:48:00.0", "0000:47:00.0", "PIX"),
    ("0000:48:00.0", "0000:49:00.0", "PHB"),
    ("0000:48:00.0", "0000:61:00.0", "NODE"),
    ("0000:48:00.0", "0000:82:00.0", "SYS"),
    // NIC on node 1
    ("0000:81:00.0", "0000:44:00.0", "SYS"),
    ("0000:81:00.0", "0000:47:00.0", "SYS"),
    ("0000:81:00.0", "0000:49:00.0", "SYS"),
    ("0000:81:00.0", "0000:61:00.0", "SYS"),
    ("0000:81:00.0", "0000:82:00.0", "PHB"),
];

fn topo(root: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["topo", "--sysfs", root.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    bypass(&args)
}

#[test]
fn pairs_of_the_numa2_guest_are_classified_as_built() {
    let (code, out, err) = topo(Path::new(FIXTURE), &["--pairs"]);
    assert_eq!(code, 0, "{err}");
    let want: Vec<String> = PAIRS
        .iter()
        .map(|(n, g, c)| format!("{n} {g} {c}"))
        .collect();
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got, want, "--pairs must print exactly one line per pair");
    for class in ["PIX", "PXB", "PHB", "NODE", "SYS"] {
        assert!(
            got.iter().any(|l| l.ends_with(&format!(" {class}"))),
            "no {class}"
        );
    }
}

#[test]
fn the_matrix_agrees_with_the_pairs_and_has_the_legend() {
    let (code, out, err) = topo(Path::new(FIXTURE), &[]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let head: Vec<&str> = lines[0].split_whitespace().collect();
    let names = [
        "NIC0", "NIC1", "NIC2", "NIC3", "GPU0", "GPU1", "GPU2", "GPU3", "GPU4",
    ];
    assert_eq!(head, names);
    let nics = [
        "0000:01:00.0",
        "0000:43:00.0",
        "0000:48:00.0",
        "0000:81:00.0",
    ];
    let gpus = [
        "0000:44:00.0",
        "0000:47:00.0",
        "0000:49:00.0",
        "0000:61:00.0",
        "0000:82:00.0",
    ];
    let cell = |r: usize, c: usize| lines[1 + r].split_whitespace().nth(1 + c).unwrap_or("");
    for (r, nic) in nics.iter().enumerate() {
        assert!(lines[1 + r].starts_with(names[r]), "{}", lines[1 + r]);
        assert_eq!(cell(r, r), "X");
        for (g, gpu) in gpus.iter().enumerate() {
            let want = PAIRS
                .iter()
                .find(|(n, p, _)| n == nic && p == gpu)
                .expect("pair")
                .2;
            assert_eq!(cell(r, 4 + g), want, "{nic} {gpu}");
            assert_eq!(cell(4 + g, r), want, "matrix symmetric at {gpu} {nic}");
        }
    }
    // GPU-GPU and NIC-NIC cells follow the same rule
    assert_eq!(cell(4, 5), "PXB"); // 44:00.0 - 47:00.0
    assert_eq!(cell(1, 2), "PXB"); // 43:00.0 - 48:00.0
    assert_eq!(cell(6, 7), "NODE"); // 49:00.0 - 61:00.0
    for class in [
        "X    = Self",
        "PIX  = ",
        "PXB  = ",
        "PHB  = ",
        "NODE = ",
        "SYS  = ",
    ] {
        assert!(out.contains(class), "legend lacks {class}: {out}");
    }
}

#[test]
fn numa_nodes_cpus_and_drivers_of_the_numa2_guest() {
    let (_, out, _) = topo(Path::new(FIXTURE), &[]);
    let line = |bdf: &str| {
        out.lines()
            .find(|l| l.trim_start().get(6..).is_some_and(|r| r.starts_with(bdf)))
            .unwrap_or_else(|| panic!("no device line for {bdf}: {out}"))
            .to_string()
    };
    assert!(line("0000:01:00.0").contains("NUMA unknown  CPUs 0-1"));
    let nic1 = line("0000:43:00.0");
    assert!(
        nic1.contains("15b3:101d  driver mlx5_core  NUMA 0  CPUs 0"),
        "{nic1}"
    );
    assert!(
        nic1.ends_with("via pci0000:40 > 0000:40:00.0 > 0000:41:00.0 > 0000:42:00.0"),
        "{nic1}"
    );
    assert!(line("0000:81:00.0").contains("driver vfio-pci  NUMA 1  CPUs 1"));
    assert!(line("0000:44:00.0").contains("10de:20b0  driver nvidia  NUMA 0  CPUs 0"));
    assert!(line("0000:82:00.0").contains("driver none  NUMA 1  CPUs 1"));
    assert!(out.contains("  node0 CPUs 0\n  node1 CPUs 1\n"), "{out}");
    assert!(out.contains("not CUDA's"), "{out}");
}

#[test]
fn warnings_of_the_numa2_guest_name_each_far_gpu_and_the_unknown_node() {
    let (_, out, _) = topo(Path::new(FIXTURE), &[]);
    let warnings: Vec<&str> = out
        .split_once("\nWarnings:\n")
        .expect("a warnings section")
        .1
        .lines()
        .collect();
    let starts = [
        "  GPU2 (0000:49:00.0) has no NIC under its PCIe switch: the nearest, NIC1 (0000:43:00.0), is PHB, so GPUDirect RDMA traffic crosses the host bridge;",
        "  GPU3 (0000:61:00.0) has no NIC under its PCIe switch: the nearest, NIC1 (0000:43:00.0), is NODE, so GPUDirect RDMA traffic crosses host bridges;",
        "  GPU4 (0000:82:00.0) has no NIC under its PCIe switch: the nearest, NIC3 (0000:81:00.0), is PHB,",
        "  NIC0 (0000:01:00.0): numa_node is -1 (unknown):",
    ];
    assert_eq!(warnings.len(), starts.len(), "{warnings:#?}");
    for (w, s) in warnings.iter().zip(starts) {
        assert!(w.starts_with(s), "{w}\n  wanted {s}");
    }
    assert!(
        warnings[0].contains("went from 50 to 95 Gb/s by moving the NIC under the GPU's switch")
    );
}

/// A throwaway sysfs tree under the target dir's tmp folder.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("topo-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("sys/bus/pci/devices")).expect("mkdir");
        Tree(root)
    }

    /// A function at `path` (`pciDDDD:BB/…/BDF`) with these IDs and node.
    fn add(&self, path: &str, vendor: &str, class: &str, numa: i32) -> &Self {
        let dir = self.0.join("sys/devices").join(path);
        fs::create_dir_all(&dir).expect("mkdir");
        for (f, v) in [("vendor", vendor), ("device", "0x0001"), ("class", class)] {
            fs::write(dir.join(f), format!("{v}\n")).expect("write");
        }
        fs::write(dir.join("numa_node"), format!("{numa}\n")).expect("write");
        fs::write(dir.join("local_cpulist"), "0-7\n").expect("write");
        let bdf = path.rsplit('/').next().expect("bdf");
        symlink(
            format!("../../../devices/{path}"),
            self.0.join("sys/bus/pci/devices").join(bdf),
        )
        .expect("link");
        self
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_gpu_with_no_nic_on_its_node_is_warned_about() {
    let t = Tree::new("sys");
    t.add(
        "pci0000:00/0000:00:01.0/0000:01:00.0",
        "0x15b3",
        "0x020000",
        0,
    )
    .add(
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        "0x10de",
        "0x030200",
        1,
    )
    .add(
        "pci0000:80/0000:80:02.0/0000:82:00.0",
        "0x10de",
        "0x040300",
        1,
    ); // GPU audio: skipped
    let (code, out, err) = topo(&t.0, &["--pairs"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "0000:01:00.0 0000:81:00.0 SYS\n"),
        "{err}"
    );
    let (_, out, _) = topo(&t.0, &[]);
    assert!(out.contains("is SYS, so GPUDirect RDMA traffic crosses host bridges and the interconnect between NUMA nodes"), "{out}");
    assert!(
        out.contains("GPU0 (0000:81:00.0) is on NUMA node 1 and no NIC is:"),
        "{out}"
    );
}

#[test]
fn nics_alone_give_their_matrix_and_say_no_gpu_was_found() {
    let t = Tree::new("nogpu");
    t.add(
        "pci0000:00/0000:00:01.0/0000:01:00.0",
        "0x15b3",
        "0x020000",
        0,
    )
    .add(
        "pci0000:00/0000:00:01.0/0000:01:00.1",
        "0x15b3",
        "0x020700",
        0,
    )
    .add(
        "pci0000:00/0000:00:02.0/0000:02:00.0",
        "0x8086",
        "0x020000",
        0,
    ); // not Mellanox
    let (code, out, _) = topo(&t.0, &[]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("      NIC0  NIC1\nNIC0  X     PIX\nNIC1  PIX   X\n"),
        "{out}"
    );
    assert!(out.contains("No NVIDIA GPU"), "{out}");
    let (_, pairs, _) = topo(&t.0, &["--pairs"]);
    assert_eq!(pairs, "");
}

#[test]
fn no_device_at_all_is_said_and_exits_zero() {
    let t = Tree::new("empty");
    let (code, out, _) = topo(&t.0, &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with("No Mellanox NIC"), "{out}");
}

#[test]
fn an_unreadable_tree_is_a_clear_error_naming_the_path() {
    let t = Tree::new("bad");
    let (code, _, err) = topo(&t.0.join("nothing"), &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("nothing/sys/bus/pci/devices") && err.contains("--sysfs must name"),
        "{err}"
    );
    // a device entry copied as a directory, not a link
    let dev = t.0.join("sys/bus/pci/devices/0000:01:00.0");
    fs::create_dir_all(&dev).expect("mkdir");
    fs::write(dev.join("vendor"), "0x15b3\n").expect("write");
    fs::write(dev.join("class"), "0x020000\n").expect("write");
    fs::write(dev.join("device"), "0x101d\n").expect("write");
    let (code, _, err) = topo(&t.0, &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("devices/0000:01:00.0 is not a symbolic link"),
        "{err}"
    );
}
