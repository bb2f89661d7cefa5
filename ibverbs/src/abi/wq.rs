//! Work queues and RSS indirection tables: `ibv_wq`, `ibv_rwq_ind_table` and their
//! attributes.
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

/// C `struct ibv_wq_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_wq_init_attr {
    pub wq_context: *mut c_void,
    pub wq_type: ibv_wq_type,
    pub max_wr: u32,
    pub max_sge: u32,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub comp_mask: u32,
    pub create_flags: u32,
}

/// C `struct ibv_wq_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_wq_attr {
    pub attr_mask: u32,
    pub wq_state: ibv_wq_state,
    pub curr_wq_state: ibv_wq_state,
    pub flags: u32,
    pub flags_mask: u32,
}

/// C `struct ibv_rwq_ind_table`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_rwq_ind_table {
    pub context: *mut ibv_context,
    pub ind_tbl_handle: i32,
    pub ind_tbl_num: i32,
    pub comp_mask: u32,
}

/// C `struct ibv_rwq_ind_table_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_rwq_ind_table_init_attr {
    pub log_ind_tbl_size: u32,
    pub ind_tbl: *mut *mut ibv_wq,
    pub comp_mask: u32,
}

/// C `struct ibv_wq`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    pub state: ibv_wq_state,
    pub wq_type: ibv_wq_type,
    pub post_recv: Option<
        unsafe extern "C" fn(
            current: *mut ibv_wq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> i32,
    >,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}
