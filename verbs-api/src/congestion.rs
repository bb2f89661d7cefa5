//! Congestion control of a device (RoCE ECN / DCQCN): [`Congestion`], a small handle from
//! [`Context::congestion`](crate::Context::congestion) with the firmware's calls.
//!
//! Owns: [`Congestion`]. Must not: build commands (the driver's `cong` module does) or keep
//! state (the device does; every call is a firmware command).
//!
//! What the calls mean follows the kernel's `drivers/infiniband/hw/mlx5/cong.c` (the debugfs
//! `cc_params` files: one parameter per file, under the same names) and MLNX_OFED's
//! `ecn/roce_{rp,np}/enable/<prio>`: the reaction point (RP) is the sender's rate limiter, the
//! notification point (NP) the receiver's CNP generator, each on or off per 802.1p priority.
//! The parameter and counter types are the driver's (one definition shared with the sim).
//!
//! Errors: a refusal the driver can see (no capability, priority above 7, empty change) is
//! `VerbsError::Driver(DriverError::Congestion { .. })`; a value the firmware refuses is
//! `VerbsError::Driver(DriverError::CmdFailed { .. })` with its status and syndrome.

use crate::driver::Hca;
use crate::driver::cong;
pub use crate::driver::cong::{
    CongError, CongNode, CongStats, CongStatus, NpChanges, NpParams, RpChanges, RpParams,
};
use crate::error::VerbsError;

/// The congestion-control calls of one device; borrowed from its [`Context`](crate::Context).
#[derive(Debug, Clone, Copy)]
pub struct Congestion<'a> {
    hca: &'a Hca,
}

impl<'a> Congestion<'a> {
    pub(crate) fn new(hca: &'a Hca) -> Self {
        Self { hca }
    }

    /// Whether `node` is on for priority `prio` (0..=7).
    pub fn enabled(&self, node: CongNode, prio: u8) -> Result<bool, VerbsError> {
        Ok(cong::query_status(self.hca, node, prio)?)
    }

    /// Turns `node` on or off for priority `prio` (0..=7).
    pub fn set_enabled(&self, node: CongNode, prio: u8, on: bool) -> Result<(), VerbsError> {
        Ok(cong::modify_status(self.hca, node, prio, on)?)
    }

    /// Every node's status for every priority.
    pub fn status(&self) -> Result<CongStatus, VerbsError> {
        Ok(cong::query_all_status(self.hca)?)
    }

    /// The reaction point's parameters.
    pub fn rp_params(&self) -> Result<RpParams, VerbsError> {
        Ok(cong::query_rp_params(self.hca)?)
    }

    /// The notification point's parameters.
    pub fn np_params(&self) -> Result<NpParams, VerbsError> {
        Ok(cong::query_np_params(self.hca)?)
    }

    /// Changes the `Some` fields of `c` in the reaction point's parameters.
    pub fn set_rp_params(&self, c: &RpChanges) -> Result<(), VerbsError> {
        Ok(cong::modify_rp_params(self.hca, c)?)
    }

    /// Changes the `Some` fields of `c` in the notification point's parameters.
    pub fn set_np_params(&self, c: &NpChanges) -> Result<(), VerbsError> {
        Ok(cong::modify_np_params(self.hca, c)?)
    }

    /// The four counters (`rp_cnp_ignored`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`,
    /// `np_cnp_sent`); with `clear`, the device zeroes them after the read.
    pub fn counters(&self, clear: bool) -> Result<CongStats, VerbsError> {
        Ok(cong::query_statistics(self.hca, clear)?)
    }
}
