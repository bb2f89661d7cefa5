//! Reading the PCI functions that matter to GPUDirect RDMA out of a sysfs tree.
//!
//! Owns: walking `ROOT/sys/bus/pci/devices`, keeping NICs (vendor 0x15b3, class 0x02xxxx,
//! whatever driver holds them, vfio-pci included) and GPUs (vendor 0x10de, class 0x03xxxx),
//! and each one's place: host bridge and bridge chain from its resolved device link, numa_node,
//! local_cpulist, driver; and the NUMA nodes' cpulists; and the one parser of the kernel's
//! cpulist format ([`parse_cpulist`], [`format_cpulist`]), which `perf --cpu` uses too.
//! Must not classify or print.
//! Sources: the kernel's sysfs PCI layout: `bus/pci/devices/BDF` is a link to
//! `devices/pciDDDD:BB/<root port>/<switch up>/<switch down>/…/BDF` (topology.md); a
//! `numa_node` of -1 means the firmware gave no proximity information.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The most bytes read from one sysfs attribute (they are a line; this bounds a bad tree).
const MAX_ATTR: u64 = 4096;
/// The most PCI functions read (a real machine has a few hundred).
const MAX_FUNCTIONS: usize = 65536;
/// The most NUMA nodes listed (Linux's MAX_NUMNODES is at most 1024).
const MAX_NODES: u32 = 1024;

/// PCI vendor ID of Mellanox/NVIDIA networking (ConnectX).
pub const MELLANOX: u16 = 0x15b3;
/// PCI vendor ID of NVIDIA GPUs.
pub const NVIDIA: u16 = 0x10de;

/// Why the tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The PCI device directory cannot be listed.
    #[error(
        "cannot list {path}: {source}; --sysfs must name a root holding sys/bus/pci/devices \
         (`/` on Linux, or a tree copied by scripts/guest/jobs/topo-capture.sh)"
    )]
    ListDevices {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A file the report needs cannot be read.
    #[error("cannot read {path}: {source}; the tree is incomplete (copy it again, links as links)")]
    Read {
        /// The file or link.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A file holds something sysfs never writes there.
    #[error("{path} holds {text:?}, not {expected}; the tree is not a sysfs copy")]
    Parse {
        /// The file or link.
        path: PathBuf,
        /// What it holds.
        text: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A device entry is a directory or file where sysfs has a link.
    #[error(
        "{path} is not a symbolic link: sysfs links each device to its place under \
         sys/devices; copy the tree keeping links (cp -a, or jobs/topo-capture.sh)"
    )]
    NotALink {
        /// The entry.
        path: PathBuf,
    },
    /// More PCI functions than any machine has.
    #[error("{path} lists over {MAX_FUNCTIONS} functions; that is not a sysfs tree")]
    TooMany {
        /// The directory.
        path: PathBuf,
    },
}

/// What a kept function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A Mellanox network function.
    Nic,
    /// An NVIDIA display/3D controller.
    Gpu,
}

/// Where a function sits, which is all classification needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The host bridge, as sysfs names it: `pciDDDD:BB`.
    pub host_bridge: String,
    /// The bridges from the host bridge down to the function, root port first (BDFs).
    pub bridges: Vec<String>,
    /// `numa_node`; `None` when it is -1 or absent (unknown).
    pub numa_node: Option<u32>,
}

/// One NIC or GPU function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciFunction {
    /// `DDDD:BB:DD.F`.
    pub bdf: String,
    /// NIC or GPU.
    pub kind: Kind,
    /// PCI vendor and device IDs.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// Its place in the tree.
    pub place: Placement,
    /// `local_cpulist` (the CPUs nearest it), if present.
    pub local_cpus: Option<String>,
    /// The bound driver's name (`driver` link), if any.
    pub driver: Option<String>,
}

/// The NICs and GPUs of a tree, each in BDF order, and the NUMA nodes' cpulists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    /// The NICs.
    pub nics: Vec<PciFunction>,
    /// The GPUs.
    pub gpus: Vec<PciFunction>,
    /// `(node, cpulist)` for each `sys/devices/system/node/nodeN`.
    pub nodes: Vec<(u32, String)>,
}

/// Reads the NICs and GPUs under `root` (`/` or a captured tree).
pub fn read_tree(root: &Path) -> Result<Tree, TopoError> {
    let dir = root.join("sys/bus/pci/devices");
    let entries = fs::read_dir(&dir).map_err(|source| TopoError::ListDevices {
        path: dir.clone(),
        source,
    })?;
    let mut names = Vec::new();
    for e in entries {
        let e = e.map_err(|source| TopoError::ListDevices {
            path: dir.clone(),
            source,
        })?;
        if names.len() == MAX_FUNCTIONS {
            return Err(TopoError::TooMany { path: dir });
        }
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    let mut tree = Tree::default();
    for bdf in names {
        let path = dir.join(&bdf);
        let vendor = hex_attr(&path.join("vendor"))? as u16;
        let class = hex_attr(&path.join("class"))?;
        let kind = match (vendor, class >> 16) {
            (MELLANOX, 0x02) => Kind::Nic,
            (NVIDIA, 0x03) => Kind::Gpu,
            _ => continue,
        };
        let function = PciFunction {
            device: hex_attr(&path.join("device"))? as u16,
            place: placement(&path, &bdf)?,
            local_cpus: optional_attr(&path.join("local_cpulist"))?,
            driver: driver(&path)?,
            bdf,
            kind,
            vendor,
        };
        match kind {
            Kind::Nic => tree.nics.push(function),
            Kind::Gpu => tree.gpus.push(function),
        }
    }
    tree.nodes = nodes(root)?;
    Ok(tree)
}

/// The function's place from its `bus/pci/devices` link and `numa_node`. The last `pci…`
/// component is the host bridge (a VMD domain nests one under a device: its own devices then
/// hang off that one); the BDF components after it are the bridges, then the function.
fn placement(link: &Path, bdf: &str) -> Result<Placement, TopoError> {
    let target = fs::read_link(link).map_err(|source| match source.kind() {
        io::ErrorKind::InvalidInput => TopoError::NotALink {
            path: link.to_path_buf(),
        },
        _ => TopoError::Read {
            path: link.to_path_buf(),
            source,
        },
    })?;
    let text = target.to_string_lossy();
    let parts: Vec<&str> = text.split('/').collect();
    let bad = |expected| TopoError::Parse {
        path: link.to_path_buf(),
        text: text.clone().into_owned(),
        expected,
    };
    let host = parts
        .iter()
        .rposition(|p| is_host_bridge(p))
        .ok_or_else(|| bad("a path through a host bridge pciDDDD:BB"))?;
    let chain: Vec<String> = parts[host + 1..].iter().map(|p| p.to_string()).collect();
    if chain.last().map(String::as_str) != Some(bdf) || !chain.iter().all(|p| is_bdf(p)) {
        return Err(bad(
            "pciDDDD:BB/BDF/…/BDF ending in the function's own address",
        ));
    }
    let numa_path = link.join("numa_node");
    let numa_node = match optional_attr(&numa_path)? {
        None => None,
        Some(t) => match t.parse::<i64>() {
            Ok(-1) => None,
            Ok(n) if (0..MAX_NODES as i64).contains(&n) => Some(n as u32),
            _ => {
                return Err(TopoError::Parse {
                    path: numa_path,
                    text: t,
                    expected: "a NUMA node number or -1",
                });
            }
        },
    };
    Ok(Placement {
        host_bridge: parts[host].to_string(),
        bridges: chain[..chain.len() - 1].to_vec(),
        numa_node,
    })
}

/// `pciDDDD:BB` (the domain may be wider than four digits, as VMD's 10000 is).
fn is_host_bridge(s: &str) -> bool {
    s.strip_prefix("pci").is_some_and(|rest| {
        rest.split_once(':')
            .is_some_and(|(d, b)| d.len() >= 4 && b.len() == 2 && is_hex(d) && is_hex(b))
    })
}

/// `DDDD:BB:DD.F`.
fn is_bdf(s: &str) -> bool {
    let mut it = s.split(':');
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(d), Some(b), Some(df), None) => {
            d.len() >= 4
                && is_hex(d)
                && b.len() == 2
                && is_hex(b)
                && df
                    .split_once('.')
                    .is_some_and(|(dv, f)| dv.len() == 2 && is_hex(dv) && f.len() == 1 && is_hex(f))
        }
        _ => false,
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// The bound driver's name, from the `driver` link's last component (the copy's link may
/// dangle: only its text matters).
fn driver(dev: &Path) -> Result<Option<String>, TopoError> {
    let link = dev.join("driver");
    match fs::read_link(&link) {
        Ok(t) => Ok(t.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TopoError::Read { path: link, source }),
    }
}

/// `(N, cpulist)` of each `nodeN`, by node number; none when the directory is missing (a
/// kernel without NUMA).
fn nodes(root: &Path) -> Result<Vec<(u32, String)>, TopoError> {
    let dir = root.join("sys/devices/system/node");
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(TopoError::Read { path: dir, source }),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|source| TopoError::Read {
            path: dir.clone(),
            source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(n) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if n >= MAX_NODES {
            continue;
        }
        if let Some(cpus) = optional_attr(&e.path().join("cpulist"))? {
            out.push((n, cpus));
        }
    }
    out.sort();
    Ok(out)
}

/// The largest CPU number a cpulist may name, plus one (glibc's `CPU_SETSIZE`, the size of
/// the set `sched_setaffinity` takes through nix).
pub const MAX_CPUS: u32 = 1024;

/// The CPUs of a kernel cpulist (`0-3,8-11`, `5`, or empty for none), ascending and without
/// repeats; `None` when the text is not a cpulist or names a CPU at or past [`MAX_CPUS`].
/// The format is `bitmap_print_to_pagebuf`'s list form (lib/bitmap.c), which is what sysfs
/// writes: comma-separated numbers and `a-b` ranges with `a <= b`.
pub fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    let cpu = |t: &str| {
        t.parse::<u32>()
            .ok()
            .filter(|&c| c < MAX_CPUS && t.bytes().all(|b| b.is_ascii_digit()))
    };
    for part in text.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (cpu(a)?, cpu(b)?),
            None => (cpu(part)?, cpu(part)?),
        };
        if a > b {
            return None;
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// `cpus` (ascending) in the cpulist form: runs of consecutive CPUs as `a-b`.
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(&start) = cpus.get(i) {
        let mut end = start;
        while cpus
            .get(i + 1)
            .is_some_and(|&n| Some(n) == end.checked_add(1))
        {
            i += 1;
            end = cpus[i];
        }
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// An attribute written as `0x…` hex.
fn hex_attr(path: &Path) -> Result<u32, TopoError> {
    let text = read_attr(path)?;
    text.strip_prefix("0x")
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or(TopoError::Parse {
            path: path.to_path_buf(),
            text,
            expected: "a 0x-prefixed hex number",
        })
}

/// An attribute that may be absent.
fn optional_attr(path: &Path) -> Result<Option<String>, TopoError> {
    match read_attr(path) {
        Ok(t) => Ok(Some(t)),
        Err(TopoError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// One attribute's text, trimmed, at most MAX_ATTR bytes.
fn read_attr(path: &Path) -> Result<String, TopoError> {
    let read = || -> io::Result<String> {
        let mut s = String::new();
        fs::File::open(path)?
            .take(MAX_ATTR)
            .read_to_string(&mut s)?;
        Ok(s.trim().to_string())
    };
    read().map_err(|source| TopoError::Read {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_recognised_by_form() {
        assert!(is_host_bridge("pci0000:40"));
        assert!(is_host_bridge("pci10000:e0"));
        assert!(!is_host_bridge("pci_express"));
        assert!(is_bdf("0000:43:00.0"));
        assert!(!is_bdf("0000:43:00"));
        assert!(!is_bdf("pci0000:40"));
    }

    #[test]
    fn cpulists_parse_in_order_and_bad_ones_are_refused() {
        assert_eq!(
            parse_cpulist("0-3,8-11\n"),
            Some(vec![0, 1, 2, 3, 8, 9, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("7,1-2,2"), Some(vec![1, 2, 7]));
        assert_eq!(parse_cpulist("1023"), Some(vec![1023]));
        for bad in ["1024", "3-1", "a", "1,,2", "-1", "1-", "+1", "0-3:2", "1 2"] {
            assert_eq!(parse_cpulist(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cpulists_format_runs_as_ranges() {
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 9, 10, 11]), "0-3,8-11");
        assert_eq!(format_cpulist(&[0]), "0");
        assert_eq!(format_cpulist(&[1, 3, 4]), "1,3-4");
        assert_eq!(format_cpulist(&[]), "");
        let text = "0-1,4,6-9";
        assert_eq!(format_cpulist(&parse_cpulist(text).unwrap()), text);
    }
}
