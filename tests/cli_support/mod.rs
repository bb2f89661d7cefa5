//! Shared by the CLI tests: run the `bypass` binary and capture what it says.

use std::process::{Child, Command, Stdio};

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

/// Starts `bypass ARGS` in the background with `env` set and stdout and stderr piped: one
/// side of a two-process run (collect it with `wait_with_output`).
#[allow(dead_code)] // each test binary uses a subset
pub fn start_bypass(args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bypass")
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

/// Runs `bypass ARGS` with stderr on a pseudo-terminal and stdout on a pipe (a user watching
/// a run whose results are piped); returns (success, stdout, what was drawn on the terminal).
#[allow(dead_code)] // each test binary uses a subset
pub fn with_stderr_on_a_terminal(args: &[&str]) -> (bool, String, String) {
    use std::io::Read;
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let child = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(pty.slave))
        .spawn()
        .expect("run bypass");
    let out = child.wait_with_output().expect("wait for bypass");
    // The child has exited and the slave is closed: the master reads what was drawn, then
    // EIO (a pipe's end of file, on a pty).
    let mut master = std::fs::File::from(pty.master);
    let mut drawn = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        drawn.extend_from_slice(&buf[..n]);
    }
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&drawn).into_owned(),
    )
}
