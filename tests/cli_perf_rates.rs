//! `bypass perf msg-rate` and `bypass perf sim-speed` with tiny parameters: each prints its
//! table with the bypass figure, the baseline and their ratio, all positive numbers. Form
//! and data only: no timing assertions.

use std::process::Command;

/// Runs `bypass perf ARGS` and returns its stdout (panics with stderr on failure).
fn perf(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .arg("perf")
        .args(args)
        .output()
        .expect("run bypass");
    assert!(
        out.status.success(),
        "bypass perf {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The numbers on the row starting with `label`: the median and the range's two ends, or
/// the ratio alone.
fn row(text: &str, label: &str) -> Vec<f64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no row {label:?} in:\n{text}"));
    line[line.find(label).unwrap() + label.len()..]
        .split(|c: char| c.is_whitespace() || c == '-')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{s:?} in {line:?}")))
        .collect()
}

fn check_measurement(text: &str, label: &str) -> f64 {
    let v = row(text, label);
    assert_eq!(v.len(), 3, "median and range on {label:?}: {v:?}");
    let (med, lo, hi) = (v[0], v[1], v[2]);
    assert!(lo > 0.0 && lo <= med && med <= hi, "{label}: {v:?}");
    med
}

#[test]
fn msg_rate_reports_writes_udp_and_their_ratio() {
    let text = perf(&[
        "msg-rate",
        "-n",
        "2000",
        "--reps",
        "2",
        "--udp-addr",
        "127.0.49.2",
    ]);
    assert!(text.contains("median Mpps"), "{text}");
    let sim = check_measurement(&text, "bypass WRITE (WriteBatch, sim)");
    let udp = check_measurement(&text, "UDP loopback sendmmsg/recvmmsg");
    let ratio = row(&text, "ratio bypass/UDP");
    assert_eq!(ratio.len(), 1, "{text}");
    assert_ratio_of_printed_medians(ratio[0], sim, udp, &text);
}

#[test]
fn sim_speed_reports_both_fabrics_and_their_ratio() {
    let text = perf(&["sim-speed", "-n", "300", "-s", "2048", "--reps", "2"]);
    assert!(text.contains("median Mpkt/s"), "{text}");
    // 2048 bytes at a 1024-byte MTU: two request packets and one ACK per WRITE at least.
    let packets: u64 = text
        .split(" packets,")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no packet count in:\n{text}"));
    assert!(
        packets >= 300 * 2,
        "{packets} packets for 300 two-packet WRITEs"
    );
    let stepped = check_measurement(&text, "stepped fabric (one core)");
    let threaded = check_measurement(&text, "threaded fabric (engine thread)");
    let ratio = row(&text, "ratio stepped/threaded");
    assert_eq!(ratio.len(), 1, "{text}");
    assert_ratio_of_printed_medians(ratio[0], stepped, threaded, &text);
}

/// The ratio row is the ratio of the medians, which are printed to 3 decimals: it must lie
/// between the ratios their rounding allows (a slow fabric's 0.044 may be 0.0435..0.0445).
fn assert_ratio_of_printed_medians(ratio: f64, num: f64, den: f64, text: &str) {
    let half = 0.0005;
    let low = (num - half) / (den + half);
    let high = if den > half {
        (num + half) / (den - half)
    } else {
        f64::INFINITY
    };
    assert!(
        ratio >= low - 0.0005 && ratio <= high + 0.0005,
        "ratio {ratio} is not {num}/{den} within the printed precision [{low}, {high}]:\n{text}"
    );
}

#[test]
fn msg_rate_refuses_zero_repetitions() {
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["perf", "msg-rate", "--reps", "0"])
        .output()
        .expect("run bypass");
    assert!(!out.status.success(), "--reps 0 must be refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("reps"));
}
