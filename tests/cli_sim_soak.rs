//! `bypass sim soak`: a short run passes its checks and reports what the issue asks for
//! (messages by kind, faults by kind, lanes replaced, RSS, object counts back to start), and
//! bad arguments are refused with a message naming the fix, exit status 2.
//!
//! Owns: the CLI tests of the soak. Must not: run it long (`scripts/test.sh` runs 60 s; the
//! 10-minute figures are in docs/perf.md).

mod cli_support;

use cli_support::bypass;

/// The number before `what` on the line starting with `line`.
fn figure(out: &str, line: &str, what: &str) -> u64 {
    let l = out
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no `{line}` line in\n{out}"));
    let words: Vec<&str> = l.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.trim_end_matches(',') == what)
        .unwrap_or_else(|| panic!("no `{what}` in `{l}`"));
    words[at - 1]
        .parse()
        .unwrap_or_else(|e| panic!("`{}` in `{l}`: {e}", words[at - 1]))
}

#[test]
fn a_short_soak_checks_its_data_replaces_lanes_and_leaks_nothing() {
    let (code, out, err) = bypass(&[
        "sim",
        "soak",
        "--duration",
        "2s",
        "--qps",
        "4",
        "--replace-after",
        "20",
        "--fault-ppm",
        "20000",
        "--seed",
        "9",
    ]);
    assert_eq!(code, 0, "{err}{out}");
    assert!(out.contains("ok: every message checked"), "{out}");
    assert!(figure(&out, "messages", "SEND") > 0, "{out}");
    assert!(figure(&out, "messages", "READ") > 0, "{out}");
    assert!(figure(&out, "messages", "atomic") > 0, "{out}");
    // 2 % of packets each: some of every kind of fault in any run that carried messages.
    for kind in ["dropped", "duplicated", "reordered", "corrupted"] {
        assert!(figure(&out, "faults", kind) > 0, "{kind}: {out}");
    }
    assert!(figure(&out, "lanes", "replaced") > 0, "{out}");
    // Object counts at the end are those at the start, for both devices.
    let lines: Vec<&str> = out.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("objects") {
            let start = l.split("start").nth(1).unwrap().trim();
            let end = lines[i + 2].split("end").nth(1).unwrap().trim();
            assert_eq!(start, end, "{out}");
            assert!(lines[i + 1].contains("qps=4"), "{out}");
        }
    }
    assert!(out.contains("rss        start"), "{out}");
}

#[test]
fn bad_arguments_are_refused_with_the_fix() {
    for (args, needle) in [
        (&["--duration", "10x"][..], "use ms, s, m or h"),
        (&["--duration", "0s"][..], "more than 0"),
        (&["--qps", "0"][..], "--qps"),
        (&["--replace-after", "0"][..], "--replace-after"),
        (&["--fault-ppm", "60000"][..], "--fault-ppm"),
    ] {
        let mut all = vec!["sim", "soak"];
        all.extend_from_slice(args);
        let (code, out, err) = bypass(&all);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} ran: {out}");
    }
}
