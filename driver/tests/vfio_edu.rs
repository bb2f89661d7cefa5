//! The VFIO backend on a real kernel: QEMU's `edu` device behind an intel vIOMMU, driven
//! through the `Backend` trait by the test support's `edu::Edu`.
//!
//! Every test here is `#[ignore]`d on the host (no `/dev/vfio`, no edu device): they run in
//! the QEMU guest through `scripts/guest-test.sh vfio`, which builds this binary, boots the
//! guest (`--iommu intel --edu`), binds edu to vfio-pci and runs it with `--ignored`; the
//! script fails when any of them fails. The device is found by its PCI IDs (or
//! `BYPASS_EDU_BDF`).

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bypass_driver::DriverError;
use bypass_driver::backend::vfio::{
    IrqKind, MIN_IOVA, VfioBackend, VfioError, region, usable_ranges,
};
use bypass_driver::backend::{Backend, BackendError, DmaMap, Interrupts, Mmio};
use bypass_driver::dma::{DmaBuf, DmaMapper};

mod support;
use support::edu::{self, Edu};

const T: Duration = Duration::from_secs(10);

/// One VFIO group can be open once: the tests take turns (the job also passes
/// `--test-threads=1`).
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

fn open() -> (Arc<VfioBackend>, Edu) {
    let vfio = VfioBackend::open(&edu_bdf()).unwrap_or_else(|e| panic!("open edu: {e}"));
    let edu = Edu::new(vfio.clone() as Arc<dyn Backend>).unwrap();
    (vfio, edu)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn contents(buf: &DmaBuf, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    buf.read(0, &mut v).unwrap();
    v
}

/// Reads the kernel log (`/dev/kmsg`, non-blocking) until a line contains every needle, for
/// up to `T`. The guest's DMAR driver logs IOMMU faults from its fault interrupt.
fn kernel_log_line(needles: &[&str]) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let start = Instant::now();
    while start.elapsed() < T {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .ok()?;
        let mut rec = vec![0u8; 8192];
        loop {
            match f.read(&mut rec) {
                Ok(n) if n > 0 => {
                    let line = String::from_utf8_lossy(&rec[..n]).into_owned();
                    if needles.iter().all(|n| line.contains(n)) {
                        return Some(line.trim().to_owned());
                    }
                }
                Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
                _ => break,
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn edu_identifies_and_answers_liveness_through_the_backend() {
    let _g = serial();
    let (vfio, edu) = open();
    assert_eq!(edu.id(), 0x0100_00ed, "edu 1.0 identification");
    for v in [0x1234_5678u32, 0, u32::MAX, 0xdead_beef] {
        assert_eq!(edu.liveness(v), !v, "liveness of {v:#x}");
    }
    // Regions: BAR0 is edu's 1 MiB MMIO BAR, mmapped; config space is there; the rest of
    // the BARs are not implemented.
    let bar0 = vfio.region(0).unwrap();
    assert_eq!(bar0.size, 1 << 20);
    assert!(bar0.mmappable());
    assert_eq!(vfio.bar0_len(), 1 << 20);
    assert!(vfio.region(7).unwrap().size >= 256, "config space");
    assert_eq!(vfio.region(1).unwrap().size, 0);
    for r in vfio.regions() {
        println!("{r}");
    }
    // Bus Master Enable was set at open, before any DMA.
    assert_ne!(vfio.pci_command().unwrap() & region::PCI_COMMAND_MASTER, 0);
    // The IOMMU reported its apertures through the capability chain.
    let info = vfio.iommu_info();
    println!(
        "IOMMU page sizes {} ranges {:x?} dma_avail {:?}",
        info.page_sizes_text(),
        info.ranges,
        info.dma_avail
    );
    assert!(
        !info.ranges.is_empty(),
        "VFIO_IOMMU_GET_INFO reported no IOVA ranges"
    );
    assert_eq!(vfio.iova_ranges(), usable_ranges(&info.ranges));
    assert!(vfio.iova_ranges().iter().all(|r| r.start >= MIN_IOVA));
    // Accesses outside BAR0 are refused and counted, never a fault.
    assert_eq!(vfio.mmio_errors(), 0);
    assert_eq!(vfio.read32(1 << 20), u32::MAX);
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.write32(2, 0) };
    assert_eq!(vfio.mmio_errors(), 2);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn factorial_unit_computes_on_the_device() {
    let _g = serial();
    let (_vfio, edu) = open();
    for (n, f) in [
        (0u32, 1u32),
        (1, 1),
        (5, 120),
        (10, 3_628_800),
        (12, 479_001_600),
    ] {
        assert_eq!(edu.factorial(n, false, T).unwrap(), f, "{n}!");
    }
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn dma_round_trip_host_to_device_to_another_host_buffer_is_byte_exact() {
    let _g = serial();
    let (vfio, edu) = open();
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    let src = mapper.alloc(4096).unwrap();
    let dst = mapper.alloc(4096).unwrap();
    assert_ne!(src.iova(), dst.iova());
    for b in [&src, &dst] {
        assert!(
            vfio.iova_ranges()
                .iter()
                .any(|r| r.start <= b.iova() && b.iova() < r.last)
        );
        assert!(b.iova() < edu::DMA_MASK, "edu reaches 28 bits");
        assert!(b.iova() >= MIN_IOVA, "IOVA 0 is never handed out");
    }
    assert_eq!(vfio.mappings().len(), 2);
    let p = pattern(4096, 3);
    src.write(0, &p).unwrap();
    dst.fill(0, 4096, 0).unwrap();
    edu.dma_to_device(src.iova(), 0, 4096, false, T).unwrap();
    edu.dma_to_host(0, dst.iova(), 4096, false, T).unwrap();
    assert!(
        contents(&dst, 4096) == p,
        "the 4096 bytes came back different"
    );
    // A partial transfer lands exactly where asked and nowhere else.
    dst.fill(0, 4096, 0xee).unwrap();
    edu.dma_to_host(100, dst.iova_at(200).unwrap(), 300, false, T)
        .unwrap();
    let got = contents(&dst, 4096);
    assert!(got[..200].iter().all(|&b| b == 0xee));
    assert_eq!(&got[200..500], &p[100..400]);
    assert!(got[500..].iter().all(|&b| b == 0xee));
    drop((src, dst));
    assert!(
        vfio.mappings().is_empty(),
        "dropping the buffers unmapped them"
    );
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn msi_interrupts_arrive_on_their_eventfd() {
    let _g = serial();
    let (vfio, edu) = open();
    assert_eq!(vfio.irq_kind(), IrqKind::Msi, "edu has MSI, no MSI-X");
    assert_eq!(vfio.irq_vectors(), 1);
    assert!(vfio.irq_fd(0).is_some() && vfio.irq_fd(1).is_none());
    assert!(matches!(
        vfio.wait_irq(1, T),
        Err(BackendError::NoVector { .. })
    ));
    // Nothing raised: nothing pending.
    assert!(!vfio.wait_irq(0, Duration::from_millis(20)).unwrap());
    edu.raise_irq(0x42);
    assert!(
        vfio.wait_irq(0, T).unwrap(),
        "no MSI after writing the raise register"
    );
    assert_eq!(edu.irq_status() & 0x42, 0x42);
    edu.ack_irq(0x42);
    assert_eq!(edu.irq_status(), 0);
    // The factorial unit's completion interrupt.
    assert_eq!(edu.factorial(6, true, T).unwrap(), 720);
    assert!(vfio.wait_irq(0, T).unwrap(), "no MSI for the factorial");
    assert_eq!(edu.irq_status() & edu::IRQ_FACTORIAL, edu::IRQ_FACTORIAL);
    edu.ack_irq(edu::IRQ_FACTORIAL);
    // The DMA engine's completion interrupt.
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    let buf = mapper.alloc(4096).unwrap();
    edu.dma_to_device(buf.iova(), 0, 64, true, T).unwrap();
    assert!(vfio.wait_irq(0, T).unwrap(), "no MSI for the DMA");
    assert_eq!(edu.irq_status() & edu::IRQ_DMA, edu::IRQ_DMA);
    edu.ack_irq(edu::IRQ_DMA);
    assert_eq!(edu.irq_status(), 0);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn dma_to_an_iova_never_mapped_does_not_land_and_the_iommu_reports_it() {
    let _g = serial();
    let (vfio, edu) = open();
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    let src = mapper.alloc(4096).unwrap();
    let dst = mapper.alloc(4096).unwrap();
    let p = pattern(4096, 9);
    src.write(0, &p).unwrap();
    dst.fill(0, 4096, 0xaa).unwrap();
    edu.dma_to_device(src.iova(), 0, 4096, false, T).unwrap();
    // An IOVA below edu's 28-bit reach that nothing maps.
    let never: u64 = 0x0ab0_0000;
    assert!(
        vfio.mappings()
            .iter()
            .all(|&(i, l)| never < i || never >= i + l as u64)
    );
    edu.dma_to_host(0, never, 4096, false, T).unwrap();
    assert!(
        contents(&dst, 4096).iter().all(|&b| b == 0xaa),
        "a mapped buffer changed"
    );
    assert!(contents(&src, 4096) == p, "a mapped buffer changed");
    // The fault is visible: the guest's DMAR driver logs it with the device and address.
    let line = kernel_log_line(&["DMAR", &format!("{never:x}")])
        .expect("no DMAR fault for the unmapped IOVA in the kernel log");
    println!("IOMMU fault as the kernel logs it: {line}");
    // The device is still fine afterwards.
    edu.dma_to_host(0, dst.iova(), 4096, false, T).unwrap();
    assert!(contents(&dst, 4096) == p);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn dma_after_unmap_does_not_reach_the_memory() {
    let _g = serial();
    let (vfio, edu) = open();
    let region = Arc::new(bypass_driver::dma::DmaRegion::new(4096).unwrap());
    let iova = 0x0200_0000;
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.map_dma(iova, region.clone()) }.unwrap();
    let host = |off: usize| -> u8 {
        // SAFETY: off < 4096, inside the live region; a volatile read of one byte.
        unsafe { region.as_ptr().as_ptr().add(off).read_volatile() }
    };
    let fill = |b: u8| {
        // SAFETY: the region's 4096 bytes are live and only touched through raw pointers.
        unsafe { std::ptr::write_bytes(region.as_ptr().as_ptr(), b, 4096) }
    };
    // Mapped: the device writes it.
    fill(0x11);
    edu.dma_to_device(iova, 0, 4096, false, T).unwrap();
    fill(0x22);
    edu.dma_to_host(0, iova, 4096, false, T).unwrap();
    assert!(
        (0..4096).all(|o| host(o) == 0x11),
        "mapped DMA did not land"
    );
    // Unmapped: the same transfer no longer reaches the memory.
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    unsafe { vfio.unmap_dma(iova, 4096) }.unwrap();
    fill(0x33);
    edu.dma_to_host(0, iova, 4096, false, T).unwrap();
    assert!(
        (0..4096).all(|o| host(o) == 0x33),
        "DMA reached memory after unmap"
    );
    // Nor can the device read it: bytes written after the unmap never reach the device.
    fill(0x44);
    edu.dma_to_device(iova, 0, 4096, false, T).unwrap();
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    let check = mapper.alloc(4096).unwrap();
    edu.dma_to_host(0, check.iova(), 4096, false, T).unwrap();
    assert!(
        contents(&check, 4096).iter().all(|&b| b != 0x44),
        "the device read unmapped memory"
    );
    // Unmapping twice is a clear error, not a crash.
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    let e = unsafe { vfio.unmap_dma(iova, 4096) }.unwrap_err();
    assert!(e.to_string().contains("nothing is mapped"), "{e}");
    // Mapping outside the apertures or unaligned is refused before the kernel sees it.
    // SAFETY: this test owns the device and its IOVA space; nothing else maps or programs it.
    assert!(unsafe { vfio.map_dma(iova + 1, region.clone()) }.is_err());
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn devices_not_bound_to_vfio_pci_give_a_clear_error() {
    let _g = serial();
    let mut seen_bound = false;
    for e in std::fs::read_dir("/sys/bus/pci/devices")
        .unwrap()
        .filter_map(Result::ok)
    {
        let bdf = e.file_name().to_string_lossy().into_owned();
        let driver = std::fs::read_link(e.path().join("driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        if driver.as_deref() == Some("vfio-pci") {
            continue;
        }
        let err = VfioBackend::open(&bdf).unwrap_err();
        let msg = err.to_string();
        println!("{bdf}: {msg}");
        assert!(
            matches!(err, VfioError::NotBoundToVfio { .. }),
            "{bdf}: {msg}"
        );
        assert!(
            msg.contains("driver_override") && msg.contains("drivers_probe"),
            "{msg}"
        );
        match &driver {
            Some(d) => {
                seen_bound = true;
                assert!(msg.contains(&format!("bound to {d}")), "{msg}");
            }
            None => assert!(msg.contains("no driver"), "{msg}"),
        }
    }
    assert!(
        seen_bound,
        "the guest has no device on a host driver to try"
    );
    assert!(matches!(
        VfioBackend::open("00:1f.9"),
        Err(VfioError::BadAddress(_))
    ));
    assert!(matches!(
        VfioBackend::open("00:1e.0"),
        Err(VfioError::NoDevice { .. })
    ));
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn reset_either_works_or_says_why_not() {
    let _g = serial();
    let (vfio, edu) = open();
    match vfio.reset() {
        Ok(()) => {
            assert!(vfio.reset_supported());
            assert_eq!(edu.id(), 0x0100_00ed);
            assert_ne!(vfio.pci_command().unwrap() & region::PCI_COMMAND_MASTER, 0);
        }
        Err(e) => {
            println!("reset: {e}");
            assert!(!vfio.reset_supported(), "reset offered but failed: {e}");
            assert!(matches!(e, VfioError::Reset { .. }));
        }
    }
    // A second open of the same device while this one holds the group is refused clearly.
    let e = VfioBackend::open(vfio.bdf()).unwrap_err();
    println!("second open: {e}");
    assert!(matches!(e, VfioError::Ioctls { .. }), "{e}");
    assert!(
        e.to_string().contains("no other process holds the group"),
        "{e}"
    );
    // Close and reopen: everything was released (the group is free again).
    drop(edu);
    drop(vfio);
    let (_vfio, edu) = open();
    assert_eq!(edu.liveness(7), !7);
}

const CHILD: &str = "BYPASS_MEMLOCK_CHILD";
const LIMIT: u64 = 1 << 20;

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn a_memlock_limit_too_small_for_the_mapping_is_a_clear_error() {
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
                "a_memlock_limit_too_small_for_the_mapping_is_a_clear_error",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .status()
            .expect("run setpriv/prlimit (util-linux)");
        assert!(
            status.success(),
            "child failed: {status:?} signal {:?}",
            status.signal()
        );
        return;
    }
    let state = bypass_driver::dma::MemlockState::current();
    assert_eq!(state.limit, Some(LIMIT));
    assert!(!state.cap_ipc_lock, "the child still has CAP_IPC_LOCK");
    let (vfio, edu) = open();
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    // Too big to pin at all.
    let e = mapper.alloc(2 << 20).unwrap_err();
    println!("2 MiB: {e}");
    assert!(
        matches!(e, DriverError::Backend(BackendError::MemlockLimit { .. })),
        "{e}"
    );
    // 768 KiB fits: VFIO's pin is the only charge (the driver does not also mlock memory a
    // pinning backend maps), and exactly 768 KiB of the limit is used.
    let before = bypass_driver::dma::MemlockState::current().locked;
    let big = mapper.alloc(768 << 10).unwrap();
    assert_eq!(
        bypass_driver::dma::MemlockState::current().locked - before,
        768 << 10
    );
    // Another 512 KiB does not fit beside it: a clear error stating the numbers.
    let e = mapper.alloc(512 << 10).unwrap_err();
    println!("512 KiB more: {e}");
    assert!(
        matches!(e, DriverError::Backend(BackendError::MemlockLimit { needed, limit, .. }) if needed == 512 << 10 && limit == LIMIT),
        "{e}"
    );
    assert!(e.to_string().contains("RLIMIT_MEMLOCK") && e.to_string().contains("ulimit -l"));
    assert_eq!(
        vfio.mappings().len(),
        1,
        "a failed mapping left something behind"
    );
    drop(big);
    assert!(vfio.mappings().is_empty(), "a dropped buffer stayed mapped");
    // What fits still works: nothing crashed, nothing leaked; one 4 KiB buffer is charged
    // once (vfio_iommu_type1.c vfio_lock_acct), not twice.
    let before = bypass_driver::dma::MemlockState::current().locked;
    let small = mapper.alloc(4096).unwrap();
    assert_eq!(
        bypass_driver::dma::MemlockState::current().locked - before,
        4096
    );
    small.write(0, &[5; 64]).unwrap();
    edu.dma_to_device(small.iova(), 0, 64, false, T).unwrap();
    assert_eq!(edu.liveness(1), !1);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn the_mlx5_bring_up_runs_over_vfio_and_refuses_a_function_that_is_not_mlx5() {
    let _g = serial();
    let (vfio, edu) = open();
    // The same Hca::open the sim path uses reads the init segment through the VFIO BAR.
    // edu's offset 4 (cmdif_rev) is its liveness register: a fresh 0 reads back all ones.
    edu.liveness(0);
    let e = bypass_driver::Hca::open(vfio.clone() as Arc<dyn Backend>).unwrap_err();
    println!("edu as an mlx5 function: {e}");
    assert!(matches!(e, DriverError::CmdifRev { found: 0xffff }), "{e}");
    // Make offset 4 read as cmdif_rev 5 (big-endian, as the init segment is): the driver
    // gets one check further, to the command queue geometry at 0x14 (all ones on edu).
    edu.liveness(!0x0005_0000u32.to_be());
    let e = bypass_driver::Hca::open(vfio.clone() as Arc<dyn Backend>).unwrap_err();
    println!("with cmdif_rev 5: {e}");
    assert!(
        matches!(e, DriverError::CmdqGeometry { log_size: 15, .. }),
        "{e}"
    );
    assert!(
        vfio.mappings().is_empty(),
        "a failed bring-up left DMA mapped"
    );
    assert_eq!(vfio.mmio_errors(), 0);
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh vfio"]
fn application_memory_is_mapped_once_however_registrations_overlap_and_dma_lands_in_it() {
    let _g = serial();
    let (vfio, edu) = open();
    let mapper = DmaMapper::new(vfio.clone() as Arc<dyn Backend>);
    // Memory the application allocated before anything was registered; pages 0..5 of it
    // start at the first page boundary inside.
    let mut app = vec![0u8; 7 * 4096];
    let base = app.as_mut_ptr();
    let skip = base.align_offset(4096);
    let page = |i: usize, off: usize| {
        // SAFETY: every page and offset used below is inside `app`.
        std::ptr::NonNull::new(unsafe { base.add(skip + i * 4096 + off) }).unwrap()
    };
    let at = |off: usize, n: usize| -> Vec<u8> {
        (0..n)
            // SAFETY: inside `app`; a raw read, as pin_caller requires while mapped.
            .map(|i| unsafe { base.add(skip + off + i).read_volatile() })
            .collect()
    };
    let (p1, p2) = (page(1, 100), page(2, 7));
    // The device's source buffer: one mapping of the driver's own memory.
    let src = mapper.alloc(4096).unwrap();
    assert_eq!(vfio.mappings().len(), 1);
    // A: pages 1-3 (unaligned start and length). B: pages 2-4, overlapping A on 2-3.
    // SAFETY: `app` stays allocated until both ranges are released below, and is read only
    // through raw pointers while they are held.
    let a = unsafe { mapper.pin_caller(p1, 2 * 4096) }.unwrap();
    assert_eq!(a.page_iovas().len(), 3);
    assert_eq!(vfio.mappings().len(), 2, "A maps its 3 pages as one extent");
    // SAFETY: as for A.
    let b = unsafe { mapper.pin_caller(p2, 2 * 4096) }.unwrap();
    assert_eq!(
        vfio.mappings().len(),
        3,
        "B maps only page 4, the gap: pages 2-3 are A's mapping, shared"
    );
    assert_eq!(
        &b.page_iovas()[..2],
        &a.page_iovas()[1..],
        "B's pages 2-3 are A's IOVAs"
    );
    for iova in a.page_iovas().iter().chain(b.page_iovas()) {
        assert!(*iova < edu::DMA_MASK, "edu reaches 28 bits");
    }
    // The device writes into the application's bytes through B's IOVA of page 4, and through
    // A's IOVA of page 2: both reach the application's memory.
    let p = pattern(512, 9);
    src.write(0, &p).unwrap();
    edu.dma_to_device(src.iova(), 0, 512, false, T).unwrap();
    edu.dma_to_host(0, b.page_iovas()[2] + 300, 512, false, T)
        .unwrap();
    assert_eq!(
        at(4 * 4096 + 300, 512),
        p,
        "the DMA did not land in the application's page 4"
    );
    edu.dma_to_host(0, a.page_iovas()[1] + 40, 64, false, T)
        .unwrap();
    assert_eq!(
        at(2 * 4096 + 40, 64),
        p[..64],
        "the DMA did not land in page 2 through A's IOVA"
    );
    // Releasing A keeps its extent: B still uses pages 2-3 of it.
    a.release().unwrap();
    assert_eq!(vfio.mappings().len(), 3, "A's extent stays while B uses it");
    edu.dma_to_host(0, b.page_iovas()[0] + 1000, 16, false, T)
        .unwrap();
    assert_eq!(
        at(2 * 4096 + 1000, 16),
        p[..16],
        "B lost page 2 when A went"
    );
    b.release().unwrap();
    assert_eq!(
        vfio.mappings().len(),
        1,
        "the last user's release unmapped every application page"
    );
    drop(src);
    assert!(vfio.mappings().is_empty());
    drop(app);
}
