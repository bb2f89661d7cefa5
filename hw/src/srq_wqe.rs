//! The SRQ receive WQE: a next segment, then the scatter list of `mlx5_wqe_data_seg`s.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`struct mlx5_wqe_srq_next_seg`: 2 reserved
//! bytes, `next_wqe_index` (BE16), `signature`, 11 reserved bytes) and
//! `providers/mlx5/srq.c`: the buffer is a linked list of WQEs (`mlx5_alloc_srq_buf` links
//! `i -> i + 1` from `head = 0` to `tail = max - 1`); `mlx5_post_srq_recv` writes the scatter
//! list at `head`, moves `head` to that WQE's `next_wqe_index`, ends a short list with the
//! `MLX5_INVALID_LKEY` terminator, and writes the posted count (BE32) to the doorbell record;
//! `mlx5_free_srq_wqe` links a completed WQE after `tail`. The device takes WQEs from its own
//! head along the same links, one per message, and reports the WQE's index in the CQE's
//! `wqe_counter` (rdma-core `cq.c` `handle_responder`: `srq->wrid[wqe_ctr]`).
//!
//! Owns: the next-segment layout and the WQE stride rules. Must not: keep the list's head or
//! tail (the driver's `srq` and the sim's `srq` do).

use zerocopy::byteorder::big_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `struct mlx5_wqe_srq_next_seg` (mlx5dv.h, 16 bytes).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct SrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// Index of the next WQE of the list.
    pub next_wqe_index: U16,
    /// WQE signature (when `wq_signature` is set; 0 otherwise).
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}

/// Bytes of the next segment, before the scatter list.
pub const SRQ_NEXT_SEG_LEN: usize = 16;

impl SrqNextSeg {
    /// A next segment linking to `next`.
    pub fn new(next: u16) -> Self {
        Self {
            next_wqe_index: U16::new(next),
            ..Self::default()
        }
    }
    /// The next WQE's index.
    pub fn next(&self) -> u16 {
        self.next_wqe_index.get()
    }
}

/// The SRQ WQE stride for `max_sge` scatter entries: the next segment plus the entries, at
/// least 32 bytes, rounded up to a power of two (rdma-core `mlx5_alloc_srq_buf`); `None` if it
/// overflows.
pub fn srq_wqe_stride(max_sge: u32) -> Option<u32> {
    let n = max_sge
        .checked_mul(16)?
        .checked_add(SRQ_NEXT_SEG_LEN as u32)?;
    n.max(32).checked_next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_seg_layout() {
        assert_eq!(size_of::<SrqNextSeg>(), SRQ_NEXT_SEG_LEN);
        let s = SrqNextSeg::new(0x1234);
        let b = s.as_bytes();
        assert_eq!(&b[..4], &[0, 0, 0x12, 0x34]);
        assert_eq!(SrqNextSeg::read_from_bytes(b).unwrap().next(), 0x1234);
    }

    #[test]
    fn strides() {
        assert_eq!(srq_wqe_stride(1), Some(32));
        assert_eq!(srq_wqe_stride(2), Some(64));
        assert_eq!(srq_wqe_stride(3), Some(64));
        assert_eq!(srq_wqe_stride(4), Some(128));
        assert_eq!(srq_wqe_stride(u32::MAX), None);
    }
}
