//! The congestion nodes' status and parameters, with mlx5's names, units and defaults.
//!
//! Owns: [`CongStatus`], [`RpParams`], [`NpParams`]. Must not: interpret them (the RP and NP
//! do) or know the command layouts (`bypass_hw::cmd::cong`).
//!
//! Units follow NVIDIA DOCA "DCQCN CC parameters": times in µs, rates in Mb/s, `rpg_byte_reset`
//! in bytes, `rpg_min_dec_fac` in percent, `dce_tcp_g` and `initial_alpha_value` in 1/1024.
//! The RP defaults are DOCA's firmware defaults; the NP's were not published, so they are this
//! model's configuration (the DCQCN paper's 50 µs between CNPs; CNPs at DSCP 48, priority 6).

use super::PRIOS;

/// Whether each node is on, per priority (MODIFY_CONG_STATUS's `enable`, per `priority`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CongStatus {
    /// The reaction point (the sender's rate limiter) per priority.
    pub rp: [bool; PRIOS],
    /// The notification point (the receiver's CNP generator) per priority.
    pub np: [bool; PRIOS],
}

/// The reaction point's parameters (`cong_control_r_roce_ecn_rp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpParams {
    /// Clamp the target rate to the current rate on every CNP.
    pub clamp_tgt_rate: bool,
    /// Clamp the target rate after a timer-driven increase.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// µs between timer-driven rate increases without a CNP.
    pub rpg_time_reset: u32,
    /// Bytes sent between byte-counter-driven rate increases without a CNP.
    pub rpg_byte_reset: u32,
    /// Fast-recovery steps before additive increase.
    pub rpg_threshold: u32,
    /// The highest rate, Mb/s (0: the port's line rate).
    pub rpg_max_rate: u32,
    /// Additive increase step, Mb/s.
    pub rpg_ai_rate: u32,
    /// Hyper increase step, Mb/s.
    pub rpg_hai_rate: u32,
    /// The decrease divisor's log2: a CNP cuts the rate by `alpha / 2^rpg_gd` (alpha in 1/1024).
    pub rpg_gd: u32,
    /// The largest single decrease, as the percentage of the rate that remains.
    pub rpg_min_dec_fac: u32,
    /// The lowest rate, Mb/s.
    pub rpg_min_rate: u32,
    /// The rate a QP's first CNP sets, Mb/s (0: cut from the line rate as any other CNP).
    pub rate_to_set_on_first_cnp: u32,
    /// The alpha update's weight of the old alpha, in 1/1024 (`g = 1 - dce_tcp_g/1024`).
    pub dce_tcp_g: u32,
    /// µs between alpha updates.
    pub dce_tcp_rtt: u32,
    /// µs: at most one rate decrease per period.
    pub rate_reduce_monitor_period: u32,
    /// Alpha of a QP's first CNP, in 1/1024.
    pub initial_alpha_value: u32,
}

impl Default for RpParams {
    /// NVIDIA DOCA's firmware defaults (`../congestion.md` in the project's reference).
    fn default() -> Self {
        Self {
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rpg_time_reset: 300,
            rpg_byte_reset: 32_767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
        }
    }
}

/// The notification point's parameters (`cong_control_r_roce_ecn_np`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpParams {
    /// µs: at most one CNP per QP per this interval.
    pub min_time_between_cnps: u32,
    /// The DSCP CNPs are sent with.
    pub cnp_dscp: u8,
    /// 1: CNPs take `cnp_802p_prio`; 0: the priority of the marked packet.
    pub cnp_prio_mode: u8,
    /// The 802.1p priority of CNPs when `cnp_prio_mode` is 1.
    pub cnp_802p_prio: u8,
}

impl Default for NpParams {
    /// This model's configuration (DOCA publishes no NP defaults): the DCQCN paper's 50 µs,
    /// CNPs at DSCP 48 and priority 6, as NVIDIA's RoCE configuration guides set them.
    fn default() -> Self {
        Self {
            min_time_between_cnps: 50,
            cnp_dscp: 48,
            cnp_prio_mode: 1,
            cnp_802p_prio: 6,
        }
    }
}
