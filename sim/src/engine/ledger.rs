//! The burst ledger: what waits for a QP's by-reference bursts to be read.

/// Bursts in flight and what waits for them.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// QPs whose error CQEs and SQ flush wait for their bursts still in flight
    /// (`engine::post_err_when_read`): the steps retry them
    /// (`engine::retry_deferred_flushes`) until none is left.
    pub(crate) deferred_flushes: Vec<u32>,
    /// Commands (slot, QPN) whose 2RST_QP / DESTROY_QP waits for the QP's bursts in flight
    /// (`firmware::cmdq::waits_for`); the steps retry them.
    pub(crate) waiting_cmds: Vec<(u8, u32)>,
}

impl Ledger {
    /// True if held error CQEs wait for a retry.
    #[inline]
    pub(crate) fn flushes_waiting(&self) -> bool {
        !self.deferred_flushes.is_empty()
    }

    /// True if a command waits for a QP's bursts.
    #[inline]
    pub(crate) fn commands_waiting(&self) -> bool {
        !self.waiting_cmds.is_empty()
    }

    /// True if anything waits (held CQEs or commands).
    #[inline]
    pub(crate) fn waiting(&self) -> bool {
        self.flushes_waiting() || self.commands_waiting()
    }
}
