//! CREATE_QP, QUERY_QP and DESTROY_QP: what is accepted, every limit and missing object,
//! the users counts, and the context QUERY_QP returns.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{CreateQpIn, QpState, QueryQpOut, service_type};
use bypass_hw::syndrome::CmdStatus;

use super::{Rig, assert_fails, out_qpc};
use super::{create_qp, modify_qp};
use crate::firmware::qp::*;
use crate::memory::PAGE_SIZE;
use crate::objects::QpAttrs;
use crate::table::Table;

#[test]
fn create_rc_qp_takes_pd_cqs_uar_and_starts_in_reset() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    assert!(qpn >= 2, "QPN 0 and 1 are the special QPs");
    let (pd, uar, cqn, dbr) = (r.host.pd, r.host.uar, r.cq.cqn, r.host.iova(r.dbr_off));
    let qp = r.qp(qpn);
    assert_eq!(qp.st, service_type::RC);
    assert_eq!(qp.state, QpState::Rst);
    assert_eq!((qp.pd, qp.uar, qp.cqn_snd, qp.cqn_rcv), (pd, uar, cqn, cqn));
    assert_eq!(qp.user_index, 0x77);
    assert_eq!(qp.dbr, dbr);
    assert_eq!(qp.geom.log_rq_size, 4);
    assert_eq!(qp.geom.rq_stride, 64);
    assert_eq!(qp.geom.log_sq_size, Some(6));
    assert_eq!(qp.wq.iova(0), Some(r.host.iova(r.wq_off)));
    assert_eq!(qp.wq.iova(4096), Some(r.host.iova(r.wq_off + PAGE_SIZE)));
    assert_eq!(qp.attrs, QpAttrs::default());
    assert_eq!((qp.sq_ci, qp.rq_ci), (0, 0));
    assert_eq!(qp.qpc.len(), 0xe8);
    assert_eq!(r.host.dev.objs.pds.get(pd).unwrap().users, 1);
    assert_eq!(r.host.dev.objs.uars.get(uar).unwrap().users, 1);
    // Used as send and receive CQ: two uses.
    assert_eq!(r.host.dev.comp.cqs.get(cqn).unwrap().users, 2);
    // A second QP gets the next number.
    let second = r.qp_of(service_type::RC);
    assert_eq!(second, qpn + 1);
}

#[test]
fn create_ud_qp_and_separate_cqs() {
    let mut r = Rig::new();
    let cq2 = r.cq2.cqn;
    let input = r.create_in(service_type::UD, 2, &|i| {
        i.qpc_mut().set_cqn_rcv(cq2).unwrap();
    });
    let qpn = r.create(&input).unwrap();
    let qp = r.qp(qpn);
    assert_eq!(qp.st, service_type::UD);
    assert_eq!(qp.cqn_rcv, cq2);
    assert_eq!(r.host.dev.comp.cqs.get(r.cq.cqn).unwrap().users, 1);
    assert_eq!(r.host.dev.comp.cqs.get(cq2).unwrap().users, 1);
}

#[test]
fn create_refuses_every_service_type_but_rc_ud_and_uc() {
    let mut r = Rig::new();
    for st in 0..=255u8 {
        let input = r.create_in(st, 2, &|_| {});
        let result = r.create(&input);
        if st == service_type::RC || st == service_type::UD || st == service_type::UC {
            assert!(result.is_ok(), "st {st}");
        } else {
            assert_fails(result, CmdStatus::BAD_PARAM_ERR, SYND_BAD_SERVICE_TYPE);
        }
    }
    assert_eq!(r.host.dev.objs.qps.len(), 3);
}

#[test]
fn create_refuses_uc_on_a_device_without_uc() {
    let mut r = Rig::new();
    r.host.dev.profile.caps.uc = false;
    let input = r.create_in(service_type::UC, 2, &|_| {});
    assert_fails(
        r.create(&input),
        CmdStatus::BAD_PARAM_ERR,
        SYND_BAD_SERVICE_TYPE,
    );
}

#[test]
fn create_refuses_ud_on_a_device_without_ud() {
    let mut r = Rig::new();
    r.host.dev.profile.caps.ud = false;
    let input = r.create_in(service_type::UD, 2, &|_| {});
    assert_fails(
        r.create(&input),
        CmdStatus::BAD_PARAM_ERR,
        SYND_BAD_SERVICE_TYPE,
    );
}

#[test]
fn create_naming_a_missing_object_is_bad_res_and_takes_nothing() {
    let mut r = Rig::new();
    let edits: [(super::Edit<'_>, u32); 4] = [
        (&|i| drop(i.qpc_mut().set_pd(999)), SYND_NO_PD),
        (&|i| drop(i.qpc_mut().set_cqn_snd(999)), SYND_NO_CQ_SND),
        (&|i| drop(i.qpc_mut().set_cqn_rcv(999)), SYND_NO_CQ_RCV),
        (&|i| drop(i.qpc_mut().set_uar_page(999)), SYND_NO_UAR),
    ];
    for (edit, synd) in edits {
        let input = r.create_in(service_type::RC, 2, edit);
        assert_fails(r.create(&input), CmdStatus::BAD_RES_ERR, synd);
    }
    assert!(r.host.dev.objs.qps.is_empty());
    assert_eq!(r.host.dev.objs.pds.get(r.host.pd).unwrap().users, 0);
    assert_eq!(r.host.dev.comp.cqs.get(r.cq.cqn).unwrap().users, 0);
    assert_eq!(r.host.dev.objs.uars.get(r.host.uar).unwrap().users, 0);
}

#[test]
fn create_refuses_queue_sizes_above_the_capabilities() {
    let mut r = Rig::new();
    // The 4-bit fields cannot exceed the default cap (15), so a smaller device.
    r.host.dev.profile.caps.log_max_qp_sz = 10;
    assert_eq!(r.host.dev.profile.caps.max_wqe_sz_rq, 512);
    let big_rq = r.create_in(service_type::RC, 2, &|i| {
        i.qpc_mut().set_log_rq_size(11).unwrap();
    });
    assert_fails(r.create(&big_rq), CmdStatus::LIM_ERR, SYND_RQ_SIZE);
    let big_sq = r.create_in(service_type::RC, 2, &|i| {
        i.qpc_mut().set_log_sq_size(11).unwrap();
    });
    assert_fails(r.create(&big_sq), CmdStatus::LIM_ERR, SYND_SQ_SIZE);
    // 16 << 6 = 1024-byte receive WQEs, above max_wqe_sz_rq.
    let wide = r.create_in(service_type::RC, 8, &|i| {
        i.qpc_mut().set_log_rq_stride(6).unwrap();
    });
    assert_fails(r.create(&wide), CmdStatus::LIM_ERR, SYND_RQ_STRIDE);
    // 512-byte receive WQEs are the limit: 16 * 512 + 64 * 64 = 12 KiB, three pages.
    let widest = r.create_in(service_type::RC, 3, &|i| {
        i.qpc_mut().set_log_rq_stride(5).unwrap();
    });
    let qpn = r.create(&widest).unwrap();
    assert_eq!(r.qp(qpn).geom.rq_stride, 512);
}

#[test]
fn create_refuses_page_lists_that_are_unaligned_or_too_short() {
    let mut r = Rig::new();
    let base = r.host.iova(r.wq_off);
    // 1 KiB of RQ + 4 KiB of SQ need two 4 KiB pages.
    let short = r.create_in(service_type::RC, 1, &|_| {});
    assert_fails(r.create(&short), CmdStatus::BAD_PARAM_ERR, SYND_PAS);
    let unaligned = r.create_in(service_type::RC, 2, &|i| {
        i.set_pas(0, base + 0x800).unwrap();
    });
    assert_fails(r.create(&unaligned), CmdStatus::BAD_PARAM_ERR, SYND_PAS);
    // Starting 63 * 64 bytes into the first page pushes the end into a third page.
    let offset = r.create_in(service_type::RC, 2, &|i| {
        i.qpc_mut().set_page_offset(63).unwrap();
    });
    assert_fails(r.create(&offset), CmdStatus::BAD_PARAM_ERR, SYND_PAS);
    // 2^31-byte pages are refused whatever the list.
    let huge = r.create_in(service_type::RC, 2, &|i| {
        i.qpc_mut().set_log_page_size(20).unwrap();
    });
    assert_fails(r.create(&huge), CmdStatus::BAD_PARAM_ERR, SYND_PAS);
    assert!(r.host.dev.objs.qps.is_empty());
}

#[test]
fn create_honours_page_offset() {
    let mut r = Rig::new();
    let input = r.create_in(service_type::RC, 3, &|i| {
        i.qpc_mut().set_page_offset(2).unwrap();
    });
    let qpn = r.create(&input).unwrap();
    assert_eq!(r.qp(qpn).wq.iova(0), Some(r.host.iova(r.wq_off) + 128));
}

#[test]
fn create_refuses_umems_chosen_qpns_and_other_rq_types() {
    let mut r = Rig::new();
    let edits: [(super::Edit<'_>, u32); 4] = [
        (&|i| drop(i.set_wq_umem_valid(1)), SYND_UMEM),
        (&|i| drop(i.qpc_mut().set_dbr_umem_valid(1)), SYND_UMEM),
        (&|i| drop(i.set_input_qpn(0x100)), SYND_INPUT_QPN),
        (&|i| drop(i.qpc_mut().set_rq_type(3)), SYND_RQ_TYPE),
    ];
    for (edit, synd) in edits {
        let input = r.create_in(service_type::RC, 2, edit);
        assert_fails(r.create(&input), CmdStatus::BAD_PARAM_ERR, synd);
    }
}

#[test]
fn create_fails_with_no_res_when_every_qpn_is_taken() {
    let mut r = Rig::new();
    r.host.dev.objs.qps = Table::new(2, 1, 1 << 24);
    r.qp_of(service_type::RC);
    let input = r.create_in(service_type::RC, 2, &|_| {});
    assert_fails(r.create(&input), CmdStatus::LIM_ERR, SYND_QP_TABLE_FULL);
    // Nothing was taken for the refused QP.
    assert_eq!(r.host.dev.objs.pds.get(r.host.pd).unwrap().users, 1);
}

#[test]
fn a_qp_without_send_queue_has_only_the_rq_in_its_buffer() {
    let mut r = Rig::new();
    // 1 KiB of RQ fits one page once the SQ is gone.
    let input = r.create_in(service_type::RC, 1, &|i| {
        i.qpc_mut().set_no_sq(1).unwrap();
    });
    let qpn = r.create(&input).unwrap();
    assert_eq!(r.qp(qpn).geom.log_sq_size, None);
    assert_eq!(r.qp(qpn).geom.sq_bytes(), 0);
}

#[test]
fn destroy_gives_back_pd_cq_and_uar_and_forgets_the_qpn() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    r.destroy(qpn).unwrap();
    assert!(r.host.dev.objs.qps.get(qpn).is_none());
    assert_eq!(r.host.dev.objs.pds.get(r.host.pd).unwrap().users, 0);
    assert_eq!(r.host.dev.comp.cqs.get(r.cq.cqn).unwrap().users, 0);
    assert_eq!(r.host.dev.objs.uars.get(r.host.uar).unwrap().users, 0);
    assert_fails(r.destroy(qpn), CmdStatus::BAD_RES_ERR, SYND_NO_QP);
    // The number is free again.
    assert_eq!(r.qp_of(service_type::RC), qpn);
}

#[test]
fn commands_on_an_unknown_qpn_are_bad_res() {
    let mut r = Rig::new();
    assert_fails(r.destroy(5), CmdStatus::BAD_RES_ERR, SYND_NO_QP);
    assert_fails(r.query_with_room(5, 0), CmdStatus::BAD_RES_ERR, SYND_NO_QP);
    for op in bypass_hw::cmd::qp::MODIFY_OPCODES {
        assert_fails(
            r.modify(op, 5, 0, |_| {}),
            CmdStatus::BAD_RES_ERR,
            SYND_NO_QP,
        );
    }
}

#[test]
fn short_inputs_and_outputs_are_refused_not_trusted() {
    let mut r = Rig::new();
    let mut out = vec![0u8; 0x10];
    assert_fails(
        create_qp(&mut r.host.dev, &[0u8; 0x10], &mut out),
        CmdStatus::BAD_INP_LEN_ERR,
        SYND_INPUT_LEN,
    );
    let input = r.create_in(service_type::RC, 2, &|_| {});
    assert_fails(
        create_qp(&mut r.host.dev, &input, &mut [0u8; 4]),
        CmdStatus::BAD_OUTP_LEN_ERR,
        SYND_OUTPUT_LEN,
    );
    assert_fails(
        modify_qp(&mut r.host.dev, Opcode::RST2INIT_QP, &[0u8; 0x10], &mut out),
        CmdStatus::BAD_INP_LEN_ERR,
        SYND_INPUT_LEN,
    );
}

#[test]
fn query_returns_the_created_context_with_live_counters_and_the_pages() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    {
        let qp = r.host.dev.objs.qps.get_mut(qpn).unwrap();
        qp.sq_ci = 0x1_0005; // 16 bits on the wire
        qp.rq_ci = 7;
    }
    let out = r.query(qpn);
    let q = out_qpc(&out);
    assert_eq!(q.state(), QpState::Rst as u32);
    assert_eq!(q.st(), u32::from(service_type::RC));
    assert_eq!(q.pd(), r.host.pd);
    assert_eq!(q.cqn_snd(), r.cq.cqn);
    assert_eq!(q.uar_page(), r.host.uar);
    assert_eq!(q.log_rq_size(), 4);
    assert_eq!(q.log_sq_size(), 6);
    assert_eq!(q.user_index(), 0x77);
    assert_eq!(q.dbr_addr(), r.host.iova(r.dbr_off));
    assert_eq!(q.hw_sq_wqebb_counter(), 5);
    assert_eq!(q.hw_rq_counter(), 7);
    let view = QueryQpOut::new_checked(&out[..]).unwrap();
    assert_eq!(view.pas(0).unwrap(), r.host.iova(r.wq_off));
    assert_eq!(view.pas(1).unwrap(), r.host.iova(r.wq_off + PAGE_SIZE));
    assert_eq!(view.pas(2).unwrap(), 0, "only the QP's own pages");
    // Without room for the list, the context alone.
    let bare = r.query_with_room(qpn, 0).unwrap();
    assert_eq!(out_qpc(&bare).pd(), r.host.pd);
}

#[test]
fn create_input_fields_stay_within_the_layout() {
    // The rig's input is exactly the layout plus the list (the kernel's inlen).
    let r = Rig::new();
    let input = r.create_in(service_type::RC, 2, &|_| {});
    assert_eq!(input.len(), CreateQpIn::<()>::LEN + 16);
}
