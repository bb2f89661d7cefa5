//! Congestion control as the firmware exposes it: QUERY/MODIFY_CONG_STATUS,
//! QUERY/MODIFY_CONG_PARAMS and QUERY_CONG_STATISTICS over the device's [`Cong`].
//!
//! Owns: the commands' checks and their effect on `Hca::cong` (status per node and priority,
//! the RP and NP parameters, the counters). Must not: run the RP or NP (the transport's data
//! path reads `Cong` for that) or change anything but `Cong`.
//!
//! Checks, in order: the capability bit (`cc_query_allowed` for the queries,
//! `cc_modify_allowed` for the modifies; BAD_OP with `CONG_NOT_ALLOWED`); `op_mod` 0; the node
//! (`cong_protocol` RP or NP: the sim models no general parameters; BAD_PARAM
//! `CONG_BAD_NODE`); the priority (0..=7, `CONG_BAD_PRIORITY`); `tag_enable` (802.1Qau only,
//! `CONG_TAG_UNSUPPORTED`); for MODIFY_CONG_PARAMS a field select with only the node's known
//! bits (`CONG_BAD_FIELD_SELECT`) and the new values in range (`CONG_PARAM_RANGE`), applied
//! only when all pass, and only to the selected fields.
//!
//! Sources: kernel `drivers/infiniband/hw/mlx5/cong.c` (which bits select which parameter),
//! `mlx5_ifc.h` (layouts), NVIDIA DOCA "DCQCN CC parameters" (the parameters' ranges).

use bypass_hw::cmd::MboxIn;
use bypass_hw::cmd::caps::CmdHcaCap;
use bypass_hw::cmd::cong::{
    ModifyCongParamsIn, ModifyCongStatusIn, QueryCongParamsIn, QueryCongParamsOut,
    QueryCongStatisticsIn, QueryCongStatisticsOut, QueryCongStatusIn, QueryCongStatusOut,
};
use bypass_hw::cmd::cong_params::{NpChanges, NpParams, RpChanges, RpParams};
use bypass_hw::syndrome::CmdStatus;

use super::syndromes as s;
use super::{CmdError, CmdResult};
use crate::cong::{Cong, CongNode, PRIOS};

/// The checks every congestion command starts with: the capability bit in the page in force
/// (`cap_cur`: a query needs `cc_query_allowed`, a modify `cc_modify_allowed`), then `op_mod` 0.
fn gate(cap_cur: &[u8], input: &[u8], modify: bool) -> CmdResult {
    let cap = CmdHcaCap::wrap_unchecked(cap_cur);
    let ok = if modify {
        cap.cc_modify_allowed()
    } else {
        cap.cc_query_allowed()
    };
    if ok == 0 {
        return Err(CmdError::new(CmdStatus::BAD_OP_ERR, s::CONG_NOT_ALLOWED));
    }
    if MboxIn::wrap_unchecked(input).op_mod() != 0 {
        return Err(CmdError::param(s::BAD_OP_MOD));
    }
    Ok(())
}

/// The RP or NP `cong_protocol` names.
fn node(code: u32) -> Result<CongNode, CmdError> {
    match u8::try_from(code).ok().and_then(CongNode::from_code) {
        Some(n @ (CongNode::Rp | CongNode::Np)) => Ok(n),
        _ => Err(CmdError::param(s::CONG_BAD_NODE)),
    }
}

/// The priority as an index, if it is 0..=7.
fn prio(p: u32) -> Result<usize, CmdError> {
    usize::try_from(p)
        .ok()
        .filter(|&p| p < PRIOS)
        .ok_or(CmdError::param(s::CONG_BAD_PRIORITY))
}

/// The status slot of `node` for priority `p`.
fn slot(cong: &mut Cong, n: CongNode, p: usize) -> Option<&mut bool> {
    match n {
        CongNode::Rp => cong.status.rp.get_mut(p),
        CongNode::Np => cong.status.np.get_mut(p),
        CongNode::General => None,
    }
}

/// QUERY_CONG_STATUS.
pub(crate) fn query_cong_status(
    cap_cur: &[u8],
    cong: &mut Cong,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    gate(cap_cur, input, false)?;
    let i = QueryCongStatusIn::wrap_unchecked(input);
    let n = node(i.cong_protocol())?;
    let p = prio(i.priority())?;
    let on = slot(cong, n, p).is_some_and(|b| *b);
    let _ = QueryCongStatusOut::wrap_unchecked(out).set_enable(on.into());
    Ok(())
}

/// MODIFY_CONG_STATUS.
pub(crate) fn modify_cong_status(cap_cur: &[u8], cong: &mut Cong, input: &[u8]) -> CmdResult {
    gate(cap_cur, input, true)?;
    let i = ModifyCongStatusIn::wrap_unchecked(input);
    let n = node(i.cong_protocol())?;
    let p = prio(i.priority())?;
    if i.tag_enable() != 0 {
        return Err(CmdError::param(s::CONG_TAG_UNSUPPORTED));
    }
    if let Some(b) = slot(cong, n, p) {
        *b = i.enable() != 0;
    }
    Ok(())
}

/// QUERY_CONG_PARAMS.
pub(crate) fn query_cong_params(
    cap_cur: &[u8],
    cong: &Cong,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    gate(cap_cur, input, false)?;
    let n = node(QueryCongParamsIn::wrap_unchecked(input).cong_protocol())?;
    let mut o = QueryCongParamsOut::wrap_unchecked(out);
    let mut c = o.congestion_parameters_mut();
    // The stored parameters passed `check_rp` / `check_np`, so each fits its field.
    let r = match n {
        CongNode::Rp => cong.rp.encode(&mut c.cong_control_r_roce_ecn_rp_mut()),
        _ => cong.np.encode(&mut c.cong_control_r_roce_ecn_np_mut()),
    };
    r.map_err(|_| CmdError::new(CmdStatus::INT_ERR, s::CONG_PARAM_RANGE))
}

/// The RP's parameters within the ranges DOCA documents for them.
pub(crate) fn check_rp(p: &RpParams) -> bool {
    (1..=100).contains(&p.rpg_min_dec_fac)
        && p.dce_tcp_g <= 1024
        && p.initial_alpha_value <= 1024
        && p.rpg_gd <= 15
        && (1..=31).contains(&p.rpg_threshold)
        && (p.rpg_max_rate == 0 || p.rpg_min_rate <= p.rpg_max_rate)
}

/// The NP's parameters within their fields' ranges (DSCP 0..=63, priority 0..=7, mode 0..=1).
pub(crate) fn check_np(p: &NpParams) -> bool {
    p.cnp_dscp <= 63 && p.cnp_802p_prio <= 7 && p.cnp_prio_mode <= 1
}

/// MODIFY_CONG_PARAMS: only the selected fields change, and nothing does unless all the new
/// values are in range.
pub(crate) fn modify_cong_params(cap_cur: &[u8], cong: &mut Cong, input: &[u8]) -> CmdResult {
    gate(cap_cur, input, true)?;
    let i = ModifyCongParamsIn::wrap_unchecked(input);
    let n = node(i.cong_protocol())?;
    let fs = i.field_select();
    let c = i.congestion_parameters();
    match n {
        CongNode::Rp => {
            let sel = fs.field_select_r_roce_rp().field_select_r_roce_rp();
            let known = RpChanges::all(&cong.rp).field_select();
            if sel & !known != 0 {
                return Err(CmdError::param(s::CONG_BAD_FIELD_SELECT));
            }
            let new = RpChanges::decode(sel, &c.cong_control_r_roce_ecn_rp()).apply(&cong.rp);
            if !check_rp(&new) {
                return Err(CmdError::param(s::CONG_PARAM_RANGE));
            }
            cong.rp = new;
        }
        _ => {
            let sel = fs.field_select_r_roce_np().field_select_r_roce_np();
            let known = NpChanges::all(&cong.np).field_select();
            if sel & !known != 0 {
                return Err(CmdError::param(s::CONG_BAD_FIELD_SELECT));
            }
            let new = NpChanges::decode(sel, &c.cong_control_r_roce_ecn_np()).apply(&cong.np);
            if !check_np(&new) {
                return Err(CmdError::param(s::CONG_PARAM_RANGE));
            }
            cong.np = new;
        }
    }
    Ok(())
}

/// QUERY_CONG_STATISTICS: the counters, zeroed afterwards when `clear` is set. `now_ns` is the
/// device time stamped into the answer.
pub(crate) fn query_cong_statistics(
    cap_cur: &[u8],
    cong: &mut Cong,
    now_ns: u64,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    gate(cap_cur, input, false)?;
    let st = cong.stats;
    let mut o = QueryCongStatisticsOut::wrap_unchecked(out);
    let hi = |v: u64| (v >> 32) as u32;
    let lo = |v: u64| v as u32;
    // Every value is a 32-bit half into a 32-bit field of a buffer sized to the layout.
    let _ = o.set_rp_cnp_ignored_high(hi(st.rp_cnp_ignored));
    let _ = o.set_rp_cnp_ignored_low(lo(st.rp_cnp_ignored));
    let _ = o.set_rp_cnp_handled_high(hi(st.rp_cnp_handled));
    let _ = o.set_rp_cnp_handled_low(lo(st.rp_cnp_handled));
    let _ = o.set_np_ecn_marked_roce_packets_high(hi(st.np_ecn_marked_roce_packets));
    let _ = o.set_np_ecn_marked_roce_packets_low(lo(st.np_ecn_marked_roce_packets));
    let _ = o.set_np_cnp_sent_high(hi(st.np_cnp_sent));
    let _ = o.set_np_cnp_sent_low(lo(st.np_cnp_sent));
    let _ = o.set_time_stamp_high(hi(now_ns));
    let _ = o.set_time_stamp_low(lo(now_ns));
    if QueryCongStatisticsIn::wrap_unchecked(input).clear() != 0 {
        cong.stats = Default::default();
    }
    Ok(())
}

#[cfg(test)]
mod tests;
