//! A peer's hello is checked where it enters [`Side::connect`]: a target too small for the
//! messages, or slots whose offsets overflow, is a typed [`PerfError::PeerBufferTooSmall`] naming the
//! peer's buffer, never "too large for this machine" nor an overflow.
//!
//! Owns: these tests. Must not: run traffic (`engine_tests` does).

use bypass_testbed::{FabricOptions, SimContext, SimFabric};
use bypass_verbs::Context;

use super::Side;
use crate::perf::PerfError;
use crate::perf::bw::BwSpec;

#[test]
fn a_peer_target_smaller_than_the_messages_or_with_overflowing_slots_is_refused_by_name() {
    let fabric = SimFabric::threaded_with(31, FabricOptions::low_latency());
    let (ca, cb) = (
        Context::open_sim(&fabric, 1).expect("sim 1"),
        Context::open_sim(&fabric, 2).expect("sim 2"),
    );
    let spec = BwSpec {
        qps: 2,
        ..BwSpec::default()
    }
    .side(1024, false);
    let b = Side::new(&cb, spec).expect("side b");
    let good = b.info().expect("info");
    assert_eq!(good.slot, 1024);

    let mut small = good.clone();
    small.target.len = 1024 + 512; // room for QP 0's message, not QP 1's
    let mut a = Side::new(&ca, spec).expect("side a");
    match a.connect(&small, None) {
        Err(e @ PerfError::PeerBufferTooSmall { .. }) => {
            let m = e.to_string();
            assert!(m.contains("the peer's buffer holds 1536 bytes"), "{m}");
            assert!(
                m.contains("QP 1 writes 1024-byte messages at offset 1024"),
                "{m}"
            );
        }
        Err(e) => panic!("expected a mismatch naming the peer's buffer, got {e}"),
        Ok(()) => panic!("a target too small for QP 1 was accepted"),
    }

    // Three QPs at slots of 2^63 bytes: QP 2's offset does not fit 64 bits.
    let spec3 = BwSpec {
        qps: 3,
        ..BwSpec::default()
    }
    .side(1024, false);
    let mut overflow = Side::new(&cb, spec3).expect("side b").info().expect("info");
    overflow.slot = 1 << 63;
    overflow.target.len = u64::MAX;
    let mut a = Side::new(&ca, spec3).expect("side a");
    match a.connect(&overflow, None) {
        Err(PerfError::PeerBufferTooSmall { qp: 2, offset, .. }) => assert_eq!(offset, u64::MAX),
        Err(e) => panic!("expected a mismatch, got {e}"),
        Ok(()) => panic!("slots that overflow were accepted"),
    }
}
