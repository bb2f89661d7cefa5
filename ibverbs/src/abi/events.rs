//! Asynchronous events: `ibv_async_event` and its `element` union.
//!
//! Owns: the `#[repr(C)]` Rust mirrors of these C types, field for field (same names, order and
//! types; a Rust keyword gets a `_` suffix; `__be*` fields are plain integers holding the
//! big-endian value). Must not hold behaviour: the exported functions live elsewhere.
//! Naming of C's unnamed aggregates is in `abi/mod.rs`.
//!
//! Follows: `/usr/include/infiniband/verbs.h` of rdma-core v44 (Debian bookworm), x86-64.
//! `tests/layout_oracle.rs` compiles that header with gcc and checks the size, alignment and
//! every field's offset and size of every type here.

use super::*;

/// The unnamed `union` of C `struct ibv_async_event` reached there as `.element`.
#[repr(C)]
#[derive(Copy, Clone)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: i32,
}

/// C `struct ibv_async_event`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}
