//! The UAR ("user access region") page: where in BAR0 a UAR lives and where in it each
//! doorbell and BlueFlame register is.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`MLX5_CQ_DOORBELL`), `providers/mlx5/mlx5.c`
//! (bfreg setup in `mlx5_map_uar` / `mlx5_init_context`: `bf->reg = uar + MLX5_BF_OFFSET +
//! j * bf_reg_size`, `buf_size = bf_reg_size / 2` except for bfreg 0), `kernel-headers/rdma/
//! mlx5-abi.h` (`MLX5_NUM_BFREGS_PER_UAR`), `providers/mlx5/qp.c` (`post_send_db`: `bf->offset
//! ^= bf->buf_size`), rdma-core `mlx5_vfio.c` and the kernel's `core/lib/eq.h` `eq_update_ci`
//! for the EQ doorbell (`eq->doorbell + (arm ? 0 : 2)` dwords from `MLX5_EQ_DOORBEL_OFFSET`).
//!
//! Owns: the offsets and the pure arithmetic on them.
//! Must not: map or write anything (the driver's backend does the MMIO).

use crate::error::{Error, Result};

/// `MLX5_ADAPTER_PAGE_SIZE` (kernel `device.h`, rdma-core `mlx5.h`): the size of a UAR page.
pub const ADAPTER_PAGE_SIZE: usize = 4096;
/// `MLX5_CQ_DOORBELL` (mlx5dv.h): offset of the 64-bit CQ arm doorbell in a UAR page.
pub const MLX5_CQ_DOORBELL: usize = 0x20;
/// `MLX5_EQ_DOORBEL_OFFSET` (kernel `mlx5_ifc.h` / rdma-core `mlx5_ifc.h`, sic): the EQ doorbell
/// that updates the consumer index and arms the EQ.
pub const EQ_DOORBELL_ARM: usize = 0x40;
/// The EQ doorbell that only updates the consumer index: two dwords after
/// [`EQ_DOORBELL_ARM`] (kernel `eq_update_ci`: `eq->doorbell + (arm ? 0 : 2)`; rdma-core
/// `mlx5_vfio.c` the same).
pub const EQ_DOORBELL_NO_ARM: usize = 0x48;
/// `DB_BF_DBR_LESS_BUF_OFFSET` (rdma-core `tests/mlx5_base.py`): the "DBR-less" BlueFlame buffer
/// used with `send_dbr_mode`.
pub const DB_BF_DBR_LESS_BUF_OFFSET: usize = 0x600;
/// `MLX5_BF_OFFSET` (rdma-core `mlx5.h`): the first BlueFlame register in a UAR page.
pub const BF_OFFSET: usize = 0x800;
/// `MLX5_NUM_BFREGS_PER_UAR` (`mlx5-abi.h`): BlueFlame registers ("bfregs") per UAR page.
pub const NUM_BFREGS_PER_UAR: usize = 4;

/// Offset of UAR page `uar_index` in BAR0: `uar_index * 4096` (rdma-core `mlx5_vfio.c`, UAR
/// VA = bar + uarn * `MLX5_ADAPTER_PAGE_SIZE`).
pub const fn uar_bar_offset(uar_index: u32) -> u64 {
    uar_index as u64 * ADAPTER_PAGE_SIZE as u64
}

/// Offset of the EQ doorbell in the UAR page: [`EQ_DOORBELL_ARM`] or [`EQ_DOORBELL_NO_ARM`].
pub const fn eq_doorbell_offset(arm: bool) -> usize {
    if arm {
        EQ_DOORBELL_ARM
    } else {
        EQ_DOORBELL_NO_ARM
    }
}

/// Checks a `bf_reg_size` (from the kernel's `resp->bf_reg_size` or the HCA cap
/// `log_bf_reg_size`): a non-zero multiple of 64 with all bfregs inside the page.
fn check_bf_reg_size(bf_reg_size: usize) -> Result<()> {
    if bf_reg_size == 0
        || !bf_reg_size.is_multiple_of(64)
        || bf_reg_size > (ADAPTER_PAGE_SIZE - BF_OFFSET) / NUM_BFREGS_PER_UAR
    {
        return Err(Error::Malformed {
            what: "bf_reg_size",
            reason: "must be a non-zero multiple of 64 with 4 registers fitting in the 2 KiB after 0x800",
        });
    }
    Ok(())
}

fn check_bfreg(k: usize) -> Result<()> {
    if k >= NUM_BFREGS_PER_UAR {
        return Err(Error::IndexOutOfRange {
            what: "bfreg",
            index: k,
            len: NUM_BFREGS_PER_UAR,
        });
    }
    Ok(())
}

/// Offset of BlueFlame register `k` (0..4) in the UAR page: `0x800 + k * bf_reg_size`
/// (rdma-core `mlx5.c`).
///
/// Errors: [`Error::IndexOutOfRange`] for `k >= 4`; [`Error::Malformed`] for a `bf_reg_size`
/// that is zero, not a multiple of 64, or too large for four registers to fit in the page.
pub fn bfreg_offset(k: usize, bf_reg_size: usize) -> Result<usize> {
    check_bfreg(k)?;
    check_bf_reg_size(bf_reg_size)?;
    Ok(BF_OFFSET + k * bf_reg_size)
}

/// The BlueFlame buffer size of register `k`: `bf_reg_size / 2` (each register is two halves
/// used alternately), and 0 for register 0, which is never used for BlueFlame and only takes
/// 8-byte doorbells (rdma-core `mlx5.c`: `uuarn == 0` keeps `buf_size = 0`).
///
/// Errors: as [`bfreg_offset`].
pub fn bf_buf_size(k: usize, bf_reg_size: usize) -> Result<usize> {
    check_bfreg(k)?;
    check_bf_reg_size(bf_reg_size)?;
    Ok(if k == 0 { 0 } else { bf_reg_size / 2 })
}

/// The next offset within a BlueFlame register after a doorbell: `offset ^ buf_size`
/// (rdma-core `qp.c` `post_send_db`), alternating between the two halves (or staying at 0
/// for register 0).
pub const fn next_bf_offset(offset: usize, buf_size: usize) -> usize {
    offset ^ buf_size
}

/// Whether rdma-core's `post_send_db` would use BlueFlame (copy the whole WQE) rather than an
/// 8-byte doorbell, given the register's `buf_size` and the WQE's `ds`: one WQE in the batch,
/// a BlueFlame-capable register, the WQE inline or BF preferred, and `1 < ds <= buf_size / 16`.
pub const fn would_use_blueflame(
    nreq: usize,
    buf_size: usize,
    inline_or_prefer_bf: bool,
    ds: u8,
) -> bool {
    nreq == 1 && buf_size != 0 && inline_or_prefer_bf && ds > 1 && (ds as usize) <= buf_size / 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        assert_eq!(uar_bar_offset(3), 0x3000);
        assert_eq!(uar_bar_offset(u32::MAX), 0xffff_ffff * 4096);
        assert_eq!(eq_doorbell_offset(true), 0x40);
        assert_eq!(eq_doorbell_offset(false), 0x48);
        assert_eq!(bfreg_offset(0, 512).unwrap(), 0x800);
        assert_eq!(bfreg_offset(3, 512).unwrap(), 0xe00);
        assert!(bfreg_offset(4, 512).is_err());
        assert!(bfreg_offset(1, 0).is_err());
        assert!(bfreg_offset(1, 1024).is_err());
        assert_eq!(bf_buf_size(0, 512).unwrap(), 0);
        assert_eq!(bf_buf_size(1, 512).unwrap(), 256);
        assert_eq!(next_bf_offset(0, 256), 256);
        assert_eq!(next_bf_offset(256, 256), 0);
        assert_eq!(next_bf_offset(0, 0), 0);
    }

    #[test]
    fn blueflame_choice() {
        assert!(would_use_blueflame(1, 256, true, 4));
        assert!(!would_use_blueflame(1, 0, true, 4));
        assert!(!would_use_blueflame(2, 256, true, 4));
        assert!(!would_use_blueflame(1, 256, true, 1));
        assert!(!would_use_blueflame(1, 256, true, 17));
        assert!(would_use_blueflame(1, 256, true, 16));
    }
}
