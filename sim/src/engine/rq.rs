//! The receive queue as the responder uses it: finding the next posted receive WQE, scattering
//! a message into its SGEs, and writing receive completions (good, error, flush).
//!
//! Owns: the RQ half of the work queue buffer and the RQ doorbell record (dword 0), and the
//! receive CQEs. Must not: decide ACKs or NAKs, or change the QP state (the caller does).
//!
//! Sources: rdma-core `providers/mlx5/qp.c` `mlx5_post_recv` (the WQE is a list of
//! `mlx5_wqe_data_seg` ended by lkey `MLX5_INVALID_LKEY` when shorter than the stride; the
//! doorbell record's dword 0 is `htobe32(rq.head & 0xffff)`), `providers/mlx5/cq.c`
//! `mlx5_parse_cqe` / `handle_responder` (what a receive CQE must carry: opcode, `byte_cnt`,
//! `imm_inval_pkey`, `srqn_uidx` = user index for cqe_version 1, `flags_rqpn`, `wqe_counter`).

use bypass_hw::cqe::{Cqe64, CqeOpcode, ErrCqe, make_op_own};
use bypass_hw::syndrome::CqeSyndrome;
use zerocopy::{FromZeros, IntoBytes};

use super::wqe::RecvWqe;
use crate::events::Completions;
use crate::io::Io;
use crate::iommu::{DmaFault, Iommu};
use crate::mkey::{Mkey, Need, lookup};
use crate::objects::Qp;
use crate::table::Table;

/// Why the payload could not be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The message is longer than the WQE (LOCAL_LENGTH_ERR).
    Length,
    /// An lkey is invalid, of another PD, out of range or without local write (LOCAL_PROT_ERR).
    Protection,
    /// The IOMMU refused the write (counted as a DMA fault, reported as LOCAL_PROT_ERR).
    Fault(DmaFault),
}

/// Receive WQEs posted and not yet consumed: the doorbell record's 16-bit producer minus the
/// device's counter, at most the ring size (a producer further ahead is a driver bug; the
/// device never looks past one lap). `Err` if the doorbell record cannot be read.
pub(crate) fn posted(qp: &Qp, dma: &mut Iommu) -> Result<u32, DmaFault> {
    let (dbr, ci, size) = (qp.dbr, qp.rq_ci, 1u32 << qp.geom.log_rq_size.min(16));
    let pi = dma.read_be32(dbr)? & 0xffff;
    let avail = (pi as u16).wrapping_sub(ci as u16);
    Ok(u32::from(avail).min(size))
}

/// Reads the receive WQE at the head of the RQ (`rq_ci`), or `None` if none is posted.
pub(crate) fn peek(qp: &Qp, dma: &mut Iommu) -> Result<Option<RecvWqe>, DmaFault> {
    if posted(qp, dma)? == 0 {
        return Ok(None);
    }
    let stride = qp.geom.rq_stride.min(1 << 12);
    let index = qp.rq_ci & ((1u32 << qp.geom.log_rq_size.min(16)) - 1);
    let mut bytes = vec![0u8; stride as usize];
    qp.wq
        .read(dma, u64::from(index) * u64::from(stride), &mut bytes)?;
    Ok(Some(RecvWqe {
        sges: super::wqe::data_segs(&bytes),
    }))
}

/// Writes `data` at byte `offset` of the message being received into `wqe`, through the
/// SGEs' lkeys (the receiving QP's PD and number, `who`; local write access).
pub(crate) fn scatter(
    mkeys: &Table<Mkey>,
    dma: &mut Iommu,
    who: (u32, u32),
    wqe: &RecvWqe,
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let (pd, qpn) = who;
    let end = offset
        .checked_add(data.len() as u64)
        .ok_or(ScatterError::Length)?;
    if end > wqe.capacity() {
        return Err(ScatterError::Length);
    }
    let mut base = 0u64;
    let mut done = 0usize;
    for sge in &wqe.sges {
        let sge_end = base + u64::from(sge.len);
        let at = offset + done as u64;
        if done < data.len() && at < sge_end {
            let n = usize::try_from((sge_end - at).min((data.len() - done) as u64))
                .unwrap_or(usize::MAX);
            let key = lookup(mkeys, sge.lkey).ok_or(ScatterError::Protection)?;
            let va = sge
                .addr
                .checked_add(at - base)
                .ok_or(ScatterError::Protection)?;
            let runs = key
                .translate(pd, qpn, va, n as u64, Need::LocalWrite)
                .map_err(|_| ScatterError::Protection)?;
            let mut put = done;
            for (iova, len) in runs {
                let len = len as usize;
                let chunk = data.get(put..put + len).ok_or(ScatterError::Protection)?;
                dma.write(iova, chunk).map_err(ScatterError::Fault)?;
                put += len;
            }
            done += n;
        }
        base = sge_end;
    }
    Ok(())
}

/// What a good receive completion reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvDone {
    /// `MLX5_CQE_RESP_SEND`, `_SEND_IMM`, `_SEND_INV` or `_WR_IMM`.
    pub opcode: CqeOpcode,
    /// Bytes received (WRITE_IMM: the RETH length).
    pub byte_cnt: u32,
    /// Immediate data or invalidated rkey.
    pub imm: u32,
    /// `flags_rqpn`: the GRH and L3-type flags (UD) and the remote QPN.
    pub flags_rqpn: u32,
    /// The request carried the solicited-event bit.
    pub se: bool,
}

/// Completes the WQE at the head of the RQ of `qp` successfully and consumes it.
pub(crate) fn complete(qp: &mut Qp, comp: &mut Completions, io: &mut Io<'_>, done: &RecvDone) {
    let index = qp.rq_ci as u16;
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    complete_at(qp, comp, io, done, index);
}

/// Writes the good receive CQE of `qp` for the WQE whose index (`wqe_counter`) is `index`: the
/// RQ's head ([`complete`]) or an SRQ WQE the QP took (`engine::srq_recv`).
pub(crate) fn complete_at(
    qp: &Qp,
    comp: &mut Completions,
    io: &mut Io<'_>,
    done: &RecvDone,
    index: u16,
) {
    let mut cqe = Cqe64::new_zeroed();
    cqe.byte_cnt.set(done.byte_cnt);
    cqe.imm_inval_pkey.set(done.imm);
    cqe.flags_rqpn.set(done.flags_rqpn);
    cqe.srqn_uidx.set(qp.user_index & 0x00ff_ffff);
    cqe.sop_drop_qpn.set(qp.qpn & 0x00ff_ffff);
    cqe.wqe_counter.set(index);
    // The ring stamps the owner bit.
    cqe.op_own = make_op_own(done.opcode, 0, done.se, false);
    let cqn = qp.cqn_rcv;
    let mut bytes = [0u8; 64];
    bytes.copy_from_slice(cqe.as_bytes());
    comp.post_cqe(io, cqn, &bytes, done.se);
}

/// Completes the WQE at the head of the RQ of `qp` with error `syndrome` (a RESP_ERR CQE)
/// and consumes it.
pub(crate) fn complete_error(
    qp: &mut Qp,
    comp: &mut Completions,
    io: &mut Io<'_>,
    syndrome: CqeSyndrome,
) {
    let index = qp.rq_ci as u16;
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    complete_error_at(qp, comp, io, syndrome, index);
}

/// Writes the error receive CQE of `qp` for the WQE whose index is `index` (see
/// [`complete_at`]).
pub(crate) fn complete_error_at(
    qp: &mut Qp,
    comp: &mut Completions,
    io: &mut Io<'_>,
    syndrome: CqeSyndrome,
    index: u16,
) {
    let mut cqe = ErrCqe::new_zeroed();
    // cqe_version 1: the user index sits where `srqn` is (rdma-core `cq.c` reads `srqn_uidx`
    // before it looks at the opcode).
    cqe.srqn.set(qp.user_index & 0x00ff_ffff);
    cqe.syndrome = syndrome.0;
    cqe.s_wqe_opcode_qpn.set(qp.qpn & 0x00ff_ffff);
    cqe.wqe_counter.set(index);
    cqe.op_own = make_op_own(CqeOpcode::RESP_ERR, 0, false, false);
    if syndrome == CqeSyndrome::WR_FLUSH_ERR {
        count_flushes(qp, io, 1);
    } else {
        qp.counters.resp_cqe_error += 1;
        io.counters.resp_cqe_error += 1;
    }
    let cqn = qp.cqn_rcv;
    let mut bytes = [0u8; 64];
    bytes.copy_from_slice(cqe.as_bytes());
    comp.post_cqe(io, cqn, &bytes, true);
}

/// Completes every posted receive WQE of `qp` with WR_FLUSH_ERR. Returns how many.
pub(crate) fn flush(qp: &mut Qp, comp: &mut Completions, io: &mut Io<'_>) -> u32 {
    let n = match posted(qp, io.dma) {
        Ok(n) => n,
        Err(f) => {
            io.dma_fault(f);
            return 0;
        }
    };
    for done in 0..n {
        if comp.drops_cqes(qp.cqn_rcv) {
            drop_flushed(qp, io, n - done);
            break;
        }
        complete_error(qp, comp, io, CqeSyndrome::WR_FLUSH_ERR);
    }
    n
}

/// Consumes and counts `n` flushed receives of `qp` whose CQEs its receive CQ would drop
/// ([`Completions::drops_cqes`]): what `n` calls of [`complete_error`] would leave, in one
/// step. A driver can announce a whole ring (up to 65,536 WQEs) into an overrun CQ, and each
/// would otherwise build a CQE only to have it dropped.
fn drop_flushed(qp: &mut Qp, io: &mut Io<'_>, n: u32) {
    qp.rq_ci = qp.rq_ci.wrapping_add(n);
    count_flushes(qp, io, n);
}

/// Counts `n` receive flush completions of `qp`, on the QP and on the device (the one place
/// both a written flush CQE and a dropped one are counted).
fn count_flushes(qp: &mut Qp, io: &mut Io<'_>, n: u32) {
    qp.counters.resp_cqe_flush_error += u64::from(n);
    io.counters.resp_cqe_flush_error += u64::from(n);
}
