//! `bypass perf`'s eight perftest tools in process (two simulated NICs): perftest's headers
//! and tables for each, the data check, the options that shape a run (-q, -b, -D, -e, -c,
//! -A, -m, -I), the extra outputs (--cpu_util, --out_json, --report-counters) and the
//! errors for options that do not apply. The tests check form, counts and data, never speed.

mod cli_support;

use cli_support::bypass;

const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";
const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// Runs `bypass perf ARGS`, asserting success; returns stdout.
fn ok(args: &[&str]) -> String {
    let mut all = vec!["perf"];
    all.extend_from_slice(args);
    let (code, out, err) = bypass(&all);
    assert_eq!(code, 0, "{args:?}\nstdout:\n{out}\nstderr:\n{err}");
    out
}

/// Runs `bypass perf ARGS`, asserting it fails with `code`; returns stderr.
fn fails(args: &[&str], code: i32) -> String {
    let mut all = vec!["perf"];
    all.extend_from_slice(args);
    let (got, out, err) = bypass(&all);
    assert_eq!(got, code, "{args:?}\nstdout:\n{out}\nstderr:\n{err}");
    err
}

/// The rows under `header` (up to the next dashed line), each split on whitespace.
fn table(out: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.trim_end().starts_with(header.trim_end()));
    assert!(
        lines.next().is_some(),
        "no table header {header:?} in:\n{out}"
    );
    lines
        .take_while(|l| !l.starts_with("---") && !l.starts_with(" Counters"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn num(s: &str) -> f64 {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a number"))
}

/// One latency row of `size` bytes and `iters` iterations, in order.
fn assert_lat_row(out: &str, size: &str, iters: &str) {
    let rows = table(out, LAT_HEADER);
    assert_eq!(rows.len(), 1, "{out}");
    let r = &rows[0];
    assert_eq!(r.len(), 9, "{r:?}");
    assert_eq!((r[0].as_str(), r[1].as_str()), (size, iters), "{r:?}");
    let [min, max, typ] = [2, 3, 4].map(|i| num(&r[i]));
    assert!(min > 0.0 && min <= typ && typ <= max, "{r:?}");
}

/// One bandwidth row of `size` bytes and `iters` messages with positive numbers.
fn assert_bw_row(out: &str, header: &str, size: &str, iters: &str) -> Vec<String> {
    let rows = table(out, header);
    assert_eq!(rows.len(), 1, "{out}");
    let r = rows[0].clone();
    assert!(r.len() >= 5, "{r:?}");
    assert_eq!((r[0].as_str(), r[1].as_str()), (size, iters), "{r:?}");
    let (peak, avg, rate) = (num(&r[2]), num(&r[3]), num(&r[4]));
    assert!(avg > 0.0 && peak > 0.0 && rate > 0.0, "{r:?}");
    r
}

#[test]
fn every_latency_tool_prints_its_title_and_table_with_checked_data() {
    for (tool, title, size) in [
        ("send-lat", "Send Latency Test", "64"),
        ("write-lat", "RDMA_Write Latency Test", "64"),
        ("read-lat", "RDMA_Read Latency Test", "64"),
        ("atomic-lat", "Atomic Latency Test", "8"),
    ] {
        let args: Vec<&str> = if tool == "atomic-lat" {
            vec![tool, "-n", "200", "--check"]
        } else {
            vec![tool, "-n", "200", "-s", "64", "--check"]
        };
        let out = ok(&args);
        assert!(out.contains(title), "{tool}: {out}");
        assert_lat_row(&out, size, "200");
    }
}

#[test]
fn every_bandwidth_tool_prints_its_title_and_table_with_checked_data() {
    for (tool, title, size) in [
        ("send-bw", "Send BW Test", "4096"),
        ("write-bw", "RDMA_Write BW Test", "4096"),
        ("read-bw", "RDMA_Read BW Test", "4096"),
        ("atomic-bw", "Atomic BW Test", "8"),
    ] {
        let args: Vec<&str> = if tool == "atomic-bw" {
            vec![tool, "-n", "200", "--check"]
        } else {
            vec![tool, "-n", "200", "-s", "4K", "--check"]
        };
        let out = ok(&args);
        assert!(out.contains(title), "{tool}: {out}");
        assert_bw_row(&out, BW_HEADER, size, "200");
    }
}

#[test]
fn four_qps_and_both_directions_are_summed_into_one_row() {
    for tool in ["write-bw", "send-bw", "read-bw", "atomic-bw"] {
        let out = ok(&[tool, "-n", "200", "-s", "8", "-q", "4", "--check"]);
        assert!(out.contains("Number of qps   : 4"), "{out}");
        assert_bw_row(&out, BW_HEADER, "8", "200");
    }
    for tool in ["write-bw", "send-bw"] {
        let out = ok(&[tool, "-n", "200", "-s", "1K", "-b", "--check"]);
        assert!(out.contains("Bidirectional   : ON"), "{out}");
        assert_bw_row(&out, BW_HEADER, "1024", "200");
    }
}

#[test]
fn a_duration_run_counts_what_it_did_in_that_time() {
    let out = ok(&["write-bw", "-D", "1", "-s", "1K", "-q", "2"]);
    assert!(out.contains("Duration        : 1[s]"), "{out}");
    let r = table(&out, BW_HEADER);
    assert_eq!(r.len(), 1, "{out}");
    assert!(num(&r[0][1]) >= 2.0, "{out}");
    let out = ok(&["send-lat", "-D", "1", "-s", "8"]);
    let r = table(&out, LAT_DUR_HEADER);
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!(r[0].len(), 4, "{r:?}");
    assert!(num(&r[0][1]) > 0.0 && num(&r[0][2]) > 0.0, "{r:?}");
}

#[test]
fn events_mode_sleeps_on_a_channel_and_still_completes() {
    let out = ok(&["send-lat", "-n", "100", "-s", "8", "-e", "--check"]);
    assert!(out.contains("Using Events    : ON"), "{out}");
    assert_lat_row(&out, "8", "100");
    let out = ok(&[
        "write-bw", "-n", "200", "-s", "4K", "-e", "-q", "2", "--check",
    ]);
    assert_bw_row(&out, BW_HEADER, "4096", "200");
}

#[test]
fn sends_run_over_ud_and_uc() {
    for conn in ["UD", "UC"] {
        let out = ok(&["send-bw", "-n", "200", "-s", "1K", "-c", conn, "--check"]);
        assert!(out.contains(&format!("Connection type : {conn}")), "{out}");
        assert_bw_row(&out, BW_HEADER, "1024", "200");
        let out = ok(&["send-lat", "-n", "100", "-s", "1K", "-c", conn, "--check"]);
        assert_lat_row(&out, "1024", "100");
    }
    let out = ok(&["write-bw", "-n", "200", "-s", "1K", "-c", "UC", "--check"]);
    assert_bw_row(&out, BW_HEADER, "1024", "200");
}

#[test]
fn compare_and_swap_runs_and_its_words_count_every_operation() {
    let out = ok(&["atomic-lat", "-A", "CMP_AND_SWAP", "-n", "100", "--check"]);
    assert!(out.contains("Atomic type     : CMP_AND_SWAP"), "{out}");
    assert_lat_row(&out, "8", "100");
    let out = ok(&[
        "atomic-bw",
        "-A",
        "CMP_AND_SWAP",
        "-n",
        "300",
        "-q",
        "3",
        "--check",
    ]);
    assert_bw_row(&out, BW_HEADER, "8", "300");
}

#[test]
fn mtu_and_inline_options_shape_the_run() {
    let out = ok(&["send-bw", "-n", "100", "-s", "1K", "-c", "UD", "-m", "1024"]);
    assert!(out.contains("Mtu             : 1024[B]"), "{out}");
    let err = fails(
        &["send-bw", "-n", "100", "-s", "2K", "-c", "UD", "-m", "1024"],
        1,
    );
    assert!(err.contains("path MTU is 1024 bytes"), "{err}");
    let out = ok(&["write-lat", "-n", "100", "-s", "8", "-I", "0", "--check"]);
    assert!(out.contains("Max inline data : 0[B]"), "{out}");
    assert_lat_row(&out, "8", "100");
    let out = ok(&["write-bw", "-n", "100", "-s", "64K", "-m", "256", "--check"]);
    assert_bw_row(&out, BW_HEADER, "65536", "100");
    // The path MTU sets the packets per message: 10 WRITEs of 64 KiB are 2560 packets of
    // 256 bytes, or 160 of 4096 (not counting retransmissions).
    let client_tx = |mtu: &str| -> u64 {
        let out = ok(&[
            "write-bw",
            "-n",
            "10",
            "-s",
            "64K",
            "-Q",
            "1",
            "-m",
            mtu,
            "--report-counters",
        ]);
        // The client's port block comes first; a retransmission (a machine stalled past the
        // ACK timeout) is counted apart.
        let first = |name: &str| -> u64 {
            out.lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .map_or(0, |v| v.trim().parse().unwrap())
        };
        first("port_xmit_packets") - first("retransmits ")
    };
    assert_eq!(client_tx("256"), 2560);
    assert_eq!(client_tx("4096"), 160);
}

#[test]
fn cpu_util_adds_perftests_column() {
    let out = ok(&["write-bw", "-n", "200", "-s", "4K", "--cpu_util"]);
    let header = format!("{}    CPU_Util[%]", BW_HEADER);
    let r = assert_bw_row(&out, &header, "4096", "200");
    assert_eq!(r.len(), 6, "{r:?}");
    // A run shorter than a clock tick has no utilisation to show.
    assert!(
        r[5] == "n/a" || (0.0..=100.0).contains(&num(&r[5])),
        "{r:?}"
    );
    let out = ok(&["read-lat", "-n", "100", "-s", "8", "--cpu_util"]);
    let r = table(&out, &format!("{}    CPU_Util[%]", LAT_HEADER.trim_end()));
    assert_eq!(r[0].len(), 10, "{r:?}");
}

#[test]
fn json_output_holds_perftests_fields() {
    let path = std::env::temp_dir().join(format!("bypass-tools-{}.json", std::process::id()));
    let p = path.to_str().unwrap();
    ok(&[
        "write-bw",
        "-D",
        "1",
        "-s",
        "4K",
        "--cpu_util",
        "--out_json_file",
        p,
    ]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .expect("the JSON file parses");
    let _ = std::fs::remove_file(&path);
    let r = &v["results"];
    assert_eq!(r["MsgSize"], 4096, "{v}");
    assert!(r["n_iterations"].as_u64().is_some_and(|n| n > 0), "{v}");
    for k in ["BW_peak", "BW_average", "MsgRate"] {
        assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {v}");
    }
    // A second of /proc/stat ticks has passed: a number, not null.
    assert!(
        r["CPU_util"]
            .as_f64()
            .is_some_and(|x| (0.0..=100.0).contains(&x)),
        "{v}"
    );
    // perftest 4.5's test_info keys, whole numbers as numbers
    let info = &v["test_info"];
    assert_eq!(info["test"], "RDMA_Write_BW_Test", "{v}");
    assert_eq!(info["Number_of_qps"], 1, "{v}");
    assert_eq!(info["Connection_type"], "RC", "{v}");
    assert_eq!(info["Dual_port"], "OFF", "{v}");
    assert_eq!(info["Using_SRQ"], "OFF", "{v}");
    assert!(info["TX_depth"].as_u64().is_some(), "{v}");
    assert!(info["Max_inline_data"].as_u64().is_some(), "{v}");

    // --out_json alone writes perftest_out.json in the working directory, as perftest does
    let dir = std::env::temp_dir().join(format!("bypass-tools-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args(["perf", "send-lat", "-n", "100", "-s", "8", "--out_json"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let text = std::fs::read_to_string(dir.join("perftest_out.json")).expect("perftest_out.json");
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value = serde_json::from_str(&text).expect("the JSON parses");
    assert_eq!(v["test_info"]["test"], "Send_Latency_Test", "{v}");
    for k in [
        "t_min",
        "t_max",
        "t_typical",
        "t_avg",
        "t_stdev",
        "percentile_99",
        "percentile_99.9",
    ] {
        assert!(
            v["results"][k].as_f64().is_some_and(|x| x > 0.0),
            "{k} in {v}"
        );
    }
    assert_eq!(v["results"]["MsgSize"], 8);
}

#[test]
fn report_counters_prints_named_counters_with_packets() {
    let out = ok(&[
        "write-bw",
        "-n",
        "200",
        "-s",
        "4K",
        "-q",
        "2",
        "--report-counters",
    ]);
    for side in ["client", "server"] {
        assert!(
            out.contains(&format!("Counters of {side} port 1:")),
            "{out}"
        );
    }
    assert_eq!(out.matches(" QP 0x").count(), 4, "two QPs a side: {out}");
    let packets = |name: &str| -> Vec<u64> {
        out.lines()
            .filter_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim().parse().unwrap())
            .collect()
    };
    let tx = packets("port_xmit_packets");
    let rx = packets("port_rcv_packets");
    assert_eq!(tx.len(), 2, "{out}");
    // 200 WRITEs of one packet each (4 KiB < the MTU) go out of the client, and an ACK
    // or more come back.
    assert!(
        tx.iter().all(|&n| n > 0) && rx.iter().all(|&n| n > 0),
        "{out}"
    );
    assert!(tx.iter().any(|&n| n >= 200), "{out}");
    assert!(out.contains("rx_write_requests"), "{out}");
}

#[test]
fn options_that_do_not_apply_are_refused_with_the_fix() {
    let cases: [(&[&str], i32, &str); 10] = [
        (
            &["send-bw", "-c", "UD", "-s", "8192", "-n", "10"],
            1,
            "path MTU",
        ),
        (
            &["read-bw", "-c", "UC", "-n", "10"],
            1,
            "no RDMA READ or atomics",
        ),
        (&["atomic-lat", "-c", "UC", "-n", "10"], 1, "use -c RC"),
        (&["write-bw", "-c", "UD", "-n", "10"], 1, "only SEND"),
        (
            &["write-lat", "-q", "2", "-n", "10"],
            1,
            "use write-bw for several QPs",
        ),
        (&["send-lat", "-b", "-n", "10"], 1, "use send-bw -b"),
        (
            &["write-bw", "-A", "CMP_AND_SWAP", "-n", "10"],
            1,
            "-A applies to the atomic tools",
        ),
        (
            &["atomic-bw", "-s", "64", "-n", "10"],
            1,
            "atomics are 8 bytes",
        ),
        (&["write-bw", "-m", "1000"], 2, "is not a path MTU"),
        (
            &["write-bw", "-n", "10", "-D", "1"],
            2,
            "cannot be used with",
        ),
    ];
    for (args, code, why) in cases {
        let err = fails(args, code);
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let err = fails(&["write-bw", "-q", "8", "-n", "5"], 1);
    assert!(err.contains("-n ≥ -q"), "{err}");
    let err = fails(&["write-bw", "-q", "64", "-s", "8M", "-n", "64"], 1);
    assert!(err.contains("use fewer QPs or smaller messages"), "{err}");
}

#[test]
fn an_all_sizes_run_shows_its_progress_on_a_terminal_and_not_in_its_output() {
    let (ok, stdout, drawn) =
        cli_support::with_stderr_on_a_terminal(&["perf", "write-lat", "-a", "-n", "5"]);
    assert!(ok, "{stdout}\n{drawn}");
    assert!(drawn.contains("sizes ["), "{drawn:?}");
    assert!(
        drawn.contains("/23"),
        "the bar counts the 23 sizes: {drawn:?}"
    );
    assert!(
        !stdout.contains("sizes ["),
        "the bar never reaches stdout:\n{stdout}"
    );
    // piped, the same run draws nothing
    let (code, _out, err) = bypass(&["perf", "write-lat", "-a", "-n", "5"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "stderr when piped: {err:?}");
}
