//! What sysfs says about a PCI device before VFIO is touched: its driver, its IOMMU group,
//! whether that group can be handed to user space, and where the device sits (its NUMA node
//! and the CPUs local to it).
//!
//! Owns: PCI address parsing and the read-only sysfs checks, against any root directory (so
//! the tests run them on a fake tree). Must not: open `/dev/vfio` or change any binding.
//! `numa_node` (`-1`: no proximity information) and `local_cpulist` are the kernel's
//! (`drivers/pci/pci-sysfs.c`, Documentation/ABI/testing/sysfs-bus-pci); the cpulist is
//! returned as text: the command-line tool parses it (`src/topo/sysfs.rs`).
//!
//! The viability rule follows the kernel: a group can be given to user space only when no
//! device in it is owned by a host driver that does DMA (`drivers/iommu/iommu.c`
//! `iommu_group_dma_owner_claimed`; drivers with `driver_managed_dma` such as `pci-stub` and
//! `pcieport` do not count, nor do unbound devices or vfio drivers).

use std::path::{Path, PathBuf};

use super::error::{GroupMember, VfioError};

/// The driver names a group member may be bound to without spoiling viability.
fn driver_allows_user_dma(driver: &str) -> bool {
    driver == "pci-stub" || driver == "pcieport" || is_vfio_driver(driver)
}

/// vfio-pci itself or a vendor variant of it (`mlx5_vfio_pci`).
fn is_vfio_driver(driver: &str) -> bool {
    driver == "vfio-pci" || driver.ends_with("vfio_pci") || driver.ends_with("vfio-pci")
}

/// Normalises a PCI address to `dddd:bb:dd.f` (lower case); a missing domain is `0000`.
pub fn parse_bdf(s: &str) -> Result<String, VfioError> {
    let bad = || VfioError::BadAddress(s.to_owned());
    let t = s.trim();
    let (domain, rest) = match t.matches(':').count() {
        1 => ("0000", t),
        2 => t.split_once(':').ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    let (bus, devfn) = rest.split_once(':').ok_or_else(bad)?;
    let (dev, func) = devfn.split_once('.').ok_or_else(bad)?;
    let hex = |x: &str, width: usize, max: u32| {
        (x.len() <= width && !x.is_empty())
            .then(|| u32::from_str_radix(x, 16).ok())
            .flatten()
            .filter(|&v| v <= max)
    };
    match (
        hex(domain, 4, 0xffff),
        hex(bus, 2, 0xff),
        hex(dev, 2, 0x1f),
        hex(func, 1, 7),
    ) {
        (Some(d), Some(b), Some(v), Some(f)) => Ok(format!("{d:04x}:{b:02x}:{v:02x}.{f:x}")),
        _ => Err(bad()),
    }
}

/// A sysfs tree (`/sys` on a real system, a temp dir in tests).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new("/sys")
    }
}

/// What the checks found for a device that can be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCheck {
    /// Normalised PCI address.
    pub bdf: String,
    /// IOMMU group number (`/dev/vfio/<group>`).
    pub group: u32,
    /// Every device in the group.
    pub members: Vec<GroupMember>,
}

impl Sysfs {
    /// A tree rooted at `root` (holding `bus/pci/devices` and `kernel/iommu_groups`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `<root>/bus/pci/devices/<bdf>`.
    pub fn device_dir(&self, bdf: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(bdf)
    }

    fn link_name(path: &Path) -> Result<Option<String>, VfioError> {
        match std::fs::read_link(path) {
            Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(VfioError::Sysfs {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// The driver `bdf` is bound to (`None` when unbound).
    pub fn driver(&self, bdf: &str) -> Result<Option<String>, VfioError> {
        Self::link_name(&self.device_dir(bdf).join("driver"))
    }

    /// A hex sysfs attribute such as `vendor` or `device` (`0x15b3`).
    pub fn hex_attr(&self, bdf: &str, name: &str) -> Result<u32, VfioError> {
        let path = self.device_dir(bdf).join(name);
        let text = std::fs::read_to_string(&path).map_err(|source| VfioError::Sysfs {
            path: path.clone(),
            source,
        })?;
        let t = text.trim();
        u32::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| VfioError::Sysfs {
            path,
            source: std::io::Error::other(format!("{t:?} is not a hex number")),
        })
    }

    /// One attribute's text, trimmed; `None` when the file does not exist.
    fn optional_attr(&self, bdf: &str, name: &str) -> Result<Option<String>, VfioError> {
        let path = self.device_dir(bdf).join(name);
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(Some(t.trim().to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(VfioError::Sysfs { path, source }),
        }
    }

    /// The NUMA node `bdf` is attached to (`numa_node`); `None` when the attribute is absent
    /// (a kernel without NUMA) or `-1` (the firmware gave no proximity information).
    pub fn numa_node(&self, bdf: &str) -> Result<Option<u32>, VfioError> {
        let Some(t) = self.optional_attr(bdf, "numa_node")? else {
            return Ok(None);
        };
        match t.parse::<i64>() {
            Ok(-1) => Some(None),
            Ok(n) => u32::try_from(n)
                .ok()
                .filter(|&n| n < crate::numa::MAX_NODES)
                .map(Some),
            Err(_) => None,
        }
        .ok_or_else(|| VfioError::Sysfs {
            path: self.device_dir(bdf).join("numa_node"),
            source: std::io::Error::other(format!("{t:?} is not a NUMA node number or -1")),
        })
    }

    /// [`Sysfs::numa_node`] for the backend: an unreadable attribute is logged and taken as
    /// unknown (placement is an optimisation; the device works without it).
    pub fn numa_node_or_unknown(&self, bdf: &str) -> Option<u32> {
        self.numa_node(bdf).unwrap_or_else(|e| {
            tracing::warn!(bdf, error = %e, "NUMA node unknown; DMA memory is not placed");
            None
        })
    }

    /// The CPUs local to `bdf` as the kernel lists them (`local_cpulist`, e.g. `0-3,8-11`);
    /// `None` when the attribute is absent.
    pub fn local_cpulist(&self, bdf: &str) -> Result<Option<String>, VfioError> {
        self.optional_attr(bdf, "local_cpulist")
    }

    /// The IOMMU group of `bdf`.
    pub fn iommu_group(&self, bdf: &str) -> Result<u32, VfioError> {
        let path = self.device_dir(bdf).join("iommu_group");
        let name = Self::link_name(&path)?.ok_or_else(|| VfioError::NoIommuGroup {
            bdf: bdf.to_owned(),
            path: path.clone(),
        })?;
        name.parse().map_err(|_| VfioError::Sysfs {
            path,
            source: std::io::Error::other(format!("group name {name:?} is not a number")),
        })
    }

    /// Every device in IOMMU group `group` with its driver, sorted by address.
    pub fn group_members(&self, group: u32) -> Result<Vec<GroupMember>, VfioError> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let entries = std::fs::read_dir(&dir).map_err(|source| VfioError::Sysfs {
            path: dir.clone(),
            source,
        })?;
        let mut members = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| VfioError::Sysfs {
                path: dir.clone(),
                source,
            })?;
            let bdf = entry.file_name().to_string_lossy().into_owned();
            let driver = Self::link_name(&entry.path().join("driver"))?;
            members.push(GroupMember { bdf, driver });
        }
        members.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        Ok(members)
    }

    /// Every check that can be made before opening `/dev/vfio`: the device exists, is bound
    /// to vfio-pci, has an IOMMU group, and no device in the group is held by a host driver.
    pub fn check(&self, addr: &str) -> Result<DeviceCheck, VfioError> {
        let bdf = parse_bdf(addr)?;
        let dir = self.device_dir(&bdf);
        if !dir.exists() {
            return Err(VfioError::NoDevice { bdf, path: dir });
        }
        let driver = self.driver(&bdf)?;
        if !driver.as_deref().is_some_and(is_vfio_driver) {
            return Err(VfioError::NotBoundToVfio { bdf, driver });
        }
        let group = self.iommu_group(&bdf)?;
        let members = self.group_members(group)?;
        let viable = members
            .iter()
            .all(|m| m.driver.as_deref().is_none_or(driver_allows_user_dma));
        if !viable {
            return Err(VfioError::GroupNotViable {
                bdf,
                group,
                members,
            });
        }
        Ok(DeviceCheck {
            bdf,
            group,
            members,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake `/sys` in a temp dir: devices, drivers and groups as symlinks, as the kernel
    /// lays them out.
    struct FakeSys {
        root: PathBuf,
    }

    impl FakeSys {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir()
                .join(format!("bypass-fake-sysfs-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            Self { root }
        }

        fn device(&self, bdf: &str, driver: Option<&str>, group: Option<u32>) {
            let real = self.root.join("devices/pci0000:00").join(bdf);
            std::fs::create_dir_all(&real).unwrap();
            std::fs::write(real.join("vendor"), "0x1234\n").unwrap();
            symlink(&real, self.root.join("bus/pci/devices").join(bdf)).unwrap();
            if let Some(d) = driver {
                let ddir = self.root.join("bus/pci/drivers").join(d);
                std::fs::create_dir_all(&ddir).unwrap();
                symlink(&ddir, real.join("driver")).unwrap();
            }
            if let Some(g) = group {
                let gdir = self.root.join("kernel/iommu_groups").join(g.to_string());
                std::fs::create_dir_all(gdir.join("devices")).unwrap();
                symlink(&gdir, real.join("iommu_group")).unwrap();
                symlink(&real, gdir.join("devices").join(bdf)).unwrap();
            }
        }

        fn sysfs(&self) -> Sysfs {
            Sysfs::new(&self.root)
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn pci_addresses_are_normalised_and_bad_ones_named() {
        assert_eq!(parse_bdf("0000:3B:00.1").unwrap(), "0000:3b:00.1");
        assert_eq!(parse_bdf("3b:00.1").unwrap(), "0000:3b:00.1");
        for bad in [
            "",
            "3b:00",
            "3b:20.0",
            "3b:00.8",
            "g0:00.0",
            "1:2:3:4.0",
            "00000:00:00.0",
        ] {
            let e = parse_bdf(bad).unwrap_err();
            assert!(e.to_string().contains("lspci -D"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_device_bound_to_vfio_in_its_own_group_passes() {
        let fs = FakeSys::new("bound");
        fs.device("0000:00:03.0", Some("vfio-pci"), Some(7));
        let c = fs.sysfs().check("00:03.0").unwrap();
        assert_eq!(c.group, 7);
        assert_eq!(c.bdf, "0000:00:03.0");
        assert_eq!(c.members.len(), 1);
        assert_eq!(
            fs.sysfs().hex_attr("0000:00:03.0", "vendor").unwrap(),
            0x1234
        );
    }

    #[test]
    fn a_device_on_another_driver_names_it_and_the_bind_commands() {
        let fs = FakeSys::new("other");
        fs.device("0000:00:03.0", Some("edu"), Some(7));
        let e = fs.sysfs().check("0000:00:03.0").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, VfioError::NotBoundToVfio { driver: Some(ref d), .. } if d == "edu"));
        assert!(msg.contains("bound to edu"), "{msg}");
        assert!(
            msg.contains("/sys/bus/pci/devices/0000:00:03.0/driver/unbind"),
            "{msg}"
        );
        assert!(
            msg.contains("driver_override") && msg.contains("drivers_probe"),
            "{msg}"
        );
    }

    #[test]
    fn an_unbound_device_says_so() {
        let fs = FakeSys::new("unbound");
        fs.device("0000:00:04.0", None, Some(8));
        let e = fs.sysfs().check("0000:00:04.0").unwrap_err();
        assert!(matches!(e, VfioError::NotBoundToVfio { driver: None, .. }));
        assert!(e.to_string().contains("bound to no driver"));
        assert!(!e.to_string().contains("unbind"));
    }

    #[test]
    fn a_missing_device_and_a_missing_group_are_named() {
        let fs = FakeSys::new("missing");
        let e = fs.sysfs().check("0000:00:09.0").unwrap_err();
        assert!(matches!(e, VfioError::NoDevice { .. }), "{e}");
        fs.device("0000:00:05.0", Some("vfio-pci"), None);
        let e = fs.sysfs().check("0000:00:05.0").unwrap_err();
        assert!(matches!(e, VfioError::NoIommuGroup { .. }), "{e}");
        assert!(e.to_string().contains("intel_iommu=on"));
    }

    #[test]
    fn a_group_with_a_host_driver_is_not_viable_and_lists_every_member() {
        let fs = FakeSys::new("notviable");
        fs.device("0000:01:00.0", Some("vfio-pci"), Some(3));
        fs.device("0000:01:00.1", Some("mlx5_core"), Some(3));
        fs.device("0000:01:00.2", None, Some(3));
        let e = fs.sysfs().check("0000:01:00.0").unwrap_err();
        let VfioError::GroupNotViable { group, members, .. } = &e else {
            panic!("expected GroupNotViable, got {e}");
        };
        assert_eq!(*group, 3);
        assert_eq!(members.len(), 3);
        let msg = e.to_string();
        assert!(msg.contains("0000:01:00.0 (bound to vfio-pci)"), "{msg}");
        assert!(msg.contains("0000:01:00.1 (bound to mlx5_core)"), "{msg}");
        assert!(msg.contains("0000:01:00.2 (no driver)"), "{msg}");
    }

    #[test]
    fn numa_node_and_local_cpus_are_read_and_minus_one_is_unknown() {
        let fs = FakeSys::new("numa");
        fs.device("0000:03:00.0", Some("vfio-pci"), Some(5));
        let sys = fs.sysfs();
        let dir = fs.root.join("devices/pci0000:00/0000:03:00.0");
        assert_eq!(sys.numa_node("0000:03:00.0").unwrap(), None, "absent");
        assert_eq!(sys.local_cpulist("0000:03:00.0").unwrap(), None);
        std::fs::write(dir.join("numa_node"), "1\n").unwrap();
        std::fs::write(dir.join("local_cpulist"), "8-15,24-31\n").unwrap();
        assert_eq!(sys.numa_node("0000:03:00.0").unwrap(), Some(1));
        assert_eq!(sys.numa_node_or_unknown("0000:03:00.0"), Some(1));
        assert_eq!(
            sys.local_cpulist("0000:03:00.0").unwrap().as_deref(),
            Some("8-15,24-31")
        );
        std::fs::write(dir.join("numa_node"), "-1\n").unwrap();
        assert_eq!(sys.numa_node("0000:03:00.0").unwrap(), None);
        for bad in ["node1", "-2", "4096"] {
            std::fs::write(dir.join("numa_node"), bad).unwrap();
            let e = sys.numa_node("0000:03:00.0").unwrap_err();
            assert!(
                e.to_string().contains("not a NUMA node number"),
                "{bad}: {e}"
            );
            assert_eq!(sys.numa_node_or_unknown("0000:03:00.0"), None);
        }
    }

    #[test]
    fn stub_bridge_and_unbound_members_keep_a_group_viable() {
        let fs = FakeSys::new("viable");
        fs.device("0000:02:00.0", Some("vfio-pci"), Some(4));
        fs.device("0000:02:00.1", Some("pci-stub"), Some(4));
        fs.device("0000:00:1c.0", Some("pcieport"), Some(4));
        fs.device("0000:02:00.2", None, Some(4));
        let c = fs.sysfs().check("0000:02:00.0").unwrap();
        assert_eq!(c.members.len(), 4);
    }
}
