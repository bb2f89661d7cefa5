//! Protection domains and memory regions over the program's own memory.
//!
//! Owns: `ibv_alloc_pd` / `ibv_dealloc_pd`, `ibv_reg_mr` / `ibv_reg_mr_iova2` / `ibv_dereg_mr`
//! (of these and of `ibv_reg_dmabuf_mr`'s, `dmabuf_mr.rs`) / `ibv_rereg_mr` (a new
//! registration, then the old one's release), and [`Pd`] / [`Mr`], the C objects with the
//! driver's behind them. A registration is the driver's application-memory MR (`UserMr`): the
//! pages are mapped for the device (pinned, `MADV_DONTFORK`), an MTT mkey covers exactly the
//! bytes asked for, from the IOVA asked for; the program's memory is never copied.
//! Must not: touch the registered bytes.
//!
//! Sources: rdma-core `libibverbs/verbs.c` (`ibv_reg_mr_iova2`: the access flags it accepts,
//! IBV_ACCESS_OPTIONAL_RANGE bits ignored where unsupported; `ibv_dereg_mr` EBUSY while in
//! use is the kernel's), `man 3 ibv_reg_mr` (EINVAL for bad access flags: remote write or
//! atomic without local write), the kernel's `ib_check_mr_access` (`include/rdma/ib_verbs.h`:
//! which flags it accepts, EOPNOTSUPP for on-demand paging on a device without it);
//! `verbs.c` `ibv_rereg_mr` and `man 3 ibv_rereg_mr` (its checks and error codes).

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use bypass_driver::dmabuf_mr::DmaBufMr;
use bypass_driver::hw::cmd::mkey::MkeyAccess;
use bypass_driver::pd::Pd as DriverPd;
use bypass_driver::user_mr::UserMr;

use crate::abi::{self, ibv_context, ibv_mr, ibv_pd};
use crate::context::Context;
use crate::ffi::{errno_of, guard, set_errno};

/// A protection domain: `ibv` first, so the program's `*mut ibv_pd` is a `*mut Pd`.
#[repr(C)]
pub(crate) struct Pd {
    pub(crate) ibv: ibv_pd,
    pub(crate) pd: Arc<DriverPd>,
}

impl Pd {
    /// The PD behind a program's pointer.
    ///
    /// # Safety
    /// `pd` from `ibv_alloc_pd`, not yet deallocated.
    pub(crate) unsafe fn from_ibv<'a>(pd: *mut ibv_pd) -> &'a Pd {
        // SAFETY: `ibv` is the first field of the `#[repr(C)]` box (the caller's contract).
        unsafe { &*pd.cast::<Pd>() }
    }

    /// The context it was allocated on.
    pub(crate) fn context(&self) -> &Context {
        // SAFETY: a PD's context outlives it (the program must destroy PDs before closing).
        unsafe { Context::from_ibv(self.ibv.context) }
    }
}

/// A memory region: `ibv` first.
#[repr(C)]
pub(crate) struct Mr {
    ibv: ibv_mr,
    /// The registration; `None` after an `ibv_dereg_mr` that failed (its key is gone and its
    /// pages stay pinned for good: the driver's `StillMapped`), and for a dma-buf MR.
    mr: Option<UserMr>,
    /// A dma-buf registration (`ibv_reg_dmabuf_mr`, `dmabuf_mr.rs`); `None` otherwise.
    dmabuf: Option<DmaBufMr>,
}

impl Mr {
    /// The C object of a dma-buf registration.
    pub(crate) fn dmabuf(ibv: ibv_mr, mr: DmaBufMr) -> Self {
        Self {
            ibv,
            mr: None,
            dmabuf: Some(mr),
        }
    }
}

/// `ibv_alloc_pd`: NULL with errno on failure.
///
/// # Safety
/// `ctx` from `ibv_open_device`.
#[unsafe(export_name = "__bypass_ibv_alloc_pd")]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        if ctx.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        match DriverPd::alloc(&c.open.hca) {
            Ok(pd) => {
                let ibv = ibv_pd {
                    context: ctx,
                    handle: pd.pdn(),
                };
                Box::into_raw(Box::new(Pd { ibv, pd })).cast()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                std::ptr::null_mut()
            }
        }
    })
}

/// `ibv_dealloc_pd`: 0, or an errno (EBUSY while objects use it: the driver PD is shared by
/// them and goes when the last of them does; the C object goes now).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`, not used again.
#[unsafe(export_name = "__bypass_ibv_dealloc_pd")]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard(libc::EIO, || {
        if pd.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract: `pd` is a boxed `Pd`.
        let p = unsafe { &*pd.cast::<Pd>() };
        if Arc::strong_count(&p.pd) > 1 {
            return libc::EBUSY;
        }
        // SAFETY: leaked from a `Box` in `ibv_alloc_pd`; given back now.
        drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
        0
    })
}

/// `IBV_ACCESS_OPTIONAL_RANGE` (`verbs.h`: the bits from `IBV_ACCESS_OPTIONAL_FIRST`, 1 << 20,
/// up to bit 29): hints a provider may ignore, which bypass does.
const IBV_ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

/// The mkey access of `ibv_access_flags`, or the errno the kernel's `ib_check_mr_access`
/// gives: EINVAL for remote write or atomic without local write and for unknown bits,
/// EOPNOTSUPP for on-demand paging (bypass pins every registration). `IBV_ACCESS_MW_BIND`
/// only permits binding memory windows to the MR, and bypass allocates none
/// (`ibv_alloc_mw` is EOPNOTSUPP), so it grants nothing; `IBV_ACCESS_HUGETLB` says the
/// pages are huge pages, which pinning does not need to know: both are accepted, as the
/// kernel does.
pub(crate) fn mkey_access(access: c_int) -> Result<MkeyAccess, c_int> {
    let a = u32::try_from(access).map_err(|_| libc::EINVAL)?;
    let remote = abi::IBV_ACCESS_REMOTE_WRITE | abi::IBV_ACCESS_REMOTE_ATOMIC;
    if a & remote != 0 && a & abi::IBV_ACCESS_LOCAL_WRITE == 0 {
        return Err(libc::EINVAL);
    }
    let known = abi::IBV_ACCESS_LOCAL_WRITE
        | abi::IBV_ACCESS_REMOTE_WRITE
        | abi::IBV_ACCESS_REMOTE_READ
        | abi::IBV_ACCESS_REMOTE_ATOMIC
        | abi::IBV_ACCESS_MW_BIND
        | abi::IBV_ACCESS_ON_DEMAND
        | abi::IBV_ACCESS_HUGETLB
        | abi::IBV_ACCESS_RELAXED_ORDERING
        | IBV_ACCESS_OPTIONAL_RANGE;
    if a & !known != 0 {
        return Err(libc::EINVAL);
    }
    if a & abi::IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut m = MkeyAccess::empty();
    if a & abi::IBV_ACCESS_LOCAL_WRITE != 0 {
        m |= MkeyAccess::LOCAL_WRITE;
    }
    if a & abi::IBV_ACCESS_REMOTE_WRITE != 0 {
        m |= MkeyAccess::REMOTE_WRITE;
    }
    if a & abi::IBV_ACCESS_REMOTE_READ != 0 {
        m |= MkeyAccess::REMOTE_READ;
    }
    if a & abi::IBV_ACCESS_REMOTE_ATOMIC != 0 {
        m |= MkeyAccess::REMOTE_ATOMIC;
    }
    Ok(m)
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: Option<u64>,
    access: c_int,
) -> *mut ibv_mr {
    if pd.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let m = match mkey_access(access) {
        Ok(m) => m,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let Some(a) = NonNull::new(addr.cast::<u8>()) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    if len == 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: `pd` from `ibv_alloc_pd` (the exported verbs' contract).
    let p = unsafe { Pd::from_ibv(pd) };
    // SAFETY: libibverbs' contract for `ibv_reg_mr`: the range is the program's memory and
    // stays mapped until `ibv_dereg_mr`; the device reaches it as the access flags allow,
    // which is exactly `UserMr::register`'s contract.
    match unsafe { UserMr::register(&p.pd, a, len, iova, m) } {
        Ok(mr) => {
            let ibv = ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length: len,
                handle: mr.lkey(),
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            };
            Box::into_raw(Box::new(Mr {
                ibv,
                mr: Some(mr),
                dmabuf: None,
            }))
            .cast()
        }
        Err(e) => {
            set_errno(errno_of(&e));
            std::ptr::null_mut()
        }
    }
}

/// `ibv_reg_mr` (the exported form behind the macro): `len` bytes at `addr`, addressed from
/// `addr`. NULL with errno on failure.
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `addr..addr+len` the program's memory, mapped until
/// `ibv_dereg_mr`.
#[unsafe(export_name = "__bypass_ibv_reg_mr")]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || reg(pd, addr, len, None, access))
}

/// `ibv_reg_mr_iova2`: as `ibv_reg_mr`, addressed from `iova` (same page offset as `addr`).
///
/// # Safety
/// As `ibv_reg_mr`.
#[unsafe(export_name = "__bypass_ibv_reg_mr_iova2")]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        reg(
            pd,
            addr,
            len,
            Some(iova),
            c_int::try_from(access).unwrap_or(-1),
        )
    })
}

/// `ibv_reg_mr_iova` (IBVERBS_1.7's name of the same verb).
///
/// # Safety
/// As `ibv_reg_mr`.
#[unsafe(export_name = "__bypass_ibv_reg_mr_iova")]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        reg(pd, addr, len, Some(iova), access)
    })
}

/// `ibv_dereg_mr`: 0 or an errno. On EBUSY (the device may still reach the pages, which
/// then stay pinned for good) the C object stays allocated, so a program that calls
/// `ibv_dereg_mr` again passes a valid pointer; that call frees it and returns 0, since
/// nothing is left to release.
///
/// # Safety
/// `mr` from `ibv_reg_mr*`, not used again on success.
#[unsafe(export_name = "__bypass_ibv_dereg_mr")]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(libc::EIO, || {
        if mr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a boxed `Mr` (the caller's contract), not used by another thread.
        let m = unsafe { &mut *mr.cast::<Mr>() };
        if let Some(Err(e)) = m.mr.take().map(UserMr::deregister) {
            return errno_of(&e);
        }
        if let Some(Err(e)) = m.dmabuf.take().map(DmaBufMr::deregister) {
            return errno_of(&e);
        }
        // SAFETY: leaked from a `Box<Mr>` in `reg`, given back now; `m` is not used again.
        drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
        0
    })
}

/// `ibv_rereg_mr`: registers the MR again with what `flags` changes (its PD, its range, its
/// access) and the rest kept, as "deregister followed by register" (`man 3 ibv_rereg_mr`):
/// a new mkey is made first, then the old one goes, so the keys change (the program reads
/// them from `mr` again, as the kernel may also give new ones). 0, or an
/// `ibv_rereg_mr_err_code` with errno: `IBV_REREG_MR_ERR_INPUT` (EINVAL) for inputs
/// libibverbs refuses, `IBV_REREG_MR_ERR_CMD` when the new registration fails; in both the
/// MR is unchanged and still valid.
///
/// # Safety
/// `mr` from `ibv_reg_mr*`, not in use by another thread; `pd` from `ibv_alloc_pd` when
/// `flags` has `IBV_REREG_MR_CHANGE_PD`; `addr..addr+len` the program's memory, mapped until
/// `ibv_dereg_mr`, when `flags` has `IBV_REREG_MR_CHANGE_TRANSLATION`.
#[unsafe(export_name = "__bypass_ibv_rereg_mr")]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    guard(abi::IBV_REREG_MR_ERR_CMD, || {
        let input_error = || {
            set_errno(libc::EINVAL);
            abi::IBV_REREG_MR_ERR_INPUT
        };
        let Ok(f) = u32::try_from(flags) else {
            return input_error();
        };
        let change = |bit: u32| f & bit != 0;
        // libibverbs' own checks (`verbs.c` `ibv_rereg_mr`), then the kernel's
        // (`ib_uverbs_rereg_mr`: no flag at all is EINVAL; the new PD must be of the same
        // context).
        if mr.is_null()
            || f & !abi::IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (change(abi::IBV_REREG_MR_CHANGE_TRANSLATION) && (len == 0 || addr.is_null()))
            || (access != 0 && !change(abi::IBV_REREG_MR_CHANGE_ACCESS))
            || f == 0
            || (change(abi::IBV_REREG_MR_CHANGE_PD) && pd.is_null())
        {
            return input_error();
        }
        // SAFETY: `mr` is a boxed `Mr` (`ibv` first) the caller does not use meanwhile.
        let m = unsafe { &mut *mr.cast::<Mr>() };
        if m.dmabuf.is_some() {
            // Only a plain MR is registered again (`verbs.c` `ibv_rereg_mr`: any other
            // `mr_type`, a dma-buf MR included, is EINVAL): the MR is unchanged.
            return input_error();
        }
        let Some(cur) = m.mr.as_ref() else {
            // A failed `ibv_dereg_mr` left nothing to register again.
            return input_error();
        };
        let new_pd = if change(abi::IBV_REREG_MR_CHANGE_PD) {
            pd
        } else {
            m.ibv.pd
        };
        // SAFETY: `new_pd` is the caller's PD (checked non-NULL) or the MR's own.
        let p = unsafe { Pd::from_ibv(new_pd) };
        if p.ibv.context != m.ibv.context {
            return input_error();
        }
        let access = if change(abi::IBV_REREG_MR_CHANGE_ACCESS) {
            match mkey_access(access) {
                Ok(a) => a,
                Err(e) => {
                    set_errno(e);
                    return abi::IBV_REREG_MR_ERR_CMD;
                }
            }
        } else {
            cur.access()
        };
        // A new range is addressed from its host address (rdma-core's mlx5 passes `addr` as
        // the IOVA); otherwise the MR keeps its range and IOVA.
        let (host, len, iova) = if change(abi::IBV_REREG_MR_CHANGE_TRANSLATION) {
            (addr, len, None)
        } else {
            (m.ibv.addr, m.ibv.length, Some(cur.addr()))
        };
        let Some(host_nn) = NonNull::new(host.cast::<u8>()) else {
            return input_error();
        };
        // SAFETY: the range is the program's memory, mapped until `ibv_dereg_mr` (the
        // caller's contract for a new range; `ibv_reg_mr`'s for the kept one).
        let fresh = match unsafe { UserMr::register(&p.pd, host_nn, len, iova, access) } {
            Ok(r) => r,
            Err(e) => {
                set_errno(errno_of(&e));
                return abi::IBV_REREG_MR_ERR_CMD;
            }
        };
        let (lkey, rkey) = (fresh.lkey(), fresh.rkey());
        let old = m.mr.replace(fresh);
        if let Some(Err(e)) = old.map(UserMr::deregister) {
            // The old pages stay pinned for good (the driver's contract); the MR itself
            // is the new registration, which succeeded.
            errno_of(&e);
        }
        m.ibv.pd = new_pd;
        m.ibv.addr = host;
        m.ibv.length = len;
        m.ibv.handle = lkey;
        m.ibv.lkey = lkey;
        m.ibv.rkey = rkey;
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(flags: u32) -> Result<MkeyAccess, c_int> {
        mkey_access(c_int::try_from(flags).expect("flags fit an int"))
    }

    #[test]
    fn mr_access_follows_the_kernels_check() {
        let lw = abi::IBV_ACCESS_LOCAL_WRITE;
        // Remote write or atomic without local write, and unknown bits: EINVAL.
        assert_eq!(access(abi::IBV_ACCESS_REMOTE_WRITE), Err(libc::EINVAL));
        assert_eq!(access(abi::IBV_ACCESS_REMOTE_ATOMIC), Err(libc::EINVAL));
        assert_eq!(access(lw | abi::IBV_ACCESS_ZERO_BASED), Err(libc::EINVAL));
        assert_eq!(access(lw | 1 << 30), Err(libc::EINVAL));
        // On-demand paging: not supported.
        assert_eq!(
            access(lw | abi::IBV_ACCESS_ON_DEMAND),
            Err(libc::EOPNOTSUPP)
        );
        // MW_BIND and HUGETLB grant nothing the mkey encodes; optional bits are ignored.
        assert_eq!(
            access(lw | abi::IBV_ACCESS_MW_BIND | abi::IBV_ACCESS_HUGETLB),
            Ok(MkeyAccess::LOCAL_WRITE)
        );
        assert_eq!(
            access(lw | abi::IBV_ACCESS_REMOTE_WRITE | abi::IBV_ACCESS_RELAXED_ORDERING),
            Ok(MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE)
        );
        assert_eq!(
            access(abi::IBV_ACCESS_REMOTE_READ),
            Ok(MkeyAccess::REMOTE_READ)
        );
    }
}
