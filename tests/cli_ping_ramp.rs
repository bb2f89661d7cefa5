//! `bypass ping --ramp`: the four bring-up stages in one process and across two (`-d
//! udp:…`), each stage's line and data check, the first failure stopping at its stage with
//! the explained error, and no progress bar when stderr is not a terminal.

mod cli_support;

use cli_support::bypass;

/// The line of `stage` (`stage N name ...`), if printed.
fn stage(out: &str, n: u8) -> Option<&str> {
    out.lines().find(|l| l.starts_with(&format!("stage {n} ")))
}

#[test]
fn ramp_in_process_passes_every_stage_with_its_figures_and_checks() {
    let (code, out, err) = bypass(&["ping", "--ramp"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let s1 = stage(&out, 1).expect("stage 1");
    assert!(
        s1.starts_with("stage 1 ping  ok  1-byte RC SEND A -> B"),
        "{s1}"
    );
    assert!(s1.contains("round-trip ") && s1.contains(" us"), "{s1}");
    assert!(s1.contains("B got 1 byte 0x42"), "{s1}");
    let s2 = stage(&out, 2).expect("stage 2");
    assert!(s2.starts_with("stage 2 qps   ok  8 RC QPs at once"), "{s2}");
    assert!(
        s2.contains("B got 8 SENDs (32768 bytes) and 8 WRITE slices, every byte as sent"),
        "{s2}"
    );
    assert!(s2.contains("GB/s"), "{s2}");
    let s3 = stage(&out, 3).expect("stage 3");
    assert!(
        s3.starts_with(
            "stage 3 sizes ok  WRITE then READ back at 24 sizes, 1 B .. 8 MiB, every byte checked"
        ),
        "{s3}"
    );
    assert!(
        s3.contains("at 8 MiB: WRITE ") && s3.contains(" GB/s, READ "),
        "{s3}"
    );
    assert!(
        s3.contains("B's region holds the last WRITE (8 MiB) exactly"),
        "{s3}"
    );
    // Stage 4 runs where a GPU is, and says why not elsewhere (no libcuda, no device).
    let s4 = stage(&out, 4).expect("stage 4");
    let last = if s4.starts_with("stage 4 gpu   ok  7 checks of 64 KiB") {
        "ping --ramp: ok, stages 1-4 passed"
    } else {
        assert!(s4.starts_with("stage 4 gpu   skipped: no GPU: "), "{s4}");
        assert!(
            s4.contains("no CUDA driver library") || s4.contains("CUDA_ERROR_NO_DEVICE"),
            "{s4}"
        );
        "ping --ramp: ok, stages 1-3 passed, stage 4 skipped"
    };
    assert_eq!(out.lines().last(), Some(last), "{out}");
    // stderr is a pipe here: the progress bar must not draw.
    assert!(err.is_empty(), "stderr:\n{err}");
}

#[test]
fn ramp_takes_the_qp_count_and_largest_size_on_a_threaded_fabric() {
    let (code, out, err) = bypass(&[
        "ping",
        "--ramp",
        "--threaded",
        "--qps",
        "3",
        "--max-size",
        "5000",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("threaded fabric"), "{out}");
    let s2 = stage(&out, 2).unwrap_or_default();
    assert!(
        s2.contains("3 RC QPs at once") && s2.contains("B got 3 SENDs"),
        "{s2}"
    );
    // 1, 2, 4, ..., 4096, then 5000 itself.
    let s3 = stage(&out, 3).unwrap_or_default();
    assert!(s3.contains("at 14 sizes, 1 B .. 5000 B"), "{s3}");
    assert!(s3.contains("last WRITE (5000 B) exactly"), "{s3}");
}

#[test]
fn an_impossible_max_size_stops_at_stage_3_with_the_reason() {
    let (code, out, err) = bypass(&["ping", "--ramp", "--qps", "2", "--max-size", "2G"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(stage(&out, 1).is_some_and(|l| l.contains(" ok ")), "{out}");
    assert!(stage(&out, 2).is_some_and(|l| l.contains(" ok ")), "{out}");
    assert_eq!(
        stage(&out, 3),
        Some("stage 3 sizes FAILED at step A: register the stage 3 buffers"),
        "{out}"
    );
    assert!(
        stage(&out, 4).is_none(),
        "no stage runs after a failure:\n{out}"
    );
    assert!(
        err.contains(
            "ping --ramp stopped at stage 3 (sizes), step \"A: register the stage 3 buffers\""
        ),
        "{err}"
    );
    assert!(
        err.contains("--max-size 2 GiB is outside 1 B ..= 1 GiB"),
        "{err}"
    );
    assert!(
        err.contains("max_msg_sz") && err.contains("give --max-size 1024M or less"),
        "{err}"
    );
}

#[test]
fn ramp_bad_options_are_usage_errors() {
    let cases: [(&[&str], &str); 5] = [
        (&["ping", "--qps", "3"], "--ramp"),
        (&["ping", "--ramp", "--qps", "0"], "invalid value"),
        (&["ping", "--ramp", "--qps", "65"], "invalid value"),
        (&["ping", "--ramp", "--max-size", "1.5M"], "is not a size"),
        (&["ping", "--ramp", "--no-recv"], "cannot be used with"),
    ];
    for (args, why) in cases {
        let (code, _, err) = bypass(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let (code, _, err) = bypass(&["ping", "--ramp", "127.0.29.1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("give -d udp:ADDR"), "{err}");
}

/// Runs the ramp as server (`a`) and client (`b`) over UDP on loopback, TCP port `tcp`;
/// returns (server code, server stdout+stderr, client code, client stdout, client stderr).
fn two(a: &str, b: &str, tcp: &str, client_extra: &[&str]) -> (i32, String, i32, String, String) {
    let server = cli_support::start_bypass(&["ping", "--ramp", "-d", a, "-p", tcp], &[]);
    let mut args = vec!["ping", "--ramp", "-d", b, "-p", tcp];
    args.extend_from_slice(client_extra);
    args.push("127.0.29.3");
    let (code, out, err) = bypass(&args);
    let s = server.wait_with_output().unwrap();
    let s_all = format!(
        "{}{}",
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&s.stderr)
    );
    (s.status.code().unwrap_or(-1), s_all, code, out, err)
}

#[test]
fn ramp_across_two_processes_passes_every_stage_on_both_sides() {
    let (s_code, s_out, code, out, err) = two(
        "udp:127.0.29.3:29120",
        "udp:127.0.29.4:29120",
        "29110",
        &["--qps", "2", "--max-size", "256K"],
    );
    let all = format!("server:\n{s_out}\nclient:\n{out}{err}");
    assert_eq!((s_code, code), (0, 0), "{all}");
    assert!(
        stage(&out, 1).is_some_and(|l| l.contains("B got 1 byte 0x42")),
        "{all}"
    );
    assert!(
        stage(&out, 2).is_some_and(|l| l.contains("2 RC QPs at once")),
        "{all}"
    );
    assert!(
        stage(&out, 3)
            .is_some_and(|l| l.contains("at 19 sizes, 1 B .. 256 KiB, every byte checked")),
        "{all}"
    );
    assert!(
        stage(&out, 4)
            .is_some_and(|l| l.contains("skipped: the two-process form has no GPU stage")),
        "{all}"
    );
    // The server checked the data on its side and says so.
    assert!(
        stage(&s_out, 1).is_some_and(|l| l.contains("ok  B got 1 byte 0x42")),
        "{all}"
    );
    assert!(
        stage(&s_out, 2)
            .is_some_and(|l| l.contains("B got 2 SENDs (8192 bytes) and 2 WRITE slices")),
        "{all}"
    );
    assert!(
        stage(&s_out, 3).is_some_and(|l| l.contains("holds the last WRITE (256 KiB) exactly")),
        "{all}"
    );
    assert!(s_out.contains("ping --ramp (server): ok"), "{all}");
    assert!(err.contains("link 127.0.29.4:29120: tx "), "{all}");
}

#[test]
fn a_failure_across_two_processes_stops_both_sides_at_the_same_stage() {
    let (s_code, s_out, code, out, err) = two(
        "udp:127.0.29.3:29121",
        "udp:127.0.29.5:29121",
        "29111",
        &["--qps", "1", "--max-size", "2G"],
    );
    let all = format!("server:\n{s_out}\nclient:\n{out}{err}");
    assert_eq!((s_code, code), (1, 1), "{all}");
    assert!(err.contains("stopped at stage 3 (sizes)"), "{all}");
    assert!(
        s_out.contains("stage 3 sizes FAILED at the client's step A: register the stage 3 buffers"),
        "{all}"
    );
    assert!(
        s_out.contains("stopped at stage 3 (sizes), step \"(client) A: register"),
        "{all}"
    );
}

#[test]
fn the_progress_bar_draws_when_stderr_is_a_terminal() {
    // stderr on a pseudo-terminal, stdout still a pipe: the bar goes to stderr only.
    let (ok, stdout, drawn) = cli_support::with_stderr_on_a_terminal(&[
        "ping",
        "--ramp",
        "--qps",
        "1",
        "--max-size",
        "1M",
    ]);
    assert!(ok, "{stdout}\n{drawn}");
    assert!(drawn.contains("ping --ramp: stage 3 sizes ["), "{drawn:?}");
    assert!(
        drawn.contains("/21"),
        "the bar counts the 21 sizes: {drawn:?}"
    );
    assert!(
        !stdout.contains('['),
        "the bar never reaches stdout:\n{stdout}"
    );
}
