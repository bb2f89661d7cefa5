//! The post path of a QP: the `post_send` / `post_recv` ops slots and what they share with
//! the SRQ's and the extended post's (`post_list`, `sges`, `send_flags`, `post_errno`).
//!
//! Owns: the translation of `ibv_send_wr` / `ibv_recv_wr` into the driver's requests. The
//! program's `ibv_sge` arrays go to the driver as they are (the driver's `Sge` has the same C
//! layout, asserted below): no copy of the list, and the payload is only ever read by the
//! device's DMA (inline sends copy into the WQE; a multi-SGE inline list is gathered first).
//! Must not: build WQEs (the driver does), or poll.
//!
//! Sources: rdma-core `providers/mlx5/qp.c` (`_mlx5_post_send`: ENOMEM for a full SQ,
//! EINVAL for a bad request, `*bad_wr` the first WR not posted; inline data gathered from
//! every SGE; `mlx5_post_recv`).

use std::ffi::c_int;

use bypass_driver::post::{
    Payload, PostError, RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge, UdDest,
};
use bypass_driver::qp::Qp as DriverQp;
use bypass_driver::qp_attr::QpType;

use crate::abi::{self, ibv_qp, ibv_recv_wr, ibv_send_wr};
use crate::ah::Ah;
use crate::ffi::guard;
use crate::qp::Qp;

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
    // Initialised (1 KiB zeroed) only for an inline send: every other post skips it.
    let mut buf: [u8; INLINE_GATHER];
    let payload = if wr.send_flags & abi::IBV_SEND_INLINE != 0 {
        buf = [0u8; INLINE_GATHER];
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
    // SAFETY: the caller's contract: the program's SGEs, registered memory it leaves alone
    // until the completion (libibverbs'), which is the driver's posting contract.
    unsafe { q.post_send(&s) }.map_err(|e| post_errno(&e))
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

/// Runs `f` on the driver's QP behind the program's `qp`, under the QP's lock: EINVAL for a
/// NULL or destroyed QP.
///
/// # Safety
/// `qp` is NULL or from `ibv_create_qp*`.
#[inline]
unsafe fn with_driver_qp(qp: *mut ibv_qp, f: impl FnOnce(&mut DriverQp) -> c_int) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    let q = unsafe { Qp::from_ibv(qp) };
    let mut g = q.inner.lock();
    match g.as_mut() {
        Some(dq) => f(dq),
        None => libc::EINVAL,
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
        // SAFETY: `qp` from `ibv_create_qp*`; the program's list of requests (libibverbs'
        // contract), each posted with its SGEs and AH valid.
        unsafe {
            with_driver_qp(qp, |dq| {
                post_list(wr, bad_wr, |w| w.next, |w| post_one(dq, w))
            })
        }
    })
}

/// The `post_recv` ops slot (`ibv_post_recv`): as `post_send`, for receives.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: `qp` from `ibv_create_qp*`; the program's list of receives, whose SGEs it
        // leaves alone until their completions (libibverbs' contract: the driver's posting
        // contract).
        unsafe {
            with_driver_qp(qp, |dq| {
                post_list(
                    wr,
                    bad_wr,
                    |w| w.next,
                    |w| dq.post_recv(&recv_wr(w)).map_err(|e| post_errno(&e)),
                )
            })
        }
    })
}
