//! The transport engine's device-wide state, and the parts it works with.
//!
//! Owns: [`Transport`] (the queues to and from the link, how the link takes frames, what the
//! fast path reuses, the burst ledger) and [`DataPath`], the borrow of the device's parts a
//! doorbell, a packet or a scan works on (QPs and mkeys, completions, DMA, counters and
//! trace, the profile). Must not: hold per-QP state (that is the QP's `req` and `resp`).

use std::collections::VecDeque;

use bypass_hw::cmd::qp::QpState;

use super::requester::state::ReqState;
use super::responder::state::RespState;
use crate::engine::ledger::Ledger;
use crate::events::Completions;
use crate::firmware::command::QpControl;
use crate::frame::{Burst, Frame, LenMemo, TxTrains};
use crate::io::Io;
use crate::iommu::HostRun;
use crate::objects::{Objects, Qp};
use crate::profile::Profile;
use crate::table::Table;

/// The most burst boxes a device keeps for reuse ([`Transport::recycle_burst`]).
const BURST_SPARES: usize = 8;

/// The transport engine's device-wide state.
#[derive(Debug, Default, Clone)]
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
    /// Packet headers of the last route used (`transport::wire::headers`).
    pub(crate) headers_cache: Option<super::wire::HeadersCache>,
    /// Bursts in flight and what waits for them.
    pub(crate) ledger: Ledger,
    /// The buffer of the last BlueFlame WQE the send queue finished with, which BAR0 fills
    /// with the next (no allocation per BlueFlame post).
    pub(crate) bf_spare: Vec<u8>,
    /// `Some(n)`: the last scan pass found no QP with a timer armed, work to resume or in ERR,
    /// when the ledger's state-change count was `n`, and no doorbell or frame came since. While
    /// the count is still `n`, nothing can have given a QP scan work (work comes only from a
    /// send doorbell, a frame, a state change, or a timer, and none was armed), so the scan and
    /// the deadline search skip the pass over every QP: a device with 64k idle QPs pays for
    /// its commands what one with a few does.
    pub(crate) quiet: Option<u64>,
    /// The notification point's record of the CNPs it sent (`cong::np`).
    pub(crate) np: crate::cong::np::NpState,
    /// Back-pressure from the port: `Some(n)` while the link takes packets only as fast as
    /// its wire sends them (a switched network): the requester sends no packet while `n`
    /// frames wait in `tx` (`Device::set_tx_backpressure`).
    pub(crate) tx_gate: Option<usize>,
    /// A QP's sending stopped at the gate; the next scan with room resumes it.
    pub(crate) tx_waiting: bool,
    /// Behind the gate, where the next resume pass starts: after the last QP that sent.
    pub(crate) resume_from: u32,
}

impl Transport {
    /// True if the port's back-pressure holds the requester now (as many frames wait for
    /// the link as the gate allows); remembers that a QP waits.
    #[inline(always)]
    pub(crate) fn tx_held(&mut self) -> bool {
        let held = self.tx_gate.is_some_and(|n| self.tx.len() >= n);
        self.tx_waiting |= held;
        held
    }

    /// True if a QP waits at the gate and the link has since taken frames.
    #[inline(always)]
    pub(crate) fn tx_reopened(&self) -> bool {
        self.tx_waiting && self.tx_gate.is_none_or(|n| self.tx.len() < n)
    }

    /// True while the last scan's "nothing to do" still holds (see [`Transport::quiet`]).
    #[inline(always)]
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet == Some(self.ledger.state_changes())
    }

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
    #[inline(never)]
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

/// The parts the data path works on for one doorbell, packet or scan.
#[derive(Debug)]
pub(crate) struct DataPath<'a> {
    /// QPs (with their transport state) and mkeys.
    pub(crate) objs: &'a mut Objects,
    /// CQs, EQs and interrupts.
    pub(crate) comp: &'a mut Completions,
    /// The transport engine's device-wide state.
    pub(crate) tp: &'a mut Transport,
    /// Congestion control: the NP's and RP's status, parameters and counters.
    pub(crate) cong: &'a mut crate::cong::Cong,
    /// The device's profile (GIDs, capabilities).
    pub(crate) profile: &'a Profile,
    /// DMA, counters, trace, time.
    pub(crate) io: Io<'a>,
}

impl DataPath<'_> {
    /// The same borrows, for a shorter time (a command doorbell lends them to the firmware).
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> DataPath<'_> {
        DataPath {
            objs: &mut *self.objs,
            comp: &mut *self.comp,
            tp: &mut *self.tp,
            cong: &mut *self.cong,
            profile: self.profile,
            io: self.io.reborrow(),
        }
    }

    /// Moves QP `qpn` to `to` (`engine::set_qp_state`).
    pub(crate) fn set_qp_state(&mut self, qpn: u32, to: QpState) {
        crate::engine::set_qp_state(
            &mut self.objs.qps,
            self.comp,
            &mut self.tp.ledger,
            &mut self.io,
            qpn,
            to,
        );
    }

    /// Builds a packet for `route` and queues it on the wire (`wire::send`), for tests that
    /// play a peer.
    #[cfg(test)]
    pub(crate) fn send(
        &mut self,
        route: super::wire::Route<'_>,
        bth: bypass_hw::roce::BthFields,
        ext: bypass_hw::roce::ExtFields,
        payload: &[u8],
    ) -> bool {
        super::wire::send(
            self.tp,
            self.profile,
            &self.cong.status,
            &mut self.io,
            route,
            bth,
            ext,
            payload,
        )
        .is_some()
    }

    /// QP `qpn`'s primary path headers (`wire::qp_headers`), for tests.
    #[cfg(test)]
    pub(crate) fn qp_headers(
        &mut self,
        qpn: u32,
        route: super::wire::Route<'_>,
    ) -> Option<(bypass_hw::roce::IpSpec, bypass_hw::roce::UdpPorts)> {
        let qp = self.objs.qps.get_mut(qpn)?;
        super::wire::qp_headers(
            &mut qp.headers,
            self.tp,
            self.profile,
            &self.cong.status,
            route,
        )
    }

    /// True if `gid` is one of the GIDs of one of our ports.
    #[inline]
    pub(crate) fn owns_gid(&mut self, gid: &[u8; 16]) -> bool {
        self.tp.owns_gid(self.profile, gid)
    }
}

/// The firmware's way into the data path (`firmware::QpControl`).
impl QpControl for Transport {
    fn set_state(
        &mut self,
        qps: &mut Table<Qp>,
        comp: &mut Completions,
        io: &mut Io<'_>,
        qpn: u32,
        to: QpState,
    ) {
        crate::engine::set_qp_state(qps, comp, &mut self.ledger, io, qpn, to);
    }

    fn reset(&mut self, qps: &mut Table<Qp>, comp: &mut Completions, io: &mut Io<'_>, qpn: u32) {
        self.ledger.post_held(qps, comp, io, qpn);
        crate::engine::set_qp_state(qps, comp, &mut self.ledger, io, qpn, QpState::Rst);
        if let Some(qp) = qps.get_mut(qpn) {
            qp.sq_ci = 0;
            qp.rq_ci = 0;
            qp.req = ReqState::default();
            qp.resp = RespState::default();
            qp.headers = None;
        }
        self.ledger.drop_held(qpn);
        self.np.forget_qp(qpn);
    }

    fn bursts_in_flight(&self, qpn: u32) -> bool {
        self.ledger.reads_in_flight(qpn)
    }

    fn hold_command(&mut self, slot: u8, qpn: u32) {
        self.ledger.wait_command(slot, qpn);
    }

    fn next_command(&mut self, at: &mut usize) -> Option<u8> {
        self.ledger.next_command(at)
    }

    fn forget(&mut self, qpn: u32) {
        self.ledger.forget(qpn);
    }

    fn forget_all(&mut self) {
        self.ledger.forget_all();
    }
}
