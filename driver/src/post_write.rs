//! The specialised post of a one-SGE RDMA WRITE (the data path's most common request), as
//! rdma-core's extended post API writes it: `ibv_wr_rdma_write` + `ibv_wr_set_sge` +
//! `ibv_wr_complete` (`providers/mlx5/qp.c` `mlx5_send_wr_rdma_write`,
//! `mlx5_send_wr_set_sge`, `mlx5_send_wr_complete`): the WQE is always ctrl + raddr + one
//! data segment (3 DS, one WQEBB), so its size, its ctrl words and its ring footprint are
//! known when the QP is created and the post is six 64-bit stores, the `wr_id` bookkeeping
//! and the doorbell.
//!
//! Owns: [`WriteTemplate`] (the per-QP precomputed ctrl words) and [`write_rdma_write`] (the
//! WQE writer, shared by [`crate::qp::Qp::post_write`] and the tests that compare its bytes
//! with the general path's). Must not: ring doorbells or touch barriers (that is `qp.rs`),
//! allocate, lock or format.

use core::sync::atomic::{Ordering, compiler_fence};

use bypass_hw::wqe::{CtrlSeg, RaddrSeg, WqeOpcode};
use zerocopy::byteorder::big_endian::{U16, U32};

use crate::post::{RemoteAddr, SendFlags, SendLimits, Sge};
use crate::wq::{SqRing, WqShared};

/// Segments of a one-SGE RDMA WRITE: ctrl, raddr, data.
pub const WRITE_DS: u8 = 3;

/// A QP's ctrl segment for a one-SGE RDMA WRITE, precomputed at creation as the two 64-bit
/// words the WQE stores (memory order on any host): `qpn << 8 | 3` pre-swapped in word 0,
/// and word 1 (`signature`, `dci_stream_channel_id`, `fm_ce_se`, `imm`) for each value of
/// [`SendFlags`] (`sq_sig_all` folded in). Only the WQE index in word 0 changes per post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTemplate {
    /// Word 0 with the WQE index zero: `opmod_idx_opcode = MLX5_OPCODE_RDMA_WRITE` (bytes
    /// 0..4), `qpn_ds` (bytes 4..8).
    ctrl0: u64,
    /// Word 1 for each `SendFlags` value (`flags.bits() & 7`).
    ctrl1: [u64; 8],
}

impl WriteTemplate {
    /// The template of the QP whose send limits are `lim`.
    pub fn new(lim: &SendLimits) -> Self {
        let ctrl = |fm_ce_se: u8| -> [u64; 2] {
            zerocopy::transmute!(CtrlSeg {
                opmod_idx_opcode: U32::new(u32::from(WqeOpcode::RDMA_WRITE.0)),
                qpn_ds: U32::new(lim.qpn_shifted | u32::from(WRITE_DS)),
                signature: 0,
                dci_stream_channel_id: U16::ZERO,
                fm_ce_se,
                imm: U32::ZERO,
            })
        };
        let mut ctrl1 = [0u64; 8];
        for (bits, w) in (0u8..).zip(ctrl1.iter_mut()) {
            *w = ctrl(lim.fm_ce_se(SendFlags::from_bits_retain(bits)))[1];
        }
        Self {
            ctrl0: ctrl(0)[0],
            ctrl1,
        }
    }

    /// The ctrl segment of the WQE at WQEBB index `start` as its two words in memory order
    /// (rdma-core `mlx5_send_wr_start` → `_common_wqe_init`: `opmod_idx_opcode = idx << 8 |
    /// MLX5_OPCODE_RDMA_WRITE`; `qpn_ds`, `fm_ce_se` from the template).
    #[inline(always)]
    pub fn ctrl(&self, start: u32, flags: SendFlags) -> [u64; 2] {
        // `opmod_idx_opcode` big-endian: byte 0 `opmod` (0), bytes 1..3 the 16-bit index
        // (big-endian), byte 3 the opcode (in `ctrl0`).
        #[cfg(target_endian = "little")]
        // Memory bytes 1, 2 are bits 8..24 of the word: `hi << 8 | lo << 16`, which is the
        // byte-swapped index shifted right by 8 (one `bswap`, one shift).
        let idx = u64::from((start & 0xffff).swap_bytes() >> 8);
        #[cfg(target_endian = "big")]
        let idx = u64::from(start & 0xffff) << 40;
        // `& 7`: in bounds for any bits, so this is one masked load.
        [self.ctrl0 | idx, self.ctrl1[usize::from(flags.bits() & 7)]]
    }

    /// The remote-address segment (rdma-core `set_raddr_seg`) in memory order.
    #[inline(always)]
    pub fn raddr(remote: &RemoteAddr) -> [u64; 2] {
        zerocopy::transmute!(RaddrSeg::new(remote.addr, remote.rkey))
    }

    /// The data segment (rdma-core `mlx5_send_wr_set_sge` → `set_data_ptr_seg`) in memory
    /// order.
    #[inline(always)]
    pub fn data(local: &Sge) -> [u64; 2] {
        #[cfg(target_endian = "little")]
        {
            // Word 0 is `byte_count` then `lkey`, each big-endian: the byte swap of
            // `byte_count << 32 | lkey`, i.e. of `lkey << 32 | byte_count` rotated by 32 (a
            // form the compiler turns into one 64-bit load, `bswap`, `ror` when the two fields
            // are adjacent). `post_write_writes_the_same_wqe_and_bookkeeping_as_the_general_path`
            // checks the bytes against `DataSeg`.
            let w0 = (u64::from(local.lkey) << 32 | u64::from(local.length))
                .swap_bytes()
                .rotate_right(32);
            [w0, local.addr.to_be()]
        }
        #[cfg(target_endian = "big")]
        {
            zerocopy::transmute!(bypass_hw::wqe::DataSeg::new(
                local.length,
                local.lkey,
                local.addr
            ))
        }
    }
}

/// Where [`write_rdma_write`] put the WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteWqe {
    /// The WQEBB it occupies in the ring (`start & (wqebbs - 1)`).
    pub slot: u32,
    /// The first 8 bytes of its ctrl segment, as stored (the 8-byte doorbell's value).
    pub doorbell: u64,
}

/// Writes the one-WQEBB WQE of an RDMA WRITE of `local` to `remote` at the SQ's `cur_post`,
/// records `wr_id` and advances `cur_post`; the doorbell record and doorbell are the caller's.
/// Same bytes and bookkeeping as [`crate::post::write_send`] of the equivalent [`crate::post::SendWr`].
///
/// Checks: the SQ has a free WQEBB ([`SqRing::reserve_one`]: `cur_post - tail < wqebbs`, the
/// tail read only when the credits it left run out); `None` if not, with nothing
/// written (the caller reports [`crate::post_refused::Refusal::SqFull`]). A one-WQEBB WQE never crosses the ring's end, and its slot is
/// `cur_post & (wqebbs - 1)`, so no other bounds check is needed. The caller checks the QP's
/// state and type (RC, able to send, `max_send_sge >= 1`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn write_rdma_write(
    sq: &mut SqRing,
    shared: &WqShared,
    tpl: &WriteTemplate,
    wr_id: u64,
    local: &Sge,
    remote: &RemoteAddr,
    flags: SendFlags,
) -> Option<WriteWqe> {
    // A free WQEBB (from the credits, or in use `cur_post - tail < wqebbs` when they ran out);
    // a full ring (or a bad tail past `cur_post`) refuses the post.
    if !sq.reserve_one(shared) {
        return None;
    }
    Some(write_rdma_write_reserved(
        sq, shared, tpl, wr_id, local, remote, flags,
    ))
}

/// [`write_rdma_write`] of a WQEBB already reserved ([`SqRing::reserve_one`] or
/// [`SqRing::take_credit`] returned true, and nothing moved `cur_post` since): writes the WQE,
/// records `wr_id`, advances `cur_post`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn write_rdma_write_reserved(
    sq: &mut SqRing,
    shared: &WqShared,
    tpl: &WriteTemplate,
    wr_id: u64,
    local: &Sge,
    remote: &RemoteAddr,
    flags: SendFlags,
) -> WriteWqe {
    let start = sq.cur_post;
    // The bookkeeping first, so that `wr_id` and the `WqShared` pointer are dead before the
    // WQE's words are computed (fewer values live at once: no callee-saved registers). Nobody
    // reads it before the doorbell: the poller retires this slot only on a CQE for it.
    sq.commit_reserved(shared, start, wr_id);
    compiler_fence(Ordering::Release);
    // `wqebbs` is a power of two, at least 1 (one WQEBB is reserved), so `wqebbs - 1` is the
    // ring's mask.
    let slot = start & (sq.wqebbs - 1);
    let p = sq.wqe_ptr(slot);
    // SAFETY: `slot < wqebbs`, so the 48 bytes at `p` lie in WQEBB `slot`, inside the ring
    // (`SqRing::wqe_ptr`); the slot is this poster's (the space check passed) and the device
    // does not read it before the doorbell. Unaligned stores: no alignment assumed.
    unsafe {
        // One segment at a time, each computed next to its stores (the compiler fences keep
        // the compiler from computing all six words first): fewer values live at once, so
        // the post needs no callee-saved registers. No instruction is emitted for them.
        let [c0, c1] = tpl.ctrl(start, flags);
        p.write_unaligned(c0);
        p.add(1).write_unaligned(c1);
        compiler_fence(Ordering::Release);
        let [r0, r1] = WriteTemplate::raddr(remote);
        p.add(2).write_unaligned(r0);
        p.add(3).write_unaligned(r1);
        compiler_fence(Ordering::Release);
        let [d0, d1] = WriteTemplate::data(local);
        p.add(4).write_unaligned(d0);
        p.add(5).write_unaligned(d1);
    }
    WriteWqe {
        slot,
        doorbell: tpl.ctrl(start, flags)[0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::post::PostError;
    use crate::post::{SendOp, SendWr, write_send, write_send_general};
    use crate::post_refused::{PostRefused, Refusal};
    use crate::wq::tests::TestRing;

    fn bytes(sq: &SqRing, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        sq.ring.read(0, &mut v);
        v
    }

    #[test]
    fn post_write_writes_the_same_wqe_and_bookkeeping_as_the_general_path() {
        let local = Sge {
            addr: 0x1122_3344_5566_7788,
            length: 0x0102_0304,
            lkey: 0xa0b0_c0d0,
        };
        let remote = RemoteAddr {
            addr: 0x8877_6655_4433_2211,
            rkey: 0x0f0e_0d0c,
        };
        for sig_all in [false, true] {
            let lim = SendLimits::new(0xab_cdef, false, 1, 0, sig_all);
            let tpl = WriteTemplate::new(&lim);
            for flags in 0..8u8 {
                let flags = SendFlags::from_bits_retain(flags);
                // Start near the u16 wrap of the WQE index and past one lap of the ring.
                for first in [0u32, 5, 0xfffe, 0x1_0003, u32::MAX - 1] {
                    let (mut ta, mut tb) = (TestRing::new(8 * 64), TestRing::new(8 * 64));
                    let (mut a, mut b) = (SqRing::new(ta.ring()), SqRing::new(tb.ring()));
                    let (sa, sb) = (WqShared::new(lim.qpn, 8, 0), WqShared::new(lim.qpn, 8, 0));
                    for (sq, sh) in [(&mut a, &sa), (&mut b, &sb)] {
                        sq.cur_post = first;
                        sq.commit(sh, first, 0, 0);
                        sh.complete_send(first as u16);
                    }
                    for k in 0..3u64 {
                        let w = write_rdma_write(&mut a, &sa, &tpl, 40 + k, &local, &remote, flags)
                            .unwrap();
                        let one = [local];
                        let wr = SendWr {
                            flags,
                            ..SendWr::new(40 + k, SendOp::Write { remote }, &one)
                        };
                        let g = write_send_general(&mut b, &sb, &lim, &wr).unwrap();
                        assert_eq!((w.slot, w.doorbell.to_be()), (g.slot, g.doorbell));
                        assert_eq!(g.ds, WRITE_DS);
                        assert_eq!(bytes(&a, 8 * 64), bytes(&b, 8 * 64), "{flags:?} at {first}");
                        assert_eq!(a.cur_post, b.cur_post);
                    }
                    let last = first.wrapping_add(2) as u16;
                    assert_eq!(sa.complete_send(last), sb.complete_send(last));
                    assert_eq!(sa.sq_tail(), sb.sq_tail());
                }
            }
        }
    }

    #[test]
    fn the_data_segment_words_are_the_hw_data_segment() {
        for (addr, length, lkey) in [
            (0x1122_3344_5566_7788u64, 0x0102_0304u32, 0xa0b0_c0d0u32),
            (0, 0, 0),
            (u64::MAX, u32::MAX, 1),
        ] {
            let want: [u64; 2] =
                zerocopy::transmute!(bypass_hw::wqe::DataSeg::new(length, lkey, addr));
            let local = Sge { addr, length, lkey };
            assert_eq!(WriteTemplate::data(&local), want);
        }
    }

    #[test]
    fn post_write_refuses_a_full_queue_without_writing() {
        let lim = SendLimits::new(0x12, false, 1, 0, false);
        let tpl = WriteTemplate::new(&lim);
        let mut t = TestRing::new(2 * 64);
        let mut sq = SqRing::new(t.ring());
        let sh = WqShared::new(0x12, 2, 0);
        let (l, r, f) = (Sge::default(), RemoteAddr::default(), SendFlags::SIGNALED);
        write_rdma_write(&mut sq, &sh, &tpl, 1, &l, &r, f).unwrap();
        write_rdma_write(&mut sq, &sh, &tpl, 2, &l, &r, f).unwrap();
        let before = bytes(&sq, 128);
        assert_eq!(write_rdma_write(&mut sq, &sh, &tpl, 3, &l, &r, f), None);
        assert_eq!(
            sq.free(sh.sq_tail()),
            0,
            "what PostRefused's SqFull reports"
        );
        let e = PostError::from(PostRefused::new(0x12, Refusal::SqFull));
        assert_eq!((bytes(&sq, 128), sq.cur_post), (before, 2));
        // The general path refuses it the same way.
        let one = [l];
        let wr = SendWr::new(3, SendOp::Write { remote: r }, &one);
        assert_eq!(write_send(&mut sq, &sh, &lim, &wr).unwrap_err(), e);
        // Retiring the first WQE makes room again.
        assert_eq!(sh.complete_send(0), 1);
        assert_eq!(
            write_rdma_write(&mut sq, &sh, &tpl, 3, &l, &r, f)
                .unwrap()
                .slot,
            0
        );
    }
}
