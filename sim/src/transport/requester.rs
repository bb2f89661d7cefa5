//! The requester: send WQEs → request packets; retransmit and RNR timers.
//!
//! (Being written: see the requester work item.)

use crate::device::Device;

/// Requester state of a QP.
#[derive(Debug, Clone, Default)]
pub struct ReqState {}

impl ReqState {
    /// State for a QP entering RTS with first PSN `psn`.
    pub fn new(_psn: u32) -> Self {
        Self {}
    }

    /// The next PSN this QP will send (QUERY_QP `next_send_psn`).
    pub fn psn(&self) -> u32 {
        0
    }
}

/// Runs expired timers.
pub(crate) fn run_timers(_dev: &mut Device) -> bool {
    false
}

/// Continues held-back sending.
pub(crate) fn resume(_dev: &mut Device) -> bool {
    false
}

/// The earliest pending timer.
pub(crate) fn next_deadline(_dev: &Device) -> Option<u64> {
    None
}
