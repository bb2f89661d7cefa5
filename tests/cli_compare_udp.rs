//! `bypass perf compare-udp`: each comparison prints its figures, its baseline, its ratio with
//! the verdict, every round's ratio and the floor of the link's own socket calls; `--only`
//! runs one of the two.
//! Figures are not asserted (speed is measured, not tested), only that they are reported.

mod cli_support;

use cli_support::{bypass, numbers_after};

/// The number on a line starting with `label` (after the colon), if it parses.
fn figure(out: &str, label: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.trim_start().starts_with(label))?;
    let (_, rest) = line.split_once(':')?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn the_round_trip_comparison_alone_reports_the_write_the_ping_pong_the_ratio_and_the_floor() {
    round_trip_comparison_reports(&[]);
}

#[test]
fn the_round_trip_comparison_with_both_nics_in_one_thread_reports_the_same_lines() {
    round_trip_comparison_reports(&["--rtt-threads", "1"]);
}

#[test]
fn a_thread_count_other_than_one_or_two_is_refused() {
    let (code, _, err) = bypass(&["perf", "compare-udp", "--rtt-threads", "3"]);
    assert_ne!(code, 0);
    assert!(err.contains("rtt-threads"), "{err}");
}

/// `compare-udp --only rtt` with `extra` options: every line of the round-trip comparison.
fn round_trip_comparison_reports(extra: &[&str]) {
    let mut args = vec![
        "perf",
        "compare-udp",
        "--only",
        "rtt",
        "-n",
        "50",
        "--rounds",
        "2",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = bypass(&args);
    assert_eq!(code, 0, "{out}{err}");
    let write = figure(&out, "8-byte RDMA WRITE round trip over UDP").expect(&out);
    let udp = figure(&out, "8-byte UDP busy-poll ping-pong").expect(&out);
    assert!(write > 0.0 && udp > 0.0, "{out}");
    assert!(
        out.contains("round-trip ratio") && out.contains("target <= 1.25:"),
        "{out}"
    );
    assert_eq!(
        numbers_after(&out, "rounds' round-trip ratios:"),
        2,
        "{out}"
    );
    assert!(
        figure(&out, "its socket calls alone (40 B, then 20 B)").is_some(),
        "{out}"
    );
    assert!(
        !out.contains("bandwidth"),
        "--only rtt runs no bandwidth test:\n{out}"
    );
}

#[test]
fn the_bandwidth_comparison_alone_reports_the_write_stream_tcp_the_ratio_and_the_floor() {
    let (code, out, err) = bypass(&[
        "perf",
        "compare-udp",
        "--only",
        "bw",
        "--bw-size",
        "64K",
        "--bw-iters",
        "16",
        "--runs",
        "1",
        "--rounds",
        "2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        figure(&out, "65536 B RDMA WRITE bandwidth over UDP").is_some_and(|f| f > 0.0),
        "{out}"
    );
    assert!(
        figure(&out, "TCP loopback streaming (65536 B writes)").is_some_and(|f| f > 0.0),
        "{out}"
    );
    assert!(out.contains("target >= 1:"), "{out}");
    assert_eq!(numbers_after(&out, "rounds' bandwidth ratios:"), 2, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("its socket calls alone (4112 B datagrams")),
        "{out}"
    );
    assert!(
        !out.contains("round trip"),
        "--only bw runs no round-trip test:\n{out}"
    );
}
