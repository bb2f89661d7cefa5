//! dma-bufs and memfds through the VFIO backend on a real kernel: QEMU's `edu` device behind
//! an intel vIOMMU DMAs through what `map_dmabuf` and `map_dma` mapped, and the bytes are
//! checked from the CPU side (the dma-buf's own mmap, bracketed by `DMA_BUF_IOCTL_SYNC`, or
//! the memfd).
//!
//! Covered: a udmabuf mapped through its backing memfd (device→memory and memory→device);
//! the same udmabuf and a dma-heap system buffer without a backing memfd, refused as
//! `VM_PFNMAP` with nothing left mapped; an exporter only iommufd could import, refused
//! naming `/dev/iommu`; an mmapped memfd range mapped with plain `map_dma`.
//!
//! Every test is `#[ignore]`d on the host (no `/dev/vfio`, no edu, no `/dev/udmabuf`): they
//! run in the QEMU guest through `scripts/guest-test.sh vfio`, which runs this binary after
//! `vfio_edu` in the same boot (`scripts/guest/jobs/vfio-edu.sh`, `BYPASS_MORE_TESTS`).
//! The device is found by `BYPASS_EDU_BDF` (set by the job) or its PCI IDs.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bypass_driver::backend::vfio::{DmaBufRefusal, IommufdProbe, VfioBackend};
use bypass_driver::backend::{Backend, BackendError, DmaMap, HostMemory};
use bypass_driver::dma::{DmaBuf, DmaMapper};
use bypass_seam::{DmaBufFile, DmaBufSlice, Exporter, MemfdRange};

// The edu driver is shared with vfio_edu.rs, which uses all of it; this binary uses its DMA
// half.
#[allow(dead_code)]
#[path = "support/edu.rs"]
mod edu;
#[path = "support/udmabuf.rs"]
mod udmabuf;

use edu::Edu;
use udmabuf::{CpuMap, SyncAccess};

const T: Duration = Duration::from_secs(10);
const PAGE: u64 = 4096;
/// Fixed IOVAs below edu's 28-bit reach, far above what `DmaMapper` hands out here.
const IOVA_A: u64 = 0x0300_0000;
const IOVA_B: u64 = 0x0400_0000;

/// One VFIO group can be open once: the tests take turns.
static DEVICE: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    DEVICE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn edu_bdf() -> String {
    if let Ok(b) = std::env::var("BYPASS_EDU_BDF") {
        return b;
    }
    let ids = format!("{:#06x}:{:#06x}", edu::VENDOR_ID, edu::DEVICE_ID);
    std::fs::read_dir("/sys/bus/pci/devices")
        .expect("no /sys/bus/pci: not running in the guest")
        .filter_map(Result::ok)
        .find(|e| {
            let attr = |n| std::fs::read_to_string(e.path().join(n)).unwrap_or_default();
            format!("{}:{}", attr("vendor").trim(), attr("device").trim()) == ids
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .expect("no edu device (1234:11e8): boot the guest with --edu")
}

fn open() -> (Arc<VfioBackend>, Edu, Arc<DmaMapper>) {
    let vfio = VfioBackend::open(&edu_bdf()).unwrap_or_else(|e| panic!("open edu: {e}"));
    let edu = Edu::new(vfio.clone() as Arc<dyn Backend>).unwrap();
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    (vfio, edu, mapper)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn contents(buf: &DmaBuf, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    buf.read(0, &mut v).unwrap();
    v
}

/// A 16 KiB sealed memfd and a udmabuf over its bytes 4 KiB..12 KiB: dma-buf byte 0 is memfd
/// byte 0x1000.
struct Udmabuf {
    memfd: Arc<OwnedFd>,
    file: DmaBufFile,
}

const MEMFD_LEN: u64 = 4 * PAGE;
const UDMABUF_AT: u64 = PAGE;
const UDMABUF_LEN: u64 = 2 * PAGE;

fn make_udmabuf() -> Udmabuf {
    let memfd = udmabuf::sealed_memfd(MEMFD_LEN).unwrap();
    let buf = udmabuf::udmabuf(&memfd, UDMABUF_AT, UDMABUF_LEN).unwrap();
    let file = DmaBufFile::from_fd(buf).unwrap();
    assert_eq!(file.exporter(), &Exporter::Udmabuf, "fdinfo exp_name");
    assert_eq!(file.size(), UDMABUF_LEN, "fdinfo size");
    Udmabuf {
        memfd: Arc::new(memfd),
        file,
    }
}

/// Page 1 of the udmabuf, with or without its backing memfd.
fn page_one(u: &Udmabuf, backed: bool) -> DmaBufSlice {
    DmaBufSlice {
        file: u.file.clone(),
        offset: PAGE,
        len: PAGE as usize,
        backing: backed.then(|| MemfdRange {
            fd: u.memfd.clone(),
            offset: UDMABUF_AT,
        }),
        peer: None,
    }
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn a_udmabuf_mapped_through_its_memfd_is_reached_by_dma_both_ways() {
    let _g = serial();
    let (vfio, edu, mapper) = open();
    let src = mapper.alloc(4096).unwrap();
    let dst = mapper.alloc(4096).unwrap();
    let u = make_udmabuf();
    // The CPU's view: the dma-buf's own mmap, both pages.
    let cpu = CpuMap::new(u.file.fd(), 0, UDMABUF_LEN as usize).unwrap();
    cpu.put(0, &[0x11; 8192]);
    let before = vfio.mappings().len();
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.map_dmabuf(IOVA_A, &page_one(&u, true)) }.unwrap();
    assert_eq!(vfio.mappings().len(), before + 1);
    assert!(vfio.mappings().contains(&(IOVA_A, 4096)));

    // Device → memory: edu writes the IOVA; the dma-buf's page 1 holds the bytes.
    let p = pattern(4096, 5);
    src.write(0, &p).unwrap();
    edu.dma_to_device(src.iova(), 0, 4096, false, T).unwrap();
    edu.dma_to_host(0, IOVA_A, 4096, false, T).unwrap();
    udmabuf::sync(u.file.fd(), true, SyncAccess::Read).unwrap();
    let page1 = cpu.get(4096, 4096);
    let page0 = cpu.get(0, 4096);
    udmabuf::sync(u.file.fd(), false, SyncAccess::Read).unwrap();
    assert!(page1 == p, "the DMA did not land in the dma-buf's page 1");
    assert!(
        page0.iter().all(|&b| b == 0x11),
        "the DMA reached the dma-buf's page 0, which is not mapped"
    );
    // The same bytes are the memfd's at UDMABUF_AT + PAGE: one set of pages.
    assert!(udmabuf::pread(&u.memfd, UDMABUF_AT + PAGE, 4096) == p);

    // Memory → device: the CPU writes through the dma-buf; edu reads the IOVA.
    let q = pattern(4096, 77);
    udmabuf::sync(u.file.fd(), true, SyncAccess::Write).unwrap();
    cpu.put(4096, &q);
    udmabuf::sync(u.file.fd(), false, SyncAccess::Write).unwrap();
    dst.fill(0, 4096, 0).unwrap();
    edu.dma_to_device(IOVA_A, 0, 4096, false, T).unwrap();
    edu.dma_to_host(0, dst.iova(), 4096, false, T).unwrap();
    assert!(
        contents(&dst, 4096) == q,
        "edu did not read the dma-buf's bytes"
    );

    // Unmapped, the same transfer no longer reaches it.
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.unmap_dma(IOVA_A, 4096) }.unwrap();
    assert_eq!(vfio.mappings().len(), before);
    edu.dma_to_host(0, IOVA_A, 4096, false, T).unwrap();
    udmabuf::sync(u.file.fd(), true, SyncAccess::Read).unwrap();
    let after = cpu.get(4096, 4096);
    udmabuf::sync(u.file.fd(), false, SyncAccess::Read).unwrap();
    assert!(after == q, "DMA reached the dma-buf after unmap");
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn a_udmabuf_without_its_memfd_is_refused_as_pfnmap_and_leaves_nothing_mapped() {
    let _g = serial();
    let (vfio, edu, mapper) = open();
    let u = make_udmabuf();
    let before = vfio.mappings();
    let e = vfio
        .map_dmabuf_checked(IOVA_A, &page_one(&u, false))
        .unwrap_err();
    println!("udmabuf without backing: {e}");
    assert_eq!(
        e,
        DmaBufRefusal::Type1Pfnmap {
            exporter: "udmabuf".into()
        }
    );
    // The seam's form of the same refusal.
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    match unsafe { vfio.map_dmabuf(IOVA_A, &page_one(&u, false)) }.unwrap_err() {
        BackendError::DmaBuf {
            iova,
            len,
            exporter,
            reason,
        } => {
            assert_eq!((iova, len, exporter.as_str()), (IOVA_A, 4096, "udmabuf"));
            assert!(
                reason.contains(
                    "type1 cannot map a VM_PFNMAP dma-buf mapping: pass the udmabuf's backing memfd"
                ),
                "{reason}"
            );
        }
        other => panic!("want BackendError::DmaBuf, got {other}"),
    }
    assert_eq!(vfio.mappings(), before, "a refused dma-buf stayed mapped");
    // Nothing of it holds the IOVA: mapping it there with the memfd works, and DMA lands.
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.map_dmabuf(IOVA_A, &page_one(&u, true)) }.unwrap();
    let src = mapper.alloc(4096).unwrap();
    let p = pattern(4096, 1);
    src.write(0, &p).unwrap();
    edu.dma_to_device(src.iova(), 0, 4096, false, T).unwrap();
    edu.dma_to_host(0, IOVA_A, 4096, false, T).unwrap();
    assert!(udmabuf::pread(&u.memfd, UDMABUF_AT + PAGE, 4096) == p);
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.unmap_dma(IOVA_A, 4096) }.unwrap();
    drop(src);
    assert_eq!(vfio.mappings(), before);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn a_dma_heap_system_buffer_is_refused_as_pfnmap_and_leaves_nothing_mapped() {
    let _g = serial();
    let (vfio, _edu, _mapper) = open();
    let file = DmaBufFile::from_fd(udmabuf::system_heap_buffer(2 * PAGE).unwrap()).unwrap();
    assert_eq!(file.exporter(), &Exporter::SystemHeap, "fdinfo exp_name");
    assert_eq!(file.size(), 2 * PAGE);
    let mut slice = DmaBufSlice {
        file,
        offset: 0,
        len: 2 * PAGE as usize,
        backing: None,
        peer: None,
    };
    let before = vfio.mappings();
    let e = vfio.map_dmabuf_checked(IOVA_B, &slice).unwrap_err();
    println!("system heap buffer: {e}");
    assert_eq!(
        e,
        DmaBufRefusal::Type1Pfnmap {
            exporter: "system".into()
        }
    );
    assert_eq!(vfio.mappings(), before);
    // A memfd passed as its backing would be other memory than the buffer's: refused.
    slice.backing = Some(MemfdRange {
        fd: Arc::new(udmabuf::sealed_memfd(2 * PAGE).unwrap()),
        offset: 0,
    });
    assert_eq!(
        vfio.map_dmabuf_checked(IOVA_B, &slice),
        Err(DmaBufRefusal::BackingNotUdmabuf {
            exporter: "system".into()
        })
    );
    assert_eq!(vfio.mappings(), before);
    // The IOVA is free: host memory maps there.
    let region = Arc::new(bypass_driver::dma::DmaRegion::new(8192).unwrap());
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.map_dma(IOVA_B, region) }.unwrap();
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.unmap_dma(IOVA_B, 8192) }.unwrap();
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn memory_only_iommufd_could_import_is_refused_naming_dev_iommu() {
    let _g = serial();
    let (vfio, _edu, _mapper) = open();
    let probe = IommufdProbe::current();
    println!("iommufd probe: {probe:?}");
    assert!(
        !probe.dev_iommu,
        "the guest kernel is expected to have no /dev/iommu (no IOMMUFD)"
    );
    let before = vfio.mappings();
    for exporter in [Exporter::Nvidia, Exporter::VfioPci] {
        let name = exporter.name().to_owned();
        // Any fd stands in for the exporter's: the backend refuses before it is used.
        let slice = DmaBufSlice {
            file: DmaBufFile::from_parts(udmabuf::sealed_memfd(PAGE).unwrap(), PAGE, exporter),
            offset: 0,
            len: PAGE as usize,
            backing: None,
            peer: None,
        };
        let e = vfio.map_dmabuf_checked(IOVA_B, &slice).unwrap_err();
        println!("{name}: {e}");
        assert_eq!(
            e,
            DmaBufRefusal::NoIommufd {
                exporter: name.clone(),
                release: probe.release.clone()
            }
        );
        // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
        match unsafe { vfio.map_dmabuf(IOVA_B, &slice) }.unwrap_err() {
            BackendError::DmaBuf {
                exporter, reason, ..
            } => {
                assert_eq!(exporter, name);
                for want in [
                    "type1 container has no dma-buf import",
                    "/dev/iommu does not exist",
                    probe.release.as_str(),
                    "6.19",
                ] {
                    assert!(reason.contains(want), "{want:?} missing: {reason}");
                }
                if name == "nv_dmabuf" {
                    assert!(reason.contains("ibv_reg_dmabuf_mr"), "{reason}");
                    assert!(reason.contains("nvidia-peermem"), "{reason}");
                }
            }
            other => panic!("want BackendError::DmaBuf, got {other}"),
        }
    }
    assert_eq!(vfio.mappings(), before);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn an_mmapped_memfd_range_mapped_with_map_dma_is_reached_by_dma_both_ways() {
    let _g = serial();
    let (vfio, edu, mapper) = open();
    let src = mapper.alloc(4096).unwrap();
    let dst = mapper.alloc(4096).unwrap();
    // Memfd bytes 4 KiB..12 KiB, mapped the way the driver maps a registered memfd.
    let memfd = udmabuf::sealed_memfd(3 * PAGE).unwrap();
    udmabuf::pwrite(&memfd, 0, &[0x22; 3 * 4096]);
    let range: Arc<dyn HostMemory> = Arc::new(CpuMap::new(&memfd, PAGE, 2 * 4096).unwrap());
    let before = vfio.mappings().len();
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.map_dma(IOVA_B, range.clone()) }.unwrap();
    assert_eq!(vfio.mappings().len(), before + 1);
    // Device → memory at the range's second page: memfd byte 0x2000 onward.
    let p = pattern(4096, 9);
    src.write(0, &p).unwrap();
    edu.dma_to_device(src.iova(), 0, 4096, false, T).unwrap();
    edu.dma_to_host(0, IOVA_B + PAGE, 4096, false, T).unwrap();
    assert!(
        udmabuf::pread(&memfd, 2 * PAGE, 4096) == p,
        "not in the memfd"
    );
    let mut seen = vec![0u8; 4096];
    assert!(range.read_at(4096, &mut seen));
    assert!(seen == p, "not in the mapping");
    assert!(
        udmabuf::pread(&memfd, 0, 2 * 4096)
            .iter()
            .all(|&b| b == 0x22),
        "the DMA reached memfd bytes outside the page it was sent to"
    );
    // Memory → device from the range's first page (memfd byte 0x1000).
    let q = pattern(4096, 200);
    udmabuf::pwrite(&memfd, PAGE, &q);
    dst.fill(0, 4096, 0).unwrap();
    edu.dma_to_device(IOVA_B, 0, 4096, false, T).unwrap();
    edu.dma_to_host(0, dst.iova(), 4096, false, T).unwrap();
    assert!(
        contents(&dst, 4096) == q,
        "edu did not read the memfd's bytes"
    );
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.unmap_dma(IOVA_B, 2 * 4096) }.unwrap();
    assert_eq!(vfio.mappings().len(), before);
}

const CHILD: &str = "BYPASS_DMABUF_MEMLOCK_CHILD";
const LIMIT: u64 = 1 << 20;

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn a_udmabuf_mapping_is_charged_to_memlock_and_refused_past_the_limit() {
    let _g = serial();
    if std::env::var_os(CHILD).is_none() {
        // As root the limit does not apply (CAP_IPC_LOCK): run this test again in a child
        // without that capability and with a 1 MiB limit.
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new("setpriv")
            .args([
                "--bounding-set=-ipc_lock",
                "--inh-caps=-ipc_lock",
                "prlimit",
            ])
            .arg(format!("--memlock={LIMIT}:{LIMIT}"))
            .arg(exe)
            .args([
                "--ignored",
                "--exact",
                "a_udmabuf_mapping_is_charged_to_memlock_and_refused_past_the_limit",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .status()
            .expect("run setpriv/prlimit (util-linux)");
        assert!(status.success(), "child failed: {status:?}");
        return;
    }
    let state = bypass_driver::dma::MemlockState::current();
    assert_eq!(state.limit, Some(LIMIT));
    assert!(!state.cap_ipc_lock, "the child still has CAP_IPC_LOCK");
    let (vfio, _edu, _mapper) = open();
    // A 2 MiB udmabuf: more than the limit.
    let memfd = Arc::new(udmabuf::sealed_memfd(2 << 20).unwrap());
    let file = DmaBufFile::from_fd(udmabuf::udmabuf(&memfd, 0, 2 << 20).unwrap()).unwrap();
    let whole = |len: usize| DmaBufSlice {
        file: file.clone(),
        offset: 0,
        len,
        backing: Some(MemfdRange {
            fd: memfd.clone(),
            offset: 0,
        }),
        peer: None,
    };
    let before = vfio.mappings();
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    let e = unsafe { vfio.map_dmabuf(IOVA_A, &whole(2 << 20)) }.unwrap_err();
    println!("2 MiB udmabuf: {e}");
    assert!(
        matches!(e, BackendError::MemlockLimit { needed, limit, .. } if needed == 2 << 20 && limit == LIMIT),
        "{e}"
    );
    assert_eq!(vfio.mappings(), before, "a refused mapping stayed");
    // 64 KiB fits, and type1's pin of the memfd's pages is charged: exactly 64 KiB more.
    let locked = bypass_driver::dma::MemlockState::current().locked;
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.map_dmabuf(IOVA_A, &whole(64 << 10)) }.unwrap();
    assert_eq!(
        bypass_driver::dma::MemlockState::current().locked - locked,
        64 << 10
    );
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.unmap_dma(IOVA_A, 64 << 10) }.unwrap();
    assert_eq!(bypass_driver::dma::MemlockState::current().locked, locked);
    assert_eq!(vfio.mappings(), before);
}
