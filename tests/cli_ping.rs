//! `bypass ping`: two RC endpoints walk RESET → INIT → RTR → RTS and exchange a 1-byte SEND,
//! each step printed as it happens; a failure names the step it stopped at and why. A path
//! probe before the SEND finds a hop with a small MTU and names it.

mod cli_support;

use cli_support::bypass;

/// The step lines (`[ n] name ... ok|FAILED ...`) in order.
fn steps(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with('[')).collect()
}

#[test]
fn ping_prints_every_step_in_order_and_succeeds() {
    let (code, out, err) = bypass(&["ping"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let expected = [
        "open devices",
        "create PD, CQ, pool, RC QP",
        "exchange endpoints",
        "A: RESET -> INIT",
        "B: RESET -> INIT",
        "B: post a 1-byte receive",
        "A: INIT -> RTR",
        "B: INIT -> RTR",
        "A: RTR -> RTS",
        "B: RTR -> RTS",
        "A -> B: probe the path MTU",
        "A: post a 1-byte SEND",
        "A: send completion",
        "B: receive completion",
    ];
    let lines = steps(&out);
    assert_eq!(lines.len(), expected.len(), "{out}");
    for (k, (line, name)) in lines.iter().zip(expected).enumerate() {
        assert!(
            line.starts_with(&format!("[{:>2}] {name}", k + 1)),
            "{line}"
        );
        assert!(line.contains(" ok "), "{line}");
    }
    assert!(out.contains("state INIT"), "{out}");
    assert!(out.contains("state RTR"), "{out}");
    assert!(out.contains("state RTS"), "{out}");
    assert!(out.contains("1 byte(s)"), "{out}");
    assert!(out.contains("data 0x42"), "{out}");
    assert!(
        out.contains("a 4096-byte message (one full packet at path MTU 4096) passed"),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.starts_with("ping: ok")),
        "{out}"
    );
}

#[test]
fn ping_on_a_threaded_fabric_succeeds_too() {
    let (code, out, err) = bypass(&["ping", "--threaded"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("threaded fabric"), "{out}");
}

#[test]
fn ping_without_a_receive_stops_at_the_send_completion_and_explains_rnr() {
    let (code, out, err) = bypass(&["ping", "--no-recv"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(!out.contains("post a 1-byte receive"), "{out}");
    assert!(
        out.contains("A: send completion") && out.contains("FAILED"),
        "{out}"
    );
    assert!(err.contains("ping stopped at step"), "{err}");
    assert!(err.contains("(A: send completion)"), "{err}");
    assert!(err.contains("RNR_RETRY_EXC_ERR"), "{err}");
}

#[test]
fn ping_finds_a_1500_byte_hop_and_names_the_mtu_drops() {
    let (code, out, err) = bypass(&["ping", "--hop-mtu", "1500"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("probe the path MTU") && out.contains("FAILED"),
        "{out}"
    );
    assert!(!out.contains("post a 1-byte SEND"), "{out}");
    for want in [
        "(A -> B: probe the path MTU)",
        "a 4096-byte message (one packet at path MTU 4096) does not cross the path",
        "TRANSPORT_RETRY_EXC_ERR",
        "switch 0 port 1 dropped 2 of its packets as larger than that link's MTU 1500",
        "needs an Ethernet MTU >= 4192 on every hop",
        "the largest that passes is 1024 bytes",
        "use path MTU 1024",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}

#[test]
fn ping_at_a_1500_byte_ethernet_mtu_runs_at_1024_and_warns_of_a_mismatch() {
    let (code, out, err) = bypass(&["ping", "--eth-mtu", "1500"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("Ethernet MTU 1500"), "{out}");
    assert!(out.contains("mtu 1024"), "{out}");
    assert!(!out.contains("warning"), "{out}");
    let (code, out, err) = bypass(&["ping", "--eth-mtu", "9000,1500"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("warning: QP 0x2: this end's port carries path MTU 4096, the peer's 1024"),
        "{out}"
    );
    assert!(
        out.contains("a 1024-byte message (one full packet at path MTU 1024) passed"),
        "{out}"
    );
}

#[test]
fn ping_bad_options_are_usage_errors() {
    let cases: [(&[&str], &str); 5] = [
        (&["ping", "--timeout-ms", "soon"], "invalid value"),
        (&["ping", "-d", "eth0"], "is not a device"),
        (&["ping", "--frobnicate"], "unexpected argument"),
        (&["ping", "--eth-mtu", "20000"], "is not an Ethernet MTU"),
        (&["ping", "--eth-mtu", "1500,x"], "is not an Ethernet MTU"),
    ];
    for (args, why) in cases {
        let (code, _, err) = bypass(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}
