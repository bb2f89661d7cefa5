//! Shared receive queues: the RMP object the firmware creates for an SRQ, and how the
//! responder takes receive WQEs from it.
//!
//! Owns: [`Srq`] (its buffer, doorbell record, the device's place in the WQE list, the armed
//! limit, the QPs attached) and the list walk: [`posted`], [`take`], [`read_wqe`], and the
//! limit rule ([`take`] disarms it and says when to raise SRQ_LIMIT). Must not: write CQEs,
//! EQEs or packets (the responder does, `transport::responder`), or parse commands
//! (`firmware::srq`).
//!
//! Sources: rdma-core `providers/mlx5/srq.c` (the WQE list: each WQE starts with a
//! `mlx5_wqe_srq_next_seg` naming the next by index; `mlx5_post_srq_recv` writes the count of
//! WQEs posted to the doorbell record as BE32; the scatter list ends at the first
//! `MLX5_INVALID_LKEY` entry); rdma-core `cq.c` `handle_responder` (the CQE's `wqe_counter` is
//! the SRQ WQE's index); the limit: IBTA vol. 1 §10.2.9.6 / §11.6.3 (SRQ limit: an event once
//! the WQEs on the SRQ fall below the armed limit, which then disarms), as Linux rxe
//! (`rxe_resp.c` `get_srq_wqe`: `count < srq->limit` after taking a WQE, limit reset to 0)
//! and the PRM's `wq.lwm` implement it.

use bypass_hw::srq_wqe::{SRQ_NEXT_SEG_LEN, SrqNextSeg};
use zerocopy::FromBytes;

use crate::buffer::PageList;
use crate::engine::wqe::RecvWqe;
use crate::iommu::{DmaFault, Iommu};

/// An SRQ (a basic RMP).
#[derive(Debug, Clone)]
pub struct Srq {
    /// Protection domain (its WQEs' lkeys must belong to it).
    pub pd: u32,
    /// The WQE buffer.
    pub wq: PageList,
    /// log2 of the number of WQEs.
    pub log_size: u8,
    /// Bytes per WQE.
    pub stride: u32,
    /// Doorbell record IOVA (BE32: WQEs posted, wrapping).
    pub dbr: u64,
    /// The armed limit (`wq.lwm`; 0 = disarmed).
    pub lwm: u16,
    /// QPs attached (DESTROY_RMP is refused while any is).
    pub users: u32,
    /// The index of the next WQE the device takes.
    pub head: u16,
    /// WQEs the device has taken (`wq.hw_counter`).
    pub taken: u32,
    /// The raw `rmpc` from CREATE_RMP (QUERY_RMP returns it with live fields patched in).
    pub rmpc: Vec<u8>,
}

impl Srq {
    /// Number of WQEs in the buffer.
    pub fn size(&self) -> u32 {
        1 << self.log_size.min(16)
    }
}

/// WQEs posted and not yet taken: the doorbell record's count minus the device's, at most the
/// buffer's size (16-bit arithmetic, as the RQ's).
pub(crate) fn posted(srq: &Srq, dma: &mut Iommu) -> Result<u32, DmaFault> {
    let pi = dma.read_be32(srq.dbr)?;
    let avail = (pi as u16).wrapping_sub(srq.taken as u16);
    Ok(u32::from(avail).min(srq.size()))
}

/// The WQE at `index`: its scatter list and the next WQE's index.
pub(crate) fn read_wqe(srq: &Srq, dma: &mut Iommu, index: u16) -> Result<(RecvWqe, u16), DmaFault> {
    let stride = srq.stride.clamp(32, 1 << 12);
    let slot = u32::from(index) & (srq.size() - 1);
    let mut bytes = vec![0u8; stride as usize];
    srq.wq
        .read(dma, u64::from(slot) * u64::from(stride), &mut bytes)?;
    let next = bytes
        .get(..SRQ_NEXT_SEG_LEN)
        .and_then(|b| SrqNextSeg::read_from_bytes(b).ok())
        .map_or(0, |s| s.next());
    let sges = crate::engine::wqe::data_segs(bytes.get(SRQ_NEXT_SEG_LEN..).unwrap_or(&[]));
    Ok((RecvWqe { sges }, next))
}

/// What [`take`] took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Taken {
    /// The WQE's index (the CQE's `wqe_counter`).
    pub index: u16,
    /// Its scatter list.
    pub wqe: RecvWqe,
    /// The count fell below the armed limit: raise SRQ_LIMIT (the limit is now disarmed).
    pub limit_reached: bool,
}

/// Takes the WQE at the device's head, if one is posted: the head follows its next index.
pub(crate) fn take(srq: &mut Srq, dma: &mut Iommu) -> Result<Option<Taken>, DmaFault> {
    let avail = posted(srq, dma)?;
    if avail == 0 {
        return Ok(None);
    }
    let index = srq.head;
    let (wqe, next) = read_wqe(srq, dma, index)?;
    srq.head = next;
    srq.taken = srq.taken.wrapping_add(1);
    let left = avail - 1;
    let limit_reached = srq.lwm != 0 && left < u32::from(srq.lwm);
    if limit_reached {
        srq.lwm = 0;
    }
    Ok(Some(Taken {
        index,
        wqe,
        limit_reached,
    }))
}
