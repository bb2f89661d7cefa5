//! Congestion control in the NIC: the state mlx5's firmware keeps for RoCE ECN (DCQCN), its
//! parameters and its counters.
//!
//! Owns: [`Cong`], the device-wide part the firmware's congestion commands read and write
//! (`firmware::cong`: QUERY/MODIFY_CONG_STATUS, QUERY/MODIFY_CONG_PARAMS,
//! QUERY_CONG_STATISTICS) and the data path consults: whether the notification point (NP)
//! and the reaction point (RP) are on for a priority ([`CongStatus`]), their parameters
//! ([`RpParams`], [`NpParams`]) and what they did ([`CongStats`]). The per-QP rate limiter and
//! the CNP sending live with the data path: [`dcqcn`] (the RP's algorithm, a pure state
//! machine), [`mark`] (a packet rule marking CE, for tests and tools), [`rp`] (per QP: DCQCN and the pacer), [`np`] (per flow: when the last CNP went);
//! `transport::ecn` connects them to packets. Must not: build or parse packets, or touch QPs
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
pub const PRIOS: usize = 8;

/// The congestion node a command names (`mlx5_ifc.h` `cong_protocol` / the kernel's
/// `MLX5_CONG_NODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongNode {
    /// The reaction point: the sender's rate limiter (1).
    Rp,
    /// The notification point: the receiver's CNP generator (2).
    Np,
    /// General parameters (3).
    General,
}

impl CongNode {
    /// The node for the PRM's code, or `None` for an unknown one.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Rp),
            2 => Some(Self::Np),
            3 => Some(Self::General),
            _ => None,
        }
    }

    /// The PRM's code.
    pub fn code(self) -> u8 {
        match self {
            Self::Rp => 1,
            Self::Np => 2,
            Self::General => 3,
        }
    }
}

/// What the NP and RP did, under the names `QUERY_CONG_STATISTICS` gives them (and the
/// kernel's `cong.c` shows as `rp_cnp_handled` etc.).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CongStats {
    /// CNPs received for a QP whose RP is off (or for no QP).
    pub rp_cnp_ignored: u64,
    /// CNPs received and acted on by an RP.
    pub rp_cnp_handled: u64,
    /// ECN-marked (CE) RoCEv2 packets received by the NP.
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs the NP sent.
    pub np_cnp_sent: u64,
}

impl CongStats {
    /// Every counter, with its mlx5 name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("rp_cnp_ignored", self.rp_cnp_ignored),
            ("rp_cnp_handled", self.rp_cnp_handled),
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
        ]
        .into_iter()
    }
}

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
