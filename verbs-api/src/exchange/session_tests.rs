//! An [`ExchangeSession`] is bound to the connection it started with: a second connection
//! that sends a well-formed message during the run is closed unread and reported, and the
//! session's next swap returns the real peer's value. Every read of a swap is bounded by
//! one deadline for the whole message: a peer sending a byte at a time cannot stretch it.
//!
//! The raw-socket peers speak the plaintext form (a JSON line); the intruder test runs
//! under a PSK, the default.
//!
//! Owns: these tests, on loopback 127.0.0.1 with ports the OS picks. Must not: test the
//! one-shot exchanges' wire forms (the `verbs_exchange` integration tests do) or the
//! handshake (`noise_tests`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::super::{ExchangeKey, ExchangeServer};
use super::*;

const WAIT: Duration = Duration::from_secs(5);

fn psk() -> ExchangeAuth {
    ExchangeAuth::Psk(ExchangeKey::from_bytes([7; 32]))
}

#[test]
fn a_second_connection_during_a_session_is_closed_unread_and_reported() {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let mut c = ExchangeSession::connect(addr, &psk(), WAIT).unwrap();
        let first: u64 = c.swap(&1u64, WAIT).unwrap();
        // The intruder connects and sends its forged message before the real second one.
        let mut intruder = TcpStream::connect(addr).unwrap();
        intruder.write_all(b"666\n").unwrap();
        let local = intruder.local_addr().unwrap();
        let second: u64 = c.swap(&2u64, WAIT).unwrap();
        // The server closed the intruder's connection without answering it.
        let mut rest = Vec::new();
        let _ = intruder.read_to_end(&mut rest);
        (first, second, local, rest)
    });
    let mut s = server.accept_session(&psk(), WAIT).unwrap();
    let client_addr = s.peer_addr();
    let a: u64 = s.swap(&10u64, WAIT).unwrap();
    let b: u64 = s.swap(&20u64, WAIT).unwrap();
    let (first, second, intruder, rest) = client.join().unwrap();
    assert_eq!((a, b), (1, 2), "the server must read only its client");
    assert_eq!((first, second), (10, 20));
    assert!(rest.is_empty(), "the intruder got {rest:?}");
    assert_ne!(intruder, client_addr);
    assert_eq!(s.take_refused(), vec![intruder]);
    assert!(s.take_refused().is_empty());
}

#[test]
fn a_peer_trickling_its_line_runs_into_the_whole_swap_deadline() {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let trickler = std::thread::spawn(move || {
        let mut t = TcpStream::connect(addr).unwrap();
        // A valid line, one byte each 150 ms: 1.65 s in all, each gap well under the
        // swap's 600 ms but the whole far beyond it.
        for b in b"\"trickled\"\n" {
            if t.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    let mut s = server
        .accept_session(&ExchangeAuth::Plaintext, WAIT)
        .unwrap();
    let got = s.swap::<String>(&"answer".to_string(), Duration::from_millis(600));
    assert!(
        matches!(got, Err(ExchangeError::Timeout { .. })),
        "the trickled line was taken: {got:?}"
    );
    drop(s);
    trickler.join().unwrap();
}

#[test]
fn a_session_reads_lines_the_peer_sent_back_to_back() {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut t = TcpStream::connect(addr).unwrap();
        // Both lines in one segment: the session's reader must keep the second.
        t.write_all(b"1\n2\n").unwrap();
        let mut answers = String::new();
        let mut buf = [0u8; 4];
        while answers.len() < 4 {
            match t.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => answers.push_str(std::str::from_utf8(&buf[..n]).unwrap()),
            }
        }
        answers
    });
    let mut s = server
        .accept_session(&ExchangeAuth::Plaintext, WAIT)
        .unwrap();
    let a: u32 = s.swap(&7u32, WAIT).unwrap();
    let b: u32 = s.swap(&8u32, WAIT).unwrap();
    assert_eq!((a, b), (1, 2));
    assert_eq!(peer.join().unwrap(), "7\n8\n");
}
