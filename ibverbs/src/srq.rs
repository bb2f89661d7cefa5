//! Shared receive queues: create, modify (the limit), query, destroy, `post_srq_recv`.
//!
//! Owns: [`Srq`] (an `ibv_srq` first, then the driver's SRQ, an RMP), and the count of QPs
//! attached (an SRQ is not destroyed under them: EBUSY, as the kernel answers).
//! Must not: take receive completions (they arrive on the QPs' receive CQs).
//!
//! Sources: rdma-core `providers/mlx5/srq.c` (`mlx5_post_srq_recv`: ENOMEM when full,
//! `*bad_wr` the first refused), `man 3 ibv_modify_srq` (IBV_SRQ_LIMIT arms the limit event;
//! resizing with IBV_SRQ_MAX_WR is optional and mlx5 refuses it), `libibverbs/verbs.c`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use bypass_driver::srq::{Srq as DriverSrq, SrqAttr};

use crate::abi::{self, ibv_pd, ibv_recv_wr, ibv_srq, ibv_srq_attr, ibv_srq_init_attr};
use crate::context::Context;
use crate::ffi::{errno_of, guard, set_errno};
use crate::lock::SpinCell;
use crate::pd_mr::Pd;
use crate::qp_post::{post_errno, post_list, recv_wr};
use crate::registry::Kind;

/// A shared receive queue: `ibv` first.
#[repr(C)]
pub(crate) struct Srq {
    ibv: ibv_srq,
    /// The driver's SRQ (`None` once destroyed).
    pub(crate) inner: SpinCell<Option<DriverSrq>>,
    /// QPs taking receives from it.
    pub(crate) users: AtomicU32,
}

impl Srq {
    /// The SRQ behind a program's pointer.
    ///
    /// # Safety
    /// `srq` from `ibv_create_srq`, not destroyed.
    pub(crate) unsafe fn from_ibv<'a>(srq: *mut ibv_srq) -> &'a Srq {
        // SAFETY: `ibv` is the first field of the boxed `#[repr(C)]` SRQ.
        unsafe { &*srq.cast::<Srq>() }
    }
}

/// `ibv_create_srq`: NULL with errno on failure; `attr.max_wr`/`max_sge` get the actual
/// sizes.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `init` readable and writable.
#[unsafe(export_name = "__bypass_ibv_create_srq")]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        if pd.is_null() || init.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let (p, i) = unsafe { (Pd::from_ibv(pd), &mut *init) };
        let attr = SrqAttr {
            max_wr: i.attr.max_wr.max(1),
            max_sge: i.attr.max_sge.max(1),
            srq_limit: i.attr.srq_limit,
        };
        let s = match DriverSrq::create(&p.pd, &attr) {
            Ok(s) => s,
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        i.attr.max_wr = s.max_wr();
        i.attr.max_sge = u32::try_from(s.max_sge()).unwrap_or(u32::MAX);
        // SAFETY: `ibv_srq` is C data; all-zero is valid (pthread objects: their static
        // initialisers on glibc).
        let mut ibv: ibv_srq = unsafe { std::mem::zeroed() };
        ibv.context = p.ibv.context;
        ibv.srq_context = i.srq_context;
        ibv.pd = pd;
        ibv.handle = s.srqn();
        let srqn = s.srqn();
        let b = Box::into_raw(Box::new(Srq {
            ibv,
            inner: SpinCell::new(Some(s)),
            users: AtomicU32::new(0),
        }));
        p.context().open.registry.insert(Kind::Srq, srqn, b);
        b.cast()
    })
}

/// `ibv_modify_srq`: IBV_SRQ_LIMIT arms the limit; IBV_SRQ_MAX_WR (resize) is EINVAL, as
/// mlx5 answers. 0 or an errno.
///
/// # Safety
/// `srq` from `ibv_create_srq`; `attr` readable.
#[unsafe(export_name = "__bypass_ibv_modify_srq")]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        if srq.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let (s, a) = unsafe { (Srq::from_ibv(srq), &*attr) };
        let mask = mask as u32;
        if mask & abi::IBV_SRQ_MAX_WR != 0 {
            return libc::EINVAL;
        }
        if mask & abi::IBV_SRQ_LIMIT != 0 {
            let g = s.inner.lock();
            let Some(d) = g.as_ref() else {
                return libc::EINVAL;
            };
            if let Err(e) = d.arm_limit(a.srq_limit) {
                return errno_of(&e);
            }
        }
        0
    })
}

/// `ibv_query_srq`: sizes and the armed limit. 0 or an errno.
///
/// # Safety
/// `srq` from `ibv_create_srq`; `attr` writable.
#[unsafe(export_name = "__bypass_ibv_query_srq")]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard(libc::EIO, || {
        if srq.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let s = unsafe { Srq::from_ibv(srq) };
        let g = s.inner.lock();
        let Some(d) = g.as_ref() else {
            return libc::EINVAL;
        };
        match d.query() {
            Ok(q) => {
                let out = ibv_srq_attr {
                    max_wr: d.max_wr(),
                    max_sge: u32::try_from(d.max_sge()).unwrap_or(u32::MAX),
                    srq_limit: q.srq_limit,
                };
                // SAFETY: writable (the caller's contract).
                unsafe { attr.write(out) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_destroy_srq`: 0, or an errno (EBUSY while QPs take receives from it).
///
/// # Safety
/// `srq` from `ibv_create_srq`, not used again on success.
#[unsafe(export_name = "__bypass_ibv_destroy_srq")]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard(libc::EIO, || {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let s = unsafe { Srq::from_ibv(srq) };
        if s.users.load(Ordering::Acquire) > 0 {
            return libc::EBUSY;
        }
        let Some(d) = s.inner.lock().take() else {
            return libc::EINVAL;
        };
        let srqn = d.srqn();
        if let Err((d, e)) = d.destroy() {
            *s.inner.lock() = Some(d);
            return errno_of(&e);
        }
        // SAFETY: an SRQ's context outlives it.
        unsafe { Context::from_ibv(s.ibv.context) }
            .open
            .registry
            .remove(Kind::Srq, srqn);
        // SAFETY: leaked from a `Box<Srq>` at creation; given back now.
        drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
        0
    })
}

/// The `post_srq_recv` ops slot: every receive of the list; 0 or the first refusal's errno
/// with `*bad_wr` naming it.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let s = unsafe { Srq::from_ibv(srq) };
        let g = s.inner.lock();
        let Some(d) = g.as_ref() else {
            return libc::EINVAL;
        };
        // SAFETY: the program's list of receives, whose SGEs it leaves alone until their
        // completions (libibverbs' contract: the driver's posting contract).
        unsafe {
            post_list(
                wr,
                bad_wr,
                |w| w.next,
                |w| {
                    d.post_srq_recv(&recv_wr(w))
                        .map(|_| ())
                        .map_err(|e| post_errno(&e))
                },
            )
        }
    })
}

/// `verbs_context.get_srq_num`: the SRQN. 0 or an errno.
pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    guard(libc::EIO, || {
        if srq.is_null() || num.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let s = unsafe { Srq::from_ibv(srq) };
        // SAFETY: writable (the caller's contract).
        unsafe { *num = s.ibv.handle };
        0
    })
}
