//! Congestion control on the experiment's NICs: DCQCN switched on through the firmware's
//! congestion commands, and the CNP counters read back. (Their line rate comes from the
//! topology: `World::set_topology`.)
//!
//! Owns: those few calls. Must not: choose DCQCN's parameters (the firmware's defaults stand)
//! or hold the world's lock across a firmware command (a command runs the world itself).

use bypass_sim::World;
use bypass_verbs::congestion::{CongNode, NpChanges, RpChanges};
use bypass_verbs::{Context, VerbsError};

/// DCQCN could not be switched on.
#[derive(Debug, thiserror::Error)]
#[error("switching DCQCN on (MODIFY_CONG_STATUS {node:?}, priority {prio}): {source}")]
pub struct CongSetupError {
    /// The node.
    pub node: CongNode,
    /// The priority.
    pub prio: u8,
    /// The driver's error.
    pub source: VerbsError,
}

/// Switches the notification and reaction points on for `prio` on `ctx`'s device, as
/// `echo 1 > /sys/class/net/IF/ecn/roce_{np,rp}/enable/PRIO` does through mlx5_ib, and sets
/// the NP's `min_time_between_cnps` if given.
pub fn enable_dcqcn(
    ctx: &Context,
    prio: u8,
    min_time_between_cnps: Option<u32>,
) -> Result<(), CongSetupError> {
    let cc = ctx.congestion();
    for node in [CongNode::Np, CongNode::Rp] {
        cc.set_enabled(node, prio, true)
            .map_err(|source| CongSetupError { node, prio, source })?;
    }
    if let Some(us) = min_time_between_cnps {
        cc.set_np_params(&NpChanges {
            min_time_between_cnps: Some(us),
            ..NpChanges::default()
        })
        .map_err(|source| CongSetupError {
            node: CongNode::Np,
            prio,
            source,
        })?;
    }
    Ok(())
}

/// Sets the reaction point's parameters to the DCQCN paper's (Zhu et al., SIGCOMM 2015, §5)
/// through MODIFY_CONG_PARAMS: g = 1/256 (`dce_tcp_g` 1020), alpha updated every 55 µs, the
/// rate-increase timer 55 µs, the byte counter 10 MB, 5 fast-recovery steps, additive
/// increase 40 Mb/s (hyper increase ten times that, as mlx5's 5 and 50 relate), and the
/// target rate clamped to the current rate on every CNP. The firmware's defaults update alpha every
/// microsecond with `dce_tcp_g` 1019/1024 (Mellanox's "DCQCN Parameters": α ← G·α/1024, plus
/// 1024 − G with a CNP in the period), so at a few CNPs per flow per 100 µs alpha decays to
/// a few percent between them and a CNP cuts a flow's rate by a percent or two.
pub fn use_paper_rp(ctx: &Context) -> Result<(), CongSetupError> {
    ctx.congestion()
        .set_rp_params(&RpChanges {
            clamp_tgt_rate: Some(true),
            dce_tcp_g: Some(1020),
            dce_tcp_rtt: Some(55),
            rpg_time_reset: Some(55),
            rpg_byte_reset: Some(10_000_000),
            rpg_threshold: Some(5),
            rpg_ai_rate: Some(40),
            rpg_hai_rate: Some(400),
            ..RpChanges::default()
        })
        .map_err(|source| CongSetupError {
            node: CongNode::Rp,
            prio: 0,
            source,
        })
}

/// CNPs sent so far by NICs `0..nics` (`np_cnp_sent`).
pub fn cnps_sent(w: &mut World, nics: usize) -> u64 {
    (0..nics)
        .map(|d| w.device(d).cong().stats.np_cnp_sent)
        .sum()
}

/// CNPs acted on so far by NICs `0..nics` (`rp_cnp_handled`).
pub fn cnps_handled(w: &mut World, nics: usize) -> u64 {
    (0..nics)
        .map(|d| w.device(d).cong().stats.rp_cnp_handled)
        .sum()
}
