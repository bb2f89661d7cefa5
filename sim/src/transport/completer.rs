//! The completer: ACK/NAK, READ responses and atomic ACKs → send completions.
//!
//! (Being written: see the requester work item.)

use bypass_hw::roce::RocePacket;

use crate::device::Device;

/// A response packet for QP `qpn`.
pub(crate) fn handle_response(_dev: &mut Device, _qpn: u32, _pkt: &RocePacket<'_>) {}
