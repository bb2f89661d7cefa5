//! bypass-gpu over the host-memory stand-in: what a buffer, its export and its `CudaPeer`
//! promise, checked where the stand-in would refuse a wrong address. Each test runs in a
//! child process (this binary, re-run on the test's name with `LD_LIBRARY_PATH` at the
//! stand-in): the loader binds libcuda once per process, from the path it has at the time.

#[path = "../../cuda_support.rs"]
mod cuda_support;

use std::path::PathBuf;
use std::process::Command;

use cuda_support::{built_so, defined_functions, libcuda_dir, skip_without_nm};

use bypass_gpu::{GPU_ALLOC_ALIGN, Gpu, GpuError};
use bypass_seam::{Exporter, PeerMemory};

/// Set in the child: run the body.
const CHILD_ENV: &str = "BYPASS_GPU_CRATE_CHILD";

/// The stand-in cargo built for this test.
fn built_standin() -> PathBuf {
    built_so("libbypass_standin_cuda_host.so")
}

/// In the parent: re-runs test `name` in a child with the stand-in and `devices` GPUs and
/// asserts it passed. In the child: returns true (run the body).
fn in_child(name: &str, devices: u32) -> bool {
    if std::env::var_os(CHILD_ENV).is_some() {
        return true;
    }
    let dir = libcuda_dir("bypass-cuda-host", name, Some(&built_standin()));
    let out = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .env("BYPASS_CUDA_HOST_DEVICES", devices.to_string())
        .output()
        .expect("run the child");
    let _ = std::fs::remove_dir_all(&dir);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child {name} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child {name} ran nothing:\n{text}"
    );
    false
}

#[test]
fn a_buffer_round_trips_fills_and_refuses_ranges_outside_it() {
    if !in_child(
        "a_buffer_round_trips_fills_and_refuses_ranges_outside_it",
        1,
    ) {
        return;
    }
    let gpu = Gpu::open(0).expect("open");
    assert_eq!(gpu.info().pci_bus_id, "0000:c1:00.0");
    assert!(gpu.info().dma_buf);
    assert_eq!(gpu.driver_version(), 12080);
    let buf = gpu.alloc(10_000).expect("alloc");
    assert_eq!(buf.len(), 10_000);
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
    buf.copy_from_host(0, &data).expect("HtoD");
    let mut back = vec![0u8; 10_000];
    buf.copy_to_host(0, &mut back).expect("DtoH");
    assert_eq!(back, data);
    buf.fill(100, 50, 0xee).expect("fill");
    let mut mid = [0u8; 52];
    buf.copy_to_host(99, &mut mid).expect("DtoH");
    assert_eq!(mid[0], data[99]);
    assert!(mid[1..51].iter().all(|&b| b == 0xee));
    assert_eq!(mid[51], data[150]);
    // The last byte is reachable, one past it is not (even though the allocation, rounded
    // up to 64 KiB, holds it).
    buf.copy_to_host(9_999, &mut [0u8; 1]).expect("last byte");
    let e = buf.copy_to_host(9_999, &mut [0u8; 2]).unwrap_err();
    assert_eq!(
        e,
        GpuError::OutOfRange {
            op: "copy_to_host",
            offset: 9_999,
            len: 2,
            size: 10_000
        }
    );
    assert!(matches!(
        buf.fill(usize::MAX, 2, 0),
        Err(GpuError::OutOfRange { op: "fill", .. })
    ));
    assert_eq!(
        gpu.alloc(0).unwrap_err(),
        GpuError::BadSize {
            op: "alloc",
            len: 0
        }
    );
    assert_eq!(
        gpu.alloc(usize::MAX).unwrap_err(),
        GpuError::BadSize {
            op: "alloc",
            len: usize::MAX
        }
    );
    // Device to device within one GPU.
    let other = gpu.alloc(GPU_ALLOC_ALIGN).expect("alloc");
    other.memcpy_dtod(5, &buf, 0, 1000).expect("DtoD");
    let mut got = vec![0u8; 1000];
    other.copy_to_host(5, &mut got).expect("DtoH");
    let mut want = data[..1000].to_vec();
    want[100..150].fill(0xee);
    assert_eq!(got, want);
}

#[test]
fn the_export_follows_perftest_and_the_peer_reaches_only_the_buffer() {
    if !in_child(
        "the_export_follows_perftest_and_the_peer_reaches_only_the_buffer",
        1,
    ) {
        return;
    }
    let gpu = Gpu::open(0).expect("open");
    let buf = gpu.alloc(5000).expect("alloc");
    let e = buf.export_dmabuf(false).expect("export");
    // The stand-in puts allocations 256 bytes into a page: the dma-buf starts at that page.
    assert_eq!(e.iova, buf.dptr());
    assert_eq!(e.offset, 256);
    assert_eq!(e.len, 5000);
    assert_eq!(e.file.size(), (5000u64 + 256).next_multiple_of(4096));
    assert_eq!(e.file.exporter(), &Exporter::Nvidia);
    assert_eq!(e.peer.len() as u64, e.file.size());
    assert_eq!(e.peer.exporter(), "nv_dmabuf");
    // The peer addresses the dma-buf from its byte 0: the buffer's byte k is at 256 + k.
    let data: Vec<u8> = (0..5000u32).map(|i| (i ^ (i >> 3)) as u8).collect();
    buf.copy_from_host(0, &data).expect("HtoD");
    let mut got = vec![0u8; 100];
    e.peer.read_at(256 + 1000, &mut got).expect("peer read");
    assert_eq!(got, data[1000..1100]);
    e.peer.write_at(256 + 4990, &[1; 10]).expect("peer write");
    let mut tail = [0u8; 10];
    buf.copy_to_host(4990, &mut tail).expect("DtoH");
    assert_eq!(tail, [1; 10]);
    // Before the buffer (the page's first 256 bytes are not its) and past the dma-buf: refused.
    let below = e.peer.read_at(255, &mut [0u8; 2]).unwrap_err();
    assert_eq!((below.op, below.offset, below.len), ("read", 255, 2));
    assert!(below.reason.contains("outside the memory"), "{below}");
    let past = e.peer.write_at(e.peer.len() - 1, &[0u8; 2]).unwrap_err();
    assert_eq!(past.op, "write");
    // The PCIe mapping flag is accepted on a 12.8 driver.
    let pcie = buf.export_dmabuf(true).expect("export with the PCIe flag");
    assert_eq!(pcie.offset, 256);
}

#[test]
fn the_peer_keeps_the_memory_allocated_after_the_buffer_drops() {
    if !in_child(
        "the_peer_keeps_the_memory_allocated_after_the_buffer_drops",
        1,
    ) {
        return;
    }
    let gpu = Gpu::open(0).expect("open");
    let buf = gpu.alloc(4096).expect("alloc");
    buf.fill(0, 4096, 0x5a).expect("fill");
    let e = buf.export_dmabuf(false).expect("export");
    drop(buf);
    // The stand-in refuses copies outside live allocations: this read proves it is live.
    let mut got = [0u8; 16];
    e.peer
        .read_at(256, &mut got)
        .expect("read after the buffer dropped");
    assert_eq!(got, [0x5a; 16]);
}

#[test]
fn two_gpus_are_two_devices_and_dtod_stays_on_one() {
    if !in_child("two_gpus_are_two_devices_and_dtod_stays_on_one", 2) {
        return;
    }
    let (list_version, list) = bypass_gpu::devices().expect("devices");
    assert_eq!(list_version, 12080);
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].pci_bus_id, "0000:c2:00.0");
    let (g0, g1) = (Gpu::open(0).expect("GPU 0"), Gpu::open(1).expect("GPU 1"));
    let (a, b) = (
        g0.alloc(4096).expect("alloc"),
        g1.alloc(4096).expect("alloc"),
    );
    assert_eq!((a.ordinal(), b.ordinal()), (0, 1));
    assert_eq!(
        b.memcpy_dtod(0, &a, 0, 16),
        Err(GpuError::CrossDevice { src: 0, dst: 1 })
    );
    // Each buffer is used from another thread: the context is made current there first.
    std::thread::scope(|s| {
        s.spawn(|| b.fill(0, 4096, 9).expect("fill on another thread"));
    });
    let mut got = [0u8; 4];
    b.copy_to_host(4092, &mut got).expect("DtoH");
    assert_eq!(got, [9; 4]);
    assert_eq!(
        Gpu::open(2).unwrap_err(),
        GpuError::NoSuchDevice {
            ordinal: 2,
            count: 2
        }
    );
}

#[test]
fn the_standin_exports_exactly_what_bypass_gpu_calls() {
    let Some(got) = defined_functions(&built_standin()) else {
        skip_without_nm();
        return;
    };
    let want: std::collections::BTreeSet<String> = bypass_gpu::START_SYMBOLS
        .iter()
        .chain(bypass_gpu::SYMBOLS.iter())
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}
