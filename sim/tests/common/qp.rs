//! QPs and the data path, as a raw driver does them: CREATE_QP and the modify walk with real
//! commands (as rdma-core's `tests/mlx5_base.py` `Mlx5DevxRcResources` does), WQEs written
//! into the SQ ring, the doorbell record then the UAR doorbell (8-byte or BlueFlame), receive
//! WQEs with the RQ doorbell record, CQ polling with the owner-bit rule, and CQ arming.
//!
//! Owns: nothing of the sim. Must not: reach into the sim's internals.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{
    CreateQpIn, CreateQpOut, Init2RtrQpIn, PathMtu, QueryQpIn, QueryQpOut, Rst2InitQpIn,
    Rtr2RtsQpIn, create_qp_in_len, pm_state, service_type,
};
use bypass_hw::cqe::sw_owns;
use bypass_hw::doorbell::{cq_arm_doorbell_bytes, cq_arm_value};
use bypass_hw::wqe::{CtrlParams, CtrlSeg, DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, WqeOpcode};
use bypass_sim::MmioError;
use bypass_sim::memory::PAGE_SIZE;
use zerocopy::IntoBytes;

use super::{CmdFailure, HostCq, Raw, header};

/// A QP as the driver sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostQp {
    /// QP number.
    pub qpn: u32,
    /// Work queue buffer offset (RQ first, then SQ).
    pub wq_off: usize,
    /// RQ WQEs.
    pub rq_wqes: u32,
    /// RQ stride (bytes).
    pub rq_stride: usize,
    /// SQ WQEBBs.
    pub sq_wqebbs: u32,
    /// Doorbell record offset (dword 0: RQ, dword 1: SQ).
    pub dbr_off: usize,
    /// SQ producer (WQEBBs posted).
    pub sq_pi: u32,
    /// RQ producer.
    pub rq_pi: u32,
    /// BlueFlame half in use (rdma-core toggles `bf->offset` after each doorbell).
    pub bf_half: u32,
}

/// The UD Q_Key the helpers use.
pub const QKEY: u32 = 0x1111_1111;

impl Raw {
    /// CREATE_QP of service type `st` (RC/UD) in `pd` with 64-byte RQ WQEs.
    pub fn create_qp(
        &mut self,
        st: u8,
        pd: u32,
        scq: &HostCq,
        rcq: &HostCq,
        log_sq: u8,
        log_rq: u8,
    ) -> Result<HostQp, CmdFailure> {
        let rq_stride = 64usize;
        let len = (rq_stride << log_rq) + (64usize << log_sq);
        let wq_off = self.alloc(len.next_multiple_of(PAGE_SIZE), PAGE_SIZE);
        let dbr_off = self.alloc(64, 64);
        let npages = len.div_ceil(PAGE_SIZE);
        let mut i = header(Opcode::CREATE_QP, 0, create_qp_in_len(npages));
        {
            let mut c = CreateQpIn::new_checked(&mut i[..]).unwrap();
            for k in 0..npages {
                c.set_pas(k, self.iova(wq_off + k * PAGE_SIZE)).unwrap();
            }
            let mut q = c.qpc_mut();
            q.set_st(st.into()).unwrap();
            q.set_pm_state(pm_state::MIGRATED.into()).unwrap();
            q.set_pd(pd).unwrap();
            q.set_log_rq_size(log_rq.into()).unwrap();
            q.set_log_rq_stride(2).unwrap(); // 16 << 2 = 64 bytes
            q.set_log_sq_size(log_sq.into()).unwrap();
            q.set_uar_page(self.uar).unwrap();
            q.set_cqn_snd(scq.cqn).unwrap();
            q.set_cqn_rcv(rcq.cqn).unwrap();
            q.set_log_page_size(0).unwrap();
            q.set_dbr_addr(self.iova(dbr_off)).unwrap();
        }
        let o = self.cmd(&i, CreateQpOut::LEN)?;
        Ok(HostQp {
            qpn: CreateQpOut::new_checked(&o[..]).unwrap().qpn(),
            wq_off,
            rq_wqes: 1 << log_rq,
            rq_stride,
            sq_wqebbs: 1 << log_sq,
            dbr_off,
            sq_pi: 0,
            rq_pi: 0,
            bf_half: 0,
        })
    }

    /// RST2INIT: port 1; RC with remote read/write/atomic enabled, UD with [`QKEY`].
    pub fn rst2init(&mut self, qp: &HostQp, st: u8) -> Result<(), CmdFailure> {
        let mut i = header(Opcode::RST2INIT_QP, 0, Rst2InitQpIn::LEN);
        {
            let mut m = Rst2InitQpIn::new_checked(&mut i[..]).unwrap();
            m.set_qpn(qp.qpn).unwrap();
            let mut q = m.qpc_mut();
            if st == service_type::RC {
                q.set_rre(1)
                    .unwrap()
                    .set_rwe(1)
                    .unwrap()
                    .set_rae(1)
                    .unwrap();
            } else {
                q.set_q_key(QKEY).unwrap();
            }
            q.primary_address_path_mut().set_vhca_port_num(1).unwrap();
        }
        self.cmd(&i, 16).map(|_| ())
    }

    /// INIT2RTR: RC toward `remote_qpn` at `rgid`, expecting `rq_psn`, at `mtu`; UD needs none
    /// of that.
    pub fn init2rtr(
        &mut self,
        qp: &HostQp,
        st: u8,
        remote_qpn: u32,
        rgid: [u8; 16],
        rq_psn: u32,
        mtu: PathMtu,
    ) -> Result<(), CmdFailure> {
        let mut i = header(Opcode::INIT2RTR_QP, 0, Init2RtrQpIn::LEN);
        {
            let mut m = Init2RtrQpIn::new_checked(&mut i[..]).unwrap();
            m.set_qpn(qp.qpn).unwrap();
            let mut q = m.qpc_mut();
            if st == service_type::RC {
                q.set_mtu(mtu.code().into()).unwrap();
                q.set_log_msg_max(20).unwrap();
                q.set_remote_qpn(remote_qpn).unwrap();
                q.set_next_rcv_psn(rq_psn).unwrap();
                q.set_min_rnr_nak(1).unwrap();
                q.set_log_rra_max(3).unwrap();
                let mut p = q.primary_address_path_mut();
                p.set_rgid_rip(&rgid).unwrap();
                p.set_hop_limit(64).unwrap();
                p.set_vhca_port_num(1).unwrap();
            }
        }
        self.cmd(&i, 16).map(|_| ())
    }

    /// RTR2RTS sending from `sq_psn`, retries 7, RNR retries [`Raw::rnr_retry`] (7:
    /// infinite), ACK timeout 14.
    pub fn rtr2rts(&mut self, qp: &HostQp, st: u8, sq_psn: u32) -> Result<(), CmdFailure> {
        let mut i = header(Opcode::RTR2RTS_QP, 0, Rtr2RtsQpIn::LEN);
        {
            let mut m = Rtr2RtsQpIn::new_checked(&mut i[..]).unwrap();
            m.set_qpn(qp.qpn).unwrap();
            let mut q = m.qpc_mut();
            q.set_next_send_psn(sq_psn).unwrap();
            if st == service_type::RC {
                q.set_retry_count(7)
                    .unwrap()
                    .set_rnr_retry(self.rnr_retry.into())
                    .unwrap()
                    .set_log_sra_max(3)
                    .unwrap();
                q.primary_address_path_mut().set_ack_timeout(14).unwrap();
            }
        }
        self.cmd(&i, 16).map(|_| ())
    }

    /// The whole walk to RTS.
    pub fn walk_to_rts(
        &mut self,
        qp: &HostQp,
        st: u8,
        remote_qpn: u32,
        rgid: [u8; 16],
        psns: (u32, u32),
        mtu: PathMtu,
    ) {
        self.rst2init(qp, st).expect("RST2INIT");
        self.init2rtr(qp, st, remote_qpn, rgid, psns.1, mtu)
            .expect("INIT2RTR");
        self.rtr2rts(qp, st, psns.0).expect("RTR2RTS");
    }

    /// QUERY_QP output.
    pub fn query_qp(&mut self, qpn: u32) -> Vec<u8> {
        let mut i = header(Opcode::QUERY_QP, 0, QueryQpIn::LEN);
        QueryQpIn::new_checked(&mut i[..])
            .unwrap()
            .set_qpn(qpn)
            .unwrap();
        self.ok(&i, QueryQpOut::LEN)
    }

    /// The port's GID (index 0).
    pub fn gid(&self) -> [u8; 16] {
        self.dev.profile().ports[0].gids[0]
    }

    /// Writes `wqe` (ctrl segment first, whole WQEBBs) at the SQ producer and updates the
    /// doorbell record (rdma-core `post_send_db`: WQE → barrier → DBR).
    fn write_wqe(&mut self, qp: &mut HostQp, wqe: &[u8]) {
        let sq_off = qp.wq_off + qp.rq_wqes as usize * qp.rq_stride;
        let nbb = wqe.len().div_ceil(64) as u32;
        for k in 0..nbb {
            let idx = (qp.sq_pi + k) % qp.sq_wqebbs;
            let chunk = &wqe[k as usize * 64..wqe.len().min((k as usize + 1) * 64)];
            self.write(sq_off + idx as usize * 64, chunk);
        }
        qp.sq_pi += nbb;
        self.write(qp.dbr_off + 4, &(qp.sq_pi & 0xffff).to_be_bytes());
    }

    /// BlueFlame register of bfreg 1 (bfreg 0 never does BlueFlame), current half.
    fn bf_reg(&self, qp: &HostQp) -> u64 {
        let half = 1u64 << (self.dev.profile().caps.log_bf_reg_size - 1);
        u64::from(self.uar) * 4096 + 0x800 + 2 * half + u64::from(qp.bf_half) * half
    }

    /// Posts `wqe` and rings the 8-byte doorbell (the ctrl segment's first 8 bytes).
    pub fn post_send(&mut self, qp: &mut HostQp, wqe: &[u8]) {
        self.try_post_send(qp, wqe).expect("doorbell");
    }

    /// [`Raw::post_send`], returning the device's refusal of the doorbell write, if any.
    pub fn try_post_send(&mut self, qp: &mut HostQp, wqe: &[u8]) -> Result<(), MmioError> {
        self.write_wqe(qp, wqe);
        let reg = self.bf_reg(qp);
        qp.bf_half ^= 1;
        self.dev.mmio_write(reg, &wqe[..8])
    }

    /// Posts `wqe` and copies it whole through the BlueFlame register in 64-byte bursts
    /// (rdma-core `mlx5_bf_copy`). The ring copy is written too, as rdma-core does.
    pub fn post_send_bf(&mut self, qp: &mut HostQp, wqe: &[u8]) {
        self.try_post_send_bf(qp, wqe).expect("BlueFlame burst");
    }

    /// [`Raw::post_send_bf`], returning the device's refusal of a burst (e.g. a DS count that
    /// does not fit the BlueFlame buffer), if any.
    pub fn try_post_send_bf(&mut self, qp: &mut HostQp, wqe: &[u8]) -> Result<(), MmioError> {
        self.write_wqe(qp, wqe);
        let reg = self.bf_reg(qp);
        qp.bf_half ^= 1;
        for (k, chunk) in wqe.chunks(64).enumerate() {
            let mut burst = [0u8; 64];
            burst[..chunk.len()].copy_from_slice(chunk);
            self.dev.mmio_write(reg + 64 * k as u64, &burst)?;
        }
        Ok(())
    }

    /// Posts a receive WQE with `sges` (lkey, va, len) and updates the RQ doorbell record.
    pub fn post_recv(&mut self, qp: &mut HostQp, sges: &[(u32, u64, u32)]) {
        let base = qp.wq_off + (qp.rq_pi % qp.rq_wqes) as usize * qp.rq_stride;
        for (k, &(lkey, va, len)) in sges.iter().enumerate() {
            self.write(base + k * 16, DataSeg::new(len, lkey, va).as_bytes());
        }
        if sges.len() * 16 < qp.rq_stride {
            self.write(base + sges.len() * 16, DataSeg::end_of_list().as_bytes());
        }
        qp.rq_pi += 1;
        self.write(qp.dbr_off, &(qp.rq_pi & 0xffff).to_be_bytes());
    }

    /// Polls one CQE (rdma-core `get_sw_cqe`), then writes the consumer index to the doorbell
    /// record (`update_cons_index`).
    pub fn poll_cq(&mut self, cq: &mut HostCq) -> Option<[u8; 64]> {
        let idx = (cq.ci & (cq.nent - 1)) as usize;
        let e = self.read(cq.off + idx * cq.cqe_size + cq.cqe_size - 64, 64);
        if !sw_owns(e[63], cq.ci, cq.nent) {
            return None;
        }
        cq.ci = cq.ci.wrapping_add(1);
        self.write(cq.dbr_off, &(cq.ci & 0x00ff_ffff).to_be_bytes());
        let mut out = [0u8; 64];
        out.copy_from_slice(&e);
        Some(out)
    }

    /// Arms `cq` for the next completion (rdma-core `mlx5_arm_cq`: DBR arm word, then the
    /// 64-bit doorbell at UAR + 0x20). A refused doorbell panics (the harness never sends one).
    pub fn arm_cq(&mut self, cq: &HostCq, sn: u32, solicited: bool) {
        self.write(
            cq.dbr_off + 4,
            &cq_arm_value(sn, solicited, cq.ci).to_be_bytes(),
        );
        let off = u64::from(self.uar) * 4096 + 0x20;
        let bytes = cq_arm_doorbell_bytes(sn, solicited, cq.ci, cq.cqn);
        self.dev.mmio_write(off, &bytes).expect("CQ arm doorbell");
    }
}

/// A signaled WQE: ctrl for `opcode` at `idx` of `qpn` followed by `segs` (whole 16-byte
/// segments), padded to whole WQEBBs.
pub fn wqe(opcode: WqeOpcode, idx: u32, qpn: u32, imm: u32, segs: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = segs.concat();
    let ds = (16 + body.len()).div_ceil(16) as u8;
    let ctrl = CtrlSeg::new(&CtrlParams {
        pi: idx as u16,
        opcode,
        opmod: 0,
        qpn,
        fm_ce_se: MLX5_WQE_CTRL_CQ_UPDATE,
        ds,
        signature: 0,
        imm,
    })
    .expect("ctrl");
    let mut v = ctrl.as_bytes().to_vec();
    v.extend_from_slice(&body);
    v.resize(v.len().div_ceil(64) * 64, 0);
    v
}
