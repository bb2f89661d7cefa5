//! The doorbell side of a UAR page: which BlueFlame register ("bfreg") a QP rings, the
//! double-buffer toggle, whether BlueFlame is allowed at all (`BYPASS_SHUT_UP_BF`). Which
//! register a QP gets is `bfregs.rs`'s: a dedicated one (its toggle the QP's alone, no lock), a
//! shared one (rung through a locked MMIO object that keeps the register's toggle), or bfreg 0
//! of the driver's page, with 8-byte doorbells (single atomic stores, no lock either).
//!
//! Follows rdma-core `providers/mlx5/mlx5.c` (bfreg `k` at `0x800 + k * bf_reg_size`,
//! `buf_size = bf_reg_size / 2`, bfreg 0 keeps `buf_size = 0`: never BlueFlame;
//! `MLX5_SHUT_UP_BF`, here `BYPASS_SHUT_UP_BF`, read once per QP creation) and `qp.c`
//! `post_send_db` (BlueFlame when `nreq == 1 && buf_size && 1 < ds <= buf_size / 16`, with
//! `prefer_bf`; `bf->offset ^= bf->buf_size`).
//!
//! Owns: [`Bfreg`], [`BfregClass`], [`shut_up_bf`], [`MmioHandle`] (the backend's MMIO resolved once for the
//! data path). Must not: allocate UAR pages (`bfregs.rs`), write the doorbell sequence
//! (`doorbell.rs`) or build WQEs.

use core::ptr::NonNull;
use std::sync::Arc;

use bypass_hw::uar::{bf_buf_size, bfreg_offset, uar_bar_offset};

use crate::backend::Mmio;

/// The device's MMIO as the data path rings it: resolved once (at QP creation) to the
/// backend object itself, so a doorbell is one indirect call through its vtable, not the
/// `Arc<dyn Mmio>` pointer arithmetic on every post. Holds the `Arc`, so the object lives as
/// long as this handle. The data path holds nothing else of the backend.
#[derive(Clone)]
pub struct MmioHandle {
    obj: NonNull<dyn Mmio>,
    _keep: Arc<dyn Mmio>,
}

impl std::fmt::Debug for MmioHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmioHandle").finish_non_exhaustive()
    }
}

// SAFETY: `obj` points at the `dyn Mmio` that `_keep` owns, and `Mmio: Send + Sync`; the
// handle only gives out `&dyn Mmio`, exactly what sharing the `Arc` would.
unsafe impl Send for MmioHandle {}
// SAFETY: as for `Send`.
unsafe impl Sync for MmioHandle {}

impl MmioHandle {
    /// The handle of `backend`'s MMIO.
    pub fn new(backend: Arc<dyn Mmio>) -> Self {
        let obj = NonNull::from(&*backend);
        Self {
            obj,
            _keep: backend,
        }
    }

    /// The backend's MMIO.
    #[inline(always)]
    pub fn get(&self) -> &dyn Mmio {
        // SAFETY: `obj` points into the allocation `_keep` holds, which lives at least as long
        // as `self`; only shared references are ever made from it.
        unsafe { self.obj.as_ref() }
    }
}

/// Bfregs per UAR page that QPs use (`MLX5_NUM_NON_FP_BFREGS_PER_UAR`).
pub const BFREGS_PER_UAR: usize = 2;

/// The kind of bfreg a QP got (its research view: `Qp::bfreg().class()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BfregClass {
    /// A low-latency bfreg of its own: BlueFlame, no lock.
    LowLatency,
    /// A medium-class bfreg shared with other QPs: BlueFlame for one-WQEBB WQEs, each doorbell
    /// under the register's lock.
    Shared,
    /// The driver's page, bfreg 0: 8-byte doorbells only (BlueFlame off, or no page left).
    NoBlueFlame,
}

/// The environment variable that turns BlueFlame off (rdma-core: `MLX5_SHUT_UP_BF`).
pub const SHUT_UP_BF_ENV: &str = "BYPASS_SHUT_UP_BF";

/// True when `BYPASS_SHUT_UP_BF` is set to anything but `0` (rdma-core `mlx5.c`:
/// `if (env && strcmp(env, "0")) shut_up_bf = 1`). Read on the control path only.
pub fn shut_up_bf() -> bool {
    std::env::var_os(SHUT_UP_BF_ENV).is_some_and(|v| v != "0")
}

/// One BlueFlame register of a UAR page, as a QP rings it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bfreg {
    uar_index: u32,
    index: usize,
    /// BAR0 offset of the half the next doorbell goes to: `reg + offset` in rdma-core's terms
    /// (the register's first half plus the half in use, 0 or `buf_size`).
    cur: u64,
    /// `reg ^ (reg + buf_size)`: `cur ^= flip` moves `cur` to the other half
    /// (`bf->offset ^= bf->buf_size`) in one operation, whatever the register's alignment.
    flip: u64,
    /// Bytes per half (0 for bfreg 0, or when BlueFlame is off).
    buf_size: usize,
    /// Largest WQE (in 16-byte units) a lone post copies with BlueFlame: `buf_size / 16`.
    bf_max_ds: u8,
    /// `bf_max_ds - 1` (0 when it is below 2), so that the data path's `1 < ds <= bf_max_ds` is
    /// the single unsigned comparison `ds - 2 < bf_span` (wrapping: `ds` of 0 or 1 wraps high).
    bf_span: u8,
    /// Dedicated, shared or no BlueFlame (`bfregs.rs`); read on the control path only.
    class: BfregClass,
}

impl Bfreg {
    /// Register `index` (0..4) of UAR page `uar_index`, whose registers are `bf_reg_size` bytes
    /// (HCA cap `1 << log_bf_reg_size`). `blueflame = false` keeps the 8-byte doorbell only.
    ///
    /// Errors: a register index or size the page layout does not allow (see
    /// [`bypass_hw::uar::bfreg_offset`]).
    pub fn new(
        uar_index: u32,
        index: usize,
        bf_reg_size: usize,
        blueflame: bool,
    ) -> Result<Self, bypass_hw::Error> {
        let reg = uar_bar_offset(uar_index) + bfreg_offset(index, bf_reg_size)? as u64;
        let buf_size = if blueflame {
            bf_buf_size(index, bf_reg_size)?
        } else {
            0
        };
        Ok(Self {
            uar_index,
            index,
            cur: reg,
            flip: reg ^ (reg + buf_size as u64),
            buf_size,
            bf_max_ds: (buf_size / 16).min(u8::MAX as usize) as u8,
            bf_span: ((buf_size / 16).min(u8::MAX as usize) as u8).saturating_sub(1),
            class: if buf_size == 0 {
                BfregClass::NoBlueFlame
            } else {
                BfregClass::LowLatency
            },
        })
    }

    /// Register `index` (0 or 1) of a UAR page allocated for QPs, as rdma-core's dynamic UARs
    /// lay it out (`mlx5_insert_dyn_uuars`: both registers of the page carry BlueFlame,
    /// `buf_size = bf_reg_size / 2`), taking BlueFlame for WQEs of at most `max_ds` 16-byte
    /// units (and at most `buf_size / 16`), of `class`.
    ///
    /// Errors: a register index above 1 or a size the page layout does not allow.
    pub fn dynamic(
        uar_index: u32,
        index: usize,
        bf_reg_size: usize,
        max_ds: u8,
        class: BfregClass,
    ) -> Result<Self, bypass_hw::Error> {
        if index >= BFREGS_PER_UAR {
            return Err(bypass_hw::Error::IndexOutOfRange {
                what: "QP bfreg of a UAR page",
                index,
                len: BFREGS_PER_UAR,
            });
        }
        let reg = uar_bar_offset(uar_index) + bfreg_offset(index, bf_reg_size)? as u64;
        let buf_size = bf_reg_size / 2;
        let max = (buf_size / 16).min(usize::from(max_ds)) as u8;
        Ok(Self {
            uar_index,
            index,
            cur: reg,
            flip: reg ^ (reg + buf_size as u64),
            buf_size,
            bf_max_ds: max,
            bf_span: max.saturating_sub(1),
            class,
        })
    }

    /// Which kind of register this is: dedicated low-latency, shared, or no BlueFlame.
    pub fn class(&self) -> BfregClass {
        self.class
    }

    /// The UAR page.
    pub fn uar_index(&self) -> u32 {
        self.uar_index
    }

    /// The register's index in the page (0 = doorbells only).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Bytes of one BlueFlame half (0: this register never takes BlueFlame).
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// BAR0 offset of the half the next doorbell goes to.
    #[inline(always)]
    pub fn doorbell_offset(&self) -> u64 {
        self.cur
    }

    /// Whether a lone WQE of `ds` segments goes by BlueFlame (rdma-core `post_send_db`, with
    /// `prefer_bf`: every WQE that fits, not only inline ones).
    #[inline(always)]
    pub fn use_blueflame(&self, nreq: usize, ds: u8) -> bool {
        nreq == 1 && self.use_blueflame_one(ds)
    }

    /// [`Bfreg::use_blueflame`] for a post of one WQE (rdma-core `post_send_db`, same rule as
    /// [`bypass_hw::uar::would_use_blueflame`] with `nreq == 1`, from the precomputed limit).
    #[inline(always)]
    pub fn use_blueflame_one(&self, ds: u8) -> bool {
        ds.wrapping_sub(2) < self.bf_span
    }

    /// Largest WQE (in 16-byte units) a lone post copies with BlueFlame (0: never).
    pub fn bf_max_ds(&self) -> u8 {
        self.bf_max_ds
    }
    /// Switches to the other half (`bf->offset ^= bf->buf_size`).
    #[inline(always)]
    pub fn toggle(&mut self) {
        self.cur ^= self.flip;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfreg_zero_never_blueflames_and_others_toggle_halves() {
        let mut b0 = Bfreg::new(8, 0, 512, true).unwrap();
        assert_eq!((b0.doorbell_offset(), b0.buf_size()), (8 * 4096 + 0x800, 0));
        assert!(!b0.use_blueflame(1, 4));
        b0.toggle();
        assert_eq!(b0.doorbell_offset(), 8 * 4096 + 0x800);
        let mut b1 = Bfreg::new(8, 1, 512, true).unwrap();
        assert_eq!(b1.doorbell_offset(), 8 * 4096 + 0xa00);
        assert!(b1.use_blueflame(1, 3));
        assert!(
            !b1.use_blueflame(2, 3),
            "a post list rings one plain doorbell"
        );
        assert!(!b1.use_blueflame(1, 17), "larger than a 256-byte half");
        b1.toggle();
        assert_eq!(b1.doorbell_offset(), 8 * 4096 + 0xb00);
        b1.toggle();
        assert_eq!(b1.doorbell_offset(), 8 * 4096 + 0xa00);
        for ds in 0..=255u8 {
            assert_eq!(
                b1.use_blueflame_one(ds),
                ds > 1 && ds <= 16,
                "ds {ds}: rdma-core's 1 < ds <= buf_size / 16"
            );
            assert!(!b0.use_blueflame_one(ds));
        }
        let off = Bfreg::new(8, 1, 512, false).unwrap();
        assert!(!off.use_blueflame(1, 3));
        assert!(Bfreg::new(8, 4, 512, true).is_err());
        assert_eq!(off.class(), BfregClass::NoBlueFlame);
        assert_eq!(b1.class(), BfregClass::LowLatency);
    }

    #[test]
    fn dynamic_registers_both_take_blueflame_and_shared_ones_one_wqebb() {
        let mut d0 = Bfreg::dynamic(9, 0, 512, u8::MAX, BfregClass::LowLatency).unwrap();
        assert_eq!(
            (d0.doorbell_offset(), d0.buf_size()),
            (9 * 4096 + 0x800, 256)
        );
        assert!(d0.use_blueflame_one(16) && !d0.use_blueflame_one(17));
        d0.toggle();
        assert_eq!(d0.doorbell_offset(), 9 * 4096 + 0x900);
        let s1 = Bfreg::dynamic(9, 1, 512, 4, BfregClass::Shared).unwrap();
        assert_eq!(s1.doorbell_offset(), 9 * 4096 + 0xa00);
        assert!(s1.use_blueflame_one(4) && !s1.use_blueflame_one(5));
        assert_eq!(s1.class(), BfregClass::Shared);
        assert!(Bfreg::dynamic(9, 2, 512, 4, BfregClass::Shared).is_err());
    }
}
