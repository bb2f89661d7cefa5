//! Protection domains and UAR pages: ALLOC_PD / DEALLOC_PD, ALLOC_UAR / DEALLOC_UAR.
//!
//! A UAR index `n` is the 4 KiB page at BAR0 + n × 4096 (rdma-core `mlx5_vfio.c` `uar2iova`).
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h`
//! `mlx5_ifc_{alloc,dealloc}_{pd,uar}_{in,out}_bits`.
//!
//! Owns: formats. Must not: keep the PD/UAR tables (the driver's `pd` / `uar`, the sim's
//! `firmware`).

crate::prm_layout! {
    /// ALLOC_PD input (`mlx5_ifc_alloc_pd_in_bits`).
    pub struct AllocPdIn("alloc_pd_in", 0x10) {
        /// `MLX5_CMD_OP_ALLOC_PD` (0x800).
        opcode, set_opcode: 0x0, 16;
        /// User context id; 0 in VFIO mode.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
    }
}

crate::prm_layout! {
    /// ALLOC_PD output (`mlx5_ifc_alloc_pd_out_bits`).
    pub struct AllocPdOut("alloc_pd_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The new protection domain number (24 bits, byte 0x09).
        pd, set_pd: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DEALLOC_PD input (`mlx5_ifc_dealloc_pd_in_bits`).
    pub struct DeallocPdIn("dealloc_pd_in", 0x10) {
        /// `MLX5_CMD_OP_DEALLOC_PD` (0x801).
        opcode, set_opcode: 0x0, 16;
        /// User context id; 0 in VFIO mode.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The protection domain to free.
        pd, set_pd: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DEALLOC_PD output (`mlx5_ifc_dealloc_pd_out_bits`).
    pub struct DeallocPdOut("dealloc_pd_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// ALLOC_UAR input (`mlx5_ifc_alloc_uar_in_bits`).
    pub struct AllocUarIn("alloc_uar_in", 0x10) {
        /// `MLX5_CMD_OP_ALLOC_UAR` (0x802).
        opcode, set_opcode: 0x0, 16;
        /// User context id; 0 in VFIO mode.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
    }
}

crate::prm_layout! {
    /// ALLOC_UAR output (`mlx5_ifc_alloc_uar_out_bits`).
    pub struct AllocUarOut("alloc_uar_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The UAR index (its page is BAR0 + uar × 4096).
        uar, set_uar: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DEALLOC_UAR input (`mlx5_ifc_dealloc_uar_in_bits`).
    pub struct DeallocUarIn("dealloc_uar_in", 0x10) {
        /// `MLX5_CMD_OP_DEALLOC_UAR` (0x803).
        opcode, set_opcode: 0x0, 16;
        /// User context id; 0 in VFIO mode.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The UAR index to free.
        uar, set_uar: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DEALLOC_UAR output (`mlx5_ifc_dealloc_uar_out_bits`).
    pub struct DeallocUarOut("dealloc_uar_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}
