//! The perf engine through its library entry points ([`measure_bw`], [`measure_lat`]): every
//! verb, several QPs, both directions, events and the data checks, on small runs, and a
//! side's check of what its peer advertised ([`super::flows::Side::connect`]). The
//! tests check counts and data, never speed.

use std::time::Duration;

use super::bw::{BwSpec, measure_bw};
use super::lat::{LatSpec, measure_lat};
use super::ops::{AtomicOp, Conn, Verb};

const VERBS: [Verb; 5] = [
    Verb::Send,
    Verb::Write,
    Verb::Read,
    Verb::Atomic(AtomicOp::FetchAndAdd),
    Verb::Atomic(AtomicOp::CmpAndSwap),
];

#[test]
fn every_verb_streams_over_four_qps_and_its_data_checks() {
    for verb in VERBS {
        let r = measure_bw(&BwSpec {
            verb,
            size: 1024,
            iters: 200,
            qps: 4,
            tx_depth: 16,
            cq_mod: 4,
            check: true,
            ..BwSpec::default()
        })
        .unwrap_or_else(|e| panic!("{verb:?}: {e}"));
        let size = verb.size(1024);
        assert_eq!(r.messages, 200, "{verb:?}");
        assert_eq!(r.bytes, 200 * size, "{verb:?}");
        assert_eq!(r.report.iterations, 200, "{verb:?}");
        assert!(r.gbps > 0.0 && r.mpps > 0.0, "{verb:?}: {r:?}");
        let qp_blocks = r.counters.iter().filter(|(l, _)| l.contains("QP")).count();
        assert_eq!(qp_blocks, 8, "{verb:?}: four QPs a side");
    }
}

#[test]
fn bidirectional_events_and_duration_runs_complete() {
    let r = measure_bw(&BwSpec {
        verb: Verb::Send,
        size: 512,
        iters: 100,
        bidirectional: true,
        events: true,
        check: true,
        ..BwSpec::default()
    })
    .unwrap();
    assert_eq!(r.messages, 200, "both directions");
    let r = measure_bw(&BwSpec {
        size: 256,
        duration: Some(Duration::from_millis(200)),
        qps: 2,
        ..BwSpec::default()
    })
    .unwrap();
    assert!(r.messages >= 2, "{r:?}");
    assert_eq!(r.report.iterations, r.messages);
}

#[test]
fn unreliable_transports_carry_sends() {
    for conn in [Conn::Uc, Conn::Ud] {
        let r = measure_bw(&BwSpec {
            verb: Verb::Send,
            conn,
            size: 1024,
            iters: 100,
            check: true,
            ..BwSpec::default()
        })
        .unwrap_or_else(|e| panic!("{conn:?}: {e}"));
        assert_eq!(r.messages, 100);
    }
}

#[test]
fn every_verb_ping_pongs_and_checks() {
    for verb in VERBS {
        for events in [false, true] {
            let r = measure_lat(&LatSpec {
                verb,
                size: 300,
                iters: 50,
                events,
                check: true,
                ..LatSpec::default()
            })
            .unwrap_or_else(|e| panic!("{verb:?} events {events}: {e}"));
            let rep = r.report.expect("an iteration run has a table row");
            assert_eq!(rep.iterations, 50);
            assert!(rep.t_min > 0.0 && rep.t_min <= rep.t_max, "{rep:?}");
        }
    }
}

#[test]
fn bad_combinations_are_refused_with_the_fix() {
    let e = measure_bw(&BwSpec {
        verb: Verb::Read,
        conn: Conn::Uc,
        ..BwSpec::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("use -c RC"), "{e}");
    let e = measure_lat(&LatSpec {
        verb: Verb::Send,
        conn: Conn::Ud,
        size: 8192,
        ..LatSpec::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("path MTU"), "{e}");
}

#[test]
fn the_landed_data_check_fails_on_a_wrong_write_or_count() {
    use super::bw::check_target;
    use super::local::LocalPair;
    use super::ops::fill;
    let spec = BwSpec {
        size: 256,
        iters: 10,
        ..BwSpec::default()
    };
    let pair = LocalPair::new(1, spec.side(256, false), None).unwrap();
    let mut buf = vec![0u8; 256];
    fill(&mut buf, 4);
    pair.b.target.write(0, &buf).unwrap();
    // The slot holds WRITE 4 (the fifth): right for 5 WRITEs, wrong for 6.
    check_target(Verb::Write, 256, &[5], None, &pair.b).unwrap();
    let e = check_target(Verb::Write, 256, &[6], None, &pair.b).unwrap_err();
    assert!(e.to_string().contains("data check failed"), "{e}");
    // A bad byte seen on the way fails the check whatever landed.
    assert!(check_target(Verb::Send, 256, &[5], Some((3, 1, 2)), &pair.b).is_err());
    pair.b.target.write_u64_be(0, 7).unwrap();
    check_target(Verb::Atomic(AtomicOp::FetchAndAdd), 8, &[7], None, &pair.b).unwrap();
    let e = check_target(Verb::Atomic(AtomicOp::CmpAndSwap), 8, &[8], None, &pair.b).unwrap_err();
    assert!(e.to_string().contains("holds 7, 8 operations"), "{e}");
}

#[test]
fn a_peer_buffer_smaller_than_the_messages_is_named_as_the_peers() {
    use super::flows::Side;
    use bypass_testbed::{FabricOptions, SimContext, SimFabric};
    use bypass_verbs::Context;
    let spec = BwSpec {
        size: 4096,
        qps: 2,
        ..BwSpec::default()
    };
    let fabric = SimFabric::threaded_with(3, FabricOptions::low_latency());
    let (ca, cb) = (
        Context::open_sim(&fabric, 1).unwrap(),
        Context::open_sim(&fabric, 2).unwrap(),
    );
    let mut a = Side::new(&ca, spec.side(4096, false)).unwrap();
    let b = Side::new(&cb, spec.side(4096, false)).unwrap();
    // The peer says its buffer holds 2 bytes (what a peer run with -s 2 registers less).
    let mut info = b.info().unwrap();
    info.target.len = 2;
    let e = a.connect(&info, None).unwrap_err();
    assert!(
        matches!(
            e,
            super::PerfError::PeerBufferTooSmall {
                qp: 0,
                size: 4096,
                offset: 0,
                have: 2
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("different -s or -q"), "{e}");
    // A slot so large that QP 1's offset overflows is refused the same way, not a panic.
    let mut info = b.info().unwrap();
    info.slot = u64::MAX;
    let mut a = Side::new(&ca, spec.side(4096, false)).unwrap();
    let e = a.connect(&info, None).unwrap_err();
    assert!(
        matches!(e, super::PerfError::PeerBufferTooSmall { qp: 1, .. }),
        "{e}"
    );
}
