//! The gpu crate on a machine with no GPU: with this stand-in as libcuda.so.1 it reports
//! `CUDA_ERROR_NO_DEVICE` from `cuInit`, and with no libcuda at all `NoCudaLibrary`; both
//! as typed errors, never a panic. Each case runs in a child process (this test binary,
//! re-run on its `probe` test) because the loader binds libcuda once per process and reads
//! `LD_LIBRARY_PATH` only when it does.

#[path = "../../cuda_support.rs"]
mod cuda_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use cuda_support::{built_so, defined_functions, host_has_libcuda, libcuda_dir, skip_without_nm};

/// Set in the child: run the probe.
const PROBE_ENV: &str = "BYPASS_GPU_PROBE";

/// The stand-in cargo built for this test.
fn built_standin() -> PathBuf {
    built_so("libbypass_standin_cuda.so")
}

/// Runs the probe in a child with `LD_LIBRARY_PATH=dir`, then removes `dir`; returns
/// (exit code, stdout, stderr).
fn probe_in(dir: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["--exact", "probe", "--nocapture", "--test-threads=1"])
        .env(PROBE_ENV, "1")
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .expect("run the probe child");
    let _ = std::fs::remove_dir_all(dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The child's side: open GPU 0 and print what happened; exit 3 on an error.
#[test]
fn probe() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    match bypass_gpu::Gpu::open(0) {
        Ok(gpu) => println!("PROBE OK {:?}", gpu.info()),
        Err(e) => {
            println!("PROBE ERR {e:?}");
            println!("PROBE MSG {e}");
            println!("PROBE NO_GPU {}", e.is_no_gpu());
            std::process::exit(3);
        }
    }
}

#[test]
fn the_standin_driver_reports_no_device_as_a_typed_error() {
    let dir = libcuda_dir("bypass-cuda", "standin", Some(&built_standin()));
    let (code, stdout, stderr) = probe_in(&dir);
    assert_eq!(code, Some(3), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains(
            r#"PROBE ERR Cuda { call: "cuInit", code: 100, name: "CUDA_ERROR_NO_DEVICE" }"#
        ),
        "{stdout}"
    );
    assert!(stdout.contains("PROBE NO_GPU true"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn without_libcuda_the_error_is_no_cuda_library() {
    if host_has_libcuda() {
        eprintln!("skipped: this host has a libcuda the loader finds without LD_LIBRARY_PATH");
        return;
    }
    let dir = libcuda_dir("bypass-cuda", "empty", None);
    let (code, stdout, stderr) = probe_in(&dir);
    assert_eq!(code, Some(3), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("PROBE ERR NoCudaLibrary"), "{stdout}");
    assert!(stdout.contains("install the NVIDIA driver"), "{stdout}");
    assert!(stdout.contains("PROBE NO_GPU true"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn the_standin_exports_exactly_what_bypass_gpu_calls_before_cuinit() {
    let Some(got) = defined_functions(&built_standin()) else {
        skip_without_nm();
        return;
    };
    let want: std::collections::BTreeSet<String> = bypass_gpu::START_SYMBOLS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}
