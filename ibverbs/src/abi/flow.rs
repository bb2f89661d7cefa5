//! Flow steering, flow actions and counters: every `ibv_flow_spec_*`, `ibv_flow_attr`,
//! `ibv_flow`, `ibv_flow_action`, `ibv_counters`. `ibv_flow_spec`'s anonymous union is
//! the field `spec: ibv_flow_spec_spec`.
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

/// C `struct ibv_flow_eth_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_eth_filter {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ether_type: u16,
    pub vlan_tag: u16,
}

/// C `struct ibv_flow_spec_eth`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_eth {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_eth_filter,
    pub mask: ibv_flow_eth_filter,
}

/// C `struct ibv_flow_ipv4_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_ipv4_filter {
    pub src_ip: u32,
    pub dst_ip: u32,
}

/// C `struct ibv_flow_spec_ipv4`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_ipv4 {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_ipv4_filter,
    pub mask: ibv_flow_ipv4_filter,
}

/// C `struct ibv_flow_ipv4_ext_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_ipv4_ext_filter {
    pub src_ip: u32,
    pub dst_ip: u32,
    pub proto: u8,
    pub tos: u8,
    pub ttl: u8,
    pub flags: u8,
}

/// C `struct ibv_flow_spec_ipv4_ext`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_ipv4_ext {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_ipv4_ext_filter,
    pub mask: ibv_flow_ipv4_ext_filter,
}

/// C `struct ibv_flow_ipv6_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_ipv6_filter {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub flow_label: u32,
    pub next_hdr: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
}

/// C `struct ibv_flow_spec_ipv6`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_ipv6 {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_ipv6_filter,
    pub mask: ibv_flow_ipv6_filter,
}

/// C `struct ibv_flow_esp_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_esp_filter {
    pub spi: u32,
    pub seq: u32,
}

/// C `struct ibv_flow_spec_esp`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_esp {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_esp_filter,
    pub mask: ibv_flow_esp_filter,
}

/// C `struct ibv_flow_tcp_udp_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_tcp_udp_filter {
    pub dst_port: u16,
    pub src_port: u16,
}

/// C `struct ibv_flow_spec_tcp_udp`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_tcp_udp {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_tcp_udp_filter,
    pub mask: ibv_flow_tcp_udp_filter,
}

/// C `struct ibv_flow_gre_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_gre_filter {
    pub c_ks_res0_ver: u16,
    pub protocol: u16,
    pub key: u32,
}

/// C `struct ibv_flow_spec_gre`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_gre {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_gre_filter,
    pub mask: ibv_flow_gre_filter,
}

/// C `struct ibv_flow_mpls_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_mpls_filter {
    pub label: u32,
}

/// C `struct ibv_flow_spec_mpls`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_mpls {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_mpls_filter,
    pub mask: ibv_flow_mpls_filter,
}

/// C `struct ibv_flow_tunnel_filter`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_tunnel_filter {
    pub tunnel_id: u32,
}

/// C `struct ibv_flow_spec_tunnel`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_tunnel {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub val: ibv_flow_tunnel_filter,
    pub mask: ibv_flow_tunnel_filter,
}

/// C `struct ibv_flow_spec_action_tag`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_action_tag {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub tag_id: u32,
}

/// C `struct ibv_flow_spec_action_drop`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_action_drop {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
}

/// C `struct ibv_flow_spec_action_handle`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_action_handle {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub action: *const ibv_flow_action,
}

/// C `struct ibv_flow_spec_counter_action`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_counter_action {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
    pub counters: *mut ibv_counters,
}

/// The unnamed `struct` of C `struct ibv_flow_spec` reached there as `.hdr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec_hdr {
    pub type_: ibv_flow_spec_type,
    pub size: u16,
}

/// The anonymous `union` inside C `struct ibv_flow_spec`: in C its members are members of `ibv_flow_spec`.
#[repr(C)]
#[derive(Copy, Clone)]
pub union ibv_flow_spec_spec {
    pub hdr: ibv_flow_spec_hdr,
    pub eth: ibv_flow_spec_eth,
    pub ipv4: ibv_flow_spec_ipv4,
    pub tcp_udp: ibv_flow_spec_tcp_udp,
    pub ipv4_ext: ibv_flow_spec_ipv4_ext,
    pub ipv6: ibv_flow_spec_ipv6,
    pub esp: ibv_flow_spec_esp,
    pub tunnel: ibv_flow_spec_tunnel,
    pub gre: ibv_flow_spec_gre,
    pub mpls: ibv_flow_spec_mpls,
    pub flow_tag: ibv_flow_spec_action_tag,
    pub drop: ibv_flow_spec_action_drop,
    pub handle: ibv_flow_spec_action_handle,
    pub flow_count: ibv_flow_spec_counter_action,
}

/// C `struct ibv_flow_spec`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_spec {
    /// Anonymous union in C: its members (`hdr`, `eth`, `ipv4`, `tcp_udp`, `ipv4_ext`, `ipv6`, `esp`, `tunnel`, `gre`, `mpls`, `flow_tag`, `drop`, `handle`, `flow_count`) are members of `ibv_flow_spec` there.
    pub spec: ibv_flow_spec_spec,
}

/// C `struct ibv_flow_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_attr {
    pub comp_mask: u32,
    pub type_: ibv_flow_attr_type,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub port: u8,
    pub flags: u32,
}

/// C `struct ibv_flow`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow {
    pub comp_mask: u32,
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// C `struct ibv_flow_action`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_action {
    pub context: *mut ibv_context,
}

/// C `struct ibv_flow_action_esp_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_flow_action_esp_attr {
    pub esp_attr: *mut ib_uverbs_flow_action_esp,
    pub keymat_proto: ib_uverbs_flow_action_esp_keymat,
    pub keymat_len: u16,
    pub keymat_ptr: *mut c_void,
    pub replay_proto: ib_uverbs_flow_action_esp_replay,
    pub replay_len: u16,
    pub replay_ptr: *mut c_void,
    pub esp_encap: *mut ib_uverbs_flow_action_esp_encap,
    pub comp_mask: u32,
    pub esn: u32,
}

/// C `struct ibv_counters_init_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_counters_init_attr {
    pub comp_mask: u32,
}

/// C `struct ibv_counters`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_counters {
    pub context: *mut ibv_context,
}

/// C `struct ibv_counter_attach_attr`.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ibv_counter_attach_attr {
    pub counter_desc: ibv_counter_description,
    pub index: u32,
    pub comp_mask: u32,
}
