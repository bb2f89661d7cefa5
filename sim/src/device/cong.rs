//! The device's congestion-control surface for the host side of a simulation: the line rate
//! the reaction point recovers to, and each QP's rate.
//!
//! Owns: `Device::set_line_rate_mbps` and `Device::qp_rate` (`Device::cong` and `cong_mut`
//! are `device.rs`'s). Must not: act on packets (`transport::ecn`) or stand in for the
//! firmware's congestion commands (`firmware::cong`), which a driver uses; these are for the
//! World and reports (an incast run reads rates and counters here).
//!
//! Sources: mlx5's counters and parameters as `crate::cong` names them.

use super::Device;
use crate::cong::dcqcn::RateInfo;

impl Device {
    /// Sets the port's line rate, Mb/s (at least 1): the highest rate a rate-limited QP
    /// recovers to when `rpg_max_rate` is 0 (the World sets it from its link).
    pub fn set_line_rate_mbps(&mut self, mbps: u64) {
        self.profile.line_rate_mbps = mbps.max(1);
    }

    /// QP `qpn`'s reaction-point rate as of device time (current and target rate, alpha,
    /// CNPs handled); `None` for no such QP.
    pub fn qp_rate(&self, qpn: u32) -> Option<RateInfo> {
        let qp = self.objs.qps.get(qpn)?;
        Some(
            qp.req
                .rp()
                .info(&self.cong.rp, self.profile.line_rate_mbps, self.now),
        )
    }
}
