//! A peer's hello with a QPN or PSN over 24 bits, sent over the TCP exchange on loopback, is
//! refused where it is read: the server's `exchange` fails with a decode error naming the
//! field and its limit, instead of handing out an endpoint INIT2RTR would refuse later as an
//! internal error.
//!
//! Owns: this test. Must not: test the exchange protocol itself (`verbs_exchange.rs`).

use std::time::Duration;

use bypass_verbs::exchange::{ExchangeAuth, ExchangeError, ExchangeKey, exchange_as_client};

/// Both ends' key: the check is on what the peer's hello says once decrypted.
fn psk() -> ExchangeAuth {
    ExchangeAuth::Psk(ExchangeKey::from_bytes([0x5a; 32]))
}
use bypass_verbs::{ExchangeServer, Gid, Mtu, PeerInfo, QpEndpoint};

fn info() -> PeerInfo {
    PeerInfo {
        qp: QpEndpoint {
            qpn: 0x12,
            psn: 0x34,
            gid: Gid::from_ipv4([127, 0, 32, 6]),
            lid: 0,
            mtu: Mtu::Mtu1024,
        },
        buffers: vec![],
    }
}

/// [`info`]'s JSON with its QPN and PSN replaced, as a hostile peer could send it.
fn hello(qpn: u64, psn: u64) -> serde_json::Value {
    let mut v = serde_json::to_value(info()).expect("encode");
    v["qp"]["qpn"] = qpn.into();
    v["qp"]["psn"] = psn.into();
    v
}

#[test]
fn a_hello_with_a_qpn_or_psn_over_24_bits_is_refused_naming_the_field() {
    let t = Duration::from_secs(5);
    for (field, qpn, psn) in [("psn", 0x12, 0x0100_0000u64), ("qpn", 0x0100_0000, 0x34)] {
        let server = ExchangeServer::bind("127.0.32.5:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let ours = info();
        let client = std::thread::spawn(move || {
            exchange_as_client::<serde_json::Value>(addr, &hello(qpn, psn), &psk(), t)
        });
        match server.exchange::<PeerInfo>(&ours, &psk(), t) {
            Err(ExchangeError::Decode { source }) => {
                let m = source.to_string();
                assert!(
                    m.contains(&format!(
                        "endpoint field {field} = 0x1000000 is out of range"
                    )),
                    "{m}"
                );
            }
            other => panic!("{field}: expected a decode error, got {other:?}"),
        }
        // The client is not left hanging: it gets an answer or a closed connection.
        let _ = client.join().expect("client thread");
    }
}
