//! dma-bufs through the VFIO type1 container: what is mapped, how, and what is refused.
//!
//! Owns: [`Route`] and [`route`] (the pure decision: a udmabuf's backing memfd is mapped; a
//! CPU-mappable dma-buf without one is tried through its own mmap; anything else is refused
//! with what an import would need on this machine), [`check_slice`], [`FdMapping`] (a shared
//! read-write mmap of an fd, kept with the fds it needs while the IOVA is mapped) and
//! `VfioBackend::map_dmabuf_checked`, the typed form of the seam's `DmaMap::map_dmabuf`.
//! Must not: unmap (the usual `unmap_dma` does, since a mapping here is an entry of the same
//! per-IOVA table), implement iommufd (only probed, `iommufd::IommufdProbe`), or check
//! libibverbs' registration rules (the driver does, before the backend sees the slice).
//!
//! Sources: `drivers/vfio/vfio_iommu_type1.c` (`vfio_dma_do_map`, `vaddr_get_pfns`: a
//! `VM_PFNMAP` vma backed by RAM is refused with EFAULT; shmem pages mapped from a memfd are
//! pinned like any user page), `drivers/dma-buf/udmabuf.c` (`udmabuf_create`: the memfd's
//! pages at `offset`, `mmap_udmabuf`), `drivers/dma-buf/heaps/system_heap.c`
//! (`system_heap_mmap`: `remap_pfn_range`).

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::{Arc, PoisonError};

use bypass_seam::{DmaBufSlice, Exporter};
use nix::errno::Errno;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use super::VfioBackend;
use super::error::{DmaBufRefusal, classify_map_errno};
use super::iommufd::{DMABUF_IMPORT_SINCE, IommufdProbe};
use crate::backend::{BackendError, HostMemory};
use crate::dma::{MemlockState, PAGE_SIZE};

/// How the backend reaches a dma-buf's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Map the udmabuf's backing memfd (type1 pins its shmem pages).
    Backing,
    /// Map the dma-buf's own mmap and let type1 decide (EFAULT where it is `VM_PFNMAP`).
    CpuMapping,
}

/// Decides how a dma-buf from `exporter` is reached, given whether the caller passed its
/// backing memfd; `probe` is asked only when the answer is a refusal that names iommufd.
///
/// Errors: [`DmaBufRefusal::BackingNotUdmabuf`] (a backing memfd for another exporter), and
/// for memory the CPU cannot map: [`DmaBufRefusal::NoIommufd`] (no `/dev/iommu`),
/// [`DmaBufRefusal::KernelTooOld`] (before Linux 6.19), [`DmaBufRefusal::NotImportable`]
/// (iommufd imports vfio-pci's dma-bufs only), [`DmaBufRefusal::NeedsIommufd`] (iommufd
/// could, this backend is type1).
pub fn route(
    exporter: &Exporter,
    has_backing: bool,
    probe: impl FnOnce() -> IommufdProbe,
) -> Result<Route, DmaBufRefusal> {
    let name = exporter.name().to_owned();
    match (has_backing, exporter) {
        (true, Exporter::Udmabuf) => Ok(Route::Backing),
        (true, _) => Err(DmaBufRefusal::BackingNotUdmabuf { exporter: name }),
        (false, e) if e.cpu_mappable() => Ok(Route::CpuMapping),
        (false, e) => {
            let probe = probe();
            Err(if !probe.dev_iommu {
                DmaBufRefusal::NoIommufd {
                    exporter: name,
                    release: probe.release,
                }
            } else if !probe.at_least(DMABUF_IMPORT_SINCE) {
                DmaBufRefusal::KernelTooOld {
                    exporter: name,
                    release: probe.release,
                }
            } else if *e != Exporter::VfioPci {
                DmaBufRefusal::NotImportable { exporter: name }
            } else {
                DmaBufRefusal::NeedsIommufd { exporter: name }
            })
        }
    }
}

/// Checks the slice's geometry: `offset` and `len` whole pages, `len` not zero, inside the
/// dma-buf, and the backing memfd's offset page-aligned with the sum representable.
///
/// Errors: [`DmaBufRefusal::BadSlice`] naming the bad value.
pub fn check_slice(slice: &DmaBufSlice) -> Result<(), DmaBufRefusal> {
    let page = PAGE_SIZE as u64;
    let bad = |what: String| DmaBufRefusal::BadSlice {
        what,
        fix: "the driver rounds a registration out to whole pages of the dma-buf before mapping it",
    };
    if slice.len == 0 || !(slice.len as u64).is_multiple_of(page) {
        return Err(bad(format!(
            "the length {:#x} is not a non-zero whole number of pages",
            slice.len
        )));
    }
    if !slice.offset.is_multiple_of(page) {
        return Err(bad(format!(
            "the offset {:#x} into the dma-buf is not page-aligned",
            slice.offset
        )));
    }
    let end = slice.offset.checked_add(slice.len as u64);
    if end.is_none_or(|end| end > slice.file.size()) {
        return Err(bad(format!(
            "{:#x} bytes from offset {:#x} run past the dma-buf's end ({:#x} bytes)",
            slice.len,
            slice.offset,
            slice.file.size()
        )));
    }
    if let Some(b) = &slice.backing {
        if b.offset % page != 0 {
            return Err(bad(format!(
                "the backing memfd offset {:#x} is not page-aligned (UDMABUF_CREATE takes page-aligned offsets)",
                b.offset
            )));
        }
        let at = b.offset.checked_add(slice.offset);
        if at.is_none_or(|at| i64::try_from(at).is_err()) {
            return Err(bad(format!(
                "the backing memfd offset {:#x} plus the slice offset {:#x} is past any file offset",
                b.offset, slice.offset
            )));
        }
    }
    Ok(())
}

/// A shared, read-write mmap of `len` bytes of a file, with the fds that must stay open while
/// a device reaches it. Unmapped on drop, which the backend lets happen only after
/// `VFIO_IOMMU_UNMAP_DMA`.
#[derive(Debug)]
pub struct FdMapping {
    ptr: NonNull<u8>,
    len: usize,
    _keep: Vec<Arc<OwnedFd>>,
}

// SAFETY: the mapping is plain shared memory reached only through raw pointers; no thread
// owns it, and the fds kept are only held, never used.
unsafe impl Send for FdMapping {}
// SAFETY: as for Send: shared access goes through raw pointers (the HostMemory contract).
unsafe impl Sync for FdMapping {}

impl FdMapping {
    /// Maps `len` bytes of `fd` from `offset` (`MAP_SHARED`, read-write), keeping `keep`.
    ///
    /// Errors: [`DmaBufRefusal::Mmap`] with the errno; [`DmaBufRefusal::BadSlice`] for a zero
    /// length or an offset past `off_t`.
    pub fn map(
        fd: &OwnedFd,
        offset: u64,
        len: usize,
        what: &'static str,
        keep: Vec<Arc<OwnedFd>>,
    ) -> Result<Self, DmaBufRefusal> {
        let bad = |what: String| DmaBufRefusal::BadSlice {
            what,
            fix: "map whole pages inside the file",
        };
        let length = NonZeroUsize::new(len).ok_or_else(|| bad(format!("{what}: zero length")))?;
        let off = i64::try_from(offset).map_err(|_| {
            bad(format!(
                "{what}: offset {offset:#x} is past any file offset"
            ))
        })?;
        // SAFETY: a new mapping at an address the kernel picks (no existing memory is
        // replaced); the fd is borrowed for the call only and the mapping outlives it.
        let ptr = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                off,
            )
        }
        .map_err(|errno| DmaBufRefusal::Mmap {
            what,
            offset,
            len,
            errno,
        })?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
            _keep: keep,
        })
    }
}

// SAFETY: `ptr..ptr+len` is a live shared mapping from `map` until drop, never moved, and
// handed out only as a raw pointer.
unsafe impl HostMemory for FdMapping {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for FdMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of this length, unmapped once; no reference into
        // it exists (it was reached only through raw pointers).
        if let Err(e) = unsafe { munmap(self.ptr.cast(), self.len) } {
            tracing::warn!(len = self.len, error = %e, "munmap of a dma-buf or memfd mapping failed");
        }
    }
}

impl VfioBackend {
    /// Maps `slice` at `iova` (the seam's `DmaMap::map_dmabuf`, with the typed reason):
    /// through its backing memfd when it has one (a udmabuf), else through the dma-buf's own
    /// mmap when the exporter is CPU-mappable, else not at all. The mapping, with the fds,
    /// stays in the backend's per-IOVA table until `unmap_dma(iova, slice.len)`. On any error
    /// nothing stays mapped.
    ///
    /// Errors: [`DmaBufRefusal`]: the slice's geometry or IOVA, the route's refusals
    /// ([`route`]), the locked-memory limit, `mmap`, and `VFIO_IOMMU_MAP_DMA`
    /// ([`DmaBufRefusal::Type1Pfnmap`] for the EFAULT of a `VM_PFNMAP` dma-buf mapping).
    pub fn map_dmabuf_checked(&self, iova: u64, slice: &DmaBufSlice) -> Result<(), DmaBufRefusal> {
        check_slice(slice)?;
        self.check_iova(iova, slice.len)
            .map_err(|what| DmaBufRefusal::BadSlice {
                what,
                fix: "the driver maps a dma-buf only at an IOVA its allocator handed out",
            })?;
        let file = &slice.file;
        let exporter = file.exporter().name();
        let route = route(
            file.exporter(),
            slice.backing.is_some(),
            IommufdProbe::current,
        )?;
        let (mapping, what) = match (route, &slice.backing) {
            (Route::Backing, Some(b)) => (
                FdMapping::map(
                    &b.fd,
                    b.offset + slice.offset,
                    slice.len,
                    "the backing memfd",
                    vec![b.fd.clone(), file.fd().clone()],
                )?,
                "backing memfd",
            ),
            _ => (
                FdMapping::map(
                    file.fd(),
                    slice.offset,
                    slice.len,
                    "the dma-buf",
                    vec![file.fd().clone()],
                )?,
                "dma-buf",
            ),
        };
        // As map_dma: type1 charges pinned pages to RLIMIT_MEMLOCK; say so with numbers.
        if let Err(BackendError::MemlockLimit {
            needed,
            locked,
            limit,
        }) = MemlockState::current().check(slice.len as u64)
        {
            return Err(DmaBufRefusal::Memlock {
                needed,
                locked,
                limit,
            });
        }
        // SAFETY: `mapping` is a live shared mapping of slice.len bytes; it goes into
        // `mappings` below and is dropped (munmapped) only after VFIO_IOMMU_UNMAP_DMA, so the
        // device never reaches an unmapped range. On failure nothing was mapped and it is
        // dropped here.
        let r = unsafe {
            self.container
                .vfio_dma_map(iova, slice.len, mapping.base().as_ptr())
        };
        if let Err(e) = r {
            return Err(match e {
                vfio_ioctls::VfioError::IommuDmaMap(err) => {
                    classify_map_errno(Errno::from_raw(err.errno()), what, exporter)
                }
                other => DmaBufRefusal::Container {
                    detail: other.to_string(),
                },
            });
        }
        self.mappings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(iova, (slice.len, Arc::new(mapping) as Arc<dyn HostMemory>));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use bypass_seam::{DmaBufFile, MemfdRange};

    fn probe(dev_iommu: bool, release: &str) -> impl FnOnce() -> IommufdProbe {
        let release = release.to_owned();
        move || IommufdProbe { dev_iommu, release }
    }

    fn never() -> IommufdProbe {
        panic!("the probe is asked only for a refusal that names iommufd")
    }

    fn memfd() -> OwnedFd {
        nix::sys::memfd::memfd_create(c"vfio-dmabuf-test", nix::sys::memfd::MFdFlags::empty())
            .expect("memfd_create")
    }

    fn slice(exporter: Exporter, size: u64, offset: u64, len: usize) -> DmaBufSlice {
        DmaBufSlice {
            file: DmaBufFile::from_parts(memfd(), size, exporter),
            offset,
            len,
            backing: None,
            peer: None,
        }
    }

    #[test]
    fn a_udmabuf_with_its_memfd_maps_the_memfd_and_cpu_mappable_ones_try_their_mmap() {
        assert_eq!(route(&Exporter::Udmabuf, true, never), Ok(Route::Backing));
        assert_eq!(
            route(&Exporter::Udmabuf, false, never),
            Ok(Route::CpuMapping)
        );
        assert_eq!(
            route(&Exporter::SystemHeap, false, never),
            Ok(Route::CpuMapping)
        );
    }

    #[test]
    fn a_backing_memfd_for_another_exporter_is_refused() {
        let e = route(&Exporter::SystemHeap, true, never).unwrap_err();
        assert_eq!(
            e,
            DmaBufRefusal::BackingNotUdmabuf {
                exporter: "system".into()
            }
        );
        assert!(e.to_string().contains("Pass no backing"), "{e}");
    }

    #[test]
    fn memory_the_cpu_cannot_map_is_refused_by_what_this_machine_lacks() {
        let e = route(
            &Exporter::Nvidia,
            false,
            probe(false, "6.12.95+deb12-amd64"),
        )
        .unwrap_err();
        assert_eq!(
            e,
            DmaBufRefusal::NoIommufd {
                exporter: "nv_dmabuf".into(),
                release: "6.12.95+deb12-amd64".into()
            }
        );
        let msg = e.to_string();
        for want in [
            "type1 container has no dma-buf import",
            "/dev/iommu does not exist",
            "6.12.95+deb12-amd64",
            "6.19",
            "vfio-pci",
            "ibv_reg_dmabuf_mr",
            "nvidia-peermem",
        ] {
            assert!(msg.contains(want), "{want:?} missing from: {msg}");
        }
        assert_eq!(
            route(&Exporter::VfioPci, false, probe(true, "6.18.44")),
            Err(DmaBufRefusal::KernelTooOld {
                exporter: "vfio-pci".into(),
                release: "6.18.44".into()
            })
        );
        assert_eq!(
            route(&Exporter::VfioPci, false, probe(true, "unknown")),
            Err(DmaBufRefusal::KernelTooOld {
                exporter: "vfio-pci".into(),
                release: "unknown".into()
            })
        );
        let e = route(&Exporter::Nvidia, false, probe(true, "6.19.2")).unwrap_err();
        assert_eq!(
            e,
            DmaBufRefusal::NotImportable {
                exporter: "nv_dmabuf".into()
            }
        );
        assert!(e.to_string().contains("EOPNOTSUPP"), "{e}");
        assert!(e.to_string().contains("no mainline kernel"), "{e}");
        let e = route(&Exporter::Other("i915".into()), false, probe(true, "7.1.0")).unwrap_err();
        assert!(matches!(e, DmaBufRefusal::NotImportable { .. }), "{e}");
        assert!(!e.to_string().contains("nvidia-peermem"), "{e}");
        assert_eq!(
            route(&Exporter::VfioPci, false, probe(true, "6.19.0")),
            Err(DmaBufRefusal::NeedsIommufd {
                exporter: "vfio-pci".into()
            })
        );
    }

    #[test]
    fn efault_on_a_dma_buf_mapping_is_the_pfnmap_refusal_and_other_errnos_keep_theirs() {
        let e = classify_map_errno(Errno::EFAULT, "dma-buf", "udmabuf");
        assert_eq!(
            e,
            DmaBufRefusal::Type1Pfnmap {
                exporter: "udmabuf".into()
            }
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("type1 cannot map a VM_PFNMAP dma-buf mapping: "),
            "{msg}"
        );
        assert!(msg.contains("backing memfd"), "{msg}");
        // EFAULT on the memfd is not the dma-buf's PFNMAP case.
        assert!(matches!(
            classify_map_errno(Errno::EFAULT, "backing memfd", "udmabuf"),
            DmaBufRefusal::MapDma {
                errno: Errno::EFAULT,
                ..
            }
        ));
        let e = classify_map_errno(Errno::EEXIST, "dma-buf", "system");
        assert!(
            matches!(
                e,
                DmaBufRefusal::MapDma {
                    errno: Errno::EEXIST,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("overlaps"), "{e}");
    }

    #[test]
    fn a_refusal_becomes_the_seams_dma_buf_error_and_memlock_stays_memlock() {
        let e = DmaBufRefusal::Type1Pfnmap {
            exporter: "system".into(),
        }
        .into_backend("0000:00:03.0", 0x10000, 0x2000, "system");
        match e {
            BackendError::DmaBuf {
                iova,
                len,
                exporter,
                reason,
            } => {
                assert_eq!((iova, len, exporter.as_str()), (0x10000, 0x2000, "system"));
                assert!(reason.starts_with("0000:00:03.0 (VFIO): type1 cannot map"));
            }
            other => panic!("{other:?}"),
        }
        let e = DmaBufRefusal::Memlock {
            needed: 8192,
            locked: 0,
            limit: 4096,
        }
        .into_backend("b", 0, 8192, "udmabuf");
        assert!(matches!(
            e,
            BackendError::MemlockLimit {
                needed: 8192,
                locked: 0,
                limit: 4096
            }
        ));
    }

    #[test]
    fn slices_must_be_whole_pages_inside_the_dma_buf() {
        assert_eq!(
            check_slice(&slice(Exporter::Udmabuf, 0x4000, 0x1000, 0x2000)),
            Ok(())
        );
        assert_eq!(
            check_slice(&slice(Exporter::Udmabuf, 0x4000, 0, 0x4000)),
            Ok(())
        );
        for (off, len) in [
            (0, 0),
            (0, 0x1001),
            (0x800, 0x1000),
            (0x2000, 0x3000),
            (!0xfff_u64, 0x1000),
        ] {
            let e = check_slice(&slice(Exporter::Udmabuf, 0x4000, off, len)).unwrap_err();
            assert!(
                matches!(e, DmaBufRefusal::BadSlice { .. }),
                "{off:#x}+{len:#x}: {e}"
            );
        }
        let mut s = slice(Exporter::Udmabuf, 0x4000, 0x1000, 0x1000);
        s.backing = Some(MemfdRange {
            fd: Arc::new(memfd()),
            offset: 0x10,
        });
        assert!(check_slice(&s).unwrap_err().to_string().contains("backing"));
        s.backing = Some(MemfdRange {
            fd: Arc::new(memfd()),
            offset: !0xfff_u64,
        });
        assert!(matches!(
            check_slice(&s),
            Err(DmaBufRefusal::BadSlice { .. })
        ));
    }

    #[test]
    fn an_fd_mapping_reaches_the_files_bytes_and_a_bad_one_is_refused() {
        let fd = memfd();
        nix::unistd::ftruncate(&fd, 0x3000).unwrap();
        nix::sys::uio::pwrite(&fd, b"page two", 0x2000).unwrap();
        let m = FdMapping::map(&fd, 0x2000, 0x1000, "the memfd", Vec::new()).unwrap();
        assert_eq!(m.len(), 0x1000);
        let mut b = [0u8; 8];
        assert!(m.read_at(0, &mut b));
        assert_eq!(&b, b"page two");
        assert!(m.write_at(0x10, b"back"));
        let mut f = [0u8; 4];
        nix::sys::uio::pread(&fd, &mut f, 0x2010).unwrap();
        assert_eq!(&f, b"back");
        drop(m);
        // An unaligned offset: mmap's EINVAL, named.
        let e = FdMapping::map(&fd, 0x10, 0x1000, "the memfd", Vec::new()).unwrap_err();
        assert!(
            matches!(
                e,
                DmaBufRefusal::Mmap {
                    errno: Errno::EINVAL,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            FdMapping::map(&fd, 0, 0, "the memfd", Vec::new()),
            Err(DmaBufRefusal::BadSlice { .. })
        ));
    }
}
