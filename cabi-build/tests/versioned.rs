//! Links `tests/fixture` (a tiny cdylib whose build script calls `link_symbol_list`) and checks
//! the result the way consumers see it: `objdump -T` shows each export as `name@@NODE` at the
//! listed node, the soname is set, and `dlvsym` finds each export at its node (and not at
//! another). Needs `cargo` (always there under `cargo test`) and binutils' `objdump` / `readelf`
//! (an oracle: missing means skipped unless BYPASS_REQUIRE_ORACLES is set).

use std::ffi::CString;
use std::path::PathBuf;
use std::process::Command;

/// (name, node, default?, value the function returns).
const FIXTURE_EXPORTS: [(&str, &str, bool, i32); 5] = [
    ("fix_one", "FIX_1.0", true, 1),
    ("fix_two", "FIX_1.1", true, 2),
    ("fix_two", "FIX_1.0", false, 20),
    ("fix_ten", "FIX_1.10", true, 10),
    ("fix_private", "FIX_PRIVATE_7", true, 7),
];

fn have_tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn require_oracles(tools: &[&str]) -> bool {
    let missing: Vec<&&str> = tools.iter().filter(|t| !have_tool(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("BYPASS_REQUIRE_ORACLES").is_none(),
        "BYPASS_REQUIRE_ORACLES is set but {missing:?} is not installed (apt-get install binutils)"
    );
    println!("skipped: {missing:?} not installed");
    false
}

/// Builds the fixture into this test's scratch target dir and returns the `.so` path.
fn build_fixture() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixture/Cargo.toml");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cabi-fixture");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--locked", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo build for the fixture");
    assert!(
        out.status.success(),
        "fixture build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let so = target.join("debug/libcabifix.so");
    assert!(so.exists(), "{} was not produced", so.display());
    so
}

fn tool_output(tool: &str, args: &[&str], so: &PathBuf) -> String {
    let out = Command::new(tool)
        .args(args)
        .arg(so)
        .output()
        .expect("run binutils");
    assert!(
        out.status.success(),
        "{tool} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn exports_carry_their_version_nodes_and_soname() {
    if !require_oracles(&["objdump", "readelf"]) {
        return;
    }
    let so = build_fixture();
    // `readelf --dyn-syms -W` prints defined symbols as `name@@NODE` (default) / `name@NODE`.
    let dynsyms = tool_output("readelf", &["--dyn-syms", "-W"], &so);
    for (name, node, default, _) in FIXTURE_EXPORTS {
        let want = format!("{name}{}{node}", if default { "@@" } else { "@" });
        assert!(
            dynsyms.split_whitespace().any(|w| w == want),
            "{want} missing from readelf --dyn-syms:\n{dynsyms}"
        );
    }
    // `objdump -T` columns: ... SECTION SIZE VERSION NAME, VERSION in parentheses if hidden.
    let objdump = tool_output("objdump", &["-T"], &so);
    for (name, node, default, _) in FIXTURE_EXPORTS {
        let shown = if default {
            node.to_string()
        } else {
            format!("({node})")
        };
        let found = objdump.lines().any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() >= 2 && c[c.len() - 1] == name && c[c.len() - 2] == shown && l.contains(".text")
        });
        assert!(found, "objdump -T lacks {name} at {node}:\n{objdump}");
    }
    let dynamic = tool_output("readelf", &["-d"], &so);
    assert!(
        dynamic.contains("Library soname: [libcabifix.so.1]"),
        "soname not set:\n{dynamic}"
    );
}

#[test]
fn dlvsym_finds_each_export_at_its_node_only() {
    let so = build_fixture();
    let path = CString::new(so.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: dlopen gets a NUL-terminated path; the fixture has no constructors.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {} failed", so.display());
    for (name, node, _, value) in FIXTURE_EXPORTS {
        let cname = CString::new(name).expect("no NUL");
        let cnode = CString::new(node).expect("no NUL");
        // SAFETY: handle is live; both strings are NUL-terminated.
        let sym = unsafe { libc::dlvsym(handle, cname.as_ptr(), cnode.as_ptr()) };
        assert!(!sym.is_null(), "dlvsym({name}, {node}) found nothing");
        // SAFETY: the fixture defines every export as `extern "C" fn() -> i32`.
        let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(sym) };
        assert_eq!(f(), value, "{name}@{node} is the wrong function");
        let wrong = CString::new("FIX_9.9").expect("no NUL");
        // SAFETY: as above.
        let none = unsafe { libc::dlvsym(handle, cname.as_ptr(), wrong.as_ptr()) };
        assert!(none.is_null(), "dlvsym({name}, FIX_9.9) should fail");
    }
    // Plain dlsym binds the default version, as a new link would.
    let two = CString::new("fix_two").expect("no NUL");
    // SAFETY: handle is live; the string is NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, two.as_ptr()) };
    assert!(!sym.is_null(), "dlsym(fix_two) found nothing");
    // SAFETY: as above, the export is `extern "C" fn() -> i32`.
    let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(sym) };
    assert_eq!(f(), 2, "dlsym(fix_two) should bind fix_two@@FIX_1.1");
    // SAFETY: handle came from dlopen and no pointer from it is used after this.
    unsafe { libc::dlclose(handle) };
}
