//! Fuzz target `exchange_json`: the JSON-lines exchange's decode of a peer's line, as
//! `ExchangeServer::exchange` and `exchange_as_client` run it (the line through its first
//! newline, at most `MAX_LINE` bytes, decoded with `serde_json`), for the values peers swap:
//! a `PeerInfo` (endpoint and buffers) and a bare `QpEndpoint`.
//!
//! Checks, beyond "no panic": every endpoint that decodes passes `validate()` (a peer cannot
//! hand over a QPN or PSN the device would refuse); a decoded value encodes and decodes back
//! to itself; its endpoint's pingpong text (`Display`) is `PINGPONG_TEXT_LEN` bytes and
//! parses back (`parse_pingpong`, with the endpoint's MTU) to the same endpoint.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run exchange_json seeds/exchange_json` in
//! `verbs-api/fuzz`.

#![no_main]

use bypass_verbs::QpEndpoint;
use bypass_verbs::exchange::{MAX_LINE, PeerInfo};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn check_endpoint(ep: &QpEndpoint) {
    ep.validate().expect("a decoded endpoint is valid");
    let text = ep.to_string();
    assert_eq!(text.len(), QpEndpoint::PINGPONG_TEXT_LEN, "{text}");
    let back = QpEndpoint::parse_pingpong(&text, ep.mtu).expect("its pingpong text parses");
    assert_eq!(&back, ep);
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(v: &T) {
    let line = serde_json::to_vec(v).expect("a decoded value encodes");
    let back: T = serde_json::from_slice(&line).expect("its encoding decodes");
    assert_eq!(&back, v);
}

fuzz_target!(|data: &[u8]| {
    let line = match data.iter().position(|&b| b == b'\n') {
        Some(i) => &data[..=i],
        None => data,
    };
    if line.len() > MAX_LINE {
        return;
    }
    if let Ok(info) = serde_json::from_slice::<PeerInfo>(line) {
        check_endpoint(&info.qp);
        round_trip(&info);
    }
    if let Ok(ep) = serde_json::from_slice::<QpEndpoint>(line) {
        check_endpoint(&ep);
        round_trip(&ep);
    }
});
