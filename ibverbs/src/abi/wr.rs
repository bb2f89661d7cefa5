//! Work requests: `ibv_send_wr` (with its named unions `ibv_send_wr_wr`,
//! `ibv_send_wr_qp_type` and the anonymous tso/bind-MW union `ibv_send_wr_tso_bind`),
//! `ibv_recv_wr`, `ibv_sge`, `ibv_data_buf`, tag-matching `ibv_ops_wr`, MW binds.
//!
//! Owns: the `#[repr(C)]` Rust mirrors of these C types, field for field (same names, order and
//! types; a Rust keyword gets a `_` suffix; `__be*` fields are plain integers holding the
//! big-endian value). Must not hold behaviour: the exported functions live elsewhere.
//! Naming of C's unnamed aggregates is in `abi/mod.rs`.
//!
//! Follows: `/usr/include/infiniband/verbs.h` of rdma-core v44 (Debian bookworm), x86-64.
//! `tests/layout_oracle.rs` compiles that header with gcc and checks the size, alignment and
//! every field's offset and size of every type here.

use core::ffi::c_void;

use super::*;

/// C `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// C `struct ibv_data_buf`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// C `struct ibv_sge`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The unnamed `struct` of C `struct ibv_send_wr` reached there as `.wr.rdma`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The unnamed `struct` of C `struct ibv_send_wr` reached there as `.wr.atomic`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// The unnamed `struct` of C `struct ibv_send_wr` reached there as `.wr.ud`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The unnamed `union` of C `struct ibv_send_wr` reached there as `.wr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// The unnamed `struct` of C `struct ibv_send_wr` reached there as `.qp_type.xrc`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// The unnamed `union` of C `struct ibv_send_wr` reached there as `.qp_type`.
#[repr(C)]
#[derive(Copy, Clone)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// The unnamed `struct` of C `struct ibv_send_wr` reached there as `.bind_mw`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// The unnamed `struct` of C `struct ibv_send_wr` reached there as `.tso`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The anonymous `union` inside C `struct ibv_send_wr`: in C its members are members of `ibv_send_wr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub union ibv_send_wr_tso_bind {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// C `struct ibv_send_wr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
    pub opcode: ibv_wr_opcode,
    pub send_flags: u32,
    /// Anonymous union in C: `imm_data` (`__be32`, big-endian), also read as `invalidate_rkey` (`uint32_t`).
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// Anonymous union in C: its members (`bind_mw`, `tso`) are members of `ibv_send_wr` there.
    pub tso_bind: ibv_send_wr_tso_bind,
}

/// C `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
}

/// The unnamed `struct` of C `struct ibv_ops_wr` reached there as `.tm.add`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_ops_wr_add {
    pub recv_wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
    pub tag: u64,
    pub mask: u64,
}

/// The unnamed `struct` of C `struct ibv_ops_wr` reached there as `.tm`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_ops_wr_tm {
    pub unexpected_cnt: u32,
    pub handle: u32,
    pub add: ibv_ops_wr_add,
}

/// C `struct ibv_ops_wr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_ops_wr {
    pub wr_id: u64,
    pub next: *mut ibv_ops_wr,
    pub opcode: ibv_ops_wr_opcode,
    pub flags: i32,
    pub tm: ibv_ops_wr_tm,
}

/// C `struct ibv_mw_bind`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}
