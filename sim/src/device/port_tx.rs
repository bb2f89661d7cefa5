//! The port's transmit side as a switched network sees it: back-pressure from the link.
//!
//! Owns: `Device::set_tx_backpressure` and `Device::tx_head_prio`. A ConnectX port's send
//! scheduler takes a QP's next packet only when the port can transmit it (and not on a
//! priority PFC has paused), so a QP the reaction point slows, or a priority a switch pauses,
//! holds its packets in its send queue, not in a deep buffer between NIC and wire. The World
//! with a topology turns this on (`net::Network::fit_nic`) and takes a frame only while the
//! NIC's egress has nothing waiting at the frame's priority. Must not: model the wire (the
//! network does) or decide what a QP sends (the requester asks `Transport::tx_held`).

use super::Device;
use crate::frame::Frame;

impl Device {
    /// Holds the requester while `frames` frames wait for the link to take them (`None`:
    /// never, as on a link that takes everything at once). Responses and ACKs are not held.
    pub fn set_tx_backpressure(&mut self, frames: Option<usize>) {
        self.tp.tx_gate = frames.map(|n| n.max(1));
    }

    /// The priority (`cong::prio_of_tclass`) of the next frame the link would take, or
    /// `None` if none waits or it is not an IP packet the link can read.
    pub(crate) fn tx_head_prio(&self) -> Option<u8> {
        match self.tp.tx.front()? {
            Frame::Wire(p) | Frame::WireChecked(p) => {
                crate::net::ecn::tclass(p).map(crate::cong::prio_of_tclass)
            }
            _ => None,
        }
    }
}
