//! `ibv_reg_dmabuf_mr`: memory regions over a dma-buf fd.
//!
//! Owns: the exported `ibv_reg_dmabuf_mr` and its access check. Must not: keep the program's
//! fd (libibverbs does not take ownership: the registration holds a `dup` of it, so the
//! program may close its own at once) or check the registration rules itself beyond what
//! must come before the fd is read (the driver's `DmaBufRange::check` states them).
//!
//! The MR it returns is the same C object as `ibv_reg_mr`'s (`pd_mr.rs`), so `ibv_dereg_mr`
//! releases it (and `ibv_rereg_mr` refuses it with EINVAL, as libibverbs does). Errors, as
//! rdma-core and the kernel give them: EINVAL for access flags outside the five `man 3
//! ibv_reg_dmabuf_mr` lists (or remote write/atomic without local write, `ib_check_mr_access`),
//! for a zero length, a wrapping range, an IOVA whose page offset is not the offset's, a range
//! past the dma-buf's end, and for an fd that is not a dma-buf (`dma_buf_get`); EBADF for an fd
//! that is not open; EOPNOTSUPP when the backend cannot map the exporter's buffers (CUDA memory
//! on the sim without its `PeerMemory`). Sources: rdma-core `libibverbs/verbs.c`
//! `ibv_reg_dmabuf_mr` (`mr->addr` is the offset, `mr->length` the length), the kernel's
//! `drivers/infiniband/core/uverbs_std_types_mr.c` (`UVERBS_METHOD_REG_DMABUF_MR`: the access
//! check, then the ranges) and `drivers/dma-buf/dma-buf.c` `dma_buf_get`.

use std::ffi::c_int;
use std::os::fd::BorrowedFd;

use bypass_driver::dmabuf_mr::{DmaBufMr, DmaBufRange, DmaBufSource};

use crate::abi::{self, ibv_mr, ibv_pd};
use crate::ffi::{errno_of, guard, set_errno};
use crate::pd_mr::{Mr, Pd, mkey_access};

/// The flags `man 3 ibv_reg_dmabuf_mr` allows (relaxed ordering is a hint: accepted, and
/// dropped by [`mkey_access`]).
const DMABUF_ACCESS: u32 = abi::IBV_ACCESS_LOCAL_WRITE
    | abi::IBV_ACCESS_REMOTE_WRITE
    | abi::IBV_ACCESS_REMOTE_READ
    | abi::IBV_ACCESS_REMOTE_ATOMIC
    | abi::IBV_ACCESS_RELAXED_ORDERING;

/// `ibv_reg_dmabuf_mr`: `length` bytes of the dma-buf `fd` from `offset`, addressed from
/// `iova`. NULL with errno on failure.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `fd` an fd of this process (or negative), not closed by another
/// thread during the call.
#[unsafe(export_name = "__bypass_ibv_reg_dmabuf_mr")]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        match reg(
            pd,
            DmaBufRange {
                offset,
                len: length,
                iova,
            },
            fd,
            access,
        ) {
            Ok(mr) => mr,
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}

fn reg(
    pd: *mut ibv_pd,
    range: DmaBufRange,
    fd: c_int,
    access: c_int,
) -> Result<*mut ibv_mr, c_int> {
    if pd.is_null() {
        return Err(libc::EINVAL);
    }
    let a = u32::try_from(access).map_err(|_| libc::EINVAL)?;
    if a & !DMABUF_ACCESS != 0 {
        return Err(libc::EINVAL);
    }
    let m = mkey_access(access)?;
    // The rules that need no fd come first, as the kernel checks them before `dma_buf_get`
    // (the size is checked again, against the dma-buf's, at registration).
    range
        .check(u64::MAX, "dma-buf", m)
        .map_err(|e| errno_of(&e))?;
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: `fd` is open for the duration of the call (the caller's contract); it is only
    // borrowed to be duplicated.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let own = borrowed.try_clone_to_owned().map_err(|_| libc::EBADF)?;
    let src = DmaBufSource::from_fd(own).map_err(|e| errno_of(&e))?;
    // SAFETY: `pd` from `ibv_alloc_pd` (the exported verbs' contract).
    let p = unsafe { Pd::from_ibv(pd) };
    let mr = DmaBufMr::register(&p.pd, &src, range, m).map_err(|e| errno_of(&e))?;
    let ibv = ibv_mr {
        context: p.ibv.context,
        pd,
        addr: range.offset as usize as *mut std::ffi::c_void,
        length: range.len,
        handle: mr.lkey(),
        lkey: mr.lkey(),
        rkey: mr.rkey(),
    };
    Ok(Box::into_raw(Box::new(Mr::dmabuf(ibv, mr))).cast())
}
