//! Completion queue commands: the CQ context (`cqc`) and CREATE_CQ / QUERY_CQ / MODIFY_CQ /
//! DESTROY_CQ, plus the CQ status, CQE size and arm-command values.
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_cqc_bits`,
//! `mlx5_ifc_create_cq_in_bits` and friends; the field table in `tests/data/mlx5_ifc_fields.tsv`
//! pins the kernel version) and `include/linux/mlx5/cq.h` (arm commands, modify field-select bits).
//! rdma-core's `tests/mlx5_base.py` (`Mlx5DevxRcResources.create_cq`) shows the fields a minimal CQ
//! sets.
//!
//! Owns: the CQ command layouts (the trailing `pas[]` list helpers are in [`super::list`]).
//! Must not: keep CQ state or ring doorbells (that is the driver's `cq` and the sim's engine).

use crate::cmd::list::{be64_list, with_be64_list};
use crate::error::Result;

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// `cqc.status` values (kernel mlx5_ifc.h `MLX5_CQC_STATUS_*`).
pub mod status {
    /// `MLX5_CQC_STATUS_OK`.
    pub const OK: u8 = 0x0;
    /// `MLX5_CQC_STATUS_CQ_OVERFLOW`: the consumer fell a whole ring behind.
    pub const CQ_OVERFLOW: u8 = 0x9;
    /// `MLX5_CQC_STATUS_CQ_WRITE_FAIL`: the device could not write a CQE (bad PAS / IOMMU).
    pub const CQ_WRITE_FAIL: u8 = 0xa;
}

/// `cqc.cqe_sz` encoding (kernel mlx5_ifc.h `MLX5_CQC_CQE_SZ_*`).
pub mod cqe_sz {
    /// `MLX5_CQC_CQE_SZ_64_BYTES`.
    pub const BYTES_64: u8 = 0x0;
    /// `MLX5_CQC_CQE_SZ_128_BYTES`.
    pub const BYTES_128: u8 = 0x1;

    /// The CQE size in bytes for a `cqe_sz` code, or `None` for a reserved code.
    pub const fn bytes(code: u8) -> Option<usize> {
        match code {
            BYTES_64 => Some(64),
            BYTES_128 => Some(128),
            _ => None,
        }
    }

    /// The `cqe_sz` code for a CQE size in bytes (64 or 128).
    pub const fn from_bytes(bytes: usize) -> Option<u8> {
        match bytes {
            64 => Some(BYTES_64),
            128 => Some(BYTES_128),
            _ => None,
        }
    }
}

/// `cqc.st` (arm state) values (kernel mlx5_ifc.h `MLX5_CQC_ST_*`).
pub mod st {
    /// `MLX5_CQC_ST_SOLICITED_NOTIFICATION_REQUEST_ARMED`.
    pub const SOLICITED_NOTIFICATION_REQUEST_ARMED: u8 = 0x6;
    /// `MLX5_CQC_ST_NOTIFICATION_REQUEST_ARMED`.
    pub const NOTIFICATION_REQUEST_ARMED: u8 = 0x9;
    /// `MLX5_CQC_ST_FIRED`: an event was generated; the CQ must be re-armed for another.
    pub const FIRED: u8 = 0xa;
}

/// `cqc.cq_period_mode` values (kernel mlx5_ifc.h `MLX5_CQ_PERIOD_MODE_*`).
pub mod period_mode {
    /// `MLX5_CQ_PERIOD_MODE_START_FROM_EQE`.
    pub const START_FROM_EQE: u8 = 0x0;
    /// `MLX5_CQ_PERIOD_MODE_START_FROM_CQE`.
    pub const START_FROM_CQE: u8 = 0x1;
}

/// CQ arm commands: the `cmd` bits of the CQ arm doorbell (kernel `include/linux/mlx5/cq.h`
/// `MLX5_CQ_DB_REQ_NOT*`; rdma-core `providers/mlx5/cq.c` `mlx5_arm_cq`). The doorbell word is
/// `sn << 28 | cmd | (ci & 0xffffff)`, written to the CQ doorbell record's arm word and to the
/// UAR (`uar` module).
pub mod arm {
    /// `MLX5_CQ_DB_REQ_NOT`: request an event on the next completion.
    pub const REQ_NOT: u32 = 0 << 24;
    /// `MLX5_CQ_DB_REQ_NOT_SOL`: request an event on the next solicited (or error) completion.
    pub const REQ_NOT_SOL: u32 = 1 << 24;
    /// Mask of the consumer index in the arm word.
    pub const CI_MASK: u32 = 0x00ff_ffff;
    /// Shift of the 2-bit arm sequence number.
    pub const SN_SHIFT: u32 = 28;

    /// The arm doorbell word: `(sn & 3) << 28 | cmd | (ci & 0xffffff)`.
    pub const fn word(sn: u32, cmd: u32, ci: u32) -> u32 {
        ((sn & 3) << SN_SHIFT) | (cmd & (3 << 24)) | (ci & CI_MASK)
    }
}

/// MODIFY_CQ `op_mod` values (kernel mlx5_ifc.h `MLX5_MODIFY_CQ_IN_OP_MOD_*`).
pub mod modify_op_mod {
    /// `MLX5_MODIFY_CQ_IN_OP_MOD_MODIFY_CQ`: change moderation fields.
    pub const MODIFY_CQ: u16 = 0x0;
    /// `MLX5_MODIFY_CQ_IN_OP_MOD_RESIZE_CQ`: resize (new `log_cq_size`, new PAS).
    pub const RESIZE_CQ: u16 = 0x1;
}

/// MODIFY_CQ `modify_field_select` bits (kernel `include/linux/mlx5/cq.h` `MLX5_CQ_MODIFY_*`).
pub mod modify_select {
    /// `MLX5_CQ_MODIFY_PERIOD`: take `cq_period` from the context.
    pub const PERIOD: u32 = 1 << 0;
    /// `MLX5_CQ_MODIFY_COUNT`: take `cq_max_count` from the context.
    pub const COUNT: u32 = 1 << 1;
    /// `MLX5_CQ_MODIFY_OVERRUN`: take `oi` (overrun ignore) from the context.
    pub const OVERRUN: u32 = 1 << 2;
}

// ---------------------------------------------------------------------------------------------
// Layouts
// ---------------------------------------------------------------------------------------------

crate::prm_layout! {
    /// The CQ context (`mlx5_ifc_cqc_bits`, 64 bytes): what CREATE_CQ takes and QUERY_CQ returns.
    pub struct Cqc("cqc", 0x40) {
        /// CQ status ([`status`]); read-only, from QUERY_CQ.
        status, set_status: 0x0, 4;
        /// The doorbell record is in a DEVX umem (`dbr_umem_id`) instead of at `dbr_addr`.
        dbr_umem_valid, set_dbr_umem_valid: 0x6, 1;
        /// The CQ belongs to an APU (accelerated processing unit); 0 for host CQs.
        apu_cq, set_apu_cq: 0x7, 1;
        /// CQE size ([`cqe_sz`]: 0 = 64 B, 1 = 128 B).
        cqe_sz, set_cqe_sz: 0x8, 3;
        /// Collapsed CQ: every CQE is written to entry 0.
        cc, set_cc: 0xb, 1;
        /// Solicited CQEs break moderation.
        scqe_break_moderation_en, set_scqe_break_moderation_en: 0xd, 1;
        /// Overrun ignore: never report CQ overflow.
        oi, set_oi: 0xe, 1;
        /// Moderation period mode ([`period_mode`]).
        cq_period_mode, set_cq_period_mode: 0xf, 2;
        /// CQE compression enable.
        cqe_comp_en, set_cqe_comp_en: 0x11, 1;
        /// Mini-CQE format when compression is on.
        mini_cqe_res_format, set_mini_cqe_res_format: 0x12, 2;
        /// Arm state ([`st`]); read-only, from QUERY_CQ.
        st, set_st: 0x14, 4;
        /// Compressed CQE layout.
        cqe_compression_layout, set_cqe_compression_layout: 0x1e, 2;
        /// Offset of the ring inside its first page, in 64-byte units.
        page_offset, set_page_offset: 0x54, 6;
        /// log2 of the number of CQEs.
        log_cq_size, set_log_cq_size: 0x63, 5;
        /// UAR page whose doorbells arm this CQ.
        uar_page, set_uar_page: 0x68, 24;
        /// Moderation period (microseconds).
        cq_period, set_cq_period: 0x84, 12;
        /// Moderation count (CQEs per event).
        cq_max_count, set_cq_max_count: 0x90, 16;
        /// The EQ that receives this CQ's completion events (older kernels: 8-bit `c_eqn` in the
        /// low byte of this word; see [`Cqc::c_eqn`]).
        c_eqn_or_apu_element, set_c_eqn_or_apu_element: 0xa0, 32;
        /// log2 of the page size of the PAS list, relative to 4 KiB.
        log_page_size, set_log_page_size: 0xc3, 5;
        /// Index of the last CQE that generated an event (QUERY_CQ).
        last_notified_index, set_last_notified_index: 0x108, 24;
        /// Index of the last solicited CQE that generated an event (QUERY_CQ).
        last_solicit_index, set_last_solicit_index: 0x128, 24;
        /// Consumer counter (QUERY_CQ).
        consumer_counter, set_consumer_counter: 0x148, 24;
        /// Producer counter (QUERY_CQ).
        producer_counter, set_producer_counter: 0x168, 24;
        /// IOVA of the 8-byte CQ doorbell record (`set_ci` word, arm word).
        dbr_addr, set_dbr_addr: 0x1c0, 64;
    }
}

impl<T: AsRef<[u8]>> Cqc<T> {
    /// The completion EQ number: `c_eqn_or_apu_element` (kernel before 5.17: `c_eqn[0x8]` at
    /// bit 0xb8, the low byte of the same word, so both read the same for EQ numbers < 256).
    pub fn c_eqn(&self) -> u32 {
        self.c_eqn_or_apu_element()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqc<T> {
    /// Sets the completion EQ number (see [`Cqc::c_eqn`]).
    pub fn set_c_eqn(&mut self, eqn: u32) -> Result<&mut Self> {
        self.set_c_eqn_or_apu_element(eqn)
    }
}

/// Byte offset of `pas[]` in CREATE_CQ / QUERY_CQ / MODIFY_CQ (bit 0x880).
pub const CQ_PAS_OFFSET: usize = 0x110;

crate::prm_layout! {
    /// CREATE_CQ input (`mlx5_ifc_create_cq_in_bits`): 0x110 bytes, then `pas[]` (one BE64 page
    /// address per page of the CQE ring; [`CreateCqIn::pas`]).
    pub struct CreateCqIn("create_cq_in", 0x110) {
        /// [`crate::cmd::Opcode::CREATE_CQ`].
        opcode, set_opcode: 0x0, 16;
        /// User context id (0 for a VFIO driver).
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The CQE ring is a DEVX umem (not used in VFIO mode, which passes `pas[]`).
        cq_umem_valid, set_cq_umem_valid: 0x2e0, 1;
        sub {
            /// The CQ context.
            cq_context, cq_context_mut: Cqc @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// CREATE_CQ output (`mlx5_ifc_create_cq_out_bits`).
    pub struct CreateCqOut("create_cq_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The new CQ number.
        cqn, set_cqn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// QUERY_CQ input (`mlx5_ifc_query_cq_in_bits`).
    pub struct QueryCqIn("query_cq_in", 0x10) {
        /// [`crate::cmd::Opcode::QUERY_CQ`].
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The CQ to query.
        cqn, set_cqn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// QUERY_CQ output (`mlx5_ifc_query_cq_out_bits`): 0x110 bytes, then `pas[]`.
    pub struct QueryCqOut("query_cq_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The CQ context.
            cq_context, cq_context_mut: Cqc @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_CQ input (`mlx5_ifc_modify_cq_in_bits`): 0x110 bytes, then `pas[]` (resize only).
    pub struct ModifyCqIn("modify_cq_in", 0x110) {
        /// [`crate::cmd::Opcode::MODIFY_CQ`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// [`modify_op_mod`].
        op_mod, set_op_mod: 0x30, 16;
        /// The CQ to modify.
        cqn, set_cqn: 0x48, 24;
        /// `modify_field_select_resize_field_select` (a union of two 32-bit selects;
        /// [`modify_select`] bits for MODIFY_CQ).
        modify_field_select_resize_field_select, set_modify_field_select_resize_field_select: 0x60, 32;
        /// The new ring is a DEVX umem (resize only).
        cq_umem_valid, set_cq_umem_valid: 0x2e0, 1;
        sub {
            /// The CQ context carrying the new values.
            cq_context, cq_context_mut: Cqc @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_CQ output (`mlx5_ifc_modify_cq_out_bits`).
    pub struct ModifyCqOut("modify_cq_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// DESTROY_CQ input (`mlx5_ifc_destroy_cq_in_bits`).
    pub struct DestroyCqIn("destroy_cq_in", 0x10) {
        /// [`crate::cmd::Opcode::DESTROY_CQ`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The CQ to destroy.
        cqn, set_cqn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DESTROY_CQ output (`mlx5_ifc_destroy_cq_out_bits`).
    pub struct DestroyCqOut("destroy_cq_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

be64_list!(
    CreateCqIn,
    "create_cq_in.pas",
    CQ_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);
be64_list!(
    QueryCqOut,
    "query_cq_out.pas",
    CQ_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);
be64_list!(
    ModifyCqIn,
    "modify_cq_in.pas",
    CQ_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);

/// Bytes of a CREATE_CQ input with `n_pas` page addresses.
pub const fn create_cq_in_len(n_pas: usize) -> usize {
    with_be64_list(CreateCqIn::LEN, n_pas)
}

/// Bytes of a MODIFY_CQ (resize) input with `n_pas` page addresses.
pub const fn modify_cq_in_len(n_pas: usize) -> usize {
    with_be64_list(ModifyCqIn::LEN, n_pas)
}

/// The CQE ring's size in bytes: `(1 << log_cq_size) * cqe size`, or `None` for a reserved
/// `cqe_sz` or a size that does not fit in `u64`.
pub fn cq_buf_bytes(log_cq_size: u8, cqe_sz_code: u8) -> Option<u64> {
    let n = 1u64.checked_shl(u32::from(log_cq_size))?;
    n.checked_mul(cqe_sz::bytes(cqe_sz_code)? as u64)
}

impl<T: AsRef<[u8]>> CreateCqIn<T> {
    /// Alias of [`CreateCqIn::cq_context`] (the `cqc`).
    pub fn cqc(&self) -> Cqc<&[u8]> {
        self.cq_context()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CreateCqIn<T> {
    /// Alias of [`CreateCqIn::cq_context_mut`] (the `cqc`).
    pub fn cqc_mut(&mut self) -> Cqc<&mut [u8]> {
        self.cq_context_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_word() {
        assert_eq!(arm::word(1, arm::REQ_NOT_SOL, 0x1234_5678), 0x1134_5678);
        assert_eq!(arm::word(7, arm::REQ_NOT, 5), 0x3000_0005);
    }

    #[test]
    fn cq_sizes() {
        assert_eq!(cq_buf_bytes(8, cqe_sz::BYTES_64), Some(256 * 64));
        assert_eq!(cq_buf_bytes(8, 7), None);
        assert_eq!(cq_buf_bytes(70, 0), None);
        assert_eq!(create_cq_in_len(2), 0x120);
        assert_eq!(create_cq_in_len(usize::MAX), usize::MAX);
    }
}
