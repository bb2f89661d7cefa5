//! `bypass perf`'s eight perftest tools as two processes (server without HOST, client with
//! it), each a simulated NIC on a UDP socket on loopback: the client's table, the server's
//! data check, and the options that shape a two-process run (-q, -b, -D, -e, -c, -A,
//! --out_json, --report-counters). The tests check form, counts and data, never speed.
//!
//! Every test has its own TCP port (19100 + k) and UDP port (19150 + k) on 127.0.19.1
//! (server) and 127.0.19.2 (client), so that the tests of this binary run side by side.

mod cli_support;

use cli_support::{bypass, server_and_client};

/// Runs `perf TEST ARGS` as server and client on port set `k`; returns (server ok, server
/// output, client ok, client output), stderr appended to each.
fn two(k: u16, test: &str, args: &[&str]) -> (bool, String, bool, String) {
    let (tcp, udp) = ((19100 + k).to_string(), 19150 + k);
    let d1 = format!("udp:127.0.19.1:{udp}");
    let d2 = format!("udp:127.0.19.2:{udp}");
    let mut server = vec!["perf", test, "-d", &d1, "-p", &tcp];
    server.extend_from_slice(args);
    let mut client = vec!["perf", test, "-d", &d2, "-p", &tcp];
    client.extend_from_slice(args);
    client.push("127.0.19.1");
    server_and_client(&server, &client)
}

/// Both sides succeeded; returns (server, client) output.
fn both_ok(k: u16, test: &str, args: &[&str]) -> (String, String) {
    let (s_ok, s, c_ok, c) = two(k, test, args);
    assert!(s_ok && c_ok, "{test} {args:?}\nserver:\n{s}\nclient:\n{c}");
    (s, c)
}

/// The first row whose first two cells are `size` and `iters`, split on whitespace.
fn row(out: &str, size: &str, iters: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|r| r.len() >= 5 && r[0] == size && r[1] == iters)
        .unwrap_or_else(|| panic!("no {size} × {iters} row in:\n{out}"))
}

const BW_COLS: &str =
    "#bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const LAT_COLS: &str = "#bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]";

#[test]
fn send_lat_ping_pongs_across_processes_and_both_sides_time_it() {
    let (s, c) = both_ok(0, "send-lat", &["-s", "64", "-n", "100", "--check"]);
    for out in [&s, &c] {
        assert!(
            out.contains("Send Latency Test") && out.contains(LAT_COLS),
            "{out}"
        );
        assert_eq!(row(out, "64", "100").len(), 9, "{out}");
    }
}

#[test]
fn write_lat_across_processes_checks_the_data() {
    let (s, c) = both_ok(1, "write-lat", &["-s", "300", "-n", "100", "--check"]);
    for out in [&s, &c] {
        assert_eq!(row(out, "300", "100").len(), 9, "{out}");
    }
}

#[test]
fn read_lat_is_timed_by_the_client_and_served_by_the_server() {
    let (s, c) = both_ok(2, "read-lat", &["-s", "64", "-n", "100", "--check"]);
    assert!(c.contains("RDMA_Read Latency Test"), "{c}");
    assert_eq!(row(&c, "64", "100").len(), 9, "{c}");
    assert!(s.contains("64 bytes: 116 READs served"), "{s}");
}

#[test]
fn atomic_lat_compare_and_swap_counts_every_operation_on_the_server() {
    let (s, c) = both_ok(
        3,
        "atomic-lat",
        &["-A", "CMP_AND_SWAP", "-n", "100", "--check"],
    );
    assert!(c.contains("Atomic type     : CMP_AND_SWAP"), "{c}");
    assert_eq!(row(&c, "8", "100").len(), 9, "{c}");
    // 100 measured and 16 warm-up atomics.
    assert!(
        s.contains("data check ok (each word counts its atomics, 116 in all)"),
        "{s}"
    );
}

#[test]
fn send_bw_across_processes_checks_every_send() {
    let (s, c) = both_ok(4, "send-bw", &["-s", "4K", "-n", "200", "--check"]);
    assert!(c.contains(BW_COLS), "{c}");
    row(&c, "4096", "200");
    assert!(
        s.contains("4096 bytes: data check ok (each of 200 SENDs held its pattern)"),
        "{s}"
    );
}

#[test]
fn write_bw_over_four_qps_fills_every_slot() {
    let (s, c) = both_ok(
        5,
        "write-bw",
        &["-s", "4K", "-n", "200", "-q", "4", "--check"],
    );
    assert!(c.contains("Number of qps   : 4"), "{c}");
    row(&c, "4096", "200");
    assert!(
        s.contains(
            "data check ok (each QP's slot holds its last WRITE exactly, 200 WRITEs in all)"
        ),
        "{s}"
    );
}

#[test]
fn read_bw_and_atomic_bw_run_across_processes() {
    let (_, c) = both_ok(
        6,
        "read-bw",
        &["-s", "4K", "-n", "200", "-q", "2", "--check"],
    );
    assert!(c.contains("RDMA_Read BW Test"), "{c}");
    row(&c, "4096", "200");
    let (s, c) = both_ok(6, "atomic-bw", &["-n", "200", "--check"]);
    row(&c, "8", "200");
    assert!(
        s.contains("each word counts its atomics, 200 in all"),
        "{s}"
    );
}

#[test]
fn bidirectional_bw_prints_a_table_on_both_sides() {
    let (s, c) = both_ok(7, "write-bw", &["-s", "4K", "-n", "200", "-b", "--check"]);
    for out in [&s, &c] {
        assert!(out.contains("Bidirectional   : ON"), "{out}");
        row(out, "4096", "200");
    }
}

#[test]
fn a_duration_run_reports_what_the_client_sent_and_the_server_checks_it() {
    let (s, c) = both_ok(8, "write-bw", &["-s", "4K", "-D", "1", "--check"]);
    let r = c
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.len() == 5 && r[0] == "4096")
        .unwrap_or_else(|| panic!("no row in {c}"));
    let n = r[1];
    assert!(n.parse::<u64>().unwrap() > 0, "{c}");
    assert!(
        s.contains(&format!(
            "data check ok (the buffer holds WRITE {n} of {n} exactly)"
        )),
        "server:\n{s}\nclient:\n{c}"
    );
}

#[test]
fn events_mode_works_across_processes() {
    let (s, c) = both_ok(9, "send-bw", &["-s", "1K", "-n", "200", "-e", "--check"]);
    assert!(c.contains("Using Events    : ON"), "{c}");
    row(&c, "1024", "200");
    assert!(s.contains("data check ok"), "{s}");
    // Sleeping on the channel arms the CQ, and each event is an interrupt of the NIC; a
    // spinning run takes none beyond those of bring-up.
    let interrupts = |out: &str| -> u64 {
        out.lines()
            .find_map(|l| l.trim().strip_prefix("interrupts"))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let (_, spin) = both_ok(
        9,
        "send-lat",
        &["-s", "8", "-n", "100", "--report-counters"],
    );
    let (_, ev) = both_ok(
        9,
        "send-lat",
        &["-s", "8", "-n", "100", "-e", "--report-counters"],
    );
    row(&ev, "8", "100");
    assert!(
        interrupts(&ev) > interrupts(&spin),
        "-e: {} interrupts, spinning: {}\n{ev}",
        interrupts(&ev),
        interrupts(&spin)
    );
}

#[test]
fn unreliable_transports_carry_sends_across_processes() {
    for (k, conn) in [(10, "UD"), (11, "UC")] {
        let (s, c) = both_ok(
            k,
            "send-bw",
            &["-s", "1K", "-n", "200", "-c", conn, "--check"],
        );
        assert!(c.contains(&format!("Connection type : {conn}")), "{c}");
        row(&c, "1024", "200");
        // Loopback loses nothing at this rate; the server counts what arrived.
        assert!(s.contains("each of 200 SENDs held its pattern"), "{s}");
        let (_, c) = both_ok(
            k,
            "send-lat",
            &["-s", "1K", "-n", "100", "-c", conn, "--check"],
        );
        row(&c, "1024", "100");
    }
}

#[test]
fn json_and_counters_come_from_the_client() {
    let path = std::env::temp_dir().join(format!("bypass-udp-json-{}.json", std::process::id()));
    let p = path.to_str().unwrap();
    let (s, c) = both_ok(
        12,
        "write-bw",
        &[
            "-s",
            "4K",
            "-n",
            "200",
            "--out_json_file",
            p,
            "--report-counters",
        ],
    );
    let text = std::fs::read_to_string(&path).expect("the client wrote its JSON");
    let _ = std::fs::remove_file(&path);
    let v: serde_json::Value = serde_json::from_str(&text).expect("the client's JSON parses");
    assert_eq!(v["results"]["MsgSize"], 4096, "{v}");
    assert_eq!(v["results"]["n_iterations"], 200, "{v}");
    assert!(
        v["results"]["BW_average"].as_f64().is_some_and(|x| x > 0.0),
        "{v}"
    );
    assert_eq!(
        v["test_info"]["Link_type"], "Ethernet (RoCEv2 over UDP)",
        "{v}"
    );
    for out in [&s, &c] {
        assert!(out.contains("Counters of this side port 1:"), "{out}");
    }
    let tx: u64 = c
        .lines()
        .find_map(|l| l.trim().strip_prefix("port_xmit_packets"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    assert!(tx >= 200, "{c}");
}

#[test]
fn sides_started_with_different_options_refuse_to_run() {
    let (tcp, udp) = ("19113", 19163);
    let d1 = format!("udp:127.0.19.1:{udp}");
    let server = cli_support::start_bypass(
        &[
            "perf", "write-bw", "-d", &d1, "-p", tcp, "-s", "4K", "-n", "10", "-q", "2",
        ],
        &[],
    );
    let d2 = format!("udp:127.0.19.2:{udp}");
    let (code, _, err) = bypass(&[
        "perf",
        "write-bw",
        "-d",
        &d2,
        "-p",
        tcp,
        "-s",
        "4K",
        "-n",
        "10",
        "127.0.19.1",
    ]);
    let s = server.wait_with_output().unwrap();
    assert!(code != 0 && !s.status.success(), "{err}");
    assert!(err.contains("give both sides the same test"), "{err}");
    let (code, _, err) = bypass(&["perf", "read-lat", "-d", &d2, "-D", "1", "127.0.19.1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("use -n"), "{err}");
}

#[test]
fn a_sweep_of_every_size_keeps_each_sizes_sends_apart() {
    // The client starts a size only after the server has taken the last one's SENDs: each
    // of the 23 sizes counts and checks exactly its own 5.
    let (s, c) = both_ok(14, "send-bw", &["-a", "-n", "5", "--check"]);
    for k in 1..=23 {
        let size = (1u64 << k).to_string();
        row(&c, &size, "5");
        assert!(
            s.contains(&format!(
                " {size} bytes: data check ok (each of 5 SENDs held its pattern)"
            )),
            "{size}: {s}"
        );
    }
}
