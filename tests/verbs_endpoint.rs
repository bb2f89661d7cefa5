//! Endpoints round-trip through serde, the `ibv_rc_pingpong` text form and both TCP
//! exchange protocols on loopback; the exchange fails with typed, explained errors.

use std::time::Duration;

use bypass_verbs::exchange::{
    ExchangeAuth, ExchangeError, ExchangeKey, ExchangeServer, PeerInfo, exchange_as_client,
    exchange_pingpong_as_client,
};
use bypass_verbs::{Gid, Mtu, QpEndpoint, RemoteBuffer};

fn ep(qpn: u32) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn: 0x00ab_cdef & qpn,
        gid: Gid::from_ipv4([192, 0, 2, qpn as u8]),
        lid: 0,
        mtu: Mtu::Mtu2048,
    }
}

#[test]
fn endpoint_round_trips_through_serde_json() {
    let info = PeerInfo {
        qp: ep(0x1c),
        buffers: vec![RemoteBuffer {
            addr: 0x7f00_0000_1000,
            rkey: 0x0012_3456,
            len: 65536,
        }],
    };
    let json = serde_json::to_string(&info).unwrap();
    assert!(json.contains("\"mtu\":2048"), "{json}");
    let back: PeerInfo = serde_json::from_str(&json).unwrap();
    assert_eq!(back, info);
}

#[test]
fn serde_refuses_an_mtu_that_is_not_an_ib_mtu() {
    let mut v = serde_json::to_value(ep(1)).unwrap();
    v["mtu"] = 1500.into();
    let err = serde_json::from_value::<QpEndpoint>(v)
        .unwrap_err()
        .to_string();
    assert!(err.contains("1500") && err.contains("4096"), "{err}");
}

#[test]
fn endpoint_round_trips_through_the_pingpong_text_form() {
    let e = ep(0x00fe_dcba);
    let text = e.to_string();
    assert_eq!(text.len(), QpEndpoint::PINGPONG_TEXT_LEN);
    assert_eq!(QpEndpoint::parse_pingpong(&text, Mtu::Mtu2048).unwrap(), e);
}

#[test]
fn json_exchange_on_loopback_swaps_peer_info() {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let s_info = PeerInfo {
        qp: ep(0x10),
        buffers: vec![],
    };
    let c_info = PeerInfo {
        qp: ep(0x20),
        buffers: vec![RemoteBuffer {
            addr: 0x1000,
            rkey: 7,
            len: 8,
        }],
    };
    let s_clone = s_info.clone();
    let auth = ExchangeAuth::Psk(ExchangeKey::from_bytes([9; 32]));
    let s_auth = auth.clone();
    let t = std::thread::spawn(move || server.exchange(&s_clone, &s_auth, Duration::from_secs(10)));
    let got: PeerInfo = exchange_as_client(addr, &c_info, &auth, Duration::from_secs(10)).unwrap();
    assert_eq!(got, s_info);
    assert_eq!(t.join().unwrap().unwrap(), c_info);
}

#[test]
fn pingpong_exchange_on_loopback_sends_52_byte_messages() {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        server.exchange_pingpong(&ep(0x11), Mtu::Mtu2048, Duration::from_secs(10))
    });
    let got = exchange_pingpong_as_client(addr, &ep(0x22), Mtu::Mtu2048, Duration::from_secs(10))
        .unwrap();
    assert_eq!(got, ep(0x11));
    assert_eq!(t.join().unwrap().unwrap(), ep(0x22));
}

#[test]
fn pingpong_client_speaks_the_rc_pingpong_wire_bytes() {
    use std::io::{Read, Write};
    // A stand-in for ibv_rc_pingpong's server: read sizeof msg, answer, read "done".
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut msg = [0u8; 52];
        s.read_exact(&mut msg).unwrap();
        s.write_all(b"0000:000033:000044:00000000000000000000ffffc0000263\0")
            .unwrap();
        let mut done = [0u8; 5];
        s.read_exact(&mut done).unwrap();
        (msg, done)
    });
    let got = exchange_pingpong_as_client(addr, &ep(0x22), Mtu::Mtu1024, Duration::from_secs(10))
        .unwrap();
    assert_eq!((got.qpn, got.psn, got.mtu), (0x33, 0x44, Mtu::Mtu1024));
    assert_eq!(got.gid, Gid::from_ipv4([192, 0, 2, 99]));
    let (msg, done) = t.join().unwrap();
    assert_eq!(&msg[..51], ep(0x22).to_string().as_bytes());
    assert_eq!(msg[51], 0);
    assert_eq!(&done, b"done\0");
}

#[test]
fn exchange_times_out_with_an_explained_error_when_no_peer_comes() {
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let err = server
        .exchange(&ep(1), &ExchangeAuth::Plaintext, Duration::from_millis(50))
        .unwrap_err();
    assert!(matches!(err, ExchangeError::Timeout { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("waiting for the peer") && msg.contains("raise the timeout"),
        "{msg}"
    );
}

#[test]
fn exchange_reports_a_peer_speaking_another_protocol() {
    use std::io::Write;
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    // Plaintext: the line reaches the JSON decoder (a PSK server stops at its first byte).
    let t = std::thread::spawn(move || {
        server.exchange(&ep(1), &ExchangeAuth::Plaintext, Duration::from_secs(10))
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"hello there\n").unwrap();
    let err = t.join().unwrap().unwrap_err();
    assert!(matches!(err, ExchangeError::Decode { .. }), "{err:?}");
}
