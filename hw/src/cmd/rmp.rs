//! Receive memory pool commands, the firmware object behind a basic SRQ: the work queue
//! context (`wq`), the RMP context (`rmpc`), CREATE_RMP / MODIFY_RMP / QUERY_RMP / DESTROY_RMP,
//! and the SRQ's place in a QP context (`qpc.rq_type`, `qpc.srqn_rmpn_xrqn`).
//!
//! Which command an SRQ is: the kernel's `mlx5_ib` (`drivers/infiniband/hw/mlx5/srq_cmd.c`,
//! `create_srq_split` / `destroy_srq_split` / `mlx5_cmd_query_srq` / `mlx5_cmd_arm_srq`) uses
//! CREATE_SRQ (0x700) only on ISSI 0 firmware; with ISSI >= 1 (every ConnectX-4 and later) a
//! basic SRQ (`MLX5_RES_SRQ`) is an RMP: `create_rmp_cmd` sets `rmpc.state = RDY` and the `wq`
//! (`set_wq`: `wq_signature`, `log_wq_pg_sz`, `log_wq_stride = wqe_shift + 4`, `log_wq_sz`,
//! `page_offset`, `lwm`, `pd`, `dbr_addr`) with `wq.pas[]` after it; `arm_rmp_cmd` is
//! MODIFY_RMP with `rmp_state = RDY`, `wq.lwm` and `rmp_bitmask.lwm = 1`; `query_rmp_cmd` reads
//! the `wq` back and reports an error if `rmpc.state != RDY`.
//!
//! Layouts: Linux 6.1.192 `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_wq_bits`,
//! `mlx5_ifc_rmpc_bits`, `mlx5_ifc_rmp_bitmask_bits`, `mlx5_ifc_*_rmp_{in,out}_bits`, `enum
//! MLX5_RMPC_STATE_*`, `MLX5_WQ_WQ_TYPE_*`), checked by `tests/ifc_layout_objects.rs`.
//!
//! Owns: formats only. Must not: keep SRQ state (the driver's `srq` and the sim's `srq` do).

use crate::cmd::list::{be64_list, with_be64_list};

/// `rmpc.state` values (kernel mlx5_ifc.h `MLX5_RMPC_STATE_*`).
pub mod state {
    /// `MLX5_RMPC_STATE_RDY`.
    pub const RDY: u8 = 0x1;
    /// `MLX5_RMPC_STATE_ERR`.
    pub const ERR: u8 = 0x3;
}

/// `wq.wq_type` values (kernel mlx5_ifc.h `MLX5_WQ_WQ_TYPE_*`). An RMP is a linked list: each
/// WQE's next segment names the next one (rdma-core `providers/mlx5/srq.c`).
pub mod wq_type {
    /// `MLX5_WQ_WQ_TYPE_WQ_LINKED_LIST`.
    pub const LINKED_LIST: u8 = 0x0;
    /// `MLX5_WQ_WQ_TYPE_WQ_CYCLIC`.
    pub const CYCLIC: u8 = 0x1;
}

/// `qpc.rq_type` values (kernel `drivers/infiniband/hw/mlx5/qp.c` `enum { MLX5_NON_ZERO_RQ,
/// MLX5_SRQ_RQ, MLX5_CRQ, MLX5_ZERO_LEN_RQ }`, set by `create_qp_common` from `get_rx_type`:
/// a QP created with `init_attr->srq` is `MLX5_SRQ_RQ` and names the SRQ in
/// `qpc.srqn_rmpn_xrqn`; its own RQ is empty, `log_rq_size` 0).
pub mod rq_type {
    /// `MLX5_NON_ZERO_RQ`: the QP has its own receive queue.
    pub const REGULAR: u8 = 0;
    /// `MLX5_SRQ_RQ`: receives come from the SRQ in `srqn_rmpn_xrqn`.
    pub const SRQ: u8 = 1;
    /// `MLX5_CRQ`.
    pub const CRQ: u8 = 2;
    /// `MLX5_ZERO_LEN_RQ`: no receive queue.
    pub const ZERO_LEN: u8 = 3;
}

/// `rmp_bitmask` bit for `lwm` (MODIFY_RMP: take `wq.lwm` from the context).
pub const RMP_BITMASK_LWM: u64 = 1;

crate::prm_layout! {
    /// A work queue context (`mlx5_ifc_wq_bits`, 0xc0 bytes, then `pas[]`), as an RMP holds it.
    pub struct Wq("wq", 0xc0) {
        /// [`wq_type`]; an RMP is a linked list (0).
        wq_type, set_wq_type: 0x0, 4;
        /// WQE signatures checked.
        wq_signature, set_wq_signature: 0x4, 1;
        /// End padding mode (RQ only).
        end_padding_mode, set_end_padding_mode: 0x5, 2;
        /// Cross-channel slave (not used).
        cd_slave, set_cd_slave: 0x7, 1;
        /// Header-data split: skip the first SGE.
        hds_skip_first_sge, set_hds_skip_first_sge: 0x20, 1;
        /// Header-data split buffer size.
        log2_hds_buf_size, set_log2_hds_buf_size: 0x21, 3;
        /// Offset of the queue in its first page, in 64-byte units.
        page_offset, set_page_offset: 0x2b, 5;
        /// Limit water mark: an SRQ_LIMIT event when fewer WQEs are posted (0 = disarmed).
        lwm, set_lwm: 0x30, 16;
        /// Protection domain.
        pd, set_pd: 0x48, 24;
        /// UAR page (send queues only).
        uar_page, set_uar_page: 0x68, 24;
        /// IOVA of the doorbell record (the WQE counter, BE32).
        dbr_addr, set_dbr_addr: 0x80, 64;
        /// WQEs the device has consumed (QUERY).
        hw_counter, set_hw_counter: 0xc0, 32;
        /// WQEs the driver has posted (QUERY).
        sw_counter, set_sw_counter: 0xe0, 32;
        /// log2 of the WQE stride in bytes.
        log_wq_stride, set_log_wq_stride: 0x10c, 4;
        /// log2 of the page size of `pas[]`, relative to 4 KiB.
        log_wq_pg_sz, set_log_wq_pg_sz: 0x113, 5;
        /// log2 of the number of WQEs.
        log_wq_sz, set_log_wq_sz: 0x11b, 5;
        /// The doorbell record is a DEVX umem.
        dbr_umem_valid, set_dbr_umem_valid: 0x120, 1;
        /// The queue is a DEVX umem.
        wq_umem_valid, set_wq_umem_valid: 0x121, 1;
        /// Hairpin queues only.
        log_hairpin_num_packets, set_log_hairpin_num_packets: 0x123, 5;
        /// Hairpin queues only.
        log_hairpin_data_sz, set_log_hairpin_data_sz: 0x12b, 5;
        /// Striding RQs only.
        log_wqe_num_of_strides, set_log_wqe_num_of_strides: 0x134, 4;
        /// Striding RQs only.
        two_byte_shift_en, set_two_byte_shift_en: 0x138, 1;
        /// Striding RQs only.
        log_wqe_stride_size, set_log_wqe_stride_size: 0x13d, 3;
        /// SHAMPO only.
        headers_mkey, set_headers_mkey: 0x1c0, 32;
        /// SHAMPO only.
        shampo_enable, set_shampo_enable: 0x1e0, 1;
        /// SHAMPO only.
        log_reservation_size, set_log_reservation_size: 0x1e5, 3;
        /// SHAMPO only.
        log_max_num_of_packets_per_reservation, set_log_max_num_of_packets_per_reservation: 0x1ed, 3;
        /// SHAMPO only.
        log_headers_entry_size, set_log_headers_entry_size: 0x1f6, 2;
        /// SHAMPO only.
        log_headers_buffer_entry_num, set_log_headers_buffer_entry_num: 0x1fc, 4;
    }
}

crate::prm_layout! {
    /// The RMP context (`mlx5_ifc_rmpc_bits`, 0xf0 bytes; the `wq` ends it, its `pas[]` after).
    pub struct Rmpc("rmpc", 0xf0) {
        /// [`state`].
        state, set_state: 0x8, 4;
        /// Cyclic receive WQEs (not used by `mlx5_ib`).
        basic_cyclic_rcv_wqe, set_basic_cyclic_rcv_wqe: 0x20, 1;
        sub {
            /// The work queue.
            wq, wq_mut: Wq @ 0x30;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_RMP's field select (`mlx5_ifc_rmp_bitmask_bits`).
    pub struct RmpBitmask("rmp_bitmask", 0x8) {
        /// Take `wq.lwm` from the context.
        lwm, set_lwm: 0x3f, 1;
    }
}

/// Byte offset of `pas[]` in CREATE_RMP / QUERY_RMP (`ctx.wq.pas`: 0x20 + 0x30 + 0xc0).
pub const RMP_PAS_OFFSET: usize = 0x110;
/// Byte offset of `wq.pas[]` inside a `wq`.
pub const WQ_PAS_OFFSET: usize = 0xc0;

crate::prm_layout! {
    /// CREATE_RMP input (`mlx5_ifc_create_rmp_in_bits`): 0x110 bytes, then `pas[]`.
    pub struct CreateRmpIn("create_rmp_in", 0x110) {
        /// [`crate::cmd::Opcode::CREATE_RMP`].
        opcode, set_opcode: 0x0, 16;
        /// User context id (0 for a VFIO driver).
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        sub {
            /// The RMP context.
            ctx, ctx_mut: Rmpc @ 0x20;
        }
    }
}

crate::prm_layout! {
    /// CREATE_RMP output (`mlx5_ifc_create_rmp_out_bits`).
    pub struct CreateRmpOut("create_rmp_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The new RMP (SRQ) number.
        rmpn, set_rmpn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// MODIFY_RMP input (`mlx5_ifc_modify_rmp_in_bits`): the state, the RMP, the field select
    /// and a context carrying the new values.
    pub struct ModifyRmpIn("modify_rmp_in", 0x110) {
        /// [`crate::cmd::Opcode::MODIFY_RMP`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The RMP's current state ([`state`]; `arm_rmp_cmd` writes RDY).
        rmp_state, set_rmp_state: 0x40, 4;
        /// The RMP to modify.
        rmpn, set_rmpn: 0x48, 24;
        sub {
            /// Which context fields to take ([`RmpBitmask`]).
            bitmask, bitmask_mut: RmpBitmask @ 0x10;
            /// The new values.
            ctx, ctx_mut: Rmpc @ 0x20;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_RMP output (`mlx5_ifc_modify_rmp_out_bits`).
    pub struct ModifyRmpOut("modify_rmp_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// QUERY_RMP input (`mlx5_ifc_query_rmp_in_bits`).
    pub struct QueryRmpIn("query_rmp_in", 0x10) {
        /// [`crate::cmd::Opcode::QUERY_RMP`].
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The RMP to query.
        rmpn, set_rmpn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// QUERY_RMP output (`mlx5_ifc_query_rmp_out_bits`): 0x110 bytes, then `pas[]`.
    pub struct QueryRmpOut("query_rmp_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The RMP context.
            rmp_context, rmp_context_mut: Rmpc @ 0x20;
        }
    }
}

crate::prm_layout! {
    /// DESTROY_RMP input (`mlx5_ifc_destroy_rmp_in_bits`).
    pub struct DestroyRmpIn("destroy_rmp_in", 0x10) {
        /// [`crate::cmd::Opcode::DESTROY_RMP`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The RMP to destroy.
        rmpn, set_rmpn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DESTROY_RMP output (`mlx5_ifc_destroy_rmp_out_bits`).
    pub struct DestroyRmpOut("destroy_rmp_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

be64_list!(
    CreateRmpIn,
    "create_rmp_in.ctx.wq.pas",
    RMP_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);
be64_list!(
    QueryRmpOut,
    "query_rmp_out.rmp_context.wq.pas",
    RMP_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);

/// Bytes of a CREATE_RMP input with `n_pas` page addresses.
pub const fn create_rmp_in_len(n_pas: usize) -> usize {
    with_be64_list(CreateRmpIn::LEN, n_pas)
}

/// The SRQ buffer's size in bytes, `(1 << log_wq_sz) << log_wq_stride`, or `None` if it does not
/// fit (kernel `srq_cmd.c` `get_pas_size`: `1 << (log_srq_size + 4 + wqe_shift)`).
pub fn srq_buf_bytes(log_wq_sz: u8, log_wq_stride: u8) -> Option<u64> {
    1u64.checked_shl(u32::from(log_wq_sz))?
        .checked_mul(1u64.checked_shl(u32::from(log_wq_stride))?)
        .filter(|&n| n <= 1 << 40)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(create_rmp_in_len(3), 0x110 + 24);
        assert_eq!(srq_buf_bytes(4, 6), Some(1024));
        assert_eq!(srq_buf_bytes(64, 6), None);
    }

    #[test]
    fn nested_wq_fields_land_in_the_input() {
        let mut buf = vec![0u8; create_rmp_in_len(1)];
        let mut inp = CreateRmpIn::new_checked(&mut buf[..]).unwrap();
        inp.ctx_mut().set_state(u32::from(state::RDY)).unwrap();
        inp.ctx_mut().wq_mut().set_lwm(0xabcd).unwrap();
        inp.ctx_mut()
            .wq_mut()
            .set_dbr_addr(0x1122_3344_5566_7788)
            .unwrap();
        inp.set_pas(0, 0xdead_b000).unwrap();
        // rmpc at 0x20: state at bit 8 (byte 0x21 high nibble); wq at 0x50: lwm bytes 0x56..0x58.
        assert_eq!(buf[0x21], 0x10);
        assert_eq!(&buf[0x56..0x58], &[0xab, 0xcd]);
        assert_eq!(&buf[0x60..0x68], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&buf[0x110..0x118], &0xdead_b000u64.to_be_bytes());
    }
}
