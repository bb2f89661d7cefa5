//! The verbs bypass does not offer, failing the way libibverbs documents for a provider
//! without them, and the ops slots that only old binaries reach.
//!
//! Owns: memory windows, multicast, importing objects shared through a kernel `cmd_fd`,
//! ECE, L2 address resolution, the kernel
//! struct copies (there is no kernel ABI under bypass), and the `_compat_*` ops slots.
//! Must not: pretend success for anything that would change state.
//!
//! Sources: rdma-core `libibverbs/verbs.c` / `device.c` (EOPNOTSUPP, or NULL with errno
//! EOPNOTSUPP, where a provider lacks an op: `ibv_alloc_mw`, `ibv_import_*`,
//! `ibv_query_ece`), `man 3 ibv_query_qp_data_in_order` (0: no ordering guarantee).

use std::ffi::{c_int, c_void};

use crate::abi::{self, ibv_context, ibv_mr, ibv_pd, ibv_qp};
use crate::ffi::set_errno;

/// A `_compat_*` slot of `ibv_context_ops` (reached only by binaries built against
/// libibverbs 1.0): NULL with errno EOPNOTSUPP.
pub(crate) unsafe extern "C" fn compat_slot() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// The `alloc_mw` slot: memory windows are not supported.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, ty: u32) -> *mut abi::ibv_mw {
    let _ = (pd, ty);
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// The `bind_mw` slot: EOPNOTSUPP.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut abi::ibv_mw,
    bind: *mut abi::ibv_mw_bind,
) -> c_int {
    let _ = (qp, mw, bind);
    libc::EOPNOTSUPP
}

/// The `dealloc_mw` slot: EOPNOTSUPP.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut abi::ibv_mw) -> c_int {
    let _ = mw;
    libc::EOPNOTSUPP
}

macro_rules! unsupported_int {
    ($($(#[$m:meta])* $name:ident => $sym:literal ($($a:ident: $t:ty),*);)*) => {$(
        $(#[$m])*
        ///
        /// # Safety
        /// Any arguments: none is read.
        #[unsafe(export_name = $sym)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let _ = ($($a,)*);
            libc::EOPNOTSUPP
        }
    )*};
}

macro_rules! unsupported_ptr {
    ($($(#[$m:meta])* $name:ident => $sym:literal ($($a:ident: $t:ty),*) -> $r:ty;)*) => {$(
        $(#[$m])*
        ///
        /// # Safety
        /// Any arguments: none is read.
        #[unsafe(export_name = $sym)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            let _ = ($($a,)*);
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    )*};
}

unsupported_int! {
    /// `ibv_attach_mcast`: multicast is not supported (EOPNOTSUPP).
    ibv_attach_mcast => "__bypass_ibv_attach_mcast" (qp: *mut ibv_qp, gid: *const abi::ibv_gid, lid: u16);
    /// `ibv_detach_mcast`: EOPNOTSUPP.
    ibv_detach_mcast => "__bypass_ibv_detach_mcast" (qp: *mut ibv_qp, gid: *const abi::ibv_gid, lid: u16);
    /// `ibv_query_ece`: ECE is not supported (EOPNOTSUPP).
    ibv_query_ece => "__bypass_ibv_query_ece" (qp: *mut ibv_qp, ece: *mut abi::ibv_ece);
    /// `ibv_set_ece`: EOPNOTSUPP.
    ibv_set_ece => "__bypass_ibv_set_ece" (qp: *mut ibv_qp, ece: *mut abi::ibv_ece);
    /// `ibv_resolve_eth_l2_from_gid`: a simulated NIC resolves peers by GID itself, and
    /// bypass has no neighbour table to ask (EOPNOTSUPP).
    ibv_resolve_eth_l2_from_gid => "__bypass_ibv_resolve_eth_l2_from_gid"
        (ctx: *mut ibv_context, attr: *mut abi::ibv_ah_attr, mac: *mut u8, vid: *mut u16);
}

unsupported_ptr! {
    /// `ibv_import_device`: there is no kernel `cmd_fd` to import from (NULL, EOPNOTSUPP).
    ibv_import_device => "__bypass_ibv_import_device" (cmd_fd: c_int) -> *mut ibv_context;
    /// `ibv_import_pd`: NULL, EOPNOTSUPP.
    ibv_import_pd => "__bypass_ibv_import_pd" (ctx: *mut ibv_context, handle: u32) -> *mut ibv_pd;
    /// `ibv_import_mr`: NULL, EOPNOTSUPP.
    ibv_import_mr => "__bypass_ibv_import_mr" (pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr;
    /// `ibv_import_dm`: NULL, EOPNOTSUPP.
    ibv_import_dm => "__bypass_ibv_import_dm" (ctx: *mut ibv_context, handle: u32) -> *mut abi::ibv_dm;
}

/// `ibv_unimport_pd`: nothing can have been imported.
///
/// # Safety
/// Any argument: none is read.
#[unsafe(export_name = "__bypass_ibv_unimport_pd")]
pub unsafe extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    let _ = pd;
}

/// `ibv_unimport_mr`: nothing can have been imported.
///
/// # Safety
/// Any argument: none is read.
#[unsafe(export_name = "__bypass_ibv_unimport_mr")]
pub unsafe extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    let _ = mr;
}

/// `ibv_unimport_dm`: nothing can have been imported.
///
/// # Safety
/// Any argument: none is read.
#[unsafe(export_name = "__bypass_ibv_unimport_dm")]
pub unsafe extern "C" fn ibv_unimport_dm(dm: *mut abi::ibv_dm) {
    let _ = dm;
}

/// `ibv_query_qp_data_in_order`: 0, no in-order guarantee is made to a CPU reading the
/// data before the completion (what a provider without the capability answers).
///
/// # Safety
/// Any arguments: none is read.
#[unsafe(export_name = "__bypass_ibv_query_qp_data_in_order")]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: u32, flags: u32) -> c_int {
    let _ = (qp, op, flags);
    0
}

macro_rules! kern_copy {
    ($($(#[$m:meta])* $name:ident => $sym:literal;)*) => {$(
        $(#[$m])*
        ///
        /// There is no kernel ABI under bypass, so no program of it holds such a struct;
        /// the call leaves `dst` as it is.
        ///
        /// # Safety
        /// Any arguments: none is read or written.
        #[unsafe(export_name = $sym)]
        pub unsafe extern "C" fn $name(dst: *mut c_void, src: *const c_void) {
            let _ = (dst, src);
        }
    )*};
}

kern_copy! {
    /// `ibv_copy_qp_attr_from_kern` (a kernel `ib_uverbs_qp_attr` into `ibv_qp_attr`).
    ibv_copy_qp_attr_from_kern => "__bypass_ibv_copy_qp_attr_from_kern";
    /// `ibv_copy_ah_attr_from_kern`.
    ibv_copy_ah_attr_from_kern => "__bypass_ibv_copy_ah_attr_from_kern";
    /// `ibv_copy_path_rec_from_kern`.
    ibv_copy_path_rec_from_kern => "__bypass_ibv_copy_path_rec_from_kern";
    /// `ibv_copy_path_rec_to_kern`.
    ibv_copy_path_rec_to_kern => "__bypass_ibv_copy_path_rec_to_kern";
}
