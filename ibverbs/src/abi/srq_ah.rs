//! Shared receive queues, XRC domains and address handles: `ibv_srq` and its
//! attributes, `ibv_xrcd`, `ibv_ah`, `ibv_ah_attr`, `ibv_global_route`, `ibv_grh`.
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

/// C `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: i32,
    pub oflags: i32,
}

/// C `struct ibv_xrcd`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// C `struct ibv_global_route`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// C `struct ibv_grh`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_grh {
    /// Big-endian (`__be32`).
    pub version_tclass_flow: u32,
    /// Big-endian (`__be16`).
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

/// C `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// C `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// C `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// C `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// C `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: ibv_srq_type,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// C `struct ibv_srq`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// C `struct ibv_ah`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}
