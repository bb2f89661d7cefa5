//! Hostile inputs to the command line: values a user (or a script) can give that once
//! crashed the tool, made it allocate without bound, or were refused by an error that named
//! the wrong thing. Each case checks the exit code is non-zero, that no panic text reached
//! the user, and that the message names the option or limit at fault.
//!
//! Owns: the CLI regression tests for issue 21's crashes and misleading errors (`-n`, `-s`,
//! `-t`, `-p 0`, HOST, an early-closing client, ICRC errors in the link line). Must not: test
//! the limits' arithmetic (the driver's `qp_geometry` tests and `tests/verbs_limits.rs` do).
//!
//! Addresses: loopback 127.0.31.x, ports 31000-31999 (one pair per test), so that runs in
//! parallel with other suites never share a socket.
//!
//! Sources: perftest's option names (`-n`, `-s`, `-t`, `-p`); rdma-core
//! `libibverbs/examples/rc_pingpong.c` (`pp_server_exch_dest`: the 52-byte address text) for
//! the exchange the early-closing client cuts short.

mod cli_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::Child;

use cli_support::bypass;

/// Asserts a refusal: non-zero exit, no panic, and every one of `names` in the message.
fn refused(args: &[&str], names: &[&str]) -> String {
    let (code, out, err) = bypass(args);
    let all = format!("{out}{err}");
    assert_ne!(code, 0, "{args:?} succeeded:\n{all}");
    assert_ne!(code, 101, "{args:?} panicked:\n{all}");
    assert!(!all.contains("panicked"), "{args:?} panicked:\n{all}");
    assert!(
        !all.contains("memory allocation"),
        "{args:?} aborted:\n{all}"
    );
    for n in names {
        assert!(all.contains(n), "{args:?}: {n:?} not named in:\n{all}");
    }
    all
}

#[test]
fn iterations_beyond_the_sample_buffers_are_refused_by_option_and_limit() {
    for tool in ["write-lat", "write-bw", "send-lat", "read-bw"] {
        for n in ["18446744073709551615", "4294967296", "10000001"] {
            refused(&["perf", tool, "-n", n], &["--iters", "10000000"]);
        }
    }
    refused(
        &["perf", "compare", "-n", "18446744073709551615"],
        &["--iters"],
    );
    refused(&["perf", "baselines", "-n", "4294967296"], &["--iters"]);
}

#[test]
fn a_size_out_of_range_says_which_end_of_the_range() {
    for s in ["0", "16M"] {
        let all = refused(&["perf", "write-lat", "-s", s], &["-s ", "1 byte to 8 MiB"]);
        assert!(!all.contains("too large for this machine"), "{all}");
    }
}

#[test]
fn compare_sizes_out_of_range_name_their_option() {
    refused(
        &[
            "perf",
            "compare",
            "--lat-size",
            "0",
            "-n",
            "100",
            "--rounds",
            "1",
        ],
        &["--lat-size 0", "1 byte to 8 MiB"],
    );
    refused(
        &[
            "perf",
            "compare",
            "--bw-size",
            "0",
            "-n",
            "100",
            "--rounds",
            "1",
        ],
        &["--bw-size 0", "1 byte to 8 MiB"],
    );
}

#[test]
fn pingpong_buffers_beyond_the_budget_are_refused_before_mapping() {
    let all = refused(
        &[
            "pingpong",
            "-d",
            "udp:127.0.31.7:31040",
            "-s",
            "1G",
            "-r",
            "8192",
        ],
        &["-s 1073741824 × -r 8192", "MiB allowed"],
    );
    assert!(!all.contains("out of memory"), "{all}");
}

#[test]
fn a_send_queue_deeper_than_the_device_names_t_and_its_limit() {
    let all = refused(
        &["perf", "write-bw", "-t", "8192", "-s", "8", "-n", "5"],
        &["-t 8192", "at most"],
    );
    // The limit given works.
    let max: String = all
        .split("give -t ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the largest -t")
        .to_owned();
    let (code, out, err) = bypass(&["perf", "write-bw", "-t", &max, "-s", "8", "-n", "5"]);
    assert_eq!(code, 0, "-t {max}:\n{out}{err}");
}

#[test]
fn inline_beyond_the_wqe_names_i_and_the_limit_per_transport() {
    refused(
        &["perf", "write-lat", "-I", "1024", "-n", "5"],
        &["-I 1024", "RC", "-I 908 or less"],
    );
    refused(
        &[
            "perf", "send-bw", "-c", "UD", "-I", "1000", "-s", "8", "-n", "5",
        ],
        &["-I 1000", "UD", "-I 892 or less"],
    );
    let (code, out, err) = bypass(&["perf", "write-lat", "-I", "908", "-s", "8", "-n", "5"]);
    assert_eq!(code, 0, "-I 908:\n{out}{err}");
}

#[test]
fn qp_counts_beyond_the_device_are_refused_before_allocating() {
    refused(
        &["perf", "qp-scale", "--counts", "4294967295", "-r", "1"],
        &["--counts 4294967295", "max_qp"],
    );
    refused(&["perf", "qp-scale", "--counts", "0"], &["--counts"]);
}

#[test]
fn compare_udp_counts_sizes_and_addresses_are_checked_by_name() {
    refused(
        &["perf", "compare-udp", "-n", "18446744073709551615"],
        &["--iters", "10000000"],
    );
    refused(
        &["perf", "compare-udp", "--bw-iters", "18446744073709551615"],
        &["--bw-iters"],
    );
    let addrs = ["--addr-a", "127.0.31.10", "--addr-b", "127.0.31.11"];
    for opt in ["--lat-size", "--bw-size"] {
        let mut args = vec!["perf", "compare-udp", opt, "0"];
        args.extend_from_slice(&addrs);
        refused(&args, &[&format!("{opt} 0"), "1 byte to 8 MiB"]);
    }
    refused(
        &[
            "perf",
            "compare-udp",
            "--addr-a",
            "127.0.31.12",
            "--addr-b",
            "127.0.31.12",
        ],
        &["--addr-a and --addr-b are both 127.0.31.12"],
    );
}

#[test]
fn an_unresolvable_host_is_named() {
    let host = "no-such-host.invalid";
    let all = refused(
        &[
            "pingpong",
            "-d",
            "udp:127.0.31.1:31000",
            "-p",
            "31001",
            host,
        ],
        &[host, "-p (31001)"],
    );
    assert!(!all.contains("give host:port"), "{all}");
    refused(
        &[
            "perf",
            "write-lat",
            "-d",
            "udp:127.0.31.1:31002",
            "-p",
            "31003",
            host,
        ],
        &[host],
    );
}

/// Starts `bypass ARGS` and reads its stdout up to the line holding `marker` (the rest is
/// drained by a thread); returns the child and that line.
fn start_until(args: &[&str], marker: &str) -> (Child, String) {
    let mut child = cli_support::start_bypass(args, &[]);
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("{args:?} printed no {marker:?}"));
    // Keep reading, so that the rest of its output never meets a closed pipe.
    std::thread::spawn(move || lines.count());
    (child, line)
}

fn port_of(line: &str) -> u16 {
    line.rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"))
}

fn stderr_of(child: Child) -> (bool, String) {
    let out = child.wait_with_output().expect("wait for bypass");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn pingpong_port_0_prints_the_port_and_an_early_close_is_said_as_such() {
    let args = ["pingpong", "-d", "udp:127.0.31.2:31010", "-p", "0"];
    let (child, line) = start_until(&args, "listening on TCP port");
    let port = port_of(&line);
    assert_ne!(port, 0, "{line}");
    // A client that sends part of its address and closes.
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the printed port");
    s.write_all(b"0000:000").unwrap();
    drop(s);
    let (ok, err) = stderr_of(child);
    assert!(!ok, "{err}");
    assert!(
        err.contains("closed the connection after 8 of the 52 bytes"),
        "{err}"
    );
    assert!(!err.contains("failed to fill whole buffer"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn perf_server_port_0_prints_the_port() {
    let args = ["perf", "write-lat", "-d", "udp:127.0.31.3:31020", "-p", "0"];
    let (child, line) = start_until(&args, "listening on TCP port");
    let port = port_of(&line);
    assert_ne!(port, 0, "{line}");
    // Closing at once ends the server's exchange with the peer named as the cause.
    drop(TcpStream::connect(("127.0.0.1", port)).expect("connect to the printed port"));
    let (ok, err) = stderr_of(child);
    assert!(!ok, "{err}");
    assert!(err.contains("closed the connection"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn datagrams_with_a_bad_icrc_are_counted_in_the_link_line() {
    let (udp, tcp) = ("127.0.31.4:31030", "31031");
    let server_dev = format!("udp:{udp}");
    let server = ["pingpong", "-d", &server_dev, "-p", tcp, "-n", "10"];
    let (child, _) = start_until(&server, "local address");
    // RoCEv2 payloads for QP 1 (BTH: SEND_ONLY, dest QP 1, PSN 0) whose ICRC is wrong.
    let junk = UdpSocket::bind("127.0.31.6:0").unwrap();
    let mut pkt = vec![0x04, 0x40, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0];
    pkt.extend_from_slice(&[0xab; 8]);
    pkt.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    for k in 0..1000 {
        junk.send_to(&pkt, udp).unwrap();
        if k % 20 == 19 {
            // Paced, so that a receive buffer capped at `rmem_max` never overflows.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let client = [
        "pingpong",
        "-d",
        "udp:127.0.31.5:31030",
        "-p",
        tcp,
        "-n",
        "10",
        "127.0.31.4",
    ];
    let (code, out, cerr) = bypass(&client);
    let (ok, serr) = stderr_of(child);
    assert!(code == 0 && ok, "client:\n{out}{cerr}\nserver:\n{serr}");
    assert!(serr.contains("port rx_icrc_errors 1000"), "{serr}");
}
