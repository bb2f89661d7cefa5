//! The extended poll of `ibv_cq_ex`: `start_poll` / `next_poll` / `end_poll` and the
//! `ibv_wc_read_*` functions a program calls through the struct's pointers.
//!
//! Owns: the function-pointer slots of `ibv_cq_ex` (each reads the completion the last
//! `start_poll`/`next_poll` took: `cq.rs` keeps it).
//! Must not: take completions any other way than `cq::ex_step`.
//!
//! Sources: rdma-core `libibverbs/verbs.h` (`ibv_start_poll`: ENOENT when empty, the
//! `wr_id`/`status` fields set on success; the read functions valid until the next
//! `next_poll`/`end_poll`), `providers/mlx5/cq.c` (`mlx5_start_poll`, `mlx5_cq_read_wc_*`).

use std::ffi::c_int;

use crate::abi::{ibv_cq_ex, ibv_poll_cq_attr, ibv_wc_tm_info};
use crate::cq::{ex_current, ex_step, wc_flags, wc_opcode};
use crate::ffi::guard;

/// `start_poll`: 0 with the first completion taken, ENOENT when none is ready.
pub(crate) unsafe extern "C" fn start_poll(
    cq: *mut ibv_cq_ex,
    attr: *mut ibv_poll_cq_attr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: `attr` is the program's (readable when non-NULL).
        if cq.is_null() || (!attr.is_null() && unsafe { (*attr).comp_mask } != 0) {
            return libc::EINVAL;
        }
        if ex_step(cq) { 0 } else { libc::ENOENT }
    })
}

/// `next_poll`: 0 with the next completion taken, ENOENT when none is ready.
pub(crate) unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        if ex_step(cq) { 0 } else { libc::ENOENT }
    })
}

/// `end_poll`: nothing to release (each step took its completion whole).
pub(crate) unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    let _ = cq;
}

macro_rules! reader {
    ($(#[$m:meta])* $name:ident -> $t:ty, |$w:ident| $e:expr) => {
        $(#[$m])*
        pub(crate) unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            guard(Default::default(), || match ex_current(cq) {
                Some($w) => $e,
                None => Default::default(),
            })
        }
    };
}

reader!(/// `read_opcode`.
    read_opcode -> u32, |w| wc_opcode(w.opcode()));
reader!(/// `read_vendor_err`.
    read_vendor_err -> u32, |w| u32::from(w.vendor_err()));
reader!(/// `read_byte_len`.
    read_byte_len -> u32, |w| w.byte_len());
reader!(/// `read_imm_data` (big-endian, as `ibv_wc.imm_data`).
    read_imm_data -> u32, |w| w.imm().to_be());
reader!(/// `read_qp_num`.
    read_qp_num -> u32, |w| w.qpn());
reader!(/// `read_src_qp`.
    read_src_qp -> u32, |w| w.src_qp());
reader!(/// `read_wc_flags`.
    read_wc_flags -> u32, |w| wc_flags(w.flags()));
reader!(/// `read_slid` (0 on RoCE).
    read_slid -> u32, |_w| 0);
reader!(/// `read_sl`: as `ibv_wc.sl` (on RoCE a receive's L3 header type, `mlx5_cq_read_wc_sl`).
    read_sl -> u8, |w| w.sl());
reader!(/// `read_dlid_path_bits` (0 on RoCE).
    read_dlid_path_bits -> u8, |_w| 0);
reader!(/// `read_completion_ts`: never requested (`create_cq_ex` refuses the flag).
    read_completion_ts -> u64, |_w| 0);
reader!(/// `read_cvlan`: never requested.
    read_cvlan -> u16, |_w| 0);
reader!(/// `read_flow_tag`: never requested.
    read_flow_tag -> u32, |_w| 0);
reader!(/// `read_completion_wallclock_ns`: never requested.
    read_completion_wallclock_ns -> u64, |_w| 0);

/// `read_tm_info`: tag matching is not supported; the info reads as zero.
pub(crate) unsafe extern "C" fn read_tm_info(cq: *mut ibv_cq_ex, info: *mut ibv_wc_tm_info) {
    let _ = cq;
    if !info.is_null() {
        // SAFETY: `info` is writable (the caller's contract) and all-zero is a valid value.
        unsafe { info.write(std::mem::zeroed()) };
    }
}
