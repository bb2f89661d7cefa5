//! Send completions: the requester CQE and the requester error CQE, built with
//! `bypass_hw::cqe` and posted through `Completions::post_cqe`.
//!
//! Owns: the contents of send-side CQEs and the counters that go with error ones. Must not:
//! decide when a WQE completes (the requester and completer do) or touch the ring.
//!
//! Fields as rdma-core `providers/mlx5/cq.c` reads them: `sop_drop_qpn` = WQE opcode << 24 |
//! QPN (`handle_good_req` switches on the opcode), `wqe_counter` = the WQE's index
//! (`idx = wqe_ctr & (wqe_cnt - 1)`, and `sq.tail = wqe_head[idx] + 1` retires the unsignaled
//! WQEs before it), `srqn_uidx` = the QP's user index (with cqe_version 1 the CQE names its QP
//! by user index: `mlx5_parse_cqe` looks the resource up by `srqn_uidx`), `byte_cnt` for READ
//! (`wc->byte_len = be32toh(cqe64->byte_cnt)`) and atomics (8).

use bypass_hw::cqe::{Cqe64, CqeOpcode, ErrCqe, make_op_own};
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::WqeOpcode;
use zerocopy::{FromZeros, IntoBytes};

use crate::counters::Counters;
use crate::events::Completions;
use crate::io::Io;
use crate::objects::Qp;

/// Where a QP's send CQEs go and what they name: its send CQ, user index and number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendCq {
    /// Send CQ.
    pub cqn: u32,
    /// User index (`srqn_uidx` with cqe_version 1).
    pub uidx: u32,
    /// QP number.
    pub qpn: u32,
}

impl SendCq {
    /// `qp`'s.
    #[inline]
    pub(crate) fn of(qp: &Qp) -> Self {
        Self {
            cqn: qp.cqn_snd,
            uidx: qp.user_index,
            qpn: qp.qpn,
        }
    }
}

/// Posts a successful requester CQE for the WQE at `index` of the QP `cq` names.
pub(crate) fn post_ok(
    cq: SendCq,
    comp: &mut Completions,
    io: &mut Io<'_>,
    index: u16,
    opcode: WqeOpcode,
    byte_cnt: u32,
) {
    let mut c = Cqe64::new_zeroed();
    c.sop_drop_qpn
        .set((u32::from(opcode.0) << 24) | (cq.qpn & 0x00ff_ffff));
    c.wqe_counter.set(index);
    c.byte_cnt.set(byte_cnt);
    c.srqn_uidx.set(cq.uidx & 0x00ff_ffff);
    c.op_own = make_op_own(CqeOpcode::REQ, 0, false, false);
    let mut b = [0u8; 64];
    b.copy_from_slice(c.as_bytes());
    comp.post_cqe(io, cq.cqn, &b, false);
}

/// Posts a requester error CQE (`REQ_ERR`, `syndrome`) for the WQE at `index` of the QP `cq`
/// names, and counts it (in `qp_counters`, the QP's, and the device's).
pub(crate) fn post_err(
    cq: SendCq,
    qp_counters: &mut Counters,
    comp: &mut Completions,
    io: &mut Io<'_>,
    index: u16,
    opcode: WqeOpcode,
    syndrome: CqeSyndrome,
) {
    let flush = syndrome == CqeSyndrome::WR_FLUSH_ERR;
    for c in [qp_counters, &mut *io.counters] {
        if flush {
            c.req_cqe_flush_error += 1;
        } else {
            c.req_cqe_error += 1;
        }
    }
    let mut c = ErrCqe::new_zeroed();
    c.srqn.set(cq.uidx & 0x00ff_ffff);
    c.syndrome = syndrome.0;
    c.s_wqe_opcode_qpn
        .set((u32::from(opcode.0) << 24) | (cq.qpn & 0x00ff_ffff));
    c.wqe_counter.set(index);
    c.op_own = make_op_own(CqeOpcode::REQ_ERR, 0, false, false);
    let mut b = [0u8; 64];
    b.copy_from_slice(c.as_bytes());
    // Error completions always raise an armed CQ's event, solicited-only or not (PRM; the
    // kernel's `mlx5_ib_arm_cq` documents that errors wake solicited-only waiters).
    comp.post_cqe(io, cq.cqn, &b, true);
}
