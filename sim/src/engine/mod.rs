//! The send side of the data path: doorbells, WQE fetch and validation, flush.
//!
//! (Being written: see the requester work item.)

use crate::device::Device;

/// A send doorbell (8-byte doorbell, or a whole WQE by BlueFlame) arrived on UAR page `uar`.
pub(crate) fn send_doorbell(_dev: &mut Device, _uar: u32, _ctrl: [u8; 8], _bf: Option<Vec<u8>>) {}

/// Completes every outstanding send WQE of `qpn` with WR_FLUSH_ERR.
pub(crate) fn flush_sq(_dev: &mut Device, _qpn: u32) {}
