//! Capabilities: QUERY_HCA_CAP / SET_HCA_CAP and the capability pages they carry: the general
//! device page (`cmd_hca_cap`) and the RoCE page (`roce_cap`).
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_query_hca_cap_{in,out}_bits`,
//! `mlx5_ifc_set_hca_cap_{in,out}_bits`, `mlx5_ifc_cmd_hca_cap_bits`, `mlx5_ifc_roce_cap_bits`),
//! `include/linux/mlx5/device.h` (`enum mlx5_cap_type`, `HCA_CAP_OPMOD_GET_{MAX,CUR}`). Use:
//! rdma-core `mlx5_vfio.c` `mlx5_vfio_query_hca_caps` / `handle_hca_cap` / `handle_hca_cap_roce`.
//! The field positions of `CmdHcaCap` and `RoceCap` were generated from the kernel table in
//! `tests/data/mlx5_ifc_fields.tsv`; `tests/ifc_layout_bringup.rs` checks them bit for bit.
//!
//! Owns: formats and op_mod encoding. Must not: decide which capabilities to set (the driver).

crate::prm_layout! {
    /// QUERY_HCA_CAP input (`mlx5_ifc_query_hca_cap_in_bits`).
    pub struct QueryHcaCapIn("query_hca_cap_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_HCA_CAP` (0x100).
        opcode, set_opcode: 0x0, 16;
        /// `(cap_type << 1) | mode`, see [`query_cap_op_mod`].
        op_mod, set_op_mod: 0x30, 16;
        /// Query another function's capabilities (a PF for its VFs); 0.
        other_function, set_other_function: 0x40, 1;
        /// That function's id.
        function_id, set_function_id: 0x50, 16;
    }
}

crate::prm_layout! {
    /// QUERY_HCA_CAP output (`mlx5_ifc_query_hca_cap_out_bits`, 0x1010 bytes): a 4 KiB
    /// capability page at byte 0x10, whose layout depends on the queried [`CapType`].
    pub struct QueryHcaCapOut("query_hca_cap_out", 0x1010) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The capability page viewed as the general page ([`CapType::GENERAL`]).
            capability, capability_mut: CmdHcaCap @ CAPABILITY_OFF;
        }
    }
}

crate::prm_layout! {
    /// SET_HCA_CAP input (`mlx5_ifc_set_hca_cap_in_bits`, 0x1010 bytes): the page to set at
    /// byte 0x10 (rdma-core copies the current page, edits it, and sends it back).
    pub struct SetHcaCapIn("set_hca_cap_in", 0x1010) {
        /// `MLX5_CMD_OP_SET_HCA_CAP` (0x109).
        opcode, set_opcode: 0x0, 16;
        /// `cap_type << 1`, see [`set_cap_op_mod`].
        op_mod, set_op_mod: 0x30, 16;
        /// Set another function's capabilities; 0.
        other_function, set_other_function: 0x40, 1;
        /// That function's id.
        function_id, set_function_id: 0x50, 16;
        sub {
            /// The capability page viewed as the general page ([`CapType::GENERAL`]).
            capability, capability_mut: CmdHcaCap @ CAPABILITY_OFF;
        }
    }
}

crate::prm_layout! {
    /// SET_HCA_CAP output (`mlx5_ifc_set_hca_cap_out_bits`).
    pub struct SetHcaCapOut("set_hca_cap_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

/// Byte offset of the capability page in QUERY_HCA_CAP output and SET_HCA_CAP input.
pub const CAPABILITY_OFF: usize = 0x10;
/// Size of a capability page (`mlx5_ifc_hca_cap_union_bits`): 4 KiB.
pub const CAPABILITY_LEN: usize = 0x1000;

// The views' buffer field is private to this module, where `prm_layout!` defined them.
impl<T: AsRef<[u8]>> QueryHcaCapOut<T> {
    /// The capability page viewed as the RoCE page ([`CapType::ROCE`]).
    pub fn roce_cap(&self) -> RoceCap<&[u8]> {
        RoceCap::wrap_unchecked(self.buf.as_ref().get(CAPABILITY_OFF..).unwrap_or(&[]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryHcaCapOut<T> {
    /// The capability page as the RoCE page, writable (for a device model).
    pub fn roce_cap_mut(&mut self) -> RoceCap<&mut [u8]> {
        let b = self.buf.as_mut();
        let n = b.len();
        RoceCap::wrap_unchecked(b.get_mut(CAPABILITY_OFF.min(n)..).unwrap_or_default())
    }
}

impl<T: AsRef<[u8]>> SetHcaCapIn<T> {
    /// The capability page viewed as the RoCE page.
    pub fn roce_cap(&self) -> RoceCap<&[u8]> {
        RoceCap::wrap_unchecked(self.buf.as_ref().get(CAPABILITY_OFF..).unwrap_or(&[]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SetHcaCapIn<T> {
    /// The capability page as the RoCE page, writable.
    pub fn roce_cap_mut(&mut self) -> RoceCap<&mut [u8]> {
        let b = self.buf.as_mut();
        let n = b.len();
        RoceCap::wrap_unchecked(b.get_mut(CAPABILITY_OFF.min(n)..).unwrap_or_default())
    }
}

/// Which capability page (kernel `device.h` `enum mlx5_cap_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapType(pub u16);

impl CapType {
    /// General device capabilities ([`CmdHcaCap`]).
    pub const GENERAL: Self = Self(0x0);
    /// Ethernet offloads.
    pub const ETHERNET_OFFLOADS: Self = Self(0x1);
    /// On-demand paging.
    pub const ODP: Self = Self(0x2);
    /// Atomic operations.
    pub const ATOMIC: Self = Self(0x3);
    /// RoCE ([`RoceCap`]).
    pub const ROCE: Self = Self(0x4);
    /// The second general page ([`CmdHcaCap2`]).
    pub const GENERAL_2: Self = Self(0x20);
}

/// Which values QUERY_HCA_CAP returns (kernel `HCA_CAP_OPMOD_GET_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapMode(pub u16);

impl CapMode {
    /// The most the device supports.
    pub const MAX: Self = Self(0);
    /// The values currently in force.
    pub const CUR: Self = Self(1);
}

/// QUERY_HCA_CAP `op_mod`: `(cap_type << 1) | mode` (kernel `mlx5_core_get_caps_mode`).
/// The top bit of a 16-bit cap type is dropped (no type uses it).
pub const fn query_cap_op_mod(cap: CapType, mode: CapMode) -> u16 {
    (cap.0 << 1) | (mode.0 & 1)
}

/// SET_HCA_CAP `op_mod`: `cap_type << 1` (kernel `set_caps`; rdma-core uses `0x4 << 1` for RoCE).
pub const fn set_cap_op_mod(cap: CapType) -> u16 {
    cap.0 << 1
}

/// `port_type` values (kernel `MLX5_CAP_PORT_TYPE_*`).
pub mod port_type {
    /// InfiniBand.
    pub const IB: u32 = 0x0;
    /// Ethernet (RoCE).
    pub const ETH: u32 = 0x1;
}

/// `cmdif_checksum` values (kernel `mlx5_ifc.h` `MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_*`).
pub mod cmdif_checksum {
    /// Signatures not checked: what bypass and rdma-core set.
    pub const DISABLED: u32 = 0x0;
    /// The state after reset.
    pub const INITIAL_STATE: u32 = 0x1;
    /// Signatures checked.
    pub const ENABLED: u32 = 0x3;
}

crate::prm_layout! {
    /// The general device capability page (`mlx5_ifc_cmd_hca_cap_bits`, 256 bytes; the rest
    /// of the 4 KiB page is reserved). A subset of fields: those the driver, the sim's device
    /// profile and the tools read.
    pub struct CmdHcaCap("cmd_hca_cap", 0x100) {
        /// The GENERAL_2 capability page exists. (byte 0x4, bits 0..0 of the dword)
        hca_cap_2, set_hca_cap_2: 0x20, 1;
        /// This function's vHCA id. (byte 0x4, bits 16..31 of the dword)
        vhca_id, set_vhca_id: 0x30, 16;
        /// log2 of the most WQEs in an SRQ. (byte 0x10, bits 0..7 of the dword)
        log_max_srq_sz, set_log_max_srq_sz: 0x80, 8;
        /// log2 of the most WQEs in a QP's send or receive queue. (byte 0x10, bits 8..15 of the dword)
        log_max_qp_sz, set_log_max_qp_sz: 0x88, 8;
        /// Asynchronous event types are reported. (byte 0x10, bits 16..16 of the dword)
        event_cap, set_event_cap: 0x90, 1;
        /// log2 of the most QPs. (byte 0x10, bits 27..31 of the dword)
        log_max_qp, set_log_max_qp: 0x9b, 5;
        /// Enhanced connection establishment (qpc `ece`) is supported. (byte 0x14, bits 3..3 of the dword)
        ece_support, set_ece_support: 0xa3, 1;
        /// log2 of the most SRQs. (byte 0x14, bits 11..15 of the dword)
        log_max_srq, set_log_max_srq: 0xab, 5;
        /// log2 of the most CQEs in a CQ. (byte 0x18, bits 8..15 of the dword)
        log_max_cq_sz, set_log_max_cq_sz: 0xc8, 8;
        /// log2 of the most CQs. (byte 0x18, bits 27..31 of the dword)
        log_max_cq, set_log_max_cq: 0xdb, 5;
        /// log2 of the most EQEs in an EQ. (byte 0x1c, bits 0..7 of the dword)
        log_max_eq_sz, set_log_max_eq_sz: 0xe0, 8;
        /// mkc `relaxed_ordering_write` is supported. (byte 0x1c, bits 8..8 of the dword)
        relaxed_ordering_write, set_relaxed_ordering_write: 0xe8, 1;
        /// mkc `relaxed_ordering_read` is supported. (byte 0x1c, bits 9..9 of the dword)
        relaxed_ordering_read, set_relaxed_ordering_read: 0xe9, 1;
        /// log2 of the most memory keys. (byte 0x1c, bits 10..15 of the dword)
        log_max_mkey, set_log_max_mkey: 0xea, 6;
        /// TEARDOWN_HCA supports PREPARE_FAST_TEARDOWN (rdma-core uses it when set). (byte 0x1c, bits 27..27 of the dword)
        fast_teardown, set_fast_teardown: 0xfb, 1;
        /// log2 of the most EQs. (byte 0x1c, bits 28..31 of the dword)
        log_max_eq, set_log_max_eq: 0xfc, 4;
        /// Deepest chain of indirect mkeys. (byte 0x20, bits 0..7 of the dword)
        max_indirection, set_max_indirection: 0x100, 8;
        /// log2 of the largest memory region or window, in bytes. (byte 0x20, bits 9..15 of the dword)
        log_max_mrw_sz, set_log_max_mrw_sz: 0x109, 7;
        /// TEARDOWN_HCA supports FORCE_CLOSE. (byte 0x20, bits 16..16 of the dword)
        force_teardown, set_force_teardown: 0x110, 1;
        /// The null mkey is supported. (byte 0x20, bits 25..25 of the dword)
        null_mkey, set_null_mkey: 0x119, 1;
        /// log2 of the longest KLM list of an indirect mkey. (byte 0x20, bits 26..31 of the dword)
        log_max_klm_list_size, set_log_max_klm_list_size: 0x11a, 6;
        /// log2 of the most outstanding RDMA read/atomic requests per DC initiator. (byte 0x24, bits 10..15 of the dword)
        log_max_ra_req_dc, set_log_max_ra_req_dc: 0x12a, 6;
        /// log2 of the most outstanding RDMA read/atomic responses per DC target. (byte 0x24, bits 26..31 of the dword)
        log_max_ra_res_dc, set_log_max_ra_res_dc: 0x13a, 6;
        /// MANAGE_PAGES can take back all pages at once. (byte 0x28, bits 5..5 of the dword)
        release_all_pages, set_release_all_pages: 0x145, 1;
        /// log2 of the most outstanding RDMA read/atomic requests a QP may issue (bounds `log_sra_max`). (byte 0x28, bits 10..15 of the dword)
        log_max_ra_req_qp, set_log_max_ra_req_qp: 0x14a, 6;
        /// log2 of the most outstanding RDMA read/atomic requests a QP may serve (bounds `log_rra_max`). (byte 0x28, bits 26..31 of the dword)
        log_max_ra_res_qp, set_log_max_ra_res_qp: 0x15a, 6;
        /// Receive end padding is supported. (byte 0x2c, bits 0..0 of the dword)
        end_pad, set_end_pad: 0x160, 1;
        /// QUERY_CONG_STATUS / QUERY_CONG_PARAMS / QUERY_CONG_STATISTICS are allowed. (byte 0x2c, bits 1..1 of the dword)
        cc_query_allowed, set_cc_query_allowed: 0x161, 1;
        /// MODIFY_CONG_STATUS / MODIFY_CONG_PARAMS are allowed. (byte 0x2c, bits 2..2 of the dword)
        cc_modify_allowed, set_cc_modify_allowed: 0x162, 1;
        /// The device cache line is 128 bytes. (byte 0x2c, bits 4..4 of the dword)
        cache_line_128byte, set_cache_line_128byte: 0x164, 1;
        /// GID table entries per port. (byte 0x2c, bits 16..31 of the dword)
        gid_table_size, set_gid_table_size: 0x170, 16;
        /// Most QP counter sets. (byte 0x30, bits 6..15 of the dword)
        max_qp_cnt, set_max_qp_cnt: 0x186, 10;
        /// P_Key table entries per port. (byte 0x30, bits 16..31 of the dword)
        pkey_table_size, set_pkey_table_size: 0x190, 16;
        /// This function manages the vport group (a PF). (byte 0x34, bits 0..0 of the dword)
        vport_group_manager, set_vport_group_manager: 0x1a0, 1;
        /// InfiniBand virtualization. (byte 0x34, bits 2..2 of the dword)
        ib_virt, set_ib_virt: 0x1a2, 1;
        /// This function manages the e-switch. (byte 0x34, bits 7..7 of the dword)
        eswitch_manager, set_eswitch_manager: 0x1a7, 1;
        /// Local CA ACK delay (IBTA encoding), used to compute ACK timeouts. (byte 0x34, bits 11..15 of the dword)
        local_ca_ack_delay, set_local_ca_ack_delay: 0x1ab, 5;
        /// INIT_HCA can be told not to bring the link up. (byte 0x34, bits 20..20 of the dword)
        disable_link_up, set_disable_link_up: 0x1b4, 1;
        /// Port type: 0 = InfiniBand, 1 = Ethernet (`MLX5_CAP_PORT_TYPE_*`). (byte 0x34, bits 22..23 of the dword)
        port_type, set_port_type: 0x1b6, 2;
        /// Number of physical ports. (byte 0x34, bits 24..31 of the dword)
        num_ports, set_num_ports: 0x1b8, 8;
        /// Pulse-per-second is supported. (byte 0x38, bits 1..1 of the dword)
        pps, set_pps: 0x1c1, 1;
        /// log2 of the largest message, in bytes (bounds qpc `log_msg_max`). (byte 0x38, bits 3..7 of the dword)
        log_max_msg, set_log_max_msg: 0x1c3, 5;
        /// Most traffic classes. (byte 0x38, bits 12..15 of the dword)
        max_tc, set_max_tc: 0x1cc, 4;
        /// Bit mask of supported static rates. (byte 0x3c, bits 0..15 of the dword)
        stat_rate_support, set_stat_rate_support: 0x1e0, 16;
        /// CQE format version: 0 = legacy, 1 = with user_index. (byte 0x3c, bits 28..31 of the dword)
        cqe_version, set_cqe_version: 0x1fc, 4;
        /// Compact address vectors are supported. (byte 0x40, bits 0..0 of the dword)
        compact_address_vector, set_compact_address_vector: 0x200, 1;
        /// Striding receive queues are supported. (byte 0x40, bits 1..1 of the dword)
        striding_rq, set_striding_rq: 0x201, 1;
        /// Command signature checking ([`cmdif_checksum`]); bypass (like rdma-core) sets it to 0. (byte 0x40, bits 16..17 of the dword)
        cmdif_checksum, set_cmdif_checksum: 0x210, 2;
        /// DC targets are supported. (byte 0x40, bits 26..26 of the dword)
        dct, set_dct: 0x21a, 1;
        /// QoS capability page exists. (byte 0x40, bits 27..27 of the dword)
        qos, set_qos: 0x21b, 1;
        /// Ethernet offloads page exists. (byte 0x40, bits 28..28 of the dword)
        eth_net_offloads, set_eth_net_offloads: 0x21c, 1;
        /// RoCE is supported. (byte 0x40, bits 29..29 of the dword)
        roce, set_roce: 0x21d, 1;
        /// Atomic operations are supported (details: the ATOMIC capability page). (byte 0x40, bits 30..30 of the dword)
        atomic, set_atomic: 0x21e, 1;
        /// CQ overrun ignore is supported. (byte 0x44, bits 0..0 of the dword)
        cq_oi, set_cq_oi: 0x220, 1;
        /// MODIFY_CQ can resize a CQ. (byte 0x44, bits 1..1 of the dword)
        cq_resize, set_cq_resize: 0x221, 1;
        /// CQ event moderation is supported. (byte 0x44, bits 2..2 of the dword)
        cq_moderation, set_cq_moderation: 0x222, 1;
        /// On-demand paging is supported. (byte 0x44, bits 7..7 of the dword)
        pg, set_pg: 0x227, 1;
        /// Cross-channel (CORE-Direct) operations. (byte 0x44, bits 12..12 of the dword)
        cd, set_cd: 0x22c, 1;
        /// Automatic path migration is supported. (byte 0x44, bits 14..14 of the dword)
        apm, set_apm: 0x22e, 1;
        /// Vector calc offload. (byte 0x44, bits 15..15 of the dword)
        vector_calc, set_vector_calc: 0x22f, 1;
        /// Q_Key violation counters. (byte 0x44, bits 22..22 of the dword)
        qkv, set_qkv: 0x236, 1;
        /// P_Key violation counters. (byte 0x44, bits 23..23 of the dword)
        pkv, set_pkv: 0x237, 1;
        /// XRC transport is supported. (byte 0x44, bits 28..28 of the dword)
        xrc, set_xrc: 0x23c, 1;
        /// UD transport is supported. (byte 0x44, bits 29..29 of the dword)
        ud, set_ud: 0x23d, 1;
        /// UC transport is supported. (byte 0x44, bits 30..30 of the dword)
        uc, set_uc: 0x23e, 1;
        /// RC transport is supported. (byte 0x44, bits 31..31 of the dword)
        rc, set_rc: 0x23f, 1;
        /// UARs can be 4 KiB even when the system page is larger (see `log_uar_page_sz`). (byte 0x48, bits 0..0 of the dword)
        uar_4k, set_uar_4k: 0x240, 1;
        /// UAR size encoding (kernel `MLX5_CAP_GEN(dev, uar_sz)`). (byte 0x48, bits 10..15 of the dword)
        uar_sz, set_uar_sz: 0x24a, 6;
        /// UMEM objects may be created with uid 0; rdma-core mlx5_vfio requires it. (byte 0x48, bits 18..18 of the dword)
        umem_uid_0, set_umem_uid_0: 0x252, 1;
        /// log2 of the smallest page size the device supports, in bytes. (byte 0x48, bits 24..31 of the dword)
        log_pg_sz, set_log_pg_sz: 0x258, 8;
        /// BlueFlame is supported. (byte 0x4c, bits 0..0 of the dword)
        bf, set_bf: 0x260, 1;
        /// SET_DRIVER_VERSION is supported. (byte 0x4c, bits 1..1 of the dword)
        driver_version, set_driver_version: 0x261, 1;
        /// Mkeys can be created with a chosen index; rdma-core enables it when the max caps allow. (byte 0x4c, bits 6..6 of the dword)
        mkey_by_name, set_mkey_by_name: 0x266, 1;
        /// log2 of the BlueFlame register size in bytes (each UAR has two). (byte 0x4c, bits 11..15 of the dword)
        log_bf_reg_size, set_log_bf_reg_size: 0x26b, 5;
        /// Largest send WQE, in bytes. (byte 0x50, bits 16..31 of the dword)
        max_wqe_sz_sq, set_max_wqe_sz_sq: 0x290, 16;
        /// Largest receive WQE, in bytes. (byte 0x54, bits 16..31 of the dword)
        max_wqe_sz_rq, set_max_wqe_sz_rq: 0x2b0, 16;
        /// Largest DC send WQE, in bytes. (byte 0x58, bits 16..31 of the dword)
        max_wqe_sz_sq_dc, set_max_wqe_sz_sq_dc: 0x2d0, 16;
        /// Most QPs attached to one multicast group. (byte 0x5c, bits 7..31 of the dword)
        max_qp_mcg, set_max_qp_mcg: 0x2e7, 25;
        /// log2 of the most multicast groups. (byte 0x60, bits 24..31 of the dword)
        log_max_mcg, set_log_max_mcg: 0x318, 8;
        /// log2 of the most transport domains. (byte 0x64, bits 3..7 of the dword)
        log_max_transport_domain, set_log_max_transport_domain: 0x323, 5;
        /// log2 of the most protection domains. (byte 0x64, bits 11..15 of the dword)
        log_max_pd, set_log_max_pd: 0x32b, 5;
        /// log2 of the most XRC domains. (byte 0x64, bits 27..31 of the dword)
        log_max_xrcd, set_log_max_xrcd: 0x33b, 5;
        /// log2 of the most RQ objects. (byte 0x6c, bits 3..7 of the dword)
        log_max_rq, set_log_max_rq: 0x363, 5;
        /// log2 of the most SQ objects. (byte 0x6c, bits 11..15 of the dword)
        log_max_sq, set_log_max_sq: 0x36b, 5;
        /// log2 of the most TIRs. (byte 0x6c, bits 19..23 of the dword)
        log_max_tir, set_log_max_tir: 0x373, 5;
        /// log2 of the most TISes. (byte 0x6c, bits 27..31 of the dword)
        log_max_tis, set_log_max_tis: 0x37b, 5;
        /// log2 of the most RMPs. (byte 0x70, bits 3..7 of the dword)
        log_max_rmp, set_log_max_rmp: 0x383, 5;
        /// log2 of the most RQ tables. (byte 0x70, bits 11..15 of the dword)
        log_max_rqt, set_log_max_rqt: 0x38b, 5;
        /// log2 of the most WQEs in a WQ object. (byte 0x78, bits 27..31 of the dword)
        log_max_wq_sz, set_log_max_wq_sz: 0x3db, 5;
        /// Bit mask of supported general object types (`MLX5_GENERAL_OBJ_TYPES_CAP_*`). (byte 0x80, bits 0..63 of the dword)
        general_obj_types, set_general_obj_types: 0x400, 64;
        /// Timestamp formats SQs support (0 free-running, 1 real-time, 2 both). (byte 0x88, bits 0..1 of the dword)
        sq_ts_format, set_sq_ts_format: 0x440, 2;
        /// Timestamp formats RQs support. (byte 0x88, bits 2..3 of the dword)
        rq_ts_format, set_rq_ts_format: 0x442, 2;
        /// Hint for the first QP number. (byte 0x88, bits 8..31 of the dword)
        create_qp_start_hint, set_create_qp_start_hint: 0x448, 24;
        /// log2 of the most user contexts (DEVX). (byte 0x8c, bits 3..7 of the dword)
        log_max_uctx, set_log_max_uctx: 0x463, 5;
        /// log2 of the most UMEM objects. (byte 0x8c, bits 11..15 of the dword)
        log_max_umem, set_log_max_umem: 0x46b, 5;
        /// Most EQs (when nonzero, overrides `log_max_eq`). (byte 0x8c, bits 16..31 of the dword)
        max_num_eqs, set_max_num_eqs: 0x470, 16;
        /// log2 of the UAR page size in 4 KiB units; rdma-core sets it to PAGE_SHIFT - 12. (byte 0x90, bits 16..31 of the dword)
        log_uar_page_sz, set_log_uar_page_sz: 0x490, 16;
        /// Device clock frequency, MHz (for CQE timestamps). (byte 0x98, bits 0..31 of the dword)
        device_frequency_mhz, set_device_frequency_mhz: 0x4c0, 32;
        /// Device clock frequency, kHz. (byte 0x9c, bits 0..31 of the dword)
        device_frequency_khz, set_device_frequency_khz: 0x4e0, 32;
        /// UARs per system page (with `uar_4k`). (byte 0xa4, bits 0..31 of the dword)
        num_of_uars_per_page, set_num_of_uars_per_page: 0x520, 32;
        /// CQEs can be forced to 128 bytes. (byte 0xb4, bits 29..29 of the dword)
        cqe_128_always, set_cqe_128_always: 0x5bd, 1;
        /// CQE compression is supported. (byte 0xb4, bits 31..31 of the dword)
        cqe_compression, set_cqe_compression: 0x5bf, 1;
        /// Ports this vHCA sees. (byte 0xc0, bits 16..23 of the dword)
        num_vhca_ports, set_num_vhca_ports: 0x610, 8;
        /// INIT_HCA `sw_owner_id` is supported. (byte 0xc0, bits 30..30 of the dword)
        sw_owner_id, set_sw_owner_id: 0x61e, 1;
    }
}

crate::prm_layout! {
    /// The second general capability page (`mlx5_ifc_cmd_hca_cap_2_bits`, 256 bytes;
    /// [`CapType::GENERAL_2`], present where [`CmdHcaCap::hca_cap_2`] is set). Only the
    /// memory-key page-size bounds the driver reads (Linux `mlx5_ifc.h`; the MTT maximum
    /// is newer than the 6.1 table in `tests/data`).
    pub struct CmdHcaCap2("cmd_hca_cap_2", 0x100) {
        /// log2 of the smallest mkey page (entity) size; 0 means 4 KiB.
        log_min_mkey_entity_size, set_log_min_mkey_entity_size: 0x1ab, 5;
        /// log2 of the largest MTT mkey page size; 0 means not reported (the kernel's
        /// `get_max_log_entity_size_cap` then takes 31).
        max_mkey_log_entity_size_mtt, set_max_mkey_log_entity_size_mtt: 0x3aa, 6;
    }
}

crate::prm_layout! {
    /// The RoCE capability page (`mlx5_ifc_roce_cap_bits`, 256 bytes).
    pub struct RoceCap("roce_cap", 0x100) {
        /// Automatic path migration over RoCE.
        roce_apm, set_roce_apm: 0x0, 1;
        /// Software may choose the RoCEv2 UDP source port (qpc/ads `udp_sport`); rdma-core sets it when supported.
        sw_r_roce_src_udp_port, set_sw_r_roce_src_udp_port: 0x4, 1;
        /// Force-loopback RC QPs work with RoCE disabled.
        fl_rc_qp_when_roce_disabled, set_fl_rc_qp_when_roce_disabled: 0x5, 1;
        /// Force-loopback RC QPs work with RoCE enabled.
        fl_rc_qp_when_roce_enabled, set_fl_rc_qp_when_roce_enabled: 0x6, 1;
        /// Timestamp formats RoCE QPs support (qpc `ts_format`).
        qp_ts_format, set_qp_ts_format: 0x1e, 2;
        /// Supported L3 types (bit mask: GRH, IPv4, IPv6).
        l3_type, set_l3_type: 0x8c, 4;
        /// Supported RoCE versions, a bit mask (kernel `MLX5_ROCE_VERSION_*_CAP`).
        roce_version, set_roce_version: 0x98, 8;
        /// RoCEv2 UDP destination port (4791).
        r_roce_dest_udp_port, set_r_roce_dest_udp_port: 0xb0, 16;
        /// Highest RoCEv2 UDP source port.
        r_roce_max_src_udp_port, set_r_roce_max_src_udp_port: 0xc0, 16;
        /// Lowest RoCEv2 UDP source port.
        r_roce_min_src_udp_port, set_r_roce_min_src_udp_port: 0xd0, 16;
        /// Entries in the RoCE address (GID) table.
        roce_address_table_size, set_roce_address_table_size: 0xf0, 16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_mod_encoding() {
        assert_eq!(query_cap_op_mod(CapType::GENERAL, CapMode::CUR), 1);
        assert_eq!(query_cap_op_mod(CapType::ROCE, CapMode::MAX), 8);
        assert_eq!(set_cap_op_mod(CapType::ROCE), 8);
    }

    #[test]
    fn capability_page_is_at_byte_16() {
        let mut buf = vec![0u8; QueryHcaCapOut::LEN];
        let mut out = QueryHcaCapOut::new_checked(&mut buf[..]).unwrap();
        out.capability_mut().set_port_type(port_type::ETH).unwrap();
        out.roce_cap_mut().set_r_roce_dest_udp_port(4791).unwrap();
        // port_type: capability byte 0x36 bits 1..0 of ... (bits 22..23 of dword 0x34).
        assert_eq!(buf[0x10 + 0x36], 0x01);
        assert_eq!(&buf[0x10 + 0x16..0x10 + 0x18], &4791u16.to_be_bytes());
        let out = QueryHcaCapOut::new_checked(&buf[..]).unwrap();
        assert_eq!(out.capability().port_type(), port_type::ETH);
    }
}
