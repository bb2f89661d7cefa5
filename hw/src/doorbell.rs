//! Doorbell records (host memory the NIC reads) and doorbell words (what the driver writes to
//! the UAR page), for QPs, CQs and EQs.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`MLX5_RCV_DBR`, `MLX5_SND_DBR`,
//! `MLX5_CQ_DB_REQ_NOT_SOL`, `MLX5_CQ_DB_REQ_NOT`), `providers/mlx5/mlx5.h`
//! (`MLX5_CQ_SET_CI`, `MLX5_CQ_ARM_DB`), `providers/mlx5/cq.c` (`update_cons_index`,
//! `mlx5_arm_cq`), `providers/mlx5/qp.c` (`post_send_db`, `mlx5_post_recv`), and for the EQ
//! the kernel's `drivers/net/ethernet/mellanox/mlx5/core/lib/eq.h` `eq_update_ci` (rdma-core
//! `mlx5_vfio.c` `mlx5_eq_update_ci` does the same).
//!
//! Owns: [`QpDbRecord`], [`CqDbRecord`] and the pure functions computing the values written.
//! Must not: do the MMIO or the barriers (the driver's), or know UAR offsets ([`crate::uar`]).

use zerocopy::byteorder::big_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::impl_view;

/// `MLX5_RCV_DBR` (mlx5dv.h): index of the receive counter (BE32) in a QP doorbell record.
pub const MLX5_RCV_DBR: usize = 0;
/// `MLX5_SND_DBR` (mlx5dv.h): index of the send counter (BE32) in a QP doorbell record.
pub const MLX5_SND_DBR: usize = 1;
/// `MLX5_CQ_SET_CI` (rdma-core `mlx5.h`): index of the consumer-index word of a CQ record.
pub const MLX5_CQ_SET_CI: usize = 0;
/// `MLX5_CQ_ARM_DB` (rdma-core `mlx5.h`): index of the arm word of a CQ record.
pub const MLX5_CQ_ARM_DB: usize = 1;
/// `MLX5_CQ_DB_REQ_NOT_SOL` (mlx5dv.h): arm command "next solicited completion only".
pub const MLX5_CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// `MLX5_CQ_DB_REQ_NOT` (mlx5dv.h): arm command "next completion".
pub const MLX5_CQ_DB_REQ_NOT: u32 = 0;

/// The QP doorbell record: two big-endian 32-bit counters in host memory (8 bytes).
///
/// rdma-core `qp.c`: `qp->db[MLX5_RCV_DBR] = htobe32(rq.head & 0xffff)` after posting receives
/// (there is no MMIO for the RQ) and `qp->db[MLX5_SND_DBR] = htobe32(sq.cur_post & 0xffff)`
/// before the send doorbell.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct QpDbRecord {
    /// `db[MLX5_RCV_DBR]`: the RQ producer counter (16 bits used).
    pub rcv: U32,
    /// `db[MLX5_SND_DBR]`: the SQ producer counter (16 bits used).
    pub snd: U32,
}

impl QpDbRecord {
    /// Sets the receive counter to `head & 0xffff`.
    pub fn set_rq_head(&mut self, head: u32) {
        self.rcv.set(head & 0xffff);
    }
    /// Sets the send counter to `cur_post & 0xffff`.
    pub fn set_sq_pi(&mut self, cur_post: u32) {
        self.snd.set(cur_post & 0xffff);
    }
    /// The receive counter.
    pub fn rq_head(&self) -> u16 {
        self.rcv.get() as u16
    }
    /// The send counter.
    pub fn sq_pi(&self) -> u16 {
        self.snd.get() as u16
    }
}

/// The CQ doorbell record: two big-endian 32-bit words in host memory (8 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CqDbRecord {
    /// `dbrec[MLX5_CQ_SET_CI]`: the consumer index (24 bits).
    pub set_ci: U32,
    /// `dbrec[MLX5_CQ_ARM_DB]`: the last arm word ([`cq_arm_value`]).
    pub arm: U32,
}

impl CqDbRecord {
    /// What `update_cons_index` writes: `dbrec[MLX5_CQ_SET_CI] = htobe32(ci & 0xffffff)`.
    pub fn set_ci(&mut self, consumer_index: u32) {
        self.set_ci.set(cq_ci_value(consumer_index));
    }
    /// The consumer index (24 bits).
    pub fn ci(&self) -> u32 {
        self.set_ci.get() & 0x00ff_ffff
    }
    /// What `mlx5_arm_cq` writes to the record before it rings the UAR:
    /// `dbrec[MLX5_CQ_ARM_DB] = htobe32(sn << 28 | cmd | ci)`.
    pub fn set_arm(&mut self, arm_sn: u32, solicited: bool, consumer_index: u32) {
        self.arm
            .set(cq_arm_value(arm_sn, solicited, consumer_index));
    }
    /// The arm sequence number (bits 29:28 of the arm word).
    pub fn arm_sn(&self) -> u32 {
        (self.arm.get() >> 28) & 3
    }
    /// The arm command (bits 27:24: 1 = solicited only).
    pub fn arm_cmd(&self) -> u32 {
        self.arm.get() & (0xf << 24)
    }
    /// The consumer index in the arm word.
    pub fn arm_ci(&self) -> u32 {
        self.arm.get() & 0x00ff_ffff
    }
}

/// The value of the CQ record's CI word: `cons_index & 0xffffff` (`update_cons_index`).
pub const fn cq_ci_value(consumer_index: u32) -> u32 {
    consumer_index & 0x00ff_ffff
}

/// The arm command for `solicited` (`MLX5_CQ_DB_REQ_NOT_SOL` or `MLX5_CQ_DB_REQ_NOT`).
pub const fn cq_arm_cmd(solicited: bool) -> u32 {
    if solicited {
        MLX5_CQ_DB_REQ_NOT_SOL
    } else {
        MLX5_CQ_DB_REQ_NOT
    }
}

/// The arm word `sn << 28 | cmd | ci` of `mlx5_arm_cq` (rdma-core `cq.c`), with
/// `sn = arm_sn & 3` and `ci = cons_index & 0xffffff`.
pub const fn cq_arm_value(arm_sn: u32, solicited: bool, consumer_index: u32) -> u32 {
    ((arm_sn & 3) << 28) | cq_arm_cmd(solicited) | (consumer_index & 0x00ff_ffff)
}

/// The 64-bit CQ arm doorbell `mlx5_arm_cq` writes big-endian (`mmio_write64_be`) to
/// `uar + MLX5_CQ_DOORBELL`: the arm word in the high half, the CQ number (`htobe32(cq->cqn)`,
/// unmasked as rdma-core writes it) in the low half.
pub const fn cq_arm_doorbell(arm_sn: u32, solicited: bool, consumer_index: u32, cqn: u32) -> u64 {
    ((cq_arm_value(arm_sn, solicited, consumer_index) as u64) << 32) | cqn as u64
}

/// The bytes of [`cq_arm_doorbell`] in the order they reach the device.
pub const fn cq_arm_doorbell_bytes(
    arm_sn: u32,
    solicited: bool,
    consumer_index: u32,
    cqn: u32,
) -> [u8; 8] {
    cq_arm_doorbell(arm_sn, solicited, consumer_index, cqn).to_be_bytes()
}

/// The EQ doorbell word `(ci & 0xffffff) | eqn << 24`, written big-endian (32 bits) to
/// `uar + 0x40` (update and arm) or `uar + 0x48` (update only): kernel `eq_update_ci`.
pub const fn eq_doorbell_value(consumer_index: u32, eqn: u8) -> u32 {
    (consumer_index & 0x00ff_ffff) | ((eqn as u32) << 24)
}

/// The bytes of [`eq_doorbell_value`] in the order they reach the device.
pub const fn eq_doorbell_bytes(consumer_index: u32, eqn: u8) -> [u8; 4] {
    eq_doorbell_value(consumer_index, eqn).to_be_bytes()
}

impl_view! {
    QpDbRecord => "mlx5_qp_dbrec",
    CqDbRecord => "mlx5_cq_dbrec",
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn qp_record_keeps_16_bits() {
        let mut r = QpDbRecord::new_zeroed();
        r.set_rq_head(0x1_2345);
        r.set_sq_pi(0xabcd_ef01);
        assert_eq!(r.as_bytes(), &[0, 0, 0x23, 0x45, 0, 0, 0xef, 0x01]);
        assert_eq!((r.rq_head(), r.sq_pi()), (0x2345, 0xef01));
    }

    #[test]
    fn cq_record_and_arm_match_mlx5_arm_cq() {
        let mut r = CqDbRecord::new_zeroed();
        r.set_ci(0x1234_5678);
        r.set_arm(6, true, 0x1234_5678);
        // sn = 6 & 3 = 2 -> 0x2000_0000; cmd = 1 << 24; ci = 0x345678.
        assert_eq!(
            r.as_bytes(),
            &[0x00, 0x34, 0x56, 0x78, 0x21, 0x34, 0x56, 0x78]
        );
        assert_eq!(
            (r.ci(), r.arm_sn(), r.arm_cmd(), r.arm_ci()),
            (0x345678, 2, MLX5_CQ_DB_REQ_NOT_SOL, 0x345678)
        );
        assert_eq!(cq_arm_doorbell(1, false, 5, 0x77), 0x1000_0005_0000_0077);
        assert_eq!(
            cq_arm_doorbell_bytes(1, false, 5, 0x77),
            [0x10, 0, 0, 5, 0, 0, 0, 0x77]
        );
    }

    #[test]
    fn eq_word() {
        assert_eq!(eq_doorbell_value(0x0100_0005, 3), 0x0300_0005);
        assert_eq!(eq_doorbell_bytes(5, 0xff), [0xff, 0, 0, 5]);
    }
}
