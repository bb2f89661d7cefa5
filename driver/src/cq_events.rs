//! Per-CQ completion events: who an EQ's completion EQE belongs to, and servicing the
//! completion EQs (the work the kernel's interrupt handler does).
//!
//! Owns: [`CqEventSink`] (one CQ's event state: its arm sequence number, events taken and not
//! acknowledged, and the channel its events go to), [`CqRouter`] (CQ number to sink) and
//! [`service`] (drain each completion vector's interrupt eventfd, take the EQ's EQEs, hand
//! each completion EQE to the CQ its `cqn` names, re-arm the EQ). Must not: poll CQs, arm
//! CQs (the `Cq` does) or block (the channel's wait does).
//!
//! Every completion EQE carries the CQN (`struct mlx5_eqe_comp.cqn`, kernel `device.h`); the
//! kernel's `mlx5_eq_comp_int` (`drivers/net/ethernet/mellanox/mlx5/core/eq.c`) looks the CQ up
//! by it (`mlx5_eq_cq_get`) and calls that CQ's completion handler, which for a verbs CQ
//! queues the event on the CQ's completion channel (`ib_uverbs_comp_handler`). The same here:
//! an event is delivered to its own CQ's channel and can never be consumed by another CQ's
//! waiter. The servicing code is the same for every backend: it reads the vector's interrupt
//! eventfd (VFIO's MSI-X eventfd, or the sim's), never a backend-specific hook.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::backend::Backend;
use crate::comp_channel::ChannelCore;
use crate::eq::CompletionEq;
use crate::error::{DriverError, Result};

/// One CQ's event state, shared by the `Cq`, the router and the events a channel holds.
#[derive(Debug)]
pub struct CqEventSink {
    cqn: u32,
    /// The MSI-X vector of the CQ's EQ.
    vector: u16,
    /// rdma-core `mlx5_cq.arm_sn`: incremented once per event taken (`mlx5_cq_event`), its
    /// low two bits go in every arm doorbell.
    arm_sn: AtomicU32,
    /// Events taken (`get_cq_event`) and not yet acknowledged (`ack_cq_events`).
    unacked: AtomicU32,
    /// True when the CQ was created on an application's channel.
    bound: bool,
    /// Where events go: the application's channel, or the private one `Cq::wait` makes.
    target: Mutex<Option<Arc<ChannelCore>>>,
}

impl CqEventSink {
    pub(crate) fn new(cqn: u32, vector: u16, channel: Option<Arc<ChannelCore>>) -> Self {
        Self {
            cqn,
            vector,
            arm_sn: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
            bound: channel.is_some(),
            target: Mutex::new(channel),
        }
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The MSI-X vector the CQ's events raise.
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// The arm sequence number (events taken so far).
    pub fn arm_sn(&self) -> u32 {
        self.arm_sn.load(Ordering::Acquire)
    }

    /// Events taken and not acknowledged.
    pub fn unacked(&self) -> u32 {
        self.unacked.load(Ordering::Acquire)
    }

    /// True when the CQ reports to an application's completion channel.
    pub fn bound(&self) -> bool {
        self.bound
    }

    pub(crate) fn target(&self) -> Option<Arc<ChannelCore>> {
        self.target
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Installs the channel events go to when none is set yet (`Cq::wait`'s private one).
    pub(crate) fn set_target_if_none(
        &self,
        make: impl FnOnce() -> Result<Arc<ChannelCore>>,
    ) -> Result<Arc<ChannelCore>> {
        let mut t = self.target.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = t.as_ref() {
            return Ok(c.clone());
        }
        let c = make()?;
        *t = Some(c.clone());
        Ok(c)
    }

    /// An event for this CQ arrived: queue it on its channel. With no channel yet (nobody
    /// armed through a channel or a wait), it is dropped, as the kernel drops the event of a
    /// CQ without a completion handler.
    fn deliver(self: &Arc<Self>) {
        if let Some(ch) = self.target() {
            ch.push(Arc::downgrade(self));
        }
    }

    /// The event was taken: `mlx5_cq_event` (`arm_sn++`) and one more to acknowledge.
    pub(crate) fn took(&self) {
        self.arm_sn.fetch_add(1, Ordering::AcqRel);
        self.unacked.fetch_add(1, Ordering::AcqRel);
    }

    /// Acknowledges `n` taken events (libibverbs `ibv_ack_cq_events`).
    ///
    /// Errors: [`DriverError::AckTooMany`] when fewer than `n` are outstanding (nothing is
    /// acknowledged then).
    pub(crate) fn ack(&self, n: u32) -> Result<()> {
        self.unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_sub(n))
            .map(|_| ())
            .map_err(|taken| DriverError::AckTooMany {
                cqn: self.cqn,
                acked: n,
                taken,
            })
    }
}

/// CQ number → the CQ's sink, for the CQs of one HCA.
#[derive(Debug, Default)]
pub(crate) struct CqRouter {
    map: Mutex<HashMap<u32, Weak<CqEventSink>>>,
}

impl CqRouter {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Weak<CqEventSink>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn insert(&self, sink: &Arc<CqEventSink>) {
        self.lock().insert(sink.cqn, Arc::downgrade(sink));
    }

    /// Removes `sink`'s entry (only if the CQN still maps to it).
    pub(crate) fn remove(&self, sink: &Arc<CqEventSink>) {
        let mut m = self.lock();
        if m.get(&sink.cqn)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(sink)))
        {
            m.remove(&sink.cqn);
        }
    }

    /// Delivers a completion event to CQ `cqn`; an unknown or destroyed CQ's event is dropped
    /// (an EQE still in the ring after DESTROY_CQ).
    fn dispatch(&self, cqn: u32) {
        let sink = self.lock().get(&cqn).and_then(Weak::upgrade);
        match sink {
            Some(s) => s.deliver(),
            None => tracing::debug!(cqn, "completion event for no live CQ dropped"),
        }
    }
}

/// Clears vector `vector`'s interrupt eventfd without blocking (it may be a blocking fd).
/// Returns true if it was signalled.
pub(crate) fn drain_irq(backend: &dyn Backend, vector: u16) -> bool {
    let Some(fd) = backend.irq_fd(vector) else {
        return false;
    };
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    if matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
        let mut b = [0u8; 8];
        return matches!(nix::unistd::read(fd, &mut b), Ok(8));
    }
    false
}

/// Services every completion EQ: clears its vector's interrupt first (an EQE written after
/// the poll below re-raises it when the EQ is re-armed), takes its EQEs, delivers each to its
/// CQ and re-arms the EQ. Returns the events taken. Safe to call from any thread at any time.
pub(crate) fn service(backend: &dyn Backend, eqs: &[CompletionEq], router: &CqRouter) -> usize {
    let mut n = 0;
    for eq in eqs {
        let fired = drain_irq(backend, eq.vector());
        n += eq.service(fired, |cqn| router.dispatch(cqn));
    }
    n
}
