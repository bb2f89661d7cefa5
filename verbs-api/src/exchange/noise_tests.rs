//! The authenticated exchange on loopback: the right key swaps values (one spanning two
//! frames); a wrong key, or a peer on the other codec, is the named error on both ends; a
//! truncated frame, a message over the bound, a tampered frame and a silent peer each end
//! the exchange with their own error, never a hang (each runs under a short deadline).
//!
//! The hostile peers are hand-driven Noise initiators (`snow` with the same pattern and
//! key), so they get past the handshake and attack the transport frames themselves.
//!
//! Owns: these tests, on 127.0.0.1 with ports the OS picks. Must not: test the session's
//! binding to its first client (`session_tests`) or the key file (`key_tests`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::super::{
    ExchangeAuth, ExchangeKey, ExchangeServer, ExchangeSession, exchange_as_client,
};
use super::*;

const WAIT: Duration = Duration::from_secs(5);
const SHORT: Duration = Duration::from_millis(400);

fn key(b: u8) -> ExchangeKey {
    ExchangeKey::from_bytes([b; 32])
}

fn psk(b: u8) -> ExchangeAuth {
    ExchangeAuth::Psk(key(b))
}

/// Runs `server_side` on a bound server in a thread and `client_side` here.
fn pair<S: Send + 'static, C>(
    server_side: impl FnOnce(ExchangeServer) -> S + Send + 'static,
    client_side: impl FnOnce(std::net::SocketAddr) -> C,
) -> (S, C) {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let t = std::thread::spawn(move || server_side(server));
    let c = client_side(addr);
    (t.join().unwrap(), c)
}

#[test]
fn the_same_key_swaps_values_including_one_that_spans_two_frames() {
    // Over one frame's CHUNK, under MAX_LINE once JSON-quoted.
    let big = "x".repeat(CHUNK + 10);
    let big2 = big.clone();
    let (s, c) = pair(
        move |server| {
            let mut s = server.accept_session(&psk(1), WAIT).unwrap();
            let a: String = s.swap(&"small".to_string(), WAIT).unwrap();
            let b: String = s.swap(&big2, WAIT).unwrap();
            (a, b)
        },
        |addr| {
            let mut c = ExchangeSession::connect(addr, &psk(1), WAIT).unwrap();
            let a: String = c.swap(&"hi".to_string(), WAIT).unwrap();
            let b: String = c.swap(&"tail".to_string(), WAIT).unwrap();
            (a, b)
        },
    );
    assert_eq!(s, ("hi".to_string(), "tail".to_string()));
    assert_eq!(c.0, "small");
    assert_eq!(c.1, big);
}

#[test]
fn a_wrong_key_fails_on_both_ends_saying_the_keys_differ() {
    let (s, c) = pair(
        |server| server.exchange(&1u32, &psk(1), WAIT),
        |addr| exchange_as_client(addr, &2u32, &psk(2), WAIT),
    );
    for (side, r) in [("server", s), ("client", c)] {
        let err = r.unwrap_err();
        assert!(matches!(err, ExchangeError::KeyMismatch), "{side}: {err:?}");
        assert!(err.to_string().contains("keys differ"), "{side}: {err}");
        assert!(err.to_string().contains("same key"), "{side}: {err}");
    }
}

#[test]
fn a_plaintext_client_and_a_psk_server_each_name_the_mismatch() {
    let (s, c) = pair(
        |server| server.exchange(&1u32, &psk(1), WAIT),
        |addr| exchange_as_client(addr, &2u32, &ExchangeAuth::Plaintext, WAIT),
    );
    assert!(matches!(s, Err(ExchangeError::PlaintextPeer)), "{s:?}");
    assert!(matches!(c, Err(ExchangeError::PeerWantsKey)), "{c:?}");
}

#[test]
fn a_psk_client_and_a_plaintext_server_each_name_the_mismatch() {
    // One-shot: the plaintext server reads first.
    let (s, c) = pair(
        |server| server.exchange(&1u32, &ExchangeAuth::Plaintext, WAIT),
        |addr| exchange_as_client(addr, &2u32, &psk(1), WAIT),
    );
    assert!(matches!(s, Err(ExchangeError::PeerWantsKey)), "{s:?}");
    assert!(matches!(c, Err(ExchangeError::PlaintextPeer)), "{c:?}");
    // Session: the plaintext server writes its line first.
    let (s, c) = pair(
        |server| {
            let mut s = server
                .accept_session(&ExchangeAuth::Plaintext, WAIT)
                .unwrap();
            s.swap(&1u32, WAIT)
        },
        |addr| ExchangeSession::connect(addr, &psk(1), WAIT).map(|_| ()),
    );
    assert!(matches!(s, Err(ExchangeError::PeerWantsKey)), "{s:?}");
    assert!(matches!(c, Err(ExchangeError::PlaintextPeer)), "{c:?}");
}

/// A hand-driven client that completes the handshake with `k` and hands back the socket
/// and its transport state.
fn raw_client(addr: std::net::SocketAddr, k: &ExchangeKey) -> (TcpStream, snow::TransportState) {
    let mut t = TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(WAIT)).unwrap();
    let mut hs = builder(k).unwrap().build_initiator().unwrap();
    let mut buf = vec![0u8; MAX_FRAME];
    let n = hs.write_message(&[], &mut buf).unwrap();
    let mut out = MAGIC.to_vec();
    frame(&mut out, &buf[..n]);
    t.write_all(&out).unwrap();
    let mut magic = [0u8; 16];
    t.read_exact(&mut magic).unwrap();
    assert_eq!(&magic, MAGIC);
    let mut len = [0u8; 2];
    t.read_exact(&mut len).unwrap();
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    t.read_exact(&mut answer).unwrap();
    hs.read_message(&answer, &mut buf).unwrap();
    (t, hs.into_transport_mode().unwrap())
}

/// One transport frame of `plain` (flag byte included), length-prefixed.
fn seal(ts: &mut snow::TransportState, plain: &[u8]) -> Vec<u8> {
    let mut ct = vec![0u8; MAX_FRAME];
    let n = ts.write_message(plain, &mut ct).unwrap();
    let mut out = Vec::new();
    frame(&mut out, &ct[..n]);
    out
}

/// A server that takes one message from a hand-driven client doing `attack`.
fn server_against(attack: impl FnOnce(TcpStream, snow::TransportState)) -> ExchangeError {
    let (s, ()) = pair(
        |server| {
            let mut s = server.accept_session(&psk(3), WAIT)?;
            s.swap::<u32>(&1, SHORT)
        },
        |addr| {
            let (t, ts) = raw_client(addr, &key(3));
            attack(t, ts);
        },
    );
    s.unwrap_err()
}

#[test]
fn a_hand_driven_client_with_the_key_is_understood() {
    // The baseline for the attacks below: the same client, behaving, gets through.
    let (s, ()) = pair(
        |server| {
            let mut s = server.accept_session(&psk(3), WAIT).unwrap();
            s.swap::<u32>(&1, WAIT)
        },
        |addr| {
            let (mut t, mut ts) = raw_client(addr, &key(3));
            t.write_all(&seal(&mut ts, b"\x0142")).unwrap();
            let mut rest = Vec::new();
            let _ = t.read_to_end(&mut rest);
        },
    );
    assert_eq!(s.unwrap(), 42);
}

#[test]
fn a_tampered_frame_fails_its_integrity_check() {
    let err = server_against(|mut t, mut ts| {
        let mut f = seal(&mut ts, b"\x0142");
        f[3] ^= 0x01;
        t.write_all(&f).unwrap();
        let _ = t.read_to_end(&mut Vec::new());
    });
    assert!(matches!(err, ExchangeError::Integrity), "{err:?}");
    assert!(err.to_string().contains("integrity"), "{err}");
}

#[test]
fn a_frame_shorter_than_its_tag_fails_its_integrity_check() {
    let err = server_against(|mut t, _| {
        t.write_all(&[0, 4, 1, 2, 3, 4]).unwrap();
        let _ = t.read_to_end(&mut Vec::new());
    });
    assert!(matches!(err, ExchangeError::Integrity), "{err:?}");
}

#[test]
fn a_truncated_frame_is_an_early_close() {
    let err = server_against(|mut t, mut ts| {
        let f = seal(&mut ts, b"\x0142");
        t.write_all(&f[..f.len() / 2]).unwrap();
        // Closing here: the server has half a frame.
    });
    assert!(matches!(err, ExchangeError::Closed { .. }), "{err:?}");
}

#[test]
fn a_truncated_frame_from_a_peer_that_stays_is_a_timeout() {
    let err = server_against(|mut t, mut ts| {
        let f = seal(&mut ts, b"\x0142");
        t.write_all(&f[..f.len() - 1]).unwrap();
        let _ = t.read_to_end(&mut Vec::new());
    });
    assert!(matches!(err, ExchangeError::Timeout { .. }), "{err:?}");
}

#[test]
fn a_message_over_the_bound_is_refused_without_buffering_it() {
    let err = server_against(|mut t, mut ts| {
        // Two "more follows" frames: over MAX_LINE before any last frame.
        let mut piece = vec![0u8; CHUNK + 1];
        for _ in 0..2 {
            if t.write_all(&seal(&mut ts, &piece)).is_err() {
                break;
            }
            piece[1] = 1;
        }
        let _ = t.read_to_end(&mut Vec::new());
    });
    assert!(matches!(err, ExchangeError::TooLong), "{err:?}");
}

#[test]
fn a_value_over_the_bound_is_refused_before_sending() {
    let (_, c) = pair(
        |server| server.exchange(&0u32, &psk(4), SHORT).map(|_| ()),
        |addr| exchange_as_client(addr, &"y".repeat(MAX_LINE), &psk(4), WAIT),
    );
    assert!(matches!(c, Err(ExchangeError::TooLong)), "{c:?}");
}

#[test]
fn a_silent_client_runs_into_the_deadline() {
    let (s, _t) = pair(
        |server| server.exchange(&1u32, &psk(5), SHORT),
        // Connected, never says anything; kept open until the server gave up.
        |addr| TcpStream::connect(addr).unwrap(),
    );
    assert!(matches!(s, Err(ExchangeError::Timeout { .. })), "{s:?}");
}

#[test]
fn a_silent_server_runs_into_the_deadline() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        // Read the handshake, never answer; hold the socket until the client gave up.
        let mut buf = [0u8; 256];
        let mut s = s;
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    });
    let c = exchange_as_client(addr, &1u32, &psk(5), SHORT);
    assert!(matches!(c, Err(ExchangeError::Timeout { .. })), "{c:?}");
    t.join().unwrap();
}
