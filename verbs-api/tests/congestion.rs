//! `Context::congestion` on a stepped sim pair: read, change, status per node and priority,
//! counters, and a typed refusal.

use bypass_testbed::SimContext;
use bypass_verbs::congestion::{CongError, CongNode, CongStats, NpChanges, RpChanges, RpParams};
use bypass_verbs::driver::DriverError;
use bypass_verbs::{Context, VerbsError};

#[test]
fn the_handle_reads_and_changes_the_device() {
    let pair = Context::sim_pair(1).unwrap();
    let c = pair.a.congestion();
    assert_eq!(c.rp_params().unwrap(), RpParams::default());
    c.set_enabled(CongNode::Np, 3, true).unwrap();
    assert!(c.enabled(CongNode::Np, 3).unwrap());
    assert!(!c.enabled(CongNode::Rp, 3).unwrap());
    assert!(
        !pair.b.congestion().enabled(CongNode::Np, 3).unwrap(),
        "the other device"
    );
    c.set_rp_params(&RpChanges {
        rpg_hai_rate: Some(100),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.rp_params().unwrap().rpg_hai_rate, 100);
    assert_eq!(c.rp_params().unwrap().rpg_ai_rate, 5);
    c.set_np_params(&NpChanges {
        cnp_dscp: Some(24),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.np_params().unwrap().cnp_dscp, 24);
    assert!(c.status().unwrap().np[3]);
    assert_eq!(c.counters(true).unwrap(), CongStats::default());
    let e = c.enabled(CongNode::Rp, 9).unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::Driver(DriverError::Congestion {
                cause: CongError::BadPriority { prio: 9 },
                ..
            })
        ),
        "{e:?}"
    );
}
