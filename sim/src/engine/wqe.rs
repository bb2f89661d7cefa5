//! Send WQE parsing and validation: the bytes the engine fetched from the SQ → a [`SendWqe`];
//! and a receive WQE's scatter list, [`RecvWqe`].
//!
//! Owns: the segment walk of a send WQE (ctrl, raddr, atomic, datagram, data and inline
//! segments, all through `bypass_hw::wqe` views), the "is this WQE well formed for this QP"
//! checks (LOCAL_QP_OP_ERR) and the message length check (LOCAL_LENGTH_ERR).
//! Must not: touch host memory (the lkeys are checked when the requester starts the WQE, the
//! way the hardware executes in order), or keep transport state beyond the fields the
//! requester fills in.
//!
//! Layouts: rdma-core `providers/mlx5/qp.c` `_mlx5_post_send` (RC: ctrl + data\[n\]; ctrl +
//! raddr + data\[n\]; ctrl + raddr + atomic + one 8-byte data segment; UD: ctrl + datagram
//! (48-byte AV) + data\[n\]; inline: one `mlx5_wqe_inl_data_seg` with the payload after it).

use bypass_hw::cmd::qp::service_type as st;
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::wqe::{
    AtomicSeg, Av, CtrlSeg, DataSeg, InlineSeg, MLX5_INLINE_SEG, MLX5_SEND_WQE_BB, RaddrSeg,
    SEND_WQE_DS, WqeOpcode,
};
use zerocopy::FromBytes;

/// One gather or scatter entry of a WQE (a send WQE's data segment, a receive WQE's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sge {
    /// Local key.
    pub lkey: u32,
    /// Virtual address inside the key's range.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

/// A receive WQE the responder has taken (it stays at the head, `rq_ci`, until completed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecvWqe {
    /// Its scatter list, as read from the ring when the message started.
    pub sges: Vec<Sge>,
}

impl RecvWqe {
    /// Bytes the WQE can hold.
    pub fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.len)).sum()
    }
}

/// Where a UD send goes, from the WQE's address vector (`mlx5_wqe_av`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UdDest {
    /// Q_Key from the AV (before the "top bit set → the QP's Q_Key" rule).
    pub qkey: u32,
    /// Destination QPN.
    pub dqpn: u32,
    /// Remote GID.
    pub rgid: [u8; 16],
    /// Remote MAC.
    pub rmac: [u8; 6],
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub tclass: u8,
    /// Local GID index (`grh_gid_fl` bits 27:20, as rdma-core `mlx5_create_ah` packs it).
    pub sgid_index: u8,
    /// Flow label (`grh_gid_fl` bits 19:0).
    pub flow_label: u32,
}

/// The fence a WQE asks for (`fm_ce_se` bits 7:5; kernel `include/linux/mlx5/qp.h`
/// `MLX5_FENCE_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fence {
    /// None, or the initiator small fence (it orders after local invalidate / UMR, which
    /// this device does not implement, so it waits for nothing here).
    None,
    /// `FENCE` (2) and `SMALL_AND_FENCE` (4, rdma-core's `MLX5_WQE_CTRL_FENCE`): wait for every
    /// earlier RDMA READ and atomic to complete.
    ReadAtomic,
    /// `STRONG_ORDERING` (3): wait for every earlier WQE to complete.
    All,
}

/// A send WQE as fetched, plus the requester's progress on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SendWqe {
    /// The WQE's index: the SQ counter (WQEBBs, 16 bits) at its first WQEBB, which is what the
    /// CQE's `wqe_counter` reports.
    pub index: u16,
    /// WQEBBs it occupies.
    pub wqebbs: u16,
    /// Opcode.
    pub opcode: WqeOpcode,
    /// `MLX5_WQE_CTRL_CQ_UPDATE`: a CQE on success.
    pub signaled: bool,
    /// `MLX5_WQE_CTRL_SOLICITED`.
    pub solicited: bool,
    /// Fence mode.
    pub fence: Fence,
    /// Immediate data (as the number on the wire).
    pub imm: u32,
    /// Remote address (WRITE, READ, atomics).
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Atomic swap value / addend.
    pub swap_add: u64,
    /// Atomic compare value.
    pub compare: u64,
    /// Inline payload, if the data came inline (by value when short, else shared with the
    /// bursts that carry it: no allocation or long copy per send).
    pub inline: Option<crate::inline::InlineData>,
    /// Gather (scatter for READ/atomic) list.
    pub sges: Vec<Sge>,
    /// Message length in bytes.
    pub len: u32,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// Set when the WQE is bad: it completes with this syndrome when the requester reaches it.
    pub error: Option<CqeSyndrome>,
    /// PSN of its first packet (assigned when started).
    pub first_psn: u32,
    /// PSN of its last packet (READ: the last reserved response PSN).
    pub last_psn: u32,
    /// The requester has begun sending it (fence and READ/atomic limits were passed).
    pub started: bool,
    /// Every packet has been sent at least once.
    pub sent: bool,
    /// Completed by the responder (or locally: NOP, UD).
    pub done: bool,
    /// READ response packets received so far.
    pub resp_pkts: u32,
}

impl SendWqe {
    /// A WQE of which only the ctrl segment is known (flushes, malformed WQEs).
    pub fn bare(index: u16, opcode: WqeOpcode, wqebbs: u16) -> Self {
        Self {
            index,
            wqebbs,
            opcode,
            signaled: false,
            solicited: false,
            fence: Fence::None,
            imm: 0,
            raddr: 0,
            rkey: 0,
            swap_add: 0,
            compare: 0,
            inline: None,
            sges: Vec::new(),
            len: 0,
            ud: None,
            error: None,
            first_psn: 0,
            last_psn: 0,
            started: false,
            sent: false,
            done: false,
            resp_pkts: 0,
        }
    }

    /// RDMA READ or an atomic: its data comes back in a response and it counts against
    /// `log_sra_max`.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.opcode,
            WqeOpcode::RDMA_READ | WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA
        )
    }
}

/// What the QP contributes to validation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// QP number (the ctrl segment must name it).
    pub qpn: u32,
    /// Service type.
    pub st: u8,
    /// Largest WQE in bytes (`max_wqe_sz_sq`).
    pub max_wqe_bytes: u32,
    /// log2 of the largest message.
    pub log_msg_max: u8,
}

/// WQEBBs the WQE whose ctrl segment is `ctrl` occupies (at least one: a `ds` of 0 still
/// consumes its block).
pub(crate) fn wqebbs(ctrl: &CtrlSeg) -> u16 {
    u16::from(bypass_hw::wqe::wqebbs_for_ds(ctrl.ds()).max(1))
}

/// Parses and validates the WQE in `bytes` (ctrl segment first, `ds * 16` bytes or more) at SQ
/// counter `index`. Never fails: a bad WQE comes back with `error` set.
/// The scatter list of a receive WQE's data segments (an RQ WQE, or an SRQ WQE after its
/// next segment): 16-byte segments up to the terminator rdma-core writes after the last SGE
/// (`MLX5_INVALID_LKEY`), or to the end of the stride.
pub(crate) fn data_segs(bytes: &[u8]) -> Vec<Sge> {
    let mut sges = Vec::new();
    for chunk in bytes.chunks_exact(16) {
        let Ok(seg) = DataSeg::read_from_bytes(chunk) else {
            break;
        };
        if seg.is_end_of_list() {
            break;
        }
        sges.push(Sge {
            lkey: seg.lkey(),
            addr: seg.addr(),
            len: seg.byte_count(),
        });
    }
    sges
}

#[cfg(test)]
pub(crate) fn parse(bytes: &[u8], index: u16, lim: &Limits) -> SendWqe {
    let mut w = SendWqe::bare(index, WqeOpcode::NOP, 1);
    parse_into(&mut w, bytes, lim);
    w
}

/// `parse` into `w`, a [`SendWqe::bare`] WQE at its index already in place (the engine
/// parses into the queue's slot: the parsed WQE is never moved).
#[inline]
pub(crate) fn parse_into(w: &mut SendWqe, bytes: &[u8], lim: &Limits) {
    let Ok((ctrl, _)) = CtrlSeg::read_from_prefix(bytes) else {
        w.opcode = WqeOpcode::NOP;
        w.wqebbs = 1;
        w.error = Some(CqeSyndrome::LOCAL_QP_OP_ERR);
        return;
    };
    w.opcode = ctrl.opcode();
    w.wqebbs = wqebbs(&ctrl);
    w.signaled = ctrl.cq_update();
    w.solicited = ctrl.solicited();
    w.fence = match ctrl.fence_mode() {
        2 | 4 => Fence::ReadAtomic,
        3 => Fence::All,
        _ => Fence::None,
    };
    w.imm = ctrl.imm();
    if let Err(e) = fill(w, &ctrl, bytes, lim) {
        w.error = Some(e);
    }
}

/// The segment walk proper.
fn fill(w: &mut SendWqe, ctrl: &CtrlSeg, bytes: &[u8], lim: &Limits) -> Result<(), CqeSyndrome> {
    let bad = CqeSyndrome::LOCAL_QP_OP_ERR;
    let ds = usize::from(ctrl.ds());
    let size = ds * SEND_WQE_DS;
    // The PRM checks the WQE against the QP's maximum and the ctrl's QPN against the QP the
    // doorbell named (the kernel's `mlx5_ib` sizes `max_wqe_sz_sq` per QP the same way).
    if ds == 0 || size > lim.max_wqe_bytes as usize || ctrl.qpn() != lim.qpn {
        return Err(bad);
    }
    let wqe = bytes.get(..size).ok_or(bad)?;
    let op = ctrl.opcode();
    // Header segments after ctrl, by opcode (rdma-core `_mlx5_post_send`).
    let (raddr, atomic, dgram) = match (lim.st, op) {
        (st::RC, WqeOpcode::NOP) | (st::UD, WqeOpcode::NOP) => return Ok(()),
        (st::RC, WqeOpcode::SEND | WqeOpcode::SEND_IMM) => (false, false, false),
        (st::RC, WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM | WqeOpcode::RDMA_READ) => {
            (true, false, false)
        }
        (st::RC, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA) => (true, true, false),
        (st::UD, WqeOpcode::SEND | WqeOpcode::SEND_IMM) => (false, false, true),
        // UC: RC's segments for SEND and WRITE; READ and atomics are no UC operation.
        (st::UC, WqeOpcode::NOP) => return Ok(()),
        (st::UC, WqeOpcode::SEND | WqeOpcode::SEND_IMM) => (false, false, false),
        (st::UC, WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM) => (true, false, false),
        _ => return Err(bad),
    };
    let mut off = 16;
    if dgram {
        let av = wqe
            .get(off..)
            .and_then(|b| Av::read_from_prefix(b).ok())
            .ok_or(bad)?
            .0;
        let gf = av.grh_gid_fl();
        w.ud = Some(UdDest {
            qkey: av.qkey(),
            dqpn: av.dqpn(),
            rgid: av.rgid,
            rmac: av.rmac,
            hop_limit: av.hop_limit,
            tclass: av.tclass,
            sgid_index: ((gf >> 20) & 0xff) as u8,
            flow_label: gf & 0xf_ffff,
        });
        off += 48;
    }
    if raddr {
        let r = wqe
            .get(off..)
            .and_then(|b| RaddrSeg::read_from_prefix(b).ok())
            .ok_or(bad)?
            .0;
        w.raddr = r.raddr();
        w.rkey = r.rkey();
        off += 16;
    }
    if atomic {
        let a = wqe
            .get(off..)
            .and_then(|b| AtomicSeg::read_from_prefix(b).ok())
            .ok_or(bad)?
            .0;
        w.swap_add = a.swap_add();
        w.compare = a.compare();
        off += 16;
    }
    let data = wqe.get(off..).unwrap_or(&[]);
    parse_data(w, data)?;
    let total: u64 = match &w.inline {
        Some(p) => p.len() as u64,
        None => w.sges.iter().map(|s| u64::from(s.len)).sum(),
    };
    if atomic {
        // An 8-byte atomic has exactly one 8-byte result buffer (`MLX5_ATOMIC_SIZE`) and an
        // 8-byte aligned remote address (IBTA o9-21: atomics operate on naturally aligned
        // 64-bit words); anything else is not an operation this WQE can describe.
        if w.inline.is_some()
            || w.sges.len() != 1
            || total != u64::from(bypass_hw::wqe::MLX5_ATOMIC_SIZE)
            || !w.raddr.is_multiple_of(8)
        {
            return Err(bad);
        }
    }
    if op == WqeOpcode::RDMA_READ && w.inline.is_some() {
        // READ data lands in local memory: there is nothing to inline.
        return Err(bad);
    }
    // The message length limit: `qpc.log_msg_max` (IBTA "Local Length Error": the message
    // exceeds the maximum message size).
    let max = 1u64
        .checked_shl(u32::from(lim.log_msg_max))
        .unwrap_or(u64::MAX);
    if total > max || total > u64::from(u32::MAX) {
        return Err(CqeSyndrome::LOCAL_LENGTH_ERR);
    }
    w.len = total as u32;
    Ok(())
}

/// The data segments: one inline segment, or a list of pointer segments.
fn parse_data(w: &mut SendWqe, data: &[u8]) -> Result<(), CqeSyndrome> {
    let bad = CqeSyndrome::LOCAL_QP_OP_ERR;
    if let Ok((h, rest)) = InlineSeg::read_from_prefix(data)
        && h.is_inline()
    {
        let n = h.len() as usize;
        let payload = rest.get(..n).ok_or(bad)?;
        w.inline = Some(crate::inline::InlineData::from(payload));
        return Ok(());
    }
    for seg in data.chunks_exact(SEND_WQE_DS) {
        let Ok((d, _)) = DataSeg::read_from_prefix(seg) else {
            return Err(bad);
        };
        if d.byte_count() & MLX5_INLINE_SEG != 0 {
            // Inline data after pointer segments: not a layout rdma-core builds.
            return Err(bad);
        }
        // A byte_count of 0 means 2 GiB in a send data segment (PRM; rdma-core's
        // `_mlx5_post_send` skips zero-length SGEs instead of writing them for that reason).
        let len = match d.byte_count() {
            0 => 0x8000_0000,
            n => n,
        };
        w.sges.push(Sge {
            lkey: d.lkey(),
            addr: d.addr(),
            len,
        });
    }
    Ok(())
}

/// Byte offset of WQEBB `counter` in the SQ (the SQ follows the RQ in the work queue buffer).
pub(crate) fn sq_offset(rq_bytes: u64, sq_wqebbs: u32, counter: u32) -> u64 {
    rq_bytes + u64::from(counter % sq_wqebbs.max(1)) * MLX5_SEND_WQE_BB as u64
}

#[cfg(test)]
mod tests;
