//! Completion queue entries: what the NIC (or the sim) writes into a CQ ring, and the rule that
//! says whether an entry belongs to software yet.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`struct mlx5_cqe64`, `struct mlx5_err_cqe`,
//! `MLX5_CQE_*`, `MLX5_INLINE_SCATTER_*`, `mlx5dv_get_cqe_owner/se/format/opcode`) and
//! `providers/mlx5/cq.c` (`get_sw_cqe`, buffer initialisation in `mlx5_alloc_cq_buf`,
//! `mlx5_handle_error_cqe`). Every multi-byte field is big-endian. `hw/tests/mlx5dv_oracle.rs`
//! checks the layouts byte for byte against the installed `mlx5dv.h`, compiled by gcc.
//!
//! Owns: [`Cqe64`], [`Cqe128`], [`ErrCqe`], [`CqeOpcode`], the `op_own` decoding and
//! [`sw_owns`].
//! Must not: keep the consumer index or touch the CQ doorbell record (see [`crate::doorbell`]).

use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::impl_view;
use crate::syndrome::CqeSyndrome;
use crate::wqe::{WqeOpcode, named_codes};

named_codes! {
    /// The CQE opcode: bits 7:4 of `op_own`.
    ///
    /// Values: rdma-core `providers/mlx5/mlx5dv.h` `MLX5_CQE_*` (the kernel's
    /// `include/linux/mlx5/device.h` has the same).
    pub struct CqeOpcode(u8) {
        /// `MLX5_CQE_REQ`: a send-queue (requester) completion.
        REQ = 0,
        /// `MLX5_CQE_RESP_WR_IMM`: receive completion of an RDMA write with immediate.
        RESP_WR_IMM = 1,
        /// `MLX5_CQE_RESP_SEND`: receive completion of a send.
        RESP_SEND = 2,
        /// `MLX5_CQE_RESP_SEND_IMM`: receive completion of a send with immediate.
        RESP_SEND_IMM = 3,
        /// `MLX5_CQE_RESP_SEND_INV`: receive completion of a send with invalidate.
        RESP_SEND_INV = 4,
        /// `MLX5_CQE_RESIZE_CQ`: marks the end of the old buffer during a CQ resize.
        RESIZE_CQ = 5,
        /// `MLX5_CQE_NO_PACKET`: a striding-RQ filler / no packet.
        NO_PACKET = 6,
        /// `MLX5_CQE_SIG_ERR`: signature (T10-DIF) error.
        SIG_ERR = 12,
        /// `MLX5_CQE_REQ_ERR`: requester error; the CQE is an [`ErrCqe`].
        REQ_ERR = 13,
        /// `MLX5_CQE_RESP_ERR`: responder error; the CQE is an [`ErrCqe`].
        RESP_ERR = 14,
        /// `MLX5_CQE_INVALID`: not written by hardware yet (how software initialises the ring).
        INVALID = 15,
    }
}

impl CqeOpcode {
    /// True for the two error opcodes, whose CQE is laid out as [`ErrCqe`].
    pub const fn is_error(self) -> bool {
        matches!(self, Self::REQ_ERR | Self::RESP_ERR)
    }
}

/// `MLX5_CQE_OWNER_MASK` (mlx5dv.h): the owner bit of `op_own`.
pub const MLX5_CQE_OWNER_MASK: u8 = 1;
/// `MLX5_INLINE_SCATTER_32` (mlx5dv.h): in `op_own`, the read/atomic response data is in the
/// CQE itself (rdma-core `cq.c` `handle_responder` / `mlx5_parse_cqe`).
pub const MLX5_INLINE_SCATTER_32: u8 = 0x4;
/// `MLX5_INLINE_SCATTER_64` (mlx5dv.h): in `op_own`, the data is in the 64 bytes before the CQE
/// (the first half of a 128-byte CQE).
pub const MLX5_INLINE_SCATTER_64: u8 = 0x8;
/// `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT` (mlx5dv.h): vendor syndrome of an on-demand-paging
/// page fault (`mlx5_err_cqe.vendor_err_synd`).
pub const MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;
/// `MLX5_CQE_L2_OK` (mlx5dv.h): in `hds_ip_ext`, the L2 checksum/header was good.
pub const MLX5_CQE_L2_OK: u8 = 1 << 0;
/// `MLX5_CQE_L3_OK` (mlx5dv.h): the L3 checksum was good.
pub const MLX5_CQE_L3_OK: u8 = 1 << 1;
/// `MLX5_CQE_L4_OK` (mlx5dv.h): the L4 checksum was good.
pub const MLX5_CQE_L4_OK: u8 = 1 << 2;
/// `MLX5_CQE_L3_HDR_TYPE_NONE` (mlx5dv.h): `(l4_hdr_type_etc >> 2) & 3` when there is no L3.
pub const MLX5_CQE_L3_HDR_TYPE_NONE: u8 = 0x0;
/// `MLX5_CQE_L3_HDR_TYPE_IPV6` (mlx5dv.h).
pub const MLX5_CQE_L3_HDR_TYPE_IPV6: u8 = 0x1;
/// `MLX5_CQE_L3_HDR_TYPE_IPV4` (mlx5dv.h).
pub const MLX5_CQE_L3_HDR_TYPE_IPV4: u8 = 0x2;

/// The `op_own` byte software writes into every CQE when it creates the ring:
/// `MLX5_CQE_INVALID << 4` with owner 0 (rdma-core `cq.c` `mlx5_alloc_cq_buf`).
pub const CQE_INVALID_OP_OWN: u8 = CqeOpcode::INVALID.0 << 4;

/// The owner bit of `op_own` (`mlx5dv_get_cqe_owner`).
pub const fn op_own_owner(op_own: u8) -> u8 {
    op_own & MLX5_CQE_OWNER_MASK
}
/// The solicited-event bit of `op_own` (`mlx5dv_get_cqe_se`).
pub const fn op_own_se(op_own: u8) -> u8 {
    (op_own >> 1) & 1
}
/// The CQE format (compression) bits 3:2 of `op_own` (`mlx5dv_get_cqe_format`).
pub const fn op_own_format(op_own: u8) -> u8 {
    (op_own >> 2) & 3
}
/// The CQE opcode, bits 7:4 of `op_own` (`mlx5dv_get_cqe_opcode`).
pub const fn op_own_opcode(op_own: u8) -> CqeOpcode {
    CqeOpcode(op_own >> 4)
}
/// Builds an `op_own` byte (for the sim, which writes CQEs): `opcode << 4 | format << 2 |
/// se << 1 | owner`, each part masked to its width.
pub const fn make_op_own(opcode: CqeOpcode, format: u8, se: bool, owner: bool) -> u8 {
    ((opcode.0 & 0xf) << 4) | ((format & 3) << 2) | ((se as u8) << 1) | owner as u8
}

/// The owner-bit rule: true when the CQE at consumer index `ci` (of a ring of `nent` entries,
/// a power of two) has been written by hardware and belongs to software.
///
/// Exactly rdma-core `cq.c` `get_sw_cqe(cq, n)`: the opcode is not `MLX5_CQE_INVALID`, and the
/// owner bit equals `!!(n & nent)` (the owner bit the hardware writes flips on each lap of the
/// ring, starting at 0). `op_own` is the byte of the 64-byte CQE (the second half of a 128-byte
/// one).
pub const fn sw_owns(op_own: u8, consumer_index: u32, nent: u32) -> bool {
    op_own_opcode(op_own).0 != CqeOpcode::INVALID.0
        && (op_own & MLX5_CQE_OWNER_MASK != 0) == (consumer_index & nent != 0)
}

/// The slot of consumer index `ci` in a ring of `nent` entries (`n & (nent - 1)`; `nent` must
/// be a power of two, 0 gives slot 0).
pub const fn cqe_slot(consumer_index: u32, nent: u32) -> u32 {
    consumer_index & nent.wrapping_sub(1)
}

/// `struct mlx5_cqe64` (mlx5dv.h, 64 bytes): a successful completion.
///
/// The first 32 bytes are a union in the header (`tm_cqe`, `ibv_tmh` for tag matching); this
/// struct spells the ordinary member.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Cqe64 {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// WQE id (striding RQ).
    pub wqe_id: U16,
    /// Reserved.
    pub rsvd4: [u8; 13],
    /// Path bits of the source LID (IB).
    pub ml_path: u8,
    /// Reserved.
    pub rsvd20: [u8; 4],
    /// Source LID (IB).
    pub slid: U16,
    /// Flags (GRH present, packet type) in 31:24; remote QPN in 23:0.
    pub flags_rqpn: U32,
    /// Header-data split / IP extension / checksum-ok bits (`MLX5_CQE_L*_OK`).
    pub hds_ip_ext: u8,
    /// L4 header type, L3 header type, VLAN present.
    pub l4_hdr_type_etc: u8,
    /// VLAN tag.
    pub vlan_info: U16,
    /// SRQ number, or user index (cqe_version 1), 24 bits.
    pub srqn_uidx: U32,
    /// Immediate data, invalidated rkey or P_Key, by opcode.
    pub imm_inval_pkey: U32,
    /// Application (tag matching) context.
    pub app: u8,
    /// Application opcode.
    pub app_op: u8,
    /// Application info.
    pub app_info: U16,
    /// Bytes received, or the length of a READ / atomic response.
    pub byte_cnt: U32,
    /// Completion timestamp.
    pub timestamp: U64,
    /// Requester: the completed WQE's opcode in 31:24. Low 24 bits: the QPN.
    pub sop_drop_qpn: U32,
    /// SQ: the index of the completed WQE (wraps at 0xffff).
    pub wqe_counter: U16,
    /// Signature.
    pub signature: u8,
    /// Opcode (7:4), format (3:2), solicited event (1), owner (0).
    pub op_own: u8,
}

impl Cqe64 {
    /// The CQE opcode.
    pub fn opcode(&self) -> CqeOpcode {
        op_own_opcode(self.op_own)
    }
    /// The owner bit (0 or 1).
    pub fn owner(&self) -> u8 {
        op_own_owner(self.op_own)
    }
    /// The solicited-event bit (0 or 1).
    pub fn se(&self) -> u8 {
        op_own_se(self.op_own)
    }
    /// The format bits (0 or 3 = compressed block).
    pub fn format(&self) -> u8 {
        op_own_format(self.op_own)
    }
    /// Sets the owner bit, as `mlx5dv_set_cqe_owner` does.
    pub fn set_owner(&mut self, owner: bool) {
        self.op_own = (self.op_own & !MLX5_CQE_OWNER_MASK) | owner as u8;
    }
    /// True when read/atomic response data is in this CQE (`MLX5_INLINE_SCATTER_32`).
    pub fn inline_scatter_32(&self) -> bool {
        self.op_own & MLX5_INLINE_SCATTER_32 != 0
    }
    /// True when the data is in the 64 bytes before this CQE (`MLX5_INLINE_SCATTER_64`).
    pub fn inline_scatter_64(&self) -> bool {
        self.op_own & MLX5_INLINE_SCATTER_64 != 0
    }
    /// The QP number (bits 23:0 of `sop_drop_qpn`).
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn.get() & 0x00ff_ffff
    }
    /// Requester CQE: the opcode of the completed WQE (bits 31:24 of `sop_drop_qpn`).
    pub fn wqe_opcode(&self) -> WqeOpcode {
        WqeOpcode((self.sop_drop_qpn.get() >> 24) as u8)
    }
    /// The index of the completed WQE.
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter.get()
    }
    /// Bytes received / response length.
    pub fn byte_cnt(&self) -> u32 {
        self.byte_cnt.get()
    }
    /// Immediate data / invalidated rkey / P_Key.
    pub fn imm_inval_pkey(&self) -> u32 {
        self.imm_inval_pkey.get()
    }
    /// The remote QPN (bits 23:0 of `flags_rqpn`).
    pub fn rqpn(&self) -> u32 {
        self.flags_rqpn.get() & 0x00ff_ffff
    }
    /// The flags byte (bits 31:24 of `flags_rqpn`; bit 28 = GRH present).
    pub fn flags(&self) -> u8 {
        (self.flags_rqpn.get() >> 24) as u8
    }
    /// The SRQ number / user index (bits 23:0 of `srqn_uidx`).
    pub fn srqn_uidx(&self) -> u32 {
        self.srqn_uidx.get() & 0x00ff_ffff
    }
    /// The timestamp.
    pub fn timestamp(&self) -> u64 {
        self.timestamp.get()
    }
    /// The WQE id.
    pub fn wqe_id(&self) -> u16 {
        self.wqe_id.get()
    }
    /// The source LID.
    pub fn slid(&self) -> u16 {
        self.slid.get()
    }
    /// The VLAN info.
    pub fn vlan_info(&self) -> u16 {
        self.vlan_info.get()
    }
    /// The application info.
    pub fn app_info(&self) -> u16 {
        self.app_info.get()
    }
    /// True when software owns this CQE at consumer index `ci` of a ring of `nent` ([`sw_owns`]).
    pub fn sw_owns(&self, consumer_index: u32, nent: u32) -> bool {
        sw_owns(self.op_own, consumer_index, nent)
    }
    /// The same bytes, read as an error CQE (meaningful when [`CqeOpcode::is_error`]).
    pub fn as_err(&self) -> &ErrCqe {
        zerocopy::transmute_ref!(self)
    }
}

/// A 128-byte CQE (`cqe_sz = 128`): the 64-byte CQE is the **second** half (rdma-core `cq.c`:
/// `cqe64 = (cq->cqe_sz == 64) ? cqe : cqe + 64`), and the first half may hold inline-scattered
/// data ([`MLX5_INLINE_SCATTER_64`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Cqe128 {
    /// The first 64 bytes (inline scatter data, or unused).
    pub inline_data: [u8; 64],
    /// The 64-byte CQE.
    pub cqe: Cqe64,
}

/// `struct mlx5_err_cqe` (mlx5dv.h, 64 bytes): a completion with error (opcode
/// [`CqeOpcode::REQ_ERR`] or [`CqeOpcode::RESP_ERR`]).
///
/// The header declares `srqn`, `s_wqe_opcode_qpn` and `wqe_counter` as plain `uint32_t` /
/// `uint16_t`, but rdma-core reads them with `be32toh` / `be16toh` (`cq.c`): big-endian here.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct ErrCqe {
    /// Reserved.
    pub rsvd0: [u8; 32],
    /// SRQ number.
    pub srqn: U32,
    /// Reserved.
    pub rsvd1: [u8; 18],
    /// Vendor syndrome (e.g. [`MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`]).
    pub vendor_err_synd: u8,
    /// The syndrome ([`CqeSyndrome`]).
    pub syndrome: u8,
    /// The failed WQE's opcode in 31:24, QPN in 23:0.
    pub s_wqe_opcode_qpn: U32,
    /// Index of the failed WQE.
    pub wqe_counter: U16,
    /// Signature.
    pub signature: u8,
    /// As in [`Cqe64::op_own`].
    pub op_own: u8,
}

impl ErrCqe {
    /// The syndrome, named and explained ([`CqeSyndrome`]).
    pub fn syndrome(&self) -> CqeSyndrome {
        CqeSyndrome(self.syndrome)
    }
    /// The vendor syndrome.
    pub fn vendor_err_synd(&self) -> u8 {
        self.vendor_err_synd
    }
    /// The opcode of the WQE that failed (bits 31:24 of `s_wqe_opcode_qpn`).
    pub fn wqe_opcode(&self) -> WqeOpcode {
        WqeOpcode((self.s_wqe_opcode_qpn.get() >> 24) as u8)
    }
    /// The QP number (bits 23:0 of `s_wqe_opcode_qpn`).
    pub fn qpn(&self) -> u32 {
        self.s_wqe_opcode_qpn.get() & 0x00ff_ffff
    }
    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn.get()
    }
    /// The index of the WQE that failed.
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter.get()
    }
    /// The CQE opcode (from `op_own`).
    pub fn opcode(&self) -> CqeOpcode {
        op_own_opcode(self.op_own)
    }
    /// The owner bit.
    pub fn owner(&self) -> u8 {
        op_own_owner(self.op_own)
    }
}

impl_view! {
    Cqe64 => "mlx5_cqe64",
    Cqe128 => "mlx5_cqe128",
    ErrCqe => "mlx5_err_cqe",
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::View;

    #[test]
    fn sizes() {
        assert_eq!(Cqe64::SIZE, 64);
        assert_eq!(Cqe128::SIZE, 128);
        assert_eq!(ErrCqe::SIZE, 64);
    }

    #[test]
    fn owner_rule_follows_get_sw_cqe() {
        let nent = 8;
        // Fresh ring: every entry invalid, nothing is software's.
        for ci in 0..32 {
            assert!(!sw_owns(CQE_INVALID_OP_OWN, ci, nent));
            assert!(!sw_owns(CQE_INVALID_OP_OWN | 1, ci, nent));
        }
        let lap0 = make_op_own(CqeOpcode::REQ, 0, false, false);
        let lap1 = make_op_own(CqeOpcode::REQ, 0, false, true);
        assert!(sw_owns(lap0, 3, nent));
        assert!(!sw_owns(lap1, 3, nent));
        assert!(sw_owns(lap1, 11, nent));
        assert!(!sw_owns(lap0, 11, nent));
        assert!(sw_owns(lap0, 19, nent));
        assert_eq!(cqe_slot(11, nent), 3);
    }

    #[test]
    fn op_own_round_trip() {
        let b = make_op_own(CqeOpcode::RESP_SEND_IMM, 3, true, true);
        assert_eq!(
            (
                op_own_opcode(b),
                op_own_format(b),
                op_own_se(b),
                op_own_owner(b)
            ),
            (CqeOpcode::RESP_SEND_IMM, 3, 1, 1)
        );
        assert_eq!(CQE_INVALID_OP_OWN, 0xf0);
    }
}
