//! The gpu crate on a machine with no GPU: with this stand-in as libcuda.so.1 it reports
//! `CUDA_ERROR_NO_DEVICE` from `cuInit`, and with no libcuda at all `NoCudaLibrary`; both
//! as typed errors, never a panic. Each case runs in a child process (this test binary,
//! re-run on its `probe` test) because the loader binds libcuda once per process and reads
//! `LD_LIBRARY_PATH` only when it does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Set in the child: run the probe.
const PROBE_ENV: &str = "BYPASS_GPU_PROBE";

/// The stand-in cargo built for this test: `<target>/<profile>/libbypass_standin_cuda.so`.
fn built_standin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    let name = "libbypass_standin_cuda.so";
    [deps.join(name), deps.join("..").join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} was not built next to {}", deps.display()))
}

/// A fresh empty folder for one test's LD_LIBRARY_PATH.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bypass-cuda-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Runs the probe in a child with `LD_LIBRARY_PATH=dir`.
fn probe_in(dir: &Path) -> Output {
    Command::new(std::env::current_exe().expect("test binary path"))
        .args(["--exact", "probe", "--nocapture", "--test-threads=1"])
        .env(PROBE_ENV, "1")
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .expect("run the probe child")
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
    let dir = temp_dir("standin");
    // Also as libcuda.so, cudarc's first candidate name: on a host with NVIDIA's
    // libcuda.so in a system folder, that name would otherwise load the real driver
    // before libcuda.so.1 is looked for here.
    for name in ["libcuda.so.1", "libcuda.so"] {
        std::fs::copy(built_standin(), dir.join(name)).expect("stage the stand-in");
    }
    let out = probe_in(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains(
            r#"PROBE ERR Cuda { call: "cuInit", code: 100, name: "CUDA_ERROR_NO_DEVICE" }"#
        ),
        "{stdout}"
    );
    assert!(stdout.contains("PROBE NO_GPU true"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// True when the host's loader can find a libcuda without LD_LIBRARY_PATH.
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
fn without_libcuda_the_error_is_no_cuda_library() {
    if host_has_libcuda() {
        eprintln!("skipped: this host has a libcuda the loader finds without LD_LIBRARY_PATH");
        return;
    }
    let dir = temp_dir("empty");
    let out = probe_in(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.contains("PROBE ERR NoCudaLibrary"), "{stdout}");
    assert!(stdout.contains("install the NVIDIA driver"), "{stdout}");
    assert!(stdout.contains("PROBE NO_GPU true"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The functions `so` defines (`nm -D --defined-only`), or `None` without binutils' nm.
fn defined_functions(so: &std::path::Path) -> Option<std::collections::BTreeSet<String>> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(so)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (_, kind, name) = (w.next()?, w.next()?, w.next()?);
                (kind == "T").then(|| name.to_owned())
            })
            .collect(),
    )
}

#[test]
fn the_standin_exports_exactly_what_bypass_gpu_calls_before_cuinit() {
    let Some(got) = defined_functions(&built_standin()) else {
        assert!(
            std::env::var_os("BYPASS_REQUIRE_ORACLES").is_none(),
            "nm is needed"
        );
        eprintln!("skipped: no nm (binutils)");
        return;
    };
    let want: std::collections::BTreeSet<String> = bypass_gpu::START_SYMBOLS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}
