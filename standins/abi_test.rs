//! # Shared checks for the stand-in libraries' integration tests
//!
//! Included by `standins/{mlx5,efa}/tests/abi.rs` (`#[path]`); each test passes its soname and
//! the crate's `symbols.txt`. Checks, against the built `.so`: (1) the defined functions are
//! exactly the list's `name@@NODE` / `name@NODE` set (ignoring the private `__bypass_impl_`
//! names, see cabi-build's `link_versioned`), and the soname; (2) the list equals the installed
//! Debian library's export set (oracle: Debian's `ibverbs-providers` and binutils); (3) every
//! stub, called through `dlvsym` at its node, fails as its kind says; (4)
//! `../regen-symbols.py --check` reproduces the committed list, kinds included. Oracles that are
//! absent skip the check unless BYPASS_REQUIRE_ORACLES is set. Never writes files.

use std::collections::BTreeSet;
use std::ffi::{CString, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian installs the real provider libraries.
pub const DEBIAN_LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

/// One `symbols.txt` line: (name, version as written — `@NODE` for compat —, kind).
pub type Entry = (String, String, String);

/// Parses the crate's list (`NAME VERSION KIND`, `#` comments).
pub fn read_list(manifest_dir: &str) -> Vec<Entry> {
    let path = Path::new(manifest_dir).join("symbols.txt");
    let text = std::fs::read_to_string(&path).expect("read symbols.txt");
    text.lines()
        .filter_map(|l| {
            let c: Vec<&str> = l
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            (!c.is_empty()).then(|| {
                assert_eq!(c.len(), 3, "symbols.txt line {l:?} needs NAME VERSION KIND");
                (c[0].to_string(), c[1].to_string(), c[2].to_string())
            })
        })
        .collect()
}

/// The `.so` cargo built for the crate under test: `<target>/<profile>/lib<name>.so`, next to
/// the `deps/` folder that holds the test binary.
pub fn built_so(lib_name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    let so = deps.join(format!("lib{lib_name}.so"));
    let so = if so.exists() {
        so
    } else {
        deps.join(format!("../lib{lib_name}.so"))
    };
    assert!(so.exists(), "{} was not built", so.display());
    so
}

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether an oracle is present; panics when absent and BYPASS_REQUIRE_ORACLES is set.
pub fn oracle(present: bool, what: &str) -> bool {
    if !present {
        assert!(
            std::env::var_os("BYPASS_REQUIRE_ORACLES").is_none(),
            "BYPASS_REQUIRE_ORACLES is set but {what} is missing"
        );
        println!("skipped: {what} is missing");
    }
    present
}

/// Defined FUNC symbols of `so` as readelf prints them (`name@@NODE`, `name@NODE`, or bare).
pub fn defined_functions(so: &Path) -> BTreeSet<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(so)
        .output()
        .expect("readelf");
    assert!(out.status.success(), "readelf {} failed", so.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c.len() >= 8 && c[3] == "FUNC" && c[6] != "UND").then(|| c[7].to_string())
        })
        .collect()
}

/// The list as readelf would print it.
pub fn list_as_readelf(list: &[Entry]) -> BTreeSet<String> {
    list.iter()
        .map(|(n, v, _)| match v.strip_prefix('@') {
            Some(node) => format!("{n}@{node}"),
            None => format!("{n}@@{v}"),
        })
        .collect()
}

/// (1): the built library exports exactly the list, under `soname`.
pub fn check_exports_match_list(lib_name: &str, soname: &str, list: &[Entry]) {
    if !oracle(have("readelf", "--version"), "readelf (binutils)") {
        return;
    }
    let so = built_so(lib_name);
    let ours: BTreeSet<String> = defined_functions(&so)
        .into_iter()
        .filter(|s| !s.starts_with("__bypass_impl_"))
        .collect();
    let want = list_as_readelf(list);
    let extra: Vec<_> = ours.difference(&want).collect();
    let missing: Vec<_> = want.difference(&ours).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "extra {extra:?}, missing {missing:?}"
    );
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&so)
        .output()
        .expect("readelf -d");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(
        dynamic.contains(&format!("Library soname: [{soname}]")),
        "soname:\n{dynamic}"
    );
    assert!(
        !dynamic.contains("libibverbs"),
        "a stand-in must not need libibverbs:\n{dynamic}"
    );
}

/// (2): the committed list is Debian's export set.
pub fn check_list_matches_debian(soname: &str, list: &[Entry]) {
    let deb = Path::new(DEBIAN_LIBDIR).join(soname);
    if !oracle(
        deb.exists(),
        &format!("{} (ibverbs-providers)", deb.display()),
    ) || !oracle(have("readelf", "--version"), "readelf (binutils)")
    {
        return;
    }
    let theirs = defined_functions(&deb);
    let want = list_as_readelf(list);
    assert_eq!(
        want,
        theirs,
        "symbols.txt differs from {}: run standins/regen-symbols.py",
        deb.display()
    );
}

fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot, valid while the thread lives.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = v };
}

/// (3): each stub, found by `dlvsym` at its node, fails as its kind says.
pub fn check_stub_behaviour(lib_name: &str, list: &[Entry]) {
    let so = built_so(lib_name);
    let path = CString::new(so.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: the path is NUL-terminated; the stand-in has no constructors.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {} failed", so.display());
    for (name, version, kind) in list {
        let node = version.strip_prefix('@').unwrap_or(version);
        let (cn, cv) = (
            CString::new(name.as_str()).unwrap(),
            CString::new(node).unwrap(),
        );
        // SAFETY: h is live; both strings are NUL-terminated.
        let sym = unsafe { libc::dlvsym(h, cn.as_ptr(), cv.as_ptr()) };
        assert!(!sym.is_null(), "dlvsym({name}, {node}) found nothing");
        set_errno(0);
        // The stubs take no arguments and return the scalar their kind names (see
        // standins/stubgen.rs), so each signature below matches the stub's definition.
        match kind.as_str() {
            "ptr" => {
                // SAFETY: a `ptr` stub is `extern "C" fn() -> *mut c_void`.
                let f: extern "C" fn() -> *mut c_void = unsafe { std::mem::transmute(sym) };
                assert!(f().is_null(), "{name} should return NULL");
                assert_eq!(errno(), libc::EOPNOTSUPP, "{name} should set errno");
            }
            "int_errno" => {
                // SAFETY: an `int_errno` stub is `extern "C" fn() -> c_int`.
                let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(sym) };
                assert_eq!(f(), libc::EOPNOTSUPP, "{name}");
            }
            "int_neg" => {
                // SAFETY: an `int_neg` stub is `extern "C" fn() -> isize`.
                let f: extern "C" fn() -> isize = unsafe { std::mem::transmute(sym) };
                assert_eq!(f(), -(libc::EOPNOTSUPP as isize), "{name}");
                assert_eq!(errno(), libc::EOPNOTSUPP, "{name} should set errno");
                // SAFETY: reading only the low half (eax) of its return, as an int caller does.
                let g: extern "C" fn() -> c_int = unsafe { std::mem::transmute(sym) };
                assert_eq!(g(), -libc::EOPNOTSUPP, "{name} read as int");
            }
            "bool0" => {
                // SAFETY: a `bool0` stub returns int 0; a bool caller reads its low byte.
                let f: extern "C" fn() -> bool = unsafe { std::mem::transmute(sym) };
                assert!(!f(), "{name} should return false");
                // SAFETY: as above, read as the int it is.
                let g: extern "C" fn() -> c_int = unsafe { std::mem::transmute(sym) };
                assert_eq!(g(), 0, "{name} read as int");
            }
            "void" => {
                // SAFETY: a `void` stub is `extern "C" fn()`.
                let f: extern "C" fn() = unsafe { std::mem::transmute(sym) };
                f();
            }
            other => panic!("{name}: unknown kind {other}"),
        }
    }
    // SAFETY: h came from dlopen; no pointer from it is used after this.
    unsafe { libc::dlclose(h) };
}

/// (4): `regen-symbols.py --check` reproduces the committed lists from the installed libraries.
pub fn check_regen_reproduces_lists(soname: &str) {
    let deb = Path::new(DEBIAN_LIBDIR).join(soname);
    if !oracle(
        deb.exists(),
        &format!("{} (ibverbs-providers)", deb.display()),
    ) || !oracle(have("python3", "--version"), "python3")
        || !oracle(have("readelf", "--version"), "readelf (binutils)")
        || !oracle(
            Path::new("/usr/include/infiniband/mlx5dv.h").exists(),
            "libibverbs-dev headers",
        )
    {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../regen-symbols.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "regen-symbols.py --check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
