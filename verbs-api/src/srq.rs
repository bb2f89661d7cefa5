//! Shared receive queues in the safe API: [`Srq`], its receives leased until their
//! completion, whichever QP consumes them, and the QPs built on it
//! ([`crate::QpBuilder::srq`]).
//!
//! Owns: [`Srq`], [`SrqOptions`] and the table of buffers parked by SRQ receives, indexed by
//! the SRQ WQE's index (which its completion's `wqe_index` names). SRQ completions arrive in
//! any order across QPs, so a completion releases exactly the slot it names (never "every
//! slot before it", as a QP's own queue does). A buffer parked at index `i` leaves the table
//! when a completion of `i` is reclaimed here, when index `i` is reused (the driver reuses an
//! index only once its completion was polled: rdma-core's free list), or when the SRQ is
//! destroyed (after every QP on it: they hold it). A completion is accepted only from a QP
//! attached to this SRQ, through the SRQ's CQ, and only if it was polled after the request
//! now at its slot was posted (the CQ's consumer count, as `outstanding` numbers them), which
//! is why every QP on one SRQ reports its receives to the SRQ's CQ.
//!
//! Must not: write WQEs or ring doorbells (the driver's `srq`), or release a parked buffer
//! without one of the proofs above.
//! Sources: libibverbs `ibv_create_srq`, `ibv_modify_srq` (`IBV_SRQ_LIMIT`),
//! `ibv_query_srq`, `ibv_post_srq_recv`, `ibv_destroy_srq` (EBUSY while QPs use it: the
//! kernel's `ib_destroy_srq_user` checks `usecnt`).

use std::sync::{Arc, Mutex, PoisonError};

use crate::cq::{Completion, Cq};
use crate::driver::poll::QpTable;
use crate::driver::post;
use crate::driver::srq::{Srq as DriverSrq, SrqAttr};
use crate::error::VerbsError;
use crate::lower;
use crate::pd::Pd;
use crate::wr::{RecvWr, SgeList};

/// What an SRQ is created with (ibverbs `struct ibv_srq_attr`).
pub type SrqOptions = SrqAttr;

#[derive(Debug, Default)]
struct Slot {
    bufs: SgeList,
    posted_at: u64,
}

#[derive(Debug)]
struct Table {
    slots: Box<[Slot]>,
    attached: Vec<u32>,
}

#[derive(Debug)]
pub(crate) struct SrqCore {
    // Declared first: DESTROY_RMP (the NIC stops using its WQEs) before the leases drop.
    inner: DriverSrq,
    table: Mutex<Table>,
    cqn: u32,
    cq_table: Arc<QpTable>,
    max_sge: usize,
    _pd: Pd,
}

impl SrqCore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn driver(&self) -> &DriverSrq {
        &self.inner
    }

    pub(crate) fn cqn(&self) -> u32 {
        self.cqn
    }

    pub(crate) fn cq_id(&self) -> usize {
        Arc::as_ptr(&self.cq_table) as usize
    }

    /// QP `qpn` takes its receives from this SRQ now.
    pub(crate) fn attach(&self, qpn: u32) {
        self.lock().attached.push(qpn);
    }
}

/// A QP's hold on its SRQ: keeps it alive, and detaches the QP when dropped (after the QP's
/// DESTROY_QP: it is declared after the driver QP).
#[derive(Debug)]
pub(crate) struct Attachment {
    pub(crate) core: Arc<SrqCore>,
    pub(crate) qpn: u32,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.core.lock().attached.retain(|&q| q != self.qpn);
    }
}

/// A shared receive queue. Posting and reclaiming take `&self` (a lock inside: several QPs'
/// pollers may reclaim from one SRQ).
#[derive(Debug)]
pub struct Srq {
    core: Arc<SrqCore>,
}

impl Srq {
    /// `ibv_create_srq` in `pd`; the QPs built on it must report their receives to
    /// `recv_cq`.
    pub fn new(pd: &Pd, recv_cq: &Cq, opts: &SrqOptions) -> Result<Self, VerbsError> {
        let inner = DriverSrq::create(pd.driver(), opts)?;
        let n = inner.max_wr() as usize + 1;
        let max_sge = inner.max_sge().min(crate::wr::MAX_SGES);
        Ok(Self {
            core: Arc::new(SrqCore {
                inner,
                table: Mutex::new(Table {
                    slots: (0..n).map(|_| Slot::default()).collect(),
                    attached: Vec::new(),
                }),
                cqn: recv_cq.cqn(),
                cq_table: recv_cq.table().clone(),
                max_sge,
                _pd: pd.clone(),
            }),
        })
    }

    pub(crate) fn core(&self) -> &Arc<SrqCore> {
        &self.core
    }

    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.core.inner.srqn()
    }

    /// Receives it holds at once.
    pub fn max_wr(&self) -> u32 {
        self.core.inner.max_wr()
    }

    /// Receives posted and not yet reclaimed.
    pub fn recvs_outstanding(&self) -> usize {
        self.core
            .lock()
            .slots
            .iter()
            .filter(|s| !s.bufs.is_empty())
            .count()
    }

    /// `ibv_post_srq_recv`: the buffers stay parked (leased to the NIC) until a completion of
    /// this receive is reclaimed here.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), VerbsError> {
        if wr.sges.any_shared() {
            return Err(VerbsError::SharedBufferWritten { op: "a receive" });
        }
        let (sges, n) = lower::sges(&wr.sges)?;
        if n > self.core.max_sge {
            return Err(VerbsError::TooManySges {
                sges: n,
                max: self.core.max_sge,
            });
        }
        let mut t = self.core.lock();
        let seq = self.core.cq_table.consumed();
        // SAFETY: the SGEs are of the leases `wr` owns (none shared: checked above), parked in
        // the slot the WQE took right after the post, under the lock, until its completion.
        let index = unsafe {
            self.core.inner.post_srq_recv(&post::RecvWr {
                wr_id: wr.wr_id,
                sges: sges.get(..n).unwrap_or(&[]),
            })
        }?;
        let len = t.slots.len();
        if let Some(s) = t.slots.get_mut(usize::from(index) % len) {
            // What was parked here completed (the driver reused the index): dropped.
            *s = Slot {
                bufs: wr.sges,
                posted_at: seq,
            };
        }
        Ok(())
    }

    /// Posts several receives, in order, stopping at the first refused one (those before it
    /// are posted): `Err` names it.
    pub fn post_recv_list<const N: usize>(&self, wrs: [RecvWr; N]) -> Result<(), VerbsError> {
        for wr in wrs {
            self.post_recv(wr)?;
        }
        Ok(())
    }

    /// Consumes a receive completion of a QP on this SRQ and hands back its buffers.
    ///
    /// Errors: [`VerbsError::ForeignCompletion`] for a completion that is not a receive of a
    /// QP attached to this SRQ through its CQ; [`VerbsError::StaleCompletion`] for one polled
    /// before the receive now at its slot was posted. Neither releases anything.
    pub fn reclaim(&self, c: Completion) -> Result<SgeList, VerbsError> {
        let mut t = self.core.lock();
        if !c.is_recv()
            || c.cq_id() != self.core.cq_id()
            || c.cqn() != self.core.cqn
            || !t.attached.contains(&c.qpn())
        {
            return Err(VerbsError::ForeignCompletion {
                wc_qpn: c.qpn(),
                qpn: self.srqn(),
            });
        }
        let len = t.slots.len();
        let index = usize::from(c.work_completion().wqe_index()) % len;
        let Some(s) = t.slots.get_mut(index) else {
            return Ok(SgeList::new());
        };
        if s.bufs.is_empty() {
            return Ok(SgeList::new());
        }
        if s.posted_at >= c.seq() {
            return Err(VerbsError::StaleCompletion {
                qpn: c.qpn(),
                queue: "SRQ receive",
                seq: c.seq(),
                posted_at: s.posted_at,
            });
        }
        Ok(s.bufs.take())
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): one SRQ_LIMIT async event when
    /// fewer than `limit` receives are posted, then disarmed until armed again.
    pub fn arm_limit(&self, limit: u32) -> Result<(), VerbsError> {
        Ok(self.core.inner.arm_limit(limit)?)
    }

    /// `ibv_query_srq`: `max_wr`, `max_sge` and the limit still armed (0 once it fired).
    pub fn query(&self) -> Result<SrqOptions, VerbsError> {
        Ok(self.core.inner.query()?)
    }

    /// `ibv_destroy_srq`: refused while QPs are built on it ([`VerbsError::SrqInUse`], the
    /// SRQ back), as the kernel refuses it with EBUSY.
    pub fn destroy(self) -> Result<(), (Self, VerbsError)> {
        let qps = self.core.lock().attached.len();
        if qps > 0 || Arc::strong_count(&self.core) > 1 {
            let srqn = self.srqn();
            return Err((self, VerbsError::SrqInUse { srqn, qps }));
        }
        drop(self);
        Ok(())
    }
}
