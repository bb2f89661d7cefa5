//! The built `libibverbs.so.1` exports exactly `symbols.txt`, each symbol at its version
//! node as Debian's library defines it: `objdump -T` shows `NAME@@NODE`, `dlvsym(h, NAME,
//! NODE)` finds it (and no other node does), and the soname is `libibverbs.so.1`.
//!
//! Oracles: binutils' `objdump` and Debian's own `libibverbs.so.1`, whose public default
//! versions the list must equal (the check that the list, not only the library, is right).
//! Without them the checks print "skipped" unless BYPASS_REQUIRE_ORACLES is set.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEBIAN: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// The cdylib cargo built for this test: `<target>/<profile>/libibverbs.so`.
fn built_so() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    [deps.join("libibverbs.so"), deps.join("../libibverbs.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("libibverbs.so was not built next to {}", deps.display()))
}

fn oracle(present: bool, what: &str) -> bool {
    if !present && std::env::var_os("BYPASS_REQUIRE_ORACLES").is_some() {
        panic!("{what} is required (BYPASS_REQUIRE_ORACLES is set) but missing");
    }
    if !present {
        eprintln!("skipped: {what} is missing");
    }
    present
}

/// `symbols.txt` as (name, node) pairs.
fn list() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols.txt"))
        .expect("read symbols.txt");
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut c = l.split_whitespace();
            let name = c.next().expect("name").to_owned();
            let node = c.next().expect("node").to_owned();
            (name, node)
        })
        .collect()
}

/// The defined functions of `so` at their default version (`NAME@@NODE` in `objdump -T`),
/// as (name, node).
fn defaults(so: &Path) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(so)
        .output()
        .expect("objdump -T");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(".text"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (node, name) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            // A default version prints as the bare node; a compat one in parentheses.
            (!node.starts_with('(') && *node != "Base")
                .then(|| (name.to_string(), node.to_string()))
        })
        .filter(|(name, _)| !name.starts_with("__bypass_"))
        .collect()
}

fn have_objdump() -> bool {
    Command::new("objdump")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_listed_symbol_is_exported_at_its_node_and_nothing_else() {
    if !oracle(have_objdump(), "objdump (binutils)") {
        return;
    }
    let so = built_so();
    let ours = defaults(&so);
    let want = list();
    let extra: Vec<_> = ours.difference(&want).collect();
    let missing: Vec<_> = want.difference(&ours).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "extra {extra:?}, missing {missing:?}"
    );
    let out = Command::new("objdump")
        .arg("-p")
        .arg(&so)
        .output()
        .expect("objdump -p");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(
        dynamic
            .lines()
            .any(|l| l.trim() == "SONAME               libibverbs.so.1"),
        "soname:\n{dynamic}"
    );
}

#[test]
fn the_list_is_debians_public_symbol_set() {
    if !oracle(have_objdump(), "objdump (binutils)") || !oracle(Path::new(DEBIAN).exists(), DEBIAN)
    {
        return;
    }
    // Debian's public default versions, and the one private symbol consumers import.
    let debian: BTreeSet<_> = defaults(Path::new(DEBIAN))
        .into_iter()
        .filter(|(name, node)| !node.contains("PRIVATE") || name == "ibv_query_gid_type")
        .collect();
    let want = list();
    let extra: Vec<_> = want.difference(&debian).collect();
    let missing: Vec<_> = debian.difference(&want).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "not in Debian's {extra:?}, missing {missing:?}"
    );
}

#[test]
fn dlvsym_finds_each_symbol_at_its_node_only() {
    let so = CString::new(built_so().to_string_lossy().as_bytes()).expect("path");
    // SAFETY: loading the library runs no constructor of ours that touches a device (devices
    // are made on the first ibv_get_device_list); RTLD_LOCAL keeps its symbols out of the
    // test binary's namespace.
    let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen failed");
    for (name, node) in list() {
        let (n, v) = (
            CString::new(name.as_str()).unwrap(),
            CString::new(node.as_str()).unwrap(),
        );
        // SAFETY: `h` is a live handle; both strings are NUL-terminated.
        let at = unsafe { libc::dlvsym(h, n.as_ptr(), v.as_ptr()) };
        assert!(!at.is_null(), "dlvsym({name}, {node}) found nothing");
        let wrong = CString::new("IBVERBS_0.9").unwrap();
        // SAFETY: as above.
        let none = unsafe { libc::dlvsym(h, n.as_ptr(), wrong.as_ptr()) };
        assert!(none.is_null(), "dlvsym({name}, IBVERBS_0.9) found a symbol");
    }
}
