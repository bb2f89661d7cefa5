//! Queue pairs: the RC/UC/UD builder, each state transition on its own (for research) and
//! `connect`, posting safe work requests (buffers parked until their completion is
//! reclaimed; batched WRITEs in `write_batch`), `reclaim`, and research access to WQE bytes
//! and the QP context.
//!
//! Owns: [`Qp`], [`QpBuilder`], [`QpOptions`]. Must not: write WQEs or ring doorbells (the
//! driver's `Qp` does), or release a parked buffer without a completion, a reset or the
//! QP's destruction (see the crate docs and `outstanding`).
//! Sources: the libibverbs QP state machine (`ibv_modify_qp`, `enum ibv_qp_state`; the SQD and
//! SQE edges checked by the driver against the kernel's `ib_modify_qp_is_ok`); rdma-core
//! `libibverbs/examples/rc_pingpong.c` `pp_connect_ctx` (the RTR/RTS attributes `connect` sets).

use std::fmt;
use std::sync::Arc;

use zerocopy::FromBytes;

use crate::cq::{Completion, Cq};
use crate::driver::hw::roce::mtu::TooLarge;
use crate::driver::hw::wqe::CtrlSeg;
use crate::driver::poll::QpTable;
use crate::driver::post::{self, Payload, Sge};
use crate::driver::qp::Qp as DriverQp;
use crate::driver::qp_attr::{Init2Rtr, QpInfo, QpType, Rst2Init, Rtr2Rts};
use crate::endpoint::{Gid, QpEndpoint};
use crate::error::{QpState, VerbsError};
use crate::lower;
use crate::outstanding::Outstanding;
use crate::pd::Pd;
use crate::pool::Lease;
use crate::wr::{MAX_SGES, RecvWr, SendWr, SgeList, UdDest};
use crate::write_batch::WriteBatch;

pub use crate::driver::qp_attr::{QpAccess, QpCaps};
pub use crate::driver::qp_states::SqAttrs;

/// The Q_Key UD QPs use unless told otherwise (the value rdma-core's `ibv_ud_pingpong` uses).
pub const DEFAULT_QKEY: u32 = 0x1111_1111;

/// What a QP is created with besides its PD and CQs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpOptions {
    /// Queue depths, SGEs, inline size, `sq_sig_all`.
    pub caps: QpCaps,
    /// Remote access the QP grants (RC).
    pub access: QpAccess,
    /// The port (1-based).
    pub port: u8,
    /// Q_Key (UD).
    pub qkey: u32,
    /// The first PSN it sends (None: derived from the QPN).
    pub psn: Option<u32>,
}

impl Default for QpOptions {
    fn default() -> Self {
        QpOptions {
            caps: QpCaps {
                max_send_sge: MAX_SGES as u32,
                max_recv_sge: MAX_SGES as u32,
                ..QpCaps::default()
            },
            access: QpAccess::all(),
            port: 1,
            qkey: DEFAULT_QKEY,
            psn: None,
        }
    }
}

/// Builds a QP: `QpBuilder::rc(&pd, &cq, &cq).max_send_wr(128).build()?`.
#[derive(Debug)]
pub struct QpBuilder<'a> {
    srq: Option<&'a crate::srq::Srq>,
    pd: &'a Pd,
    send_cq: &'a Cq,
    recv_cq: &'a Cq,
    qp_type: QpType,
    opts: QpOptions,
}

impl<'a> QpBuilder<'a> {
    /// A reliable-connected QP in `pd`, completing sends to `send_cq` and receives to
    /// `recv_cq` (may be the same CQ).
    pub fn rc(pd: &'a Pd, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpBuilder {
            srq: None,
            pd,
            send_cq,
            recv_cq,
            qp_type: QpType::Rc,
            opts: QpOptions::default(),
        }
    }

    /// An unreliable-connected QP: SEND, SEND with immediate, RDMA WRITE and WRITE with
    /// immediate to one peer, with no ACKs (a lost packet loses its message; nothing is
    /// retransmitted). READ and atomics are refused at post time.
    pub fn uc(pd: &'a Pd, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpBuilder {
            qp_type: QpType::Uc,
            ..Self::rc(pd, send_cq, recv_cq)
        }
    }

    /// An unreliable-datagram QP.
    pub fn ud(pd: &'a Pd, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpBuilder {
            qp_type: QpType::Ud,
            ..Self::rc(pd, send_cq, recv_cq)
        }
    }

    /// Receives come from `srq` (`ibv_qp_init_attr.srq`): the QP has no receive queue of its
    /// own ([`Qp::post_recv`] is refused), and its receive completions are reclaimed on the
    /// SRQ ([`crate::Srq::reclaim`]). The receive CQ must be the SRQ's.
    pub fn srq(mut self, srq: &'a crate::srq::Srq) -> Self {
        self.srq = Some(srq);
        self
    }

    /// All options at once.
    pub fn options(mut self, opts: QpOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Send queue depth (WQEs of the largest size).
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.opts.caps.max_send_wr = n;
        self
    }

    /// Receive queue depth.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.opts.caps.max_recv_wr = n;
        self
    }

    /// SGEs per send (at most [`MAX_SGES`] are usable through the safe API).
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.opts.caps.max_send_sge = n;
        self
    }

    /// SGEs per receive.
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.opts.caps.max_recv_sge = n;
        self
    }

    /// Inline bytes per send.
    pub fn max_inline(mut self, n: u32) -> Self {
        self.opts.caps.max_inline_data = n;
        self
    }

    /// Every send generates a completion.
    pub fn sig_all(mut self, on: bool) -> Self {
        self.opts.caps.sq_sig_all = on;
        self
    }

    /// Remote access granted (RC; default: read, write, atomic).
    pub fn access(mut self, access: QpAccess) -> Self {
        self.opts.access = access;
        self
    }

    /// The port (default 1).
    pub fn port(mut self, port: u8) -> Self {
        self.opts.port = port;
        self
    }

    /// The Q_Key (UD; default [`DEFAULT_QKEY`]).
    pub fn qkey(mut self, qkey: u32) -> Self {
        self.opts.qkey = qkey;
        self
    }

    /// The first PSN sent (default: derived from the QPN).
    pub fn psn(mut self, psn: u32) -> Self {
        self.opts.psn = Some(psn & crate::endpoint::MAX_24BIT);
        self
    }

    /// CREATE_QP. The QP starts in RESET.
    pub fn build(self) -> Result<Qp, VerbsError> {
        let inner = match self.srq {
            None => DriverQp::create(
                self.pd.driver(),
                self.send_cq.driver(),
                self.recv_cq.driver(),
                self.qp_type,
                &self.opts.caps,
            )?,
            Some(s) => {
                let core = s.core();
                if core.cq_id() != Arc::as_ptr(self.recv_cq.table()) as usize {
                    return Err(VerbsError::SrqCqMismatch {
                        srqn: s.srqn(),
                        srq_cqn: core.cqn(),
                        cqn: self.recv_cq.cqn(),
                    });
                }
                DriverQp::create_on_srq(
                    self.pd.driver(),
                    self.send_cq.driver(),
                    self.recv_cq.driver(),
                    self.qp_type,
                    &self.opts.caps,
                    core.driver(),
                )?
            }
        };
        let qpn = inner.qpn();
        let srq = self.srq.map(|s| {
            s.core().attach(qpn);
            crate::srq::Attachment {
                core: s.core().clone(),
                qpn,
            }
        });
        // A PSN that differs between QPs without a random source (ibv_rc_pingpong uses
        // lrand48); a golden-ratio hash of the QPN, 24 bits.
        let psn = self
            .opts
            .psn
            .unwrap_or((qpn.wrapping_mul(0x9e37_79b1) >> 8) & crate::endpoint::MAX_24BIT);
        Ok(Qp {
            sq: Outstanding::new(inner.sq_wqebbs()),
            // The driver's sizes: a slot per WQE its rings hold.
            rq: Outstanding::new(inner.rq_wqes()),
            inner,
            last_send: None,
            send_cq: CqLink::of(self.send_cq),
            recv_cq: CqLink::of(self.recv_cq),
            opts: self.opts,
            psn,
            pd: self.pd.clone(),
            _srq: srq,
        })
    }
}

/// What a queue of the QP keeps of its CQ: the number, and the driver's consumer state (its
/// address is the CQ's identity; its consumer count numbers completions and posts).
#[derive(Debug)]
struct CqLink {
    cqn: u32,
    table: Arc<QpTable>,
}

impl CqLink {
    fn of(cq: &Cq) -> Self {
        CqLink {
            cqn: cq.cqn(),
            table: cq.table().clone(),
        }
    }

    fn id(&self) -> usize {
        Arc::as_ptr(&self.table) as usize
    }

    /// The CQ's consumer count now: the `posted_at` of a WQE about to be posted.
    ///
    /// Contract (`Outstanding::complete` refuses `seq <= posted_at` on it): no completion
    /// numbered at most this count is one of the WQE posted now. Its own CQE is numbered by a
    /// later poll, above this count; a CQE of an earlier QP with this number, or of this QP
    /// before a reset, was numbered by a poll that the destroy's or reset's CQ clean
    /// (`QpTable::clean`, which always takes the consumer side) ordered before this post. An
    /// earlier lap of this QP's own ring is told apart by position modulo 2^16, not by this
    /// count.
    #[inline]
    fn now(&self) -> u64 {
        self.table.consumed()
    }
}

/// A queue pair. Posting and reclaiming take `&mut self` (one owner, no lock).
///
/// Dropping it runs DESTROY_QP first (the NIC stops touching its WQEs), then returns every
/// parked buffer to its pool (field order).
pub struct Qp {
    // Declared first: dropped (DESTROY_QP) before the tables below release their leases.
    inner: DriverQp,
    sq: Outstanding,
    rq: Outstanding,
    /// Start WQEBB and size of the last send WQE (research access).
    last_send: Option<(u32, u32)>,
    send_cq: CqLink,
    recv_cq: CqLink,
    opts: QpOptions,
    psn: u32,
    pd: Pd,
    /// The SRQ it receives from (kept alive, and detached after DESTROY_QP: after `inner`).
    _srq: Option<crate::srq::Attachment>,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("type", &self.inner.qp_type())
            .field("state", &self.cached_state())
            .field("sq_outstanding", &self.sq.outstanding())
            .field("rq_outstanding", &self.rq.outstanding())
            .finish()
    }
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn()
    }

    /// RC, UD or UC.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type()
    }

    /// The options it was created with.
    pub fn options(&self) -> &QpOptions {
        &self.opts
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The first PSN this QP sends.
    pub fn psn(&self) -> u32 {
        self.psn
    }

    /// The state after the last transition made through this handle (no command; see
    /// [`Qp::state`] for the device's view, which also changes on errors).
    pub fn cached_state(&self) -> QpState {
        QpState::from_hw(self.inner.state())
    }

    /// The state as the device reports it now (QUERY_QP).
    pub fn state(&self) -> Result<QpState, VerbsError> {
        Ok(QpState::from_hw(self.inner.query()?.state))
    }

    /// QUERY_QP: state, PSNs and the raw context (`QpInfo::qpc_bytes`; research access).
    pub fn query(&self) -> Result<QpInfo, VerbsError> {
        Ok(self.inner.query()?)
    }

    /// What the peer needs to connect to this QP: QPN, first PSN, the port's GID (index 0)
    /// and active MTU.
    pub fn endpoint(&self) -> Result<QpEndpoint, VerbsError> {
        let ctx = self.pd.context();
        Ok(QpEndpoint {
            qpn: self.qpn(),
            psn: self.psn,
            gid: ctx.gid(self.opts.port)?,
            lid: 0,
            mtu: ctx.active_mtu(self.opts.port)?,
        })
    }

    /// The destination of UD sends to `remote` (an address handle: RoCE v2 through the
    /// remote GID, this QP's Q_Key, source GID index 0, hop limit 64).
    ///
    /// `remote` usually comes from the peer, so it is checked where it enters
    /// ([`QpEndpoint::validate_ud_dest`]): a QPN that is 0, the multicast QPN or over 24 bits,
    /// or a GID that is no unicast address, is refused as [`VerbsError::Endpoint`].
    pub fn ud_dest(&self, remote: &QpEndpoint) -> Result<UdDest, VerbsError> {
        remote.validate_ud_dest()?;
        Ok(UdDest::roce(
            remote.qpn,
            self.opts.qkey,
            remote.gid.0,
            [0; 6],
            0,
            64,
        ))
    }

    fn transition(&mut self, to: QpState) -> Result<(), VerbsError> {
        let from = self.cached_state();
        let ok = matches!(
            (from, to),
            (QpState::Reset, QpState::Init)
                | (QpState::Init, QpState::Rtr)
                | (QpState::Rtr, QpState::Rts)
        );
        if ok {
            Ok(())
        } else {
            Err(VerbsError::BadTransition {
                qpn: self.qpn(),
                from,
                to,
            })
        }
    }

    /// RESET → INIT with the QP's options (port, access, Q_Key).
    pub fn modify_to_init(&mut self) -> Result<(), VerbsError> {
        let a = Rst2Init {
            port: self.opts.port,
            pkey_index: 0,
            access: self.opts.access,
            qkey: self.opts.qkey,
        };
        self.modify_to_init_with(&a)
    }

    /// RESET → INIT with explicit attributes (research).
    pub fn modify_to_init_with(&mut self, a: &Rst2Init) -> Result<(), VerbsError> {
        self.transition(QpState::Init)?;
        Ok(self.inner.rst2init(a)?)
    }

    /// INIT → RTR toward `remote` (RC: its QPN, first PSN and GID, at the smaller of the two
    /// MTUs; UD: nothing to set).
    ///
    /// Errors: [`VerbsError::Endpoint`] (RC, UC) when `remote`'s QPN or PSN does not fit its
    /// 24 bits ([`QpEndpoint::validate`]), before any command: a peer's endpoint built by
    /// hand is checked here as a parsed one is where it is read.
    pub fn modify_to_rtr(&mut self, remote: &QpEndpoint) -> Result<(), VerbsError> {
        let a = match self.qp_type() {
            QpType::Ud => Init2Rtr::ud(),
            QpType::Rc | QpType::Uc => {
                remote.validate()?;
                let mtu = self
                    .pd
                    .context()
                    .active_mtu(self.opts.port)?
                    .min(remote.mtu);
                Init2Rtr {
                    mtu: mtu.to_path_mtu(),
                    ..Init2Rtr::rc(remote.qpn, remote.psn, remote.gid.0)
                }
            }
        };
        self.modify_to_rtr_with(&a)
    }

    /// INIT → RTR with explicit attributes (research: RNR timer, MTU, path ...).
    ///
    /// Errors: [`VerbsError::PathMtuTooLarge`] (RC, UC) when `a.mtu`'s packets do not fit
    /// the port's Ethernet MTU: the port would drop every full-size packet.
    pub fn modify_to_rtr_with(&mut self, a: &Init2Rtr) -> Result<(), VerbsError> {
        self.transition(QpState::Rtr)?;
        if self.qp_type() != QpType::Ud {
            let eth = self.pd.context().eth_mtu(self.opts.port)?;
            if let Some(why) = TooLarge::check(a.mtu.bytes(), eth) {
                return Err(VerbsError::PathMtuTooLarge {
                    qpn: self.qpn(),
                    why,
                });
            }
        }
        Ok(self.inner.init2rtr(a)?)
    }

    /// RTR → RTS sending from this QP's PSN (timeout 14, 7 retries, infinite RNR retries).
    pub fn modify_to_rts(&mut self) -> Result<(), VerbsError> {
        let a = Rtr2Rts::new(self.psn);
        self.modify_to_rts_with(&a)
    }

    /// RTR → RTS with explicit attributes (research: `rnr_retry`, `retry_cnt`, timeout ...).
    pub fn modify_to_rts_with(&mut self, a: &Rtr2Rts) -> Result<(), VerbsError> {
        self.transition(QpState::Rts)?;
        Ok(self.inner.rtr2rts(a)?)
    }

    /// RESET → INIT → RTR → RTS toward `remote`.
    ///
    /// ```
    /// use bypass_verbs::{Context, Cq, QpBuilder, QpState};
    /// use bypass_testbed::SimContext;
    /// let pair = Context::sim_pair(1)?;
    /// let (pa, pb) = (pair.a.alloc_pd()?, pair.b.alloc_pd()?);
    /// let (ca, cb) = (Cq::new(&pair.a, 64)?, Cq::new(&pair.b, 64)?);
    /// let mut a = QpBuilder::rc(&pa, &ca, &ca).build()?;
    /// let mut b = QpBuilder::rc(&pb, &cb, &cb).build()?;
    /// let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    /// a.connect(&eb)?;
    /// b.connect(&ea)?;
    /// assert_eq!(a.state()?, QpState::Rts);
    /// # Ok::<(), bypass_verbs::VerbsError>(())
    /// ```
    pub fn connect(&mut self, remote: &QpEndpoint) -> Result<(), VerbsError> {
        self.modify_to_init()?;
        self.modify_to_rtr(remote)?;
        self.modify_to_rts()
    }

    /// Checks that `remote` reports this port's active MTU: two ends whose ports' Ethernet
    /// MTUs differ give [`VerbsError::PathMtuMismatch`], naming both (a tool may print it as
    /// a warning and connect anyway, at the smaller).
    pub fn check_peer_mtu(&self, remote: &QpEndpoint) -> Result<(), VerbsError> {
        let local = self.pd.context().active_mtu(self.opts.port)?.bytes();
        let remote = remote.mtu.bytes();
        if local == remote {
            Ok(())
        } else {
            Err(VerbsError::PathMtuMismatch {
                qpn: self.qpn(),
                local,
                remote,
            })
        }
    }

    /// [`Qp::connect`] that refuses two ends with different active MTUs
    /// ([`Qp::check_peer_mtu`]) instead of running at the smaller.
    pub fn connect_same_mtu(&mut self, remote: &QpEndpoint) -> Result<(), VerbsError> {
        self.check_peer_mtu(remote)?;
        self.modify_to_init()?;
        self.modify_to_rtr(remote)?;
        self.modify_to_rts()
    }

    /// RTS → SQD: drains the send queue. Messages already started complete; sends posted
    /// from now on are accepted but wait for [`Qp::modify_sqd_to_rts`]; when nothing is left
    /// in progress the device raises SQ_DRAINED for this QP on the context's async events
    /// (`Context::hca().process_events()`, [`crate::driver::eq::AsyncEvent::drained_qpn`]).
    ///
    /// Errors: [`VerbsError::Driver`] with `DriverError::BadQpTransition` unless in RTS.
    pub fn modify_to_sqd(&mut self) -> Result<(), VerbsError> {
        Ok(self.inner.rts2sqd()?)
    }

    /// SQD → SQD: changes attributes of a drained QP (RC: access, RNR timer, P_Key index; UC:
    /// access, P_Key index; UD: Q_Key, P_Key index). Refused by the device while draining.
    pub fn modify_sqd_to_sqd(&mut self, a: &SqAttrs) -> Result<(), VerbsError> {
        Ok(self.inner.sqd2sqd(a)?)
    }

    /// SQD → RTS: sending resumes with the first send the drain held back.
    pub fn modify_sqd_to_rts(&mut self) -> Result<(), VerbsError> {
        self.modify_sqd_to_rts_with(&SqAttrs::default())
    }

    /// SQD → RTS changing `a` (RC: access, RNR timer; UC: access; UD: Q_Key).
    pub fn modify_sqd_to_rts_with(&mut self, a: &SqAttrs) -> Result<(), VerbsError> {
        Ok(self.inner.sqd2rts(a)?)
    }

    /// SQE → RTS: recovers a UD or UC QP that a send error moved to SQE (the failed send
    /// completed with its error, the rest of the SQ with WR_FLUSH_ERR; receives went on).
    /// Reclaim those completions, then send again.
    pub fn modify_sqe_to_rts(&mut self) -> Result<(), VerbsError> {
        self.modify_sqe_to_rts_with(&SqAttrs::default())
    }

    /// SQE → RTS changing `a` (UC: access; UD: Q_Key).
    pub fn modify_sqe_to_rts_with(&mut self, a: &SqAttrs) -> Result<(), VerbsError> {
        Ok(self.inner.sqe2rts(a)?)
    }

    /// Any state → ERR: every outstanding work request completes with WR_FLUSH_ERR (poll and
    /// reclaim them to get the buffers back).
    pub fn to_error(&mut self) -> Result<(), VerbsError> {
        Ok(self.inner.to_error()?)
    }

    /// Any state → RESET, so the QP can be connected again. Refused while WQEs are
    /// outstanding: a completion still in the CQ could otherwise be taken for one of a WQE
    /// posted after the reset (move it to ERR, poll and reclaim the flushed completions
    /// first, or drop the QP).
    pub fn reset(&mut self) -> Result<(), VerbsError> {
        let (sends, recvs) = (self.sq.outstanding(), self.rq.outstanding());
        if sends != 0 || recvs != 0 {
            return Err(VerbsError::OutstandingAtReset {
                qpn: self.qpn(),
                sends,
                recvs,
            });
        }
        self.inner.reset()?;
        self.sq.clear();
        self.rq.clear();
        self.last_send = None;
        Ok(())
    }

    #[cold]
    fn not_ready(&self) -> VerbsError {
        VerbsError::QpNotReady {
            qpn: self.qpn(),
            state: self.cached_state(),
        }
    }

    #[inline]
    fn check_send_state(&self) -> Result<(), VerbsError> {
        match self.cached_state() {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => Ok(()),
            _ => Err(self.not_ready()),
        }
    }

    #[inline]
    fn lower<'w>(
        &self,
        wr: &'w SendWr<'_>,
        sges: &'w mut [Sge; MAX_SGES],
    ) -> Result<post::SendWr<'w>, VerbsError> {
        let (s, n) = lower::sges(&wr.sges)?;
        let max = self.opts.caps.max_send_sge as usize;
        if n > max {
            return Err(VerbsError::TooManySges { sges: n, max });
        }
        *sges = s;
        let op = lower::send_op(wr)?;
        let payload = match wr.inline {
            Some(d) => Payload::Inline(d),
            None => Payload::Sges(sges.get(..n).unwrap_or(&[])),
        };
        Ok(post::SendWr {
            wr_id: wr.wr_id,
            op,
            payload,
            flags: lower::flags(wr),
            ud: wr.ud,
        })
    }

    /// WQEBBs of the send WQE that starts at `pos` (from its ctrl segment's `ds`).
    fn wqebbs_at(&self, pos: u32) -> u32 {
        let b = self.inner.wqe_bytes(pos);
        let ds = CtrlSeg::ref_from_prefix(&b[..])
            .map(|(c, _)| c.ds())
            .unwrap_or(4);
        u32::from(ds).div_ceil(4).max(1)
    }

    /// Posts one send work request and rings the doorbell. The request's buffers move into
    /// the QP until its completion (or a later one of the same queue) is reclaimed.
    ///
    /// Refused before anything reaches the NIC (the buffers return to their pools): the QP
    /// not in RTS ([`VerbsError::QpNotReady`]), too many SGEs, a message larger than the
    /// remote buffer, a malformed atomic, and what the driver refuses (queue full, inline
    /// too long, an opcode the QP type lacks).
    #[inline]
    pub fn post_send(&mut self, wr: SendWr<'_>) -> Result<(), VerbsError> {
        self.check_send_state()?;
        let mut sges = [Sge::default(); MAX_SGES];
        let dwr = self.lower(&wr, &mut sges)?;
        let start = self.inner.sq_cur_post();
        let seq = self.send_cq.now();
        // The SGEs were lowered from the buffers `wr` owns (leases, shared leases, device
        // leases: registered by their pools, no reference to their bytes outside the lease,
        // a shared lease only as a source); once posted they are parked in `self.sq` until a
        // completion proves the WQE done, and a refused request posted nothing.
        match (dwr.op, dwr.payload, dwr.ud) {
            // A one-SGE RDMA WRITE takes the driver's specialised post, which writes the same
            // WQE and refuses with the same errors (`bypass_driver::qp::Qp::post_write`).
            (post::SendOp::Write { remote }, Payload::Sges([one]), None) => {
                // SAFETY: the SGE of a buffer `wr` owns, parked below (see above).
                unsafe { self.inner.post_write(dwr.wr_id, *one, remote, dwr.flags) }
                    .map_err(post::PostError::from)?
            }
            _ => {
                // SAFETY: the SGEs of buffers `wr` owns, parked below (see above).
                unsafe { self.inner.post_send(&dwr) }?
            }
        }
        let n = self.inner.sq_cur_post().wrapping_sub(start);
        self.sq.park(start, n, wr.sges, seq);
        self.last_send = Some((start, n));
        Ok(())
    }

    /// Posts a list of send work requests with one doorbell. Every request is checked before
    /// any is written; if the driver then refuses one (queue full), those before it are
    /// posted and the error names its index.
    pub fn post_send_list<const N: usize>(
        &mut self,
        wrs: [SendWr<'_>; N],
    ) -> Result<(), VerbsError> {
        self.check_send_state()?;
        let mut sges = [[Sge::default(); MAX_SGES]; N];
        let mut dwrs = [post::SendWr::new(0, post::SendOp::Send, &[]); N];
        for ((wr, s), d) in wrs.iter().zip(sges.iter_mut()).zip(dwrs.iter_mut()) {
            *d = self.lower(wr, s)?;
        }
        let start = self.inner.sq_cur_post();
        let seq = self.send_cq.now();
        // SAFETY: as in `post_send`: every SGE is of a buffer the requests own, and those
        // posted are parked below until their completion.
        let res = unsafe { self.inner.post_send_list(&dwrs) };
        let posted = match &res {
            Ok(()) => N,
            Err(e) => e.index,
        };
        let mut pos = start;
        for (k, wr) in wrs.into_iter().enumerate() {
            if k >= posted {
                break; // dropped: back to the pools
            }
            let n = self.wqebbs_at(pos);
            self.sq.park(pos, n, wr.sges, seq);
            self.last_send = Some((pos, n));
            pos = pos.wrapping_add(n);
        }
        Ok(res?)
    }

    /// Starts a batch of RDMA WRITEs announced with one doorbell ([`WriteBatch`]). The QP
    /// must be an RC or UC QP in RTS (or SQD/SQE/ERR, as for [`Qp::post_send`]) with at least
    /// one send SGE: otherwise [`VerbsError::QpNotReady`] or the driver's explained refusal.
    pub fn write_batch(&mut self) -> Result<WriteBatch<'_>, VerbsError> {
        self.check_send_state()?;
        let seq = self.send_cq.now();
        let inner = self.inner.write_batch()?;
        Ok(WriteBatch::new(
            inner,
            &mut self.sq,
            &mut self.last_send,
            seq,
        ))
    }

    /// Posts one receive. Allowed from INIT on ([`VerbsError::RecvInReset`] before).
    #[inline]
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), VerbsError> {
        if self.cached_state() == QpState::Reset {
            return Err(VerbsError::RecvInReset { qpn: self.qpn() });
        }
        if wr.sges.any_shared() {
            return Err(VerbsError::SharedBufferWritten { op: "a receive" });
        }
        let (sges, n) = lower::sges(&wr.sges)?;
        let max = self.opts.caps.max_recv_sge as usize;
        if n > max {
            return Err(VerbsError::TooManySges { sges: n, max });
        }
        let seq = self.recv_cq.now();
        // The RQ index this receive takes (its completion names it).
        let at = self.inner.rq_head();
        // SAFETY: the SGEs are of the leases `wr` owns (none shared: checked above), parked in
        // `self.rq` right after the post until a completion gives them back.
        unsafe {
            self.inner.post_recv(&post::RecvWr {
                wr_id: wr.wr_id,
                sges: sges.get(..n).unwrap_or(&[]),
            })
        }?;
        self.rq.park(at, 1, wr.sges, seq);
        Ok(())
    }

    /// Posts several receives with one doorbell-record update. Every request is checked
    /// before any is written; if the driver then refuses one (queue full), those before it
    /// are posted and the error names its index.
    pub fn post_recv_list<const N: usize>(&mut self, wrs: [RecvWr; N]) -> Result<(), VerbsError> {
        if self.cached_state() == QpState::Reset {
            return Err(VerbsError::RecvInReset { qpn: self.qpn() });
        }
        let max = self.opts.caps.max_recv_sge as usize;
        let mut sges = [([Sge::default(); MAX_SGES], 0usize); N];
        for (wr, s) in wrs.iter().zip(sges.iter_mut()) {
            if wr.sges.any_shared() {
                return Err(VerbsError::SharedBufferWritten { op: "a receive" });
            }
            *s = lower::sges(&wr.sges)?;
            if s.1 > max {
                return Err(VerbsError::TooManySges { sges: s.1, max });
            }
        }
        let mut dwrs = [post::RecvWr {
            wr_id: 0,
            sges: &[],
        }; N];
        for ((wr, (s, n)), d) in wrs.iter().zip(sges.iter()).zip(dwrs.iter_mut()) {
            *d = post::RecvWr {
                wr_id: wr.wr_id,
                sges: s.get(..*n).unwrap_or(&[]),
            };
        }
        let seq = self.recv_cq.now();
        let first = self.inner.rq_head();
        // SAFETY: as in `post_recv`: exclusive leases the requests own, parked below.
        let res = unsafe { self.inner.post_recv_list(&dwrs) };
        let posted = match &res {
            Ok(()) => N,
            Err(e) => e.index,
        };
        for (at, wr) in (0u32..)
            .map(|k| first.wrapping_add(k))
            .zip(wrs)
            .take(posted)
        {
            self.rq.park(at, 1, wr.sges, seq);
        }
        Ok(res?)
    }

    /// Consumes a completion of this QP and hands back the buffers of its work request (a
    /// receive's data, a READ's or atomic's result, a send's source), dropping those of
    /// earlier unsignaled WQEs back into their pools. A completion for a slot no longer
    /// outstanding (already reclaimed, or passed by a later lap of the ring) returns an empty
    /// list.
    ///
    /// Errors: [`VerbsError::ForeignCompletion`] for a completion of another QP, or from a
    /// CQ this QP does not report that queue to; [`VerbsError::StaleCompletion`] for one
    /// polled before the request now at its slot was posted (from a destroyed QP that had
    /// this number, or from before a reset). Neither releases anything.
    pub fn reclaim(&mut self, c: Completion) -> Result<SgeList, VerbsError> {
        let recv = c.is_recv();
        let cq = if recv { &self.recv_cq } else { &self.send_cq };
        if c.qpn() != self.qpn() || c.cq_id() != cq.id() || c.cqn() != cq.cqn {
            return Err(VerbsError::ForeignCompletion {
                wc_qpn: c.qpn(),
                qpn: self.qpn(),
            });
        }
        let wc = c.work_completion();
        // Both queues by the WQE index the driver reports: for a receive, the index of the
        // receive WQE it matched (in order), so a receive completion kept while its slot was
        // reposted names a position outside the window and releases nothing.
        let got = if recv {
            self.rq.complete(wc.wqe_index(), c.seq())
        } else {
            self.sq.complete(wc.wqe_index(), c.seq())
        };
        got.map_err(|posted_at| VerbsError::StaleCompletion {
            qpn: self.qpn(),
            queue: if recv { "receive" } else { "send" },
            seq: c.seq(),
            posted_at,
        })
    }

    /// [`Qp::reclaim`] for the usual one-buffer request: its lease, if any.
    pub fn reclaim_lease(&mut self, c: Completion) -> Result<Option<Lease>, VerbsError> {
        Ok(self.reclaim(c)?.into_leases().next())
    }

    /// Send WQEBBs outstanding (posted, not yet reclaimed).
    pub fn sends_outstanding(&self) -> u32 {
        self.sq.outstanding()
    }

    /// Receives outstanding.
    pub fn recvs_outstanding(&self) -> u32 {
        self.rq.outstanding()
    }

    /// The BlueFlame register this QP rings (research access): `.class()` says whether it is a
    /// dedicated low-latency one, a shared one (posts take its lock) or none (8-byte doorbells).
    pub fn bfreg(&self) -> &bypass_driver::uar::Bfreg {
        self.inner.bfreg()
    }

    /// The bytes of the last send WQE posted (research access), all its WQEBBs.
    pub fn last_wqe_bytes(&self) -> Option<Vec<u8>> {
        let (start, n) = self.last_send?;
        let mut v = Vec::with_capacity(n as usize * 64);
        for k in 0..n {
            v.extend_from_slice(&self.inner.wqe_bytes(start.wrapping_add(k)));
        }
        Some(v)
    }

    /// The bytes of send WQEBB `index` (masked to the ring; research access).
    pub fn wqe_bytes(&self, index: u32) -> [u8; 64] {
        self.inner.wqe_bytes(index)
    }

    /// The bytes of receive WQE `index` (masked; research access).
    pub fn recv_wqe_bytes(&self, index: u32) -> Vec<u8> {
        self.inner.recv_wqe_bytes(index)
    }

    /// The GID this QP's port uses (index 0).
    pub fn gid(&self) -> Result<Gid, VerbsError> {
        self.pd.context().gid(self.opts.port)
    }
}

#[cfg(test)]
#[path = "connect_tests.rs"]
mod connect_tests;
