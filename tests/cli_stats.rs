//! `bypass stats`: the sim devices' counters per port and per QP under the `rdma statistic`
//! names, after a small workload; the JSON form; the typed errors for devices it cannot read.

mod cli_support;

use cli_support::bypass;

/// The value after `name` on `line` (`... name value ...`).
fn value(line: &str, name: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == name {
            return words.next()?.parse().ok();
        }
    }
    None
}

#[test]
fn stats_after_a_workload_counts_the_packets_and_lists_the_qps() {
    let (code, out, err) = bypass(&["stats", "--workload", "10"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let ports: Vec<_> = out
        .lines()
        .filter(|l| l.starts_with("link ") && !l.contains(" lqpn "))
        .collect();
    assert_eq!(ports.len(), 2, "{out}");
    let sender = ports[0];
    assert!(sender.starts_with("link sim0/1 "), "{out}");
    assert!(
        value(sender, "port_xmit_packets").is_some_and(|n| n >= 10),
        "{sender}"
    );
    // The receiver got the ten SENDs.
    assert!(
        value(ports[1], "port_rcv_packets").is_some_and(|n| n >= 10),
        "{out}"
    );
    assert_eq!(value(sender, "out_of_buffer"), Some(0), "{sender}");
    let qps: Vec<_> = out.lines().filter(|l| l.contains(" lqpn 0x")).collect();
    assert!(qps.len() >= 2, "one QP line per device at least:\n{out}");
    assert!(
        qps.iter().all(|l| value(l, "retransmits").is_some()),
        "{out}"
    );
}

#[test]
fn stats_without_a_workload_shows_no_packets() {
    let (code, out, err) = bypass(&["stats"]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert_eq!(value(first, "port_xmit_packets"), Some(0), "{out}");
    // Bring-up ran firmware commands: the counters are live, not a blank table.
    assert!(value(first, "commands").is_some_and(|n| n > 0), "{out}");
    // The firmware's congestion counters, under mlx5's names, end the port line.
    for name in [
        "rp_cnp_ignored",
        "rp_cnp_handled",
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
    ] {
        assert_eq!(value(first, name), Some(0), "{name}: {out}");
    }
}

#[test]
fn stats_json_parses_and_holds_the_same_counters() {
    let (code, out, err) = bypass(&["stats", "--workload", "3", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let devs = v.as_array().expect("an array of devices");
    assert_eq!(devs.len(), 2, "{out}");
    assert_eq!(devs[0]["ifname"], "sim0");
    assert_eq!(devs[0]["port"], 1);
    assert!(
        devs[0]["counters"]["port_xmit_packets"].as_u64() >= Some(3),
        "{out}"
    );
    let qps = devs[1]["qps"].as_array().expect("qps");
    assert!(!qps.is_empty(), "{out}");
    assert!(qps[0]["lqpn"].as_u64().is_some(), "{out}");
    assert!(qps[0]["counters"]["out_of_sequence"].is_u64(), "{out}");
}

#[test]
fn stats_on_a_real_nic_says_q_counters_are_not_read_yet() {
    let (code, out, err) = bypass(&["stats", "-d", "vfio:0000:01:00.0"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.is_empty(), "no table: {out}");
    assert!(err.contains("QUERY_Q_COUNTER"), "{err}");
    assert!(err.contains("not implemented yet"), "{err}");
}

#[test]
fn stats_bad_options_are_usage_errors() {
    let cases: [(&[&str], &str); 2] = [
        (&["stats", "--workload", "many"], "invalid value"),
        (&["stats", "--workload", "100001"], "invalid value"),
    ];
    for (args, why) in cases {
        let (code, _, err) = bypass(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn stats_on_a_udp_nic_points_to_the_in_process_form() {
    let (code, _, err) = bypass(&["stats", "-d", "udp:127.0.29.1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("use -d sim"), "{err}");
}
