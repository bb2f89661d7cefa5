//! Asynchronous events: `ibv_get_async_event` and `ibv_ack_async_event`.
//!
//! Owns: the translation of the driver's typed `AsyncEventKind` into `ibv_async_event`
//! (the event type and the QP, CQ or SRQ pointer the registry holds for its number), and
//! dropping the events of objects already destroyed.
//! Must not: decide what an event means (the driver decodes the EQE).
//!
//! Sources: rdma-core `libibverbs/device.c` (`ibv_get_async_event`: blocks unless
//! `async_fd` is non-blocking; `ibv_ack_async_event`), `verbs.h` `enum ibv_event_type`,
//! the kernel's `mlx5_ib_event` / `mlx5_ib_qp_event` (which EQE becomes which event).

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::PoisonError;
use std::time::Duration;

use bypass_driver::async_events::AsyncEventKind;

use crate::abi::{self, ibv_async_event, ibv_async_event_element, ibv_context};
use crate::context::Context;
use crate::ffi::{errno_of, guard, set_errno};
use crate::registry::{Kind, Registry};

/// The `ibv_async_event` of `k`.
fn translate(k: &AsyncEventKind, reg: &Registry) -> ibv_async_event {
    let qp = |n: u32, t| {
        (
            ibv_async_event_element {
                qp: reg.get(Kind::Qp, n),
            },
            t,
        )
    };
    let (element, event_type) = match *k {
        AsyncEventKind::CqError { cqn, .. } => (
            ibv_async_event_element {
                cq: reg.get(Kind::Cq, cqn),
            },
            abi::IBV_EVENT_CQ_ERR,
        ),
        AsyncEventKind::QpFatal { qpn } => qp(qpn, abi::IBV_EVENT_QP_FATAL),
        AsyncEventKind::QpRequestError { qpn } => qp(qpn, abi::IBV_EVENT_QP_REQ_ERR),
        AsyncEventKind::QpAccessError { qpn } => qp(qpn, abi::IBV_EVENT_QP_ACCESS_ERR),
        AsyncEventKind::CommEstablished { qpn } => qp(qpn, abi::IBV_EVENT_COMM_EST),
        AsyncEventKind::SqDrained { qpn } => qp(qpn, abi::IBV_EVENT_SQ_DRAINED),
        AsyncEventKind::QpLastWqeReached { qpn } => qp(qpn, abi::IBV_EVENT_QP_LAST_WQE_REACHED),
        AsyncEventKind::PathMigrated { qpn } => qp(qpn, abi::IBV_EVENT_PATH_MIG),
        AsyncEventKind::PathMigrationFailed { qpn } => qp(qpn, abi::IBV_EVENT_PATH_MIG_ERR),
        AsyncEventKind::SrqLimitReached { srqn } => (
            ibv_async_event_element {
                srq: reg.get(Kind::Srq, srqn),
            },
            abi::IBV_EVENT_SRQ_LIMIT_REACHED,
        ),
        AsyncEventKind::SrqFatal { srqn } => (
            ibv_async_event_element {
                srq: reg.get(Kind::Srq, srqn),
            },
            abi::IBV_EVENT_SRQ_ERR,
        ),
        AsyncEventKind::PortActive { port } => (
            ibv_async_event_element {
                port_num: i32::from(port),
            },
            abi::IBV_EVENT_PORT_ACTIVE,
        ),
        AsyncEventKind::PortDown { port } | AsyncEventKind::PortChange { port, .. } => (
            ibv_async_event_element {
                port_num: i32::from(port),
            },
            abi::IBV_EVENT_PORT_ERR,
        ),
        _ => (
            ibv_async_event_element { port_num: 1 },
            abi::IBV_EVENT_DEVICE_FATAL,
        ),
    };
    ibv_async_event {
        element,
        event_type,
    }
}

/// True when `e` is about a QP, CQ or SRQ the program has destroyed (the registry no longer
/// holds its number). The kernel never hands such an event out: destroying an object drops
/// the events queued for it (`ib_uverbs_release_uevent`), and a program dereferences the
/// element (UCX's async handler reads `element.qp->qp_num`).
fn orphaned(e: &ibv_async_event) -> bool {
    match e.event_type {
        abi::IBV_EVENT_PORT_ACTIVE | abi::IBV_EVENT_PORT_ERR | abi::IBV_EVENT_DEVICE_FATAL => false,
        // SAFETY: every other event `translate` makes holds a pointer; all the pointer
        // members of the union share its first 8 bytes.
        _ => unsafe { e.element.qp.is_null() },
    }
}

fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL has no memory effects.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// `ibv_get_async_event`: the next event (blocking unless `async_fd` is non-blocking: then
/// -1 with EAGAIN; on a stepped sim with nothing left to do, -1 with EAGAIN), skipping the
/// events of destroyed objects ([`orphaned`]). 0, or -1 with errno.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `event` writable.
#[unsafe(export_name = "__bypass_ibv_get_async_event")]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        let ev = &c.open.events;
        let got = loop {
            let got = if nonblocking(ev.as_fd().as_raw_fd()) {
                ev.try_get_async_event()
            } else {
                let stepped = c.open.hca.is_stepped();
                loop {
                    match ev.get_async_event(Duration::from_secs(1)) {
                        Ok(None) if !stepped => continue,
                        other => break other,
                    }
                }
            };
            match got {
                Ok(Some(rec)) => {
                    let out = translate(&rec.kind, &c.open.registry);
                    if !orphaned(&out) {
                        break Ok(Some((rec, out)));
                    }
                    ev.ack_async_event(rec);
                }
                other => break other.map(|_| None),
            }
        };
        match got {
            Ok(Some((rec, out))) => {
                c.open
                    .taken
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(rec);
                // SAFETY: writable (the caller's contract).
                unsafe { event.write(out) };
                0
            }
            Ok(None) => {
                set_errno(libc::EAGAIN);
                -1
            }
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        }
    })
}

/// `ibv_ack_async_event`: acknowledges one event taken from this HCA.
///
/// # Safety
/// `event` from `ibv_get_async_event`.
#[unsafe(export_name = "__bypass_ibv_ack_async_event")]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    guard((), || {
        if event.is_null() {
            return;
        }
        // SAFETY: the event's element names an object of some context; every context of
        // the process shares its HCA's queue of taken events, found through any of them.
        // libibverbs keeps no context in the event either: take the first device that has
        // an event outstanding.
        for d in crate::devices::devices() {
            if let Some(o) = d.opened() {
                let rec = o.taken.lock().unwrap_or_else(PoisonError::into_inner).pop();
                if let Some(rec) = rec {
                    o.events.ack_async_event(rec);
                    return;
                }
            }
        }
    });
}
