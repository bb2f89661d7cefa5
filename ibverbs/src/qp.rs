//! Queue pairs: the C object, create (plain and extended), `ibv_qp_to_qp_ex`, destroy.
//!
//! Owns: [`Qp`] (an `ibv_qp_ex` first, whose prefix is the `ibv_qp` programs see, then the
//! driver's QP under the ABI's lock), the create inputs' checks and the caps written back,
//! and the CQ/SRQ user counts a QP holds. Its attributes are `qp_attrs.rs`'s, its post path
//! `qp_post.rs`'s, its extended post `qp_ex.rs`'s.
//! Must not: build WQEs (the driver does), or poll.
//!
//! Sources: rdma-core `providers/mlx5/qp.c` (`_mlx5_post_send`: ENOMEM for a full SQ,
//! EINVAL for a bad request, `*bad_wr` the first WR not posted; inline data gathered from
//! every SGE), `providers/mlx5/verbs.c` (`mlx5_create_qp`: the caps written back;
//! `mlx5_modify_qp`), `libibverbs/verbs.c` (`ibv_qp_to_qp_ex`: only QPs created with send
//! ops have one), the kernel's `ib_modify_qp_is_ok` (which attributes each edge takes: the
//! driver checks it again).

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use bypass_driver::DriverError;
use bypass_driver::hw::cmd::qp::QpState;
use bypass_driver::qp::Qp as DriverQp;
use bypass_driver::qp_attr::{QpCaps, QpType};

use crate::abi::{self, ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex};
use crate::context::Context;
use crate::cq::Cq;
use crate::ffi::{errno_of, guard, set_errno};
use crate::lock::SpinCell;
use crate::pd_mr::Pd;
use crate::registry::Kind;
use crate::srq::Srq;

/// A queue pair: `ex` first, so the program's `*mut ibv_qp` and `*mut ibv_qp_ex` are both a
/// `*mut Qp`.
#[repr(C)]
pub(crate) struct Qp {
    /// The program's `ibv_qp_ex`, in a cell: the program writes `wr_id`/`wr_flags` and
    /// libibverbs-style code reads `state`, so it is reached only through raw places
    /// (`(*ex.get()).field`), never a reference to the whole struct.
    pub(crate) ex: UnsafeCell<ibv_qp_ex>,
    /// The driver's QP (`None` once destroyed).
    pub(crate) inner: SpinCell<Option<DriverQp>>,
    /// The attributes the program set, for `ibv_query_qp`.
    pub(crate) saved: Mutex<ibv_qp_attr>,
    send_cq: *const Cq,
    recv_cq: *const Cq,
    srq: *const Srq,
    /// Whether the program may reach `ex` (`ibv_qp_to_qp_ex`).
    has_ex: bool,
    /// State for the extended post (`qp_ex.rs`).
    pub(crate) wr: crate::qp_ex::WrState,
}

// SAFETY: the raw pointers name the QP's CQs and SRQ, which outlive it (their destroy is
// EBUSY while `users` counts it); they are only read.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    /// The QP behind a program's `ibv_qp` (or `ibv_qp_ex`) pointer.
    ///
    /// # Safety
    /// `qp` from `ibv_create_qp*`, not destroyed.
    #[inline]
    pub(crate) unsafe fn from_ibv<'a>(qp: *mut ibv_qp) -> &'a Qp {
        // SAFETY: `ex` (whose prefix is the `ibv_qp`) is the first field of the boxed
        // `#[repr(C)]` QP (the caller's contract).
        unsafe { &*qp.cast::<Qp>() }
    }

    /// The program-visible `ibv_qp` (the prefix of the `ibv_qp_ex`), to read or write one
    /// field at a time.
    pub(crate) fn base(&self) -> *mut ibv_qp {
        self.ex.get().cast()
    }

    /// The context the QP was created on.
    pub(crate) fn context(&self) -> &Context {
        // SAFETY: `context` is set at creation and never written again; a QP's context
        // outlives it (the program destroys QPs before closing it).
        unsafe { Context::from_ibv((*self.base()).context) }
    }
}

fn qp_type(t: u32) -> Option<QpType> {
    match t {
        abi::IBV_QPT_RC => Some(QpType::Rc),
        abi::IBV_QPT_UC => Some(QpType::Uc),
        abi::IBV_QPT_UD => Some(QpType::Ud),
        _ => None,
    }
}

/// The `ibv_qp_state` of a driver state.
pub(crate) fn ibv_state(s: QpState) -> u32 {
    match s {
        QpState::Rst => abi::IBV_QPS_RESET,
        QpState::Init => abi::IBV_QPS_INIT,
        QpState::Rtr => abi::IBV_QPS_RTR,
        QpState::Rts => abi::IBV_QPS_RTS,
        QpState::Sqer => abi::IBV_QPS_SQE,
        QpState::Sqd | QpState::SqDraining => abi::IBV_QPS_SQD,
        _ => abi::IBV_QPS_ERR,
    }
}

/// The create inputs both `ibv_create_qp` and `create_qp_ex` take.
struct CreateArgs {
    pd: *mut abi::ibv_pd,
    send_cq: *mut abi::ibv_cq,
    recv_cq: *mut abi::ibv_cq,
    srq: *mut abi::ibv_srq,
    qp_context: *mut std::ffi::c_void,
    cap: abi::ibv_qp_cap,
    qp_type: u32,
    sq_sig_all: bool,
    send_ops_flags: Option<u64>,
}

/// True when `cap` asks for no more than `ibv_query_device` reports (`max_qp_wr`,
/// `max_sge`; `max_inline_data` is left to the driver's WQE sizing), as rdma-core's
/// `mlx5_calc_wq_size` requires; the receive side is not used on an SRQ.
fn caps_within_limits(pd: &Pd, cap: &abi::ibv_qp_cap, on_srq: bool) -> bool {
    // SAFETY: all-zero is a valid `ibv_device_attr` (C data).
    let mut d: abi::ibv_device_attr = unsafe { std::mem::zeroed() };
    crate::query::device_attr(&pd.context().open.hca, &mut d);
    let wr = u32::try_from(d.max_qp_wr).unwrap_or(0);
    let sge = u32::try_from(d.max_sge).unwrap_or(0);
    cap.max_send_wr <= wr
        && cap.max_send_sge <= sge
        && (on_srq || (cap.max_recv_wr <= wr && cap.max_recv_sge <= sge))
}

// `ibv_qp_init_attr_ex` extends `ibv_qp_init_attr`: the same fields at the same offsets.
const _: () = {
    use std::mem::offset_of;
    assert!(
        offset_of!(ibv_qp_init_attr, qp_context) == offset_of!(ibv_qp_init_attr_ex, qp_context)
    );
    assert!(offset_of!(ibv_qp_init_attr, send_cq) == offset_of!(ibv_qp_init_attr_ex, send_cq));
    assert!(offset_of!(ibv_qp_init_attr, recv_cq) == offset_of!(ibv_qp_init_attr_ex, recv_cq));
    assert!(offset_of!(ibv_qp_init_attr, srq) == offset_of!(ibv_qp_init_attr_ex, srq));
    assert!(offset_of!(ibv_qp_init_attr, cap) == offset_of!(ibv_qp_init_attr_ex, cap));
    assert!(offset_of!(ibv_qp_init_attr, qp_type) == offset_of!(ibv_qp_init_attr_ex, qp_type));
    assert!(
        offset_of!(ibv_qp_init_attr, sq_sig_all) == offset_of!(ibv_qp_init_attr_ex, sq_sig_all)
    );
    assert!(
        std::mem::size_of::<ibv_qp_init_attr>() <= offset_of!(ibv_qp_init_attr_ex, comp_mask) + 4
    );
};

impl CreateArgs {
    /// The inputs of a create from the fields both create forms share.
    fn new(pd: *mut abi::ibv_pd, a: &ibv_qp_init_attr, send_ops_flags: Option<u64>) -> Self {
        Self {
            pd,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            qp_context: a.qp_context,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
            send_ops_flags,
        }
    }
}

/// Creates the QP; its actual caps are written to `cap_out`. NULL with errno on failure.
fn create(a: &CreateArgs, cap_out: &mut abi::ibv_qp_cap) -> *mut ibv_qp {
    if a.pd.is_null() || a.send_cq.is_null() || (a.recv_cq.is_null() && a.srq.is_null()) {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let Some(t) = qp_type(a.qp_type) else {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    };
    let wr = match a.send_ops_flags {
        Some(f) => match crate::qp_ex::WrState::new(f, t) {
            Ok(w) => w,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        },
        None => crate::qp_ex::WrState::default(),
    };
    // SAFETY: the exported verbs' contract: pointers from their create verbs.
    let (pd, scq) = unsafe { (Pd::from_ibv(a.pd), Cq::from_ibv(a.send_cq)) };
    let recv_ptr = if a.recv_cq.is_null() {
        a.send_cq
    } else {
        a.recv_cq
    };
    // SAFETY: as above.
    let rcq = unsafe { Cq::from_ibv(recv_ptr) };
    let srq = if a.srq.is_null() {
        None
    } else {
        // SAFETY: as above.
        Some(unsafe { Srq::from_ibv(a.srq) })
    };
    if !caps_within_limits(pd, &a.cap, srq.is_some()) {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let caps = QpCaps {
        max_send_wr: a.cap.max_send_wr.max(1),
        max_recv_wr: if srq.is_some() {
            0
        } else {
            a.cap.max_recv_wr.max(1)
        },
        max_send_sge: a.cap.max_send_sge.max(1),
        max_recv_sge: a.cap.max_recv_sge.max(1),
        max_inline_data: a.cap.max_inline_data,
        sq_sig_all: a.sq_sig_all,
    };
    let made = {
        let sg = scq.inner.lock();
        let same = std::ptr::eq(scq, rcq);
        let rg = if same { None } else { Some(rcq.inner.lock()) };
        let (Some(s), Some(r)) = (
            sg.cq.as_ref(),
            rg.as_ref().map_or(sg.cq.as_ref(), |g| g.cq.as_ref()),
        ) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        match srq {
            Some(q) => {
                let g = q.inner.lock();
                let Some(dq) = g.as_ref() else {
                    set_errno(libc::EINVAL);
                    return std::ptr::null_mut();
                };
                DriverQp::create_on_srq(&pd.pd, s, r, t, &caps, dq)
            }
            None => DriverQp::create(&pd.pd, s, r, t, &caps),
        }
    };
    let dqp = match made {
        Ok(q) => q,
        // Within the reported limits, the queue or WQE these caps need can still be too
        // big for the device (a deep SQ of large WQEs): `mlx5_calc_wq_size` says EINVAL.
        Err(e @ DriverError::Unsupported { .. }) => {
            errno_of(&e);
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        Err(e) => {
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    let got = dqp.caps();
    *cap_out = abi::ibv_qp_cap {
        max_send_wr: got.max_send_wr,
        // The RQ's real depth (a power of two), as mlx5 writes back `rq.max_post`: a
        // program filling it must see exactly when it is full.
        max_recv_wr: if a.srq.is_null() { dqp.rq_wqes() } else { 0 },
        max_send_sge: got.max_send_sge,
        max_recv_sge: got.max_recv_sge,
        max_inline_data: got.max_inline_data,
    };
    // SAFETY: `ibv_qp_ex` is C data: pointers, integers, nullable fn pointers and pthread
    // objects whose all-zero value is their static initialiser on glibc.
    let mut ex: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let ctx = pd.ibv.context;
    let b = &mut ex.qp_base;
    b.context = ctx;
    b.qp_context = a.qp_context;
    b.pd = a.pd;
    b.send_cq = a.send_cq;
    b.recv_cq = recv_ptr;
    b.srq = a.srq;
    b.qp_num = dqp.qpn();
    b.handle = dqp.qpn();
    b.state = abi::IBV_QPS_RESET;
    b.qp_type = a.qp_type;
    let has_ex = a.send_ops_flags.is_some();
    if has_ex {
        crate::qp_ex::fill_ops(&mut ex);
    }
    let qpn = dqp.qpn();
    // SAFETY: all-zero is a valid `ibv_qp_attr` (C data).
    let mut saved: ibv_qp_attr = unsafe { std::mem::zeroed() };
    saved.cap = *cap_out;
    saved.port_num = 1;
    scq.users.fetch_add(1, Ordering::AcqRel);
    if !std::ptr::eq(scq, rcq) {
        rcq.users.fetch_add(1, Ordering::AcqRel);
    }
    if let Some(q) = srq {
        q.users.fetch_add(1, Ordering::AcqRel);
    }
    let qp = Box::into_raw(Box::new(Qp {
        ex: UnsafeCell::new(ex),
        inner: SpinCell::new(Some(dqp)),
        saved: Mutex::new(saved),
        send_cq: scq,
        recv_cq: rcq,
        srq: srq.map_or(std::ptr::null(), std::ptr::from_ref),
        has_ex,
        wr,
    }));
    pd.context().open.registry.insert(Kind::Qp, qpn, qp);
    qp.cast()
}

/// `ibv_create_qp`: NULL with errno on failure; `init_attr.cap` gets the actual sizes.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable and writable; its CQs and SRQ live.
#[unsafe(export_name = "__bypass_ibv_create_qp")]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut abi::ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let a = unsafe { &mut *attr };
        create(&CreateArgs::new(pd, a, None), &mut a.cap)
    })
}

/// The `ibv_qp_create_flags` a QP of type `qp_type` may be created with: on UD,
/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`, which keeps a QP's own multicast sends from
/// looping back to it; bypass attaches no QP to a multicast group (`ibv_attach_mcast` is
/// EOPNOTSUPP), so no such loopback can happen and the flag holds as asked.
fn supported_create_flags(qp_type: u32) -> u32 {
    if qp_type == abi::IBV_QPT_UD {
        abi::IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
    } else {
        0
    }
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex`): the PD must be given; send ops
/// (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`) give the QP an `ibv_qp_ex`; create flags as
/// [`supported_create_flags`]. Other create options (XRC, RSS, TSO, other create flags)
/// are EOPNOTSUPP.
pub(crate) unsafe extern "C" fn create_qp_ex(
    ctx: *mut abi::ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let _ = ctx;
    guard(std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let a = unsafe { &mut *attr };
        let known = abi::IBV_QP_INIT_ATTR_PD
            | abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
            | abi::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        if a.comp_mask & abi::IBV_QP_INIT_ATTR_PD == 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        if a.comp_mask & !known != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        if a.comp_mask & abi::IBV_QP_INIT_ATTR_CREATE_FLAGS != 0
            && a.create_flags & !supported_create_flags(a.qp_type) != 0
        {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        let ops =
            (a.comp_mask & abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        // SAFETY: `ibv_qp_init_attr_ex` begins with the fields of `ibv_qp_init_attr`, in its
        // layout (asserted below), as libibverbs' `ibv_create_qp` relies on.
        let base = unsafe { &*std::ptr::from_ref(a).cast::<ibv_qp_init_attr>() };
        let args = CreateArgs::new(a.pd, base, ops);
        create(&args, &mut a.cap)
    })
}

/// `ibv_qp_to_qp_ex`: the extended QP of one created with send ops, else NULL.
///
/// # Safety
/// `qp` from `ibv_create_qp*`.
#[unsafe(export_name = "__bypass_ibv_qp_to_qp_ex")]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard(std::ptr::null_mut(), || {
        if qp.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let q = unsafe { Qp::from_ibv(qp) };
        if q.has_ex {
            qp.cast()
        } else {
            std::ptr::null_mut()
        }
    })
}

/// `ibv_destroy_qp`: 0 or an errno.
///
/// # Safety
/// `qp` from `ibv_create_qp*`, not used again on success.
#[unsafe(export_name = "__bypass_ibv_destroy_qp")]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let q = unsafe { Qp::from_ibv(qp) };
        let Some(dq) = q.inner.lock().take() else {
            return libc::EINVAL;
        };
        let qpn = dq.qpn();
        drop(dq);
        // SAFETY: the QP's CQs, SRQ and context outlive it (their destroys are EBUSY while
        // it counts as a user).
        unsafe {
            q.context().open.registry.remove(Kind::Qp, qpn);
            (*q.send_cq).users.fetch_sub(1, Ordering::AcqRel);
            if !std::ptr::eq(q.send_cq, q.recv_cq) {
                (*q.recv_cq).users.fetch_sub(1, Ordering::AcqRel);
            }
            if !q.srq.is_null() {
                (*q.srq).users.fetch_sub(1, Ordering::AcqRel);
            }
        }
        // SAFETY: leaked from a `Box<Qp>` in `create`; given back now.
        drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
        0
    })
}
