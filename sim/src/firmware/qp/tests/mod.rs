//! Tests of the QP command handlers, called directly on a [`Host`] device (objects other than
//! QPs made by the test kit), with inputs built through the `bypass_hw` layouts.
//!
//! Owns: the [`Rig`] these tests share. Must not: reach the handlers through anything but
//! their four entry points.

mod create;
mod drain;
mod modify;
mod walk;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{
    CreateQpIn, CreateQpOut, DestroyQpIn, Init2InitQpIn, Init2RtrQpIn, Qp2ErrIn, Qp2RstIn, QpState,
    Qpc, QueryQpIn, QueryQpOut, Rst2InitQpIn, Rtr2RtsQpIn, Rts2RtsQpIn, Rts2SqdQpIn, Sqd2RtsQpIn,
    Sqd2SqdQpIn, Sqerr2RtsQpIn, create_qp_in_len, modify_qp_in_len, pm_state, service_type,
    ts_format,
};
use bypass_hw::syndrome::CmdStatus;

use crate::device::Device;
use crate::firmware::{CmdError, CmdResult};
use crate::memory::PAGE_SIZE;
use crate::objects::Qp;
use crate::testkit::{Host, HostCq};

/// CREATE_QP on `dev`, with the parts the device lends a command.
pub(super) fn create_qp(dev: &mut Device, input: &[u8], out: &mut [u8]) -> CmdResult {
    let c = dev.hca();
    super::create_qp(c.objs, c.comp, c.profile, input, out)
}

/// A modify command on `dev`.
pub(super) fn modify_qp(dev: &mut Device, op: Opcode, input: &[u8], _out: &mut [u8]) -> CmdResult {
    let mut c = dev.hca();
    super::modify_qp(c.objs, c.comp, c.profile, &mut c.io, c.dp, op, input)
}

/// QUERY_QP on `dev`.
pub(super) fn query_qp(dev: &mut Device, input: &[u8], out: &mut [u8]) -> CmdResult {
    let c = dev.hca();
    super::query_qp(c.objs, input, out)
}

/// DESTROY_QP on `dev`.
pub(super) fn destroy_qp(dev: &mut Device, input: &[u8], out: &mut [u8]) -> CmdResult {
    let c = dev.hca();
    super::destroy_qp(c.objs, c.comp, c.dp, input, out)
}

/// The MAC the tests put in `rmac`.
pub(super) const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
/// The remote QP the RC tests connect to.
pub(super) const PEER_QPN: u32 = 0x00_0123;
/// The remote PSN (INIT2RTR `next_rcv_psn`).
pub(super) const RQ_PSN: u32 = 0x00ab_cdef;
/// Our first PSN (RTR2RTS `next_send_psn`).
pub(super) const SQ_PSN: u32 = 0x0012_3456;

/// A device with a PD, UAR, EQ, two CQs and room for a QP's buffer and doorbell record.
pub(super) struct Rig {
    pub host: Host,
    pub cq: HostCq,
    pub cq2: HostCq,
    pub wq_off: usize,
    pub dbr_off: usize,
}

/// What a test changes in a CREATE_QP input before it is sent.
pub(super) type Edit<'a> = &'a dyn Fn(&mut CreateQpIn<&mut [u8]>);

impl Rig {
    pub fn new() -> Self {
        let mut host = Host::new(1);
        let cq = host.cq(4);
        let cq2 = host.cq(4);
        let wq_off = host.alloc(8 * PAGE_SIZE);
        let dbr_off = host.alloc(64);
        Self {
            host,
            cq,
            cq2,
            wq_off,
            dbr_off,
        }
    }

    /// A CREATE_QP input as rdma-core's DEVX test builds it (RC or UD): 16 RQ WQEs of 64
    /// bytes, 64 SQ WQEBBs, one CQ for both, `pages` 4 KiB pages of the buffer, then `edit`.
    pub fn create_in(&self, st: u8, pages: usize, edit: Edit<'_>) -> Vec<u8> {
        let mut buf = vec![0u8; create_qp_in_len(pages)];
        let mut inp = CreateQpIn::new_checked(&mut buf[..]).unwrap();
        inp.set_opcode(u32::from(Opcode::CREATE_QP.0)).unwrap();
        for i in 0..pages {
            inp.set_pas(i, self.host.iova(self.wq_off + i * PAGE_SIZE))
                .unwrap();
        }
        inp.qpc_mut()
            .set_st(u32::from(st))
            .unwrap()
            .set_pd(self.host.pd)
            .unwrap()
            .set_pm_state(u32::from(pm_state::MIGRATED))
            .unwrap()
            .set_log_rq_size(4)
            .unwrap()
            .set_log_rq_stride(2)
            .unwrap()
            .set_log_sq_size(6)
            .unwrap()
            .set_ts_format(u32::from(ts_format::DEFAULT))
            .unwrap()
            .set_uar_page(self.host.uar)
            .unwrap()
            .set_cqn_snd(self.cq.cqn)
            .unwrap()
            .set_cqn_rcv(self.cq.cqn)
            .unwrap()
            .set_user_index(0x77)
            .unwrap()
            .set_dbr_addr(self.host.iova(self.dbr_off))
            .unwrap();
        edit(&mut inp);
        buf
    }

    /// Runs CREATE_QP; the new QPN.
    pub fn create(&mut self, input: &[u8]) -> Result<u32, CmdError> {
        let mut out = vec![0u8; CreateQpOut::<()>::LEN];
        create_qp(&mut self.host.dev, input, &mut out)?;
        Ok(CreateQpOut::new_checked(&out[..]).unwrap().qpn())
    }

    /// A QP of service type `st` created with the default input.
    pub fn qp_of(&mut self, st: u8) -> u32 {
        let input = self.create_in(st, 2, &|_| {});
        self.create(&input).expect("create")
    }

    /// Runs modify `op` on `qpn` with `opt_param_mask = opt` and a `qpc` filled by `fill`.
    pub fn modify(
        &mut self,
        op: Opcode,
        qpn: u32,
        opt: u32,
        fill: impl FnOnce(&mut Qpc<&mut [u8]>),
    ) -> Result<(), CmdError> {
        let len = modify_qp_in_len(op).expect("a modify opcode");
        let mut buf = vec![0u8; len];
        macro_rules! long {
            ($ty:ident) => {{
                let mut v = $ty::new_checked(&mut buf[..]).unwrap();
                v.set_opcode(u32::from(op.0)).unwrap();
                v.set_qpn(qpn).unwrap();
                v.set_opt_param_mask(opt).unwrap();
                fill(&mut v.qpc_mut());
            }};
        }
        macro_rules! short {
            ($ty:ident) => {{
                let mut v = $ty::new_checked(&mut buf[..]).unwrap();
                v.set_opcode(u32::from(op.0)).unwrap();
                v.set_qpn(qpn).unwrap();
            }};
        }
        match op {
            Opcode::RST2INIT_QP => long!(Rst2InitQpIn),
            Opcode::INIT2INIT_QP => long!(Init2InitQpIn),
            Opcode::INIT2RTR_QP => long!(Init2RtrQpIn),
            Opcode::RTR2RTS_QP => long!(Rtr2RtsQpIn),
            Opcode::RTS2RTS_QP => long!(Rts2RtsQpIn),
            Opcode::SQERR2RTS_QP => long!(Sqerr2RtsQpIn),
            Opcode::SQD_RTS_QP => long!(Sqd2RtsQpIn),
            Opcode::RTS2SQD_QP => long!(Rts2SqdQpIn),
            Opcode::SQD2SQD_QP => long!(Sqd2SqdQpIn),
            Opcode::QP_2ERR => short!(Qp2ErrIn),
            Opcode::QP_2RST => short!(Qp2RstIn),
            _ => unreachable!(),
        }
        let mut out = vec![0u8; 0x10];
        modify_qp(&mut self.host.dev, op, &buf, &mut out)
    }

    /// Runs `op` with the fields rdma-core's DEVX test gives it (RC) or a UD QP needs.
    pub fn step(&mut self, op: Opcode, qpn: u32) -> Result<(), CmdError> {
        let st = self.qp(qpn).st;
        let peer = crate::profile::Profile::with_id(2).ports[0].gids[0];
        self.modify(op, qpn, 0, |q| good_fields(op, st, peer, q))
    }

    /// RST → INIT → RTR → RTS with [`Rig::step`].
    pub fn walk_to_rts(&mut self, qpn: u32) {
        for op in [Opcode::RST2INIT_QP, Opcode::INIT2RTR_QP, Opcode::RTR2RTS_QP] {
            self.step(op, qpn)
                .unwrap_or_else(|e| panic!("{op:?}: {e:?}"));
        }
    }

    /// Runs QUERY_QP with an output of `pas_room` page entries; the output.
    pub fn query_with_room(&mut self, qpn: u32, pas_room: usize) -> Result<Vec<u8>, CmdError> {
        let mut inp = vec![0u8; QueryQpIn::<()>::LEN];
        QueryQpIn::new_checked(&mut inp[..])
            .unwrap()
            .set_opcode(u32::from(Opcode::QUERY_QP.0))
            .unwrap()
            .set_qpn(qpn)
            .unwrap();
        let mut out = vec![0u8; QueryQpOut::<()>::LEN + 8 * pas_room];
        query_qp(&mut self.host.dev, &inp, &mut out)?;
        Ok(out)
    }

    /// QUERY_QP with room for four pages.
    pub fn query(&mut self, qpn: u32) -> Vec<u8> {
        self.query_with_room(qpn, 4).expect("query")
    }

    /// Runs DESTROY_QP.
    pub fn destroy(&mut self, qpn: u32) -> Result<(), CmdError> {
        let mut inp = vec![0u8; DestroyQpIn::<()>::LEN];
        DestroyQpIn::new_checked(&mut inp[..])
            .unwrap()
            .set_opcode(u32::from(Opcode::DESTROY_QP.0))
            .unwrap()
            .set_qpn(qpn)
            .unwrap();
        let mut out = vec![0u8; 0x10];
        destroy_qp(&mut self.host.dev, &inp, &mut out)
    }

    /// The QP in the table.
    pub fn qp(&self, qpn: u32) -> &Qp {
        self.host.dev.objs.qps.get(qpn).expect("qp")
    }

    /// Puts `qpn` straight into `state` (as if earlier transitions had run), port 1.
    pub fn force(&mut self, qpn: u32, state: QpState) {
        let qp = self.host.dev.objs.qps.get_mut(qpn).expect("qp");
        qp.state = state;
        qp.attrs.path.port = 1;
        qp.headers = None;
    }
}

/// The fields a transition needs, as rdma-core's `Mlx5DevxRcResources.to_rts` sets them (RC)
/// or a UD QP needs them.
pub(super) fn good_fields(op: Opcode, st: u8, peer_gid: [u8; 16], q: &mut Qpc<&mut [u8]>) {
    let rc = st == service_type::RC;
    // UC takes RC's connection fields (not its reliability ones).
    let connected = rc || st == service_type::UC;
    match op {
        Opcode::RST2INIT_QP => {
            if connected {
                q.set_rre(1).unwrap().set_rwe(1).unwrap();
            } else {
                q.set_q_key(0x1111_1111).unwrap();
            }
            q.primary_address_path_mut().set_vhca_port_num(1).unwrap();
        }
        Opcode::INIT2RTR_QP if connected => {
            // PATH_MTU = IBV_MTU_1024, log_msg_max = 20, MIN_RNR_TIMER = 12.
            q.set_mtu(3)
                .unwrap()
                .set_log_msg_max(20)
                .unwrap()
                .set_remote_qpn(PEER_QPN)
                .unwrap()
                .set_min_rnr_nak(12)
                .unwrap()
                .set_next_rcv_psn(RQ_PSN)
                .unwrap();
            let mut p = q.primary_address_path_mut();
            p.set_vhca_port_num(1).unwrap();
            p.set_rgid_rip(&peer_gid).unwrap();
            p.set_rmac(PEER_MAC).unwrap();
            p.set_src_addr_index(0).unwrap();
            p.set_hop_limit(64).unwrap();
            p.set_udp_sport(0xdcba).unwrap();
        }
        Opcode::RTR2RTS_QP => {
            // RETRY_CNT = RNR_RETRY = 7, TIMEOUT = 14; log_sra_max within the cap (rdma-core's
            // 20 does not fit the field).
            q.set_next_send_psn(SQ_PSN).unwrap();
            if rc {
                q.set_retry_count(7)
                    .unwrap()
                    .set_rnr_retry(7)
                    .unwrap()
                    .set_log_sra_max(3)
                    .unwrap();
                let mut p = q.primary_address_path_mut();
                p.set_vhca_port_num(1).unwrap();
                p.set_ack_timeout(14).unwrap();
            }
        }
        _ => {}
    }
}

/// Asserts `r` failed with `status` and `syndrome`.
#[track_caller]
pub(super) fn assert_fails<T: std::fmt::Debug>(
    r: Result<T, CmdError>,
    status: CmdStatus,
    syndrome: u32,
) {
    match r {
        Err(e) => assert_eq!(
            (e.status, e.syndrome),
            (status, syndrome),
            "status {:?} syndrome {:#x}",
            e.status.name(),
            e.syndrome
        ),
        Ok(v) => panic!("expected {:?}/{syndrome:#x}, got Ok({v:?})", status.name()),
    }
}

/// The `qpc` of a QUERY_QP output.
pub(super) fn out_qpc(out: &[u8]) -> Qpc<Vec<u8>> {
    let view = QueryQpOut::new_checked(out).unwrap();
    Qpc::new_checked(view.qpc().as_bytes().to_vec()).unwrap()
}
