//! `bypass gpu` and the GPU stage of `ping --ramp` on machines without a GPU: with the
//! stand-in driver of `standins/cuda` (a libcuda.so.1 whose `cuInit` returns
//! `CUDA_ERROR_NO_DEVICE`) and with no libcuda at all, each fails with the typed reason and
//! its fix, never a panic (`gpu check`: exit 77); with `standins/cuda-host` (one or two
//! "GPUs" whose memory is host memory, every copy checked against the live allocations)
//! the whole GPU path runs: allocation, dma-buf export, registration on two sim NICs, every
//! check, the bandwidth comparison.

#[path = "../standins/cuda_support.rs"]
mod cuda_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use cuda_support::{built_so, host_has_libcuda, libcuda_dir};

/// Runs `bypass ARGS` with `LD_LIBRARY_PATH=dir`; returns (exit code, stdout, stderr).
fn bypass_with_libs(dir: &Path, args: &[&str]) -> (i32, String, String) {
    bypass_with_gpus(dir, 1, args)
}

/// As [`bypass_with_libs`], with `devices` host-memory GPUs (`standins/cuda-host`).
fn bypass_with_gpus(dir: &Path, devices: u32, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env("BYPASS_CUDA_HOST_DEVICES", devices.to_string())
        .output()
        .expect("run bypass");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Which libcuda.so.1 a test's folder holds.
#[derive(Clone, Copy)]
enum Lib {
    /// None at all.
    Empty,
    /// `standins/cuda`: no device.
    NoDevice,
    /// `standins/cuda-host`: devices over host memory.
    HostMemory,
}

/// A fresh folder holding `lib` as libcuda.so.1 (and libcuda.so).
fn lib_dir(tag: &str, lib: Lib) -> PathBuf {
    let so = match lib {
        Lib::Empty => None,
        Lib::NoDevice => Some(built_so("libbypass_standin_cuda.so")),
        Lib::HostMemory => Some(built_so("libbypass_standin_cuda_host.so")),
    };
    libcuda_dir("bypass-cli-gpu", tag, so.as_deref())
}

#[test]
fn gpu_info_with_a_driver_that_finds_no_gpu_names_cuda_error_no_device() {
    let dir = lib_dir("standin", Lib::NoDevice);
    let (code, out, err) = bypass_with_libs(&dir, &["gpu", "info"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("bypass: cuInit failed with CUDA_ERROR_NO_DEVICE (100)"),
        "{err}"
    );
    assert!(err.contains("nvidia-smi"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out, "");
}

#[test]
fn gpu_info_without_libcuda_says_to_install_the_driver() {
    if host_has_libcuda() {
        eprintln!("skipped: this host has a libcuda the loader finds without LD_LIBRARY_PATH");
        return;
    }
    let dir = lib_dir("empty", Lib::Empty);
    let (code, out, err) = bypass_with_libs(&dir, &["gpu", "info"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("no CUDA driver library could be loaded"),
        "{err}"
    );
    assert!(err.contains("install the NVIDIA driver"), "{err}");
    assert!(err.contains("libcuda.so.1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn topo_without_cuda_keeps_pci_order() {
    let dir = lib_dir("topo", Lib::NoDevice);
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topo/numa2");
    let (code, out, err) = bypass_with_libs(&dir, &["topo", "--sysfs", fixture]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("GPU numbers follow PCI order"), "{out}");
}

#[test]
fn gpu_check_without_a_gpu_exits_77_with_the_reason() {
    let dir = lib_dir("check-nodev", Lib::NoDevice);
    let (code, out, err) = bypass_with_libs(&dir, &["gpu", "check"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 77, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains(
            "bypass: gpu check: skipped, no GPU: cuInit failed with CUDA_ERROR_NO_DEVICE (100)"
        ),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out, "");
}

#[test]
fn gpu_check_without_libcuda_exits_77() {
    if host_has_libcuda() {
        eprintln!("skipped: this host has a libcuda the loader finds without LD_LIBRARY_PATH");
        return;
    }
    let dir = lib_dir("check-empty", Lib::Empty);
    let (code, _, err) = bypass_with_libs(&dir, &["gpu", "check"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 77, "{err}");
    assert!(
        err.contains("skipped, no GPU: opening CUDA: no CUDA driver library"),
        "{err}"
    );
}

/// The seven checks' lines, in order, for GPUs named `a` (NIC 1's) and `b` (NIC 2's).
fn check_lines(a: &str, b: &str, size: u64) -> Vec<String> {
    [
        format!("WRITE {a} -> {b}"),
        format!("READ {b} -> {a}"),
        format!("WRITE {a} -> host"),
        format!("READ {b} -> host"),
        format!("WRITE host -> {b}"),
        format!("READ host -> {a}"),
        format!("SEND {a} -> {b}"),
    ]
    .into_iter()
    .map(|w| format!("{w}: ok, {size} bytes, each compared on the host"))
    .collect()
}

#[test]
fn gpu_check_on_host_memory_gpus_runs_every_check_and_the_comparison() {
    let dir = lib_dir("check-host", Lib::HostMemory);
    let (code, out, err) = bypass_with_gpus(
        &dir,
        1,
        &["gpu", "check", "--size", "65536", "--rounds", "3"],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(out.starts_with("GPU0: bypass host-memory CUDA stand-in at 0000:c1:00.0, dma-buf yes, CUDA driver 12.8\n"), "{out}");
    assert!(out.contains("one GPU: both NICs use GPU0\n"), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    for want in check_lines("GPU0", "GPU0", 65536) {
        assert!(lines.contains(&want.as_str()), "missing {want:?} in\n{out}");
    }
    let bw = lines
        .iter()
        .find(|l| {
            l.starts_with(
                "bandwidth, 3 rounds of 8 x 65536 bytes, medians: sim RDMA WRITE GPU0 -> GPU0: ",
            )
        })
        .unwrap_or_else(|| panic!("no bandwidth line in\n{out}"));
    let numbers: Vec<f64> = bw
        .split_whitespace()
        .filter_map(|w| w.parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    // 3 rounds, 8, 65536, then sim GB/s, DtoD GB/s and the ratio (0 for the ratio only if
    // a rate were zero, which a finished round cannot be).
    assert_eq!(numbers.len(), 6, "{bw}");
    assert!(
        bw.contains("cuMemcpyDtoD on GPU0: ") && bw.contains("sim / DtoD = "),
        "{bw}"
    );
    assert_eq!(lines.last(), Some(&"gpu check: ok"), "{out}");
}

#[test]
fn gpu_check_with_two_gpus_puts_one_behind_each_nic() {
    let dir = lib_dir("check-two", Lib::HostMemory);
    let (code, out, err) = bypass_with_gpus(
        &dir,
        2,
        &[
            "gpu",
            "check",
            "--size",
            "8192",
            "--rounds",
            "1",
            "--burst",
            "2",
            "--pcie-mapping",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        out.contains("GPU1: bypass host-memory CUDA stand-in at 0000:c2:00.0"),
        "{out}"
    );
    assert!(
        out.contains("NIC1 (sim) with GPU0 memory, NIC2 (sim) with GPU1 memory"),
        "{out}"
    );
    assert!(out.contains(", PCIe mapping\n"), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    for want in check_lines("GPU0", "GPU1", 8192) {
        assert!(lines.contains(&want.as_str()), "missing {want:?} in\n{out}");
    }
}

#[test]
fn gpu_info_lists_host_memory_gpus_with_their_bus_ids() {
    let dir = lib_dir("info-host", Lib::HostMemory);
    let (code, out, err) = bypass_with_gpus(&dir, 2, &["gpu", "info"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "CUDA driver 12.8: 2 device(s)\n  GPU 0  0000:c1:00.0  bypass host-memory CUDA stand-in  dma-buf yes\n  GPU 1  0000:c2:00.0  bypass host-memory CUDA stand-in  dma-buf yes\n"
    );
}

#[test]
fn ping_ramp_runs_stage_4_on_host_memory_gpus() {
    let dir = lib_dir("ramp-host", Lib::HostMemory);
    let (code, out, err) = bypass_with_gpus(
        &dir,
        2,
        &["ping", "--ramp", "-d", "sim", "--max-size", "4K"],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        out.contains("stage 4 gpu   ok  7 checks of 64 KiB (WRITE and READ GPU0<->GPU1, GPU<->host, SEND), every byte compared on the host\n"),
        "{out}"
    );
    assert_eq!(
        out.lines().last(),
        Some("ping --ramp: ok, stages 1-4 passed"),
        "{out}"
    );
}

#[test]
fn gpu_check_script_skips_without_a_gpu_and_builds_nothing() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gpu-check.sh");
    let run = |args: &[&str]| {
        let out = Command::new("bash")
            .arg(script)
            .args(args)
            .output()
            .expect("run gpu-check.sh");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, text) = run(&["/nonexistent/bypass"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("this script builds nothing"), "{text}");
    if Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped the no-GPU half: this machine has /dev/nvidia0");
        return;
    }
    let (code, text) = run(&[env!("CARGO_BIN_EXE_bypass")]);
    assert_eq!(code, 77, "{text}");
    assert!(text.contains("skipped: no /dev/nvidia0"), "{text}");
}

#[test]
fn write_bw_use_cuda_streams_between_gpu_buffers_and_checks_the_data() {
    let dir = lib_dir("perf-host", Lib::HostMemory);
    let (code, out, err) = bypass_with_gpus(
        &dir,
        1,
        &[
            "perf",
            "write-bw",
            "--use-cuda",
            "-s",
            "4096",
            "-n",
            "200",
            "-q",
            "2",
            "--check",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        out.starts_with("GPU memory: GPU 0 (bypass host-memory CUDA stand-in, 0000:c1:00.0), target and sources registered through dma-bufs\n"),
        "{out}"
    );
    assert!(out.contains(" Max inline data : 0[B]\n"), "{out}");
    assert!(
        out.contains(" Use CUDA        : GPU 0 (dma-buf MRs)\n"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("4096 "))
        .unwrap_or_else(|| panic!("no 4096-byte row in\n{out}"));
    assert_eq!(row.split_whitespace().nth(1), Some("200"), "{row}");
}

/// `perf write-bw` as two processes on UDP loopback (port set `k`: TCP 39100 + k, UDP
/// 39150 + k on 127.0.39.1 and .2), `--use-cuda` on the server only or the client only:
/// each side decides for its own buffers, as perftest's do. Returns (server, client) output.
fn two_process_write_bw(k: u16, dir: &Path, gpu_server: bool) -> (String, String) {
    let (tcp, udp) = ((39100 + k).to_string(), 39150 + k);
    let d1 = format!("udp:127.0.39.1:{udp}");
    let d2 = format!("udp:127.0.39.2:{udp}");
    let common = ["-s", "65536", "-n", "100", "--check", "-p", &tcp];
    let side = |dev: &str, gpu: bool, host: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bypass"));
        c.args(["perf", "write-bw", "-d", dev]).args(common);
        if gpu {
            c.arg("--use-cuda")
                .env("LD_LIBRARY_PATH", dir)
                .env("BYPASS_CUDA_HOST_DEVICES", "1");
        }
        c.args(host);
        c
    };
    let server = side(&d1, gpu_server, None)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the server");
    let client = side(&d2, !gpu_server, Some("127.0.39.1"))
        .output()
        .expect("run the client");
    let server = server.wait_with_output().expect("wait for the server");
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (s, c) = (text(&server), text(&client));
    assert!(
        server.status.success() && client.status.success(),
        "server:\n{s}\nclient:\n{c}"
    );
    (s, c)
}

#[test]
fn two_processes_take_gpu_memory_at_either_end_and_check_the_data() {
    let dir = lib_dir("perf-two", Lib::HostMemory);
    // The GPU is the WRITEs' target: the server checks what landed in GPU memory.
    let (s, c) = two_process_write_bw(0, &dir, true);
    assert!(
        s.contains(" Use CUDA        : GPU 0 (dma-buf MRs)\n"),
        "{s}"
    );
    assert!(!c.contains("Use CUDA"), "{c}");
    assert!(
        s.contains("65536 bytes: data check ok (the buffer holds WRITE 100 of 100 exactly)"),
        "{s}"
    );
    // The GPU is the source: the host server checks what the GPU's pattern wrote.
    let (s, c) = two_process_write_bw(1, &dir, false);
    assert!(
        c.contains(" Use CUDA        : GPU 0 (dma-buf MRs)\n"),
        "{c}"
    );
    assert!(!s.contains("Use CUDA"), "{s}");
    assert!(
        s.contains("65536 bytes: data check ok (the buffer holds WRITE 100 of 100 exactly)"),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn use_cuda_is_refused_where_perftest_refuses_it_and_without_a_gpu() {
    let dir = lib_dir("perf-refuse", Lib::NoDevice);
    let (code, _, err) = bypass_with_libs(&dir, &["perf", "write-lat", "--use-cuda=1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "--use-cuda=1: perftest supports CUDA latency tests with read/send verbs only"
        ),
        "{err}"
    );
    let (code, _, err) = bypass_with_libs(&dir, &["perf", "send-bw", "--use-cuda"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("GPU memory is built for write-bw here"),
        "{err}"
    );
    let (code, _, err) = bypass_with_libs(
        &dir,
        &["perf", "write-bw", "--use-cuda", "-I", "64", "-s", "64"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("perftest doesn't support CUDA tests with inline messages"),
        "{err}"
    );
    let (code, out, err) = bypass_with_libs(&dir, &["perf", "write-bw", "--use-cuda"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("bypass: --use-cuda: cuInit failed with CUDA_ERROR_NO_DEVICE (100)"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.contains("#bytes"), "no table without a GPU: {out}");
}

/// Runs scripts/gpu-check.sh on the built binary with `lib` as libcuda and the device-node
/// test off; returns (exit code, stdout + stderr).
fn gpu_check_script(tag: &str, lib: Lib, check_args: &str) -> (i32, String) {
    let dir = lib_dir(tag, lib);
    let out = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gpu-check.sh"))
        .arg(env!("CARGO_BIN_EXE_bypass"))
        .env("LD_LIBRARY_PATH", &dir)
        .env("GPU_CHECK_NO_DEVNODE", "1")
        .env("GPU_CHECK_ARGS", check_args)
        .output()
        .expect("run gpu-check.sh");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn gpu_check_script_prints_and_runs_each_command_on_host_memory_gpus() {
    let (code, text) = gpu_check_script("script-host", Lib::HostMemory, "--size 65536 --rounds 1");
    assert_eq!(code, 0, "{text}");
    let bin = env!("CARGO_BIN_EXE_bypass");
    for cmd in [
        format!("+ {bin} gpu info"),
        format!("+ {bin} gpu check --size 65536 --rounds 1"),
        format!("+ {bin} ping --ramp -d sim --threaded"),
    ] {
        assert!(text.lines().any(|l| l == cmd), "no line {cmd:?} in\n{text}");
    }
    assert!(text.contains("gpu check: ok\n"), "{text}");
    assert!(
        text.contains("ping --ramp: ok, stages 1-4 passed\n"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("gpu-check: ok"), "{text}");
}

#[test]
fn gpu_check_script_exits_77_when_the_driver_finds_no_gpu() {
    let (code, text) = gpu_check_script("script-nodev", Lib::NoDevice, "");
    assert_eq!(code, 77, "{text}");
    assert!(text.contains("CUDA_ERROR_NO_DEVICE"), "{text}");
    assert!(
        text.contains("gpu-check: skipped: bypass found no usable GPU"),
        "{text}"
    );
    assert!(!text.contains("ping --ramp"), "{text}");
}
