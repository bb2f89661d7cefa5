//! The congestion nodes' status and parameters, with mlx5's names, units and defaults.
//!
//! Owns: nothing of its own: the types are `bypass_hw::cmd::cong_params`'s, one definition the
//! driver (which sends them) and the sim (which keeps and applies them) share, re-exported here
//! under the names the data path uses (`bypass_sim::cong::{RpParams, NpParams, CongStatus}`).
//! Must not: interpret them (the RP and NP do) or know the command layouts
//! (`bypass_hw::cmd::cong`, used by `firmware::cong`).
//!
//! Units follow NVIDIA DOCA "DCQCN CC parameters": times in µs, rates in Mb/s, `rpg_byte_reset`
//! in bytes, `rpg_min_dec_fac` in percent, `dce_tcp_g` and `initial_alpha_value` in 1/1024.
//! The RP defaults are DOCA's firmware defaults; the NP's were not published, so they are this
//! model's configuration (the DCQCN paper's 50 µs between CNPs; CNPs at DSCP 48, priority 6).
//! Sources: as `bypass_hw::cmd::cong_params` names them (kernel `mlx5_ifc.h`, `cong.c`, DOCA).

pub use bypass_hw::cmd::cong_params::{CongStatus, NpParams, RpParams};
