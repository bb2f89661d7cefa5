//! The two-process `perf` tools' out-of-band exchange is authenticated and encrypted by
//! default: with one key file on both ends the run succeeds; with different keys both ends
//! fail saying the keys differ; a key on one end and `--plaintext` on the other fails on
//! both with the mismatch named; `--plaintext` on both works and warns; a key file others
//! may read is refused naming `chmod 600`; `bypass exchange-key` makes a 0600 key. The
//! two-process `ping --ramp` control channel follows the same rules (different keys fail on
//! both ends, `--plaintext` on both passes and warns).
//!
//! The capture: a TCP relay in this test sits between client and server and records every
//! byte of the exchange. Each side prints the hello it sent when `BYPASS_LOG_KEYS=1` (the
//! CLI's opt-in to reveal keys), so the test knows the run's QPNs, PSNs, rkeys and
//! addresses; with a key none of them appears in the recorded bytes as the JSON would
//! carry it (a decimal token) nor as hex, while with `--plaintext` they all do (so the
//! check can fail).
//!
//! Owns: these tests. Addresses: loopback 127.0.34.x, ports 34000-34999 (one set per test),
//! apart from every other test binary's. Must not: test the handshake's frames
//! (`bypass_verbs::exchange`'s unit tests do) or the perf tables (`cli_perf_udp`).

mod cli_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A fresh directory for one test's key files (removed when dropped).
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("bypass-cli-exchange-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// A new key file made by `bypass exchange-key PATH`.
    fn key(&self, name: &str) -> String {
        let path = self.0.join(name);
        let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
            .args(["exchange-key"])
            .arg(&path)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{said}{}", text(&out.stderr));
        assert!(said.contains(&path.display().to_string()), "{said}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        path.display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Forwards one connection from `listen` to `to`, recording both directions' bytes.
fn relay(listen: u16, to: u16) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let l = TcpListener::bind(("127.0.0.1", listen)).expect("bind the relay");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = seen.clone();
    let t = std::thread::spawn(move || {
        let Ok((client, _)) = l.accept() else { return };
        // The server listens before the client connects (it is started first), but give
        // it a moment to bind.
        let mut server = None;
        for _ in 0..500 {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", to)) {
                server = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let Some(server) = server else { return };
        let pipe = |mut from: TcpStream, mut to: TcpStream, rec: Arc<Mutex<Vec<u8>>>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    rec.lock().unwrap().extend_from_slice(&buf[..n]);
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            })
        };
        let a = pipe(
            client.try_clone().unwrap(),
            server.try_clone().unwrap(),
            rec.clone(),
        );
        let b = pipe(server, client, rec);
        let _ = a.join();
        let _ = b.join();
    });
    (seen, t)
}

/// One two-process `perf write-bw` run on the UDP ports `base+1` (sim NICs), the server's
/// TCP port `base+2`, the client connecting to `client_port`; each side with its own
/// extra arguments and `BYPASS_LOG_KEYS=1`.
fn run(
    base: u16,
    client_port: u16,
    server_extra: &[&str],
    client_extra: &[&str],
) -> (Output, Output) {
    let (udp, tcp) = ((base + 1).to_string(), (base + 2).to_string());
    let cport = client_port.to_string();
    let opts = ["-s", "4K", "-n", "200"];
    let d1 = format!("udp:127.0.34.1:{udp}");
    let server = cli_support::start_bypass(
        &[
            &["perf", "write-bw", "-d", &d1, "-p", &tcp][..],
            &opts,
            server_extra,
        ]
        .concat(),
        &[("BYPASS_LOG_KEYS", "1")],
    );
    let client = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args([
            "perf",
            "write-bw",
            "-d",
            &format!("udp:127.0.34.2:{udp}"),
            "-p",
            &cport,
        ])
        .args(opts)
        .args(client_extra)
        .arg("127.0.0.1")
        .env("BYPASS_LOG_KEYS", "1")
        .output()
        .expect("run the bypass client");
    let server = server.wait_with_output().expect("wait for the server");
    (server, client)
}

fn both(s: &Output, c: &Output) -> String {
    format!(
        "server:\n{}{}\nclient:\n{}{}",
        text(&s.stdout),
        text(&s.stderr),
        text(&c.stdout),
        text(&c.stderr)
    )
}

/// The numbers after `label` in `line`: each run of digits (hex after `0x`).
fn values_after(line: &str, label: &str) -> Vec<u64> {
    line.match_indices(label)
        .filter_map(|(i, _)| {
            let rest = &line[i + label.len()..];
            let (digits, radix) = match rest.strip_prefix("0x") {
                Some(hex) => (hex, 16),
                None => (rest, 10),
            };
            let end = digits
                .find(|c: char| !c.is_digit(radix))
                .unwrap_or(digits.len());
            u64::from_str_radix(&digits[..end], radix).ok()
        })
        .collect()
}

/// The run's secrets, from both sides' `out-of-band hello sent:` lines: (name, value).
fn secrets(s: &Output, c: &Output) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for err in [text(&s.stderr), text(&c.stderr)] {
        let line = err
            .lines()
            .find(|l| l.contains("out-of-band hello sent:"))
            .unwrap_or_else(|| panic!("no hello line (BYPASS_LOG_KEYS=1): {err}"))
            .to_owned();
        assert!(!line.contains("redacted"), "{line}");
        for name in ["qpn", "psn", "rkey", "addr"] {
            let vs = values_after(&line, &format!("{name}: "));
            assert!(!vs.is_empty(), "no {name} in {line}");
            out.extend(vs.into_iter().map(|v| (name, v)));
        }
    }
    out
}

/// Whether `hay` holds `needle`.
fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// How `v` would show in the exchange's bytes: as the JSON number token after a field
/// name's colon (`:1234,` / `:1234}`), and as hex where that is long enough not to turn
/// up in random ciphertext by chance.
fn forms(v: u64) -> Vec<String> {
    let mut f = vec![format!(":{v},"), format!(":{v}}}")];
    let hex = format!("{v:x}");
    if hex.len() >= 5 {
        f.push(hex.clone());
        f.push(hex.to_uppercase());
    }
    f
}

#[test]
fn with_one_key_the_run_succeeds_and_a_capture_shows_no_endpoint_or_rkey_in_clear() {
    let dir = Dir::new("capture");
    let key = dir.key("shared.key");
    let (seen, relay) = relay(34013, 34012);
    let (s, c) = run(34010, 34013, &["--key-file", &key], &["--key-file", &key]);
    let all = both(&s, &c);
    assert!(s.status.success() && c.status.success(), "{all}");
    relay.join().unwrap();
    let bytes = seen.lock().unwrap().clone();
    assert!(
        bytes.len() > 100,
        "the relay saw {} bytes: {all}",
        bytes.len()
    );
    for field in ["\"rkey\"", "\"addr\"", "\"qpn\"", "\"psn\"", "\"test\""] {
        assert!(!holds(&bytes, field), "{field} in clear in the capture");
    }
    for (name, v) in secrets(&s, &c) {
        for f in forms(v) {
            assert!(
                !holds(&bytes, &f),
                "{name} {v} as {f:?} in clear in the capture"
            );
        }
    }
}

#[test]
fn with_plaintext_the_run_warns_and_the_capture_shows_every_secret() {
    let (seen, relay) = relay(34023, 34022);
    let (s, c) = run(34020, 34023, &["--plaintext"], &["--plaintext"]);
    let all = both(&s, &c);
    assert!(s.status.success() && c.status.success(), "{all}");
    for o in [&s, &c] {
        assert!(
            text(&o.stderr)
                .contains("warning: --plaintext: the out-of-band exchange is unauthenticated"),
            "{all}"
        );
    }
    relay.join().unwrap();
    let bytes = seen.lock().unwrap().clone();
    for (name, v) in secrets(&s, &c) {
        assert!(
            forms(v).iter().take(2).any(|f| holds(&bytes, f)),
            "{name} {v} not in the plaintext capture: the check above could not fail"
        );
    }
}

#[test]
fn different_keys_fail_on_both_ends_saying_the_keys_differ() {
    let dir = Dir::new("wrong");
    let (a, b) = (dir.key("a.key"), dir.key("b.key"));
    let (s, c) = run(34030, 34032, &["--key-file", &a], &["--key-file", &b]);
    let all = both(&s, &c);
    assert!(!s.status.success() && !c.status.success(), "{all}");
    for o in [&s, &c] {
        let err = text(&o.stderr);
        assert!(err.contains("exchange keys differ"), "{all}");
        assert!(err.contains("same key"), "{all}");
        assert!(!err.contains("out-of-band hello sent"), "{all}");
    }
}

#[test]
fn a_key_on_one_end_and_plaintext_on_the_other_fail_on_both_naming_it() {
    let dir = Dir::new("mixed");
    let key = dir.key("k.key");
    let (s, c) = run(34040, 34042, &["--key-file", &key], &["--plaintext"]);
    let all = both(&s, &c);
    assert!(!s.status.success() && !c.status.success(), "{all}");
    assert!(
        text(&s.stderr).contains("the peer runs the out-of-band exchange in plaintext"),
        "{all}"
    );
    assert!(
        text(&c.stderr).contains("the peer runs the authenticated out-of-band exchange"),
        "{all}"
    );
}

#[test]
fn a_key_file_others_may_read_is_refused_with_chmod_600() {
    let dir = Dir::new("mode");
    let key = dir.key("open.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args([
            "perf",
            "write-bw",
            "-d",
            "udp:127.0.34.1:34051",
            "-p",
            "34052",
        ])
        .env("BYPASS_EXCHANGE_KEY_FILE", &key)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&key) && err.contains("chmod 600"), "{err}");
    // exchange-key never overwrites.
    let again = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["exchange-key", &key])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    assert!(Path::new(&key).exists());
}

/// `ping --ramp` across two processes (UDP ports `base+1`, TCP `base+2`), each side with
/// its extra arguments.
fn ramp(base: u16, server_extra: &[&str], client_extra: &[&str]) -> (Output, Output) {
    let (udp, tcp) = ((base + 1).to_string(), (base + 2).to_string());
    let d1 = format!("udp:127.0.34.1:{udp}");
    let server = cli_support::start_bypass(
        &[&["ping", "--ramp", "-d", &d1, "-p", &tcp][..], server_extra].concat(),
        &[],
    );
    let client = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args([
            "ping",
            "--ramp",
            "-d",
            &format!("udp:127.0.34.2:{udp}"),
            "-p",
            &tcp,
        ])
        .args(["--qps", "2", "--max-size", "64K"])
        .args(client_extra)
        .arg("127.0.0.1")
        .output()
        .expect("run the ramp client");
    (
        server.wait_with_output().expect("wait for the ramp server"),
        client,
    )
}

#[test]
fn ping_ramp_with_different_keys_fails_on_both_ends_saying_the_keys_differ() {
    let dir = Dir::new("ramp-wrong");
    let (a, b) = (dir.key("a.key"), dir.key("b.key"));
    let (s, c) = ramp(34060, &["--key-file", &a], &["--key-file", &b]);
    let all = both(&s, &c);
    assert!(!s.status.success() && !c.status.success(), "{all}");
    for o in [&s, &c] {
        assert!(text(&o.stderr).contains("exchange keys differ"), "{all}");
    }
}

#[test]
fn ping_ramp_with_plaintext_on_both_ends_passes_and_warns() {
    let (s, c) = ramp(34070, &["--plaintext"], &["--plaintext"]);
    let all = both(&s, &c);
    assert!(s.status.success() && c.status.success(), "{all}");
    assert!(text(&c.stdout).contains("ping --ramp: ok"), "{all}");
    for o in [&s, &c] {
        assert!(text(&o.stderr).contains("warning: --plaintext"), "{all}");
    }
}
