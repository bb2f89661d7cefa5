//! The C layouts of `<infiniband/verbs.h>` (rdma-core v44) that programs see.
//!
//! Owns: every struct, union, function-pointer slot, enum and constant of the header that a
//! function of the header takes or returns, as `#[repr(C)]` Rust mirrors under the C names,
//! and the `ibv_*_str` strings. Must not hold behaviour (the exported functions, the device
//! model): it is the vocabulary the rest of the crate is written in.
//!
//! Naming of what C leaves unnamed: a named member whose type is an unnamed struct or union
//! gets the type `<outer>_<member>`, `<outer>` being the top-level C type (`ibv_send_wr.wr` is
//! `ibv_send_wr_wr`, `ibv_send_wr.wr.rdma` is `ibv_send_wr_rdma`). An anonymous union of
//! scalars is one field named after its first member (`ibv_wc.imm_data`); the two anonymous
//! unions of aggregates are the fields `ibv_send_wr.tso_bind` and `ibv_flow_spec.spec`.
//! C enums are integer type aliases with one `const` per enumerator (`consts.rs`).
//!
//! Follows: `/usr/include/infiniband/verbs.h` (rdma-core v44, Debian bookworm), rdma-core's
//! `libibverbs/verbs.c` for `_compat_ibv_port_attr` (not in the header) and
//! `libibverbs/enum_strs.c` for the strings (checked against Debian's `libibverbs.so.1` by
//! `tests/layout_oracle.rs`, which also checks every layout and constant with gcc).

// The C names are the contract; fields and constants are documented by the header they mirror.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]
// Function-pointer slots spell out C signatures.
#![allow(clippy::type_complexity)]

use core::ffi::CStr;

mod consts;
mod context;
mod cq;
mod device;
mod events;
mod flow;
mod mr_pd;
mod qp;
mod srq_ah;
mod wq;
mod wr;

pub use consts::*;
pub use context::*;
pub use cq::*;
pub use device::*;
pub use events::*;
pub use flow::*;
pub use mr_pd::*;
pub use qp::*;
pub use srq_ah::*;
pub use wq::*;
pub use wr::*;

/// C `struct timespec` (`ibv_values_ex.raw_clock`).
pub type timespec = libc::timespec;

/// C `enum ib_uverbs_advise_mr_advice` of `<infiniband/ib_user_ioctl_verbs.h>`.
pub type ib_uverbs_advise_mr_advice = u32;
/// C `enum ib_uverbs_flow_action_esp_keymat` of `<infiniband/ib_user_ioctl_verbs.h>`.
pub type ib_uverbs_flow_action_esp_keymat = u32;
/// C `enum ib_uverbs_flow_action_esp_replay` of `<infiniband/ib_user_ioctl_verbs.h>`.
pub type ib_uverbs_flow_action_esp_replay = u32;

/// C `struct ib_uverbs_flow_action_esp`, only ever behind a pointer here (kernel uAPI).
#[repr(C)]
pub struct ib_uverbs_flow_action_esp {
    _opaque: [u8; 0],
}

/// C `struct ib_uverbs_flow_action_esp_encap`, only ever behind a pointer here (kernel uAPI).
#[repr(C)]
pub struct ib_uverbs_flow_action_esp_encap {
    _opaque: [u8; 0],
}

/// C `struct verbs_ex_private`: libibverbs-private, only a pointer in `verbs_context.priv`.
#[repr(C)]
pub struct verbs_ex_private {
    _opaque: [u8; 0],
}

/// C `struct _compat_ibv_port_attr` (rdma-core `libibverbs/verbs.c`): what the exported
/// `ibv_query_port@IBVERBS_1.1` and the `_compat_query_port` slot fill, 48 bytes: the
/// `ibv_port_attr` of before `port_cap_flags2`, i.e. its prefix up to `flags`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct _compat_ibv_port_attr {
    pub state: ibv_port_state,
    pub max_mtu: ibv_mtu,
    pub active_mtu: ibv_mtu,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
}

/// `ibv_wc_status_str`: the text libibverbs v44 gives a completion status, "unknown" outside
/// `IBV_WC_SUCCESS..=IBV_WC_TM_RNDV_INCOMPLETE`.
pub fn wc_status_str(s: u32) -> &'static CStr {
    const S: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    S.get(s as usize).copied().unwrap_or(c"unknown")
}

/// `ibv_event_type_str`: the text libibverbs v44 gives an async event type, "unknown"
/// outside `IBV_EVENT_CQ_ERR..=IBV_EVENT_WQ_FATAL`.
pub fn event_type_str(e: u32) -> &'static CStr {
    const S: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    S.get(e as usize).copied().unwrap_or(c"unknown")
}

/// `ibv_node_type_str`: the text libibverbs v44 gives a node type, "unknown" outside
/// `IBV_NODE_CA..=IBV_NODE_UNSPECIFIED`.
pub fn node_type_str(n: i32) -> &'static CStr {
    match n {
        IBV_NODE_CA => c"InfiniBand channel adapter",
        IBV_NODE_SWITCH => c"InfiniBand switch",
        IBV_NODE_ROUTER => c"InfiniBand router",
        IBV_NODE_RNIC => c"iWARP NIC",
        IBV_NODE_USNIC => c"usNIC",
        IBV_NODE_USNIC_UDP => c"usNIC UDP",
        IBV_NODE_UNSPECIFIED => c"unspecified",
        _ => c"unknown",
    }
}

/// `ibv_port_state_str`: the text libibverbs v44 gives a port state, "unknown" outside
/// `IBV_PORT_NOP..=IBV_PORT_ACTIVE_DEFER`.
pub fn port_state_str(s: u32) -> &'static CStr {
    const S: [&CStr; 6] = [
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    S.get(s as usize).copied().unwrap_or(c"unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wc_status_strings_follow_libibverbs() {
        assert_eq!(wc_status_str(IBV_WC_SUCCESS), c"success");
        assert_eq!(
            wc_status_str(IBV_WC_WR_FLUSH_ERR),
            c"Work Request Flushed Error"
        );
        assert_eq!(
            wc_status_str(IBV_WC_RETRY_EXC_ERR),
            c"transport retry counter exceeded"
        );
        assert_eq!(wc_status_str(IBV_WC_GENERAL_ERR), c"general error");
        assert_eq!(
            wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE),
            c"TM software rendezvous"
        );
        assert_eq!(wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE + 1), c"unknown");
        assert_eq!(wc_status_str(u32::MAX), c"unknown");
    }

    #[test]
    fn event_type_strings_follow_libibverbs() {
        assert_eq!(event_type_str(IBV_EVENT_CQ_ERR), c"CQ error");
        assert_eq!(event_type_str(IBV_EVENT_PORT_ACTIVE), c"port active");
        assert_eq!(event_type_str(IBV_EVENT_GID_CHANGE), c"GID table change");
        assert_eq!(event_type_str(IBV_EVENT_WQ_FATAL), c"WQ fatal");
        assert_eq!(event_type_str(IBV_EVENT_WQ_FATAL + 1), c"unknown");
        assert_eq!(event_type_str(u32::MAX), c"unknown");
    }

    #[test]
    fn node_type_strings_follow_libibverbs() {
        assert_eq!(node_type_str(IBV_NODE_CA), c"InfiniBand channel adapter");
        assert_eq!(node_type_str(IBV_NODE_RNIC), c"iWARP NIC");
        assert_eq!(node_type_str(IBV_NODE_UNSPECIFIED), c"unspecified");
        assert_eq!(node_type_str(IBV_NODE_UNKNOWN), c"unknown");
        assert_eq!(node_type_str(0), c"unknown");
        assert_eq!(node_type_str(IBV_NODE_UNSPECIFIED + 1), c"unknown");
    }

    #[test]
    fn port_state_strings_follow_libibverbs() {
        assert_eq!(port_state_str(IBV_PORT_NOP), c"no state change (NOP)");
        assert_eq!(port_state_str(IBV_PORT_ACTIVE), c"active");
        assert_eq!(port_state_str(IBV_PORT_ACTIVE_DEFER), c"active defer");
        assert_eq!(port_state_str(IBV_PORT_ACTIVE_DEFER + 1), c"unknown");
    }
}
