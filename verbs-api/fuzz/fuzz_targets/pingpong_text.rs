//! Fuzz target `pingpong_text`: `QpEndpoint::parse_pingpong`, the `ibv_rc_pingpong` text form
//! `lid:qpn:psn:gid`, on the rest of the input after an MTU byte: the whole of it as text,
//! and its first `PINGPONG_MSG_LEN` bytes as the exchange reads a peer's message (UTF-8
//! checked first).
//!
//! Checks, beyond "no panic": an accepted endpoint passes `validate()`, has the MTU given,
//! and its `Display` form is `PINGPONG_TEXT_LEN` bytes of lower-case hex and colons that
//! parses back to the same endpoint.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run pingpong_text seeds/pingpong_text` in
//! `verbs-api/fuzz`.

#![no_main]

use bypass_verbs::exchange::PINGPONG_MSG_LEN;
use bypass_verbs::{Mtu, QpEndpoint};
use libfuzzer_sys::fuzz_target;

const MTUS: [Mtu; 5] = [
    Mtu::Mtu256,
    Mtu::Mtu512,
    Mtu::Mtu1024,
    Mtu::Mtu2048,
    Mtu::Mtu4096,
];

fn check(text: &str, mtu: Mtu) {
    let Ok(ep) = QpEndpoint::parse_pingpong(text, mtu) else {
        return;
    };
    ep.validate().expect("an accepted endpoint is valid");
    assert_eq!(ep.mtu, mtu);
    let shown = ep.to_string();
    assert_eq!(shown.len(), QpEndpoint::PINGPONG_TEXT_LEN, "{shown}");
    assert!(
        shown
            .bytes()
            .all(|b| b == b':' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{shown}"
    );
    let back = QpEndpoint::parse_pingpong(&shown, mtu).expect("its text parses");
    assert_eq!(back, ep);
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let mtu = MTUS[usize::from(m) % MTUS.len()];
    if let Ok(text) = std::str::from_utf8(rest) {
        check(text, mtu);
    }
    if let Some(msg) = rest.get(..PINGPONG_MSG_LEN)
        && let Ok(text) = std::str::from_utf8(msg)
    {
        check(text, mtu);
    }
});
