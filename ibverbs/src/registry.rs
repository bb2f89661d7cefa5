//! The objects an asynchronous event may name, by number: QPs, CQs and SRQs of one HCA.
//!
//! Owns: the number → C object maps that turn a decoded event (`AsyncEventKind`, which
//! carries a QPN, CQN or SRQN) into the `ibv_async_event.element` pointer libibverbs
//! reports. Objects register when created and leave before they are freed.
//! Must not: own or free the objects (the pointers are the program's handles, freed by their
//! destroy verb); hold its lock across a call into the driver.
//!
//! Sources: rdma-core `libibverbs/device.c` (`ibv_get_async_event` fills `element.qp/cq/srq`
//! from the kernel's `uverbs_async_event_desc.element`, the user pointer of the object).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Which table a number is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A QP by QPN (`*mut ibv_qp`).
    Qp,
    /// A CQ by CQN (`*mut ibv_cq`).
    Cq,
    /// An SRQ by SRQN (`*mut ibv_srq`).
    Srq,
}

/// The maps (addresses, so the table is `Send`; they are only handed back to C).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    map: Mutex<HashMap<(Kind, u32), usize>>,
}

impl Registry {
    /// Records that number `n` of `kind` is the object at `ptr`.
    pub(crate) fn insert<T>(&self, kind: Kind, n: u32, ptr: *mut T) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((kind, n), ptr as usize);
    }

    /// Forgets number `n` of `kind`.
    pub(crate) fn remove(&self, kind: Kind, n: u32) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(kind, n));
    }

    /// The object registered as number `n` of `kind`, or NULL.
    pub(crate) fn get<T>(&self, kind: Kind, n: u32) -> *mut T {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(kind, n))
            .map_or(std::ptr::null_mut(), |&p| p as *mut T)
    }
}
