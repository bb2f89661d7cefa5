//! Conformance: the congestion-control command layouts (`bypass_hw::cmd::cong`) and the
//! `cc_query_allowed` / `cc_modify_allowed` capability bits against the field table taken from
//! the Linux kernel's `include/linux/mlx5/mlx5_ifc.h`, and the bytes of a MODIFY_CONG_PARAMS the
//! way the kernel's `drivers/infiniband/hw/mlx5/cong.c` (`mlx5_ib_set_cc_params`) builds it.
//!
//! Kernel version: as named in the header of `tests/data/mlx5_ifc_fields.tsv`.

mod common;

use bypass_hw::cmd::caps::CmdHcaCap;
use bypass_hw::cmd::cong::*;
use bypass_hw::cmd::cong_params::{NpChanges, RpChanges, RpParams};
use bypass_hw::cmd::{MboxIn, Opcode};
use bypass_hw::prm::Field;

/// Kernel fields bypass leaves out: the 802.1Qau (QCN) members of the unions (mlx5 RoCE uses ECN).
const NOT_COVERED: &[(&str, &str)] = &[
    ("cong_control_roce_ecn_auto", "cong_control_802_1qau_rp"),
    ("field_select_802_1_r_roce_auto", "field_select_802_1qau_rp"),
];

fn check(ifc: &str, len: usize, fields: &[Field], subs: &[(&str, usize, &[Field])]) {
    let table = common::ifc_table();
    common::check_layout(&table, ifc, len, fields, subs);
    for r in table
        .iter()
        .filter(|r| r.layout == ifc && r.field != "__size__")
    {
        let known = fields.iter().any(|f| f.name == r.field)
            || subs.iter().any(|(n, _, _)| *n == r.field)
            || NOT_COVERED.contains(&(ifc, r.field.as_str()));
        assert!(known, "{ifc}.{}: kernel field has no accessor", r.field);
    }
}

macro_rules! check_layouts {
    ($($test:ident: $ty:ident;)*) => {$(
        #[test]
        fn $test() {
            type L = $ty<()>;
            check(L::IFC_NAME, L::LEN, L::FIELDS, L::SUBS);
        }
    )*};
}

check_layouts! {
    query_cong_status_in_matches_kernel: QueryCongStatusIn;
    query_cong_status_out_matches_kernel: QueryCongStatusOut;
    modify_cong_status_in_matches_kernel: ModifyCongStatusIn;
    modify_cong_status_out_matches_kernel: ModifyCongStatusOut;
    cong_control_r_roce_ecn_np_matches_kernel: CongControlRRoceEcnNp;
    cong_control_r_roce_ecn_rp_matches_kernel: CongControlRRoceEcnRp;
    cong_control_roce_ecn_auto_matches_kernel: CongControlRoceEcnAuto;
    field_select_r_roce_rp_matches_kernel: FieldSelectRRoceRp;
    field_select_r_roce_np_matches_kernel: FieldSelectRRoceNp;
    field_select_802_1_r_roce_auto_matches_kernel: FieldSelect8021RRoceAuto;
    query_cong_params_in_matches_kernel: QueryCongParamsIn;
    query_cong_params_out_matches_kernel: QueryCongParamsOut;
    modify_cong_params_in_matches_kernel: ModifyCongParamsIn;
    modify_cong_params_out_matches_kernel: ModifyCongParamsOut;
    query_cong_statistics_in_matches_kernel: QueryCongStatisticsIn;
    query_cong_statistics_out_matches_kernel: QueryCongStatisticsOut;
}

#[test]
fn cc_capability_bits_match_the_kernel() {
    let table = common::ifc_table();
    for f in CmdHcaCap::<()>::FIELDS
        .iter()
        .filter(|f| f.name.starts_with("cc_"))
    {
        let row = table
            .iter()
            .find(|r| r.layout == "cmd_hca_cap" && r.field == f.name)
            .expect("cc bit in the table");
        assert_eq!((f.bit_off, f.width), (row.bit_off, row.width), "{}", f.name);
    }
    let mut page = [0u8; 0x100];
    CmdHcaCap::new_checked(&mut page[..])
        .unwrap()
        .set_cc_modify_allowed(1)
        .unwrap();
    assert_eq!(page[0x2c], 0x20, "cc_modify_allowed: bit 0x162");
}

#[test]
fn opcodes_are_the_kernels() {
    assert_eq!(Opcode::QUERY_CONG_STATUS.0, 0x822);
    assert_eq!(Opcode::MODIFY_CONG_STATUS.0, 0x823);
    assert_eq!(Opcode::QUERY_CONG_PARAMS.0, 0x824);
    assert_eq!(Opcode::MODIFY_CONG_PARAMS.0, 0x825);
    assert_eq!(Opcode::QUERY_CONG_STATISTICS.0, 0x826);
    assert_eq!(
        Opcode::QUERY_CONG_STATISTICS.name(),
        Some("QUERY_CONG_STATISTICS")
    );
}

/// `mlx5_ib_set_cc_params` for `rp_ai_rate` = 10: MODIFY_CONG_PARAMS, `cong_protocol` RP, the
/// field select with `MLX5_IB_RP_AI_RATE_ATTR` (bit 7), the value at `rpg_ai_rate`.
#[test]
fn modify_cong_params_bytes_as_the_kernel_builds_them() {
    let mut buf = vec![0u8; ModifyCongParamsIn::LEN];
    let mut m = ModifyCongParamsIn::new_checked(&mut buf[..]).unwrap();
    m.set_opcode(Opcode::MODIFY_CONG_PARAMS.0.into()).unwrap();
    m.set_cong_protocol(cong_protocol::RP).unwrap();
    let c = RpChanges {
        rpg_ai_rate: Some(10),
        ..Default::default()
    };
    m.field_select_mut()
        .field_select_r_roce_rp_mut()
        .set_field_select_r_roce_rp(c.field_select())
        .unwrap();
    c.encode(
        &mut m
            .congestion_parameters_mut()
            .cong_control_r_roce_ecn_rp_mut(),
    )
    .unwrap();
    assert_eq!(
        MboxIn::new_checked(&buf[..]).unwrap().op(),
        Opcode::MODIFY_CONG_PARAMS
    );
    let mut want = vec![0u8; 0x120];
    want[0] = 0x08;
    want[1] = 0x25;
    want[0x0b] = 0x01;
    want[0x0e] = 0x00;
    want[0x0f] = 0x80;
    want[0x20 + 0x24..0x20 + 0x28].copy_from_slice(&10u32.to_be_bytes());
    assert_eq!(buf, want);
    let n = NpChanges {
        min_time_between_cnps: Some(4),
        ..Default::default()
    };
    assert_eq!(
        n.field_select(),
        0x4,
        "MLX5_IB_NP_MIN_TIME_BETWEEN_CNPS_ATTR"
    );
    assert_eq!(
        RpChanges::all(&RpParams::default()).field_select(),
        0x1_fffe
    );
}
