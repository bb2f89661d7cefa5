//! Connecting through the TCP out-of-band exchange on loopback: each side sends its QP
//! endpoint and a remote buffer, connects to what it received, and the client WRITEs into
//! the buffer the server advertised.

#[path = "verbs_support.rs"]
mod support;

use std::time::Duration;

use bypass_verbs::exchange::{ExchangeAuth, ExchangeKey, exchange_as_client};
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{ExchangeServer, PeerInfo, QpBuilder};
use support::*;

#[test]
fn peers_connect_with_what_they_swapped_over_tcp_and_write() {
    let mut r = rig();
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let info_a = PeerInfo {
        qp: a.endpoint().unwrap(),
        buffers: vec![],
    };
    let info_b = PeerInfo {
        qp: b.endpoint().unwrap(),
        buffers: vec![r.b.mr.remote()],
    };
    let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let t = Duration::from_secs(5);
    // The authenticated exchange, as every bypass command runs it by default.
    let auth = ExchangeAuth::Psk(ExchangeKey::generate().unwrap());
    let client_auth = auth.clone();
    let client = std::thread::spawn(move || exchange_as_client(addr, &info_a, &client_auth, t));
    let got_a: PeerInfo = server.exchange(&info_b, &auth, t).unwrap();
    let got_b: PeerInfo = client.join().unwrap().unwrap();
    assert_eq!(got_b, info_b);

    b.connect(&got_a.qp).unwrap();
    a.connect(&got_b.qp).unwrap();
    let target = got_b.buffers[0].slice(10, 7).unwrap();
    a.post_send(SendWr::new(1, SendOp::Write(target)).sge(lease_with(&r.a.pool, b"via tcp")))
        .unwrap();
    let c = wait1(&mut r.a.cq, "write");
    assert!(c.is_ok(), "{c}");
    let mut buf = [0u8; 7];
    r.b.mr.read(10, &mut buf).unwrap();
    assert_eq!(&buf, b"via tcp");
}
