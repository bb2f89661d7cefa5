//! The device's congestion-control surface for the host side of a simulation: the line rate
//! the reaction point recovers to, the congestion state, and each QP's rate.
//!
//! Owns: `Device::set_line_rate_mbps`, `Device::cong`, `Device::cong_mut`,
//! `Device::qp_rate`. Must not: act on packets (`transport::ecn`) or stand in for the
//! firmware's congestion commands (`firmware::cong`), which a driver uses; these are for the
//! World and reports (an incast run reads rates and counters here).
//!
//! Sources: mlx5's counters and parameters as `crate::cong` names them.

use super::Device;
use crate::cong::Cong;
use crate::cong::dcqcn::RateInfo;

impl Device {
    /// Sets the port's line rate, Mb/s (at least 1): the highest rate a rate-limited QP
    /// recovers to when `rpg_max_rate` is 0 (the World sets it from its link).
    pub fn set_line_rate_mbps(&mut self, mbps: u64) {
        self.profile.line_rate_mbps = mbps.max(1);
    }

    /// The congestion-control state: status per priority, parameters, counters.
    pub fn cong(&self) -> &Cong {
        &self.cong
    }

    /// The congestion-control state, to change (what MODIFY_CONG_STATUS/PARAMS would).
    pub fn cong_mut(&mut self) -> &mut Cong {
        &mut self.cong
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
