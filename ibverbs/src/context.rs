//! `ibv_open_device` / `ibv_close_device`: the context a program holds, with every function
//! pointer slot of `ibv_context_ops` and the `verbs_context` extensions filled.
//!
//! Owns: [`Context`] (a `verbs_context` first, whose last member is the `ibv_context` the
//! program sees, then the shared HCA), the two ops tables, and the way back from a program's
//! `*mut ibv_context` to its [`Context`].
//! Must not: implement the verbs the slots point at (each lives with its object: `cq.rs`,
//! `qp.rs`, `srq.rs`, `query.rs`, …).
//!
//! Sources: rdma-core `libibverbs/verbs.h` (`verbs_get_ctx`: `abi_compat` must be
//! `UINTPTR_MAX`; `verbs_get_ctx_op`: an op is present when `sz` covers its offset and the
//! pointer is non-NULL, and absent means "not supported", never a crash), `libibverbs/device.c`
//! (`verbs_init_context`, `ibv_close_device`). The `ibv_context_ops` slots are called by
//! inline functions in the program itself, so none may be NULL: slots bypass does not
//! implement point at stubs that fail with the errno the inline caller expects.

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::abi::{ibv_context, ibv_context_ops, ibv_device, verbs_context};
use crate::devices::{self, Device, Opened};
use crate::ffi::{errno_of, guard, set_errno};
use crate::{cq, qp, qp_post, query, srq, stubs};

/// An open context. `#[repr(C)]` with `vctx` first: the program's `ibv_context` is
/// `vctx.context`, at a fixed offset from the start.
#[repr(C)]
pub(crate) struct Context {
    pub(crate) vctx: verbs_context,
    /// The HCA and what its contexts share.
    pub(crate) open: Arc<Opened>,
    /// The device it was opened on.
    pub(crate) device: &'static Device,
    /// `ibv_context.cmd_fd`: there is no kernel command channel, but programs `dup` or
    /// `fstat` the fd (rdma-core's python tests `os.dup(ctx.cmd_fd)` before
    /// `ibv_import_device`), so it is a real fd, on `/dev/null`, closed with the context.
    _cmd_fd: Option<OwnedFd>,
}

impl Context {
    /// The context behind a program's `ibv_context` pointer.
    ///
    /// # Safety
    /// `ctx` must be a pointer `ibv_open_device` returned and `ibv_close_device` has not
    /// freed.
    #[inline]
    pub(crate) unsafe fn from_ibv<'a>(ctx: *mut ibv_context) -> &'a Context {
        let off = std::mem::offset_of!(Context, vctx.context);
        // SAFETY: every `ibv_context` we hand out is the `vctx.context` of a boxed `Context`
        // (the caller's contract), so stepping back `off` bytes is its start.
        unsafe { &*ctx.byte_sub(off).cast::<Context>() }
    }

    /// The program's handle of this context.
    pub(crate) fn ibv(&self) -> *mut ibv_context {
        std::ptr::from_ref(&self.vctx.context).cast_mut()
    }
}

/// The `ibv_context_ops` every context carries.
fn context_ops() -> ibv_context_ops {
    // SAFETY: the ops table is nullable function pointers only: all-zero is valid, and every
    // slot is set below.
    let mut ops: ibv_context_ops = unsafe { std::mem::zeroed() };
    ops._compat_query_device = Some(query::compat_query_device);
    ops._compat_query_port = Some(query::compat_query_port);
    ops._compat_alloc_pd = Some(stubs::compat_slot);
    ops._compat_dealloc_pd = Some(stubs::compat_slot);
    ops._compat_reg_mr = Some(stubs::compat_slot);
    ops._compat_rereg_mr = Some(stubs::compat_slot);
    ops._compat_dereg_mr = Some(stubs::compat_slot);
    ops.alloc_mw = Some(stubs::alloc_mw);
    ops.bind_mw = Some(stubs::bind_mw);
    ops.dealloc_mw = Some(stubs::dealloc_mw);
    ops._compat_create_cq = Some(stubs::compat_slot);
    ops.poll_cq = Some(cq::poll_cq);
    ops.req_notify_cq = Some(cq::req_notify_cq);
    ops._compat_cq_event = Some(stubs::compat_slot);
    ops._compat_resize_cq = Some(stubs::compat_slot);
    ops._compat_destroy_cq = Some(stubs::compat_slot);
    ops._compat_create_srq = Some(stubs::compat_slot);
    ops._compat_modify_srq = Some(stubs::compat_slot);
    ops._compat_query_srq = Some(stubs::compat_slot);
    ops._compat_destroy_srq = Some(stubs::compat_slot);
    ops.post_srq_recv = Some(srq::post_srq_recv);
    ops._compat_create_qp = Some(stubs::compat_slot);
    ops._compat_query_qp = Some(stubs::compat_slot);
    ops._compat_modify_qp = Some(stubs::compat_slot);
    ops._compat_destroy_qp = Some(stubs::compat_slot);
    ops.post_send = Some(qp_post::post_send);
    ops.post_recv = Some(qp_post::post_recv);
    ops._compat_create_ah = Some(stubs::compat_slot);
    ops._compat_destroy_ah = Some(stubs::compat_slot);
    ops._compat_attach_mcast = Some(stubs::compat_slot);
    ops._compat_detach_mcast = Some(stubs::compat_slot);
    ops._compat_async_event = Some(stubs::compat_slot);
    ops
}

/// The `verbs_context` extensions bypass implements (the rest stay NULL: "not supported").
fn fill_extensions(v: &mut verbs_context) {
    v.query_port = Some(query::query_port_ex);
    v.query_device_ex = Some(query::query_device_ex);
    v.create_cq_ex = Some(cq::create_cq_ex);
    v.create_qp_ex = Some(qp::create_qp_ex);
    v.get_srq_num = Some(srq::get_srq_num);
    v.sz = std::mem::size_of::<verbs_context>();
}

/// `ibv_open_device`: brings the HCA up (or shares the one a context has up) and makes a
/// context on it. NULL with errno on failure.
///
/// # Safety
/// `device` must come from `ibv_get_device_list`.
#[unsafe(export_name = "__bypass_ibv_open_device")]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let Some(dev) = devices::from_ptr(device) else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        let open = match dev.open() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("bypass libibverbs: opening {}: {e}", dev.spec);
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        // SAFETY: `verbs_context` (with the `ibv_context` in it) is C data: integers,
        // pointers, nullable fn pointers and a pthread mutex, for which all-zero is
        // `PTHREAD_MUTEX_INITIALIZER` on glibc.
        let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
        fill_extensions(&mut vctx);
        let c = &mut vctx.context;
        c.device = device;
        c.ops = context_ops();
        let cmd_fd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .ok()
            .map(OwnedFd::from);
        c.cmd_fd = cmd_fd.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        c.async_fd = open.events.as_fd().as_raw_fd();
        c.num_comp_vectors = i32::try_from(open.hca.num_comp_vectors()).unwrap_or(i32::MAX);
        c.abi_compat = usize::MAX as *mut c_void;
        let ctx = Box::new(Context {
            vctx,
            open,
            device: dev,
            _cmd_fd: cmd_fd,
        });
        Box::leak(ctx).ibv()
    })
}

/// `ibv_close_device`: frees the context; the HCA goes down with its last context. 0, or -1
/// with errno.
///
/// # Safety
/// `ctx` must come from `ibv_open_device` and not be used again.
#[unsafe(export_name = "__bypass_ibv_close_device")]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> i32 {
    guard(-1, || {
        if ctx.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract; `from_ibv` finds the box's start.
        let c: *const Context = unsafe { Context::from_ibv(ctx) };
        // SAFETY: the context was leaked from a `Box` in `ibv_open_device`, and the caller
        // gives it back now.
        drop(unsafe { Box::from_raw(c.cast_mut()) });
        0
    })
}
