//! `bypass perf`: perftest-style tables from the sim benchmarks and the baselines. These
//! tests check the output's form, never the timings (speed is measured, not tested).

mod cli_support;

use cli_support::{bypass, numbers_after};

// One bandwidth run uses completion moderation (`-Q 16`): unsignalled WRITEs followed by a
// signalled one, with BlueFlame on, on the threaded sim, where a BlueFlame copy taken for the
// wrong ring index would lose a WQE (`sim/src/engine/tests/ring.rs` tests that interleaving
// deterministically). The others ask for every completion.

const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";
const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";

/// The rows under `header` (up to the next dashed line), each split on whitespace.
fn table(out: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = out
        .lines()
        .skip_while(|l| l.trim_end() != header.trim_end());
    assert!(lines.next().is_some(), "no table header in:\n{out}");
    lines
        .take_while(|l| !l.starts_with("---"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn num(s: &str) -> f64 {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a number"))
}

#[test]
fn write_lat_prints_a_well_formed_latency_table() {
    let (code, out, err) = bypass(&["perf", "write-lat", "-n", "100", "-s", "8"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("RDMA_Write Latency Test"), "{out}");
    let rows = table(&out, LAT_HEADER);
    assert_eq!(rows.len(), 1, "{out}");
    let r = &rows[0];
    assert_eq!(r.len(), 9, "{r:?}");
    assert_eq!(r[0], "8");
    assert_eq!(r[1], "100");
    let [min, max, typical, avg, stdev, p99, p999] = [2, 3, 4, 5, 6, 7, 8].map(|i| num(&r[i]));
    assert!(min > 0.0, "{r:?}");
    assert!(min <= typical && typical <= max, "{r:?}");
    assert!(min <= avg && avg <= max, "{r:?}");
    assert!(stdev >= 0.0, "{r:?}");
    assert!(typical <= p99 && p99 <= p999, "{r:?}");
    for v in &r[2..] {
        let decimals = v.split('.').nth(1).map_or(0, str::len);
        assert_eq!(decimals, 2, "{v} in {r:?}");
    }
}

#[test]
fn write_bw_prints_a_well_formed_bandwidth_table() {
    let (code, out, err) = bypass(&["perf", "write-bw", "-n", "200", "-s", "4096", "-Q", "16"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("RDMA_Write BW Test"), "{out}");
    let rows = table(&out, BW_HEADER);
    assert_eq!(rows.len(), 1, "{out}");
    let r = &rows[0];
    assert_eq!(r.len(), 5, "{r:?}");
    assert_eq!(r[0], "4096");
    assert_eq!(r[1], "200");
    let (peak, avg, rate) = (num(&r[2]), num(&r[3]), num(&r[4]));
    assert!(avg > 0.0 && peak >= avg, "{r:?}");
    assert!(rate > 0.0, "{r:?}");
}

#[test]
fn write_bw_reports_gbits_on_request() {
    let (code, out, err) = bypass(&[
        "perf",
        "write-bw",
        "-n",
        "50",
        "-s",
        "64K",
        "-Q",
        "1",
        "--report-gbits",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("BW peak[Gb/sec]"), "{out}");
}

#[test]
fn baselines_print_both_tables() {
    let (code, out, err) = bypass(&["perf", "baselines", "-n", "50", "--copy-size", "64K"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(table(&out, BW_HEADER).len(), 1, "{out}");
    assert_eq!(table(&out, LAT_HEADER).len(), 1, "{out}");
}

#[test]
fn compare_reports_medians_ratios_and_verdicts() {
    let (code, out, err) = bypass(&[
        "perf",
        "compare",
        "-n",
        "100",
        "--bw-size",
        "64K",
        "-Q",
        "1",
        "--rounds",
        "2",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // One ratio per round, for each comparison.
    for what in ["per round: sim / memcpy", "per round: sim / TCP"] {
        assert_eq!(numbers_after(&out, what), 2, "{what} in\n{out}");
    }
    for what in [
        "memcpy 65536 B",
        "sim RDMA WRITE 65536 B",
        "TCP loopback busy-poll round trip 8 B",
        "sim RDMA WRITE ping-pong round trip 8 B",
    ] {
        assert!(out.contains(what), "{what} missing in\n{out}");
    }
    assert!(out.contains("sim / memcpy ="), "{out}");
    assert!(out.contains("sim / TCP ="), "{out}");
}

#[test]
fn perf_bad_options_are_usage_errors() {
    let cases: [(&[&str], &str); 6] = [
        (&["perf", "write-lat", "-s", "big"], "is not a size"),
        (&["perf", "write-lat", "-n", "2"], "--iters"),
        (
            &["perf", "write-lat", "-a", "-s", "8"],
            "cannot be used with",
        ),
        (&["perf", "write-bw", "-t", "0"], "--tx-depth"),
        (&["perf", "write-lat", "-d", "mlx5_0"], "is not a device"),
        (&["perf", "write-read"], "unrecognized subcommand"),
    ];
    for (args, why) in cases {
        let (code, _, err) = bypass(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn perf_on_a_size_above_8_mib_says_so() {
    let (code, _, err) = bypass(&["perf", "write-lat", "-s", "16M", "-n", "5"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1 byte to 8 MiB"), "{err}");
}
