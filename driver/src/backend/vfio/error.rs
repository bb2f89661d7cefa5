//! The errors of the VFIO backend: each names the device, what failed, why, and the fix.
//!
//! Owns: [`VfioError`] (opening and driving a device) and [`DmaBufRefusal`] (why a dma-buf
//! is not mapped; the seam sees it as `BackendError::DmaBuf` through
//! [`DmaBufRefusal::into_backend`]). Must not: decide policy (the caller chooses to retry or
//! give up), or probe the machine (the refusal carries what `iommufd::IommufdProbe` found).
//!
//! The dma-buf reasons follow `drivers/vfio/vfio_iommu_type1.c` (`vaddr_get_pfns`: a
//! `VM_PFNMAP` mapping of ordinary RAM cannot be pinned, EFAULT), `include/uapi/linux/
//! iommufd.h` (`IOMMU_IOAS_MAP_FILE`) and `drivers/iommu/iommufd/pages.c` (from Linux 6.19 a
//! dma-buf is imported only from vfio-pci's exporter, EOPNOTSUPP otherwise). For memory no
//! mainline IOMMU path imports (CUDA's `nv_dmabuf`), the kernel's own RDMA stack is the
//! route: rdma-core `ibv_reg_dmabuf_mr` on `mlx5_ib` (`drivers/infiniband/core/umem_dmabuf.c`),
//! or NVIDIA's `nvidia-peermem`.
//!
//! Each Display is whole: what was refused, why, and the fix.

use std::path::PathBuf;

use nix::errno::Errno;

use crate::backend::BackendError;

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

/// The fact every "cannot import" refusal starts from.
fn no_type1_import(exporter: &str) -> String {
    format!(
        "the VFIO type1 container has no dma-buf import (VFIO_IOMMU_MAP_DMA pins process memory, and a {exporter} buffer has no CPU mapping to pin)"
    )
}

/// Where the memory can be reached instead, by exporter.
fn elsewhere(exporter: &str) -> &'static str {
    if exporter == "nv_dmabuf" {
        "; nv_dmabuf import into an IOMMU is on no mainline kernel: for CUDA memory the kernel path is mlx5_ib with rdma-core's ibv_reg_dmabuf_mr, or nvidia-peermem"
    } else {
        "; the kernel's RDMA stack imports it instead (mlx5_ib with rdma-core's ibv_reg_dmabuf_mr)"
    }
}

/// Why the VFIO backend does not map a dma-buf (or a piece of one).
///
/// The reasons that depend on the machine carry what was found there (whether `/dev/iommu`
/// exists, the kernel release), so the message states this machine's case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DmaBufRefusal {
    /// The dma-buf's own mmap is `VM_PFNMAP`; type1 refuses to pin it (EFAULT).
    #[error(
        "type1 cannot map a VM_PFNMAP dma-buf mapping: pass the udmabuf's backing memfd (DmaBufSlice::backing: the memfd given to UDMABUF_CREATE, at its offset); a buffer with no memfd behind it (a dma-heap's) cannot be mapped: allocate the memory as a memfd and wrap it in a udmabuf, or register the memfd itself. VFIO_IOMMU_MAP_DMA of the {exporter} buffer's mmap failed with EFAULT (vfio_iommu_type1.c vaddr_get_pfns cannot pin RAM mapped by PFN)"
    )]
    Type1Pfnmap {
        /// The exporter's name.
        exporter: String,
    },
    /// Only iommufd could import it, and this machine has no `/dev/iommu`.
    #[error(
        "{}; iommufd's IOMMU_IOAS_MAP_FILE could import one, but /dev/iommu does not exist on this machine (kernel {release}: it needs CONFIG_IOMMUFD and the iommufd module), and it takes a dma-buf only from Linux 6.19 and only from vfio-pci's exporter{}",
        no_type1_import(exporter),
        elsewhere(exporter)
    )]
    NoIommufd {
        /// The exporter's name.
        exporter: String,
        /// The kernel release.
        release: String,
    },
    /// `/dev/iommu` exists but the kernel's iommufd takes no dma-buf.
    #[error(
        "{}; /dev/iommu exists, but kernel {release} is older than Linux 6.19, the first whose IOMMU_IOAS_MAP_FILE takes a dma-buf (and then only vfio-pci's){}",
        no_type1_import(exporter),
        elsewhere(exporter)
    )]
    KernelTooOld {
        /// The exporter's name.
        exporter: String,
        /// The kernel release.
        release: String,
    },
    /// iommufd is there and new enough, but imports no dma-buf of this exporter.
    #[error(
        "{}; iommufd's IOMMU_IOAS_MAP_FILE takes a dma-buf only from vfio-pci's exporter and answers EOPNOTSUPP for {exporter}{}",
        no_type1_import(exporter),
        elsewhere(exporter)
    )]
    NotImportable {
        /// The exporter's name.
        exporter: String,
    },
    /// iommufd on this kernel could import it; the VFIO backend uses a type1 container.
    #[error(
        "{}; this kernel's iommufd could import it (IOMMU_IOAS_MAP_FILE of a vfio-pci dma-buf), but bypass's VFIO backend uses a type1 container and has no iommufd path: reach that device's memory through the device itself (its BAR through VfioBackend), or through the kernel's RDMA stack (mlx5_ib, ibv_reg_dmabuf_mr)",
        no_type1_import(exporter)
    )]
    NeedsIommufd {
        /// The exporter's name.
        exporter: String,
    },
    /// A backing memfd was given for a dma-buf that is not a udmabuf.
    #[error(
        "a backing memfd stands for a udmabuf's pages, and this dma-buf is from {exporter}: mapping the memfd would map other memory than the dma-buf's. Pass no backing for it"
    )]
    BackingNotUdmabuf {
        /// The exporter's name.
        exporter: String,
    },
    /// The slice or the IOVA is not one the backend can map.
    #[error("{what}: {fix}")]
    BadSlice {
        /// What is wrong.
        what: String,
        /// The fix.
        fix: &'static str,
    },
    /// `mmap` of the memfd or the dma-buf failed.
    #[error(
        "mmap of {what} ({len:#x} bytes at offset {offset:#x}, shared, read-write) failed: {errno}. Check that the fd is open read-write and the range lies inside the file (a udmabuf's memfd must be at least offset + size long)"
    )]
    Mmap {
        /// `the backing memfd` or `the dma-buf`.
        what: &'static str,
        /// Offset in that file.
        offset: u64,
        /// Bytes.
        len: usize,
        /// The errno.
        errno: Errno,
    },
    /// `VFIO_IOMMU_MAP_DMA` of the mapped memory failed for another reason than EFAULT.
    #[error("VFIO_IOMMU_MAP_DMA of the mapped {what} failed: {errno}{hint}")]
    MapDma {
        /// `backing memfd` or `dma-buf`.
        what: &'static str,
        /// The errno.
        errno: Errno,
        /// What the errno means here, with the fix (empty when there is nothing to add).
        hint: &'static str,
    },
    /// The container refused the map without an errno of its own.
    #[error(
        "VFIO_IOMMU_MAP_DMA failed: {detail}. Check that the VFIO container is still open, and dmesg for the kernel's view"
    )]
    Container {
        /// The vfio-ioctls error.
        detail: String,
    },
    /// Pinning would exceed `RLIMIT_MEMLOCK` (becomes `BackendError::MemlockLimit`).
    #[error(
        "pinning {needed} bytes would exceed RLIMIT_MEMLOCK ({limit} bytes, {locked} locked already): raise `ulimit -l`, or run with CAP_IPC_LOCK"
    )]
    Memlock {
        /// Bytes this mapping pins.
        needed: u64,
        /// Bytes locked already.
        locked: u64,
        /// The soft limit.
        limit: u64,
    },
}

impl DmaBufRefusal {
    /// The seam's error for this refusal of `len` bytes at `iova` on device `bdf`:
    /// `BackendError::MemlockLimit` for [`DmaBufRefusal::Memlock`], else
    /// `BackendError::DmaBuf` whose reason is this Display.
    pub fn into_backend(self, bdf: &str, iova: u64, len: usize, exporter: &str) -> BackendError {
        match self {
            Self::Memlock {
                needed,
                locked,
                limit,
            } => BackendError::MemlockLimit {
                needed,
                locked,
                limit,
            },
            other => BackendError::DmaBuf {
                iova,
                len,
                exporter: exporter.to_owned(),
                reason: format!("{bdf} (VFIO): {other}"),
            },
        }
    }
}

/// What `VFIO_IOMMU_MAP_DMA`'s errno means for a dma-buf or memfd mapping: EFAULT on the
/// dma-buf's own mmap is the `VM_PFNMAP` refusal; anything else keeps its errno with a hint.
pub fn classify_map_errno(errno: Errno, what: &'static str, exporter: &str) -> DmaBufRefusal {
    let hint = match errno {
        Errno::EFAULT if what == "dma-buf" => {
            return DmaBufRefusal::Type1Pfnmap {
                exporter: exporter.to_owned(),
            };
        }
        Errno::EFAULT => {
            " — the kernel could not pin the memfd's pages: is the memfd large enough (a hole past its end faults) and not sealed against writes?"
        }
        Errno::ENOMEM => {
            " — the kernel refused to pin the pages: raise RLIMIT_MEMLOCK (`ulimit -l`), or the container's mapping limit (vfio_iommu_type1 dma_entry_limit) is reached"
        }
        Errno::EEXIST => {
            " — the IOVA range overlaps an existing mapping: unmap it first or pick another IOVA"
        }
        Errno::EINVAL => {
            " — the IOVA is outside the IOMMU's apertures or not aligned to its page size"
        }
        _ => "",
    };
    DmaBufRefusal::MapDma { what, errno, hint }
}
