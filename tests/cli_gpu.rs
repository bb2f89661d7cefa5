//! `bypass gpu` on machines without a GPU: with the stand-in driver (`standins/cuda`, a
//! libcuda.so.1 whose `cuInit` returns `CUDA_ERROR_NO_DEVICE`) and with no libcuda at all.
//! Either way the command fails with the typed reason and its fix, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `bypass ARGS` with `LD_LIBRARY_PATH=dir`; returns (exit code, stdout, stderr).
fn bypass_with_libs(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .expect("run bypass");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh folder holding the stand-in as libcuda.so.1 (or nothing, for `None`).
fn lib_dir(tag: &str, standin: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bypass-cli-gpu-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    if standin {
        let bin = Path::new(env!("CARGO_BIN_EXE_bypass"));
        let so = bin
            .parent()
            .expect("target profile dir")
            .join("deps/libbypass_standin_cuda.so");
        assert!(so.exists(), "{} was not built", so.display());
        std::fs::copy(&so, dir.join("libcuda.so.1")).expect("stage libcuda.so.1");
    }
    dir
}

/// True when the host's loader finds a libcuda without LD_LIBRARY_PATH.
fn host_has_libcuda() -> bool {
    let listed = Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so"))
        .unwrap_or(false);
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib64",
    ];
    listed
        || dirs
            .iter()
            .any(|d| Path::new(d).join("libcuda.so.1").exists())
}

#[test]
fn gpu_info_with_a_driver_that_finds_no_gpu_names_cuda_error_no_device() {
    let dir = lib_dir("standin", true);
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
    let dir = lib_dir("empty", false);
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
    let dir = lib_dir("topo", true);
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topo/numa2");
    let (code, out, err) = bypass_with_libs(&dir, &["topo", "--sysfs", fixture]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("GPU numbers follow PCI order"), "{out}");
}
