//! The send doorbell: the one sequence every send post form ends with (`post_send`,
//! `post_send_list`, `post_write`, a `WriteBatch`), after its WQEs are in the ring.
//!
//! Follows rdma-core `providers/mlx5/qp.c` `post_send_db`: WQE stores →
//! `udma_to_device_barrier` → doorbell record `sq.cur_post & 0xffff` → `mmio_wc_start` →
//! BlueFlame copy of the WQE (64 bytes at a time, `mlx5_bf_copy` / `mmio_memcpy_x64`, when the
//! post holds one WQE of `1 < ds <= buf_size / 16` on a register that has BlueFlame) or the
//! 8-byte doorbell (the ctrl segment's first 8 bytes) → `mmio_flush_writes` → the BlueFlame
//! half toggled (`bf->offset ^= bf->buf_size`). The register and its toggle are the QP's alone
//! (`uar.rs`), or, when shared with other QPs, locked inside its MMIO object (`bfregs.rs`), so
//! this sequence has no lock of its own.
//!
//! Owns: [`SendDoorbell`]. Must not: write WQEs (`wqe.rs`), check QP state (`qp.rs`), or
//! allocate, lock, make syscalls or format.

use crate::barrier::{mmio_flush_writes, mmio_wc_start, udma_to_device_barrier};
use crate::uar::{Bfreg, MmioHandle};
use crate::wq::{SqRing, Word32};
use crate::wqe::Written;

/// What a QP rings its send doorbell with: the doorbell record's send counter word
/// (`MLX5_SND_DBR`), its BlueFlame register and the device's MMIO.
#[derive(Debug)]
pub struct SendDoorbell {
    dbr: Word32,
    bfreg: Bfreg,
    mmio: MmioHandle,
}

impl SendDoorbell {
    /// The doorbell of a QP whose record's send word is `dbr`, ringing `bfreg` through `mmio`.
    pub fn new(dbr: Word32, bfreg: Bfreg, mmio: MmioHandle) -> Self {
        Self { dbr, bfreg, mmio }
    }

    /// The BlueFlame register.
    pub fn bfreg(&self) -> &Bfreg {
        &self.bfreg
    }

    /// Announces the WQEs written to `sq` since the last doorbell, the last of them `last`
    /// (`lone`: the only one of this post, which BlueFlame may carry), exactly as rdma-core
    /// `post_send_db` (see the module docs).
    #[inline(always)]
    pub fn ring(&mut self, sq: &SqRing, last: Written, lone: bool) {
        // The WQEs must be in memory before the device can learn they exist.
        udma_to_device_barrier();
        self.dbr.write_be(sq.cur_post & 0xffff);
        // The doorbell record must be visible before the doorbell (the device may read the
        // record when the doorbell arrives).
        mmio_wc_start();
        let reg = self.bfreg.doorbell_offset();
        // The next post rings the other half. Toggled before the MMIO call rather than after
        // the flush: only the next post reads it, and it is this poster's alone (`&mut`), so
        // nothing of `self` needs to stay live across the call.
        self.bfreg.toggle();
        let mmio = self.mmio.get();
        if lone && self.bfreg.use_blueflame_one(last.ds()) {
            let p = sq.wqe_ptr(last.slot()).cast::<[u64; 8]>();
            if last.wqebbs() == 1 {
                // SAFETY: `last.slot() < sq.wqebbs` (a `Written` is made only by `wqe.rs`, with
                // a masked slot), so the 64 bytes at `p` are inside the ring, 8-byte aligned
                // (the SQ's start is, checked at QP creation); this post wrote them and nothing
                // writes them until their completion retires them, after this call returns.
                // The BlueFlame register `reg` is this QP's, and the WQE it copies is this post's.
                unsafe { mmio.write_bf(reg, &*p) };
            } else if last.slot() + last.wqebbs() <= sq.wqebbs {
                for k in 0..last.wqebbs() as usize {
                    // SAFETY: as above, for blocks `slot..slot + wqebbs`, inside the ring
                    // (checked just above).
                    unsafe { mmio.write_bf(reg + 64 * k as u64, &*p.add(k)) };
                }
            } else {
                self.blueflame_wrapped(sq, reg, last.start(), last.wqebbs());
            }
        } else {
            // SAFETY: this QP's doorbell register; the doorbell names WQEs this post wrote into
            // the QP's ring, which stays mapped while the QP lives.
            unsafe { mmio.write64(reg, last.doorbell()) };
        }
        // Flush the write-combining buffer so this doorbell leaves before any later one.
        mmio_flush_writes();
    }

    /// The BlueFlame copy of a WQE that continues at the start of the SQ (rare: only a
    /// multi-WQEBB WQE at the ring's end), block by block through the ring's masked reads.
    #[cold]
    fn blueflame_wrapped(&self, sq: &SqRing, reg: u64, start: u32, wqebbs: u32) {
        for k in 0..wqebbs {
            let off = sq.offset_of(start.wrapping_add(k));
            let block = sq.ring.read_block64(off);
            // SAFETY: this QP's BlueFlame register, carrying a copy of a WQE this post wrote.
            unsafe { self.mmio.get().write_bf(reg + 64 * u64::from(k), &block) };
        }
    }
}
