//! # bypass-ibverbs: a drop-in `libibverbs.so.1`
//!
//! Exports the libibverbs C ABI of Debian bookworm's rdma-core 44.0 (`symbols.txt`, every
//! symbol at its version node: `objdump -T` shows `ibv_open_device@@IBVERBS_1.1`) backed
//! by bypass's driver, so unmodified verbs programs (ibverbs-utils, perftest, pyverbs) run
//! on a simulated NIC (`BYPASS_DEVICE=sim`), a simulated NIC on a UDP socket that speaks
//! RoCEv2 (`udp:ADDR[:PORT]`), or a NIC bound to vfio-pci (`vfio:BDF`).
//!
//! ```text
//! cargo build -p bypass-ibverbs && scripts/abi-install.sh   # target/debug/abi/libibverbs.so.1
//! LD_LIBRARY_PATH=target/debug/abi BYPASS_DEVICE=udp:127.0.0.1 ibv_rc_pingpong -g 0
//! ```
//!
//! Layout: the C structs (`abi/`, checked against the installed `<infiniband/verbs.h>` by
//! `tests/layout_oracle.rs`), the boundary (`ffi.rs`: panics stop there, errno), the devices
//! (`devices.rs`, `list.rs`), the context and its ops tables (`context.rs`), and one file per
//! verbs object (`pd_mr.rs` with `dmabuf_mr.rs`, `cq.rs`/`cq_ex.rs`, `channel.rs`, `qp.rs` with
//! `qp_attrs.rs`, `qp_post.rs` and `qp_ex.rs`, `srq.rs`, `ah.rs`, `events.rs`, `query.rs`), the
//! rest in `stubs.rs` and `misc.rs`. Each C object is a `#[repr(C)]` Rust struct whose first
//! field is the struct the program sees, so a program's pointer is the object's address; the
//! driver object behind it sits under the one lock the ABI forces (`lock.rs`).

pub mod abi;
mod ah;
mod channel;
mod context;
mod cq;
mod cq_ex;
mod devices;
mod dmabuf_mr;
mod events;
mod ffi;
mod list;
mod lock;
mod log;
mod misc;
mod pd_mr;
mod qp;
mod qp_attrs;
mod qp_ex;
mod qp_post;
mod query;
mod registry;
mod srq;
mod stubs;
