//! Tests of the RMP (SRQ) command handlers and of CREATE_QP / DESTROY_RMP with a QP attached,
//! called directly on a [`Host`] device with inputs built through the `bypass_hw` layouts.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{CreateQpIn, CreateQpOut, create_qp_in_len, pm_state, service_type};
use bypass_hw::cmd::rmp::{
    CreateRmpIn, CreateRmpOut, DestroyRmpIn, ModifyRmpIn, QueryRmpIn, QueryRmpOut,
    create_rmp_in_len, rq_type, state,
};
use bypass_hw::syndrome::CmdStatus;

use super::qp::{SYND_NO_SRQ, SYND_RQ_TYPE};
use super::syndromes as s;
use super::{CmdError, CmdResult, qp, srq};
use crate::memory::PAGE_SIZE;
use crate::testkit::Host;

type Edit<'a> = &'a dyn Fn(&mut CreateRmpIn<&mut [u8]>);

struct Rig {
    host: Host,
    buf: usize,
    dbr: usize,
}

impl Rig {
    fn new() -> Self {
        let mut host = Host::new(1);
        let buf = host.alloc(4 * PAGE_SIZE);
        let dbr = host.alloc(64);
        Self { host, buf, dbr }
    }

    /// A CREATE_RMP input as `create_rmp_cmd` builds it: 64 WQEs of 64 bytes, one page.
    fn create_in(&self, edit: Edit<'_>) -> Vec<u8> {
        let mut b = vec![0u8; create_rmp_in_len(1)];
        let mut i = CreateRmpIn::new_checked(&mut b[..]).unwrap();
        i.set_opcode(u32::from(Opcode::CREATE_RMP.0)).unwrap();
        i.set_pas(0, self.host.iova(self.buf)).unwrap();
        i.ctx_mut().set_state(u32::from(state::RDY)).unwrap();
        let mut ctx = i.ctx_mut();
        let mut wq = ctx.wq_mut();
        wq.set_log_wq_stride(6).unwrap();
        wq.set_log_wq_sz(6).unwrap();
        wq.set_pd(self.host.pd).unwrap();
        wq.set_dbr_addr(self.host.iova(self.dbr)).unwrap();
        edit(&mut i);
        b
    }

    fn create(&mut self, input: &[u8]) -> Result<u32, CmdError> {
        let mut out = vec![0u8; CreateRmpOut::<()>::LEN];
        let c = self.host.dev.hca();
        srq::create_rmp(c.objs, c.profile, input, &mut out)?;
        Ok(CreateRmpOut::new_checked(&out[..]).unwrap().rmpn())
    }

    fn modify(&mut self, rmpn: u32, lwm: u32, select: bool) -> CmdResult {
        let mut b = vec![0u8; ModifyRmpIn::<()>::LEN];
        let mut i = ModifyRmpIn::new_checked(&mut b[..]).unwrap();
        i.set_rmp_state(u32::from(state::RDY)).unwrap();
        i.set_rmpn(rmpn).unwrap();
        i.bitmask_mut().set_lwm(u32::from(select)).unwrap();
        i.ctx_mut().set_state(u32::from(state::RDY)).unwrap();
        i.ctx_mut().wq_mut().set_lwm(lwm).unwrap();
        let c = self.host.dev.hca();
        srq::modify_rmp(c.objs, &b, &mut [0u8; 16])
    }

    fn query(&mut self, rmpn: u32) -> Result<Vec<u8>, CmdError> {
        let mut b = vec![0u8; QueryRmpIn::<()>::LEN];
        QueryRmpIn::new_checked(&mut b[..])
            .unwrap()
            .set_rmpn(rmpn)
            .unwrap();
        let mut out = vec![0u8; QueryRmpOut::<()>::LEN + 8];
        let c = self.host.dev.hca();
        srq::query_rmp(c.objs, &b, &mut out)?;
        Ok(out)
    }

    fn destroy(&mut self, rmpn: u32) -> CmdResult {
        let mut b = vec![0u8; DestroyRmpIn::<()>::LEN];
        DestroyRmpIn::new_checked(&mut b[..])
            .unwrap()
            .set_rmpn(rmpn)
            .unwrap();
        let c = self.host.dev.hca();
        srq::destroy_rmp(c.objs, &b, &mut [0u8; 16])
    }

    /// CREATE_QP (RC, 64 WQEBBs of SQ at offset 0) with `rq_type` and `srqn`.
    fn create_qp(&mut self, rqt: u8, srqn: u32) -> Result<u32, CmdError> {
        let cq = self.host.cq(4);
        let wq = self.host.alloc(4 * PAGE_SIZE);
        let dbr = self.host.alloc(64);
        let mut b = vec![0u8; create_qp_in_len(1)];
        let mut i = CreateQpIn::new_checked(&mut b[..]).unwrap();
        i.set_opcode(u32::from(Opcode::CREATE_QP.0)).unwrap();
        i.set_pas(0, self.host.iova(wq)).unwrap();
        let mut q = i.qpc_mut();
        q.set_st(u32::from(service_type::RC)).unwrap();
        q.set_pd(self.host.pd).unwrap();
        q.set_pm_state(u32::from(pm_state::MIGRATED)).unwrap();
        q.set_log_sq_size(6).unwrap();
        q.set_uar_page(self.host.uar).unwrap();
        q.set_cqn_snd(cq.cqn).unwrap();
        q.set_cqn_rcv(cq.cqn).unwrap();
        q.set_rq_type(u32::from(rqt)).unwrap();
        q.set_srqn_rmpn_xrqn(srqn).unwrap();
        q.set_dbr_addr(self.host.iova(dbr)).unwrap();
        let mut out = vec![0u8; CreateQpOut::<()>::LEN];
        let c = self.host.dev.hca();
        qp::create_qp(c.objs, c.comp, c.profile, &b, &mut out)?;
        Ok(CreateQpOut::new_checked(&out[..]).unwrap().qpn())
    }

    fn destroy_qp(&mut self, qpn: u32) -> CmdResult {
        let mut b = vec![0u8; 16];
        b[9..12].copy_from_slice(&qpn.to_be_bytes()[1..]);
        let c = self.host.dev.hca();
        qp::destroy_qp(c.objs, c.comp, c.dp, &b, &mut [0u8; 16])
    }
}

fn fails<T: std::fmt::Debug>(r: Result<T, CmdError>, status: CmdStatus, synd: u32) {
    match r {
        Err(e) => assert_eq!(
            (e.status, e.syndrome),
            (status, synd),
            "{:?}",
            s::name(e.syndrome)
        ),
        Ok(v) => panic!("expected {status} / {:?}, got {v:?}", s::name(synd)),
    }
}

#[test]
fn create_query_arm_destroy() {
    let mut r = Rig::new();
    let input = r.create_in(&|_| {});
    let n = r.create(&input).unwrap();
    assert!(n >= 1);
    assert_eq!(r.host.dev.objs.pds.get(r.host.pd).unwrap().users, 1);
    r.modify(n, 8, true).unwrap();
    let o = r.query(n).unwrap();
    let q = QueryRmpOut::new_checked(&o[..]).unwrap();
    assert_eq!(q.rmp_context().state(), u32::from(state::RDY));
    assert_eq!(q.rmp_context().wq().lwm(), 8);
    assert_eq!(q.rmp_context().wq().log_wq_sz(), 6);
    assert_eq!(q.pas(0).unwrap(), r.host.iova(r.buf));
    // Without `rmp_bitmask.lwm` nothing changes.
    r.modify(n, 3, false).unwrap();
    let o = r.query(n).unwrap();
    assert_eq!(
        QueryRmpOut::new_checked(&o[..])
            .unwrap()
            .rmp_context()
            .wq()
            .lwm(),
        8
    );
    r.destroy(n).unwrap();
    assert_eq!(r.host.dev.objs.pds.get(r.host.pd).unwrap().users, 0);
    fails(r.destroy(n), CmdStatus::BAD_RES_ERR, s::SRQ_UNKNOWN);
    fails(r.query(n), CmdStatus::BAD_RES_ERR, s::SRQ_UNKNOWN);
    fails(r.modify(n, 1, true), CmdStatus::BAD_RES_ERR, s::SRQ_UNKNOWN);
}

#[test]
fn create_refuses_bad_input_with_the_status_of_each_check() {
    let mut r = Rig::new();
    let cases: [(Edit<'_>, CmdStatus, u32); 10] = [
        (
            &|i| drop(i.set_uid(5)),
            CmdStatus::BAD_PARAM_ERR,
            s::BAD_UID,
        ),
        (
            &|i| drop(i.ctx_mut().set_state(0)),
            CmdStatus::BAD_PARAM_ERR,
            s::SRQ_BAD_STATE,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_wq_type(1)),
            CmdStatus::BAD_PARAM_ERR,
            s::SRQ_UNSUPPORTED,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_wq_umem_valid(1)),
            CmdStatus::BAD_PARAM_ERR,
            s::SRQ_UNSUPPORTED,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_pd(0x777)),
            CmdStatus::BAD_RES_ERR,
            s::SRQ_PD_UNKNOWN,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_log_wq_sz(16)),
            CmdStatus::LIM_ERR,
            s::SRQ_TOO_LARGE,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_log_wq_stride(4)),
            CmdStatus::LIM_ERR,
            s::SRQ_BAD_STRIDE,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_log_wq_stride(10)),
            CmdStatus::LIM_ERR,
            s::SRQ_BAD_STRIDE,
        ),
        (
            &|i| drop(i.ctx_mut().wq_mut().set_lwm(64)),
            CmdStatus::BAD_PARAM_ERR,
            s::SRQ_BAD_LIMIT,
        ),
        (
            &|i| drop(i.set_pas(0, 0x1234)),
            CmdStatus::BAD_PARAM_ERR,
            s::SRQ_PAS_UNALIGNED,
        ),
    ];
    for (edit, status, synd) in cases {
        let input = r.create_in(edit);
        fails(r.create(&input), status, synd);
    }
    // A page list shorter than the buffer (64 x 256 bytes need 4 pages, one is given).
    let input = r.create_in(&|i| drop(i.ctx_mut().wq_mut().set_log_wq_stride(8)));
    fails(
        r.create(&input),
        CmdStatus::BAD_INP_LEN_ERR,
        s::LIST_TRUNCATED,
    );
    // Nothing was taken by the refused commands.
    assert!(r.host.dev.objs.srqs.is_empty());
    assert_eq!(r.host.dev.objs.pds.get(r.host.pd).unwrap().users, 0);
}

#[test]
fn modify_refuses_a_limit_at_or_above_the_size() {
    let mut r = Rig::new();
    let input = r.create_in(&|_| {});
    let n = r.create(&input).unwrap();
    fails(
        r.modify(n, 64, true),
        CmdStatus::BAD_PARAM_ERR,
        s::SRQ_BAD_LIMIT,
    );
    r.modify(n, 63, true).unwrap();
}

#[test]
fn the_srq_table_fills_at_log_max_srq() {
    let mut r = Rig::new();
    r.host.dev.objs.srqs = crate::table::Table::new(1, 2, 1 << 24);
    let input = r.create_in(&|_| {});
    r.create(&input).unwrap();
    r.create(&input).unwrap();
    fails(r.create(&input), CmdStatus::LIM_ERR, s::SRQ_EXHAUSTED);
}

#[test]
fn qps_attach_and_destroy_is_busy_until_they_are_gone() {
    let mut r = Rig::new();
    let input = r.create_in(&|_| {});
    let n = r.create(&input).unwrap();
    fails(
        r.create_qp(rq_type::SRQ, n + 1),
        CmdStatus::BAD_RES_ERR,
        SYND_NO_SRQ,
    );
    fails(
        r.create_qp(rq_type::CRQ, n),
        CmdStatus::BAD_PARAM_ERR,
        SYND_RQ_TYPE,
    );
    let a = r.create_qp(rq_type::SRQ, n).unwrap();
    let b = r.create_qp(rq_type::SRQ, n).unwrap();
    assert_eq!(r.host.dev.objs.qps.get(a).unwrap().srqn, Some(n));
    // The SRQ QP's buffer is the SQ alone.
    assert_eq!(r.host.dev.objs.qps.get(a).unwrap().geom.rq_bytes(), 0);
    assert_eq!(r.host.dev.objs.srqs.get(n).unwrap().users, 2);
    fails(r.destroy(n), CmdStatus::RES_BUSY, s::SRQ_IN_USE);
    r.destroy_qp(a).unwrap();
    fails(r.destroy(n), CmdStatus::RES_BUSY, s::SRQ_IN_USE);
    r.destroy_qp(b).unwrap();
    r.destroy(n).unwrap();
}
