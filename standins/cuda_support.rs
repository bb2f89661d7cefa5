//! # Shared support for the tests that load a stand-in libcuda
//!
//! Included by `standins/cuda/tests/no_gpu.rs`, `standins/cuda-host/tests/gpu_crate.rs` and
//! the workspace's `tests/cli_gpu.rs` (`#[path]`). Owns: finding a stand-in `.so` cargo
//! built ([`built_so`]), staging it in a fresh folder for `LD_LIBRARY_PATH`
//! ([`libcuda_dir`]), telling whether the host's loader finds a libcuda on its own
//! ([`host_has_libcuda`]) and listing a library's defined functions
//! ([`defined_functions`]). Must not: run children or assert on what they print (each test
//! does, its own way), or touch any folder but the ones it made.
//!
//! Why a folder with two names: the loader binds libcuda once per process and reads
//! `LD_LIBRARY_PATH` only then, so each case runs in a child; cudarc tries `libcuda.so`
//! before `libcuda.so.1`, so the stand-in is staged under both, or NVIDIA's `libcuda.so` in
//! a system folder would load first. Sources: ld.so(8) (search order, `LD_LIBRARY_PATH`),
//! ldconfig(8) (`-p`), nm(1) (`-D --defined-only`), cudarc's `culib` candidate names.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The stand-in `name` (`libbypass_standin_cuda.so`, …) cargo built for this test binary:
/// in its `deps` folder or the profile folder above it.
pub fn built_so(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    [deps.join(name), deps.join("..").join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} was not built next to {}", deps.display()))
}

/// A fresh folder `<tmp>/<prefix>-<tag>-<pid>` holding `so` as `libcuda.so.1` and
/// `libcuda.so`, or empty for `None` (no libcuda at all). The caller removes it.
pub fn libcuda_dir(prefix: &str, tag: &str, so: Option<&Path>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    if let Some(so) = so {
        for name in ["libcuda.so.1", "libcuda.so"] {
            std::fs::copy(so, dir.join(name)).expect("stage the stand-in");
        }
    }
    dir
}

/// True when the host's loader finds a libcuda without `LD_LIBRARY_PATH`.
pub fn host_has_libcuda() -> bool {
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

/// The functions `so` defines (`nm -D --defined-only`), or `None` without binutils' nm.
pub fn defined_functions(so: &Path) -> Option<BTreeSet<String>> {
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

/// Whether a test that needs nm may skip without it: panics when `BYPASS_REQUIRE_ORACLES`
/// is set (CI), else says it skipped.
pub fn skip_without_nm() {
    assert!(
        std::env::var_os("BYPASS_REQUIRE_ORACLES").is_none(),
        "nm is needed"
    );
    eprintln!("skipped: no nm (binutils)");
}
