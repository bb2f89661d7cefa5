//! The transport engine's device-wide state: the queues to and from the link, how the link
//! takes frames, what the fast path reuses, and the burst ledger.
//!
//! Owns: [`Transport`]. Must not: hold per-QP state (that is the QP's `req` and `resp`).

use std::collections::VecDeque;

use crate::engine::ledger::Ledger;
use crate::frame::{Burst, Frame, LenMemo, TxTrains};
use crate::iommu::HostRun;

/// The most burst boxes a device keeps for reuse ([`Transport::recycle_burst`]).
const BURST_SPARES: usize = 8;

/// The transport engine's device-wide state.
#[derive(Debug, Default)]
pub(crate) struct Transport {
    /// Packets that arrived from the wire, not yet processed.
    pub(crate) rx: VecDeque<Frame>,
    /// Packets the device has sent, for the wire to take.
    pub(crate) tx: VecDeque<Frame>,
    /// The link takes bursts (`crate::frame`): in-process, and nothing needs the bytes.
    pub(crate) fast_tx: bool,
    /// How the link groups the packets it sends (`Device::set_tx_trains`); `None`: no
    /// grouping to align bursts to.
    pub(crate) tx_trains: Option<TxTrains>,
    /// The last timer/resume scan did something (so the next step scans again).
    pub(crate) scan_progressed: bool,
    /// Boxes of bursts this device received, for the bursts it sends ([`Transport::recycle_burst`]):
    /// a ping-pong allocates none. At most [`BURST_SPARES`]. The boxes themselves are what is
    /// reused (`Frame::Burst` carries a box), hence a vector of boxes.
    #[allow(clippy::vec_box)]
    pub(crate) burst_spare: Vec<Box<Burst>>,
    /// The destination runs of a received burst (`responder::burst`), reused; always empty
    /// between uses.
    pub(crate) runs_spare: Vec<HostRun>,
    /// The last destination GID found to be one of ours ([`Transport::owns_gid`]).
    own_gid: Option<[u8; 16]>,
    /// Wire lengths of the last packets sized on the fast path.
    pub(crate) len_memo: LenMemo,
    /// Packet headers of the last route used (`transport::headers`).
    pub(crate) headers_cache: Option<super::HeadersCache>,
    /// Bursts in flight and what waits for them.
    pub(crate) ledger: Ledger,
}

impl Transport {
    /// True if `gid` is one of the GIDs of `profile`'s ports. The last GID found is
    /// remembered (the profile, and so the GID table, never changes).
    #[inline]
    pub(crate) fn owns_gid(&mut self, profile: &crate::profile::Profile, gid: &[u8; 16]) -> bool {
        if self.own_gid.as_ref() == Some(gid) {
            return true;
        }
        let ours = profile.owns_gid(gid);
        if ours {
            self.own_gid = Some(*gid);
        }
        ours
    }

    /// Keeps the box of a burst it received for one it sends, its payload let go (no buffer
    /// is kept alive by a spare).
    #[inline]
    pub(crate) fn recycle_burst(&mut self, mut b: Box<Burst>) {
        // Read: its sender's flush may go ahead (`frame::BurstReads`). A box not kept drops,
        // which lets go of the same.
        if self.burst_spare.len() < BURST_SPARES {
            b.let_go();
            self.burst_spare.push(b);
        }
    }

    /// Packets queued for the wire and not yet taken.
    pub(crate) fn tx_queued(&self) -> u64 {
        self.tx.iter().map(Frame::packets).sum()
    }
}
