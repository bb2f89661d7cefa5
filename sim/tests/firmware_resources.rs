//! PD, UAR, mkey, CQ and EQ commands; capabilities, vport contexts and registers: success
//! paths, limits, ownership, and garbage inputs, through the command queue.

mod common;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::caps::{CapMode, CapType, CmdHcaCap, RoceCap};
use bypass_hw::cmd::cq::{CreateCqIn, QueryCqIn, QueryCqOut, status as cq_status};
use bypass_hw::cmd::eq::{QueryEqIn, QueryEqOut};
use bypass_hw::cmd::hca::{
    AccessRegisterIn, AccessRegisterOut, PaosReg, RegisterId, access_register_in_len, port_status,
};
use bypass_hw::cmd::mkey::{CreateMkeyIn, MkeyAccess, QueryMkeyIn, QueryMkeyOut};
use bypass_hw::cmd::vport::{
    ALL_GIDS, ModifyNicVportContextIn, QueryHcaVportContextOut, QueryHcaVportGidIn,
    QueryHcaVportGidOut, QueryNicVportContextOut, port_state, query_hca_vport_gid_out_len,
};
use bypass_hw::eqe::EventType;
use bypass_hw::syndrome::CmdStatus;
use bypass_sim::Profile;
use bypass_sim::syndromes as s;
use common::*;

/// An edit of a command input.
type Edit = Box<dyn Fn(&mut Vec<u8>)>;

fn fails(r: Result<impl std::fmt::Debug, CmdFailure>, status: CmdStatus, synd: u32) {
    match r {
        Err(CmdFailure::Status {
            status: st,
            syndrome,
        }) => {
            assert_eq!((st, syndrome), (status, synd), "{:?}", s::name(syndrome));
        }
        other => panic!("expected {status} / {:?}, got {other:?}", s::name(synd)),
    }
}

#[test]
fn pd_and_uar_alloc_dealloc_and_double_free() {
    let mut r = Raw::up();
    let a = r.alloc_pd().unwrap();
    let b = r.alloc_pd().unwrap();
    assert_ne!(a, b);
    assert!(a >= 1, "PD 0 is reserved");
    r.destroy(Opcode::DEALLOC_PD, a).unwrap();
    fails(
        r.destroy(Opcode::DEALLOC_PD, a),
        CmdStatus::BAD_RES_ERR,
        s::PD_UNKNOWN,
    );
    let u = r.alloc_uar().unwrap();
    assert!(u >= r.dev.profile().first_uar);
    r.destroy(Opcode::DEALLOC_UAR, u).unwrap();
    fails(
        r.destroy(Opcode::DEALLOC_UAR, u),
        CmdStatus::BAD_RES_ERR,
        s::UAR_UNKNOWN,
    );
    fails(
        r.destroy(Opcode::DEALLOC_UAR, 0xffffff),
        CmdStatus::BAD_RES_ERR,
        s::UAR_UNKNOWN,
    );
}

#[test]
fn uars_run_out_at_the_profile_count() {
    let mut r = Raw::new(Profile {
        uar_pages: 3,
        ..Profile::default()
    });
    r.bring_up(); // takes one
    r.alloc_uar().unwrap();
    r.alloc_uar().unwrap();
    fails(r.alloc_uar(), CmdStatus::LIM_ERR, s::UAR_EXHAUSTED);
}

#[test]
fn mkey_create_query_destroy_and_pd_in_use() {
    let mut r = Raw::up();
    let pd = r.alloc_pd().unwrap();
    let mr = r
        .reg_mr(
            pd,
            3 * 4096 + 100,
            MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_READ,
        )
        .unwrap();
    assert_eq!(mr.key & 0xff, 0x5a);
    fails(
        r.destroy(Opcode::DEALLOC_PD, pd),
        CmdStatus::RES_BUSY,
        s::PD_IN_USE,
    );
    let mut i = header(Opcode::QUERY_MKEY, 0, 16);
    QueryMkeyIn::new_checked(&mut i[..])
        .unwrap()
        .set_mkey_index(mr.key >> 8)
        .unwrap();
    let o = r.ok(&i, QueryMkeyOut::LEN);
    let q = QueryMkeyOut::new_checked(&o[..]).unwrap();
    let m = q.memory_key_mkey_entry();
    assert_eq!(m.pd(), pd);
    assert_eq!(m.start_addr(), mr.va);
    assert_eq!(m.len(), mr.len as u64);
    assert_eq!(
        m.access(),
        MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_READ
    );
    assert_eq!(m.mkey_7_0(), 0x5a);
    r.dereg_mr(mr.key).unwrap();
    fails(r.dereg_mr(mr.key), CmdStatus::BAD_RES_ERR, s::MKEY_UNKNOWN);
    r.destroy(Opcode::DEALLOC_PD, pd).unwrap();
    // An mkey in a destroyed PD.
    fails(
        r.reg_mr(pd, 4096, MkeyAccess::empty()),
        CmdStatus::BAD_RES_ERR,
        s::PD_UNKNOWN,
    );
}

#[test]
fn mkey_inputs_are_checked() {
    let mut r = Raw::up();
    let pd = r.alloc_pd().unwrap();
    let off = r.alloc(3 * 4096, 4096);
    let base = r.create_mkey_input(pd, off, 2 * 4096, MkeyAccess::LOCAL_WRITE, 1);
    let cases: Vec<(Edit, CmdStatus, u32)> = vec![
        (
            Box::new(|i| {
                CreateMkeyIn::new_checked(&mut i[..])
                    .unwrap()
                    .mkc_mut()
                    .set_access_mode(2)
                    .unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_ACCESS_MODE,
        ),
        (
            Box::new(|i| {
                CreateMkeyIn::new_checked(&mut i[..])
                    .unwrap()
                    .mkc_mut()
                    .set_free(1)
                    .unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_FREE,
        ),
        (
            Box::new(|i| {
                CreateMkeyIn::new_checked(&mut i[..])
                    .unwrap()
                    .mkc_mut()
                    .set_log_page_size(5)
                    .unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_PAGE_SIZE,
        ),
        (
            Box::new(|i| {
                let mut c = CreateMkeyIn::new_checked(&mut i[..]).unwrap();
                c.mkc_mut().set_len(8 * 4096).unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_OCTWORDS,
        ),
        (
            Box::new(|i| {
                let mut c = CreateMkeyIn::new_checked(&mut i[..]).unwrap();
                c.mkc_mut().set_translations_octword_size(40).unwrap();
            }),
            CmdStatus::BAD_INP_LEN_ERR,
            s::LIST_TRUNCATED,
        ),
        (
            Box::new(|i| {
                let mut c = CreateMkeyIn::new_checked(&mut i[..]).unwrap();
                let e = c.klm_pas_mtt(1).unwrap();
                c.set_klm_pas_mtt(1, e + 0x800).unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_MTT_UNALIGNED,
        ),
        (
            Box::new(|i| {
                let mut c = CreateMkeyIn::new_checked(&mut i[..]).unwrap();
                c.mkc_mut().set_start_addr(u64::MAX - 10).unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_RANGE_WRAPS,
        ),
        (
            Box::new(|i| {
                CreateMkeyIn::new_checked(&mut i[..])
                    .unwrap()
                    .mkc_mut()
                    .set_length64(1)
                    .unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::MKEY_LENGTH64,
        ),
        (
            Box::new(|i| i[2] = 1), // uid
            CmdStatus::BAD_PARAM_ERR,
            s::BAD_UID,
        ),
    ];
    for (k, (edit, st, synd)) in cases.into_iter().enumerate() {
        let mut i = base.clone();
        edit(&mut i);
        let res = r.cmd(&i, 16);
        assert!(res.is_err(), "case {k}");
        fails(res, st, synd);
    }
    r.ok(&base, 16);
}

#[test]
fn cq_create_query_destroy_and_limits() {
    let mut r = Raw::up();
    let eqn = r.async_eq.unwrap().eqn;
    let cq = r.create_cq(6, eqn).unwrap();
    let mut i = header(Opcode::QUERY_CQ, 0, 16);
    QueryCqIn::new_checked(&mut i[..])
        .unwrap()
        .set_cqn(cq.cqn)
        .unwrap();
    let o = r.ok(&i, QueryCqOut::LEN);
    let q = QueryCqOut::new_checked(&o[..]).unwrap();
    let c = q.cq_context();
    assert_eq!(c.log_cq_size(), 6);
    assert_eq!(c.c_eqn(), eqn);
    assert_eq!(c.status(), u32::from(cq_status::OK));
    assert_eq!(c.producer_counter(), 0);
    // The EQ and UAR are in use while the CQ exists.
    fails(
        r.destroy(Opcode::DESTROY_EQ, eqn),
        CmdStatus::RES_BUSY,
        s::EQ_IN_USE,
    );
    let uar = r.uar;
    fails(
        r.destroy(Opcode::DEALLOC_UAR, uar),
        CmdStatus::RES_BUSY,
        s::UAR_IN_USE,
    );
    r.destroy_cq(cq.cqn).unwrap();
    fails(r.destroy_cq(cq.cqn), CmdStatus::BAD_RES_ERR, s::CQ_UNKNOWN);
    // Oversized.
    let max = r.dev.profile().caps.log_max_cq_sz;
    let off = r.alloc(4096, 4096);
    let dbr = r.alloc(64, 64);
    let mut i = r.create_cq_input(6, eqn, uar, off, dbr);
    CreateCqIn::new_checked(&mut i[..])
        .unwrap()
        .cqc_mut()
        .set_log_cq_size(u32::from(max) + 1)
        .unwrap();
    fails(r.cmd(&i, 16), CmdStatus::LIM_ERR, s::CQ_TOO_LARGE);
    // Missing EQ / UAR, bad CQE size, short pas list, unaligned page.
    let good = r.create_cq_input(6, eqn, uar, off, dbr);
    let edits: Vec<(Edit, CmdStatus, u32)> = vec![
        (
            Box::new(|i| {
                CreateCqIn::new_checked(&mut i[..])
                    .unwrap()
                    .cqc_mut()
                    .set_c_eqn(60)
                    .unwrap();
            }),
            CmdStatus::BAD_RES_ERR,
            s::CQ_EQ_UNKNOWN,
        ),
        (
            Box::new(|i| {
                CreateCqIn::new_checked(&mut i[..])
                    .unwrap()
                    .cqc_mut()
                    .set_uar_page(2)
                    .unwrap();
            }),
            CmdStatus::BAD_RES_ERR,
            s::CQ_UAR_UNKNOWN,
        ),
        (
            Box::new(|i| {
                CreateCqIn::new_checked(&mut i[..])
                    .unwrap()
                    .cqc_mut()
                    .set_cqe_sz(3)
                    .unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::CQ_BAD_CQE_SIZE,
        ),
        (
            Box::new(|i| {
                CreateCqIn::new_checked(&mut i[..])
                    .unwrap()
                    .cqc_mut()
                    .set_log_cq_size(8)
                    .unwrap();
            }),
            CmdStatus::BAD_INP_LEN_ERR,
            s::LIST_TRUNCATED,
        ),
        (
            Box::new(|i| {
                let mut c = CreateCqIn::new_checked(&mut i[..]).unwrap();
                let p = c.pas(0).unwrap();
                c.set_pas(0, p + 64).unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::CQ_PAS_UNALIGNED,
        ),
        (
            Box::new(|i| {
                CreateCqIn::new_checked(&mut i[..])
                    .unwrap()
                    .cqc_mut()
                    .set_cqe_comp_en(1)
                    .unwrap();
            }),
            CmdStatus::BAD_PARAM_ERR,
            s::CQ_UNSUPPORTED,
        ),
    ];
    for (edit, st, synd) in edits {
        let mut i = good.clone();
        edit(&mut i);
        fails(r.cmd(&i, 16), st, synd);
    }
}

#[test]
fn too_many_cqs_with_a_small_profile() {
    let mut p = Profile::default();
    p.caps.log_max_cq = 1;
    let mut r = Raw::new(p);
    r.bring_up();
    let eqn = r.async_eq.unwrap().eqn;
    r.create_cq(2, eqn).unwrap();
    r.create_cq(2, eqn).unwrap();
    fails(r.create_cq(2, eqn), CmdStatus::LIM_ERR, s::CQ_EXHAUSTED);
}

#[test]
fn eq_create_query_destroy_and_checks() {
    let mut r = Raw::up();
    let uar = r.uar;
    let eq = r.create_eq(uar, 5, &[EventType::PORT_CHANGE], 2).unwrap();
    let mut i = header(Opcode::QUERY_EQ, 0, 16);
    QueryEqIn::new_checked(&mut i[..])
        .unwrap()
        .set_eq_number(eq.eqn)
        .unwrap();
    let o = r.ok(&i, QueryEqOut::LEN);
    let q = QueryEqOut::new_checked(&o[..]).unwrap();
    assert_eq!(q.event_bitmask(), 1 << EventType::PORT_CHANGE.0);
    assert_eq!(q.eq_context_entry().intr(), 2);
    assert_eq!(q.eq_context_entry().log_eq_size(), 5);
    r.destroy(Opcode::DESTROY_EQ, eq.eqn).unwrap();
    fails(
        r.destroy(Opcode::DESTROY_EQ, eq.eqn),
        CmdStatus::BAD_RES_ERR,
        s::EQ_UNKNOWN,
    );
    let vectors = r.dev.profile().msix_vectors;
    fails(
        r.create_eq(uar, 5, &[], vectors),
        CmdStatus::BAD_PARAM_ERR,
        s::EQ_BAD_VECTOR,
    );
    let off = r.alloc(4096, 4096);
    let mut i = r.create_eq_input(uar, 5, &[], 0, off);
    bypass_hw::cmd::eq::CreateEqIn::new_checked(&mut i[..])
        .unwrap()
        .eqc_mut()
        .set_log_eq_size(30)
        .unwrap();
    fails(r.cmd(&i, 16), CmdStatus::LIM_ERR, s::EQ_TOO_LARGE);
    fails(
        r.create_eq(0x3ff, 5, &[], 0),
        CmdStatus::BAD_RES_ERR,
        s::EQ_UAR_UNKNOWN,
    );
}

#[test]
fn caps_report_the_profile_and_set_hca_cap_rejects_values_above_max() {
    let mut r = Raw::up();
    let max = r.query_cap(CapType::GENERAL, CapMode::MAX).unwrap();
    let m = CmdHcaCap::new_checked(&max[..]).unwrap();
    let caps = r.dev.profile().caps.clone();
    assert_eq!(m.log_max_qp(), caps.log_max_qp.into());
    assert_eq!(m.log_max_cq_sz(), caps.log_max_cq_sz.into());
    assert_eq!(m.num_ports(), 1);
    assert_eq!(m.roce(), 1);
    assert_eq!(m.cqe_version(), 1);
    assert_eq!(m.gid_table_size(), 1, "16 GIDs = 8 << 1");
    let roce = r.query_cap(CapType::ROCE, CapMode::CUR).unwrap();
    let rc = RoceCap::new_checked(&roce[..]).unwrap();
    assert_eq!(rc.r_roce_dest_udp_port(), 4791);
    assert_eq!(rc.sw_r_roce_src_udp_port(), 1, "bring_up set it");
    fails(
        r.query_cap(CapType(0x3), CapMode::CUR),
        CmdStatus::BAD_PARAM_ERR,
        s::UNSUPPORTED_CAP_TYPE,
    );
    // SET_HCA_CAP after INIT_HCA is too late; check the value rules on a fresh device.
    let mut f = Raw::new(Profile::default());
    f.init_cmdq();
    f.enable_hca().unwrap();
    let boot = f.query_pages(bypass_hw::cmd::pages::QueryPagesOpMod::BOOT);
    f.give_pages(boot as usize);
    let mut cur = f.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    CmdHcaCap::new_checked(&mut cur[..])
        .unwrap()
        .set_log_max_qp(u32::from(caps.log_max_qp) + 1)
        .unwrap();
    fails(
        f.set_cap(CapType::GENERAL, &cur),
        CmdStatus::BAD_PARAM_ERR,
        s::CAP_ABOVE_MAX,
    );
    let mut cur = f.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    CmdHcaCap::new_checked(&mut cur[..])
        .unwrap()
        .set_cmdif_checksum(3)
        .unwrap();
    fails(
        f.set_cap(CapType::GENERAL, &cur),
        CmdStatus::BAD_PARAM_ERR,
        s::CAP_CHECKSUM_UNSUPPORTED,
    );
    let mut cur = f.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    {
        let mut c = CmdHcaCap::new_checked(&mut cur[..]).unwrap();
        c.set_log_max_qp(5).unwrap();
        // Read-only fields are ignored.
        c.set_num_ports(9).unwrap();
    }
    f.set_cap(CapType::GENERAL, &cur).unwrap();
    let now = f.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    let n = CmdHcaCap::new_checked(&now[..]).unwrap();
    assert_eq!((n.log_max_qp(), n.num_ports()), (5, 1));
}

#[test]
fn vport_contexts_gids_and_roce_enable() {
    let mut r = Raw::up();
    let o = r.ok(
        &header(Opcode::QUERY_HCA_VPORT_CONTEXT, 0, 16),
        QueryHcaVportContextOut::LEN,
    );
    let c = QueryHcaVportContextOut::new_checked(&o[..]).unwrap();
    assert_eq!(c.hca_vport_context().port_state(), port_state::ACTIVE);
    assert_eq!(c.hca_vport_context().port_physical_state(), 5);
    let mut i = header(Opcode::QUERY_HCA_VPORT_CONTEXT, 0, 16);
    i[9] = 2; // port_num 2 of a one-port device
    fails(
        r.cmd(&i, QueryHcaVportContextOut::LEN),
        CmdStatus::BAD_PARAM_ERR,
        s::BAD_PORT,
    );

    let gid0 = r.dev.profile().ports[0].gids[0];
    let mut i = header(Opcode::QUERY_HCA_VPORT_GID, 0, 16);
    QueryHcaVportGidIn::new_checked(&mut i[..])
        .unwrap()
        .set_gid_index(ALL_GIDS)
        .unwrap();
    let o = r.ok(&i, query_hca_vport_gid_out_len(16));
    let g = QueryHcaVportGidOut::new_checked(&o[..]).unwrap();
    assert_eq!(g.gids_num(), 16);
    assert_eq!(g.gid(0).unwrap(), gid0);
    QueryHcaVportGidIn::new_checked(&mut i[..])
        .unwrap()
        .set_gid_index(16)
        .unwrap();
    fails(
        r.cmd(&i, query_hca_vport_gid_out_len(1)),
        CmdStatus::IX_ERR,
        s::GID_INDEX,
    );

    let o = r.ok(
        &header(Opcode::QUERY_NIC_VPORT_CONTEXT, 0, 16),
        QueryNicVportContextOut::LEN,
    );
    let n = QueryNicVportContextOut::new_checked(&o[..]).unwrap();
    assert_eq!(n.nic_vport_context().roce_en(), 1, "bring_up enabled RoCE");
    assert_eq!(
        n.nic_vport_context().permanent_address().mac(),
        r.dev.profile().ports[0].mac
    );
    let mut i = header(
        Opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        ModifyNicVportContextIn::LEN,
    );
    {
        let mut m = ModifyNicVportContextIn::new_checked(&mut i[..]).unwrap();
        m.field_select_mut().set_mtu(1).unwrap();
        m.nic_vport_context_mut().set_mtu(20).unwrap();
    }
    fails(r.cmd(&i, 16), CmdStatus::BAD_PARAM_ERR, s::VPORT_BAD_MTU);
    ModifyNicVportContextIn::new_checked(&mut i[..])
        .unwrap()
        .field_select_mut()
        .set_permanent_address(1)
        .unwrap();
    fails(
        r.cmd(&i, 16),
        CmdStatus::BAD_PARAM_ERR,
        s::VPORT_FIELD_NOT_SETTABLE,
    );
}

#[test]
fn access_reg_paos_and_unknown_registers() {
    let mut r = Raw::up();
    let len = access_register_in_len(PaosReg::LEN);
    let mut i = header(Opcode::ACCESS_REG, 0, len);
    {
        let mut a = AccessRegisterIn::new_checked(&mut i[..]).unwrap();
        a.set_register_id(RegisterId::PAOS.0.into()).unwrap();
        let mut p = PaosReg::new_checked(a.register_data_mut()).unwrap();
        p.set_local_port(1).unwrap();
        p.set_ase(1).unwrap();
        p.set_admin_status(port_status::DOWN).unwrap();
    }
    let o = r.ok(&i, len);
    let out = AccessRegisterOut::new_checked(&o[..]).unwrap();
    assert_eq!(
        PaosReg::new_checked(out.register_data())
            .unwrap()
            .oper_status(),
        port_status::DOWN
    );
    let o = r.ok(
        &header(Opcode::QUERY_HCA_VPORT_CONTEXT, 0, 16),
        QueryHcaVportContextOut::LEN,
    );
    let c = QueryHcaVportContextOut::new_checked(&o[..]).unwrap();
    assert_eq!(c.hca_vport_context().port_state(), port_state::DOWN);
    AccessRegisterIn::new_checked(&mut i[..])
        .unwrap()
        .set_register_id(0x1234)
        .unwrap();
    fails(
        r.cmd(&i, len),
        CmdStatus::BAD_PARAM_ERR,
        s::UNKNOWN_REGISTER,
    );
}

#[test]
fn garbage_inputs_get_a_status_and_the_device_keeps_answering() {
    let mut r = Raw::up();
    let mut x: u64 = 0x1234_5678_9abc_def0;
    for op in bypass_hw::cmd::Opcode::ALL {
        for len in [16usize, 0x40, 0x110, 0x300, 0x1010] {
            let mut i = header(*op, 0, len);
            for b in i.iter_mut().skip(2) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            i[0..2].copy_from_slice(&(op.0).to_be_bytes());
            if *op == Opcode::TEARDOWN_HCA || *op == Opcode::DISABLE_HCA {
                continue;
            }
            let _ = r.cmd(&i, 0x1010);
        }
    }
    r.simple(Opcode::NOP, 0).unwrap();
}

#[test]
fn the_mkey_page_size_bound_is_advertised_and_enforced() {
    let mut p = Profile::default();
    p.caps.max_mkey_page_shift = 21;
    let mut r = Raw::new(p);
    r.bring_up();
    let g = r.query_cap(CapType::GENERAL, CapMode::CUR).unwrap();
    assert_eq!(CmdHcaCap::new_checked(&g[..]).unwrap().hca_cap_2(), 1);
    let g2 = r.query_cap(CapType::GENERAL_2, CapMode::CUR).unwrap();
    let c2 = bypass_hw::cmd::caps::CmdHcaCap2::new_checked(&g2[..]).unwrap();
    assert_eq!(c2.max_mkey_log_entity_size_mtt(), 21);
    let pd = r.alloc_pd().unwrap();
    let off = r.alloc(4096, 4096);
    let base = r.create_mkey_input(pd, off, 4096, MkeyAccess::LOCAL_WRITE, 1);
    let with_shift = |shift: u32| {
        let mut i = base.clone();
        let mut c = CreateMkeyIn::new_checked(&mut i[..]).unwrap();
        // One entry aligned to any page size up to 1 GiB (creation reads no memory).
        c.set_klm_pas_mtt(0, (1 << 30) | 3).unwrap();
        c.mkc_mut().set_start_addr(1 << 30).unwrap();
        c.mkc_mut().set_log_page_size(shift).unwrap();
        i
    };
    fails(
        r.cmd(&with_shift(22), 16),
        CmdStatus::BAD_PARAM_ERR,
        s::MKEY_PAGE_SIZE,
    );
    r.ok(&with_shift(21), 16);
}

#[test]
fn the_nic_vport_mtu_is_the_ports_ethernet_mtu_and_modify_sets_it() {
    let query = |r: &mut Raw| {
        let o = r.ok(
            &header(Opcode::QUERY_NIC_VPORT_CONTEXT, 0, 16),
            QueryNicVportContextOut::LEN,
        );
        QueryNicVportContextOut::new_checked(&o[..])
            .unwrap()
            .nic_vport_context()
            .mtu()
    };
    let mut r = Raw::up();
    // 9000 of Ethernet plus 22 L2 bytes (MLX5E_SW2HW_MTU).
    assert_eq!(query(&mut r), 9022);
    assert_eq!(r.dev.port_mtu(1), Some(9000));
    assert!(r.dev.set_port_mtu(1, 1500));
    assert_eq!(query(&mut r), 1522);
    let mut i = header(
        Opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        ModifyNicVportContextIn::LEN,
    );
    {
        let mut m = ModifyNicVportContextIn::new_checked(&mut i[..]).unwrap();
        m.field_select_mut().set_mtu(1).unwrap();
        m.nic_vport_context_mut().set_mtu(4222).unwrap();
    }
    r.ok(&i, 16);
    assert_eq!(query(&mut r), 4222);
    assert_eq!(r.dev.port_mtu(1), Some(4200), "the port follows the vport");
}
