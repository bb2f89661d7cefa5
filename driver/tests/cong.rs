//! Congestion control through the driver on the stepped sim fabric: the defaults read back,
//! a change touches only what it names, status per node and priority, typed refusals, and
//! statistics with clear.

use bypass_driver::cong::{
    self, CongError, CongNode, CongStats, NpChanges, NpParams, RpChanges, RpParams,
};
use bypass_driver::hw::cmd::Opcode;
use bypass_driver::hw::syndrome::CmdStatus;
use bypass_driver::{DriverError, Hca};
use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;

fn open(profile: Profile) -> (SimFabric, Hca) {
    let fabric = SimFabric::stepped(1);
    let hca = Hca::open(fabric.add_device(profile).unwrap()).unwrap();
    (fabric, hca)
}

#[test]
fn defaults_read_back_as_docas() {
    let (_f, hca) = open(Profile::default());
    assert!(hca.caps().cc_query_allowed && hca.caps().cc_modify_allowed);
    let rp = cong::query_rp_params(&hca).unwrap();
    assert_eq!(rp, RpParams::default());
    // DOCA's published values, spelled out so a changed default fails here.
    assert_eq!(
        (
            rp.rpg_time_reset,
            rp.rpg_byte_reset,
            rp.rpg_ai_rate,
            rp.rpg_hai_rate
        ),
        (300, 32_767, 5, 50)
    );
    assert_eq!(
        (
            rp.rpg_gd,
            rp.rpg_min_dec_fac,
            rp.dce_tcp_g,
            rp.initial_alpha_value
        ),
        (11, 50, 1019, 1023)
    );
    assert!(rp.clamp_tgt_rate_after_time_inc && !rp.clamp_tgt_rate);
    assert_eq!(cong::query_np_params(&hca).unwrap(), NpParams::default());
    let s = cong::query_all_status(&hca).unwrap();
    assert_eq!(s.rp, [false; 8]);
    assert_eq!(s.np, [false; 8]);
}

#[test]
fn one_rp_and_one_np_change_leave_the_rest() {
    let (_f, hca) = open(Profile::default());
    cong::modify_rp_params(
        &hca,
        &RpChanges {
            rpg_ai_rate: Some(40),
            ..Default::default()
        },
    )
    .unwrap();
    cong::modify_np_params(
        &hca,
        &NpChanges {
            min_time_between_cnps: Some(4),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        cong::query_rp_params(&hca).unwrap(),
        RpParams {
            rpg_ai_rate: 40,
            ..RpParams::default()
        }
    );
    assert_eq!(
        cong::query_np_params(&hca).unwrap(),
        NpParams {
            min_time_between_cnps: 4,
            ..NpParams::default()
        }
    );
    // One of the two fields that share a select bit: the other keeps its value.
    cong::modify_np_params(
        &hca,
        &NpChanges {
            cnp_802p_prio: Some(3),
            ..Default::default()
        },
    )
    .unwrap();
    let np = cong::query_np_params(&hca).unwrap();
    assert_eq!((np.cnp_802p_prio, np.cnp_prio_mode), (3, 0));
}

#[test]
fn enabling_priority_3_shows_in_the_status() {
    let (_f, hca) = open(Profile::default());
    cong::modify_status(&hca, CongNode::Rp, 3, true).unwrap();
    cong::modify_status(&hca, CongNode::Np, 3, true).unwrap();
    assert!(cong::query_status(&hca, CongNode::Rp, 3).unwrap());
    assert!(cong::query_status(&hca, CongNode::Np, 3).unwrap());
    assert!(!cong::query_status(&hca, CongNode::Rp, 2).unwrap());
    let s = cong::query_all_status(&hca).unwrap();
    let mut want = [false; 8];
    want[3] = true;
    assert_eq!((s.rp, s.np), (want, want));
    cong::modify_status(&hca, CongNode::Np, 3, false).unwrap();
    assert!(!cong::query_status(&hca, CongNode::Np, 3).unwrap());
}

#[test]
fn refusals_are_typed() {
    let (_f, hca) = open(Profile::default());
    let e = cong::query_status(&hca, CongNode::Rp, 8).unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::Congestion {
                op: Opcode::QUERY_CONG_STATUS,
                cause: CongError::BadPriority { prio: 8 }
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("QUERY_CONG_STATUS") && msg.contains("0..=7"),
        "{msg}"
    );
    let e = cong::modify_rp_params(&hca, &RpChanges::default()).unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::Congestion {
                cause: CongError::NoChange,
                ..
            }
        ),
        "{e:?}"
    );
    let e = cong::modify_status(&hca, CongNode::General, 0, true).unwrap_err();
    assert!(matches!(
        e,
        DriverError::Congestion {
            cause: CongError::GeneralNode,
            ..
        }
    ));
    // Out of range: the firmware refuses it, with the sim's named syndrome, and nothing changes.
    let e = cong::modify_rp_params(
        &hca,
        &RpChanges {
            rpg_min_dec_fac: Some(101),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.cmd_status(), Some(CmdStatus::BAD_PARAM_ERR), "{e:?}");
    assert!(e.to_string().contains("CONG_PARAM_RANGE"), "{e}");
    assert_eq!(cong::query_rp_params(&hca).unwrap(), RpParams::default());
    let e = cong::modify_np_params(
        &hca,
        &NpChanges {
            cnp_dscp: Some(64),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(
        e,
        DriverError::Congestion {
            cause: CongError::TooWide { .. },
            ..
        }
    ));
}

#[test]
fn a_device_without_the_capability_is_refused_by_name() {
    let mut p = Profile::default();
    p.caps.cong_control = false;
    let (_f, hca) = open(p);
    assert!(!hca.caps().cc_query_allowed);
    let e = cong::query_statistics(&hca, false).unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::Congestion {
                cause: CongError::NotAllowed {
                    cap: "cc_query_allowed"
                },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("cmd_hca_cap.cc_query_allowed"));
    let e = cong::modify_status(&hca, CongNode::Rp, 0, true).unwrap_err();
    assert!(e.to_string().contains("cc_modify_allowed"), "{e}");
}

#[test]
fn statistics_start_at_zero_and_clear() {
    let (_f, hca) = open(Profile::default());
    assert_eq!(
        cong::query_statistics(&hca, true).unwrap(),
        CongStats::default()
    );
    assert_eq!(
        cong::query_statistics(&hca, false).unwrap(),
        CongStats::default()
    );
    let names: Vec<_> = CongStats::default().iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "rp_cnp_ignored",
            "rp_cnp_handled",
            "np_ecn_marked_roce_packets",
            "np_cnp_sent"
        ]
    );
}

#[test]
fn nonzero_counters_read_back_then_clear() {
    let (fabric, hca) = open(Profile::default());
    let set = CongStats {
        rp_cnp_ignored: 1,
        rp_cnp_handled: (2 << 32) | 3,
        np_ecn_marked_roce_packets: 40,
        np_cnp_sent: 5,
    };
    fabric.with_device(0, |d| d.cong_mut().stats = set).unwrap();
    assert_eq!(cong::query_statistics(&hca, false).unwrap(), set);
    assert_eq!(cong::query_statistics(&hca, true).unwrap(), set);
    assert_eq!(
        cong::query_statistics(&hca, false).unwrap(),
        CongStats::default()
    );
    assert_eq!(
        fabric.with_device(0, |d| d.cong().stats).unwrap(),
        CongStats::default()
    );
    // Status set through the driver is what the data path reads.
    cong::modify_status(&hca, CongNode::Rp, 5, true).unwrap();
    assert!(fabric.with_device(0, |d| d.cong().status.rp[5]).unwrap());
}
