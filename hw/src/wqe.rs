//! Send and receive WQE segments: what the driver writes into an SQ/RQ ring and the NIC
//! (or the sim) reads back by DMA.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (the public segment structs and the
//! `mlx5dv_set_ctrl_seg` / `mlx5dv_set_data_seg` / `mlx5dv_set_dgram_seg` helpers, the
//! `MLX5_OPCODE_*`, `MLX5_WQE_CTRL_*`, `MLX5_INLINE_SEG`, `MLX5_INVALID_LKEY`,
//! `MLX5_EXTENDED_UD_AV` constants) and `providers/mlx5/qp.c` (`_mlx5_post_send`,
//! `set_data_inl_seg`, `mlx5_post_recv`) for how the segments are put together.
//! Every multi-byte field is big-endian. `hw/tests/mlx5dv_oracle.rs` checks every layout here
//! byte for byte against the installed `mlx5dv.h`, compiled by gcc.
//!
//! Owns: the segment layouts ([`CtrlSeg`], [`RaddrSeg`], [`DataSeg`], [`AtomicSeg`],
//! [`InlineSeg`] and [`write_inline`], [`Av`] / [`DatagramSeg`]), [`WqeOpcode`], the
//! `fm_ce_se` flags and WQEBB arithmetic.
//! Must not: know ring state (producer index, wrap-around at the end of the SQ buffer) or ring
//! doorbells; that is the driver's.

use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};
use crate::impl_view;

/// Defines a `u8` code newtype with named constants, `ALL` and `name()` (no explanation
/// text: these are opcodes and types, not errors).
macro_rules! named_codes {
    (
        $(#[$meta:meta])*
        pub struct $ty:ident($raw:ty) {
            $( $(#[$cmeta:meta])* $name:ident = $val:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $ty(pub $raw);

        impl $ty {
            $( $(#[$cmeta])* pub const $name: Self = Self($val); )*

            /// Every named value, in table order.
            pub const ALL: &'static [Self] = &[$(Self::$name),*];

            /// The value's name as the source spells it (without its prefix), or `None` for a
            /// value the table does not know.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( v if v == $val => Some(stringify!($name)), )*
                    _ => None,
                }
            }
        }

        impl core::fmt::Display for $ty {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(n) => write!(f, "{} ({:#x})", n, self.0),
                    None => write!(f, "UNKNOWN({:#x})", self.0),
                }
            }
        }
    };
}
pub(crate) use named_codes;

named_codes! {
    /// The opcode of a send WQE (`mlx5_wqe_ctrl_seg.opmod_idx_opcode` bits 7:0).
    ///
    /// Values: rdma-core `providers/mlx5/mlx5dv.h` `MLX5_OPCODE_*` (the same values as the
    /// kernel's `include/linux/mlx5/qp.h`, where TSO is called `LSO`). The verbs-to-mlx5
    /// mapping is `mlx5_ib_opcode[]` in `providers/mlx5/qp.c` (BIND_MW and LOCAL_INV go
    /// through UMR).
    pub struct WqeOpcode(u8) {
        /// `MLX5_OPCODE_NOP`: no operation (ctrl segment only).
        NOP = 0x00,
        /// `MLX5_OPCODE_SEND_INVAL`: send with invalidate (`imm` = the rkey to invalidate).
        SEND_INVAL = 0x01,
        /// `MLX5_OPCODE_RDMA_WRITE`.
        RDMA_WRITE = 0x08,
        /// `MLX5_OPCODE_RDMA_WRITE_IMM`: RDMA write with immediate (`imm` = immediate data).
        RDMA_WRITE_IMM = 0x09,
        /// `MLX5_OPCODE_SEND`.
        SEND = 0x0a,
        /// `MLX5_OPCODE_SEND_IMM`: send with immediate.
        SEND_IMM = 0x0b,
        /// `MLX5_OPCODE_TSO`: large send offload (raw packet QPs; has an eth segment).
        TSO = 0x0e,
        /// `MLX5_OPCODE_RDMA_READ`.
        RDMA_READ = 0x10,
        /// `MLX5_OPCODE_ATOMIC_CS`: 8-byte compare and swap.
        ATOMIC_CS = 0x11,
        /// `MLX5_OPCODE_ATOMIC_FA`: 8-byte fetch and add.
        ATOMIC_FA = 0x12,
        /// `MLX5_OPCODE_ATOMIC_MASKED_CS`: masked (extended) compare and swap.
        ATOMIC_MASKED_CS = 0x14,
        /// `MLX5_OPCODE_ATOMIC_MASKED_FA`: masked (extended) fetch and add.
        ATOMIC_MASKED_FA = 0x15,
        /// `MLX5_OPCODE_FMR`: fast memory registration.
        FMR = 0x19,
        /// `MLX5_OPCODE_LOCAL_INVAL`: local invalidate.
        LOCAL_INVAL = 0x1b,
        /// `MLX5_OPCODE_CONFIG_CMD`: configuration command.
        CONFIG_CMD = 0x1f,
        /// `MLX5_OPCODE_SET_PSV`: set protection signature value.
        SET_PSV = 0x20,
        /// `MLX5_OPCODE_UMR`: user-mode memory registration (also MW bind and local invalidate).
        UMR = 0x25,
        /// `MLX5_OPCODE_TAG_MATCHING`: tag-matching list operation (SRQ with TM).
        TAG_MATCHING = 0x28,
        /// `MLX5_OPCODE_FLOW_TBL_ACCESS`: flow table access.
        FLOW_TBL_ACCESS = 0x2c,
        /// `MLX5_OPCODE_MMO`: memory-to-memory offload (DMA / compression engines).
        MMO = 0x2f,
    }
}

/// `MLX5_SEND_WQE_BB` (mlx5dv.h): bytes in one send WQE basic block (WQEBB).
pub const MLX5_SEND_WQE_BB: usize = 64;
/// Alias of [`MLX5_SEND_WQE_BB`].
pub const SEND_WQE_BB: usize = MLX5_SEND_WQE_BB;
/// `MLX5_SEND_WQE_SHIFT` (mlx5dv.h): log2 of [`MLX5_SEND_WQE_BB`].
pub const MLX5_SEND_WQE_SHIFT: u32 = 6;
/// `MLX5_SEND_WQE_DS` (rdma-core `providers/mlx5/mlx5.h`): bytes in one data segment unit
/// ("DS", an octoword); a WQE's size is counted in these.
pub const SEND_WQE_DS: usize = 16;
/// The largest DS count the 6-bit `ds` field of `qpn_ds` can hold (`qpn_ds & 0x3f`;
/// rdma-core `qp.c` masks `size` with `0x3f` when it compares BlueFlame sizes).
pub const MAX_WQE_DS: u8 = 0x3f;
/// `MLX5_ATOMIC_SIZE` (rdma-core `providers/mlx5/mlx5.h`): the byte count of the data segment
/// that receives an 8-byte atomic's original value.
pub const MLX5_ATOMIC_SIZE: u32 = 8;

/// `MLX5_WQE_CTRL_CQ_UPDATE` (mlx5dv.h, `2 << 2`): CE = "always generate a CQE" in `fm_ce_se`.
pub const MLX5_WQE_CTRL_CQ_UPDATE: u8 = 2 << 2;
/// `MLX5_WQE_CTRL_SOLICITED` (mlx5dv.h, `1 << 1`): SE, the solicited-event bit of `fm_ce_se`.
pub const MLX5_WQE_CTRL_SOLICITED: u8 = 1 << 1;
/// `MLX5_WQE_CTRL_FENCE` (mlx5dv.h, `4 << 5`): fence mode bits 7:5 = 4 (wait for all prior
/// RDMA READ/atomic WQEs to complete; rdma-core uses it for `IBV_SEND_FENCE`).
pub const MLX5_WQE_CTRL_FENCE: u8 = 4 << 5;
/// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` (mlx5dv.h, `1 << 5`): fence mode 1, the small fence
/// rdma-core puts on the WQE after a local invalidate / UMR.
pub const MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE: u8 = 1 << 5;
/// Mask of the fence-mode bits (7:5) of `fm_ce_se`.
pub const FM_MASK: u8 = 0xe0;
/// Mask of the completion-event bits (3:2) of `fm_ce_se`.
pub const CE_MASK: u8 = 0x0c;

/// `MLX5_INLINE_SEG` (mlx5dv.h): set in an inline segment's `byte_count`.
pub const MLX5_INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_INVALID_LKEY` (mlx5dv.h): the lkey of the data segment that ends a short receive
/// scatter list (`mlx5_post_recv` in rdma-core `qp.c`).
pub const MLX5_INVALID_LKEY: u32 = 0x100;
/// `MLX5_EXTENDED_UD_AV` (mlx5dv.h): bit 31 of `mlx5_wqe_av.dqp_dct`, "this AV is the 48-byte
/// extended form" (rdma-core `mlx5dv_set_dgram_seg` stores `ext << 31`).
pub const MLX5_EXTENDED_UD_AV: u32 = 0x8000_0000;

/// WQEBBs a WQE of `ds` 16-byte segments takes: `DIV_ROUND_UP(ds * 16, 64)`, as
/// `_mlx5_post_send` in rdma-core `qp.c` advances `sq.cur_post`.
pub const fn wqebbs_for_ds(ds: u8) -> u8 {
    // The result is at most 64.
    (ds as u16).div_ceil(4) as u8
}

/// DS units (16 bytes) an inline payload of `len` bytes takes, header included:
/// `align(len + 4, 16) / 16` (rdma-core `qp.c` `set_data_inl_seg`).
pub const fn inline_ds(len: usize) -> usize {
    len.saturating_add(4).div_ceil(SEND_WQE_DS)
}

/// The DS count of the usual RC layout of `opcode` with `nsge` scatter/gather entries, as
/// `_mlx5_post_send` (rdma-core `qp.c`) builds it:
/// NOP = ctrl; SEND, SEND_IMM, SEND_INVAL = ctrl + data\[n\]; RDMA_WRITE, RDMA_WRITE_IMM,
/// RDMA_READ = ctrl + raddr + data\[n\]; ATOMIC_CS, ATOMIC_FA = ctrl + raddr + atomic + one
/// 8-byte data segment (4 DS, exactly one WQEBB, whatever `nsge`).
/// `None` for opcodes whose layout is not a plain gather list (TSO, UMR, masked atomics, ...)
/// or when the count would not fit in [`MAX_WQE_DS`].
pub const fn rc_ds(opcode: WqeOpcode, nsge: usize) -> Option<u8> {
    let ds = match opcode {
        WqeOpcode::NOP => 1,
        WqeOpcode::SEND | WqeOpcode::SEND_IMM | WqeOpcode::SEND_INVAL => {
            (nsge as u64).saturating_add(1)
        }
        WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM | WqeOpcode::RDMA_READ => {
            (nsge as u64).saturating_add(2)
        }
        WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => 4,
        _ => return None,
    };
    if ds <= MAX_WQE_DS as u64 {
        Some(ds as u8)
    } else {
        None
    }
}

/// The DS count of a UD send: ctrl + datagram segment (48 bytes, 3 DS) + data\[n\]
/// (rdma-core `qp.c`, `IBV_QPT_UD` case of `_mlx5_post_send`).
pub const fn ud_send_ds(nsge: usize) -> Option<u8> {
    let ds = (nsge as u64).saturating_add(4);
    if ds <= MAX_WQE_DS as u64 {
        Some(ds as u8)
    } else {
        None
    }
}

/// `struct mlx5_wqe_ctrl_seg` (mlx5dv.h, 16 bytes): the first segment of every send WQE.
///
/// The first 8 bytes are also what the driver writes to the UAR doorbell register.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CtrlSeg {
    /// `opmod << 24 | wqe_index << 8 | opcode`.
    pub opmod_idx_opcode: U32,
    /// `qpn << 8 | ds` (ds in bits 5:0).
    pub qpn_ds: U32,
    /// WQE signature (only checked when the QP has `wq_sig`).
    pub signature: u8,
    /// DCI stream channel (DC only; 0 otherwise).
    pub dci_stream_channel_id: U16,
    /// Fence mode (7:5), completion-event mode (3:2), solicited event (1).
    pub fm_ce_se: u8,
    /// Immediate data, invalidation rkey or UMR mkey, by opcode.
    pub imm: U32,
}

/// What `mlx5dv_set_ctrl_seg(seg, pi, opcode, opmod, qp_num, fm_ce_se, ds, signature, imm)`
/// takes (mlx5dv.h), as one value.
///
/// `imm` is the number as it appears big-endian on the wire: rdma-core's helper stores its
/// `imm` argument unconverted, and its callers pass `htobe32(x)` (or a `__be32` immediate),
/// so the equivalent here is `imm = x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtrlParams {
    /// WQEBB index of the WQE's first block (`pi`, wraps at 0xffff).
    pub pi: u16,
    /// The opcode.
    pub opcode: WqeOpcode,
    /// The opcode modifier.
    pub opmod: u8,
    /// QP (or SQ) number, 24 bits.
    pub qpn: u32,
    /// Fence / completion / solicited flags (`MLX5_WQE_CTRL_*`).
    pub fm_ce_se: u8,
    /// WQE size in 16-byte units, 1..=0x3f.
    pub ds: u8,
    /// WQE signature.
    pub signature: u8,
    /// Immediate / invalidation key / mkey (see the type's note on byte order).
    pub imm: u32,
}

impl Default for WqeOpcode {
    fn default() -> Self {
        Self::NOP
    }
}

impl CtrlSeg {
    /// A control segment as `mlx5dv_set_ctrl_seg` fills it (over a zeroed segment).
    ///
    /// Errors: [`Error::FieldOverflow`] when `qpn` needs more than 24 bits or `ds` more than 6.
    pub fn new(p: &CtrlParams) -> Result<Self> {
        let mut seg = Self::new_zeroed();
        seg.set(p)?;
        Ok(seg)
    }

    /// Sets the fields `mlx5dv_set_ctrl_seg` sets (all but `dci_stream_channel_id`, which it
    /// leaves alone), with the same encoding.
    ///
    /// Errors: [`Error::FieldOverflow`] when `qpn` needs more than 24 bits or `ds` more than 6
    /// (rdma-core would silently corrupt the neighbouring field).
    pub fn set(&mut self, p: &CtrlParams) -> Result<()> {
        if p.qpn > 0x00ff_ffff {
            return Err(Error::FieldOverflow {
                what: "mlx5_wqe_ctrl_seg.qpn",
                value: p.qpn as u64,
                bits: 24,
            });
        }
        if p.ds > MAX_WQE_DS {
            return Err(Error::FieldOverflow {
                what: "mlx5_wqe_ctrl_seg.ds",
                value: p.ds as u64,
                bits: 6,
            });
        }
        self.opmod_idx_opcode
            .set(((p.opmod as u32) << 24) | ((p.pi as u32) << 8) | p.opcode.0 as u32);
        self.qpn_ds.set((p.qpn << 8) | p.ds as u32);
        self.fm_ce_se = p.fm_ce_se;
        self.signature = p.signature;
        self.imm.set(p.imm);
        Ok(())
    }

    /// The opcode (bits 7:0 of `opmod_idx_opcode`).
    pub fn opcode(&self) -> WqeOpcode {
        WqeOpcode(self.opmod_idx_opcode.get() as u8)
    }
    /// The opcode modifier (bits 31:24).
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode.get() >> 24) as u8
    }
    /// The WQE index, i.e. `pi` (bits 23:8).
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode.get() >> 8) as u16
    }
    /// The QP number (bits 31:8 of `qpn_ds`).
    pub fn qpn(&self) -> u32 {
        self.qpn_ds.get() >> 8
    }
    /// The WQE size in 16-byte units (bits 5:0 of `qpn_ds`).
    pub fn ds(&self) -> u8 {
        (self.qpn_ds.get() & MAX_WQE_DS as u32) as u8
    }
    /// The fence mode (bits 7:5 of `fm_ce_se`, as a number 0..=7).
    pub fn fence_mode(&self) -> u8 {
        self.fm_ce_se >> 5
    }
    /// The completion-event mode (bits 3:2 of `fm_ce_se`; 2 = always generate a CQE).
    pub fn ce(&self) -> u8 {
        (self.fm_ce_se & CE_MASK) >> 2
    }
    /// True when a CQE is requested for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub fn cq_update(&self) -> bool {
        self.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE != 0
    }
    /// True when the solicited-event bit is set.
    pub fn solicited(&self) -> bool {
        self.fm_ce_se & MLX5_WQE_CTRL_SOLICITED != 0
    }
    /// The immediate / invalidation key / mkey.
    pub fn imm(&self) -> u32 {
        self.imm.get()
    }
    /// The DCI stream channel id.
    pub fn dci_stream_channel_id(&self) -> u16 {
        self.dci_stream_channel_id.get()
    }
    /// Sets the DCI stream channel id.
    pub fn set_dci_stream_channel_id(&mut self, id: u16) {
        self.dci_stream_channel_id.set(id);
    }
    /// The first 8 bytes, as the 64-bit value the driver writes (big-endian) to the UAR
    /// doorbell when it does not use BlueFlame (`mmio_write64_be(bf->reg + bf->offset, ctrl)`,
    /// rdma-core `qp.c` `post_send_db`).
    pub fn doorbell_word(&self) -> u64 {
        ((self.opmod_idx_opcode.get() as u64) << 32) | self.qpn_ds.get() as u64
    }
}

/// `struct mlx5_wqe_raddr_seg` (mlx5dv.h, 16 bytes): remote address of RDMA and atomic WQEs.
/// `Debug` shows neither the key nor the address (read the fields for them).
#[derive(Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RaddrSeg {
    /// Remote virtual address.
    pub raddr: U64,
    /// Remote key.
    pub rkey: U32,
    /// Reserved (0).
    pub reserved: U32,
}

impl RaddrSeg {
    /// A remote-address segment (as `set_raddr_seg` in rdma-core `qp.c` fills it).
    pub fn new(raddr: u64, rkey: u32) -> Self {
        Self {
            raddr: U64::new(raddr),
            rkey: U32::new(rkey),
            reserved: U32::ZERO,
        }
    }
    /// The remote address.
    pub fn raddr(&self) -> u64 {
        self.raddr.get()
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
}

/// `struct mlx5_wqe_data_seg` (mlx5dv.h, 16 bytes): one gather (SQ) or scatter (RQ) entry.
/// `Debug` shows neither the key nor the address (read the fields for them).
#[derive(Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DataSeg {
    /// Length in bytes.
    pub byte_count: U32,
    /// Local key of the memory region.
    pub lkey: U32,
    /// Address (IOVA / virtual address inside the region).
    pub addr: U64,
}

impl DataSeg {
    /// A data segment as `mlx5dv_set_data_seg(seg, length, lkey, address)` fills it.
    pub fn new(length: u32, lkey: u32, addr: u64) -> Self {
        Self {
            byte_count: U32::new(length),
            lkey: U32::new(lkey),
            addr: U64::new(addr),
        }
    }
    /// Sets all three fields as `mlx5dv_set_data_seg` does.
    pub fn set(&mut self, length: u32, lkey: u32, addr: u64) {
        *self = Self::new(length, lkey, addr);
    }
    /// The receive-list terminator: `byte_count = 0, lkey = MLX5_INVALID_LKEY, addr = 0`
    /// (rdma-core `qp.c` `mlx5_post_recv`, when fewer SGEs than the RQ's max are posted).
    pub fn end_of_list() -> Self {
        Self::new(0, MLX5_INVALID_LKEY, 0)
    }
    /// True for the receive-list terminator (what the NIC stops at: `lkey == MLX5_INVALID_LKEY`).
    pub fn is_end_of_list(&self) -> bool {
        self.lkey.get() == MLX5_INVALID_LKEY
    }
    /// The length.
    pub fn byte_count(&self) -> u32 {
        self.byte_count.get()
    }
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey.get()
    }
    /// The address.
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }
}

/// `struct mlx5_wqe_atomic_seg` (mlx5dv.h, 16 bytes): operands of an 8-byte atomic.
///
/// Compare and swap: `swap_add` = swap value, `compare` = compare value. Fetch and add:
/// `swap_add` = the addend, `compare` = 0 (rdma-core `qp.c` `set_atomic_seg`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct AtomicSeg {
    /// Swap value (CS) or addend (FA).
    pub swap_add: U64,
    /// Compare value (CS).
    pub compare: U64,
}

impl AtomicSeg {
    /// The segment of a compare-and-swap.
    pub fn compare_swap(compare: u64, swap: u64) -> Self {
        Self {
            swap_add: U64::new(swap),
            compare: U64::new(compare),
        }
    }
    /// The segment of a fetch-and-add.
    pub fn fetch_add(add: u64) -> Self {
        Self {
            swap_add: U64::new(add),
            compare: U64::ZERO,
        }
    }
    /// The swap value or addend.
    pub fn swap_add(&self) -> u64 {
        self.swap_add.get()
    }
    /// The compare value.
    pub fn compare(&self) -> u64 {
        self.compare.get()
    }
}

/// `struct mlx5_wqe_inl_data_seg` (mlx5dv.h, 4 bytes): the header of inline data; the payload
/// follows it directly and the segment is padded to 16 bytes.
///
/// `byte_count = len | MLX5_INLINE_SEG`, big-endian (rdma-core `qp.c` `set_data_inl_seg`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct InlineSeg {
    /// `len | MLX5_INLINE_SEG`.
    pub byte_count: U32,
}

impl InlineSeg {
    /// The header of `len` bytes of inline data.
    ///
    /// Errors: [`Error::FieldOverflow`] if `len` needs bit 31 (it would read as the flag).
    pub fn new(len: usize) -> Result<Self> {
        if len >= MLX5_INLINE_SEG as usize {
            return Err(Error::FieldOverflow {
                what: "mlx5_wqe_inl_data_seg.byte_count",
                value: len as u64,
                bits: 31,
            });
        }
        Ok(Self {
            byte_count: U32::new(len as u32 | MLX5_INLINE_SEG),
        })
    }
    /// True when the `MLX5_INLINE_SEG` flag is set (a data segment never has it: its byte
    /// counts are below 2 GiB).
    pub fn is_inline(&self) -> bool {
        self.byte_count.get() & MLX5_INLINE_SEG != 0
    }
    /// The payload length (bits 30:0).
    pub fn len(&self) -> u32 {
        self.byte_count.get() & !MLX5_INLINE_SEG
    }
    /// True when the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes an inline segment (header, `payload`, zero padding to the next 16 bytes) at the
/// front of `buf`, and returns the DS count it takes ([`inline_ds`]).
///
/// rdma-core's `set_data_inl_seg` (`qp.c`) writes the same header and payload (and leaves the
/// padding as it was; here it is zeroed so WQE bytes are deterministic). Wrapping at the end of
/// the SQ buffer is the caller's: pass the contiguous space up to the ring's end.
///
/// Errors: [`Error::Truncated`] if `buf` is shorter than the padded segment (nothing is
/// written then); [`Error::FieldOverflow`] if the segment would need more DS than a WQE can
/// hold ([`MAX_WQE_DS`]).
pub fn write_inline(buf: &mut [u8], payload: &[u8]) -> Result<usize> {
    let ds = inline_ds(payload.len());
    if ds > MAX_WQE_DS as usize {
        return Err(Error::FieldOverflow {
            what: "inline segment ds",
            value: ds as u64,
            bits: 6,
        });
    }
    let total = ds * SEND_WQE_DS;
    let Some(seg) = buf.get_mut(..total) else {
        return Err(Error::Truncated {
            what: "mlx5_wqe_inl_data_seg",
            need: total,
            got: buf.len(),
        });
    };
    let header = InlineSeg::new(payload.len())?;
    let (head, rest) = seg.split_at_mut(InlineSeg::SIZE_BYTES);
    head.copy_from_slice(header.as_bytes());
    let (data, pad) = rest.split_at_mut(payload.len());
    data.copy_from_slice(payload);
    pad.fill(0);
    Ok(ds)
}

impl InlineSeg {
    /// The header's size in bytes (4).
    pub const SIZE_BYTES: usize = 4;
}

/// `struct mlx5_wqe_av` (mlx5dv.h, 48 bytes): the address vector of a UD (or DC) send, as the
/// datagram segment carries it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Av {
    /// `key.qkey.qkey`: the Q_Key (UD). With `key_reserved` it is also `key.dc_key` (DC).
    pub qkey: U32,
    /// `key.qkey.reserved`: the low half of `key.dc_key`.
    pub key_reserved: U32,
    /// Destination QPN (UD) or DCT number (DC), 24 bits, with [`MLX5_EXTENDED_UD_AV`] in bit 31.
    pub dqp_dct: U32,
    /// Static rate (7:4) and SL / Ethernet priority (3:0).
    pub stat_rate_sl: u8,
    /// Force loopback (bit 7) and source LID path bits (IB).
    pub fl_mlid: u8,
    /// Remote LID (IB).
    pub rlid: U16,
    /// Reserved.
    pub reserved0: [u8; 4],
    /// Remote MAC (RoCE).
    pub rmac: [u8; 6],
    /// GRH traffic class / IPv6 traffic class / IPv4 TOS.
    pub tclass: u8,
    /// GRH hop limit / IPv6 hop limit / IPv4 TTL.
    pub hop_limit: u8,
    /// GRH present, source GID index and flow label.
    pub grh_gid_fl: U32,
    /// Remote GID / IP address.
    pub rgid: [u8; 16],
}

/// What `mlx5dv_set_dgram_seg(seg, key, dqp_dct, ext, stat_rate_sl, fl_mlid, rlid, rmac,
/// tclass, hop_limit, grh_gid_fi, rgid)` takes (mlx5dv.h), as one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DgramParams {
    /// `key`: stored as a 64-bit big-endian `dc_key` (a UD Q_Key goes in the high half:
    /// `(qkey as u64) << 32`).
    pub key: u64,
    /// Destination QPN / DCT number.
    pub dqp_dct: u32,
    /// Extended-AV flag (stored in bit 31 of `dqp_dct`).
    pub ext: bool,
    /// Static rate and SL.
    pub stat_rate_sl: u8,
    /// Force loopback / MLID.
    pub fl_mlid: u8,
    /// Remote LID.
    pub rlid: u16,
    /// Remote MAC.
    pub rmac: [u8; 6],
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// GRH / GID index / flow label.
    pub grh_gid_fl: u32,
    /// Remote GID.
    pub rgid: [u8; 16],
}

impl Av {
    /// Fills the fields as `mlx5dv_set_dgram_seg` does (it leaves `reserved0` alone).
    ///
    /// Errors: [`Error::FieldOverflow`] when `dqp_dct` needs bit 31 (the flag's bit).
    pub fn set(&mut self, p: &DgramParams) -> Result<()> {
        if p.dqp_dct & MLX5_EXTENDED_UD_AV != 0 {
            return Err(Error::FieldOverflow {
                what: "mlx5_wqe_av.dqp_dct",
                value: p.dqp_dct as u64,
                bits: 31,
            });
        }
        self.set_dc_key(p.key);
        self.dqp_dct.set(((p.ext as u32) << 31) | p.dqp_dct);
        self.stat_rate_sl = p.stat_rate_sl;
        self.fl_mlid = p.fl_mlid;
        self.rlid.set(p.rlid);
        self.rmac = p.rmac;
        self.tclass = p.tclass;
        self.hop_limit = p.hop_limit;
        self.grh_gid_fl.set(p.grh_gid_fl);
        self.rgid = p.rgid;
        Ok(())
    }
    /// A zeroed AV filled by [`Av::set`].
    pub fn new(p: &DgramParams) -> Result<Self> {
        let mut av = Self::new_zeroed();
        av.set(p)?;
        Ok(av)
    }
    /// The Q_Key.
    pub fn qkey(&self) -> u32 {
        self.qkey.get()
    }
    /// Sets the Q_Key (what rdma-core's UD path does after copying the AH's AV).
    pub fn set_qkey(&mut self, qkey: u32) {
        self.qkey.set(qkey);
    }
    /// `key.dc_key`: the 8 key bytes as one big-endian 64-bit value.
    pub fn dc_key(&self) -> u64 {
        ((self.qkey.get() as u64) << 32) | self.key_reserved.get() as u64
    }
    /// Sets `key.dc_key`.
    pub fn set_dc_key(&mut self, key: u64) {
        self.qkey.set((key >> 32) as u32);
        self.key_reserved.set(key as u32);
    }
    /// The destination QPN / DCT number (bits 23:0 of `dqp_dct`).
    pub fn dqpn(&self) -> u32 {
        self.dqp_dct.get() & 0x00ff_ffff
    }
    /// True when the extended-AV flag is set.
    pub fn extended(&self) -> bool {
        self.dqp_dct.get() & MLX5_EXTENDED_UD_AV != 0
    }
    /// The remote LID.
    pub fn rlid(&self) -> u16 {
        self.rlid.get()
    }
    /// The GRH / GID index / flow label word.
    pub fn grh_gid_fl(&self) -> u32 {
        self.grh_gid_fl.get()
    }
}

/// `struct mlx5_wqe_datagram_seg` (mlx5dv.h, 48 bytes): the segment after ctrl in a UD send.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct DatagramSeg {
    /// The address vector.
    pub av: Av,
}

impl_view! {
    CtrlSeg => "mlx5_wqe_ctrl_seg",
    RaddrSeg => "mlx5_wqe_raddr_seg",
    DataSeg => "mlx5_wqe_data_seg",
    AtomicSeg => "mlx5_wqe_atomic_seg",
    InlineSeg => "mlx5_wqe_inl_data_seg",
    Av => "mlx5_wqe_av",
    DatagramSeg => "mlx5_wqe_datagram_seg",
}

/// What `Debug` of a segment shows for its key and address.
const REDACTED: &str = "<redacted>";

impl core::fmt::Debug for RaddrSeg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RaddrSeg")
            .field("raddr", &REDACTED)
            .field("rkey", &REDACTED)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for DataSeg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DataSeg")
            .field("byte_count", &self.byte_count.get())
            .field("lkey", &REDACTED)
            .field("addr", &REDACTED)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_shows_no_key_or_address() {
        let (addr, key) = (0x7f12_3456_7000_u64, 0x00ab_cd42_u32);
        let text = [
            format!("{:?}", RaddrSeg::new(addr, key)),
            format!("{:?}", DataSeg::new(96, key, addr)),
        ];
        for t in &text {
            for secret in [
                format!("{addr}"),
                format!("{addr:x}"),
                format!("{key}"),
                format!("{key:x}"),
            ] {
                assert!(!t.contains(&secret), "{t} shows {secret}");
            }
            assert!(t.contains(REDACTED), "{t}");
        }
        assert!(text[1].contains("byte_count: 96"), "{}", text[1]);
    }

    use super::*;
    use crate::view::View;

    #[test]
    fn sizes_match_mlx5dv() {
        assert_eq!(CtrlSeg::SIZE, 16);
        assert_eq!(RaddrSeg::SIZE, 16);
        assert_eq!(DataSeg::SIZE, 16);
        assert_eq!(AtomicSeg::SIZE, 16);
        assert_eq!(InlineSeg::SIZE, InlineSeg::SIZE_BYTES);
        assert_eq!(Av::SIZE, 48);
        assert_eq!(DatagramSeg::SIZE, 48);
    }

    #[test]
    fn ctrl_seg_encodes_like_mlx5dv_set_ctrl_seg() {
        let p = CtrlParams {
            pi: 0x1234,
            opcode: WqeOpcode::SEND_IMM,
            opmod: 0x5,
            qpn: 0xabcdef,
            fm_ce_se: MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED,
            ds: 3,
            signature: 0x77,
            imm: 0xdeadbeef,
        };
        let seg = CtrlSeg::new(&p).unwrap();
        assert_eq!(
            seg.as_bytes(),
            &[
                0x05, 0x12, 0x34, 0x0b, 0xab, 0xcd, 0xef, 0x03, 0x77, 0, 0, 0x0a, 0xde, 0xad, 0xbe,
                0xef
            ]
        );
        assert_eq!(
            (
                seg.opcode(),
                seg.opmod(),
                seg.wqe_index(),
                seg.qpn(),
                seg.ds()
            ),
            (WqeOpcode::SEND_IMM, 5, 0x1234, 0xabcdef, 3)
        );
        assert!(seg.cq_update() && seg.solicited());
        assert_eq!(seg.doorbell_word(), 0x0512_340b_abcd_ef03);
        assert!(CtrlSeg::new(&CtrlParams { qpn: 1 << 24, ..p }).is_err());
        assert!(CtrlSeg::new(&CtrlParams { ds: 0x40, ..p }).is_err());
    }

    #[test]
    fn wqebb_arithmetic() {
        assert_eq!(wqebbs_for_ds(1), 1);
        assert_eq!(wqebbs_for_ds(4), 1);
        assert_eq!(wqebbs_for_ds(5), 2);
        assert_eq!(wqebbs_for_ds(0x3f), 16);
        assert_eq!(wqebbs_for_ds(255), 64);
        assert_eq!(rc_ds(WqeOpcode::ATOMIC_FA, 1), Some(4));
        assert_eq!(rc_ds(WqeOpcode::RDMA_WRITE, 2), Some(4));
        assert_eq!(rc_ds(WqeOpcode::SEND, 62), Some(63));
        assert_eq!(rc_ds(WqeOpcode::SEND, 63), None);
        assert_eq!(rc_ds(WqeOpcode::UMR, 1), None);
        assert_eq!(ud_send_ds(1), Some(5));
        assert_eq!(inline_ds(0), 1);
        assert_eq!(inline_ds(12), 1);
        assert_eq!(inline_ds(13), 2);
    }

    #[test]
    fn inline_writer_pads_and_checks() {
        let mut buf = [0xffu8; 64];
        assert_eq!(write_inline(&mut buf, &[1, 2, 3, 4, 5]).unwrap(), 1);
        assert_eq!(
            &buf[..16],
            &[0x80, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(buf[16], 0xff);
        assert!(matches!(
            write_inline(&mut buf[..16], &[0; 13]),
            Err(Error::Truncated {
                need: 32,
                got: 16,
                ..
            })
        ));
        let big = [0u8; 1024];
        assert!(matches!(
            write_inline(&mut [0u8; 2048], &big),
            Err(Error::FieldOverflow { .. })
        ));
    }

    #[test]
    fn opcode_names() {
        assert_eq!(WqeOpcode::RDMA_WRITE_IMM.name(), Some("RDMA_WRITE_IMM"));
        assert_eq!(WqeOpcode(0x3).name(), None);
        assert_eq!(WqeOpcode::ALL.len(), 20);
    }
}
