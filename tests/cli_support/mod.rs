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

/// How many positive finite numbers follow `label` on the first line of `out` that holds it
/// (one ratio per round on the perf comparisons' "per round" lines); 0 without such a line.
/// ("NaN" and "inf" parse as numbers: they are not counted.)
#[allow(dead_code)] // each test binary uses a subset
pub fn numbers_after(out: &str, label: &str) -> usize {
    out.lines()
        .find_map(|l| l.split_once(label).map(|(_, rest)| rest))
        .map_or(0, |rest| {
            rest.split_whitespace()
                .filter(|w| w.parse::<f64>().is_ok_and(|x| x.is_finite() && x > 0.0))
                .count()
        })
}

/// Starts `bypass SERVER_ARGS` in the background, runs `bypass CLIENT_ARGS` to its end, then
/// waits for the server; returns (server ok, server stdout + stderr, client ok, client stdout
/// + stderr). The two-process form of every command that has a server and a client.
#[allow(dead_code)] // each test binary uses a subset
pub fn server_and_client(server: &[&str], client: &[&str]) -> (bool, String, bool, String) {
    let server = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(server)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the bypass server");
    let (code, out, err) = bypass(client);
    let s = server
        .wait_with_output()
        .expect("wait for the bypass server");
    (
        s.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&s.stdout),
            String::from_utf8_lossy(&s.stderr)
        ),
        code == 0,
        format!("{out}{err}"),
    )
}
