//! What this machine offers for importing a dma-buf into an IOMMU without the CPU: whether
//! `/dev/iommu` (iommufd) exists, and the kernel release, which decides what iommufd accepts.
//!
//! Owns: [`IommufdProbe`] (read once per refusal; nothing is opened) and the pure release
//! parser [`parse_release`]. Must not: open `/dev/iommu` or implement an iommufd backend — the
//! VFIO backend uses a type1 container, and the probe exists only so that a refusal can say
//! what the fix would need on this machine.
//!
//! Sources: `drivers/iommu/iommufd/main.c` (the `/dev/iommu` misc device),
//! `include/uapi/linux/iommufd.h` (`IOMMU_IOAS_MAP_FILE`, Linux 6.13: a memfd by file
//! descriptor), `drivers/iommu/iommufd/pages.c` (`iopt_map_file_pages`; from Linux 6.19 it
//! also takes a dma-buf, but only one exported by vfio-pci, `vfio_pci_dma_buf_iommufd_map`,
//! and answers EOPNOTSUPP for any other exporter).

use std::path::Path;

/// The first kernel whose `IOMMU_IOAS_MAP_FILE` exists (memfds only).
pub const MAP_FILE_SINCE: (u32, u32) = (6, 13);
/// The first kernel whose `IOMMU_IOAS_MAP_FILE` takes a dma-buf (vfio-pci's exporter only).
pub const DMABUF_IMPORT_SINCE: (u32, u32) = (6, 19);

/// iommufd on this machine, as far as a dma-buf import is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommufdProbe {
    /// Whether `/dev/iommu` exists.
    pub dev_iommu: bool,
    /// The kernel release (`/proc/sys/kernel/osrelease`), or `unknown` if unreadable.
    pub release: String,
}

impl IommufdProbe {
    /// Looks at this machine: `/dev/iommu` and `/proc/sys/kernel/osrelease`.
    pub fn current() -> Self {
        Self {
            dev_iommu: Path::new("/dev/iommu").exists(),
            release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".to_owned()),
        }
    }

    /// `(major, minor)` of [`IommufdProbe::release`], if it parses.
    pub fn version(&self) -> Option<(u32, u32)> {
        parse_release(&self.release)
    }

    /// True where the kernel is at least `(major, minor)`; false when the release does not
    /// parse (a refusal then names the release as it is).
    pub fn at_least(&self, want: (u32, u32)) -> bool {
        self.version().is_some_and(|v| v >= want)
    }
}

/// `(major, minor)` of a kernel release string (`6.12.95+deb12-amd64` → `(6, 12)`).
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_to_major_and_minor() {
        assert_eq!(parse_release("6.12.95+deb12-amd64"), Some((6, 12)));
        assert_eq!(parse_release("6.19.0-rc3"), Some((6, 19)));
        assert_eq!(parse_release("6.13"), Some((6, 13)));
        assert_eq!(parse_release("6.18.44-fc-v1045\n"), Some((6, 18)));
        assert_eq!(parse_release("unknown"), None);
        assert_eq!(parse_release("6"), None);
    }

    #[test]
    fn at_least_compares_versions_and_refuses_an_unknown_release() {
        let p = |r: &str| IommufdProbe {
            dev_iommu: true,
            release: r.to_owned(),
        };
        assert!(p("6.19.1").at_least(DMABUF_IMPORT_SINCE));
        assert!(p("7.0.0").at_least(DMABUF_IMPORT_SINCE));
        assert!(!p("6.18.44").at_least(DMABUF_IMPORT_SINCE));
        assert!(p("6.13.0").at_least(MAP_FILE_SINCE));
        assert!(!p("6.12.95").at_least(MAP_FILE_SINCE));
        assert!(!p("unknown").at_least(MAP_FILE_SINCE));
    }

    #[test]
    fn the_probe_reads_this_machine() {
        let p = IommufdProbe::current();
        assert_eq!(p.dev_iommu, Path::new("/dev/iommu").exists());
        assert_eq!(
            p.version(),
            parse_release(&std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap())
        );
    }
}
