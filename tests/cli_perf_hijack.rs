//! Hostile inputs to the two-process perf tools' out-of-band exchange and their device
//! options: a second TCP connection that sends a forged end-of-run message during
//! `perf write-bw --check` is closed unread and logged, and the run ends with the real
//! client's result; `-d udp:ADDR:0` is refused where the device is parsed, naming port 0;
//! `ping --timeout-ms 0` and `--hop-mtu 0` are refused by their option with the range.
//!
//! Owns: these tests. Addresses: loopback 127.0.33.x, ports 33000-33999 (one pair per
//! test), apart from every other test binary's. Must not: test the exchange's own wire form
//! (`bypass_verbs::exchange`'s session tests do) or the perf tables (`cli_perf_udp`).

mod cli_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use cli_support::bypass;

#[test]
fn a_forged_end_of_run_message_on_a_second_connection_is_closed_unread() {
    let opts = ["-s", "4K", "-n", "20000", "--check"];
    let side = |dev: &'static str| ["perf", "write-bw", "-d", dev, "-p", "33002"];
    let mut server =
        cli_support::start_bypass(&[&side("udp:127.0.33.1:33001")[..], &opts].concat(), &[]);
    let client = cli_support::start_bypass(
        &[&side("udp:127.0.33.2:33001")[..], &opts, &["127.0.0.1"]].concat(),
        &[],
    );
    // Wait until the server has taken its client's hello, then inject.
    let mut err_lines = BufReader::new(server.stderr.take().expect("stderr")).lines();
    let mut server_err = String::new();
    for l in err_lines.by_ref().map_while(Result::ok) {
        server_err.push_str(&l);
        server_err.push('\n');
        if l.contains("out-of-band client") {
            break;
        }
    }
    assert!(
        server_err.contains("out-of-band client 127.0.0.1:"),
        "{server_err}"
    );
    // What the client sends when it is done with a size, claiming one WRITE: taken as the
    // client's, the server would check the buffer for WRITE 1 and report corrupted data.
    let mut forger = TcpStream::connect(("127.0.0.1", 33002)).expect("connect the forger");
    forger
        .write_all(b"{\"size\":0,\"sent\":[1],\"peak\":0.0,\"avg\":0.0,\"rate\":0.0}\n")
        .expect("send the forged message");
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        for l in err_lines.map_while(Result::ok) {
            rest.push_str(&l);
            rest.push('\n');
        }
        rest
    });
    let c = client.wait_with_output().expect("wait for the client");
    let s = server.wait_with_output().expect("wait for the server");
    server_err.push_str(&drain.join().expect("drain the server's stderr"));
    let mut answer = Vec::new();
    let _ = forger.read_to_end(&mut answer);
    let all = format!(
        "server:\n{}{server_err}\nclient:\n{}{}",
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    assert!(s.status.success() && c.status.success(), "{all}");
    assert!(
        String::from_utf8_lossy(&s.stdout)
            .contains("4096 bytes: data check ok (the buffer holds WRITE 20000 of 20000 exactly)"),
        "{all}"
    );
    assert!(
        server_err.contains("refused an out-of-band connection from 127.0.0.1:"),
        "{all}"
    );
    assert!(answer.is_empty(), "the forger was answered: {answer:?}");
    assert!(!all.contains("starved"), "{all}");
}

#[test]
fn udp_port_0_is_refused_where_the_device_is_parsed() {
    let (code, out, err) = bypass(&["perf", "write-lat", "-d", "udp:127.0.33.3:0", "-p", "33010"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("UDP port 0 cannot work"), "{err}");
    assert!(err.contains("same fixed port"), "{err}");
    assert!(!err.contains("starved"), "{err}");
}

#[test]
fn ping_timeout_and_hop_mtu_of_0_are_refused_with_their_range() {
    for (args, name, range) in [
        (["ping", "--timeout-ms", "0"], "--timeout-ms", "1..=3600000"),
        (["ping", "--hop-mtu", "0"], "--hop-mtu", "68..=9000"),
    ] {
        let (code, out, err) = bypass(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(name), "{args:?}: {err}");
        assert!(err.contains(range), "{args:?}: {err}");
    }
}
