//! Completion channels (libibverbs `ibv_comp_channel`): a pollable fd that becomes readable
//! when a CQ bound to it has an event, `get_cq_event` returning the CQ whose event fired, and
//! the blocking wait both channels (completion and async) use.
//!
//! Owns: [`CompletionChannel`], [`CqEvent`], `ChannelCore` (an eventfd signalled while events
//! are queued, and an epoll instance holding it and the interrupt eventfds of the completion
//! vectors its CQs use) and [`wait_ready`]. Must not: poll CQs or EQs itself (the HCA's
//! service does, `cq_events.rs`), or start threads.
//!
//! Why an epoll fd: the application waits on one fd; an event arrives as an MSI-X interrupt
//! (an eventfd the backend signals: VFIO's, or the sim's) that someone must turn into "this
//! CQ's channel has an event". The kernel does it in its interrupt handler. Here the
//! channel's fd is an epoll instance over its own eventfd and the vectors' interrupt
//! eventfds, so it becomes readable when an interrupt is pending or an event is queued, with
//! no thread in between; `get_cq_event` then services the EQs (every waiter may), delivering
//! each event to its own CQ's channel. A channel can therefore be readable for another
//! channel's interrupt: `try_get_cq_event` then returns `None`, as a nonblocking
//! `ibv_get_cq_event` returns EAGAIN. Semantics: libibverbs `verbs.c`
//! (`ibv_get_cq_event`, `ibv_ack_cq_events`; man ibv_get_cq_event(3): several CQs may share a
//! channel, each event must be acknowledged, `ibv_destroy_cq` waits for the acks — here a
//! typed error instead).

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::backend::{Backend, Progress};
use crate::cq_events::CqEventSink;
use crate::error::{DriverError, Result};
use crate::hca::Hca;

/// An eventfd and an epoll instance holding it: what both kinds of channel wait on.
pub(crate) struct Pollable {
    pub(crate) efd: Arc<EventFd>,
    pub(crate) epoll: Epoll,
    watched: Mutex<Vec<u16>>,
}

impl fmt::Debug for Pollable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pollable").finish_non_exhaustive()
    }
}

fn chan_err(what: &'static str) -> impl FnOnce(nix::Error) -> DriverError {
    move |source| DriverError::EventChannel { what, source }
}

impl Pollable {
    pub(crate) fn new() -> Result<Self> {
        let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(chan_err("creating a channel's eventfd"))?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(chan_err("creating a channel's epoll instance"))?;
        epoll
            .add(&efd, EpollEvent::new(EpollFlags::EPOLLIN, u64::MAX))
            .map_err(chan_err("adding a channel's eventfd to its epoll"))?;
        Ok(Self {
            efd: Arc::new(efd),
            epoll,
            watched: Mutex::new(Vec::new()),
        })
    }

    /// Adds MSI-X `vector`'s interrupt eventfd to the epoll set (once).
    pub(crate) fn watch_vector(&self, backend: &dyn Backend, vector: u16) -> Result<()> {
        let mut w = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if w.contains(&vector) {
            return Ok(());
        }
        let fd = backend
            .irq_fd(vector)
            .ok_or(bypass_seam::BackendError::NoVector {
                vector,
                available: backend.irq_vectors(),
            })?;
        self.epoll
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, u64::from(vector)))
            .map_err(chan_err("adding an interrupt eventfd to a channel's epoll"))?;
        w.push(vector);
        Ok(())
    }

    /// Signals the eventfd (an event is queued).
    pub(crate) fn signal(&self) {
        // EAGAIN only if the counter would overflow: it is signalled anyway.
        let _ = self.efd.write(1);
    }

    /// Clears the eventfd (nothing is queued any more).
    pub(crate) fn clear(&self) {
        let _ = self.efd.read();
    }

    /// Sleeps until the epoll set is readable or `timeout` passes.
    fn sleep(&self, timeout: Duration) -> Result<()> {
        let ms = u16::try_from(timeout.as_millis().saturating_add(1)).unwrap_or(u16::MAX);
        let mut ev = [EpollEvent::empty()];
        match self.epoll.wait(&mut ev, EpollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(chan_err("waiting on a channel's epoll")(e)),
        }
    }
}

/// Waits up to `timeout` for `try_get` to return something: a stepped backend is stepped
/// (nothing happens otherwise; `Ok(None)` once it is idle), any other sleeps on `pollable`'s
/// epoll set between tries. `Ok(None)` on timeout.
pub(crate) fn wait_ready<T>(
    backend: &dyn Backend,
    pollable: &Pollable,
    timeout: Duration,
    mut try_get: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = try_get()? {
            return Ok(Some(v));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        if backend.is_stepped() {
            if backend.progress() == Progress::Idle {
                return try_get();
            }
        } else {
            pollable.sleep(left)?;
        }
    }
}

/// The shared part of a completion channel: its fds and the events queued on it.
pub(crate) struct ChannelCore {
    hca: Arc<Hca>,
    fds: Pollable,
    queue: Mutex<VecDeque<Weak<CqEventSink>>>,
}

impl fmt::Debug for ChannelCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelCore").finish_non_exhaustive()
    }
}

impl ChannelCore {
    pub(crate) fn new(hca: &Arc<Hca>) -> Result<Arc<Self>> {
        Ok(Arc::new(Self {
            hca: hca.clone(),
            fds: Pollable::new()?,
            queue: Mutex::new(VecDeque::new()),
        }))
    }

    pub(crate) fn watch_vector(&self, vector: u16) -> Result<()> {
        self.fds.watch_vector(&**self.hca.dev(), vector)
    }

    /// Queues an event of the CQ `sink` and makes the fd readable.
    pub(crate) fn push(&self, sink: Weak<CqEventSink>) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        q.push_back(sink);
        self.fds.signal();
    }

    /// Takes the oldest event of a live CQ; the fd stops being readable once none is queued.
    fn pop(&self) -> Option<Arc<CqEventSink>> {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut got = None;
        while let Some(w) = q.pop_front() {
            if let Some(s) = w.upgrade() {
                got = Some(s);
                break;
            }
        }
        if q.is_empty() {
            self.fds.clear();
        }
        let s = got?;
        s.took();
        Some(s)
    }

    /// Services the HCA's completion EQs, then takes an event if one is queued.
    pub(crate) fn try_get(&self) -> Result<Option<Arc<CqEventSink>>> {
        self.hca.service_completions();
        Ok(self.pop())
    }

    /// Waits up to `timeout` for an event ([`wait_ready`]).
    pub(crate) fn get(&self, timeout: Duration) -> Result<Option<Arc<CqEventSink>>> {
        wait_ready(&**self.hca.dev(), &self.fds, timeout, || self.try_get())
    }
}

/// A completion channel (libibverbs `ibv_comp_channel`): CQs created on it report their
/// events here. Its fd ([`AsFd`]) is readable for epoll/poll (and so for tokio's `AsyncFd`)
/// when an event may be ready; [`CompletionChannel::try_get_cq_event`] then takes it.
#[derive(Debug, Clone)]
pub struct CompletionChannel {
    core: Arc<ChannelCore>,
}

impl CompletionChannel {
    /// A channel on `hca` (libibverbs `ibv_create_comp_channel`).
    ///
    /// Errors: [`DriverError::EventChannel`] when the eventfd or epoll instance cannot be
    /// made.
    pub fn new(hca: &Arc<Hca>) -> Result<Self> {
        Ok(Self {
            core: ChannelCore::new(hca)?,
        })
    }

    pub(crate) fn core(&self) -> &Arc<ChannelCore> {
        &self.core
    }

    /// True when `hca` is the HCA this channel was made on.
    pub fn is_on(&self, hca: &Arc<Hca>) -> bool {
        Arc::ptr_eq(&self.core.hca, hca)
    }

    /// Takes one event without blocking (a nonblocking `ibv_get_cq_event`): `None` when no
    /// event is ready (EAGAIN). The CQ is not armed any more: arm it again for the next one,
    /// and acknowledge the event ([`crate::cq::Cq::ack_events`]).
    pub fn try_get_cq_event(&self) -> Result<Option<CqEvent>> {
        Ok(self.core.try_get()?.map(|sink| CqEvent { sink }))
    }

    /// Waits up to `timeout` for an event (`ibv_get_cq_event`); `None` on timeout, or at once
    /// when a stepped sim has nothing left to do.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<Option<CqEvent>> {
        Ok(self.core.get(timeout)?.map(|sink| CqEvent { sink }))
    }
}

impl AsFd for CompletionChannel {
    /// The fd to put in epoll (an epoll instance itself: see the module docs).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.core.fds.epoll.0.as_fd()
    }
}

/// One completion event: which CQ it fired for.
#[derive(Debug, Clone)]
pub struct CqEvent {
    sink: Arc<CqEventSink>,
}

impl CqEvent {
    /// The CQ number of the CQ whose event fired.
    pub fn cqn(&self) -> u32 {
        self.sink.cqn()
    }

    /// True if the event is for `cq`.
    pub fn is_for(&self, cq: &crate::cq::Cq) -> bool {
        Arc::ptr_eq(&self.sink, cq.events())
    }
}
