//! Queue pairs: the WQ buffer (RQ then SQ) and doorbell record, CREATE_QP, every state
//! transition on its own, QUERY_QP, DESTROY_QP on drop; and the post forms of the data path:
//! `post_send`, `post_send_list`, `post_write`, [`WriteBatch`] (each writes its WQEs with
//! `wqe.rs` and rings `doorbell.rs`'s one sequence), `post_recv` and `post_recv_list`.
//!
//! Follows rdma-core `providers/mlx5/qp.c`: `mlx5_post_send` (state checks, then
//! `_mlx5_post_send` and one `post_send_db` per list), the extended post API
//! (`ibv_wr_start` … `ibv_wr_complete`: `mlx5_send_wr_start`, `mlx5_send_wr_rdma_write`,
//! `mlx5_send_wr_complete`), `mlx5_post_recv` (data segments → `udma_to_device_barrier` → RQ
//! doorbell record, no MMIO). QP commands follow rdma-core `tests/mlx5_base.py` (`qp_attr.rs`).
//!
//! Owns: [`Qp`], [`WriteBatch`]. Must not: decode completions (`poll.rs`), build WQE bytes
//! (`wqe.rs`) or write the doorbell sequence itself (`doorbell.rs`); allocate, lock, make
//! syscalls or format in the post forms.

use std::sync::Arc;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{CreateQpIn, CreateQpOut, QpState, QueryQpOut};
use bypass_hw::cmd::rmp::rq_type;

use crate::barrier::udma_to_device_barrier;
use crate::cq::{Cq, CqShared};
use crate::dma::DmaBuf;
use crate::doorbell::SendDoorbell;
use crate::error::{DriverError, Result};
use crate::pd::Pd;
pub use crate::post::PostListError;
use crate::post::{
    NOT_READY_FIX, PostError, PostRefused, RecvWr, Refusal, RemoteAddr, SendFlags, SendWr, Sge,
};
use crate::srq::Srq;

use crate::qp_attr::{
    CreateQpParams, Init2Rtr, QpCaps, QpGeometry, QpInfo, QpType, Rst2Init, Rtr2Rts, Rts2Rts,
    create_qp_input, destroy_qp_input, init2rtr_input, query_qp_input, rst2init_input,
    rtr2rts_input, rts2rts_input, to_err_input, to_rst_input,
};
use crate::qp_states::{SqAttrs, SqTransition, sq_transition_input};
use crate::uar::{Bfreg, shut_up_bf};
use crate::wq::{RingPtr, RqRing, SqRing, WqShared};
use crate::wqe::{
    SendLimits, Stop, WriteTemplate, Written, write_any, write_common, write_rdma_write,
    write_rdma_write_reserved, write_recv, write_send,
};

/// What a QP keeps alive, destroyed in reverse order of creation: DESTROY_QP first (in
/// `Drop`), then its memory, its bfreg (and the UAR page, if it was the last on it), its CQs
/// and its PD (field order).
#[derive(Debug)]
struct QpResources {
    qpn: u32,
    _wq: DmaBuf,
    _dbr: crate::dbrec::Dbrec,
    _bfreg: crate::bfregs::QpDoorbell,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    pd: Arc<Pd>,
}

impl Drop for QpResources {
    fn drop(&mut self) {
        let hca = self.pd.hca();
        match destroy_qp_input(self.qpn) {
            Ok(i) => {
                if let Err(e) = hca.cmdq().exec(&i, 16) {
                    tracing::error!(qpn = self.qpn, error = %e, "DESTROY_QP failed; the QP leaks");
                }
            }
            Err(e) => tracing::error!(qpn = self.qpn, error = %e, "DESTROY_QP input"),
        }
        // The device writes no more CQEs for this QPN: drop those still unpolled, before the
        // firmware can hand the number to a new QP on these CQs (rdma-core `mlx5_destroy_qp`:
        // `__mlx5_cq_clean` of the receive CQ, then of the send CQ if it is another one).
        clean_cqs(&self.send_cq, &self.recv_cq, self.qpn);
        self.send_cq.table().detach(self.qpn);
        self.recv_cq.table().detach(self.qpn);
    }
}

/// Removes QP `qpn`'s unpolled CQEs from its receive CQ and (if another) its send CQ.
fn clean_cqs(send_cq: &CqShared, recv_cq: &CqShared, qpn: u32) {
    recv_cq.clean(qpn);
    if !core::ptr::eq(send_cq, recv_cq) {
        send_cq.clean(qpn);
    }
}

/// A queue pair. Posting takes `&mut self`: one poster at a time, no lock.
#[derive(Debug)]
pub struct Qp {
    // Ring views into `res`'s buffers: declared first so they are dropped first.
    sq: SqRing,
    rq: RqRing,
    /// The send doorbell: the record's send word (offset 4 of `dbr`'s buffer), the register.
    db: SendDoorbell,
    dbr: RingPtr,
    shared: Arc<WqShared>,
    limits: SendLimits,
    state: QpState,
    /// `state` is RTS, SQD or ERR: sends may be posted (kept with `state`).
    can_send: bool,
    /// `can_send` on an RC QP: `post_send` may try the fast path (one test for both).
    rc_send: bool,
    /// `rc_send` with `max_send_sge >= 1`: [`Qp::post_write`] may post (one test for all).
    write_ok: bool,
    /// [`Qp::post_write`]'s ctrl words, precomputed.
    write_tpl: WriteTemplate,
    qp_type: QpType,
    caps: QpCaps,
    res: QpResources,
    /// The SRQ it receives from (`None`: its own RQ).
    srqn: Option<u32>,
}

impl Qp {
    /// CREATE_QP of `qp_type` in `pd`, completing sends to `send_cq` and receives to
    /// `recv_cq` (may be the same CQ), sized for `caps`. The QP starts in RST.
    ///
    /// BlueFlame: unless `BYPASS_SHUT_UP_BF` is set (read here, once) or the device has no
    /// BlueFlame registers, the QP gets a bfreg from the device's pool (`bfregs.rs`, as
    /// rdma-core's `mlx5_get_qp_uar`): one of its own while the low-latency ones last, else the
    /// least used shared one; otherwise it rings bfreg 0 of the driver's UAR page with 8-byte
    /// doorbells. [`Qp::bfreg`]`().class()` tells which.
    pub fn create(
        pd: &Arc<Pd>,
        send_cq: &Cq,
        recv_cq: &Cq,
        qp_type: QpType,
        caps: &QpCaps,
    ) -> Result<Self> {
        Self::create_with(pd, send_cq, recv_cq, qp_type, caps, None)
    }

    /// CREATE_QP as [`Qp::create`], taking its receives from `srq` (`qpc.rq_type` SRQ,
    /// `srqn_rmpn_xrqn`; kernel `qp.c` `create_qp_common`): the QP has no RQ of its own (the
    /// SQ starts its buffer, `caps.max_recv_*` are ignored), its receive completions report
    /// the SRQ's `wr_id`s, and [`Qp::post_recv`] is refused. The SRQ cannot be destroyed while
    /// the QP exists.
    pub fn create_on_srq(
        pd: &Arc<Pd>,
        send_cq: &Cq,
        recv_cq: &Cq,
        qp_type: QpType,
        caps: &QpCaps,
        srq: &Srq,
    ) -> Result<Self> {
        Self::create_with(pd, send_cq, recv_cq, qp_type, caps, Some(srq))
    }

    fn create_with(
        pd: &Arc<Pd>,
        send_cq: &Cq,
        recv_cq: &Cq,
        qp_type: QpType,
        caps: &QpCaps,
        srq: Option<&Srq>,
    ) -> Result<Self> {
        let hca = pd.hca().clone();
        let dcaps = hca.caps();
        let mut g = QpGeometry::new(qp_type, caps, dcaps.log_max_qp_sz)?;
        if srq.is_some() {
            // The kernel's `set_rq_size` for a QP with an SRQ: no RQ (`log_rq_size` 0).
            g.log_rq_size = 0;
            g.log_rq_stride = 0;
        }
        // A QP on an SRQ has its SQ at offset 0; the driver keeps a 64-byte RQ ring after it
        // that nothing is ever posted to (so the QP's receive bookkeeping stays uniform).
        let (rq_bytes, rq_ring_off, rq_ring_len) = match srq {
            None => (g.rq_bytes(), 0, g.rq_bytes()),
            Some(_) => (0, g.sq_bytes(), 64),
        };
        let sq_bytes = g.sq_bytes();
        let wq = hca.alloc_dma(rq_bytes + sq_bytes + if srq.is_some() { 64 } else { 0 })?;
        let dbr = hca.dbrecs().alloc(hca.dma())?;
        let bf_reg_size = dcaps.bf_reg_size();
        let want_bf = dcaps.bf && bf_reg_size >= 128 && !shut_up_bf();
        let door = hca.bfregs().get(&hca, want_bf)?;
        let uar_page = door.bfreg.uar_index();
        let bfreg = door.bfreg.clone();
        let mmio = door.mmio.clone();
        let pages: Vec<u64> = (0..wq
            .len()
            .div_ceil(4096)
            .min((rq_bytes + sq_bytes).div_ceil(4096)))
            .map(|k| wq.iova_at(k * 4096))
            .collect::<Result<_>>()?;
        let params = CreateQpParams {
            qp_type,
            pd: pd.pdn(),
            send_cqn: send_cq.cqn(),
            recv_cqn: recv_cq.cqn(),
            uar_page,
            dbr_iova: dbr.iova(),
            user_index: 0,
        };
        let mut i = create_qp_input(&params, &g, &pages)?;
        if let Some(s) = srq {
            let mut c =
                CreateQpIn::new_checked(&mut i[..]).map_err(|source| DriverError::BuildInput {
                    what: "CREATE_QP",
                    source,
                })?;
            let mut q = c.qpc_mut();
            q.set_rq_type(rq_type::SRQ.into())
                .and_then(|q| q.set_srqn_rmpn_xrqn(s.srqn()))
                .map_err(|source| DriverError::BuildInput {
                    what: "CREATE_QP",
                    source,
                })?;
        }
        let o = hca.exec_create(&i, CreateQpOut::LEN, crate::limits::Resource::Qp)?;
        let qpn = CreateQpOut::new_checked(&o[..])
            .map_err(|source| DriverError::BadOutput {
                op: Opcode::CREATE_QP,
                source,
            })?
            .qpn();
        tracing::debug!(
            qpn,
            ?qp_type,
            blueflame = bfreg.buf_size() != 0,
            "CREATE_QP"
        );
        let shared = WqShared::new(qpn, 1 << g.log_sq_size, 1 << g.log_rq_size);
        let shared = Arc::new(match srq {
            Some(s) => shared.on_srq(s.shared().clone()),
            None => shared,
        });
        // SAFETY: `wq` holds `rq_bytes + sq_bytes` bytes (RQ first) and `dbr` at least 64; both
        // live in `res`, which the `Qp` owns and drops after these views (field order).
        let rings = unsafe {
            (
                RingPtr::new(wq.as_ptr().add(rq_ring_off), rq_ring_len),
                RingPtr::new(wq.as_ptr().add(rq_bytes), sq_bytes),
                RingPtr::new(dbr.as_ptr(), 64),
            )
        };
        let res = QpResources {
            qpn,
            _wq: wq,
            _dbr: dbr,
            _bfreg: door,
            send_cq: send_cq.shared().clone(),
            recv_cq: recv_cq.shared().clone(),
            pd: pd.clone(),
        };
        let (Some(rq_ring), Some(sq_ring), Some(dbr_ring)) = rings else {
            return Err(DriverError::Unsupported {
                what: "work queues whose sizes are not powers of two",
                fix: "this is a driver bug: report it",
            });
        };
        // The BlueFlame copy reads the SQ as `[u64; 8]` blocks (`doorbell.rs`); the RQ before
        // it is a multiple of 16 bytes, so this holds for every geometry `QpGeometry` builds.
        if !sq_ring.base().as_ptr().cast::<[u64; 8]>().is_aligned() || sq_bytes % 64 != 0 {
            return Err(DriverError::Unsupported {
                what: "a send queue that does not start on an 8-byte boundary",
                fix: "this is a driver bug: report it",
            });
        }
        let Some(sq_dbr) = dbr_ring.word32(4) else {
            return Err(DriverError::Unsupported {
                what: "a doorbell record that is not 4-byte aligned",
                fix: "this is a driver bug: report it",
            });
        };
        send_cq.shared().table().attach(shared.clone());
        recv_cq.shared().table().attach(shared.clone());
        let limits = SendLimits::new(
            qpn,
            qp_type == QpType::Ud,
            caps.max_send_sge as usize,
            g.max_inline,
            caps.sq_sig_all,
        );
        let limits = if qp_type == QpType::Uc {
            limits.uc()
        } else {
            limits
        };
        Ok(Self {
            sq: SqRing::new(sq_ring),
            rq: RqRing::new(rq_ring, 16 << g.log_rq_stride),
            db: SendDoorbell::new(sq_dbr, bfreg, mmio),
            dbr: dbr_ring,
            limits,
            write_tpl: WriteTemplate::new(&limits),
            shared,
            state: QpState::Rst,
            can_send: false,
            rc_send: false,
            write_ok: false,
            qp_type,
            caps: *caps,
            res,
            srqn: srq.map(Srq::srqn),
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.res.qpn
    }

    /// The SRQ it receives from, if it was created on one.
    pub fn srqn(&self) -> Option<u32> {
        self.srqn
    }

    /// RC, UD or UC.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The caps it was created with.
    pub fn caps(&self) -> &QpCaps {
        &self.caps
    }

    /// The state after the last transition this handle made (see [`Qp::query`] for the
    /// device's view, which also changes on errors).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The BlueFlame register this QP rings.
    pub fn bfreg(&self) -> &Bfreg {
        self.db.bfreg()
    }

    /// WQEBBs in the SQ.
    pub fn sq_wqebbs(&self) -> u32 {
        self.sq.wqebbs
    }

    /// The SQ producer counter (`cur_post`, WQEBBs).
    pub fn sq_cur_post(&self) -> u32 {
        self.sq.cur_post
    }

    /// Receive WQEs the RQ holds (a power of two, `1 << log_rq_size`).
    pub fn rq_wqes(&self) -> u32 {
        self.rq.wqes
    }

    /// Receives posted since the QP was created or last reset (rdma-core `rq.head`),
    /// wrapping: the index, modulo [`Qp::rq_wqes`], that the next receive takes, and that its
    /// completion's `wqe_index` names.
    pub fn rq_head(&self) -> u32 {
        self.rq.head
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.res.pd
    }

    fn modify(&mut self, op: &'static str, i: Result<Vec<u8>>, to: QpState) -> Result<()> {
        let i = i?;
        self.res.pd.hca().cmdq().exec(&i, 16)?;
        tracing::debug!(qpn = self.res.qpn, op, to = to.name(), "modify QP");
        self.state = to;
        // libibverbs posts from RTS on (IBV_QPS_RTS, SQD, SQE, ERR): the device holds a WQE
        // posted in SQD until SQD→RTS and flushes one posted in SQE or ERR.
        self.can_send = matches!(
            to,
            QpState::Rts | QpState::Err | QpState::Sqd | QpState::Sqer
        );
        self.rc_send = self.can_send && self.qp_type == QpType::Rc;
        // A UC WRITE is RC's WQE (ctrl, raddr, data): `post_write` takes both.
        self.write_ok = (self.rc_send || (self.can_send && self.qp_type == QpType::Uc))
            && self.limits.max_sge >= 1;
        if !self.write_ok {
            // `post_write`'s one-test fast path relies on it: no credits without `write_ok`.
            self.sq.forget_credits();
        }
        Ok(())
    }

    /// RST → INIT.
    pub fn rst2init(&mut self, a: &Rst2Init) -> Result<()> {
        let i = rst2init_input(self.res.qpn, self.qp_type, a);
        self.modify("RST2INIT", i, QpState::Init)
    }

    /// INIT → RTR.
    pub fn init2rtr(&mut self, a: &Init2Rtr) -> Result<()> {
        let i = init2rtr_input(self.res.qpn, self.qp_type, a);
        self.modify("INIT2RTR", i, QpState::Rtr)
    }

    /// RTR → RTS.
    pub fn rtr2rts(&mut self, a: &Rtr2Rts) -> Result<()> {
        let i = rtr2rts_input(self.res.qpn, self.qp_type, a);
        self.modify("RTR2RTS", i, QpState::Rts)
    }

    /// RTS → RTS (optional parameters only).
    pub fn rts2rts(&mut self, a: &Rts2Rts) -> Result<()> {
        let i = rts2rts_input(self.res.qpn, self.qp_type, a);
        self.modify("RTS2RTS", i, QpState::Rts)
    }

    /// RTS → SQD: the device finishes the messages it started, starts no other, and raises
    /// SQ_DRAINED on the async EQ when none is left ([`crate::eq::AsyncEvent::drained_qpn`]).
    /// Sends posted meanwhile wait for [`Qp::sqd2rts`].
    ///
    /// Errors: [`DriverError::BadQpTransition`] unless the QP is in RTS; a device without the
    /// drain command (see `bypass_hw::cmd::Opcode::RTS2SQD_QP`) answers with a command error.
    pub fn rts2sqd(&mut self) -> Result<()> {
        self.sq_transition(SqTransition::Rts2Sqd, &SqAttrs::default())
    }

    /// SQD → SQD: changes `a` on a drained QP (the device refuses it while still draining).
    pub fn sqd2sqd(&mut self, a: &SqAttrs) -> Result<()> {
        self.sq_transition(SqTransition::Sqd2Sqd, a)
    }

    /// SQD → RTS: sending resumes, from the first WQE the drain held back.
    pub fn sqd2rts(&mut self, a: &SqAttrs) -> Result<()> {
        self.sq_transition(SqTransition::Sqd2Rts, a)
    }

    /// SQE → RTS: a UD or UC QP that a send error moved to SQE (its error CQE, then
    /// WR_FLUSH_ERR for the rest of the SQ, while receives went on) sends again.
    pub fn sqe2rts(&mut self, a: &SqAttrs) -> Result<()> {
        self.sq_transition(SqTransition::Sqe2Rts, a)
    }

    fn sq_transition(&mut self, tr: SqTransition, a: &SqAttrs) -> Result<()> {
        let i = sq_transition_input(self.res.qpn, self.qp_type, self.state, tr, a);
        self.modify(tr.name(), i, tr.to())
    }

    /// Any state → ERR: outstanding work requests complete with WR_FLUSH_ERR.
    pub fn to_error(&mut self) -> Result<()> {
        let i = to_err_input(self.res.qpn);
        self.modify("2ERR", i, QpState::Err)
    }

    /// Any state → RST. Completions of this QP still unpolled in its CQs are removed (they
    /// would otherwise be taken for WQEs posted after the reset), and the rings start over
    /// (rdma-core `mlx5_modify_qp` to RESET: `mlx5_cq_clean` of both CQs,
    /// `mlx5_init_qp_indices` and a cleared doorbell record).
    pub fn reset(&mut self) -> Result<()> {
        let i = to_rst_input(self.res.qpn);
        self.modify("2RST", i, QpState::Rst)?;
        clean_cqs(&self.res.send_cq, &self.res.recv_cq, self.res.qpn);
        self.sq.reset();
        self.rq.head = 0;
        self.shared.reset();
        self.dbr.write_be32(0, 0);
        self.dbr.write_be32(4, 0);
        Ok(())
    }

    /// QUERY_QP: state, PSNs and the raw context.
    pub fn query(&self) -> Result<QpInfo> {
        let i = query_qp_input(self.res.qpn)?;
        let o = self.res.pd.hca().cmdq().exec(&i, QueryQpOut::LEN)?;
        QpInfo::parse(o)
    }

    /// The bytes of WQEBB `index` of the SQ (masked; research access, e.g. the last posted
    /// WQE is at `sq_cur_post() - its size`).
    pub fn wqe_bytes(&self, index: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        self.sq.ring.read(self.sq.offset_of(index), &mut b);
        b
    }

    /// The bytes of receive WQE `index` (masked; research access).
    pub fn recv_wqe_bytes(&self, index: u32) -> Vec<u8> {
        let mut b = vec![0u8; self.rq.stride];
        self.rq.ring.read(
            (index & (self.rq.wqes - 1)) as usize * self.rq.stride,
            &mut b,
        );
        b
    }

    #[cold]
    fn not_ready(&self) -> PostError {
        PostError::BadState {
            qpn: self.res.qpn,
            state: self.state.name(),
            fix: NOT_READY_FIX,
        }
    }

    /// Posts one send work request and rings the doorbell (BlueFlame when it fits). The
    /// common requests on an RC QP ([`crate::wqe::Common`]) are written inline; the rest, and
    /// any request on a QP that cannot send, out of line.
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the QP is reset or destroyed.
    #[inline]
    pub unsafe fn post_send(&mut self, wr: &SendWr<'_>) -> core::result::Result<(), PostError> {
        if self.rc_send {
            match write_common(&mut self.sq, &self.shared, &self.limits, wr) {
                Ok(w) => {
                    self.db.ring(&self.sq, w, true);
                    return Ok(());
                }
                Err(Stop::Refused(e)) => return Err(e),
                Err(Stop::Left(())) => {}
            }
        }
        self.post_send_general(wr)
    }

    /// [`Qp::post_send`] of a request the common shapes leave (UD, inline, atomics, a WQE
    /// across the ring's end, more SGEs), or on a QP that cannot send.
    #[inline(never)]
    fn post_send_general(&mut self, wr: &SendWr<'_>) -> core::result::Result<(), PostError> {
        if !self.can_send {
            return Err(self.not_ready());
        }
        let w = write_any(&mut self.sq, &self.shared, &self.limits, wr)?;
        self.db.ring(&self.sq, w, true);
        Ok(())
    }

    /// Posts a signaled-or-not RDMA WRITE of `local` (one SGE) to `remote` and rings the
    /// doorbell: the same WQE, bookkeeping, errors and doorbell as [`Qp::post_send`] of
    /// `SendWr { wr_id, op: SendOp::Write { remote }, payload: Payload::Sges(&[local]), flags,
    /// ud: None }`, its ctrl words precomputed per QP (rdma-core's extended post API:
    /// `ibv_wr_start` → `ibv_wr_rdma_write` → `ibv_wr_set_sge` → `ibv_wr_complete`, one WQE).
    ///
    /// Checks: the QP is RC, in RTS/SQD/ERR and takes at least one send SGE (one test; else
    /// the refusal that says which), and the SQ has a free WQEBB ([`Refusal::SqFull`]). The
    /// error is the 8-byte [`PostRefused`] (returned in a register); `PostError::from` it is
    /// the error [`Qp::post_send`] gives for the same request.
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the QP is reset or destroyed.
    #[inline]
    pub unsafe fn post_write(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> core::result::Result<(), PostRefused> {
        // One test for both checks: the SQ's credits are non-zero only on a QP that takes
        // `post_write` (`write_ok`: they are refilled only by the write paths, after that
        // check, and dropped whenever `modify` clears it), and each is a WQEBB known free.
        if !self.sq.take_credit() {
            return self.post_write_slow(wr_id, &local, remote, flags);
        }
        let w = write_rdma_write_reserved(
            &mut self.sq,
            &self.shared,
            &self.write_tpl,
            wr_id,
            &local,
            &remote,
            flags,
        );
        self.db.ring(&self.sq, w, true);
        Ok(())
    }

    /// [`Qp::post_write`] out of credits (once per `wqebbs` posts at most while completions
    /// keep up, or on a QP that cannot take it): the checks in full, out of line (a tail call,
    /// so the fast path keeps nothing live across a call).
    #[cold]
    #[inline(never)]
    fn post_write_slow(
        &mut self,
        wr_id: u64,
        local: &Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> core::result::Result<(), PostRefused> {
        // The failed `take_credit` left the count negative: settle it first.
        self.sq.forget_credits();
        if !self.write_ok {
            return Err(self.write_refusal());
        }
        let w = self.write_one(wr_id, local, &remote, flags)?;
        self.db.ring(&self.sq, w, true);
        Ok(())
    }

    /// The WQE of an RDMA WRITE of `local` to `remote` on a QP that takes
    /// [`Qp::post_write`] (`write_ok`), if the SQ has a free WQEBB ([`write_rdma_write`]);
    /// the doorbell is the caller's. [`Qp::post_write`] out of credits and
    /// [`WriteBatch::write`].
    #[inline(always)]
    fn write_one(
        &mut self,
        wr_id: u64,
        local: &Sge,
        remote: &RemoteAddr,
        flags: SendFlags,
    ) -> core::result::Result<Written, PostRefused> {
        write_rdma_write(
            &mut self.sq,
            &self.shared,
            &self.write_tpl,
            wr_id,
            local,
            remote,
            flags,
        )
        .ok_or(PostRefused::new(self.res.qpn, Refusal::SqFull))
    }

    /// Why [`Qp::post_write`] refuses on this QP (`write_ok` false: not able to send, UD, or no
    /// send SGE), in the order [`Qp::post_send`] checks them (state, then `wqe::write_wqe`: UD,
    /// SGE count), so that `PostError::from` it is the error `post_send` gives for the same
    /// WRITE. An RC or UC QP that can send and takes an SGE is `write_ok`.
    #[cold]
    #[inline(never)]
    fn write_refusal(&self) -> PostRefused {
        let why = if !self.can_send {
            Refusal::BadState(self.state)
        } else if self.limits.ud {
            Refusal::UdWrite
        } else {
            Refusal::NoSendSge
        };
        PostRefused::new(self.res.qpn, why)
    }

    /// Posts a list of send work requests with one doorbell (never BlueFlame, as rdma-core
    /// when `nreq > 1`). On a refused request, those before it are posted and rung.
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the QP is reset or destroyed.
    pub unsafe fn post_send_list(
        &mut self,
        wrs: &[SendWr<'_>],
    ) -> core::result::Result<(), PostListError> {
        if !self.can_send {
            return Err(PostListError {
                index: 0,
                error: self.not_ready(),
            });
        }
        let mut last = None;
        let mut res = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            match write_send(&mut self.sq, &self.shared, &self.limits, wr) {
                Ok(w) => last = Some((index + 1, w)),
                Err(error) => {
                    res = Err(PostListError { index, error });
                    break;
                }
            }
        }
        if let Some((n, w)) = last {
            self.db.ring(&self.sq, w, n == 1);
        }
        res
    }

    /// Posts one receive work request: data segments, barrier, RQ doorbell record (no MMIO).
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the QP is reset or destroyed.
    #[inline]
    pub unsafe fn post_recv(&mut self, wr: &RecvWr<'_>) -> core::result::Result<(), PostError> {
        if let Some(srqn) = self.srqn {
            return Err(PostError::OnSrq {
                qpn: self.res.qpn,
                srqn,
            });
        }
        if self.state == QpState::Rst {
            return Err(PostError::BadState {
                qpn: self.res.qpn,
                state: "RST",
                fix: "move it to INIT (rst2init) before posting receives",
            });
        }
        write_recv(&mut self.rq, &self.shared, self.res.qpn, wr)?;
        // The receive WQE must be in memory before the record that publishes it.
        udma_to_device_barrier();
        self.dbr.write_be32(0, self.rq.head & 0xffff);
        Ok(())
    }

    /// Posts a list of receives with one doorbell-record update.
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the QP is reset or destroyed.
    pub unsafe fn post_recv_list(
        &mut self,
        wrs: &[RecvWr<'_>],
    ) -> core::result::Result<(), PostListError> {
        let mut res = Ok(());
        let mut n = 0;
        for (index, wr) in wrs.iter().enumerate() {
            if let Some(srqn) = self.srqn {
                res = Err(PostListError {
                    index,
                    error: PostError::OnSrq {
                        qpn: self.res.qpn,
                        srqn,
                    },
                });
                break;
            }
            if self.state == QpState::Rst {
                res = Err(PostListError {
                    index,
                    error: PostError::BadState {
                        qpn: self.res.qpn,
                        state: "RST",
                        fix: "move it to INIT (rst2init) before posting receives",
                    },
                });
                break;
            }
            if let Err(error) = write_recv(&mut self.rq, &self.shared, self.res.qpn, wr) {
                res = Err(PostListError { index, error });
                break;
            }
            n += 1;
        }
        if n > 0 {
            udma_to_device_barrier();
            self.dbr.write_be32(0, self.rq.head & 0xffff);
        }
        res
    }
}

/// RDMA WRITEs written to the SQ but not yet announced: [`WriteBatch::write`] adds one,
/// [`WriteBatch::complete`] (or dropping the batch) rings one doorbell for all of them. Holds
/// the QP (`&mut`), so nothing else posts in between. A batch leaked with `mem::forget` rings
/// nothing: its WQEs stay written and counted, and the QP's next doorbell announces them.
#[derive(Debug)]
pub struct WriteBatch<'a> {
    qp: &'a mut Qp,
    /// WQEs written so far.
    n: u32,
    /// The last one's doorbell value (valid when `n > 0`; it is the WQE just before
    /// `cur_post`, as the batch holds the QP).
    last: u64,
}

impl Qp {
    /// Starts a batch of RDMA WRITEs (rdma-core `ibv_wr_start`). The QP must be able to take
    /// [`Qp::post_write`] (RC, in RTS/SQD/ERR, at least one send SGE): otherwise the error
    /// that says why, and no batch.
    #[inline]
    pub fn write_batch(&mut self) -> core::result::Result<WriteBatch<'_>, PostError> {
        if !self.write_ok {
            return Err(self.write_refusal().into());
        }
        Ok(WriteBatch {
            qp: self,
            n: 0,
            last: 0,
        })
    }
}

impl WriteBatch<'_> {
    /// Writes an RDMA WRITE of `local` to `remote` (rdma-core `ibv_wr_rdma_write` +
    /// `ibv_wr_set_sge`): the same WQE as [`Qp::post_write`], not yet visible to the NIC.
    /// [`Refusal::SqFull`] when the SQ has no free WQEBB (the WQEs written before stay in
    /// the batch; complete it, poll, and go on).
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the QP is reset or destroyed.
    #[inline]
    pub unsafe fn write(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> core::result::Result<(), PostRefused> {
        let w = self.qp.write_one(wr_id, &local, &remote, flags)?;
        self.last = w.doorbell();
        self.n += 1;
        Ok(())
    }

    /// WQEs written so far.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// The SQ position (WQEBB counter) the next WQE takes, as [`Qp::sq_cur_post`].
    #[inline]
    pub fn sq_cur_post(&self) -> u32 {
        self.qp.sq_cur_post()
    }

    /// True when nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Rings one doorbell for the batch (rdma-core `ibv_wr_complete`); nothing when it is
    /// empty. Same as dropping it.
    #[inline]
    pub fn complete(self) {}
}

impl Drop for WriteBatch<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.n > 0 {
            let q = &mut *self.qp;
            let last = Written::last_rdma_write(&q.sq, self.last);
            // rdma-core `post_send_db`: BlueFlame only for a lone WQE.
            q.db.ring(&q.sq, last, self.n == 1);
        }
    }
}
