//! # bypass-ibverbs: a drop-in `libibverbs.so.1`
//!
//! Exports the libibverbs C ABI (Debian bookworm's rdma-core 44.0) backed by bypass's driver.

pub mod abi;
