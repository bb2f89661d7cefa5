//! Shared by the CLI tests: run the `bypass` binary and capture what it says.

use std::process::Command;

/// Runs `bypass ARGS`; returns (exit code, stdout, stderr).
pub fn bypass(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(args)
        .output()
        .expect("run bypass");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
