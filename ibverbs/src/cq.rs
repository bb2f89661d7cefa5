//! Completion queues: create (plain and extended), destroy, poll (`ibv_poll_cq` and the
//! extended `start_poll`/`next_poll`/`read_*`), arm, and the `ibv_wc` translation.
//!
//! Owns: [`Cq`] (an `ibv_cq_ex` first, whose prefix is the `ibv_cq` plain programs see,
//! then the driver's CQ under the ABI's lock), the translation of a driver
//! `WorkCompletion` into `ibv_wc` (status from the CQE syndrome, opcode, flags, `sl`), and the
//! rule that an empty poll lets the device move (`Backend::progress`: a stepped sim runs its
//! world there, hardware ignores it), so a verbs program's busy-poll loop drives the sim.
//! Must not: allocate or take any lock but the CQ's on the poll path; copy payloads.
//!
//! Sources: rdma-core `providers/mlx5/cq.c` (`mlx5_handle_error_cqe`: syndrome → status;
//! `mlx5_parse_cqe`: opcode and `wc_flags`; `handle_responder`: `sl` from `flags_rqpn`, on
//! RoCE the L3 type UCX's `ud_verbs` reads; `mlx5_start_poll`: ENOENT when empty), `verbs.h`
//! (`ibv_cq_ex` read functions; `ibv_create_cq_ex` wc_flags), `man 3 ibv_poll_cq`.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bypass_driver::Hca;
use bypass_driver::completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use bypass_driver::cq::{Cq as DriverCq, CqConfig};
use bypass_driver::hw::syndrome::CqeSyndrome;

use crate::abi::{self, ibv_comp_channel, ibv_context, ibv_cq, ibv_cq_ex, ibv_wc};
use crate::channel::Channel;
use crate::context::Context;
use crate::ffi::{errno_of, guard, set_errno};
use crate::lock::SpinCell;
use crate::registry::Kind;

/// What the CQ's lock guards.
pub(crate) struct CqInner {
    /// The driver's CQ (`None` only while a destroy is in progress).
    pub(crate) cq: Option<DriverCq>,
    /// The completion an extended poll is looking at.
    cur: Option<WorkCompletion>,
}

/// A completion queue: `ex` first, so the program's `*mut ibv_cq` and `*mut ibv_cq_ex` are
/// both a `*mut Cq`.
#[repr(C)]
pub(crate) struct Cq {
    /// The program's `ibv_cq_ex`, in a cell: the extended poll writes `wr_id`/`status`
    /// for the program to read and the event count changes, so it is reached only through
    /// raw places (`(*ex.get()).field`), never a reference to the whole struct.
    ex: UnsafeCell<ibv_cq_ex>,
    pub(crate) inner: SpinCell<CqInner>,
    /// The device, for [`Hca::progress`] when a poll finds nothing.
    hca: Arc<Hca>,
    cqn: u32,
    /// QPs that report to it (a CQ is not destroyed under them: EBUSY).
    pub(crate) users: AtomicU32,
    channel: *mut ibv_comp_channel,
}

// SAFETY: the raw channel pointer is only read (to detach at destroy); the channel outlives
// its CQs (its destroy is EBUSY while `refcnt` counts them). Everything else is `Send+Sync`.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// The CQ behind a program's `ibv_cq` (or `ibv_cq_ex`) pointer.
    ///
    /// # Safety
    /// `cq` from `ibv_create_cq*`, not destroyed.
    #[inline]
    pub(crate) unsafe fn from_ibv<'a>(cq: *mut ibv_cq) -> &'a Cq {
        // SAFETY: `ex` (whose prefix is the `ibv_cq`) is the first field of the boxed
        // `#[repr(C)]` CQ (the caller's contract).
        unsafe { &*cq.cast::<Cq>() }
    }

    /// The program's `ibv_cq` pointer of this CQ.
    pub(crate) fn ibv_cq(&self) -> *mut ibv_cq {
        self.ex.get().cast()
    }

    /// The `cq_context` the program gave at creation.
    pub(crate) fn ibv_cq_context(&self) -> *mut c_void {
        // SAFETY: set at creation, never written again; read through the cell's raw place.
        unsafe { (*self.ex.get()).cq_context }
    }

    /// `ibv_ack_cq_events`' work: the driver's count, and the C struct's counter.
    pub(crate) fn ack_events(&self, n: u32) {
        let g = self.inner.lock();
        if let Some(cq) = g.cq.as_ref()
            && let Err(e) = cq.ack_events(n)
        {
            crate::log::failure(&e);
        }
        drop(g);
        // SAFETY: the field's raw place in the cell, aligned for u32 and owned by this CQ;
        // every update of it is this atomic one (libibverbs makes it under the CQ's mutex).
        let counter = unsafe { &raw mut (*self.ex.get()).comp_events_completed };
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(counter) }.fetch_add(n, Ordering::AcqRel);
    }
}

/// The `ibv_wc_status` of a completion (`mlx5_handle_error_cqe`).
pub(crate) fn wc_status(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => abi::IBV_WC_SUCCESS,
        WcStatus::Error(syn) => match syn {
            CqeSyndrome::LOCAL_LENGTH_ERR => abi::IBV_WC_LOC_LEN_ERR,
            CqeSyndrome::LOCAL_QP_OP_ERR => abi::IBV_WC_LOC_QP_OP_ERR,
            CqeSyndrome::LOCAL_PROT_ERR => abi::IBV_WC_LOC_PROT_ERR,
            CqeSyndrome::WR_FLUSH_ERR => abi::IBV_WC_WR_FLUSH_ERR,
            CqeSyndrome::MW_BIND_ERR => abi::IBV_WC_MW_BIND_ERR,
            CqeSyndrome::BAD_RESP_ERR => abi::IBV_WC_BAD_RESP_ERR,
            CqeSyndrome::LOCAL_ACCESS_ERR => abi::IBV_WC_LOC_ACCESS_ERR,
            CqeSyndrome::REMOTE_INVAL_REQ_ERR => abi::IBV_WC_REM_INV_REQ_ERR,
            CqeSyndrome::REMOTE_ACCESS_ERR => abi::IBV_WC_REM_ACCESS_ERR,
            CqeSyndrome::REMOTE_OP_ERR => abi::IBV_WC_REM_OP_ERR,
            CqeSyndrome::TRANSPORT_RETRY_EXC_ERR => abi::IBV_WC_RETRY_EXC_ERR,
            CqeSyndrome::RNR_RETRY_EXC_ERR => abi::IBV_WC_RNR_RETRY_EXC_ERR,
            CqeSyndrome::REMOTE_ABORTED_ERR => abi::IBV_WC_REM_ABORT_ERR,
            _ => abi::IBV_WC_GENERAL_ERR,
        },
    }
}

/// The `ibv_wc_opcode` of a completion (requester opcodes are what the WQE was; responder
/// ones RECV / RECV_RDMA_WITH_IMM).
pub(crate) fn wc_opcode(o: WcOpcode) -> u32 {
    match o {
        WcOpcode::Send => abi::IBV_WC_SEND,
        WcOpcode::RdmaWrite => abi::IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => abi::IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => abi::IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => abi::IBV_WC_FETCH_ADD,
        WcOpcode::Recv => abi::IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => abi::IBV_WC_RECV_RDMA_WITH_IMM,
        WcOpcode::OtherSend(_) => abi::IBV_WC_SEND,
        WcOpcode::Other(_) => abi::IBV_WC_RECV,
    }
}

/// The `ibv_wc_flags` of a completion.
pub(crate) fn wc_flags(f: WcFlags) -> u32 {
    let mut out = 0;
    if f.contains(WcFlags::GRH) {
        out |= abi::IBV_WC_GRH;
    }
    if f.contains(WcFlags::WITH_IMM) {
        out |= abi::IBV_WC_WITH_IMM;
    }
    if f.contains(WcFlags::WITH_INV) {
        out |= abi::IBV_WC_WITH_INV;
    }
    out
}

/// Writes `w` as the program's `ibv_wc` (an error completion carries `wr_id`, `status`,
/// `vendor_err` and `qp_num` only, as libibverbs documents).
#[inline]
fn write_wc(w: &WorkCompletion, out: &mut ibv_wc) {
    out.wr_id = w.wr_id();
    out.status = wc_status(w.status());
    out.qp_num = w.qpn();
    if w.is_ok() {
        out.opcode = wc_opcode(w.opcode());
        out.vendor_err = 0;
        out.byte_len = w.byte_len();
        out.imm_data = w.imm().to_be();
        out.src_qp = w.src_qp();
        out.wc_flags = wc_flags(w.flags());
        out.sl = w.sl();
    } else {
        out.opcode = 0;
        out.vendor_err = u32::from(w.vendor_err());
        out.byte_len = 0;
        out.imm_data = 0;
        out.src_qp = 0;
        out.wc_flags = 0;
        out.sl = 0;
    }
    out.pkey_index = 0;
    out.slid = 0;
    out.dlid_path_bits = 0;
}

/// The `poll_cq` ops slot (`ibv_poll_cq`): up to `n` completions into `wc`, their number, or
/// a negative value on error. An empty CQ lets the device move once and polls again.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        if cq.is_null() || n < 0 || (wc.is_null() && n > 0) {
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Cq::from_ibv(cq) };
        let want = usize::try_from(n).unwrap_or(0);
        let mut got = poll_into(c, want, wc);
        if got == 0 && want > 0 {
            c.hca.progress();
            got = poll_into(c, want, wc);
        }
        c_int::try_from(got).unwrap_or(c_int::MAX)
    })
}

#[inline]
fn poll_into(c: &Cq, want: usize, wc: *mut ibv_wc) -> usize {
    let mut g = c.inner.lock();
    let Some(cq) = g.cq.as_mut() else { return 0 };
    let mut got = 0;
    while got < want {
        let Some(w) = cq.poll_one() else { break };
        // SAFETY: `wc` holds `want` entries (the caller's contract) and `got < want`.
        write_wc(&w, unsafe { &mut *wc.add(got) });
        got += 1;
    }
    got
}

/// The `req_notify_cq` ops slot: arms the CQ for its next (solicited) completion. 0.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Cq::from_ibv(cq) };
        let mut g = c.inner.lock();
        match g.cq.as_mut() {
            Some(cq) => {
                cq.arm(solicited_only != 0);
                0
            }
            None => libc::EINVAL,
        }
    })
}

/// The `wc_flags` of `ibv_create_cq_ex` that bypass fills.
const EX_FLAGS: u64 = abi::IBV_WC_EX_WITH_BYTE_LEN as u64
    | abi::IBV_WC_EX_WITH_IMM as u64
    | abi::IBV_WC_EX_WITH_QP_NUM as u64
    | abi::IBV_WC_EX_WITH_SRC_QP as u64
    | abi::IBV_WC_EX_WITH_SLID as u64
    | abi::IBV_WC_EX_WITH_SL as u64
    | abi::IBV_WC_EX_WITH_DLID_PATH_BITS as u64;

fn create(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut Cq {
    if ctx.is_null() || cqe < 1 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: the exported verbs' contract.
    let c = unsafe { Context::from_ibv(ctx) };
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: `channel` from `ibv_create_comp_channel` (the caller's contract).
        Some(unsafe { Channel::from_ibv(channel) })
    };
    let (Ok(min), Ok(vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // The kernel's checks (`create_cq` in `uverbs_cmd.c`: a vector the device lacks;
    // `mlx5_ib_create_cq`: more entries than the `max_cqe` query reports): EINVAL.
    let max_cqe = 1u64 << c.open.hca.caps().log_max_cq_sz.min(31);
    if u64::from(min) > max_cqe || vector >= c.open.hca.num_comp_vectors() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let config = CqConfig {
        comp_vector: vector,
        channel: ch.map(|c| &c.ch),
    };
    let dcq = match DriverCq::create_with(&c.open.hca, min, config) {
        Ok(q) => q,
        Err(e) => {
            set_errno(errno_of(&e));
            return std::ptr::null_mut();
        }
    };
    // SAFETY: `ibv_cq_ex` is C data (pointers, integers, nullable fn pointers, pthread
    // objects for which all-zero is their static initialiser on glibc).
    let mut ex: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ex.context = ctx;
    ex.channel = channel;
    ex.cq_context = cq_context;
    ex.handle = dcq.cqn();
    // The driver rounds up to a power of two; the program may use all but one (mlx5 reports
    // `ncqe - 1`).
    ex.cqe = c_int::try_from(dcq.nent().saturating_sub(1)).unwrap_or(c_int::MAX);
    fill_ex_ops(&mut ex);
    let cqn = dcq.cqn();
    let b = Box::into_raw(Box::new(Cq {
        ex: UnsafeCell::new(ex),
        inner: SpinCell::new(CqInner {
            cq: Some(dcq),
            cur: None,
        }),
        hca: c.open.hca.clone(),
        cqn,
        users: AtomicU32::new(0),
        channel,
    }));
    if let Some(ch) = ch {
        ch.attach(cqn, b);
        // SAFETY: `channel` is valid (above); `refcnt` counts its CQs (read by its destroy).
        unsafe { (*channel).refcnt += 1 };
    }
    c.open.registry.insert(Kind::Cq, cqn, b);
    b
}

/// `ibv_create_cq`: NULL with errno on failure.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `channel` NULL or from `ibv_create_comp_channel`.
#[unsafe(export_name = "__bypass_ibv_create_cq")]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        create(ctx, cqe, cq_context, channel, comp_vector).cast()
    })
}

/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex`): NULL with errno (EOPNOTSUPP for a
/// `wc_flags` bit bypass does not fill, such as completion timestamps).
pub(crate) unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut abi::ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract: `attr` readable.
        let a = unsafe { &*attr };
        if a.wc_flags & !EX_FLAGS != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        if a.comp_mask & abi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags != 0 {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        if a.comp_mask & !(abi::IBV_CQ_INIT_ATTR_MASK_FLAGS | abi::IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let (Ok(cqe), Ok(vector)) = (c_int::try_from(a.cqe), c_int::try_from(a.comp_vector)) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        create(ctx, cqe, a.cq_context, a.channel, vector).cast()
    })
}

/// `ibv_destroy_cq`: 0 or an errno (EBUSY while QPs report to it or events are
/// unacknowledged; the CQ stays valid then).
///
/// # Safety
/// `cq` from `ibv_create_cq*`, not used again on success.
#[unsafe(export_name = "__bypass_ibv_destroy_cq")]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(libc::EIO, || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Cq::from_ibv(cq) };
        if c.users.load(Ordering::Acquire) > 0 {
            return libc::EBUSY;
        }
        let taken = c.inner.lock().cq.take();
        let Some(dcq) = taken else {
            return libc::EINVAL;
        };
        if let Err(b) = dcq.destroy() {
            let (dcq, e) = *b;
            c.inner.lock().cq = Some(dcq);
            return errno_of(&e);
        }
        // SAFETY: `context` is set at creation and never written again (read through the
        // cell's raw place); a CQ's context outlives it.
        let ctx = unsafe { Context::from_ibv((*c.ex.get()).context) };
        ctx.open.registry.remove(Kind::Cq, c.cqn);
        if !c.channel.is_null() {
            // SAFETY: the channel outlives its CQs (its destroy is EBUSY while `refcnt` > 0).
            let ch = unsafe { Channel::from_ibv(c.channel) };
            ch.detach(c.cqn);
            // SAFETY: as above.
            unsafe { (*c.channel).refcnt -= 1 };
        }
        // SAFETY: leaked from a `Box<Cq>` in `create`; given back now.
        drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
        0
    })
}

/// `ibv_resize_cq`: not supported (EOPNOTSUPP); the CQ is unchanged.
///
/// # Safety
/// Any arguments: none is read.
#[unsafe(export_name = "__bypass_ibv_resize_cq")]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    let _ = (cq, cqe);
    libc::EOPNOTSUPP
}

fn fill_ex_ops(ex: &mut ibv_cq_ex) {
    ex.start_poll = Some(crate::cq_ex::start_poll);
    ex.next_poll = Some(crate::cq_ex::next_poll);
    ex.end_poll = Some(crate::cq_ex::end_poll);
    ex.read_opcode = Some(crate::cq_ex::read_opcode);
    ex.read_vendor_err = Some(crate::cq_ex::read_vendor_err);
    ex.read_byte_len = Some(crate::cq_ex::read_byte_len);
    ex.read_imm_data = Some(crate::cq_ex::read_imm_data);
    ex.read_qp_num = Some(crate::cq_ex::read_qp_num);
    ex.read_src_qp = Some(crate::cq_ex::read_src_qp);
    ex.read_wc_flags = Some(crate::cq_ex::read_wc_flags);
    ex.read_slid = Some(crate::cq_ex::read_slid);
    ex.read_sl = Some(crate::cq_ex::read_sl);
    ex.read_dlid_path_bits = Some(crate::cq_ex::read_dlid_path_bits);
    ex.read_completion_ts = Some(crate::cq_ex::read_completion_ts);
    ex.read_cvlan = Some(crate::cq_ex::read_cvlan);
    ex.read_flow_tag = Some(crate::cq_ex::read_flow_tag);
    ex.read_tm_info = Some(crate::cq_ex::read_tm_info);
    ex.read_completion_wallclock_ns = Some(crate::cq_ex::read_completion_wallclock_ns);
}

/// The extended poll's step: takes one completion into `cur` and the `wr_id`/`status` the
/// program reads from the struct; false when the CQ is empty (after letting the device move
/// once).
pub(crate) fn ex_step(cq: *mut ibv_cq_ex) -> bool {
    // SAFETY: an `ibv_cq_ex` we created is a `Cq` (the ops' contract).
    let c = unsafe { Cq::from_ibv(cq.cast()) };
    let mut w = poll_one(c);
    if w.is_none() {
        c.hca.progress();
        w = poll_one(c);
    }
    let Some(w) = w else { return false };
    // SAFETY: `cq` is the program's live CQ; `wr_id` and `status` are plain fields it reads
    // after this call returns, on this thread (the extended poll is single-threaded per CQ
    // between start_poll and end_poll, as libibverbs documents).
    unsafe {
        (*cq).wr_id = w.wr_id();
        (*cq).status = wc_status(w.status());
    }
    c.inner.lock().cur = Some(w);
    true
}

fn poll_one(c: &Cq) -> Option<WorkCompletion> {
    c.inner.lock().cq.as_mut()?.poll_one()
}

/// The completion the extended poll is on.
pub(crate) fn ex_current(cq: *mut ibv_cq_ex) -> Option<WorkCompletion> {
    // SAFETY: as in `ex_step`.
    let c = unsafe { Cq::from_ibv(cq.cast()) };
    c.inner.lock().cur
}
