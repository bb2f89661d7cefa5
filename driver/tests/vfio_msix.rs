//! The VFIO backend's MSI-X path on a real kernel: one eventfd per vector, each interrupt on
//! its own. QEMU's `edu` has MSI only, so this uses QEMU's `ivshmem-doorbell` device (PCI
//! 1af4:1110) with 4 MSI-X vectors, whose Doorbell register interrupts a chosen vector of a
//! chosen peer: the guest interrupts itself by writing its own ID (the IVPosition register)
//! and the vector. Register map: QEMU `docs/specs/ivshmem-spec.rst` ("BAR0: registers":
//! IntrMask 0x00, IntrStatus 0x04, IVPosition 0x08, Doorbell 0x0c) and `hw/misc/ivshmem.c`
//! (`ivshmem_io_write`: a doorbell to a vector the peer has no eventfd for is ignored).
//!
//! Every test here is `#[ignore]`d on the host: they run in the QEMU guest through
//! `scripts/guest-test.sh msix`, which starts `scripts/guest/ivshmem-server.py` (the host
//! side of the device: shared memory and one eventfd per vector), boots the guest with the
//! device behind an intel vIOMMU, binds it to vfio-pci and runs this binary with `--ignored`.
//! The device is found by its PCI IDs (or `BYPASS_IVSHMEM_BDF`).

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bypass_driver::backend::vfio::{IrqKind, VfioBackend};
use bypass_driver::backend::{BackendError, Interrupts, Mmio};

/// The vectors the guest test gives the device (`ivshmem-doorbell,vectors=4`).
const VECTORS: u16 = 4;
/// IVPosition: this device's peer ID.
const REG_IVPOSITION: u64 = 0x08;
/// Doorbell: `peer << 16 | vector` interrupts `vector` of `peer`.
const REG_DOORBELL: u64 = 0x0c;
/// Long enough for an interrupt that was raised to arrive on a loaded TCG guest.
const T: Duration = Duration::from_secs(10);
/// How long a vector that was not raised is watched for a stray interrupt.
const QUIET: Duration = Duration::from_millis(50);

/// One VFIO group can be open once: the tests take turns.
static DEVICE: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    DEVICE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn bdf() -> String {
    if let Ok(b) = std::env::var("BYPASS_IVSHMEM_BDF") {
        return b;
    }
    std::fs::read_dir("/sys/bus/pci/devices")
        .expect("no /sys/bus/pci: not running in the guest")
        .filter_map(Result::ok)
        .find(|e| {
            let attr = |n| std::fs::read_to_string(e.path().join(n)).unwrap_or_default();
            attr("vendor").trim() == "0x1af4" && attr("device").trim() == "0x1110"
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .expect("no ivshmem device (1af4:1110): run through scripts/guest-test.sh msix")
}

fn open() -> Arc<VfioBackend> {
    VfioBackend::open(&bdf()).unwrap_or_else(|e| panic!("open ivshmem: {e}"))
}

/// Rings `vector` of this device itself.
fn ring_self(vfio: &VfioBackend, vector: u16) {
    let me = vfio.read32(REG_IVPOSITION);
    // SAFETY: this test owns the device; the doorbell only raises an interrupt.
    unsafe { vfio.write32(REG_DOORBELL, (me << 16) | u32::from(vector)) };
}

/// The vectors with an interrupt pending, each waited for `QUIET` (consumes them).
fn pending(vfio: &VfioBackend) -> Vec<u16> {
    (0..VECTORS)
        .filter(|&v| vfio.wait_irq(v, QUIET).unwrap())
        .collect()
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh msix"]
fn the_device_offers_msix_and_the_backend_enables_every_vector() {
    let _g = serial();
    let vfio = open();
    assert_eq!(vfio.irq_kind(), IrqKind::MsiX, "ivshmem-doorbell has MSI-X");
    assert_eq!(vfio.irq_vectors(), VECTORS);
    for v in 0..VECTORS {
        assert!(vfio.irq_fd(v).is_some(), "vector {v} has no eventfd");
    }
    assert!(vfio.irq_fd(VECTORS).is_none());
    assert!(matches!(
        vfio.wait_irq(VECTORS, QUIET),
        Err(BackendError::NoVector {
            vector: VECTORS,
            available: VECTORS
        })
    ));
    let fds: Vec<i32> = (0..VECTORS)
        .map(|v| vfio.irq_fd(v).unwrap().as_raw_fd())
        .collect();
    let mut distinct = fds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), fds.len(), "one eventfd per vector: {fds:?}");
    assert_eq!(pending(&vfio), Vec::<u16>::new(), "nothing raised yet");
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh msix"]
fn each_vector_arrives_on_its_own_eventfd_and_no_other() {
    let _g = serial();
    let vfio = open();
    assert_eq!(pending(&vfio), Vec::<u16>::new(), "nothing raised yet");
    // Out of order, so a backend that delivered "the next vector" would fail.
    for v in [2, 0, 3, 1] {
        ring_self(&vfio, v);
        assert!(
            vfio.wait_irq(v, T).unwrap(),
            "no interrupt on vector {v} after ringing it"
        );
        assert_eq!(
            pending(&vfio),
            Vec::<u16>::new(),
            "ringing vector {v} raised another vector too"
        );
    }
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh msix"]
fn interrupts_raised_together_are_each_seen_once() {
    let _g = serial();
    let vfio = open();
    assert_eq!(pending(&vfio), Vec::<u16>::new(), "nothing raised yet");
    ring_self(&vfio, 3);
    ring_self(&vfio, 1);
    ring_self(&vfio, 1);
    // Both rings of vector 1 may coalesce into one wake-up (an eventfd counts, and the
    // backend's wait consumes the count) or arrive as two, if the second lands after the
    // wait consumed the first; either way each raised vector is seen, and only those.
    assert!(vfio.wait_irq(3, T).unwrap(), "vector 3 lost");
    assert!(vfio.wait_irq(1, T).unwrap(), "vector 1 lost");
    let rest = pending(&vfio);
    assert!(
        rest.is_empty() || rest == [1],
        "after the waits only vector 1's second ring may remain, got {rest:?}"
    );
    // A doorbell for a vector the device has no eventfd for is ignored by the device
    // (ivshmem_io_write), and reaches no eventfd of the backend.
    ring_self(&vfio, VECTORS + 1);
    assert_eq!(pending(&vfio), Vec::<u16>::new());
}

#[test]
#[ignore = "runs in the QEMU guest: scripts/guest-test.sh msix"]
fn reopening_the_device_gets_fresh_vectors_that_still_work() {
    let _g = serial();
    for round in 0..2 {
        let vfio = open();
        assert_eq!(vfio.irq_vectors(), VECTORS, "round {round}");
        ring_self(&vfio, 0);
        assert!(vfio.wait_irq(0, T).unwrap(), "round {round}: vector 0 lost");
        drop(vfio);
    }
}
