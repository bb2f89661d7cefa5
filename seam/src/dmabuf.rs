//! A dma-buf as a device maps it: the file, who exported it, and the pages to map.
//!
//! Owns: [`DmaBufFile`] (a dma-buf fd with its size and exporter, read from
//! `/proc/self/fdinfo/FD` as the kernel's `dma_buf_show_fdinfo` writes it: `size:` and
//! `exp_name:` lines), [`Exporter`], [`MemfdRange`] (the memfd behind a udmabuf, when the
//! caller has it) and [`DmaBufSlice`] (what [`crate::DmaMap::map_dmabuf`] maps). Must not:
//! check libibverbs' registration rules (the driver does, before anything is mapped) or map
//! anything itself (each backend does, its own way: the sim by `mmap` or by copies, VFIO
//! through the backing memfd).
//!
//! Sources: `drivers/dma-buf/dma-buf.c` (`dma_buf_show_fdinfo`, `dma_buf_llseek`: `SEEK_END`
//! gives the size), `drivers/dma-buf/udmabuf.c` (exp_name `udmabuf`),
//! `drivers/dma-buf/heaps/system_heap.c` (`system`), NVIDIA's open kernel modules
//! (`nv_dmabuf`), `drivers/vfio/pci/vfio_pci_dmabuf.c` (`vfio-pci`, Linux ≥ 6.19).

use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::PeerMemory;

/// Who exported a dma-buf, which decides how a device can reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exporter {
    /// `udmabuf`: memfd pages; CPU-mappable; its backing memfd can be mapped instead.
    Udmabuf,
    /// `system` (the dma-heap system heap): CPU-mappable.
    SystemHeap,
    /// `nv_dmabuf`: CUDA memory; not CPU-mappable.
    Nvidia,
    /// `vfio-pci`: another device's BAR (Linux ≥ 6.19); not pinnable pages.
    VfioPci,
    /// Anything else, by its name.
    Other(String),
}

impl Exporter {
    /// From the `exp_name:` of fdinfo.
    pub fn from_name(name: &str) -> Self {
        match name {
            "udmabuf" => Self::Udmabuf,
            "system" => Self::SystemHeap,
            "nv_dmabuf" => Self::Nvidia,
            "vfio-pci" | "vfio_pci" => Self::VfioPci,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The exporter's name as fdinfo writes it.
    pub fn name(&self) -> &str {
        match self {
            Self::Udmabuf => "udmabuf",
            Self::SystemHeap => "system",
            Self::Nvidia => "nv_dmabuf",
            Self::VfioPci => "vfio-pci",
            Self::Other(n) => n,
        }
    }

    /// True where the exporter's buffers can be `mmap`ed by the CPU.
    pub fn cpu_mappable(&self) -> bool {
        matches!(self, Self::Udmabuf | Self::SystemHeap)
    }
}

impl fmt::Display for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `size:` and `exp_name:` of a dma-buf's fdinfo text, or `None` if the text is not a
/// dma-buf's (no `exp_name:` line).
pub fn parse_fdinfo(text: &str) -> Option<(u64, Exporter)> {
    let mut size = None;
    let mut name = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("size:") {
            size = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("exp_name:") {
            name = Some(v.trim().to_owned());
        }
    }
    Some((size?, Exporter::from_name(&name?)))
}

/// A dma-buf fd, with what the kernel says about it.
#[derive(Debug, Clone)]
pub struct DmaBufFile {
    fd: Arc<OwnedFd>,
    size: u64,
    exporter: Exporter,
}

impl DmaBufFile {
    /// Reads `/proc/self/fdinfo/FD`.
    ///
    /// Errors: `Err(text)` with the reason and the fix when the fdinfo cannot be read or the
    /// fd is not a dma-buf.
    pub fn from_fd(fd: OwnedFd) -> Result<Self, String> {
        let raw = fd.as_raw_fd();
        let path = format!("/proc/self/fdinfo/{raw}");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {path}: {e}: is fd {raw} open?"))?;
        let (size, exporter) = parse_fdinfo(&text).ok_or_else(|| {
            format!(
                "fd {raw} is not a dma-buf ({path} has no exp_name: line): pass an fd from a dma-buf exporter (udmabuf, a dma-heap, cuMemGetHandleForAddressRange), or register a memfd as a memfd"
            )
        })?;
        Ok(Self {
            fd: Arc::new(fd),
            size,
            exporter,
        })
    }

    /// A dma-buf whose exporter is known without asking the kernel: an exporter that just
    /// made it (the `gpu` crate, right after `cuMemGetHandleForAddressRange`), or a test that
    /// stands in for one. `fd` should be the dma-buf's; the sim reaches the memory through
    /// the slice's `peer` when there is one and never reads `fd` then.
    pub fn from_parts(fd: OwnedFd, size: u64, exporter: Exporter) -> Self {
        Self {
            fd: Arc::new(fd),
            size,
            exporter,
        }
    }

    /// The fd (shared: the mapping holds it for as long as it lives).
    pub fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    /// Bytes, as the exporter reports it.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Who exported it.
    pub fn exporter(&self) -> &Exporter {
        &self.exporter
    }
}

/// A range of a memfd (the pages behind a udmabuf, or a memfd registered directly).
#[derive(Debug, Clone)]
pub struct MemfdRange {
    /// The memfd.
    pub fd: Arc<OwnedFd>,
    /// Byte offset of the range in the memfd (page-aligned).
    pub offset: u64,
}

/// What [`crate::DmaMap::map_dmabuf`] maps: `len` bytes of `file` from `offset`, both
/// page-aligned (the driver rounds the registration out to whole pages first), and what else
/// the caller knows about how to reach them.
#[derive(Debug, Clone)]
pub struct DmaBufSlice {
    /// The dma-buf.
    pub file: DmaBufFile,
    /// First byte mapped (page-aligned).
    pub offset: u64,
    /// Bytes mapped (a whole number of pages).
    pub len: usize,
    /// For a udmabuf: its memfd at the offset where the dma-buf's byte 0 lies, which a type1
    /// IOMMU can map where it cannot map the dma-buf.
    pub backing: Option<MemfdRange>,
    /// For memory the CPU cannot map (CUDA): a way to reach it by copies, the whole dma-buf
    /// from its byte 0. A simulated device uses it; hardware cannot.
    pub peer: Option<Arc<dyn PeerMemory>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_of_a_udmabuf_parses() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1043\nsize:\t8192\ncount:\t1\nexp_name:\tudmabuf\n";
        assert_eq!(parse_fdinfo(text), Some((8192, Exporter::Udmabuf)));
    }

    #[test]
    fn fdinfo_without_exp_name_is_not_a_dma_buf() {
        let memfd = "pos:\t0\nflags:\t0100002\nmnt_id:\t15\nino:\t12\n";
        assert_eq!(parse_fdinfo(memfd), None);
    }

    #[test]
    fn exporters_map_to_kinds_and_back() {
        for n in ["udmabuf", "system", "nv_dmabuf", "vfio-pci", "i915"] {
            assert_eq!(Exporter::from_name(n).name(), n);
        }
        assert!(Exporter::Udmabuf.cpu_mappable());
        assert!(!Exporter::Nvidia.cpu_mappable());
    }

    #[test]
    fn a_memfd_is_refused_with_the_fix() {
        let fd = nix::sys::memfd::memfd_create(c"seam-test", nix::sys::memfd::MFdFlags::empty())
            .expect("memfd_create");
        let err = DmaBufFile::from_fd(fd).unwrap_err();
        assert!(err.contains("not a dma-buf"), "{err}");
    }
}
