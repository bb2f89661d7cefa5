//! `bypass perf write-lat|write-bw -d udp:…` as two processes (server without HOST, client
//! with it) on loopback: the same tables as the in-process form, the server's data check, and
//! the errors a user sees when the two sides disagree or the device cannot reach a peer.

mod cli_support;

use std::net::{TcpListener, UdpSocket};

use cli_support::{bypass, server_and_client};

fn free_ports() -> (String, u16) {
    let t = TcpListener::bind("127.0.0.1:0").unwrap();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    (
        t.local_addr().unwrap().port().to_string(),
        u.local_addr().unwrap().port(),
    )
}

/// Runs server (127.0.0.1) and client (127.0.0.2); returns (server ok, server out, client
/// ok, client out), outputs with stderr appended.
fn two(test: &str, server_extra: &[&str], client_extra: &[&str]) -> (bool, String, bool, String) {
    let (tcp, udp) = free_ports();
    let d1 = format!("udp:127.0.0.1:{udp}");
    let d2 = format!("udp:127.0.0.2:{udp}");
    let mut server = vec!["perf", test, "-d", &d1, "-p", &tcp];
    server.extend_from_slice(server_extra);
    let mut client = vec!["perf", test, "-d", &d2, "-p", &tcp];
    client.extend_from_slice(client_extra);
    client.push("127.0.0.1");
    server_and_client(&server, &client)
}

#[test]
fn write_bw_across_two_processes_prints_the_table_and_the_server_checks_the_data() {
    let opts = ["-s", "64K", "-n", "200", "--check"];
    let (s_ok, s_out, c_ok, c_out) = two("write-bw", &opts, &opts);
    let all = format!("server:\n{s_out}\nclient:\n{c_out}");
    assert!(s_ok && c_ok, "{all}");
    assert!(
        c_out.contains("#bytes     #iterations    BW peak[MiB/sec]"),
        "{all}"
    );
    assert!(
        c_out
            .lines()
            .any(|l| l.trim_start().starts_with("65536      200")),
        "{all}"
    );
    assert!(
        s_out.contains("65536 bytes: data check ok (the buffer holds WRITE 200 of 200 exactly)"),
        "{all}"
    );
    assert!(
        s_out.contains("Link type       : Ethernet (RoCEv2 over UDP)"),
        "{all}"
    );
}

#[test]
fn write_lat_across_two_processes_prints_a_latency_row_on_both_sides() {
    let opts = ["-s", "8", "-n", "100"];
    let (s_ok, s_out, c_ok, c_out) = two("write-lat", &opts, &opts);
    let all = format!("server:\n{s_out}\nclient:\n{c_out}");
    assert!(s_ok && c_ok, "{all}");
    for out in [&s_out, &c_out] {
        assert!(out.contains(" #bytes #iterations    t_min[usec]"), "{all}");
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().take(2).eq(["8", "100"])),
            "{all}"
        );
    }
}

#[test]
fn sides_started_with_different_sizes_refuse_to_run_and_say_so() {
    let (s_ok, s_out, c_ok, c_out) = two(
        "write-bw",
        &["-s", "4K", "-n", "10"],
        &["-s", "8K", "-n", "10"],
    );
    assert!(!s_ok && !c_ok, "server:\n{s_out}\nclient:\n{c_out}");
    assert!(
        c_out.contains("give both sides the same test, sizes and iterations"),
        "{c_out}"
    );
}

#[test]
fn a_host_with_the_in_process_device_is_a_usage_error() {
    let (code, _out, err) = bypass(&["perf", "write-bw", "-n", "10", "127.0.0.1"]);
    assert_ne!(code, 0);
    assert!(err.contains("give both sides -d udp:ADDR"), "{err}");
}
