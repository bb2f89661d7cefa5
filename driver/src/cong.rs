//! Congestion control (RoCE ECN / DCQCN) through the firmware: whether the reaction point (RP)
//! and notification point (NP) are on per priority, their parameters, and their counters.
//!
//! Follows the kernel's `drivers/infiniband/hw/mlx5/cong.c` (`mlx5_ib_get_cc_params`:
//! QUERY_CONG_PARAMS per node; `mlx5_ib_set_cc_params`: MODIFY_CONG_PARAMS with one
//! field-select bit per changed parameter; `mlx5_ib_query_cong_counters`:
//! QUERY_CONG_STATISTICS, `clear` on reset) and MLNX_OFED's `ecn/roce_{rp,np}/enable/<prio>`
//! sysfs files (MODIFY_CONG_STATUS per node and priority). The parameter types are the ones the
//! sim keeps (`bypass_hw::cmd::cong_params`): one definition on both sides of the command.
//!
//! Before sending, each call checks what the driver can know: the capability bit
//! (`cc_query_allowed` / `cc_modify_allowed`), a priority of 0..=7, a real node, a non-empty
//! change. What only the firmware judges (ranges) comes back as
//! [`DriverError::CmdFailed`](crate::DriverError::CmdFailed) with its syndrome.
//!
//! Owns: the command building and parsing, [`CongError`]. Must not: keep congestion state (the
//! device does) or touch the data path.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::cong::{
    ModifyCongParamsIn, ModifyCongParamsOut, ModifyCongStatusIn, ModifyCongStatusOut,
    QueryCongParamsIn, QueryCongParamsOut, QueryCongStatisticsIn, QueryCongStatisticsOut,
    QueryCongStatusIn, QueryCongStatusOut,
};
pub use bypass_hw::cmd::cong_params::{
    CongNode, CongStats, CongStatus, NpChanges, NpParams, PRIOS, RpChanges, RpParams,
};

use crate::cmdq::input;
use crate::error::{DriverError, Result};
use crate::hca::Hca;

/// Why the driver refused a congestion call without sending it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CongError {
    /// The device's capability page does not allow the command.
    #[error(
        "the device does not allow it (cmd_hca_cap.{cap} is 0): congestion control is locked by the firmware or its configuration (mlxconfig); use a device or firmware that allows it"
    )]
    NotAllowed {
        /// The capability bit that is 0.
        cap: &'static str,
    },
    /// A priority outside 0..=7.
    #[error("priority {prio} is not an 802.1p priority: use 0..=7")]
    BadPriority {
        /// The priority given.
        prio: u8,
    },
    /// The general node has no status or RoCE ECN parameters.
    #[error("the general node has no status or ECN parameters: name roce_rp or roce_np")]
    GeneralNode,
    /// A change that selects no field.
    #[error("the change sets no parameter: set at least one field to Some")]
    NoChange,
    /// A value wider than its field in the command.
    #[error("a value does not fit its field in the command ({source}): stay within the PRM width")]
    TooWide {
        /// The layout error.
        source: bypass_hw::Error,
    },
}

fn refuse(op: Opcode, cause: CongError) -> DriverError {
    DriverError::Congestion { op, cause }
}

fn layout(op: Opcode) -> impl Fn(bypass_hw::Error) -> DriverError {
    move |source| DriverError::BuildInput {
        what: op.name().unwrap_or("a congestion command"),
        source,
    }
}

fn bad_output(op: Opcode) -> impl Fn(bypass_hw::Error) -> DriverError {
    move |source| DriverError::BadOutput { op, source }
}

fn gate(hca: &Hca, op: Opcode, modify: bool) -> Result<()> {
    let c = hca.caps();
    let (ok, cap) = if modify {
        (c.cc_modify_allowed, "cc_modify_allowed")
    } else {
        (c.cc_query_allowed, "cc_query_allowed")
    };
    if ok {
        Ok(())
    } else {
        Err(refuse(op, CongError::NotAllowed { cap }))
    }
}

fn ecn_node(op: Opcode, node: CongNode) -> Result<u32> {
    match node {
        CongNode::General => Err(refuse(op, CongError::GeneralNode)),
        n => Ok(u32::from(n.code())),
    }
}

fn check_prio(op: Opcode, prio: u8) -> Result<u32> {
    if usize::from(prio) < PRIOS {
        Ok(u32::from(prio))
    } else {
        Err(refuse(op, CongError::BadPriority { prio }))
    }
}

/// QUERY_CONG_STATUS: whether `node` is on for priority `prio`.
pub fn query_status(hca: &Hca, node: CongNode, prio: u8) -> Result<bool> {
    let op = Opcode::QUERY_CONG_STATUS;
    gate(hca, op, false)?;
    let (n, p) = (ecn_node(op, node)?, check_prio(op, prio)?);
    let mut i = input(op, 0, QueryCongStatusIn::LEN);
    QueryCongStatusIn::new_checked(&mut i[..])
        .and_then(|mut v| {
            v.set_cong_protocol(n)?.set_priority(p)?;
            Ok(())
        })
        .map_err(layout(op))?;
    let o = hca.cmdq().exec(&i, QueryCongStatusOut::LEN)?;
    let v = QueryCongStatusOut::new_checked(&o[..]).map_err(bad_output(op))?;
    Ok(v.enable() != 0)
}

/// MODIFY_CONG_STATUS: turns `node` on or off for priority `prio`.
pub fn modify_status(hca: &Hca, node: CongNode, prio: u8, enable: bool) -> Result<()> {
    let op = Opcode::MODIFY_CONG_STATUS;
    gate(hca, op, true)?;
    let (n, p) = (ecn_node(op, node)?, check_prio(op, prio)?);
    let mut i = input(op, 0, ModifyCongStatusIn::LEN);
    ModifyCongStatusIn::new_checked(&mut i[..])
        .and_then(|mut v| {
            v.set_cong_protocol(n)?
                .set_priority(p)?
                .set_enable(enable.into())?;
            Ok(())
        })
        .map_err(layout(op))?;
    hca.cmdq().exec(&i, ModifyCongStatusOut::LEN)?;
    tracing::debug!(node = node.name(), prio, enable, "MODIFY_CONG_STATUS");
    Ok(())
}

/// Every node's status for every priority (16 QUERY_CONG_STATUS commands).
pub fn query_all_status(hca: &Hca) -> Result<CongStatus> {
    let mut s = CongStatus::default();
    for p in 0..PRIOS {
        // `p` < 8: the conversion cannot fail.
        let prio = p as u8;
        s.rp[p] = query_status(hca, CongNode::Rp, prio)?;
        s.np[p] = query_status(hca, CongNode::Np, prio)?;
    }
    Ok(s)
}

fn query_params(hca: &Hca, node: CongNode) -> Result<Vec<u8>> {
    let op = Opcode::QUERY_CONG_PARAMS;
    gate(hca, op, false)?;
    let n = ecn_node(op, node)?;
    let mut i = input(op, 0, QueryCongParamsIn::LEN);
    QueryCongParamsIn::new_checked(&mut i[..])
        .and_then(|mut v| v.set_cong_protocol(n).map(|_| ()))
        .map_err(layout(op))?;
    let o = hca.cmdq().exec(&i, QueryCongParamsOut::LEN)?;
    QueryCongParamsOut::new_checked(&o[..]).map_err(bad_output(op))?;
    Ok(o)
}

/// QUERY_CONG_PARAMS of the reaction point.
pub fn query_rp_params(hca: &Hca) -> Result<RpParams> {
    let o = query_params(hca, CongNode::Rp)?;
    let v = QueryCongParamsOut::wrap_unchecked(&o[..]);
    Ok(RpParams::decode(
        &v.congestion_parameters().cong_control_r_roce_ecn_rp(),
    ))
}

/// QUERY_CONG_PARAMS of the notification point.
pub fn query_np_params(hca: &Hca) -> Result<NpParams> {
    let o = query_params(hca, CongNode::Np)?;
    let v = QueryCongParamsOut::wrap_unchecked(&o[..]);
    Ok(NpParams::decode(
        &v.congestion_parameters().cong_control_r_roce_ecn_np(),
    ))
}

/// A MODIFY_CONG_PARAMS input for `node` with field select `sel`, the values written by `fill`.
fn modify_params(
    hca: &Hca,
    node: CongNode,
    sel: u32,
    fill: impl FnOnce(&mut ModifyCongParamsIn<&mut [u8]>) -> bypass_hw::Result<()>,
) -> Result<()> {
    let op = Opcode::MODIFY_CONG_PARAMS;
    gate(hca, op, true)?;
    if sel == 0 {
        return Err(refuse(op, CongError::NoChange));
    }
    let n = ecn_node(op, node)?;
    let mut i = input(op, 0, ModifyCongParamsIn::LEN);
    let mut v = ModifyCongParamsIn::new_checked(&mut i[..]).map_err(layout(op))?;
    v.set_cong_protocol(n).map_err(layout(op))?;
    // The field select is one 32-bit dword whichever node it is for.
    v.field_select_mut()
        .field_select_r_roce_rp_mut()
        .set_field_select_r_roce_rp(sel)
        .map_err(layout(op))?;
    fill(&mut v).map_err(|source| refuse(op, CongError::TooWide { source }))?;
    hca.cmdq().exec(&i, ModifyCongParamsOut::LEN)?;
    tracing::debug!(node = node.name(), field_select = sel, "MODIFY_CONG_PARAMS");
    Ok(())
}

/// MODIFY_CONG_PARAMS of the reaction point: the `Some` fields of `c` change, the rest stay.
pub fn modify_rp_params(hca: &Hca, c: &RpChanges) -> Result<()> {
    modify_params(hca, CongNode::Rp, c.field_select(), |v| {
        c.encode(
            &mut v
                .congestion_parameters_mut()
                .cong_control_r_roce_ecn_rp_mut(),
        )
    })
}

/// MODIFY_CONG_PARAMS of the notification point: the `Some` fields of `c` change. Because
/// `cnp_prio_mode` and `cnp_802p_prio` share one field-select bit, changing one of them sends
/// the other's current value (read first with QUERY_CONG_PARAMS), so it stays.
pub fn modify_np_params(hca: &Hca, c: &NpChanges) -> Result<()> {
    let mut c = *c;
    if c.cnp_prio_mode.is_some() != c.cnp_802p_prio.is_some() {
        let cur = query_np_params(hca)?;
        c.cnp_prio_mode = c.cnp_prio_mode.or(Some(cur.cnp_prio_mode));
        c.cnp_802p_prio = c.cnp_802p_prio.or(Some(cur.cnp_802p_prio));
    }
    modify_params(hca, CongNode::Np, c.field_select(), |v| {
        c.encode(
            &mut v
                .congestion_parameters_mut()
                .cong_control_r_roce_ecn_np_mut(),
        )
    })
}

/// QUERY_CONG_STATISTICS: the four counters; with `clear`, the device zeroes them after
/// reading (the kernel's counter reset).
pub fn query_statistics(hca: &Hca, clear: bool) -> Result<CongStats> {
    let op = Opcode::QUERY_CONG_STATISTICS;
    gate(hca, op, false)?;
    let mut i = input(op, 0, QueryCongStatisticsIn::LEN);
    QueryCongStatisticsIn::new_checked(&mut i[..])
        .and_then(|mut v| v.set_clear(clear.into()).map(|_| ()))
        .map_err(layout(op))?;
    let o = hca.cmdq().exec(&i, QueryCongStatisticsOut::LEN)?;
    let v = QueryCongStatisticsOut::new_checked(&o[..]).map_err(bad_output(op))?;
    let (rp_cnp_ignored, rp_cnp_handled, np_ecn_marked_roce_packets, np_cnp_sent) = v.counters();
    Ok(CongStats {
        rp_cnp_ignored,
        rp_cnp_handled,
        np_ecn_marked_roce_packets,
        np_cnp_sent,
    })
}
