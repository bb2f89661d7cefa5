//! Tests of the congestion command handlers, called directly with inputs built through the
//! `bypass_hw` layouts on a capability page and a fresh [`Cong`].

use bypass_hw::cmd::caps::{CAPABILITY_LEN, CmdHcaCap};
use bypass_hw::cmd::cong::*;
use bypass_hw::cmd::cong_params::{NpChanges, NpParams, RpChanges, RpParams};
use bypass_hw::syndrome::CmdStatus;

use super::*;

fn caps(query: bool, modify: bool) -> Vec<u8> {
    let mut page = vec![0u8; CAPABILITY_LEN];
    let mut c = CmdHcaCap::wrap_unchecked(&mut page[..]);
    c.set_cc_query_allowed(query.into()).unwrap();
    c.set_cc_modify_allowed(modify.into()).unwrap();
    page
}

fn status_in(node: u32, prio: u32, enable: Option<bool>) -> Vec<u8> {
    let mut b = vec![0u8; 0x10];
    match enable {
        Some(e) => {
            let mut i = ModifyCongStatusIn::new_checked(&mut b[..]).unwrap();
            i.set_cong_protocol(node).unwrap();
            i.set_priority(prio).unwrap();
            i.set_enable(e.into()).unwrap();
        }
        None => {
            let mut i = QueryCongStatusIn::new_checked(&mut b[..]).unwrap();
            i.set_cong_protocol(node).unwrap();
            i.set_priority(prio).unwrap();
        }
    }
    b
}

fn query_status(cap: &[u8], cong: &mut Cong, node: u32, prio: u32) -> Result<bool, CmdError> {
    let mut out = vec![0u8; QueryCongStatusOut::<()>::LEN];
    query_cong_status(cap, cong, &status_in(node, prio, None), &mut out)?;
    Ok(QueryCongStatusOut::new_checked(&out[..]).unwrap().enable() != 0)
}

fn modify_rp(cap: &[u8], cong: &mut Cong, c: &RpChanges, extra_bits: u32) -> CmdResult {
    let mut b = vec![0u8; ModifyCongParamsIn::<()>::LEN];
    let mut i = ModifyCongParamsIn::new_checked(&mut b[..]).unwrap();
    i.set_cong_protocol(cong_protocol::RP).unwrap();
    i.field_select_mut()
        .field_select_r_roce_rp_mut()
        .set_field_select_r_roce_rp(c.field_select() | extra_bits)
        .unwrap();
    // Unselected fields carry garbage: the firmware must not take them.
    RpChanges::all(&RpParams {
        rpg_hai_rate: 999,
        ..RpParams::default()
    })
    .encode(
        &mut i
            .congestion_parameters_mut()
            .cong_control_r_roce_ecn_rp_mut(),
    )
    .unwrap();
    c.encode(
        &mut i
            .congestion_parameters_mut()
            .cong_control_r_roce_ecn_rp_mut(),
    )
    .unwrap();
    modify_cong_params(cap, cong, &b)
}

fn modify_np(cap: &[u8], cong: &mut Cong, c: &NpChanges) -> CmdResult {
    let mut b = vec![0u8; ModifyCongParamsIn::<()>::LEN];
    let mut i = ModifyCongParamsIn::new_checked(&mut b[..]).unwrap();
    i.set_cong_protocol(cong_protocol::NP).unwrap();
    i.field_select_mut()
        .field_select_r_roce_np_mut()
        .set_field_select_r_roce_np(c.field_select())
        .unwrap();
    NpChanges::all(&cong.np)
        .encode(
            &mut i
                .congestion_parameters_mut()
                .cong_control_r_roce_ecn_np_mut(),
        )
        .unwrap();
    c.encode(
        &mut i
            .congestion_parameters_mut()
            .cong_control_r_roce_ecn_np_mut(),
    )
    .unwrap();
    modify_cong_params(cap, cong, &b)
}

fn query_params(cap: &[u8], cong: &Cong, node: u32) -> Result<Vec<u8>, CmdError> {
    let mut b = vec![0u8; QueryCongParamsIn::<()>::LEN];
    QueryCongParamsIn::new_checked(&mut b[..])
        .unwrap()
        .set_cong_protocol(node)
        .unwrap();
    let mut out = vec![0u8; QueryCongParamsOut::<()>::LEN];
    query_cong_params(cap, cong, &b, &mut out)?;
    Ok(out)
}

#[test]
fn status_per_node_and_priority() {
    let cap = caps(true, true);
    let mut cong = Cong::default();
    assert_eq!(
        query_status(&cap, &mut cong, cong_protocol::RP, 3),
        Ok(false)
    );
    modify_cong_status(
        &cap,
        &mut cong,
        &status_in(cong_protocol::NP, 3, Some(true)),
    )
    .unwrap();
    assert!(cong.status.np[3]);
    assert_eq!(
        query_status(&cap, &mut cong, cong_protocol::NP, 3),
        Ok(true)
    );
    assert_eq!(
        query_status(&cap, &mut cong, cong_protocol::RP, 3),
        Ok(false)
    );
    assert_eq!(
        query_status(&cap, &mut cong, cong_protocol::NP, 2),
        Ok(false)
    );
    modify_cong_status(
        &cap,
        &mut cong,
        &status_in(cong_protocol::NP, 3, Some(false)),
    )
    .unwrap();
    assert!(!cong.status.np[3]);
}

#[test]
fn bad_node_priority_tag_and_op_mod_are_refused() {
    let cap = caps(true, true);
    let mut cong = Cong::default();
    let e = query_status(&cap, &mut cong, cong_protocol::RP, 8).unwrap_err();
    assert_eq!(e, CmdError::param(s::CONG_BAD_PRIORITY));
    let e = query_status(&cap, &mut cong, 0, 0).unwrap_err();
    assert_eq!(e, CmdError::param(s::CONG_BAD_NODE));
    let e = query_params(&cap, &cong, cong_protocol::GENERAL).unwrap_err();
    assert_eq!(e, CmdError::param(s::CONG_BAD_NODE));
    let mut b = status_in(cong_protocol::RP, 1, Some(true));
    ModifyCongStatusIn::new_checked(&mut b[..])
        .unwrap()
        .set_tag_enable(1)
        .unwrap();
    let e = modify_cong_status(&cap, &mut cong, &b).unwrap_err();
    assert_eq!(e, CmdError::param(s::CONG_TAG_UNSUPPORTED));
    assert!(!cong.status.rp[1], "a refused modify changes nothing");
    let mut b = status_in(cong_protocol::RP, 1, None);
    QueryCongStatusIn::new_checked(&mut b[..])
        .unwrap()
        .set_op_mod(1)
        .unwrap();
    let e = query_cong_status(&cap, &mut cong, &b, &mut [0u8; 16]).unwrap_err();
    assert_eq!(e, CmdError::param(s::BAD_OP_MOD));
}

#[test]
fn capability_bits_gate_the_commands() {
    let mut cong = Cong::default();
    let none = caps(false, false);
    let e = query_status(&none, &mut cong, cong_protocol::RP, 0).unwrap_err();
    assert_eq!(e.status, CmdStatus::BAD_OP_ERR);
    assert_eq!(e.syndrome, s::CONG_NOT_ALLOWED);
    let read_only = caps(true, false);
    assert_eq!(
        query_status(&read_only, &mut cong, cong_protocol::RP, 0),
        Ok(false)
    );
    let e = modify_cong_status(&read_only, &mut cong, &status_in(1, 0, Some(true))).unwrap_err();
    assert_eq!(e.syndrome, s::CONG_NOT_ALLOWED);
    assert!(!cong.status.rp[0]);
}

#[test]
fn modify_params_changes_only_selected_fields() {
    let cap = caps(true, true);
    let mut cong = Cong::default();
    let c = RpChanges {
        rpg_ai_rate: Some(20),
        clamp_tgt_rate: Some(true),
        ..Default::default()
    };
    modify_rp(&cap, &mut cong, &c, 0).unwrap();
    let want = RpParams {
        rpg_ai_rate: 20,
        clamp_tgt_rate: true,
        ..RpParams::default()
    };
    assert_eq!(cong.rp, want, "rpg_hai_rate 999 was not selected");
    let out = query_params(&cap, &cong, cong_protocol::RP).unwrap();
    let o = QueryCongParamsOut::new_checked(&out[..]).unwrap();
    let got = RpParams::decode(&o.congestion_parameters().cong_control_r_roce_ecn_rp());
    assert_eq!(got, want);
    assert_eq!(cong.np, NpParams::default());

    modify_np(
        &cap,
        &mut cong,
        &NpChanges {
            cnp_dscp: Some(26),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(cong.np.cnp_dscp, 26);
    assert_eq!(cong.np.min_time_between_cnps, 50);
    let out = query_params(&cap, &cong, cong_protocol::NP).unwrap();
    let o = QueryCongParamsOut::new_checked(&out[..]).unwrap();
    assert_eq!(
        NpParams::decode(&o.congestion_parameters().cong_control_r_roce_ecn_np()),
        cong.np
    );
}

#[test]
fn out_of_range_and_unknown_fields_are_refused_whole() {
    let cap = caps(true, true);
    let mut cong = Cong::default();
    for bad in [
        RpChanges {
            rpg_min_dec_fac: Some(101),
            rpg_ai_rate: Some(9),
            ..Default::default()
        },
        RpChanges {
            dce_tcp_g: Some(1025),
            ..Default::default()
        },
        RpChanges {
            rpg_gd: Some(16),
            ..Default::default()
        },
    ] {
        let e = modify_rp(&cap, &mut cong, &bad, 0).unwrap_err();
        assert_eq!(e, CmdError::param(s::CONG_PARAM_RANGE), "{bad:?}");
    }
    assert_eq!(cong.rp, RpParams::default(), "nothing applied");
    let e = modify_rp(&cap, &mut cong, &RpChanges::default(), 1 << 20).unwrap_err();
    assert_eq!(e, CmdError::param(s::CONG_BAD_FIELD_SELECT));
    assert!(!check_np(&NpParams {
        cnp_dscp: 64,
        ..NpParams::default()
    }));
    assert!(!check_np(&NpParams {
        cnp_802p_prio: 8,
        ..NpParams::default()
    }));
    assert!(check_np(&NpParams::default()) && check_rp(&RpParams::default()));
}

#[test]
fn statistics_read_then_clear() {
    let cap = caps(true, true);
    let mut cong = Cong::default();
    cong.stats.rp_cnp_handled = (3 << 32) | 5;
    cong.stats.np_cnp_sent = 7;
    cong.stats.np_ecn_marked_roce_packets = 9;
    cong.stats.rp_cnp_ignored = 1;
    let read = |cong: &mut Cong, clear: bool| {
        let mut b = vec![0u8; 0x10];
        QueryCongStatisticsIn::new_checked(&mut b[..])
            .unwrap()
            .set_clear(clear.into())
            .unwrap();
        let mut out = vec![0u8; QueryCongStatisticsOut::<()>::LEN];
        query_cong_statistics(&cap, cong, 0x1_0000_0002, &b, &mut out).unwrap();
        let o = QueryCongStatisticsOut::new_checked(&out[..]).unwrap();
        assert_eq!((o.time_stamp_high(), o.time_stamp_low()), (1, 2));
        o.counters()
    };
    assert_eq!(read(&mut cong, false), (1, (3 << 32) | 5, 9, 7));
    assert_eq!(read(&mut cong, true), (1, (3 << 32) | 5, 9, 7));
    assert_eq!(read(&mut cong, false), (0, 0, 0, 0));
}
