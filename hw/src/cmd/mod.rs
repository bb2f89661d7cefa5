//! Firmware commands: the command queue entry and mailboxes, the common in/out headers,
//! opcodes, and one module per command family with its PRM layouts.
//!
//! Sources (every layout): the kernel's `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_*_bits`);
//! `tests/ifc_layout_bringup.rs` and `tests/ifc_layout_objects.rs` check every field position
//! here against a table taken from it (`tests/data/mlx5_ifc_fields.tsv`).
//! Bit positions follow PRM numbering (see [`crate::prm`]).
//!
//! Owns: formats only. Must not: post commands or keep state (that is the driver's `cmdq` and
//! the sim's `firmware`).

pub mod caps;
pub mod cong;
pub mod cong_params;
pub mod cq;
pub mod entry;
pub mod eq;
pub mod hca;
pub mod list;
pub mod mkey;
pub mod pages;
pub mod pd_uar;
pub mod qp;
pub mod rmp;
pub mod vport;

use core::fmt;

/// A firmware command opcode (`mbox_in.opcode`, the first 16 bits of every input).
///
/// Values: kernel `mlx5_ifc.h` `enum MLX5_CMD_OP_*`, except `RTS2SQD_QP` (0x508) and
/// `SQD2SQD_QP` (0x511): today's `mlx5_ifc.h` has neither (nor does `mlx5_ib`'s `optab`, which
/// answers RTS→SQD and SQD→SQD with `-EINVAL`); their values are those of the first mlx5
/// driver (Linux 3.11 `include/linux/mlx5/driver.h`, issued by `mlx5/core/qp.c`
/// `mlx5_core_qp_modify`), the only mlx5 encoding of the SQ drain ever published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u16);

macro_rules! opcodes {
    ($($name:ident = $val:expr,)*) => {
        impl Opcode {
            $(#[doc = concat!("`MLX5_CMD_OP_", stringify!($name), "`.")] pub const $name: Self = Self($val);)*
            /// Every opcode bypass knows, in table order.
            pub const ALL: &'static [Self] = &[$(Self::$name),*];
            /// The opcode's name without the `MLX5_CMD_OP_` prefix, or `None` if unknown.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(v if v == $val => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    QUERY_HCA_CAP = 0x100,
    QUERY_ADAPTER = 0x101,
    INIT_HCA = 0x102,
    TEARDOWN_HCA = 0x103,
    ENABLE_HCA = 0x104,
    DISABLE_HCA = 0x105,
    QUERY_PAGES = 0x107,
    MANAGE_PAGES = 0x108,
    SET_HCA_CAP = 0x109,
    QUERY_ISSI = 0x10a,
    SET_ISSI = 0x10b,
    SET_DRIVER_VERSION = 0x10d,
    CREATE_MKEY = 0x200,
    QUERY_MKEY = 0x201,
    DESTROY_MKEY = 0x202,
    CREATE_EQ = 0x301,
    DESTROY_EQ = 0x302,
    QUERY_EQ = 0x303,
    GEN_EQE = 0x304,
    CREATE_CQ = 0x400,
    DESTROY_CQ = 0x401,
    QUERY_CQ = 0x402,
    MODIFY_CQ = 0x403,
    CREATE_QP = 0x500,
    DESTROY_QP = 0x501,
    RST2INIT_QP = 0x502,
    INIT2RTR_QP = 0x503,
    RTR2RTS_QP = 0x504,
    RTS2RTS_QP = 0x505,
    SQERR2RTS_QP = 0x506,
    QP_2ERR = 0x507,
    QP_2RST = 0x50a,
    QUERY_QP = 0x50b,
    SQD_RTS_QP = 0x50c,
    MAD_IFC = 0x50d,
    INIT2INIT_QP = 0x50e,
    RTS2SQD_QP = 0x508,
    SQD2SQD_QP = 0x511,
    QUERY_NIC_VPORT_CONTEXT = 0x754,
    MODIFY_NIC_VPORT_CONTEXT = 0x755,
    QUERY_ROCE_ADDRESS = 0x760,
    SET_ROCE_ADDRESS = 0x761,
    QUERY_HCA_VPORT_CONTEXT = 0x762,
    QUERY_HCA_VPORT_GID = 0x764,
    QUERY_HCA_VPORT_PKEY = 0x765,
    ALLOC_PD = 0x800,
    DEALLOC_PD = 0x801,
    ALLOC_UAR = 0x802,
    DEALLOC_UAR = 0x803,
    ACCESS_REG = 0x805,
    NOP = 0x80d,
    QUERY_CONG_STATUS = 0x822,
    MODIFY_CONG_STATUS = 0x823,
    QUERY_CONG_PARAMS = 0x824,
    MODIFY_CONG_PARAMS = 0x825,
    QUERY_CONG_STATISTICS = 0x826,
    CREATE_RMP = 0x90c,
    MODIFY_RMP = 0x90d,
    DESTROY_RMP = 0x90e,
    QUERY_RMP = 0x90f,
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "UNKNOWN_OPCODE({:#x})", self.0),
        }
    }
}

crate::prm_layout! {
    /// The header every command input starts with (`mlx5_ifc_mbox_in_bits`): opcode, uid
    /// (0 in VFIO mode: the function itself owns its objects) and op_mod.
    pub struct MboxIn("mbox_in", 0x10) {
        /// Command opcode ([`Opcode`]).
        opcode, set_opcode: 0x0, 16;
        /// User context id; 0 for a VFIO driver.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (meaning depends on the opcode).
        op_mod, set_op_mod: 0x30, 16;
    }
}

crate::prm_layout! {
    /// The header every command output starts with (`mlx5_ifc_mbox_out_bits`).
    pub struct MboxOut("mbox_out", 0x10) {
        /// Status ([`crate::syndrome::CmdStatus`]).
        status, set_status: 0x0, 8;
        /// Syndrome: a firmware-specific code that narrows down a non-zero status.
        syndrome, set_syndrome: 0x20, 32;
    }
}

impl<T: AsRef<[u8]>> MboxIn<T> {
    /// The opcode as an [`Opcode`].
    pub fn op(&self) -> Opcode {
        Opcode(self.opcode() as u16)
    }
}

impl<T: AsRef<[u8]>> MboxOut<T> {
    /// The status as a [`CmdStatus`](crate::syndrome::CmdStatus).
    pub fn cmd_status(&self) -> crate::syndrome::CmdStatus {
        crate::syndrome::CmdStatus(self.status() as u8)
    }
}

/// The byte offset, in most object commands' input and output, of the 24-bit object number
/// (`qpn`, `cqn`, `pd`, `uar`, `mkey_index`): bits 0x48..0x60.
pub const OBJ_ID_BIT_OFF: usize = 0x48;
