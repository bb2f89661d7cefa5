//! `bypass pingpong`: two processes, each a simulated NIC on a UDP socket (127.0.0.1 and
//! 127.0.0.2, one port), run rdma-core's `ibv_rc_pingpong` protocol against each other: the
//! TCP exchange, the address lines, `iters` SENDs each way, and rc_pingpong's summary lines.

mod cli_support;

use std::net::{TcpListener, UdpSocket};

use cli_support::bypass;

/// A TCP port and a UDP port free now on loopback (the kernel picks them).
fn free_ports() -> (u16, u16) {
    let t = TcpListener::bind("127.0.0.1:0").unwrap();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    (
        t.local_addr().unwrap().port(),
        u.local_addr().unwrap().port(),
    )
}

struct Run {
    server: String,
    client: String,
}

/// Runs a server on 127.0.0.1 and a client on 127.0.0.2 with `extra` options on both.
fn pingpong(extra: &[&str]) -> Run {
    let (tcp, udp) = free_ports();
    let tcp = tcp.to_string();
    let dev = |last: u8| format!("udp:127.0.0.{last}:{udp}");
    let (d1, d2) = (dev(1), dev(2));
    let mut s_args = vec!["pingpong", "-d", &d1, "-p", &tcp];
    s_args.extend_from_slice(extra);
    let server = cli_support::start_bypass(&s_args, &[]);
    let mut c_args = vec!["pingpong", "-d", &d2, "-p", &tcp];
    c_args.extend_from_slice(extra);
    c_args.push("127.0.0.1");
    let (code, client, cerr) = bypass(&c_args);
    let s = server.wait_with_output().unwrap();
    let server = String::from_utf8_lossy(&s.stdout).into_owned();
    let serr = String::from_utf8_lossy(&s.stderr);
    assert_eq!(
        code, 0,
        "client failed\n{client}\n{cerr}\nserver:\n{server}\n{serr}"
    );
    assert!(
        s.status.success(),
        "server failed\n{server}\n{serr}\nclient:\n{client}\n{cerr}"
    );
    // The wire standard is kept, and both ends say it is unauthenticated plaintext.
    for err in [&*serr, &*cerr] {
        assert!(
            err.contains("ibv_rc_pingpong exchange is unauthenticated plaintext"),
            "{err}"
        );
    }
    Run { server, client }
}

/// The text after `label` on the line that starts with it.
fn line<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no line {label:?} in\n{out}"))
}

fn check(run: &Run, size: u64, iters: u64) {
    let s_local = line(&run.server, "  local address:  ");
    let c_local = line(&run.client, "  local address:  ");
    assert_eq!(line(&run.server, "  remote address: "), c_local);
    assert_eq!(line(&run.client, "  remote address: "), s_local);
    assert!(s_local.starts_with("LID 0x0000, QPN 0x"), "{s_local}");
    assert!(s_local.ends_with("GID ::ffff:127.0.0.1"), "{s_local}");
    assert!(c_local.ends_with("GID ::ffff:127.0.0.2"), "{c_local}");
    for out in [&run.server, &run.client] {
        let bytes = size * iters * 2;
        let l = line(out, &format!("{bytes} bytes in "));
        assert!(l.ends_with(" Mbit/sec"), "{l}");
        let l = line(out, &format!("{iters} iters in "));
        assert!(l.ends_with(" usec/iter"), "{l}");
    }
}

#[test]
fn two_processes_ping_pong_4k_messages_at_mtu_1024_with_checked_data() {
    let run = pingpong(&["-n", "100", "--chk"]);
    check(&run, 4096, 100);
}

#[test]
fn one_byte_and_64k_messages_at_mtu_4096_complete_too() {
    check(
        &pingpong(&["-n", "50", "-s", "1", "-m", "4096", "--chk"]),
        1,
        50,
    );
    check(
        &pingpong(&["-n", "20", "-s", "64K", "-m", "4096", "--chk"]),
        65536,
        20,
    );
}

#[test]
fn event_mode_sleeps_on_the_completion_interrupt_and_completes() {
    check(&pingpong(&["-n", "50", "-e", "-r", "16"]), 4096, 50);
}

#[test]
fn pingpong_on_the_in_process_sim_says_it_needs_a_udp_device() {
    let (code, _out, err) = bypass(&["pingpong"]);
    assert_ne!(code, 0);
    assert!(err.contains("-d udp:ADDR"), "{err}");
}

#[test]
fn a_bad_mtu_is_refused_with_the_allowed_values() {
    let (code, _out, err) = bypass(&["pingpong", "-d", "udp:127.0.0.1:1", "-m", "1500"]);
    assert_ne!(code, 0);
    assert!(err.contains("256, 512, 1024, 2048, 4096"), "{err}");
}

#[test]
fn a_longer_qp_timeout_is_taken_and_one_past_31_is_refused() {
    check(&pingpong(&["-n", "20", "-u", "18", "--chk"]), 4096, 20);
    let (code, _out, err) = bypass(&["pingpong", "-d", "udp:127.0.0.1:1", "-u", "32"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--qp-timeout"), "{err}");
}
