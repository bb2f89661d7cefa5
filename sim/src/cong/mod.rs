//! Congestion control in the NIC: the state mlx5's firmware keeps for RoCE ECN (DCQCN), its
//! parameters and its counters.
//!
//! Owns: [`Cong`], the device-wide part the firmware's congestion commands read and write
//! (`firmware::cong`: QUERY/MODIFY_CONG_STATUS, QUERY/MODIFY_CONG_PARAMS,
//! QUERY_CONG_STATISTICS) and the data path consults: whether the notification point (NP)
//! and the reaction point (RP) are on for a priority ([`CongStatus`]), their parameters
//! ([`RpParams`], [`NpParams`]) and what they did ([`CongStats`]). The per-QP rate limiter and
//! the CNP sending live with the data path: [`dcqcn`] (the RP's algorithm, a pure state
//! machine), [`rp`] (per QP: DCQCN and the pacer), [`np`] (per flow: when the last CNP
//! went), [`mark`] (a packet rule marking CE, for tests and tools); `transport::ecn`
//! connects them to packets. Must not: build or parse packets, or touch QPs
//! (the transport lends those to the NP and RP).
//!
//! Priorities: a packet's priority is its DSCP's top three bits (`dscp >> 3`, DSCP trust, as
//! RoCE deployments configure `mlnx_qos --trust dscp`).
//!
//! Sources: the kernel's `include/linux/mlx5/mlx5_ifc.h` (`cong_control_r_roce_ecn_rp`,
//! `_np`, `query_cong_statistics_out`), `drivers/infiniband/hw/mlx5/cong.c` (the names and
//! the node types), NVIDIA DOCA "DCQCN CC parameters" (the RP defaults), Zhu et al., SIGCOMM
//! 2015 (DCQCN).

pub mod dcqcn;
pub mod mark;
pub mod np;
mod params;
pub mod rp;
#[cfg(test)]
mod tests;

pub use params::{CongStatus, NpParams, RpParams};

/// Number of priorities (802.1p).
pub use bypass_hw::cmd::cong_params::PRIOS;
/// The congestion node a command names, and the counters under their mlx5 names: the shared
/// definitions of `bypass_hw::cmd::cong_params`.
pub use bypass_hw::cmd::cong_params::{CongNode, CongStats};

/// The device's congestion-control state: status per node and priority, parameters,
/// statistics. Off at reset, as mlx5 ships with ECN off until `roce_np`/`roce_rp` enable it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cong {
    /// Which nodes are on for which priorities.
    pub status: CongStatus,
    /// The reaction point's parameters.
    pub rp: RpParams,
    /// The notification point's parameters.
    pub np: NpParams,
    /// What the nodes did.
    pub stats: CongStats,
}

/// The priority of a packet with traffic class `tclass` (DSCP trust: the DSCP's top three
/// bits).
pub fn prio_of_tclass(tclass: u8) -> u8 {
    tclass >> 5
}
