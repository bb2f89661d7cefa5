//! Congestion-control commands: QUERY_CONG_STATUS / MODIFY_CONG_STATUS (is a node on for a
//! priority), QUERY_CONG_PARAMS / MODIFY_CONG_PARAMS (the RoCE ECN reaction and notification
//! points' parameters, with a field-select mask) and QUERY_CONG_STATISTICS (their counters,
//! optionally cleared).
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_{query,modify}_cong_status_*`,
//! `mlx5_ifc_{query,modify}_cong_params_*`, `mlx5_ifc_query_cong_statistics_*`,
//! `mlx5_ifc_cong_control_r_roce_ecn_{rp,np}_bits`, `mlx5_ifc_field_select_r_roce_{rp,np}_bits`
//! and the unions `cong_control_roce_ecn_auto` / `field_select_802_1_r_roce_auto`); how the
//! kernel issues them: `drivers/infiniband/hw/mlx5/cong.c` (`mlx5_ib_get_cc_params`,
//! `mlx5_ib_set_cc_params`, `mlx5_ib_query_cong_counters`) and `mlx5/cmd.c`
//! (`mlx5_cmd_query_cong_params`, `mlx5_cmd_query_cong_counter`: `clear`).
//! The 802.1Qau (QCN) members of the unions are not modelled: mlx5 RoCE uses ECN only.
//!
//! Owns: formats only; the plain parameter types and their encoding are [`super::cong_params`].
//! Must not: keep state or judge values (the sim's `firmware::cong` does).

crate::prm_layout! {
    /// QUERY_CONG_STATUS input (`mlx5_ifc_query_cong_status_in_bits`).
    pub struct QueryCongStatusIn("query_cong_status_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_CONG_STATUS` (0x822).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The priority (0..=7) asked about.
        priority, set_priority: 0x58, 4;
        /// The node ([`cong_protocol`]).
        cong_protocol, set_cong_protocol: 0x5c, 4;
    }
}

crate::prm_layout! {
    /// QUERY_CONG_STATUS output (`mlx5_ifc_query_cong_status_out_bits`).
    pub struct QueryCongStatusOut("query_cong_status_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The node is on for the priority.
        enable, set_enable: 0x60, 1;
        /// Tagging is on (802.1Qau only; 0 for RoCE ECN).
        tag_enable, set_tag_enable: 0x61, 1;
    }
}

crate::prm_layout! {
    /// MODIFY_CONG_STATUS input (`mlx5_ifc_modify_cong_status_in_bits`).
    pub struct ModifyCongStatusIn("modify_cong_status_in", 0x10) {
        /// `MLX5_CMD_OP_MODIFY_CONG_STATUS` (0x823).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The priority (0..=7) to change.
        priority, set_priority: 0x58, 4;
        /// The node ([`cong_protocol`]).
        cong_protocol, set_cong_protocol: 0x5c, 4;
        /// Turn the node on (1) or off (0) for the priority.
        enable, set_enable: 0x60, 1;
        /// Tagging (802.1Qau only; must be 0 for RoCE ECN).
        tag_enable, set_tag_enable: 0x61, 1;
    }
}

crate::prm_layout! {
    /// MODIFY_CONG_STATUS output (`mlx5_ifc_modify_cong_status_out_bits`).
    pub struct ModifyCongStatusOut("modify_cong_status_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// The RoCE ECN notification point's parameters (`mlx5_ifc_cong_control_r_roce_ecn_np_bits`).
    pub struct CongControlRRoceEcnNp("cong_control_r_roce_ecn_np", 0x100) {
        /// µs between CNPs for one QP.
        min_time_between_cnps, set_min_time_between_cnps: 0xa0, 32;
        /// The DSCP CNPs carry.
        cnp_dscp, set_cnp_dscp: 0xd2, 6;
        /// How a CNP's priority is chosen.
        cnp_prio_mode, set_cnp_prio_mode: 0xdc, 1;
        /// The 802.1p priority CNPs carry.
        cnp_802p_prio, set_cnp_802p_prio: 0xdd, 3;
    }
}

crate::prm_layout! {
    /// The RoCE ECN reaction point's parameters (`mlx5_ifc_cong_control_r_roce_ecn_rp_bits`).
    pub struct CongControlRRoceEcnRp("cong_control_r_roce_ecn_rp", 0x100) {
        /// Clamp the target rate on every CNP.
        clamp_tgt_rate, set_clamp_tgt_rate: 0x64, 1;
        /// Clamp the target rate after a timer increase.
        clamp_tgt_rate_after_time_inc, set_clamp_tgt_rate_after_time_inc: 0x68, 1;
        /// µs between timer increases.
        rpg_time_reset, set_rpg_time_reset: 0xa0, 32;
        /// Bytes between byte-counter increases.
        rpg_byte_reset, set_rpg_byte_reset: 0xc0, 32;
        /// Fast-recovery steps before additive increase.
        rpg_threshold, set_rpg_threshold: 0xe0, 32;
        /// Highest rate, Mb/s.
        rpg_max_rate, set_rpg_max_rate: 0x100, 32;
        /// Additive increase, Mb/s.
        rpg_ai_rate, set_rpg_ai_rate: 0x120, 32;
        /// Hyper increase, Mb/s.
        rpg_hai_rate, set_rpg_hai_rate: 0x140, 32;
        /// log2 of the decrease divisor.
        rpg_gd, set_rpg_gd: 0x160, 32;
        /// Largest decrease, percent of the rate kept.
        rpg_min_dec_fac, set_rpg_min_dec_fac: 0x180, 32;
        /// Lowest rate, Mb/s.
        rpg_min_rate, set_rpg_min_rate: 0x1a0, 32;
        /// Rate set by a QP's first CNP, Mb/s.
        rate_to_set_on_first_cnp, set_rate_to_set_on_first_cnp: 0x2a0, 32;
        /// Alpha update weight, 1/1024.
        dce_tcp_g, set_dce_tcp_g: 0x2c0, 32;
        /// µs between alpha updates.
        dce_tcp_rtt, set_dce_tcp_rtt: 0x2e0, 32;
        /// µs: at most one decrease per period.
        rate_reduce_monitor_period, set_rate_reduce_monitor_period: 0x300, 32;
        /// Alpha of a QP's first CNP, 1/1024.
        initial_alpha_value, set_initial_alpha_value: 0x340, 32;
    }
}

crate::prm_layout! {
    /// The congestion parameters of one node (`mlx5_ifc_cong_control_roce_ecn_auto_bits`, a
    /// union: every member starts at byte 0; which one is meant follows `cong_protocol`).
    pub struct CongControlRoceEcnAuto("cong_control_roce_ecn_auto", 0x100) {
        sub {
            /// The reaction point's view (`cong_protocol` RP).
            cong_control_r_roce_ecn_rp, cong_control_r_roce_ecn_rp_mut: CongControlRRoceEcnRp @ 0x0;
            /// The notification point's view (`cong_protocol` NP).
            cong_control_r_roce_ecn_np, cong_control_r_roce_ecn_np_mut: CongControlRRoceEcnNp @ 0x0;
        }
    }
}

crate::prm_layout! {
    /// Which RP parameters MODIFY_CONG_PARAMS changes (`mlx5_ifc_field_select_r_roce_rp_bits`;
    /// bit numbers: [`rp_field`]).
    pub struct FieldSelectRRoceRp("field_select_r_roce_rp", 0x4) {
        /// The mask (bit n = 1 << n of the dword).
        field_select_r_roce_rp, set_field_select_r_roce_rp: 0x0, 32;
    }
}

crate::prm_layout! {
    /// Which NP parameters MODIFY_CONG_PARAMS changes (`mlx5_ifc_field_select_r_roce_np_bits`;
    /// bit numbers: [`np_field`]).
    pub struct FieldSelectRRoceNp("field_select_r_roce_np", 0x4) {
        /// The mask (bit n = 1 << n of the dword).
        field_select_r_roce_np, set_field_select_r_roce_np: 0x0, 32;
    }
}

crate::prm_layout! {
    /// MODIFY_CONG_PARAMS's field select (`mlx5_ifc_field_select_802_1_r_roce_auto_bits`, a
    /// union at byte 0).
    pub struct FieldSelect8021RRoceAuto("field_select_802_1_r_roce_auto", 0x4) {
        sub {
            /// The RP's mask.
            field_select_r_roce_rp, field_select_r_roce_rp_mut: FieldSelectRRoceRp @ 0x0;
            /// The NP's mask.
            field_select_r_roce_np, field_select_r_roce_np_mut: FieldSelectRRoceNp @ 0x0;
        }
    }
}

crate::prm_layout! {
    /// QUERY_CONG_PARAMS input (`mlx5_ifc_query_cong_params_in_bits`).
    pub struct QueryCongParamsIn("query_cong_params_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_CONG_PARAMS` (0x824).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The node ([`cong_protocol`]).
        cong_protocol, set_cong_protocol: 0x5c, 4;
    }
}

crate::prm_layout! {
    /// QUERY_CONG_PARAMS output (`mlx5_ifc_query_cong_params_out_bits`).
    pub struct QueryCongParamsOut("query_cong_params_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The node's parameters (byte 0x10).
            congestion_parameters, congestion_parameters_mut: CongControlRoceEcnAuto @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_CONG_PARAMS input (`mlx5_ifc_modify_cong_params_in_bits`).
    pub struct ModifyCongParamsIn("modify_cong_params_in", 0x120) {
        /// `MLX5_CMD_OP_MODIFY_CONG_PARAMS` (0x825).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The node ([`cong_protocol`]).
        cong_protocol, set_cong_protocol: 0x5c, 4;
        sub {
            /// Which parameters change (byte 0x0c).
            field_select, field_select_mut: FieldSelect8021RRoceAuto @ 0xc;
            /// The new values (byte 0x20); unselected ones are ignored.
            congestion_parameters, congestion_parameters_mut: CongControlRoceEcnAuto @ 0x20;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_CONG_PARAMS output (`mlx5_ifc_modify_cong_params_out_bits`).
    pub struct ModifyCongParamsOut("modify_cong_params_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// QUERY_CONG_STATISTICS input (`mlx5_ifc_query_cong_statistics_in_bits`).
    pub struct QueryCongStatisticsIn("query_cong_statistics_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_CONG_STATISTICS` (0x826).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Zero the counters after reading them.
        clear, set_clear: 0x40, 1;
    }
}

crate::prm_layout! {
    /// QUERY_CONG_STATISTICS output (`mlx5_ifc_query_cong_statistics_out_bits`): 64-bit
    /// counters as high and low dwords (read them with [`QueryCongStatisticsOut::counters`]).
    pub struct QueryCongStatisticsOut("query_cong_statistics_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// Flows the RP is limiting now.
        rp_cur_flows, set_rp_cur_flows: 0x80, 32;
        /// Flows seen.
        sum_flows, set_sum_flows: 0xa0, 32;
        /// CNPs ignored by the RP, high dword.
        rp_cnp_ignored_high, set_rp_cnp_ignored_high: 0xc0, 32;
        /// CNPs ignored by the RP, low dword.
        rp_cnp_ignored_low, set_rp_cnp_ignored_low: 0xe0, 32;
        /// CNPs handled by the RP, high dword.
        rp_cnp_handled_high, set_rp_cnp_handled_high: 0x100, 32;
        /// CNPs handled by the RP, low dword.
        rp_cnp_handled_low, set_rp_cnp_handled_low: 0x120, 32;
        /// Device time of the reading, high dword.
        time_stamp_high, set_time_stamp_high: 0x240, 32;
        /// Device time of the reading, low dword.
        time_stamp_low, set_time_stamp_low: 0x260, 32;
        /// Accumulation period.
        accumulators_period, set_accumulators_period: 0x280, 32;
        /// ECN-marked RoCE packets the NP saw, high dword.
        np_ecn_marked_roce_packets_high, set_np_ecn_marked_roce_packets_high: 0x2a0, 32;
        /// ECN-marked RoCE packets the NP saw, low dword.
        np_ecn_marked_roce_packets_low, set_np_ecn_marked_roce_packets_low: 0x2c0, 32;
        /// CNPs the NP sent, high dword.
        np_cnp_sent_high, set_np_cnp_sent_high: 0x2e0, 32;
        /// CNPs the NP sent, low dword.
        np_cnp_sent_low, set_np_cnp_sent_low: 0x300, 32;
    }
}

/// `cong_protocol` codes (the kernel's `enum mlx5_ib_cong_node_type`).
pub mod cong_protocol {
    /// The RoCE ECN reaction point (`MLX5_IB_RROCE_ECN_RP`).
    pub const RP: u32 = 1;
    /// The RoCE ECN notification point (`MLX5_IB_RROCE_ECN_NP`).
    pub const NP: u32 = 2;
    /// General parameters (`MLX5_IB_RROCE_GENERAL`).
    pub const GENERAL: u32 = 3;
}

/// Bit numbers of `field_select_r_roce_rp` (the kernel's `MLX5_IB_RP_*_ATTR` in `cong.c`).
pub mod rp_field {
    /// `clamp_tgt_rate`.
    pub const CLAMP_TGT_RATE: u32 = 1;
    /// `clamp_tgt_rate_after_time_inc`.
    pub const CLAMP_TGT_RATE_ATI: u32 = 2;
    /// `rpg_time_reset`.
    pub const TIME_RESET: u32 = 3;
    /// `rpg_byte_reset`.
    pub const BYTE_RESET: u32 = 4;
    /// `rpg_threshold`.
    pub const THRESHOLD: u32 = 5;
    /// `rpg_max_rate`.
    pub const MAX_RATE: u32 = 6;
    /// `rpg_ai_rate`.
    pub const AI_RATE: u32 = 7;
    /// `rpg_hai_rate`.
    pub const HAI_RATE: u32 = 8;
    /// `rpg_min_dec_fac`.
    pub const MIN_DEC_FAC: u32 = 9;
    /// `rpg_min_rate`.
    pub const MIN_RATE: u32 = 10;
    /// `rate_to_set_on_first_cnp`.
    pub const RATE_TO_SET_ON_FIRST_CNP: u32 = 11;
    /// `dce_tcp_g`.
    pub const DCE_TCP_G: u32 = 12;
    /// `dce_tcp_rtt`.
    pub const DCE_TCP_RTT: u32 = 13;
    /// `rate_reduce_monitor_period`.
    pub const RATE_REDUCE_MONITOR_PERIOD: u32 = 14;
    /// `initial_alpha_value`.
    pub const INITIAL_ALPHA_VALUE: u32 = 15;
    /// `rpg_gd`.
    pub const GD: u32 = 16;
}

/// Bit numbers of `field_select_r_roce_np` (the kernel's `MLX5_IB_NP_*_ATTR` in `cong.c`).
pub mod np_field {
    /// `min_time_between_cnps`.
    pub const MIN_TIME_BETWEEN_CNPS: u32 = 2;
    /// `cnp_dscp`.
    pub const CNP_DSCP: u32 = 3;
    /// `cnp_prio_mode` and `cnp_802p_prio` (the kernel sets both under this bit).
    pub const CNP_PRIO_MODE: u32 = 4;
}

// The view's buffer field is private to this module, where `prm_layout!` defined it.
impl<T: AsRef<[u8]>> QueryCongStatisticsOut<T> {
    /// The four 64-bit counters, joined from their high and low dwords:
    /// `(rp_cnp_ignored, rp_cnp_handled, np_ecn_marked_roce_packets, np_cnp_sent)`.
    pub fn counters(&self) -> (u64, u64, u64, u64) {
        let j = |h: u32, l: u32| (u64::from(h) << 32) | u64::from(l);
        (
            j(self.rp_cnp_ignored_high(), self.rp_cnp_ignored_low()),
            j(self.rp_cnp_handled_high(), self.rp_cnp_handled_low()),
            j(
                self.np_ecn_marked_roce_packets_high(),
                self.np_ecn_marked_roce_packets_low(),
            ),
            j(self.np_cnp_sent_high(), self.np_cnp_sent_low()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modify_params_input_bit_positions() {
        let mut buf = [0u8; ModifyCongParamsIn::LEN];
        let mut m = ModifyCongParamsIn::new_checked(&mut buf[..]).unwrap();
        m.set_opcode(0x825).unwrap();
        m.set_cong_protocol(cong_protocol::NP).unwrap();
        m.field_select_mut()
            .field_select_r_roce_np_mut()
            .set_field_select_r_roce_np(1 << np_field::CNP_DSCP)
            .unwrap();
        {
            let mut c = m.congestion_parameters_mut();
            let mut np = c.cong_control_r_roce_ecn_np_mut();
            np.set_cnp_dscp(0x2a).unwrap();
            np.set_cnp_prio_mode(1).unwrap();
            np.set_cnp_802p_prio(5).unwrap();
            np.set_min_time_between_cnps(0x0102_0304).unwrap();
        }
        assert!(m.set_cong_protocol(16).is_err());
        assert_eq!(&buf[0..2], &[0x08, 0x25]);
        assert_eq!(buf[0xb], 0x02, "cong_protocol: low nibble of byte 0x0b");
        assert_eq!(&buf[0xc..0x10], &[0, 0, 0, 0x08], "field select bit 3");
        // The NP parameters start at byte 0x20: min_time at +0x14, the dscp dword at +0x18.
        assert_eq!(&buf[0x34..0x38], &[1, 2, 3, 4]);
        assert_eq!(
            &buf[0x38..0x3c],
            &[0, 0, 0x2a, 0x0d],
            "dscp 6 bits at 0xd2, mode, prio"
        );
    }

    #[test]
    fn rp_parameters_and_statistics_positions() {
        let mut buf = [0u8; QueryCongParamsOut::LEN];
        let mut o = QueryCongParamsOut::new_checked(&mut buf[..]).unwrap();
        {
            let mut c = o.congestion_parameters_mut();
            let mut rp = c.cong_control_r_roce_ecn_rp_mut();
            rp.set_clamp_tgt_rate(1).unwrap();
            rp.set_clamp_tgt_rate_after_time_inc(1).unwrap();
            rp.set_rpg_gd(11).unwrap();
            rp.set_initial_alpha_value(1023).unwrap();
        }
        // Byte 0x10 + 0x0c: bit 0x64 is 0x08 of byte 0x0c, bit 0x68 is 0x80 of byte 0x0d.
        assert_eq!(&buf[0x1c..0x1e], &[0x08, 0x80]);
        assert_eq!(&buf[0x10 + 0x2c..0x10 + 0x30], &11u32.to_be_bytes());
        assert_eq!(&buf[0x10 + 0x68..0x10 + 0x6c], &1023u32.to_be_bytes());

        let mut s = [0u8; QueryCongStatisticsOut::LEN];
        let mut q = QueryCongStatisticsOut::new_checked(&mut s[..]).unwrap();
        q.set_rp_cnp_handled_high(1).unwrap();
        q.set_rp_cnp_handled_low(2).unwrap();
        q.set_np_cnp_sent_low(7).unwrap();
        assert_eq!(q.counters(), (0, (1 << 32) | 2, 0, 7));
        assert_eq!(&s[0x20..0x28], &[0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(&s[0x60..0x64], &[0, 0, 0, 7]);
    }
}
