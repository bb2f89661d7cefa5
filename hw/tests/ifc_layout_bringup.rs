//! Conformance: every bring-up layout in `bypass_hw::cmd::{hca,pages,caps,vport,pd_uar}`, the
//! command queue entry and mailbox (`cmd::entry`) and the init segment (`init_seg`) against the
//! field table taken from the Linux kernel's `include/linux/mlx5/mlx5_ifc.h`.
//!
//! Kernel source of the table (`tests/data/mlx5_ifc_fields.tsv`): Linux 6.1.192 (stable; Debian
//! linux-headers-6.1.0-55-common 6.1.192-1), `include/linux/mlx5/mlx5_ifc.h`; `mbox_in`/`mbox_out`
//! from `drivers/net/ethernet/mellanox/mlx5/core/cmd.c`. The byte-aligned structs follow
//! `include/linux/mlx5/device.h` (`mlx5_cmd_layout`, `mlx5_cmd_prot_block`, `mlx5_init_seg`),
//! whose offsets are checked here against the same table's `cmd_queue_entry`, `cmd_if_box`,
//! `initial_seg` and `health_buffer` bit layouts.

mod common;

use bypass_hw::View;
use bypass_hw::cmd::entry::{self, CmdLayout, CmdMailbox, DeliveryStatus};
use bypass_hw::cmd::{MboxIn, MboxOut, caps, hca, pages, pd_uar, vport};
use bypass_hw::init_seg::{self, InitSeg, NicInterface};
use common::IfcRow;

macro_rules! check {
    ($($ty:ident)::+) => {{
        let table = common::ifc_table();
        type L = $($ty)::+<()>;
        common::check_layout(&table, L::IFC_NAME, L::LEN, L::FIELDS, L::SUBS);
    }};
}

#[test]
fn bringup_layouts_match_the_kernel() {
    check!(MboxIn);
    check!(MboxOut);
    check!(hca::EnableHcaIn);
    check!(hca::EnableHcaOut);
    check!(hca::DisableHcaIn);
    check!(hca::DisableHcaOut);
    check!(hca::QueryIssiIn);
    check!(hca::QueryIssiOut);
    check!(hca::SetIssiIn);
    check!(hca::SetIssiOut);
    check!(hca::InitHcaIn);
    check!(hca::InitHcaOut);
    check!(hca::TeardownHcaIn);
    check!(hca::TeardownHcaOut);
    check!(hca::AccessRegisterIn);
    check!(hca::AccessRegisterOut);
    check!(hca::RegisterHostEndianness);
    check!(hca::PaosReg);
    check!(hca::SetDriverVersionIn);
    check!(hca::SetDriverVersionOut);
    check!(pages::QueryPagesIn);
    check!(pages::QueryPagesOut);
    check!(pages::ManagePagesIn);
    check!(pages::ManagePagesOut);
    check!(caps::QueryHcaCapIn);
    check!(caps::QueryHcaCapOut);
    check!(caps::SetHcaCapIn);
    check!(caps::SetHcaCapOut);
    check!(caps::CmdHcaCap);
    check!(caps::RoceCap);
    check!(vport::QueryHcaVportContextIn);
    check!(vport::QueryHcaVportContextOut);
    check!(vport::HcaVportContext);
    check!(vport::QueryHcaVportGidIn);
    check!(vport::QueryHcaVportGidOut);
    check!(vport::MacAddressLayout);
    check!(vport::NicVportContext);
    check!(vport::ModifyNicVportFieldSelect);
    check!(vport::ModifyNicVportContextIn);
    check!(vport::ModifyNicVportContextOut);
    check!(vport::QueryNicVportContextIn);
    check!(vport::QueryNicVportContextOut);
    check!(pd_uar::AllocPdIn);
    check!(pd_uar::AllocPdOut);
    check!(pd_uar::DeallocPdIn);
    check!(pd_uar::DeallocPdOut);
    check!(pd_uar::AllocUarIn);
    check!(pd_uar::AllocUarOut);
    check!(pd_uar::DeallocUarIn);
    check!(pd_uar::DeallocUarOut);
}

/// Every sub-layout's fields also sit where the kernel's nested struct puts them: checking the
/// sub-layout type on its own (above) plus its offset in the parent (in `check_layout`) covers
/// it; this guards that each SUBS entry names a layout checked above.
#[test]
fn sub_layouts_are_listed_in_the_table() {
    let table = common::ifc_table();
    let layouts: std::collections::HashSet<&str> =
        table.iter().map(|r| r.layout.as_str()).collect();
    for name in [
        "cmd_hca_cap",
        "roce_cap",
        "hca_vport_context",
        "nic_vport_context",
        "modify_nic_vport_field_select",
        "mac_address_layout",
    ] {
        assert!(layouts.contains(name), "{name} missing from the table");
    }
    // The capability page is a 4 KiB union at byte 0x10 of QUERY_HCA_CAP output / SET_HCA_CAP input.
    let cap = row(&table, "query_hca_cap_out", "capability");
    assert_eq!(
        (cap.bit_off / 8, cap.width / 8),
        (caps::CAPABILITY_OFF, caps::CAPABILITY_LEN)
    );
    let cap = row(&table, "set_hca_cap_in", "capability");
    assert_eq!(
        (cap.bit_off / 8, cap.width / 8),
        (caps::CAPABILITY_OFF, caps::CAPABILITY_LEN)
    );
    // The variable-length tails start right after their headers.
    assert_eq!(
        row(&table, "manage_pages_in", "pas").bit_off / 8,
        pages::PAS_OFF
    );
    assert_eq!(
        row(&table, "manage_pages_out", "pas").bit_off / 8,
        pages::PAS_OFF
    );
    assert_eq!(
        row(&table, "query_hca_vport_gid_out", "gid").bit_off / 8,
        vport::GID_LIST_OFF
    );
    assert_eq!(
        row(&table, "array128_auto", "__size__").width / 8,
        vport::GID_LEN
    );
    assert_eq!(
        row(&table, "access_register_in", "register_data").bit_off / 8,
        hca::ACCESS_REG_DATA_OFF
    );
    assert_eq!(
        row(&table, "access_register_out", "register_data").bit_off / 8,
        hca::ACCESS_REG_DATA_OFF
    );
    let dv = row(&table, "set_driver_version_in", "driver_version");
    assert_eq!(
        dv.bit_off / 8..(dv.bit_off + dv.width) / 8,
        hca::DRIVER_VERSION_RANGE
    );
}

fn row<'a>(table: &'a [IfcRow], layout: &str, field: &str) -> &'a IfcRow {
    table
        .iter()
        .find(|r| r.layout == layout && r.field == field)
        .unwrap_or_else(|| panic!("{layout}.{field} not in the kernel table"))
}

/// Asserts that the bytes set in `buf` are exactly the kernel field's bits.
fn assert_owns(buf: &[u8], r: &IfcRow) {
    for bit in 0..buf.len() * 8 {
        let set = buf[bit / 8] & (0x80 >> (bit % 8)) != 0;
        let owned = bit >= r.bit_off && bit < r.bit_off + r.width;
        assert_eq!(
            set, owned,
            "{}.{}: bit {bit:#x} set={set}, kernel says {owned}",
            r.layout, r.field
        );
    }
}

#[test]
fn command_entry_matches_kernel_cmd_queue_entry() {
    let table = common::ifc_table();
    assert_eq!(
        row(&table, "cmd_queue_entry", "__size__").width,
        CmdLayout::SIZE * 8
    );
    type Set = fn(&mut CmdLayout);
    let cases: [(&str, Set); 8] = [
        ("type", |e| {
            e.set_cmd_type(0xff);
        }),
        ("input_length", |e| {
            e.set_inlen(u32::MAX);
        }),
        ("command_input_inline_data", |e| e.input = [0xff; 16]),
        ("command_output_inline_data", |e| e.output = [0xff; 16]),
        ("output_length", |e| {
            e.set_outlen(u32::MAX);
        }),
        ("token", |e| {
            e.set_token(0xff);
        }),
        ("signature", |e| e.sig = 0xff),
        ("ownership", |e| {
            e.give_to_hw();
        }),
    ];
    for (field, set) in cases {
        let mut buf = [0u8; 64];
        set(CmdLayout::view_mut(&mut buf).unwrap());
        assert_owns(&buf, row(&table, "cmd_queue_entry", field));
    }
    // The 64-bit pointers span the kernel's _63_32 and _31_9 fields (low 9 bits reserved).
    let mut buf = [0u8; 64];
    CmdLayout::view_mut(&mut buf).unwrap().set_in_ptr(u64::MAX);
    assert_eq!(
        row(&table, "cmd_queue_entry", "input_mailbox_pointer_63_32").bit_off,
        8 * 8
    );
    assert_eq!(&buf[8..16], &[0xff; 8]);
    let mut buf = [0u8; 64];
    CmdLayout::view_mut(&mut buf).unwrap().set_out_ptr(u64::MAX);
    assert_eq!(
        row(&table, "cmd_queue_entry", "output_mailbox_pointer_63_32").bit_off,
        0x30 * 8
    );
    assert_eq!(&buf[0x30..0x38], &[0xff; 8]);
    // Delivery status: 7 bits above the ownership bit.
    let mut buf = [0u8; 64];
    CmdLayout::view_mut(&mut buf)
        .unwrap()
        .complete(DeliveryStatus(0x7f))
        .unwrap();
    assert_owns(&buf, row(&table, "cmd_queue_entry", "status"));
}

#[test]
fn command_entry_round_trip_against_hand_built_bytes() {
    // The kernel's `struct mlx5_cmd_layout` (include/linux/mlx5/device.h): type 7 @0, ilen @4, iptr @8, in @0x10,
    // out @0x20, optr @0x30, olen @0x38, token @0x3c, sig @0x3d, status_own @0x3f.
    let mut want = [0u8; 64];
    want[0] = 7;
    want[4..8].copy_from_slice(&0x0000_0110u32.to_be_bytes());
    want[8..16].copy_from_slice(&0x0000_0001_2345_6000u64.to_be_bytes());
    want[0x10..0x12].copy_from_slice(&[0x05, 0x03]); // INIT2RTR opcode inline
    want[0x30..0x38].copy_from_slice(&0x0000_0001_2345_7000u64.to_be_bytes());
    want[0x38..0x3c].copy_from_slice(&0x0000_0010u32.to_be_bytes());
    want[0x3c] = 0xa5;
    want[0x3f] = 0x01;

    let mut buf = [0u8; 64];
    let e = CmdLayout::view_mut(&mut buf).unwrap();
    e.set_cmd_type(entry::MLX5_PCI_CMD_XPORT)
        .set_inlen(0x110)
        .set_in_ptr(0x1_2345_6000)
        .set_out_ptr(0x1_2345_7000)
        .set_outlen(0x10)
        .set_token(0xa5)
        .give_to_hw();
    e.input[..2].copy_from_slice(&[0x05, 0x03]);
    assert_eq!(buf, want);

    let e = CmdLayout::view(&want).unwrap();
    assert_eq!(
        (
            e.cmd_type(),
            e.inlen(),
            e.in_ptr(),
            e.out_ptr(),
            e.outlen(),
            e.token()
        ),
        (7, 0x110, 0x1_2345_6000, 0x1_2345_7000, 0x10, 0xa5)
    );
    assert!(e.hw_owned());
    assert_eq!(entry::mailbox_blocks(e.inlen() as usize), 1);
    assert!(CmdLayout::view(&want[..63]).is_err());
}

#[test]
fn mailbox_matches_kernel_cmd_if_box() {
    let table = common::ifc_table();
    assert_eq!(
        row(&table, "cmd_if_box", "__size__").width,
        CmdMailbox::SIZE * 8
    );
    assert_eq!(CmdMailbox::SIZE, entry::MAILBOX_SIZE);
    let mut buf = [0u8; entry::MAILBOX_SIZE];
    CmdMailbox::view_mut(&mut buf).unwrap().data = [0xff; 512];
    assert_owns(&buf, row(&table, "cmd_if_box", "mailbox_data"));
    let mut buf = [0u8; entry::MAILBOX_SIZE];
    CmdMailbox::view_mut(&mut buf)
        .unwrap()
        .set_block_num(u32::MAX);
    assert_owns(&buf, row(&table, "cmd_if_box", "block_number"));
    let mut buf = [0u8; entry::MAILBOX_SIZE];
    CmdMailbox::view_mut(&mut buf).unwrap().set_token(0xff);
    assert_owns(&buf, row(&table, "cmd_if_box", "token"));
    let mut buf = [0u8; entry::MAILBOX_SIZE];
    CmdMailbox::view_mut(&mut buf).unwrap().ctrl_sig = 0xff;
    assert_owns(&buf, row(&table, "cmd_if_box", "ctrl_signature"));
    let mut buf = [0u8; entry::MAILBOX_SIZE];
    CmdMailbox::view_mut(&mut buf).unwrap().sig = 0xff;
    assert_owns(&buf, row(&table, "cmd_if_box", "signature"));
    let mut buf = [0u8; entry::MAILBOX_SIZE];
    CmdMailbox::view_mut(&mut buf).unwrap().set_next(u64::MAX);
    assert_eq!(
        row(&table, "cmd_if_box", "next_pointer_63_32").bit_off / 8,
        0x230
    );
    assert_eq!(&buf[0x230..0x238], &[0xff; 8]);
    // The PRM keeps bits 31..10 of `next`: blocks must be 1 KiB aligned.
    let low = row(&table, "cmd_if_box", "next_pointer_31_10");
    assert_eq!(1usize << (32 - low.width), entry::MAILBOX_ALIGN);
}

#[test]
fn mailbox_round_trip_against_hand_built_bytes() {
    let mut want = [0u8; 576];
    want[0] = 0xde;
    want[511] = 0xad;
    want[0x230..0x238].copy_from_slice(&0x0000_0002_0000_0400u64.to_be_bytes());
    want[0x238..0x23c].copy_from_slice(&3u32.to_be_bytes());
    want[0x23d] = 0x5a;
    let mut buf = [0u8; 576];
    let m = CmdMailbox::view_mut(&mut buf).unwrap();
    m.data[0] = 0xde;
    m.data[511] = 0xad;
    m.set_next(0x2_0000_0400).set_block_num(3).set_token(0x5a);
    assert_eq!(buf, want);
    let m = CmdMailbox::view(&want).unwrap();
    assert_eq!(
        (m.next(), m.block_num(), m.token()),
        (0x2_0000_0400, 3, 0x5a)
    );
    assert!(CmdMailbox::view(&want[..575]).is_err());
}

#[test]
fn mailbox_block_arithmetic() {
    use entry::{block_range, inline_range, mailbox_blocks};
    // rdma-core mlx5_calc_cmd_blocks: ceil(max(len - 16, 0) / 512).
    let cases = [
        (0, 0),
        (1, 0),
        (16, 0),
        (17, 1),
        (528, 1),
        (529, 2),
        (0x110, 1),
        (0x1010, 8),
        (0x1011, 9),
        (0x1210, 9),
    ];
    for (len, blocks) in cases {
        assert_eq!(mailbox_blocks(len), blocks, "len {len:#x}");
    }
    assert_eq!(inline_range(0x1010), 0..16);
    assert_eq!(inline_range(8), 0..8);
    assert_eq!(block_range(0x1010, 0), Some(16..528));
    assert_eq!(block_range(0x1010, 7), Some(16 + 7 * 512..0x1010));
    assert_eq!(block_range(0x1010, 8), None);
    assert_eq!(block_range(usize::MAX, usize::MAX / 2), None);
    assert_eq!(mailbox_blocks(usize::MAX), (usize::MAX - 16).div_ceil(512));
    // QUERY_HCA_CAP output (0x1010 bytes) needs 8 blocks; MANAGE_PAGES with 64 pages
    // (16 + 512 bytes) fits in one, 65 need two.
    assert_eq!(mailbox_blocks(caps::QueryHcaCapOut::LEN), 8);
    assert_eq!(mailbox_blocks(pages::manage_pages_in_len(64)), 1);
    assert_eq!(mailbox_blocks(pages::manage_pages_in_len(65)), 2);
}

#[test]
fn init_segment_offsets_match_the_kernel() {
    let table = common::ifc_table();
    let byte = |f: &str| row(&table, "initial_seg", f).bit_off / 8;
    assert_eq!(byte("fw_rev_minor"), init_seg::FW_REV);
    assert_eq!(byte("cmd_interface_rev"), init_seg::CMDIF_REV_FW_SUB);
    assert_eq!(byte("cmdq_phy_addr_63_32"), init_seg::CMDQ_ADDR_H);
    assert_eq!(byte("cmdq_phy_addr_31_12"), init_seg::CMDQ_ADDR_L_SZ);
    assert_eq!(byte("command_doorbell_vector"), init_seg::CMD_DBELL);
    assert_eq!(byte("initializing"), init_seg::INITIALIZING);
    assert_eq!(byte("health_buffer"), init_seg::HEALTH);
    assert_eq!(
        row(&table, "health_buffer", "__size__").width / 8,
        init_seg::HEALTH_LEN
    );
    assert_eq!(byte("health_syndrome"), init_seg::HEALTH_COUNTER);
    let hc = row(&table, "initial_seg", "health_counter");
    assert_eq!(
        (hc.bit_off, hc.width),
        (init_seg::HEALTH_COUNTER * 8 + 8, 24)
    );
    let hb = |f: &str| init_seg::HEALTH + row(&table, "health_buffer", f).bit_off / 8;
    assert_eq!(hb("assert_existptr"), init_seg::HEALTH_ASSERT_EXIT_PTR);
    assert_eq!(hb("assert_callra"), init_seg::HEALTH_ASSERT_CALLRA);
    assert_eq!(hb("time"), init_seg::HEALTH_TIME);
    assert_eq!(hb("fw_version"), init_seg::HEALTH_FW_VER);
    assert_eq!(hb("hw_id"), init_seg::HEALTH_HW_ID);
    assert_eq!(hb("rfr"), init_seg::HEALTH_RFR_SEVERITY);
    assert_eq!(hb("irisc_index"), init_seg::HEALTH_IRISC_INDEX);
    assert_eq!(hb("synd"), init_seg::HEALTH_SYND);
    assert_eq!(hb("ext_synd"), init_seg::HEALTH_EXT_SYND);

    // Sub-fields: set each through the view and compare with the kernel's bit positions.
    let mut buf = vec![0u8; init_seg::INIT_SEG_LEN];
    InitSeg::new_checked(&mut buf[..])
        .unwrap()
        .set_cmdq_geometry(0xf, 0)
        .unwrap();
    assert_owns(&buf[..0x20], row(&table, "initial_seg", "log_cmdq_size"));
    let mut buf = vec![0u8; init_seg::INIT_SEG_LEN];
    InitSeg::new_checked(&mut buf[..])
        .unwrap()
        .set_cmdq_geometry(0, 0xf)
        .unwrap();
    assert_owns(&buf[..0x20], row(&table, "initial_seg", "log_cmdq_stride"));
    let mut buf = vec![0u8; init_seg::INIT_SEG_LEN];
    InitSeg::new_checked(&mut buf[..])
        .unwrap()
        .set_initializing(true);
    assert_owns(&buf[..0x200], row(&table, "initial_seg", "initializing"));
    let mut buf = vec![0u8; init_seg::INIT_SEG_LEN];
    InitSeg::new_checked(&mut buf[..])
        .unwrap()
        .set_health_counter(0xff_ffff)
        .unwrap();
    let hc_rel = IfcRow {
        bit_off: hc.bit_off - init_seg::HEALTH_COUNTER * 8,
        ..hc.clone()
    };
    assert_owns(
        &buf[init_seg::HEALTH_COUNTER..init_seg::HEALTH_COUNTER + 4],
        &hc_rel,
    );
    // The kernel bit layout gives nic_interface 2 bits (9..8); device.h and rdma-core read 3
    // (10..8, MLX5_NIC_IFC_OFFSET with mask 7) to see SW_RESET = 7. Both agree on bit 8.
    let ni = row(&table, "initial_seg", "nic_interface");
    assert_eq!(
        ni.bit_off + ni.width,
        init_seg::CMDQ_ADDR_L_SZ * 8 + 32 - init_seg::NIC_IFC_OFFSET as usize
    );
}

#[test]
fn init_segment_round_trip_against_hand_built_bytes() {
    let mut want = vec![0u8; init_seg::INIT_SEG_LEN];
    want[0..4].copy_from_slice(&[0x00, 0x28, 0x00, 0x10]); // fw 16.40.x: minor 0x28, major 0x10
    want[4..8].copy_from_slice(&[0x00, 0x05, 0x03, 0xe8]); // cmdif 5, subminor 1000
    want[0x10..0x14].copy_from_slice(&[0x00, 0x00, 0x00, 0x01]);
    want[0x14..0x18].copy_from_slice(&[0x23, 0x45, 0x61, 0x00]); // addr low | DISABLED
    want[0x1fc] = 0x80;
    want[0x230..0x234].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    want[0x238] = 0x80;
    want[0x23d] = 0x10;
    want[0x23e..0x240].copy_from_slice(&[0xbe, 0xef]);
    want[0x1010..0x1014].copy_from_slice(&[0x00, 0x00, 0x01, 0x02]);

    let mut buf = vec![0u8; init_seg::INIT_SEG_LEN];
    let mut s = InitSeg::new_checked(&mut buf[..]).unwrap();
    s.set_fw_rev(0x10, 0x28)
        .set_cmdif_rev_fw_sub(5, 1000)
        .set_initializing(true);
    s.set_cmdq_addr(0x1_2345_6000).unwrap();
    s.set_nic_interface(NicInterface::DISABLED).unwrap();
    s.set_health_fw_ver(0x1234_5678)
        .set_health_rfr_severity(0x80);
    s.set_health_synd(init_seg::HealthSyndrome::HIGH_TEMP_ERR)
        .set_health_ext_synd(0xbeef);
    s.set_health_counter(0x102).unwrap();
    assert_eq!(buf, want);

    let s = InitSeg::new_checked(&want[..]).unwrap();
    assert_eq!(
        (
            s.fw_rev_major(),
            s.fw_rev_minor(),
            s.fw_rev_subminor(),
            s.cmdif_rev()
        ),
        (0x10, 0x28, 1000, init_seg::CMDIF_REV)
    );
    assert_eq!(s.cmdq_addr(), 0x1_2345_6000);
    assert_eq!(s.nic_interface(), NicInterface::DISABLED);
    assert!(s.initializing() && s.health_rfr() && s.fatal_sensor());
    assert_eq!(s.health_synd(), init_seg::HealthSyndrome::HIGH_TEMP_ERR);
    assert_eq!(s.health_ext_synd(), 0xbeef);
    assert_eq!(s.health_counter(), 0x102);

    // The command queue must be page aligned.
    let mut buf = vec![0u8; init_seg::INIT_SEG_LEN];
    assert!(
        InitSeg::new_checked(&mut buf[..])
            .unwrap()
            .set_cmdq_addr(0x1001)
            .is_err()
    );
}
