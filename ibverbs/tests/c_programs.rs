//! C programs against the built `libibverbs.so.1`: each `tests/c/NAME.c` is compiled by gcc
//! against the installed `<infiniband/verbs.h>`, linked to this crate's cdylib (copied as
//! `libibverbs.so.1` into a folder of `CARGO_TARGET_TMPDIR`, found next to the test binary as
//! `standins/abi_test.rs` finds its `.so`), and run with `BYPASS_DEVICE=sim` (one stepped
//! fabric: deterministic). A program passes when it exits 0, its last line is
//! `NAME: all N checks passed`, and the `known gap: ID` lines it prints are exactly the ones
//! listed here (a gap that gets fixed fails the run until it leaves the list).
//!
//! Programs: `qpex_ops` (the extended post, every opcode, data byte for byte), `qpex_errors`
//! (its errors), `post_basic` (ibv_post_send/recv/poll_cq and `ibv_wc`), `unreliable` (UD and
//! UC, both posts), `verbs_errors` (errnos of the basic verbs), `reopen` (traffic after a
//! device's last context closed). Without gcc or the header: a failure under
//! `BYPASS_REQUIRE_ORACLES=1`, else "skipped". Writes only under `CARGO_TARGET_TMPDIR`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one program may run (they take about a second each in a debug build).
const LIMIT: Duration = Duration::from_secs(300);

/// The C sources.
fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// The cdylib cargo built for this test: `<target>/<profile>/libibverbs.so`.
fn built_so() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    [deps.join("libibverbs.so"), deps.join("../libibverbs.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("libibverbs.so was not built next to {}", deps.display()))
}

/// Whether gcc compiles against `<infiniband/verbs.h>`; panics when it cannot and
/// `BYPASS_REQUIRE_ORACLES` is set, else prints "skipped".
fn have_gcc() -> bool {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    let r = OK.get_or_init(|| {
        let out = Command::new("gcc")
            .args(["-fsyntax-only", "-x", "c", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                if let Some(mut i) = c.stdin.take() {
                    i.write_all(b"#include <infiniband/verbs.h>\nint main(void){return 0;}\n")?;
                }
                c.wait_with_output()
            });
        match out {
            Err(e) => Err(format!("gcc cannot be run: {e}")),
            Ok(o) if !o.status.success() => Err(format!(
                "gcc cannot compile <infiniband/verbs.h> (install gcc and libibverbs-dev): {}",
                String::from_utf8_lossy(&o.stderr)
            )),
            Ok(_) => Ok(()),
        }
    });
    match r {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var_os("BYPASS_REQUIRE_ORACLES").is_none(),
                "BYPASS_REQUIRE_ORACLES is set but {why}"
            );
            println!("skipped: {why}");
            false
        }
    }
}

/// The folder holding `libibverbs.so.1` (and the `libibverbs.so` gcc links against).
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("c_programs-{}/lib", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the library folder");
        let so = built_so();
        for name in ["libibverbs.so.1", "libibverbs.so"] {
            std::fs::copy(&so, dir.join(name)).expect("copy libibverbs.so");
        }
        dir
    })
}

/// Compiles and runs `tests/c/NAME.c` on `device`; checks its status, last line and
/// known gaps.
fn run(name: &str, device: &str, known_gaps: &[&str]) {
    if !have_gcc() {
        return;
    }
    let lib = lib_dir();
    let exe = lib.parent().expect("work dir").join(name);
    let src = c_dir().join(format!("{name}.c"));
    let cc = Command::new("gcc")
        .args([
            "-std=gnu11",
            "-O1",
            "-g",
            "-pthread",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-I")
        .arg(c_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib)
        .arg("-libverbs")
        .output()
        .expect("run gcc");
    assert!(
        cc.status.success(),
        "gcc {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let mut child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", lib)
        .env("BYPASS_DEVICE", device)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} ran past {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("program output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.starts_with(&format!("{name}: all ")) && last.ends_with(" checks passed"),
        "{name}: last line {last:?}"
    );
    let gaps: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("known gap: "))
        .collect();
    assert_eq!(
        gaps, known_gaps,
        "{name}: the known gaps changed (a fixed one: turn its KNOWN_GAP into a CHECK)"
    );
}

#[test]
fn qpex_ops() {
    run("qpex_ops", "sim", &[]);
}

#[test]
fn qpex_errors() {
    run("qpex_errors", "sim", &[]);
}

#[test]
fn post_basic() {
    run("post_basic", "sim", &[]);
}

#[test]
fn unreliable() {
    run("unreliable", "sim", &[]);
}

#[test]
fn verbs_errors() {
    run("verbs_errors", "sim", &[]);
}

#[test]
fn reopen() {
    run("reopen", "sim", &[]);
}

/// Every program in `tests/c` has its test above.
#[test]
fn every_program_is_run() {
    let mut found: Vec<String> = std::fs::read_dir(c_dir())
        .expect("read tests/c")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            (p.extension()? == "c").then_some(stem)
        })
        .collect();
    found.sort();
    let want = [
        "post_basic",
        "qpex_errors",
        "qpex_ops",
        "reopen",
        "unreliable",
        "verbs_errors",
    ];
    assert_eq!(
        found, want,
        "tests/c/*.c and the tests of c_programs.rs differ"
    );
}
