//! Queue pairs: create (plain and extended), modify through the state machine, query,
//! destroy, and the `post_send` / `post_recv` ops slots.
//!
//! Owns: [`Qp`] (an `ibv_qp_ex` first, whose prefix is the `ibv_qp` programs see, then the
//! driver's QP under the ABI's lock), the attributes the program set (for `ibv_query_qp`),
//! and the translation of `ibv_modify_qp`'s (state, mask) into the driver's transition
//! inputs. The post slots hand the program's `ibv_sge` arrays to the driver as they are
//! (the driver's `Sge` has the same C layout, asserted below): no copy of the list, and
//! the payload is only ever read by the device's DMA (inline sends copy into the WQE).
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
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

use bypass_driver::DriverError;
use bypass_driver::hw::cmd::qp::{PathMtu, QpState};
use bypass_driver::post::{
    Payload, PostError, RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge, UdDest,
};
use bypass_driver::qp::Qp as DriverQp;
use bypass_driver::qp_attr::{
    AddressPath, Init2Rtr, QpAccess, QpCaps, QpType, Rst2Init, Rtr2Rts, Rts2Rts,
};
use bypass_driver::qp_states::SqAttrs;

use crate::abi::{
    self, ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_recv_wr,
    ibv_send_wr,
};
use crate::ah::Ah;
use crate::context::Context;
use crate::cq::Cq;
use crate::ffi::{errno_of, guard, set_errno};
use crate::lock::SpinCell;
use crate::pd_mr::Pd;
use crate::registry::Kind;
use crate::srq::Srq;

// The program's `ibv_sge` array is handed to the driver as `&[Sge]`: same size, alignment
// and field offsets.
const _: () = {
    assert!(std::mem::size_of::<Sge>() == std::mem::size_of::<abi::ibv_sge>());
    assert!(std::mem::align_of::<Sge>() == std::mem::align_of::<abi::ibv_sge>());
    assert!(std::mem::offset_of!(Sge, addr) == std::mem::offset_of!(abi::ibv_sge, addr));
    assert!(std::mem::offset_of!(Sge, length) == std::mem::offset_of!(abi::ibv_sge, length));
    assert!(std::mem::offset_of!(Sge, lkey) == std::mem::offset_of!(abi::ibv_sge, lkey));
};

/// The largest inline payload gathered from several SGEs (one SGE is passed in place).
const INLINE_GATHER: usize = 1024;

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
    saved: Mutex<ibv_qp_attr>,
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

fn ibv_state(s: QpState) -> u32 {
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
        let args = CreateArgs {
            pd,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            qp_context: a.qp_context,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
            send_ops_flags: None,
        };
        create(&args, &mut a.cap)
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
        let args = CreateArgs {
            pd: a.pd,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            qp_context: a.qp_context,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
            send_ops_flags: ops,
        };
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

fn log2_ceil(v: u8) -> u8 {
    let v = u32::from(v.max(1));
    u8::try_from(32 - (v - 1).leading_zeros()).unwrap_or(0)
}

fn access_of(flags: u32) -> QpAccess {
    let mut a = QpAccess::empty();
    if flags & abi::IBV_ACCESS_REMOTE_READ != 0 {
        a |= QpAccess::REMOTE_READ;
    }
    if flags & abi::IBV_ACCESS_REMOTE_WRITE != 0 {
        a |= QpAccess::REMOTE_WRITE;
    }
    if flags & abi::IBV_ACCESS_REMOTE_ATOMIC != 0 {
        a |= QpAccess::REMOTE_ATOMIC;
    }
    a
}

fn path_mtu(m: u32) -> Option<PathMtu> {
    Some(match m {
        abi::IBV_MTU_256 => PathMtu::Mtu256,
        abi::IBV_MTU_512 => PathMtu::Mtu512,
        abi::IBV_MTU_1024 => PathMtu::Mtu1024,
        abi::IBV_MTU_2048 => PathMtu::Mtu2048,
        abi::IBV_MTU_4096 => PathMtu::Mtu4096,
        _ => return None,
    })
}

fn address_path(ah: &abi::ibv_ah_attr) -> Option<AddressPath> {
    if ah.is_global == 0 {
        // RoCE needs a GRH: the kernel refuses a path without one (`ib_resolve_eth_dmac`).
        return None;
    }
    // SAFETY: `raw` covers the whole 16-byte union.
    let rgid = unsafe { ah.grh.dgid.raw };
    let mut p = AddressPath::to_gid(rgid);
    p.sgid_index = ah.grh.sgid_index;
    p.hop_limit = if ah.grh.hop_limit == 0 {
        64
    } else {
        ah.grh.hop_limit
    };
    p.traffic_class = ah.grh.traffic_class;
    // The path holds 20 bits of flow label; the kernel takes any 32-bit value (`mlx5_set_path`
    // does not check it) and rdma-core's `mlx5_create_ah` masks it to `IB_GRH_FLOWLABEL_MASK`.
    // UCX passes `~0` on RoCE (`uct_ib_iface_fill_ah_attr_from_gid_lid`): keep the low bits.
    p.flow_label = ah.grh.flow_label & abi::IB_GRH_FLOWLABEL_MASK;
    p.sl = ah.sl;
    Some(p)
}

/// One `ibv_modify_qp` against the driver: the edge from the QP's state to the target.
fn modify(q: &mut DriverQp, a: &ibv_qp_attr, mask: u32, log_msg: u8) -> Result<(), c_int> {
    let has = |bit: u32| mask & bit != 0;
    let cur = q.state();
    let target = if has(abi::IBV_QP_STATE) {
        a.qp_state
    } else {
        ibv_state(cur)
    };
    let ty = q.qp_type();
    let opt_access = has(abi::IBV_QP_ACCESS_FLAGS).then(|| access_of(a.qp_access_flags));
    let opt_rnr = has(abi::IBV_QP_MIN_RNR_TIMER).then_some(a.min_rnr_timer);
    let opt_qkey = has(abi::IBV_QP_QKEY).then_some(a.qkey);
    let r = match (ibv_state(cur), target) {
        (_, abi::IBV_QPS_RESET) => q.reset(),
        (_, abi::IBV_QPS_ERR) => q.to_error(),
        (abi::IBV_QPS_RESET, abi::IBV_QPS_INIT) => q.rst2init(&Rst2Init {
            port: if has(abi::IBV_QP_PORT) { a.port_num } else { 1 },
            pkey_index: a.pkey_index,
            access: opt_access.unwrap_or_default(),
            qkey: a.qkey,
        }),
        (abi::IBV_QPS_INIT, abi::IBV_QPS_RTR) => {
            let mut r = if ty == QpType::Ud {
                Init2Rtr::ud()
            } else {
                let Some(path) = has(abi::IBV_QP_AV)
                    .then(|| address_path(&a.ah_attr))
                    .flatten()
                else {
                    return Err(libc::EINVAL);
                };
                let Some(mtu) = path_mtu(a.path_mtu) else {
                    return Err(libc::EINVAL);
                };
                let mut r = Init2Rtr::rc(a.dest_qp_num, a.rq_psn, path.rgid);
                r.path = path;
                r.mtu = mtu;
                r.log_max_dest_rd_atomic = log2_ceil(a.max_dest_rd_atomic);
                r.min_rnr_timer = a.min_rnr_timer;
                r
            };
            r.log_msg_max = log_msg;
            r.access = opt_access;
            r.qkey = opt_qkey;
            q.init2rtr(&r)
        }
        (abi::IBV_QPS_RTR, abi::IBV_QPS_RTS) => {
            let mut r = Rtr2Rts::new(a.sq_psn);
            if ty != QpType::Ud {
                r.timeout = a.timeout;
                r.retry_cnt = a.retry_cnt;
                r.rnr_retry = a.rnr_retry;
                r.log_max_rd_atomic = log2_ceil(a.max_rd_atomic);
            }
            r.min_rnr_timer = opt_rnr;
            r.access = opt_access;
            q.rtr2rts(&r)
        }
        (abi::IBV_QPS_RTS, abi::IBV_QPS_RTS) => q.rts2rts(&Rts2Rts {
            min_rnr_timer: opt_rnr,
            access: opt_access,
            qkey: opt_qkey,
        }),
        (abi::IBV_QPS_RTS, abi::IBV_QPS_SQD) => q.rts2sqd(),
        (
            from @ (abi::IBV_QPS_SQD | abi::IBV_QPS_SQE),
            to @ (abi::IBV_QPS_SQD | abi::IBV_QPS_RTS),
        ) => {
            let sq = SqAttrs {
                access: opt_access,
                min_rnr_timer: opt_rnr,
                qkey: opt_qkey,
                pkey_index: has(abi::IBV_QP_PKEY_INDEX).then_some(a.pkey_index),
            };
            match (from, to) {
                (abi::IBV_QPS_SQD, abi::IBV_QPS_SQD) => q.sqd2sqd(&sq),
                (abi::IBV_QPS_SQD, _) => q.sqd2rts(&sq),
                (_, abi::IBV_QPS_RTS) => q.sqe2rts(&sq),
                _ => return Err(libc::EINVAL),
            }
        }
        _ => return Err(libc::EINVAL),
    };
    r.map_err(|e| errno_of(&e))
}

/// Keeps the attributes `mask` names, for `ibv_query_qp`.
fn save(s: &mut ibv_qp_attr, a: &ibv_qp_attr, mask: u32) {
    let has = |bit: u32| mask & bit != 0;
    if has(abi::IBV_QP_PKEY_INDEX) {
        s.pkey_index = a.pkey_index;
    }
    if has(abi::IBV_QP_PORT) {
        s.port_num = a.port_num;
    }
    if has(abi::IBV_QP_ACCESS_FLAGS) {
        s.qp_access_flags = a.qp_access_flags;
    }
    if has(abi::IBV_QP_QKEY) {
        s.qkey = a.qkey;
    }
    if has(abi::IBV_QP_AV) {
        s.ah_attr = a.ah_attr;
    }
    if has(abi::IBV_QP_PATH_MTU) {
        s.path_mtu = a.path_mtu;
    }
    if has(abi::IBV_QP_DEST_QPN) {
        s.dest_qp_num = a.dest_qp_num;
    }
    if has(abi::IBV_QP_RQ_PSN) {
        s.rq_psn = a.rq_psn;
    }
    if has(abi::IBV_QP_MAX_DEST_RD_ATOMIC) {
        s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(abi::IBV_QP_MIN_RNR_TIMER) {
        s.min_rnr_timer = a.min_rnr_timer;
    }
    if has(abi::IBV_QP_SQ_PSN) {
        s.sq_psn = a.sq_psn;
    }
    if has(abi::IBV_QP_TIMEOUT) {
        s.timeout = a.timeout;
    }
    if has(abi::IBV_QP_RETRY_CNT) {
        s.retry_cnt = a.retry_cnt;
    }
    if has(abi::IBV_QP_RNR_RETRY) {
        s.rnr_retry = a.rnr_retry;
    }
    if has(abi::IBV_QP_MAX_QP_RD_ATOMIC) {
        s.max_rd_atomic = a.max_rd_atomic;
    }
}

/// `ibv_modify_qp`: 0 or an errno (EINVAL for an edge or attribute the state machine
/// refuses).
///
/// # Safety
/// `qp` from `ibv_create_qp*`; `attr` readable.
#[unsafe(export_name = "__bypass_ibv_modify_qp")]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let (q, a) = unsafe { (Qp::from_ibv(qp), &*attr) };
        let mask = mask as u32;
        let log_msg = q.context().open.hca.caps().log_max_msg;
        let mut g = q.inner.lock();
        let Some(dq) = g.as_mut() else {
            return libc::EINVAL;
        };
        if let Err(e) = modify(dq, a, mask, log_msg) {
            return e;
        }
        let state = ibv_state(dq.state());
        drop(g);
        save(
            &mut q.saved.lock().unwrap_or_else(PoisonError::into_inner),
            a,
            mask,
        );
        // SAFETY: `state` is a program-visible field of this live QP, reached through its
        // cell's raw place; libibverbs writes it in `ibv_modify_qp` the same way.
        let p = unsafe { &raw mut (*q.base()).state };
        // SAFETY: as above.
        unsafe { p.write_volatile(state) };
        0
    })
}

/// `ibv_query_qp`: the attributes set so far, the current state and the caps. 0 or an
/// errno.
///
/// # Safety
/// `qp` from `ibv_create_qp*`; `attr` and `init_attr` writable.
#[unsafe(export_name = "__bypass_ibv_query_qp")]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let _ = mask;
    guard(libc::EIO, || {
        if qp.is_null() || attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let q = unsafe { Qp::from_ibv(qp) };
        let state = match q.inner.lock().as_ref() {
            Some(d) => ibv_state(d.state()),
            None => return libc::EINVAL,
        };
        let mut s = *q.saved.lock().unwrap_or_else(PoisonError::into_inner);
        s.qp_state = state;
        s.cur_qp_state = state;
        s.sq_draining = 0;
        let b = q.base();
        // SAFETY: these fields are set at creation and never written again; each is read
        // through the cell's raw place (no reference to the struct the program writes).
        let init = unsafe {
            ibv_qp_init_attr {
                qp_context: (*b).qp_context,
                send_cq: (*b).send_cq,
                recv_cq: (*b).recv_cq,
                srq: (*b).srq,
                cap: s.cap,
                qp_type: (*b).qp_type,
                sq_sig_all: 0,
            }
        };
        // SAFETY: both are writable (the caller's contract).
        unsafe {
            attr.write(s);
            init_attr.write(init);
        }
        0
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

/// The errno of a refused post (`_mlx5_post_send`: ENOMEM when the queue is full).
pub(crate) fn post_errno(e: &PostError) -> c_int {
    crate::log::failure(e);
    match e {
        PostError::SqFull { .. } | PostError::RqFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// The program's SGE list as the driver's (same layout: asserted at the top).
///
/// # Safety
/// `sg` is readable for `n` entries (or `n <= 0`).
#[inline]
pub(crate) unsafe fn sges<'a>(sg: *mut abi::ibv_sge, n: c_int) -> &'a [Sge] {
    match usize::try_from(n) {
        Ok(n) if n > 0 && !sg.is_null() => {
            // SAFETY: the caller's contract; `Sge` has `ibv_sge`'s layout.
            unsafe { std::slice::from_raw_parts(sg.cast::<Sge>(), n) }
        }
        _ => &[],
    }
}

/// The driver's operation for `wr` (None: an opcode bypass does not post).
fn send_op(wr: &ibv_send_wr) -> Option<SendOp> {
    // SAFETY: each arm reads the union member its opcode selects, as libibverbs defines.
    let op = unsafe {
        let rdma = RemoteAddr {
            addr: wr.wr.rdma.remote_addr,
            rkey: wr.wr.rdma.rkey,
        };
        let atomic = RemoteAddr {
            addr: wr.wr.atomic.remote_addr,
            rkey: wr.wr.atomic.rkey,
        };
        match wr.opcode {
            abi::IBV_WR_SEND => SendOp::Send,
            abi::IBV_WR_SEND_WITH_IMM => SendOp::SendImm {
                imm: u32::from_be(wr.imm_data),
            },
            abi::IBV_WR_RDMA_WRITE => SendOp::Write { remote: rdma },
            abi::IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteImm {
                remote: rdma,
                imm: u32::from_be(wr.imm_data),
            },
            abi::IBV_WR_RDMA_READ => SendOp::Read { remote: rdma },
            abi::IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
                remote: atomic,
                compare: wr.wr.atomic.compare_add,
                swap: wr.wr.atomic.swap,
            },
            abi::IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
                remote: atomic,
                add: wr.wr.atomic.compare_add,
            },
            _ => return None,
        }
    };
    Some(op)
}

/// The driver's flags for `send_flags`.
pub(crate) fn send_flags(f: u32) -> SendFlags {
    let mut out = SendFlags::empty();
    if f & abi::IBV_SEND_SIGNALED != 0 {
        out |= SendFlags::SIGNALED;
    }
    if f & abi::IBV_SEND_SOLICITED != 0 {
        out |= SendFlags::SOLICITED;
    }
    if f & abi::IBV_SEND_FENCE != 0 {
        out |= SendFlags::FENCE;
    }
    out
}

/// Gathers an inline payload: one SGE in place, several copied into `buf` (inline data is
/// copied into the WQE anyway; this is the one extra copy the driver's single-slice inline
/// form needs for a multi-SGE list).
///
/// # Safety
/// Each SGE's `addr..addr+length` is readable memory of the program (libibverbs' contract
/// for inline sends: no lkey, the bytes are read at post time).
pub(crate) unsafe fn inline_payload<'a>(
    list: &'a [Sge],
    buf: &'a mut [u8; INLINE_GATHER],
) -> Option<&'a [u8]> {
    match list {
        [] => Some(&[]),
        // SAFETY: the caller's contract.
        [one] => unsafe { sge_bytes(one) },
        many => {
            let mut at = 0usize;
            for s in many {
                // SAFETY: the caller's contract.
                let src = unsafe { sge_bytes(s) }?;
                let dst = buf.get_mut(at..at.checked_add(src.len())?)?;
                dst.copy_from_slice(src);
                at += src.len();
            }
            buf.get(..at)
        }
    }
}

/// The bytes one inline SGE names: an empty SGE reads nothing, whatever its `addr` (UCX
/// posts a header SGE then a zero-length one at NULL); `None` for bytes at NULL.
///
/// # Safety
/// As [`inline_payload`].
unsafe fn sge_bytes<'a>(s: &Sge) -> Option<&'a [u8]> {
    let len = usize::try_from(s.length).ok()?;
    if len == 0 {
        return Some(&[]);
    }
    if s.addr == 0 {
        return None;
    }
    // SAFETY: the caller's contract; `len > 0` bytes at a non-NULL program address.
    Some(unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, len) })
}

/// Posts one `ibv_send_wr` (not its `next`).
///
/// # Safety
/// `wr` is the program's readable request; its SGEs and AH valid as libibverbs requires.
#[inline]
unsafe fn post_one(q: &mut DriverQp, wr: &ibv_send_wr) -> Result<(), c_int> {
    let Some(op) = send_op(wr) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: the caller's contract.
    let list = unsafe { sges(wr.sg_list, wr.num_sge) };
    let mut buf = [0u8; INLINE_GATHER];
    let payload = if wr.send_flags & abi::IBV_SEND_INLINE != 0 {
        // SAFETY: the caller's contract.
        match unsafe { inline_payload(list, &mut buf) } {
            Some(p) => Payload::Inline(p),
            None => return Err(libc::EINVAL),
        }
    } else {
        Payload::Sges(list)
    };
    let dest: Option<UdDest>;
    let mut s = SendWr {
        wr_id: wr.wr_id,
        op,
        payload,
        flags: send_flags(wr.send_flags),
        ud: None,
    };
    if q.qp_type() == QpType::Ud {
        // SAFETY: a UD request carries `wr.ud` (libibverbs' contract).
        let ud = unsafe { wr.wr.ud };
        if ud.ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `ah` from `ibv_create_ah`, live.
        let ah = unsafe { Ah::from_ibv(ud.ah) };
        dest = Some(ah.dest(ud.remote_qpn, ud.remote_qkey));
        s.ud = dest.as_ref();
    }
    q.post_send(&s).map_err(|e| post_errno(&e))
}

/// Walks a program's linked list of work requests from `head`, posting each with `post`:
/// 0, or the errno of the first one refused, which `*bad` then names (those before it are
/// posted).
///
/// # Safety
/// `head` is NULL or the first of the program's readable list, each `next` of which is
/// NULL or readable; `bad` is NULL or writable.
#[inline]
pub(crate) unsafe fn post_list<W>(
    head: *mut W,
    bad: *mut *mut W,
    next: impl Fn(&W) -> *mut W,
    mut post: impl FnMut(&W) -> Result<(), c_int>,
) -> c_int {
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: the caller's contract: every element of the list is readable.
        let w = unsafe { &*cur };
        if let Err(e) = post(w) {
            if !bad.is_null() {
                // SAFETY: writable (the caller's contract).
                unsafe { *bad = cur };
            }
            return e;
        }
        cur = next(w);
    }
    0
}

/// The request's SGEs as a driver receive.
///
/// # Safety
/// The request's `sg_list` is readable for `num_sge` entries.
#[inline]
pub(crate) unsafe fn recv_wr(w: &ibv_recv_wr) -> RecvWr<'_> {
    RecvWr {
        wr_id: w.wr_id,
        // SAFETY: the caller's contract.
        sges: unsafe { sges(w.sg_list, w.num_sge) },
    }
}

/// The `post_send` ops slot (`ibv_post_send`): every request of the list, in order; 0, or
/// the errno of the first one refused, which `*bad_wr` names (those before it are posted).
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let q = unsafe { Qp::from_ibv(qp) };
        let mut g = q.inner.lock();
        let Some(dq) = g.as_mut() else {
            return libc::EINVAL;
        };
        // SAFETY: the program's list of requests (libibverbs' contract), each posted with
        // its SGEs and AH valid.
        unsafe { post_list(wr, bad_wr, |w| w.next, |w| post_one(dq, w)) }
    })
}

/// The `post_recv` ops slot (`ibv_post_recv`): as `post_send`, for receives.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let q = unsafe { Qp::from_ibv(qp) };
        let mut g = q.inner.lock();
        let Some(dq) = g.as_mut() else {
            return libc::EINVAL;
        };
        // SAFETY: the program's list of receives (libibverbs' contract).
        unsafe {
            post_list(
                wr,
                bad_wr,
                |w| w.next,
                |w| dq.post_recv(&recv_wr(w)).map_err(|e| post_errno(&e)),
            )
        }
    })
}
