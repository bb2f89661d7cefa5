//! Completion channels: `ibv_create_comp_channel`, `ibv_get_cq_event`, `ibv_ack_cq_events`.
//!
//! Owns: [`Channel`] (the C `ibv_comp_channel` whose `fd` is the driver channel's epoll fd,
//! readable when an event may be ready, so a program may `poll(2)` it or set it
//! `O_NONBLOCK`), and the map from a CQN to the CQ an event names.
//! Must not: poll CQs (an event only says a CQ has something; the program polls).
//!
//! Sources: rdma-core `libibverbs/verbs.c` and `man 3 ibv_get_cq_event` (blocking unless the
//! fd is non-blocking, then EAGAIN; every event acknowledged before `ibv_destroy_cq`;
//! `ibv_destroy_comp_channel` EBUSY while CQs use it), `providers/mlx5/verbs.c`
//! `mlx5_cq_event` (an event advances the CQ's arm sequence number: the driver does it).

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bypass_driver::comp_channel::CompletionChannel;

use crate::abi::{ibv_comp_channel, ibv_context, ibv_cq};
use crate::context::Context;
use crate::cq::Cq;
use crate::ffi::{errno_of, guard, set_errno};

/// A completion channel: `ibv` first.
#[repr(C)]
pub(crate) struct Channel {
    /// The program's `ibv_comp_channel`, in a cell: its `refcnt` changes as CQs come and
    /// go (through the program's pointer), so fields are read through raw places.
    pub(crate) ibv: UnsafeCell<ibv_comp_channel>,
    pub(crate) ch: CompletionChannel,
    /// The CQs on it, by CQN (addresses of their `Cq`).
    cqs: Mutex<HashMap<u32, usize>>,
}

impl Channel {
    /// The channel behind a program's pointer.
    ///
    /// # Safety
    /// `ch` from `ibv_create_comp_channel`, not destroyed.
    pub(crate) unsafe fn from_ibv<'a>(ch: *mut ibv_comp_channel) -> &'a Channel {
        // SAFETY: `ibv` is the first field of the boxed `#[repr(C)]` channel.
        unsafe { &*ch.cast::<Channel>() }
    }

    /// Records `cq` (CQN `cqn`) as reporting here.
    pub(crate) fn attach(&self, cqn: u32, cq: *const Cq) {
        self.cqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cqn, cq as usize);
    }

    /// Forgets CQN `cqn`.
    pub(crate) fn detach(&self, cqn: u32) {
        self.cqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&cqn);
    }

    fn cq(&self, cqn: u32) -> Option<*const Cq> {
        self.cqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&cqn)
            .map(|&a| a as *const Cq)
    }
}

/// `ibv_create_comp_channel`: NULL with errno on failure.
///
/// # Safety
/// `ctx` from `ibv_open_device`.
#[unsafe(export_name = "__bypass_ibv_create_comp_channel")]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || {
        if ctx.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        match CompletionChannel::new(&c.open.hca) {
            Ok(ch) => {
                let ibv = ibv_comp_channel {
                    context: ctx,
                    fd: ch.as_fd().as_raw_fd(),
                    refcnt: 0,
                };
                let b = Box::new(Channel {
                    ibv: UnsafeCell::new(ibv),
                    ch,
                    cqs: Mutex::new(HashMap::new()),
                });
                Box::into_raw(b).cast()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                std::ptr::null_mut()
            }
        }
    })
}

/// `ibv_destroy_comp_channel`: 0, or an errno (EBUSY while CQs use it).
///
/// # Safety
/// `ch` from `ibv_create_comp_channel`, not used again on success.
#[unsafe(export_name = "__bypass_ibv_destroy_comp_channel")]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    guard(libc::EIO, || {
        if ch.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Channel::from_ibv(ch) };
        // SAFETY: a field of the live channel, read through the cell's raw place.
        if unsafe { (*c.ibv.get()).refcnt } > 0 {
            return libc::EBUSY;
        }
        // SAFETY: leaked from a `Box<Channel>` at creation; given back now.
        drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
        0
    })
}

/// True when `fd` has `O_NONBLOCK` set.
fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL on an fd this channel owns has no memory effects.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// `ibv_get_cq_event`: the next event's CQ and its `cq_context`. Blocks unless the fd is
/// non-blocking (then -1 with EAGAIN when none is ready); on a stepped sim with nothing left
/// to do, -1 with EAGAIN rather than a wait that can never end. 0 or -1 with errno.
///
/// # Safety
/// `ch` from `ibv_create_comp_channel`; `cq` and `cq_context` writable.
#[unsafe(export_name = "__bypass_ibv_get_cq_event")]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        if ch.is_null() || cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Channel::from_ibv(ch) };
        // SAFETY: set at creation, never written again; read through the cell's raw place.
        let fd = unsafe { (*c.ibv.get()).fd };
        let event = if nonblocking(fd) {
            c.ch.try_get_cq_event()
        } else {
            loop {
                match c.ch.get_cq_event(Duration::from_secs(1)) {
                    Ok(None) if !c.is_stepped() => continue,
                    other => break other,
                }
            }
        };
        let ev = match event {
            Ok(Some(ev)) => ev,
            Ok(None) => {
                set_errno(libc::EAGAIN);
                return -1;
            }
            Err(e) => {
                set_errno(errno_of(&e));
                return -1;
            }
        };
        let Some(found) = c.cq(ev.cqn()) else {
            // A CQ destroyed since its event fired: nothing to report it on.
            set_errno(libc::EAGAIN);
            return -1;
        };
        // SAFETY: CQs leave the map before they are freed, and the map's lock was held while
        // it was found; the program may not destroy a CQ with an unacknowledged event, and
        // this event is unacknowledged until `ibv_ack_cq_events`.
        let found = unsafe { &*found };
        // SAFETY: both out-pointers are writable (the caller's contract).
        unsafe {
            *cq = found.ibv_cq();
            *cq_context = found.ibv_cq_context();
        }
        0
    })
}

impl Channel {
    fn is_stepped(&self) -> bool {
        // SAFETY: `context` is set at creation and never written again (read through the
        // cell's raw place); a channel's context outlives it.
        let ctx = unsafe { Context::from_ibv((*self.ibv.get()).context) };
        ctx.open.hca.is_stepped()
    }
}

/// `ibv_ack_cq_events`: acknowledges `nevents` events of `cq`.
///
/// # Safety
/// `cq` from `ibv_create_cq*`.
#[unsafe(export_name = "__bypass_ibv_ack_cq_events")]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    guard((), || {
        if cq.is_null() {
            return;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Cq::from_ibv(cq) };
        c.ack_events(nevents);
    });
}
