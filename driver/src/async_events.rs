//! Asynchronous events for the application (libibverbs `ibv_get_async_event`): each async
//! EQE decoded into a typed [`AsyncEventKind`] naming the QP, CQ, SRQ or port it concerns,
//! queued on the HCA's one async-event channel with a pollable fd, taken and acknowledged.
//!
//! Owns: [`AsyncEventKind`] (the decoding), [`AsyncEvents`] (the channel handle),
//! [`AsyncEventRecord`] (one taken event, to acknowledge) and `AsyncCore` (the queue and fds,
//! one per HCA). Must not: answer page requests or complete commands (`Hca::process_events`
//! and the command queue keep doing that; page requests never reach the application).
//!
//! Sources: EQE types and layouts from the kernel's `include/linux/mlx5/device.h`
//! (`enum mlx5_event`: PATH_MIG 0x01, COMM_EST 0x02, SQ_DRAINED 0x03, CQ_ERROR 0x04,
//! WQ_CATAS_ERROR 0x05, PATH_MIG_FAILED 0x07, INTERNAL_ERROR 0x08, PORT_CHANGE 0x09,
//! WQ_INVAL_REQ_ERROR 0x10, WQ_ACCESS_ERROR 0x11, SRQ_CATAS_ERROR 0x12, SRQ_LAST_WQE 0x13,
//! SRQ_RQ_LIMIT 0x14; `struct mlx5_eqe_qp_srq`, `mlx5_eqe_cq_err`, `mlx5_eqe_port_state`;
//! `MLX5_PORT_CHANGE_SUBTYPE_*`), their verbs meaning from `drivers/infiniband/hw/mlx5`
//! (`mlx5_ib_qp_event`, `mlx5_ib_cq_event`, `srq_event`, `mlx5_ib_handle_event`), the
//! channel semantics from libibverbs `verbs.c` / man ibv_get_async_event(3): one async fd
//! per context, every event taken must be acknowledged.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bypass_hw::eqe::{EventType, MLX5_PORT_CHANGE_SUBTYPE_ACTIVE, MLX5_PORT_CHANGE_SUBTYPE_DOWN};

use crate::comp_channel::{Pollable, wait_ready};
use crate::eq::AsyncEvent;
use crate::error::Result;
use crate::hca::Hca;

/// What an asynchronous event is about (the verbs name of each in its doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEventKind {
    /// CQ error: overrun (syndrome 1) or access error (`IBV_EVENT_CQ_ERR`).
    CqError {
        /// The CQ.
        cqn: u32,
        /// `MLX5_CQ_ERROR_SYNDROME_*` (1: overrun, 2: access violation).
        syndrome: u8,
    },
    /// Work queue catastrophic error: the QP went to ERR (`IBV_EVENT_QP_FATAL`).
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// Invalid request local work queue error (`IBV_EVENT_QP_REQ_ERR`).
    QpRequestError {
        /// The QP.
        qpn: u32,
    },
    /// Local access violation work queue error (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError {
        /// The QP.
        qpn: u32,
    },
    /// Communication established: the first packet arrived in RTR (`IBV_EVENT_COMM_EST`).
    CommEstablished {
        /// The QP.
        qpn: u32,
    },
    /// The send queue drained in SQD (`IBV_EVENT_SQ_DRAINED`).
    SqDrained {
        /// The QP.
        qpn: u32,
    },
    /// Last WQE reached on a QP attached to an SRQ (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached {
        /// The QP.
        qpn: u32,
    },
    /// Path migrated (`IBV_EVENT_PATH_MIG`).
    PathMigrated {
        /// The QP.
        qpn: u32,
    },
    /// Path migration failed (`IBV_EVENT_PATH_MIG_ERR`).
    PathMigrationFailed {
        /// The QP.
        qpn: u32,
    },
    /// The SRQ fell below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached {
        /// The SRQ.
        srqn: u32,
    },
    /// SRQ catastrophic error (`IBV_EVENT_SRQ_ERR`).
    SrqFatal {
        /// The SRQ.
        srqn: u32,
    },
    /// The port went active (`IBV_EVENT_PORT_ACTIVE`).
    PortActive {
        /// The port (1-based).
        port: u8,
    },
    /// The port went down (`IBV_EVENT_PORT_ERR`).
    PortDown {
        /// The port (1-based).
        port: u8,
    },
    /// Another port change (LID, PKEY, GID, client reregister ...).
    PortChange {
        /// The port (1-based).
        port: u8,
        /// `MLX5_PORT_CHANGE_SUBTYPE_*`.
        sub_type: u8,
    },
    /// The device hit an internal error (`IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal,
    /// An event type this driver does not name.
    Other {
        /// `mlx5_eqe.type`.
        event_type: u8,
        /// `mlx5_eqe.sub_type`.
        sub_type: u8,
    },
}

impl AsyncEventKind {
    /// Decodes an EQE copied out of the async EQ.
    pub fn decode(ev: &AsyncEvent) -> Self {
        let mut e = <bypass_hw::eqe::Eqe as zerocopy::FromZeros>::new_zeroed();
        e.data = ev.data;
        let qpn = e.qp_srq().qp_srq_n();
        let port = e.port_state().port();
        match ev.event_type {
            EventType::CQ_ERROR => Self::CqError {
                cqn: e.cq_err().cqn(),
                syndrome: e.cq_err().syndrome(),
            },
            EventType::WQ_CATAS_ERROR => Self::QpFatal { qpn },
            EventType::WQ_INVAL_REQ_ERROR => Self::QpRequestError { qpn },
            EventType::WQ_ACCESS_ERROR => Self::QpAccessError { qpn },
            EventType::COMM_EST => Self::CommEstablished { qpn },
            EventType::SQ_DRAINED => Self::SqDrained { qpn },
            EventType::LAST_WQE => Self::QpLastWqeReached { qpn },
            EventType::PATH_MIG => Self::PathMigrated { qpn },
            EventType::PATH_MIG_FAILED => Self::PathMigrationFailed { qpn },
            EventType::SRQ_LIMIT => Self::SrqLimitReached { srqn: qpn },
            EventType::SRQ_CATAS_ERROR => Self::SrqFatal { srqn: qpn },
            EventType::PORT_CHANGE => match ev.sub_type {
                MLX5_PORT_CHANGE_SUBTYPE_ACTIVE => Self::PortActive { port },
                MLX5_PORT_CHANGE_SUBTYPE_DOWN => Self::PortDown { port },
                sub_type => Self::PortChange { port, sub_type },
            },
            EventType::INTERNAL_ERROR => Self::DeviceFatal,
            t => Self::Other {
                event_type: t.0,
                sub_type: ev.sub_type,
            },
        }
    }
}

/// One HCA's async-event queue and fds (made once, at the first [`AsyncEvents::new`]).
pub(crate) struct AsyncCore {
    fds: Pollable,
    queue: Mutex<VecDeque<AsyncEventRecord>>,
    unacked: AtomicU32,
}

impl fmt::Debug for AsyncCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCore").finish_non_exhaustive()
    }
}

/// An event taken from the channel: acknowledge it with [`AsyncEvents::ack_async_event`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "every async event taken must be acknowledged (ack_async_event)"]
pub struct AsyncEventRecord {
    /// What it is about.
    pub kind: AsyncEventKind,
    /// The EQE as it came.
    pub raw: AsyncEvent,
}

/// The HCA's async-event channel (libibverbs `ibv_context.async_fd` with
/// `ibv_get_async_event` / `ibv_ack_async_event`). Every handle of one HCA shares one queue.
/// Its fd ([`AsFd`], an epoll instance over vector 0's interrupt eventfd and the channel's
/// own eventfd, as for completion channels) is readable when an event may be ready.
#[derive(Debug, Clone)]
pub struct AsyncEvents {
    hca: Arc<Hca>,
    core: Arc<AsyncCore>,
}

impl AsyncEvents {
    /// The async-event channel of `hca`.
    ///
    /// Errors: [`crate::DriverError::EventChannel`] when its fds cannot be made.
    pub fn new(hca: &Arc<Hca>) -> Result<Self> {
        let core = hca.async_core(|| {
            let fds = Pollable::new()?;
            fds.watch_vector(&**hca.dev(), 0)?;
            Ok(Arc::new(AsyncCore {
                fds,
                queue: Mutex::new(VecDeque::new()),
                unacked: AtomicU32::new(0),
            }))
        })?;
        hca.cmdq().set_event_notify(core.fds.efd.clone());
        // Events kept before the channel existed are ready now.
        core.fds.signal();
        Ok(Self {
            hca: hca.clone(),
            core,
        })
    }

    fn take(&self) -> Result<Option<AsyncEventRecord>> {
        // Cleared before the events are taken, so that one kept after it signals again.
        self.core.fds.clear();
        let evs = self.hca.process_events()?;
        let mut q = self
            .core
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        q.extend(evs.into_iter().map(|raw| AsyncEventRecord {
            kind: AsyncEventKind::decode(&raw),
            raw,
        }));
        let got = q.pop_front();
        if !q.is_empty() {
            self.core.fds.signal();
        }
        if got.is_some() {
            self.core.unacked.fetch_add(1, Ordering::AcqRel);
        }
        Ok(got)
    }

    /// Takes one event without blocking (nonblocking `ibv_get_async_event`); `None`: none
    /// ready. Page requests seen on the way are answered, never returned.
    pub fn try_get_async_event(&self) -> Result<Option<AsyncEventRecord>> {
        self.take()
    }

    /// Waits up to `timeout` for an event (`ibv_get_async_event`); `None` on timeout, or at
    /// once when a stepped sim has nothing left to do.
    pub fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEventRecord>> {
        wait_ready(&**self.hca.dev(), &self.core.fds, timeout, || self.take())
    }

    /// Acknowledges a taken event (`ibv_ack_async_event`).
    pub fn ack_async_event(&self, event: AsyncEventRecord) {
        let _ = event;
        let _ = self
            .core
            .unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_sub(1));
    }

    /// Events taken and not yet acknowledged.
    pub fn unacked(&self) -> u32 {
        self.core.unacked.load(Ordering::Acquire)
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.core.fds.epoll.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::eqe::{EQE_DATA_LEN, Eqe, MLX5_EVENT_QUEUE_TYPE_QP};
    use zerocopy::FromZeros;

    fn qp_eqe(t: EventType, n: u32) -> AsyncEvent {
        let mut e = Eqe::new_zeroed();
        e.qp_srq_mut().queue_type = MLX5_EVENT_QUEUE_TYPE_QP;
        // The number's top byte is not part of it (24 bits).
        e.qp_srq_mut().qp_srq_n.set(0xff00_0000 | n);
        AsyncEvent {
            event_type: t,
            sub_type: 0,
            data: e.data,
        }
    }

    #[test]
    fn qp_and_srq_events_decode_from_their_prm_types() {
        // Types as the kernel's `enum mlx5_event` numbers them.
        assert_eq!(EventType::SQ_DRAINED.0, 0x03);
        assert_eq!(EventType::LAST_WQE.0, 0x13);
        assert_eq!(EventType::SRQ_LIMIT.0, 0x14);
        assert_eq!(EventType::WQ_CATAS_ERROR.0, 0x05);
        let cases = [
            (
                EventType::WQ_CATAS_ERROR,
                AsyncEventKind::QpFatal { qpn: 0x12 },
            ),
            (
                EventType::WQ_INVAL_REQ_ERROR,
                AsyncEventKind::QpRequestError { qpn: 0x12 },
            ),
            (
                EventType::WQ_ACCESS_ERROR,
                AsyncEventKind::QpAccessError { qpn: 0x12 },
            ),
            (
                EventType::COMM_EST,
                AsyncEventKind::CommEstablished { qpn: 0x12 },
            ),
            (
                EventType::SQ_DRAINED,
                AsyncEventKind::SqDrained { qpn: 0x12 },
            ),
            (
                EventType::LAST_WQE,
                AsyncEventKind::QpLastWqeReached { qpn: 0x12 },
            ),
            (
                EventType::SRQ_LIMIT,
                AsyncEventKind::SrqLimitReached { srqn: 0x12 },
            ),
            (
                EventType::SRQ_CATAS_ERROR,
                AsyncEventKind::SrqFatal { srqn: 0x12 },
            ),
        ];
        for (t, want) in cases {
            assert_eq!(AsyncEventKind::decode(&qp_eqe(t, 0x12)), want, "{t:?}");
        }
        // The number sits in the last dword of the 28 data bytes (`mlx5_eqe_qp_srq`).
        let ev = qp_eqe(EventType::SRQ_LIMIT, 0x0a_bcde);
        assert_eq!(&ev.data[24..28], &[0xff, 0x0a, 0xbc, 0xde]);
        assert_eq!(
            AsyncEventKind::decode(&ev),
            AsyncEventKind::SrqLimitReached { srqn: 0x0a_bcde }
        );
    }

    #[test]
    fn cq_error_port_change_and_unknown_types_decode() {
        let mut e = Eqe::new_zeroed();
        e.cq_err_mut().cqn.set(7);
        e.cq_err_mut().syndrome = 1;
        let cq = AsyncEvent {
            event_type: EventType::CQ_ERROR,
            sub_type: 0,
            data: e.data,
        };
        assert_eq!(
            AsyncEventKind::decode(&cq),
            AsyncEventKind::CqError {
                cqn: 7,
                syndrome: 1
            }
        );
        let mut e = Eqe::new_zeroed();
        e.port_state_mut().set_port(1);
        assert_eq!(e.data[8], 0x10, "the port is in bits 7:4 of byte 8");
        for (sub, want) in [
            (
                MLX5_PORT_CHANGE_SUBTYPE_DOWN,
                AsyncEventKind::PortDown { port: 1 },
            ),
            (
                MLX5_PORT_CHANGE_SUBTYPE_ACTIVE,
                AsyncEventKind::PortActive { port: 1 },
            ),
            (
                7,
                AsyncEventKind::PortChange {
                    port: 1,
                    sub_type: 7,
                },
            ),
        ] {
            let ev = AsyncEvent {
                event_type: EventType::PORT_CHANGE,
                sub_type: sub,
                data: e.data,
            };
            assert_eq!(AsyncEventKind::decode(&ev), want);
        }
        let odd = AsyncEvent {
            event_type: EventType(0x3f),
            sub_type: 2,
            data: [0; EQE_DATA_LEN],
        };
        assert_eq!(
            AsyncEventKind::decode(&odd),
            AsyncEventKind::Other {
                event_type: 0x3f,
                sub_type: 2
            }
        );
    }
}
