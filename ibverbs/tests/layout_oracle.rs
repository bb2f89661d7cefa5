//! Conformance of `ibverbs::abi` with the installed `<infiniband/verbs.h>` (rdma-core v44),
//! compiled by gcc, and of the `*_str` functions with Debian's real `libibverbs.so.1`.
//!
//! One table, `LAYOUTS`, names every Rust type of `abi` with its C type and every field; a
//! struct's row must name all its fields (an exhaustive destructuring pattern is generated, so
//! a field added on the Rust side without its row fails to compile; a field added on the C side
//! changes a size). From the table the test writes a C program that prints `sizeof`,
//! `_Alignof` and, per field, `offsetof` and `sizeof`, and compares them with `size_of`,
//! `align_of`, `offset_of!` and the field type's size on the Rust side. `CONSTS` does the
//! same for every enumerator and `#define` value.
//!
//! C types of the table: `struct X`/`union X`; for C's unnamed aggregates a `__typeof__`
//! expression; `@P` for an anonymous union inside `P` (its members are `P`'s in C: offsets
//! are taken relative to its first member and its own size is checked through `P`'s);
//! `%P` for a type the header lacks that is a prefix of `P` (`_compat_ibv_port_attr`).
//! A field written `f = "c"` has the C name `c`; `f = "@m"` is an anonymous union whose first
//! member is `m`.
//!
//! Without gcc or the header the test skips, unless `BYPASS_REQUIRE_ORACLES=1`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use ibverbs::abi::*;

/// One Rust type of the table and what the Rust compiler says of it.
struct Rec {
    rust: &'static str,
    c: &'static str,
    size: usize,
    align: usize,
    fields: Vec<Fld>,
}

/// One field of a `Rec`.
struct Fld {
    rust: &'static str,
    c: &'static str,
    off: usize,
    size: usize,
}

/// The size of the type a (never called) field projection points at.
fn pointee_size<T, F>(_project: fn(*const T) -> *const F) -> usize {
    std::mem::size_of::<F>()
}

macro_rules! cname {
    ($f:ident) => {
        stringify!($f)
    };
    ($f:ident $c:literal) => {
        $c
    };
}

macro_rules! fields {
    ($r:ident { $($f:ident $(= $cf:literal)?),* $(,)? }) => {
        vec![$(Fld {
            rust: stringify!($f),
            c: cname!($f $($cf)?),
            off: core::mem::offset_of!($r, $f),
            // SAFETY: the projection is never called; only its type is used.
            size: pointee_size::<$r, _>(|p| unsafe { &raw const (*p).$f }),
        }),*]
    };
}

macro_rules! layouts {
    ($($kind:ident $r:ident = $c:literal { $($body:tt)* };)*) => {
        vec![$(layouts!(@row $kind $r $c { $($body)* })),*]
    };
    (@row struct $r:ident $c:literal { $($f:ident $(= $cf:literal)?),* $(,)? }) => {{
        #[allow(dead_code)]
        fn exhaustive(v: &$r) {
            let $r { $($f: _),* } = v;
        }
        Rec {
            rust: stringify!($r),
            c: $c,
            size: size_of::<$r>(),
            align: align_of::<$r>(),
            fields: fields!($r { $($f $(= $cf)?),* }),
        }
    }};
    (@row union $r:ident $c:literal { $($f:ident $(= $cf:literal)?),* $(,)? }) => {
        Rec {
            rust: stringify!($r),
            c: $c,
            size: size_of::<$r>(),
            align: align_of::<$r>(),
            fields: fields!($r { $($f $(= $cf)?),* }),
        }
    };
}

macro_rules! consts {
    ($($k:ident),* $(,)?) => {
        vec![$((stringify!($k), $k as i128)),*]
    };
}

fn layouts() -> Vec<Rec> {
    layouts! {
        struct ibv_gid_global = "__typeof__(((union ibv_gid *)0)->global)" { subnet_prefix, interface_id };
        union ibv_gid = "union ibv_gid" { raw, global };
        struct ibv_gid_entry = "struct ibv_gid_entry" { gid, gid_index, port_num, gid_type, ndev_ifindex };
        struct ibv_device_attr = "struct ibv_device_attr" { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt };
        struct ibv_odp_caps_per_transport_caps = "__typeof__(((struct ibv_odp_caps *)0)->per_transport_caps)" { rc_odp_caps, uc_odp_caps, ud_odp_caps };
        struct ibv_odp_caps = "struct ibv_odp_caps" { general_caps, per_transport_caps };
        struct ibv_tso_caps = "struct ibv_tso_caps" { max_tso, supported_qpts };
        struct ibv_rss_caps = "struct ibv_rss_caps" { supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function };
        struct ibv_packet_pacing_caps = "struct ibv_packet_pacing_caps" { qp_rate_limit_min, qp_rate_limit_max, supported_qpts };
        struct ibv_tm_caps = "struct ibv_tm_caps" { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge };
        struct ibv_cq_moderation_caps = "struct ibv_cq_moderation_caps" { max_cq_count, max_cq_period };
        struct ibv_pci_atomic_caps = "struct ibv_pci_atomic_caps" { fetch_add, swap, compare_swap };
        struct ibv_device_attr_ex = "struct ibv_device_attr_ex" { orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex };
        struct ibv_port_attr = "struct ibv_port_attr" { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2 };
        struct _ibv_device_ops = "struct _ibv_device_ops" { _dummy1, _dummy2 };
        struct ibv_device = "struct ibv_device" { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path };
        struct ibv_alloc_dm_attr = "struct ibv_alloc_dm_attr" { length, log_align_req, comp_mask };
        struct ibv_dm = "struct ibv_dm" { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle };
        struct ibv_pd = "struct ibv_pd" { context, handle };
        struct ibv_td_init_attr = "struct ibv_td_init_attr" { comp_mask };
        struct ibv_td = "struct ibv_td" { context };
        struct ibv_mr = "struct ibv_mr" { context, pd, addr, length, handle, lkey, rkey };
        struct ibv_mw = "struct ibv_mw" { context, pd, rkey, handle, type_ = "type" };
        struct ibv_parent_domain_init_attr = "struct ibv_parent_domain_init_attr" { pd, td, comp_mask, alloc, free, pd_context };
        struct ibv_query_device_ex_input = "struct ibv_query_device_ex_input" { comp_mask };
        struct ibv_context_ops = "struct ibv_context_ops" { _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd, _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw, _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq, _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq, _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp, _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah, _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event };
        struct ibv_context = "struct ibv_context" { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat };
        struct ibv_values_ex = "struct ibv_values_ex" { comp_mask, raw_clock };
        struct verbs_context = "struct verbs_context" { query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow, create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm, modify_flow_action_esp, destroy_flow_action, create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq, post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq, create_wq, query_rt_values, create_cq_ex, priv_ = "priv", query_device_ex, ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context };
        union ibv_async_event_element = "__typeof__(((struct ibv_async_event *)0)->element)" { cq, qp, srq, wq, port_num };
        struct ibv_async_event = "struct ibv_async_event" { element, event_type };
        struct ibv_wc = "struct ibv_wc" { wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits };
        struct ibv_comp_channel = "struct ibv_comp_channel" { context, fd, refcnt };
        struct ibv_cq = "struct ibv_cq" { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed };
        struct ibv_poll_cq_attr = "struct ibv_poll_cq_attr" { comp_mask };
        struct ibv_wc_tm_info = "struct ibv_wc_tm_info" { tag, priv_ = "priv" };
        struct ibv_cq_ex = "struct ibv_cq_ex" { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns };
        struct ibv_moderate_cq = "struct ibv_moderate_cq" { cq_count, cq_period };
        struct ibv_modify_cq_attr = "struct ibv_modify_cq_attr" { attr_mask, moderate };
        struct ibv_cq_init_attr_ex = "struct ibv_cq_init_attr_ex" { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain };
        struct ibv_mw_bind_info = "struct ibv_mw_bind_info" { mr, addr, length, mw_access_flags };
        struct ibv_data_buf = "struct ibv_data_buf" { addr, length };
        struct ibv_sge = "struct ibv_sge" { addr, length, lkey };
        struct ibv_send_wr_rdma = "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)" { remote_addr, rkey };
        struct ibv_send_wr_atomic = "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)" { remote_addr, compare_add, swap, rkey };
        struct ibv_send_wr_ud = "__typeof__(((struct ibv_send_wr *)0)->wr.ud)" { ah, remote_qpn, remote_qkey };
        union ibv_send_wr_wr = "__typeof__(((struct ibv_send_wr *)0)->wr)" { rdma, atomic, ud };
        struct ibv_send_wr_xrc = "__typeof__(((struct ibv_send_wr *)0)->qp_type.xrc)" { remote_srqn };
        union ibv_send_wr_qp_type = "__typeof__(((struct ibv_send_wr *)0)->qp_type)" { xrc };
        struct ibv_send_wr_bind_mw = "__typeof__(((struct ibv_send_wr *)0)->bind_mw)" { mw, rkey, bind_info };
        struct ibv_send_wr_tso = "__typeof__(((struct ibv_send_wr *)0)->tso)" { hdr, hdr_sz, mss };
        union ibv_send_wr_tso_bind = "@struct ibv_send_wr" { bind_mw, tso };
        struct ibv_send_wr = "struct ibv_send_wr" { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, tso_bind = "@bind_mw" };
        struct ibv_recv_wr = "struct ibv_recv_wr" { wr_id, next, sg_list, num_sge };
        struct ibv_ops_wr_add = "__typeof__(((struct ibv_ops_wr *)0)->tm.add)" { recv_wr_id, sg_list, num_sge, tag, mask };
        struct ibv_ops_wr_tm = "__typeof__(((struct ibv_ops_wr *)0)->tm)" { unexpected_cnt, handle, add };
        struct ibv_ops_wr = "struct ibv_ops_wr" { wr_id, next, opcode, flags, tm };
        struct ibv_mw_bind = "struct ibv_mw_bind" { wr_id, send_flags, bind_info };
        struct ibv_xrcd_init_attr = "struct ibv_xrcd_init_attr" { comp_mask, fd, oflags };
        struct ibv_xrcd = "struct ibv_xrcd" { context };
        struct ibv_global_route = "struct ibv_global_route" { dgid, flow_label, sgid_index, hop_limit, traffic_class };
        struct ibv_grh = "struct ibv_grh" { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid };
        struct ibv_ah_attr = "struct ibv_ah_attr" { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num };
        struct ibv_srq_attr = "struct ibv_srq_attr" { max_wr, max_sge, srq_limit };
        struct ibv_srq_init_attr = "struct ibv_srq_init_attr" { srq_context, attr };
        struct ibv_tm_cap = "struct ibv_tm_cap" { max_num_tags, max_ops };
        struct ibv_srq_init_attr_ex = "struct ibv_srq_init_attr_ex" { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap };
        struct ibv_srq = "struct ibv_srq" { context, srq_context, pd, handle, mutex, cond, events_completed };
        struct ibv_ah = "struct ibv_ah" { context, pd, handle };
        struct ibv_wq_init_attr = "struct ibv_wq_init_attr" { wq_context, wq_type, max_wr, max_sge, pd, cq, comp_mask, create_flags };
        struct ibv_wq_attr = "struct ibv_wq_attr" { attr_mask, wq_state, curr_wq_state, flags, flags_mask };
        struct ibv_rwq_ind_table = "struct ibv_rwq_ind_table" { context, ind_tbl_handle, ind_tbl_num, comp_mask };
        struct ibv_rwq_ind_table_init_attr = "struct ibv_rwq_ind_table_init_attr" { log_ind_tbl_size, ind_tbl, comp_mask };
        struct ibv_wq = "struct ibv_wq" { context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond, events_completed, comp_mask };
        struct ibv_qp_cap = "struct ibv_qp_cap" { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data };
        struct ibv_qp_init_attr = "struct ibv_qp_init_attr" { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all };
        struct ibv_rx_hash_conf = "struct ibv_rx_hash_conf" { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask };
        struct ibv_qp_init_attr_ex = "struct ibv_qp_init_attr_ex" { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags };
        struct ibv_qp_open_attr = "struct ibv_qp_open_attr" { comp_mask, qp_num, xrcd, qp_context, qp_type };
        struct ibv_qp_attr = "struct ibv_qp_attr" { qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit };
        struct ibv_qp_rate_limit_attr = "struct ibv_qp_rate_limit_attr" { rate_limit, max_burst_sz, typical_pkt_sz, comp_mask };
        struct ibv_qp = "struct ibv_qp" { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed };
        struct ibv_qp_ex = "struct ibv_qp_ex" { qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write };
        struct ibv_ece = "struct ibv_ece" { vendor_id, options, comp_mask };
        struct ibv_flow_eth_filter = "struct ibv_flow_eth_filter" { dst_mac, src_mac, ether_type, vlan_tag };
        struct ibv_flow_spec_eth = "struct ibv_flow_spec_eth" { type_ = "type", size, val, mask };
        struct ibv_flow_ipv4_filter = "struct ibv_flow_ipv4_filter" { src_ip, dst_ip };
        struct ibv_flow_spec_ipv4 = "struct ibv_flow_spec_ipv4" { type_ = "type", size, val, mask };
        struct ibv_flow_ipv4_ext_filter = "struct ibv_flow_ipv4_ext_filter" { src_ip, dst_ip, proto, tos, ttl, flags };
        struct ibv_flow_spec_ipv4_ext = "struct ibv_flow_spec_ipv4_ext" { type_ = "type", size, val, mask };
        struct ibv_flow_ipv6_filter = "struct ibv_flow_ipv6_filter" { src_ip, dst_ip, flow_label, next_hdr, traffic_class, hop_limit };
        struct ibv_flow_spec_ipv6 = "struct ibv_flow_spec_ipv6" { type_ = "type", size, val, mask };
        struct ibv_flow_esp_filter = "struct ibv_flow_esp_filter" { spi, seq };
        struct ibv_flow_spec_esp = "struct ibv_flow_spec_esp" { type_ = "type", size, val, mask };
        struct ibv_flow_tcp_udp_filter = "struct ibv_flow_tcp_udp_filter" { dst_port, src_port };
        struct ibv_flow_spec_tcp_udp = "struct ibv_flow_spec_tcp_udp" { type_ = "type", size, val, mask };
        struct ibv_flow_gre_filter = "struct ibv_flow_gre_filter" { c_ks_res0_ver, protocol, key };
        struct ibv_flow_spec_gre = "struct ibv_flow_spec_gre" { type_ = "type", size, val, mask };
        struct ibv_flow_mpls_filter = "struct ibv_flow_mpls_filter" { label };
        struct ibv_flow_spec_mpls = "struct ibv_flow_spec_mpls" { type_ = "type", size, val, mask };
        struct ibv_flow_tunnel_filter = "struct ibv_flow_tunnel_filter" { tunnel_id };
        struct ibv_flow_spec_tunnel = "struct ibv_flow_spec_tunnel" { type_ = "type", size, val, mask };
        struct ibv_flow_spec_action_tag = "struct ibv_flow_spec_action_tag" { type_ = "type", size, tag_id };
        struct ibv_flow_spec_action_drop = "struct ibv_flow_spec_action_drop" { type_ = "type", size };
        struct ibv_flow_spec_action_handle = "struct ibv_flow_spec_action_handle" { type_ = "type", size, action };
        struct ibv_flow_spec_counter_action = "struct ibv_flow_spec_counter_action" { type_ = "type", size, counters };
        struct ibv_flow_spec_hdr = "__typeof__(((struct ibv_flow_spec *)0)->hdr)" { type_ = "type", size };
        union ibv_flow_spec_spec = "@struct ibv_flow_spec" { hdr, eth, ipv4, tcp_udp, ipv4_ext, ipv6, esp, tunnel, gre, mpls, flow_tag, drop, handle, flow_count };
        struct ibv_flow_spec = "struct ibv_flow_spec" { spec = "@hdr" };
        struct ibv_flow_attr = "struct ibv_flow_attr" { comp_mask, type_ = "type", size, priority, num_of_specs, port, flags };
        struct ibv_flow = "struct ibv_flow" { comp_mask, context, handle };
        struct ibv_flow_action = "struct ibv_flow_action" { context };
        struct ibv_flow_action_esp_attr = "struct ibv_flow_action_esp_attr" { esp_attr, keymat_proto, keymat_len, keymat_ptr, replay_proto, replay_len, replay_ptr, esp_encap, comp_mask, esn };
        struct ibv_counters_init_attr = "struct ibv_counters_init_attr" { comp_mask };
        struct ibv_counters = "struct ibv_counters" { context };
        struct ibv_counter_attach_attr = "struct ibv_counter_attach_attr" { counter_desc, index, comp_mask };
        struct _compat_ibv_port_attr = "%struct ibv_port_attr" { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags };
    }
}

fn consts() -> Vec<(&'static str, i128)> {
    consts![
        IBV_GID_TYPE_IB,
        IBV_GID_TYPE_ROCE_V1,
        IBV_GID_TYPE_ROCE_V2,
        IBV_NODE_UNKNOWN,
        IBV_NODE_CA,
        IBV_NODE_SWITCH,
        IBV_NODE_ROUTER,
        IBV_NODE_RNIC,
        IBV_NODE_USNIC,
        IBV_NODE_USNIC_UDP,
        IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN,
        IBV_TRANSPORT_IB,
        IBV_TRANSPORT_IWARP,
        IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP,
        IBV_TRANSPORT_UNSPECIFIED,
        IBV_DEVICE_RESIZE_MAX_WR,
        IBV_DEVICE_BAD_PKEY_CNTR,
        IBV_DEVICE_BAD_QKEY_CNTR,
        IBV_DEVICE_RAW_MULTI,
        IBV_DEVICE_AUTO_PATH_MIG,
        IBV_DEVICE_CHANGE_PHY_PORT,
        IBV_DEVICE_UD_AV_PORT_ENFORCE,
        IBV_DEVICE_CURR_QP_STATE_MOD,
        IBV_DEVICE_SHUTDOWN_PORT,
        IBV_DEVICE_INIT_TYPE,
        IBV_DEVICE_PORT_ACTIVE_EVENT,
        IBV_DEVICE_SYS_IMAGE_GUID,
        IBV_DEVICE_RC_RNR_NAK_GEN,
        IBV_DEVICE_SRQ_RESIZE,
        IBV_DEVICE_N_NOTIFY_CQ,
        IBV_DEVICE_MEM_WINDOW,
        IBV_DEVICE_UD_IP_CSUM,
        IBV_DEVICE_XRC,
        IBV_DEVICE_MEM_MGT_EXTENSIONS,
        IBV_DEVICE_MEM_WINDOW_TYPE_2A,
        IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        IBV_DEVICE_RC_IP_CSUM,
        IBV_DEVICE_RAW_IP_CSUM,
        IBV_DEVICE_MANAGED_FLOW_STEERING,
        IBV_FORK_DISABLED,
        IBV_FORK_ENABLED,
        IBV_FORK_UNNEEDED,
        IBV_ATOMIC_NONE,
        IBV_ATOMIC_HCA,
        IBV_ATOMIC_GLOB,
        IBV_DM_MASK_HANDLE,
        IBV_ODP_SUPPORT_SEND,
        IBV_ODP_SUPPORT_RECV,
        IBV_ODP_SUPPORT_WRITE,
        IBV_ODP_SUPPORT_READ,
        IBV_ODP_SUPPORT_ATOMIC,
        IBV_ODP_SUPPORT_SRQ_RECV,
        IBV_ODP_SUPPORT,
        IBV_ODP_SUPPORT_IMPLICIT,
        IBV_RX_HASH_FUNC_TOEPLITZ,
        IBV_RX_HASH_SRC_IPV4,
        IBV_RX_HASH_DST_IPV4,
        IBV_RX_HASH_SRC_IPV6,
        IBV_RX_HASH_DST_IPV6,
        IBV_RX_HASH_SRC_PORT_TCP,
        IBV_RX_HASH_DST_PORT_TCP,
        IBV_RX_HASH_SRC_PORT_UDP,
        IBV_RX_HASH_DST_PORT_UDP,
        IBV_RX_HASH_IPSEC_SPI,
        IBV_RX_HASH_INNER,
        IBV_RAW_PACKET_CAP_CVLAN_STRIPPING,
        IBV_RAW_PACKET_CAP_SCATTER_FCS,
        IBV_RAW_PACKET_CAP_IP_CSUM,
        IBV_RAW_PACKET_CAP_DELAY_DROP,
        IBV_TM_CAP_RC,
        IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_PORT_SM,
        IBV_PORT_NOTICE_SUP,
        IBV_PORT_TRAP_SUP,
        IBV_PORT_OPT_IPD_SUP,
        IBV_PORT_AUTO_MIGR_SUP,
        IBV_PORT_SL_MAP_SUP,
        IBV_PORT_MKEY_NVRAM,
        IBV_PORT_PKEY_NVRAM,
        IBV_PORT_LED_INFO_SUP,
        IBV_PORT_SYS_IMAGE_GUID_SUP,
        IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP,
        IBV_PORT_EXTENDED_SPEEDS_SUP,
        IBV_PORT_CAP_MASK2_SUP,
        IBV_PORT_CM_SUP,
        IBV_PORT_SNMP_TUNNEL_SUP,
        IBV_PORT_REINIT_SUP,
        IBV_PORT_DEVICE_MGMT_SUP,
        IBV_PORT_VENDOR_CLASS_SUP,
        IBV_PORT_DR_NOTICE_SUP,
        IBV_PORT_CAP_MASK_NOTICE_SUP,
        IBV_PORT_BOOT_MGMT_SUP,
        IBV_PORT_LINK_LATENCY_SUP,
        IBV_PORT_CLIENT_REG_SUP,
        IBV_PORT_IP_BASED_GIDS,
        IBV_PORT_SET_NODE_DESC_SUP,
        IBV_PORT_INFO_EXT_SUP,
        IBV_PORT_VIRT_SUP,
        IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP,
        IBV_PORT_LINK_WIDTH_2X_SUP,
        IBV_PORT_LINK_SPEED_HDR_SUP,
        IBV_PORT_LINK_SPEED_NDR_SUP,
        IBV_EVENT_CQ_ERR,
        IBV_EVENT_QP_FATAL,
        IBV_EVENT_QP_REQ_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST,
        IBV_EVENT_SQ_DRAINED,
        IBV_EVENT_PATH_MIG,
        IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL,
        IBV_EVENT_PORT_ACTIVE,
        IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE,
        IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE,
        IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_GID_CHANGE,
        IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS,
        IBV_WC_LOC_LEN_ERR,
        IBV_WC_LOC_QP_OP_ERR,
        IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR,
        IBV_WC_MW_BIND_ERR,
        IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR,
        IBV_WC_REM_INV_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR,
        IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR,
        IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR,
        IBV_WC_GENERAL_ERR,
        IBV_WC_TM_ERR,
        IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND,
        IBV_WC_RDMA_WRITE,
        IBV_WC_RDMA_READ,
        IBV_WC_COMP_SWAP,
        IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW,
        IBV_WC_LOCAL_INV,
        IBV_WC_TSO,
        IBV_WC_ATOMIC_WRITE,
        IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM,
        IBV_WC_TM_ADD,
        IBV_WC_TM_DEL,
        IBV_WC_TM_SYNC,
        IBV_WC_TM_RECV,
        IBV_WC_TM_NO_TAG,
        IBV_WC_DRIVER1,
        IBV_WC_DRIVER2,
        IBV_WC_DRIVER3,
        IBV_WC_IP_CSUM_OK_SHIFT,
        IBV_WC_EX_WITH_BYTE_LEN,
        IBV_WC_EX_WITH_IMM,
        IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP,
        IBV_WC_EX_WITH_SLID,
        IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN,
        IBV_WC_EX_WITH_FLOW_TAG,
        IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
        IBV_WC_STANDARD_FLAGS,
        IBV_CREATE_CQ_SUP_WC_FLAGS,
        IBV_WC_GRH,
        IBV_WC_WITH_IMM,
        IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV,
        IBV_WC_TM_SYNC_REQ,
        IBV_WC_TM_MATCH,
        IBV_WC_TM_DATA_VALID,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_MW_BIND,
        IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND,
        IBV_ACCESS_HUGETLB,
        IBV_ACCESS_RELAXED_ORDERING,
        IBV_XRCD_INIT_ATTR_FD,
        IBV_XRCD_INIT_ATTR_OFLAGS,
        IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_REREG_MR_CHANGE_TRANSLATION,
        IBV_REREG_MR_CHANGE_PD,
        IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_FLAGS_SUPPORTED,
        IBV_MW_TYPE_1,
        IBV_MW_TYPE_2,
        IBV_RATE_MAX,
        IBV_RATE_2_5_GBPS,
        IBV_RATE_5_GBPS,
        IBV_RATE_10_GBPS,
        IBV_RATE_20_GBPS,
        IBV_RATE_30_GBPS,
        IBV_RATE_40_GBPS,
        IBV_RATE_60_GBPS,
        IBV_RATE_80_GBPS,
        IBV_RATE_120_GBPS,
        IBV_RATE_14_GBPS,
        IBV_RATE_56_GBPS,
        IBV_RATE_112_GBPS,
        IBV_RATE_168_GBPS,
        IBV_RATE_25_GBPS,
        IBV_RATE_100_GBPS,
        IBV_RATE_200_GBPS,
        IBV_RATE_300_GBPS,
        IBV_RATE_28_GBPS,
        IBV_RATE_50_GBPS,
        IBV_RATE_400_GBPS,
        IBV_RATE_600_GBPS,
        IBV_RATE_800_GBPS,
        IBV_RATE_1200_GBPS,
        IBV_SRQ_MAX_WR,
        IBV_SRQ_LIMIT,
        IBV_SRQT_BASIC,
        IBV_SRQT_XRC,
        IBV_SRQT_TM,
        IBV_SRQ_INIT_ATTR_TYPE,
        IBV_SRQ_INIT_ATTR_PD,
        IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ,
        IBV_SRQ_INIT_ATTR_TM,
        IBV_SRQ_INIT_ATTR_RESERVED,
        IBV_WQT_RQ,
        IBV_WQ_INIT_ATTR_FLAGS,
        IBV_WQ_INIT_ATTR_RESERVED,
        IBV_WQ_FLAGS_CVLAN_STRIPPING,
        IBV_WQ_FLAGS_SCATTER_FCS,
        IBV_WQ_FLAGS_DELAY_DROP,
        IBV_WQ_FLAGS_PCI_WRITE_END_PADDING,
        IBV_WQ_FLAGS_RESERVED,
        IBV_WQS_RESET,
        IBV_WQS_RDY,
        IBV_WQS_ERR,
        IBV_WQS_UNKNOWN,
        IBV_WQ_ATTR_STATE,
        IBV_WQ_ATTR_CURR_STATE,
        IBV_WQ_ATTR_FLAGS,
        IBV_WQ_ATTR_RESERVED,
        IBV_CREATE_IND_TABLE_RESERVED,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QPT_RAW_PACKET,
        IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV,
        IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD,
        IBV_QP_INIT_ATTR_XRCD,
        IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
        IBV_QP_INIT_ATTR_IND_TABLE,
        IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB,
        IBV_QP_CREATE_SCATTER_FCS,
        IBV_QP_CREATE_CVLAN_STRIPPING,
        IBV_QP_CREATE_SOURCE_QPN,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING,
        IBV_QP_EX_WITH_RDMA_WRITE,
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV,
        IBV_QP_EX_WITH_BIND_MW,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO,
        IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_OPEN_ATTR_NUM,
        IBV_QP_OPEN_ATTR_XRCD,
        IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE,
        IBV_QP_OPEN_ATTR_RESERVED,
        IBV_QP_STATE,
        IBV_QP_CUR_STATE,
        IBV_QP_EN_SQD_ASYNC_NOTIFY,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_ALT_PATH,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_PATH_MIG_STATE,
        IBV_QP_CAP,
        IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED,
        IBV_MIG_REARM,
        IBV_MIG_ARMED,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_BIND_MW,
        IBV_WR_SEND_WITH_INV,
        IBV_WR_TSO,
        IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE,
        IBV_SEND_SIGNALED,
        IBV_SEND_SOLICITED,
        IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_WR_TAG_ADD,
        IBV_WR_TAG_DEL,
        IBV_WR_TAG_SYNC,
        IBV_OPS_SIGNALED,
        IBV_OPS_TM_SYNC,
        IBV_CQ_ATTR_MODERATE,
        IBV_CQ_ATTR_RESERVED,
        IBV_FLOW_ATTR_FLAGS_DONT_TRAP,
        IBV_FLOW_ATTR_FLAGS_EGRESS,
        IBV_FLOW_ATTR_NORMAL,
        IBV_FLOW_ATTR_ALL_DEFAULT,
        IBV_FLOW_ATTR_MC_DEFAULT,
        IBV_FLOW_ATTR_SNIFFER,
        IBV_FLOW_SPEC_ETH,
        IBV_FLOW_SPEC_IPV4,
        IBV_FLOW_SPEC_IPV6,
        IBV_FLOW_SPEC_IPV4_EXT,
        IBV_FLOW_SPEC_ESP,
        IBV_FLOW_SPEC_TCP,
        IBV_FLOW_SPEC_UDP,
        IBV_FLOW_SPEC_VXLAN_TUNNEL,
        IBV_FLOW_SPEC_GRE,
        IBV_FLOW_SPEC_MPLS,
        IBV_FLOW_SPEC_INNER,
        IBV_FLOW_SPEC_ACTION_TAG,
        IBV_FLOW_SPEC_ACTION_DROP,
        IBV_FLOW_SPEC_ACTION_HANDLE,
        IBV_FLOW_SPEC_ACTION_COUNT,
        IBV_FLOW_ACTION_ESP_MASK_ESN,
        IBV_SYSFS_NAME_MAX,
        IBV_SYSFS_PATH_MAX,
        IBV_CQ_INIT_ATTR_MASK_FLAGS,
        IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        IBV_COUNTER_PACKETS,
        IBV_COUNTER_BYTES,
        IBV_READ_COUNTERS_ATTR_PREFER_CACHED,
        IBV_VALUES_MASK_RAW_CLOCK,
        IBV_VALUES_MASK_RESERVED,
        IBV_REREG_MR_ERR_INPUT,
        IBV_REREG_MR_ERR_DONT_FORK_NEW,
        IBV_REREG_MR_ERR_DO_FORK_OLD,
        IBV_REREG_MR_ERR_CMD,
        IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW,
        IBV_DEVICE_RAW_SCATTER_FCS,
        IBV_DEVICE_PCI_WRITE_END_PADDING,
        ETHERNET_LL_SIZE,
        IB_ROCE_UDP_ENCAP_VALID_PORT_MIN,
        IB_ROCE_UDP_ENCAP_VALID_PORT_MAX,
        IB_GRH_FLOWLABEL_MASK,
    ]
}

fn oracles_required() -> bool {
    std::env::var("BYPASS_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// Compiles `c_src` with gcc (plus `extra` flags) and returns the program's output, or `None`
/// (after a "skipped" notice) when gcc or the header is missing and oracles are optional.
fn run_c(test: &str, c_src: &str, extra: &[&str]) -> Option<String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    let probe = dir.join("probe.c");
    std::fs::write(
        &probe,
        "#include <infiniband/verbs.h>\nint main(void){return 0;}\n",
    )
    .expect("write probe");
    let why = match Command::new("gcc")
        .arg("-fsyntax-only")
        .arg(&probe)
        .output()
    {
        Err(e) => Some(format!("gcc cannot be run: {e}")),
        Ok(o) if !o.status.success() => Some(format!(
            "gcc cannot compile <infiniband/verbs.h> (install libibverbs-dev): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    };
    if let Some(why) = why {
        if oracles_required() {
            panic!("oracle gcc + verbs.h is required (BYPASS_REQUIRE_ORACLES=1): {why}");
        }
        eprintln!("skipped: oracle gcc + verbs.h unavailable ({why})");
        return None;
    }
    let src = dir.join(format!("{test}.c"));
    let exe = dir.join(test);
    std::fs::write(&src, c_src).expect("write C oracle");
    let cc = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .expect("run gcc");
    assert!(
        cc.status.success(),
        "gcc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C oracle");
    assert!(run.status.success(), "the C oracle failed: {:?}", run);
    Some(String::from_utf8(run.stdout).expect("utf-8 oracle output"))
}

/// The C program printing, per row, `R name size align` and `F name field offset size`
/// (`-1` where C cannot name the quantity), and `K name value` per constant.
fn layout_program(recs: &[Rec], consts: &[(&str, i128)]) -> String {
    let mut c = String::from(
        "#include <infiniband/verbs.h>\n#include <stdio.h>\n#include <stddef.h>\n\
         #define SZ(T, m) ((long long)sizeof(((T *)0)->m))\n\
         #define K(x) ((x) < 0 ? printf(\"K %s %lld\\n\", #x, (long long)(x)) \
         : printf(\"K %s %llu\\n\", #x, (unsigned long long)(x)))\n\
         int main(void) {\n",
    );
    for r in recs {
        let w = &mut c;
        if let Some(p) = r.c.strip_prefix('@') {
            let m0 = r.fields[0].c;
            writeln!(w, "printf(\"R {} -1 -1\\n\");", r.rust).unwrap();
            for f in &r.fields {
                writeln!(
                    w,
                    "printf(\"F {} {} %lld %lld\\n\", (long long)(offsetof({p}, {}) - offsetof({p}, {m0})), SZ({p}, {}));",
                    r.rust, f.rust, f.c, f.c
                )
                .unwrap();
            }
            continue;
        }
        let (t, size) = match r.c.strip_prefix('%') {
            Some(p) => {
                let last = r.fields.last().expect("fields").c;
                (
                    p,
                    format!(
                        "(long long)((offsetof({p}, {last}) + sizeof(((({p} *)0)->{last})) + _Alignof({p}) - 1) / _Alignof({p}) * _Alignof({p}))"
                    ),
                )
            }
            None => (r.c, format!("(long long)sizeof({})", r.c)),
        };
        writeln!(
            w,
            "printf(\"R {} %lld %lld\\n\", {size}, (long long)_Alignof({t}));",
            r.rust
        )
        .unwrap();
        for f in &r.fields {
            match f.c.strip_prefix('@') {
                Some(m) => writeln!(
                    w,
                    "printf(\"F {} {} %lld -1\\n\", (long long)offsetof({t}, {m}));",
                    r.rust, f.rust
                ),
                None => writeln!(
                    w,
                    "printf(\"F {} {} %lld %lld\\n\", (long long)offsetof({t}, {}), SZ({t}, {}));",
                    r.rust, f.rust, f.c, f.c
                ),
            }
            .unwrap();
        }
    }
    for (k, _) in consts {
        writeln!(c, "K({k});").unwrap();
    }
    c.push_str("return 0;\n}\n");
    c
}

#[test]
fn layouts_and_constants_match_verbs_h() {
    let recs = layouts();
    let consts = consts();
    let Some(out) = run_c("layout_oracle", &layout_program(&recs, &consts), &[]) else {
        return;
    };
    let mut c_rec = BTreeMap::new();
    let mut c_fld = BTreeMap::new();
    let mut c_const = BTreeMap::new();
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |s: &str| s.parse::<i128>().expect("number");
        match w.as_slice() {
            ["R", r, s, a] => {
                c_rec.insert(r.to_string(), (n(s), n(a)));
            }
            ["F", r, f, o, s] => {
                c_fld.insert((r.to_string(), f.to_string()), (n(o), n(s)));
            }
            ["K", k, v] => {
                c_const.insert(k.to_string(), n(v));
            }
            _ => panic!("bad oracle line {line:?}"),
        }
    }
    let mut bad = Vec::new();
    let mut checked = 0;
    for r in &recs {
        let (cs, ca) = c_rec[r.rust];
        if cs >= 0 && (cs, ca) != (r.size as i128, r.align as i128) {
            bad.push(format!(
                "{} ({}): C size/align {cs}/{ca}, Rust {}/{}",
                r.rust, r.c, r.size, r.align
            ));
        }
        for f in &r.fields {
            let (co, cs) = c_fld[&(r.rust.to_string(), f.rust.to_string())];
            checked += 1;
            if co != f.off as i128 || (cs >= 0 && cs != f.size as i128) {
                bad.push(format!(
                    "{}.{} (C {}): C offset/size {co}/{cs}, Rust {}/{}",
                    r.rust, f.rust, f.c, f.off, f.size
                ));
            }
        }
    }
    for (k, v) in &consts {
        if c_const[*k] != *v {
            bad.push(format!("{k}: C {}, Rust {v}", c_const[*k]));
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    eprintln!(
        "checked {} types, {checked} fields, {} constants",
        recs.len(),
        consts.len()
    );
}

/// The sizes every consumer depends on, as measured in `shared/reference/ibverbs-abi.md`: a
/// second check that does not depend on the table being complete.
#[test]
fn key_sizes_are_those_of_v44() {
    assert_eq!(size_of::<ibv_device>(), 664);
    assert_eq!(size_of::<ibv_context_ops>(), 256);
    assert_eq!(size_of::<ibv_context>(), 328);
    assert_eq!(size_of::<verbs_context>(), 648);
    assert_eq!(size_of::<ibv_cq>(), 128);
    assert_eq!(size_of::<ibv_cq_ex>(), 288);
    assert_eq!(size_of::<ibv_qp>(), 160);
    assert_eq!(size_of::<ibv_qp_ex>(), 352);
    assert_eq!(size_of::<ibv_wc>(), 48);
    assert_eq!(size_of::<ibv_send_wr>(), 128);
    assert_eq!(size_of::<ibv_recv_wr>(), 32);
    assert_eq!(size_of::<ibv_device_attr_ex>(), 400);
    assert_eq!(size_of::<ibv_port_attr>(), 52);
    assert_eq!(size_of::<_compat_ibv_port_attr>(), 48);
    // `verbs_context` ends with the `ibv_context`; its ops sit at negative offsets from it.
    let ctx = core::mem::offset_of!(verbs_context, context);
    assert_eq!(ctx - core::mem::offset_of!(verbs_context, query_port), 320);
    assert_eq!(
        ctx - core::mem::offset_of!(verbs_context, create_cq_ex),
        120
    );
    assert_eq!(
        ctx - core::mem::offset_of!(verbs_context, query_device_ex),
        104
    );
    assert_eq!(ctx - core::mem::offset_of!(verbs_context, create_qp_ex), 56);
    assert_eq!(ctx - core::mem::offset_of!(verbs_context, sz), 8);
}

/// `wc_status_str` & co. against Debian's `ibv_*_str`, for every value from -2 to 40.
#[test]
fn strings_match_libibverbs() {
    let prog = "#include <infiniband/verbs.h>\n#include <stdio.h>\nint main(void) {\n\
        for (int i = -2; i <= 40; i++)\n\
          printf(\"%d\\t%s\\t%s\\t%s\\t%s\\n\", i, ibv_wc_status_str(i), ibv_event_type_str(i),\n\
                 ibv_node_type_str(i), ibv_port_state_str(i));\n\
        return 0;\n}\n";
    let Some(out) = run_c("str_oracle", prog, &["-libverbs"]) else {
        return;
    };
    let mut n = 0;
    for line in out.lines() {
        let w: Vec<&str> = line.split('\t').collect();
        let i: i32 = w[0].parse().expect("index");
        let s = |c: &core::ffi::CStr| c.to_str().expect("utf-8").to_owned();
        assert_eq!(s(wc_status_str(i as u32)), w[1], "wc_status_str({i})");
        assert_eq!(s(event_type_str(i as u32)), w[2], "event_type_str({i})");
        assert_eq!(s(node_type_str(i)), w[3], "node_type_str({i})");
        assert_eq!(s(port_state_str(i as u32)), w[4], "port_state_str({i})");
        n += 1;
    }
    assert_eq!(n, 43, "the C oracle printed {n} lines");
}
