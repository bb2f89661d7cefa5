//! The errors of the VFIO backend: each names the device, what failed, why, and the fix.
//!
//! Owns: [`VfioError`]. Must not: decide policy (the caller chooses to retry or give up).

use std::path::PathBuf;

/// One device in an IOMMU group and the driver it is bound to (for "group not viable").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// PCI address (`0000:00:03.0`).
    pub bdf: String,
    /// The bound driver, `None` when unbound.
    pub driver: Option<String>,
}

impl std::fmt::Display for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.driver {
            Some(d) => write!(f, "{} (bound to {d})", self.bdf),
            None => write!(f, "{} (no driver)", self.bdf),
        }
    }
}

fn list(members: &[GroupMember]) -> String {
    members
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Everything that can go wrong opening or driving a device through VFIO.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VfioError {
    /// The address is not a PCI address.
    #[error(
        "{0:?} is not a PCI address: give domain:bus:device.function, e.g. 0000:3b:00.0 (see `lspci -D`)"
    )]
    BadAddress(String),
    /// No such PCI device in sysfs.
    #[error(
        "there is no PCI device {bdf} ({path} does not exist): check the address with `lspci -D`"
    )]
    NoDevice {
        /// PCI address.
        bdf: String,
        /// The sysfs path looked at.
        path: PathBuf,
    },
    /// The device is bound to another driver (or none).
    #[error(
        "device {bdf} is {}, not to vfio-pci, so user space cannot drive it. Bind it (as root): `modprobe vfio-pci; echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override; {}echo {bdf} > /sys/bus/pci/drivers_probe`",
        match driver { Some(d) => format!("bound to {d}"), None => "bound to no driver".to_owned() },
        match driver { Some(_) => format!("echo {bdf} > /sys/bus/pci/devices/{bdf}/driver/unbind; "), None => String::new() }
    )]
    NotBoundToVfio {
        /// PCI address.
        bdf: String,
        /// The current driver, `None` when unbound.
        driver: Option<String>,
    },
    /// The device has no IOMMU group.
    #[error(
        "device {bdf} has no IOMMU group ({path} is missing): the IOMMU is off. Enable it in firmware (VT-d/AMD-Vi) and boot with `intel_iommu=on` (or `amd_iommu=on`)"
    )]
    NoIommuGroup {
        /// PCI address.
        bdf: String,
        /// The missing link.
        path: PathBuf,
    },
    /// Another device in the group is bound to a host driver.
    #[error(
        "IOMMU group {group} of {bdf} is not viable: every device in a group must be bound to vfio-pci (or to no driver) before any of them can be used. The group holds: {}. Unbind the others or bind them to vfio-pci too",
        list(members)
    )]
    GroupNotViable {
        /// PCI address asked for.
        bdf: String,
        /// Group number.
        group: u32,
        /// Every device in the group with its driver.
        members: Vec<GroupMember>,
    },
    /// A sysfs file could not be read.
    #[error("reading {path} failed: {source}")]
    Sysfs {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A vfio-ioctls call failed.
    #[error(
        "{op} for {bdf} failed: {source}. Check that /dev/vfio/ exists and is accessible (root or the vfio group; `modprobe vfio-pci` loads it), that no other process holds the group, and that the vfio_iommu_type1 module is loaded"
    )]
    Ioctls {
        /// What was being done.
        op: &'static str,
        /// PCI address.
        bdf: String,
        /// The crate's error.
        source: vfio_ioctls::VfioError,
    },
    /// A raw VFIO ioctl failed.
    #[error("{op} for {bdf} failed: {source}")]
    Ioctl {
        /// The ioctl.
        op: &'static str,
        /// PCI address.
        bdf: String,
        /// The errno.
        source: std::io::Error,
    },
    /// VFIO_IOMMU_GET_INFO returned a malformed capability chain.
    #[error("VFIO_IOMMU_GET_INFO returned a malformed capability chain: {0}")]
    BadCapChain(String),
    /// A region (BAR or config space) is missing or unusable.
    #[error("{bdf}: {what}")]
    Region {
        /// PCI address.
        bdf: String,
        /// What is wrong, with the consequence.
        what: String,
    },
    /// Config-space access through the device fd failed.
    #[error("{bdf}: {op} of PCI config space at {off:#x} failed: {source}")]
    Config {
        /// PCI address.
        bdf: String,
        /// `read` or `write`.
        op: &'static str,
        /// Offset in config space.
        off: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// Interrupt setup failed.
    #[error("{bdf}: setting up {what} failed: {reason}")]
    Irq {
        /// PCI address.
        bdf: String,
        /// MSI, MSI-X, eventfd.
        what: String,
        /// Why.
        reason: String,
    },
    /// The device cannot be reset.
    #[error(
        "{bdf}: VFIO_DEVICE_RESET {reason}; try a secondary bus reset or `echo 1 > /sys/bus/pci/devices/{bdf}/remove; echo 1 > /sys/bus/pci/rescan`"
    )]
    Reset {
        /// PCI address.
        bdf: String,
        /// Why.
        reason: String,
    },
}
