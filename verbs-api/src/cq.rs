//! Completion queues: polling as an iterator of [`Completion`]s, blocking [`Cq::wait`], and
//! the raw CQE bytes for research.
//!
//! A [`Completion`] is the proof the soundness rules rest on (crate docs, rule 3): only a CQ
//! makes one, it cannot be copied, and it carries the CQ's identity and its sequence number,
//! the driver's consumer count (`QpTable::consumed`) once its CQE was consumed. The number is
//! the one the driver's poll returns while it still holds the CQ's consumer side, never one
//! read after the poll let go, so that [`crate::Qp::reclaim`] can refuse a completion of
//! another QP or CQ, or one polled before the WQE now at its ring slot was posted.
//!
//! Owns: [`Cq`], [`Completion`], [`Poll`]. Must not: decode CQEs (the driver does) or
//! allocate, lock or format while polling.
//! Sources: rdma-core `providers/mlx5/cq.c` (`mlx5_parse_cqe`: a queue's CQEs arrive in
//! order, so one CQE retires every earlier WQE of its queue).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::context::Context;
use crate::driver::comp_channel::{CompletionChannel, CqEvent};
use crate::driver::cq::{Cq as DriverCq, CqConfig};
use crate::driver::poll::{QpTable, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::error::VerbsError;

/// A completion queue. Polling takes `&mut self` (one consumer, no lock).
pub struct Cq {
    inner: DriverCq,
    ctx: Arc<Context>,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq")
            .field("cqn", &self.cqn())
            .field("capacity", &self.capacity())
            .field("consumed", &self.inner.consumed())
            .finish()
    }
}

impl Cq {
    /// A CQ of at least `min_cqes` entries (a power of two), reporting to the context's
    /// completion EQ.
    pub fn new(ctx: &Arc<Context>, min_cqes: u32) -> Result<Self, VerbsError> {
        Ok(Cq {
            inner: DriverCq::create(ctx.hca(), min_cqes)?,
            ctx: ctx.clone(),
        })
    }

    /// A CQ on completion vector `comp_vector` (`0..Context::num_comp_vectors()`), its
    /// events queued on `channel` if given (`ibv_create_cq`'s `channel` and `comp_vector`).
    /// A CQ on a channel is waited for there ([`CompletionChannel::get_cq_event`]), not with
    /// [`Cq::wait`].
    pub fn with_channel(
        ctx: &Arc<Context>,
        min_cqes: u32,
        channel: Option<&CompletionChannel>,
        comp_vector: u32,
    ) -> Result<Self, VerbsError> {
        let config = CqConfig {
            comp_vector,
            channel,
        };
        Ok(Cq {
            inner: DriverCq::create_with(ctx.hca(), min_cqes, config)?,
            ctx: ctx.clone(),
        })
    }

    /// Requests an event for the next completion, or with `solicited_only` for the next
    /// solicited (or error) one (`ibv_req_notify_cq`). One request raises one event; after
    /// taking it, request again.
    pub fn req_notify(&mut self, solicited_only: bool) {
        self.inner.arm(solicited_only);
    }

    /// True if `event` fired for this CQ.
    pub fn owns(&self, event: &CqEvent) -> bool {
        event.is_for(&self.inner)
    }

    /// Acknowledges `n` events taken for this CQ (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u32) -> Result<(), VerbsError> {
        Ok(self.inner.ack_events(n)?)
    }

    /// Events taken for this CQ and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.inner.events().unacked()
    }

    /// Destroys the CQ (`ibv_destroy_cq`), refusing while events taken for it are not
    /// acknowledged (libibverbs would block forever): the CQ comes back with the error.
    pub fn destroy(self) -> Result<(), Box<(Self, VerbsError)>> {
        let Cq { inner, ctx } = self;
        inner.destroy().map_err(|b| {
            let (inner, e) = *b;
            Box::new((Cq { inner, ctx }, VerbsError::from(e)))
        })
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.inner.cqn()
    }

    /// Entries in the ring.
    pub fn capacity(&self) -> u32 {
        self.inner.nent()
    }

    /// The context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn driver(&self) -> &DriverCq {
        &self.inner
    }

    /// The driver's consumer state of this CQ, whose consumer count QPs read when they post
    /// ([`QpTable::consumed`]) and whose address is the CQ's identity in a [`Completion`].
    pub(crate) fn table(&self) -> &Arc<QpTable> {
        self.inner.shared().table()
    }

    /// The proof for `wc`, whose sequence number `seq` the driver's poll returned with it
    /// (taken while it held the CQ's consumer side: see the module docs).
    #[inline]
    fn wrap(&self, (wc, seq): (WorkCompletion, u64)) -> Completion {
        Completion {
            wc,
            cqn: self.inner.cqn(),
            cq_id: Arc::as_ptr(self.table()) as usize,
            seq,
        }
    }

    /// The completions ready now, oldest first, as an iterator (it stops at the first empty
    /// slot). No allocation, lock or syscall. On a stepped sim nothing moves while you poll:
    /// use [`Cq::wait`] or call [`Context::progress`].
    #[inline]
    pub fn poll(&mut self) -> Poll<'_> {
        Poll { cq: self }
    }

    /// One completion if one is ready.
    #[inline]
    pub fn poll_one(&mut self) -> Option<Completion> {
        let got = self.inner.poll_one_seq()?;
        Some(self.wrap(got))
    }

    /// One completion with the raw 64 bytes of its CQE (research access).
    pub fn poll_raw(&mut self) -> Option<(Completion, [u8; 64])> {
        let (wc, raw, seq) = self.inner.poll_raw_seq()?;
        Some((self.wrap((wc, seq)), raw))
    }

    /// The raw bytes of the CQE at consumer index `ci` (research access; any slot, polled or
    /// not).
    pub fn cqe_bytes(&self, ci: u32) -> [u8; 64] {
        self.inner.cqe_bytes(ci)
    }

    /// The consumer index (CQEs consumed so far).
    pub fn consumer_index(&self) -> u32 {
        self.inner.consumer_index()
    }

    /// Waits up to `timeout` for one completion: polls, and when none is ready arms the CQ
    /// and sleeps on the completion EQ's interrupt (a stepped sim runs its world meanwhile).
    /// `Ok(None)` on timeout, or at once when a stepped sim has nothing left to do.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Completion>, VerbsError> {
        match self.inner.wait_seq(timeout)? {
            Some(got) => Ok(Some(self.wrap(got))),
            None => Ok(None),
        }
    }

    /// Waits for `n` completions, each within `timeout`, pushing them to `out`; returns how
    /// many arrived (fewer than `n` only on a timeout). Control-path convenience.
    pub fn wait_many(
        &mut self,
        n: usize,
        timeout: Duration,
        out: &mut Vec<Completion>,
    ) -> Result<usize, VerbsError> {
        let mut got = 0;
        while got < n {
            match self.wait(timeout)? {
                Some(c) => {
                    out.push(c);
                    got += 1;
                }
                None => break,
            }
        }
        Ok(got)
    }
}

/// The iterator [`Cq::poll`] returns.
#[derive(Debug)]
pub struct Poll<'cq> {
    cq: &'cq mut Cq,
}

impl Iterator for Poll<'_> {
    type Item = Completion;

    #[inline]
    fn next(&mut self) -> Option<Completion> {
        self.cq.poll_one()
    }
}

/// One polled completion: what completed and how, and the proof that the NIC is done with
/// its WQE (hand it to [`crate::Qp::reclaim`] to get the WQE's buffers back). Not `Clone`,
/// and only a [`Cq`] makes one.
pub struct Completion {
    wc: WorkCompletion,
    cqn: u32,
    /// The CQ's identity across devices (CQ numbers repeat between NICs): the address of its
    /// driver consumer state (`QpTable`), which every QP on the CQ keeps alive, so it cannot
    /// be reused while a QP could compare against it.
    cq_id: usize,
    /// The CQ's consumer count once this completion's CQE was consumed (driver
    /// `QpTable::consumed`), taken while the poll held the consumer side.
    seq: u64,
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("wc", &self.wc)
            .field("cqn", &self.cqn)
            .field("seq", &self.seq)
            .finish()
    }
}

impl fmt::Display for Completion {
    /// `wr_id 7: RDMA_READ SUCCESS 64 bytes on QP 0x2` or the error with its cause and fix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wr_id {}: {:?} {} ({} bytes) on QP {:#x}",
            self.wc.wr_id(),
            self.wc.opcode(),
            self.wc.status(),
            self.wc.byte_len(),
            self.wc.qpn()
        )
    }
}

impl Completion {
    /// The `wr_id` of the work request.
    pub fn wr_id(&self) -> u64 {
        self.wc.wr_id()
    }

    /// Success, or the CQE syndrome (its `Display` names it and gives the cause and fix).
    pub fn status(&self) -> WcStatus {
        self.wc.status()
    }

    /// True on success.
    pub fn is_ok(&self) -> bool {
        self.wc.is_ok()
    }

    /// What completed.
    pub fn opcode(&self) -> WcOpcode {
        self.wc.opcode()
    }

    /// Bytes received (receives; UD includes the 40-byte GRH), read (READ) or 8 (atomics).
    pub fn byte_len(&self) -> u32 {
        self.wc.byte_len()
    }

    /// The immediate data, if [`Completion::flags`] has `WITH_IMM`.
    pub fn imm(&self) -> Option<u32> {
        self.wc
            .flags()
            .contains(WcFlags::WITH_IMM)
            .then_some(self.wc.imm())
    }

    /// The local QP number.
    pub fn qpn(&self) -> u32 {
        self.wc.qpn()
    }

    /// The remote QP number (receives).
    pub fn src_qp(&self) -> u32 {
        self.wc.src_qp()
    }

    /// Flags (immediate, GRH, solicited, receive side).
    pub fn flags(&self) -> WcFlags {
        self.wc.flags()
    }

    /// The CQ it came from.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Whether it completes a receive (rather than a send-queue WQE).
    pub fn is_recv(&self) -> bool {
        self.wc.flags().contains(WcFlags::RECV) || self.wc.opcode().is_recv()
    }

    /// The decoded completion as the driver returns it (a plain copy; the proof stays here).
    pub fn work_completion(&self) -> WorkCompletion {
        self.wc
    }

    pub(crate) fn cq_id(&self) -> usize {
        self.cq_id
    }

    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }
}

// A child of this module so that it can drive the driver's poll and `Cq::wrap` separately.
#[cfg(test)]
#[path = "stale_completion_tests.rs"]
mod stale_completion_tests;
