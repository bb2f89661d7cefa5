//! Protection domains and memory: `ibv_pd`, `ibv_mr`, `ibv_mw`, `ibv_dm`, thread
//! domains and parent domains.
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

/// C `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// C `struct ibv_dm`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<
        unsafe extern "C" fn(
            dm: *mut ibv_dm,
            dm_offset: u64,
            host_addr: *const c_void,
            length: usize,
        ) -> i32,
    >,
    pub memcpy_from_dm: Option<
        unsafe extern "C" fn(
            host_addr: *mut c_void,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
        ) -> i32,
    >,
    pub comp_mask: u32,
    pub handle: u32,
}

/// C `struct ibv_pd`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// C `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// C `struct ibv_td`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// C `struct ibv_mr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// C `struct ibv_mw`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: ibv_mw_type,
}

/// C `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            size: usize,
            alignment: usize,
            resource_type: u64,
        ) -> *mut c_void,
    >,
    pub free: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            ptr: *mut c_void,
            resource_type: u64,
        ),
    >,
    pub pd_context: *mut c_void,
}
