//! The command queue entry (64 bytes, one per slot of the command queue page) and the mailbox
//! block (576 bytes) that carries the part of a command's input or output that does not fit
//! inline in the entry.
//!
//! A message of `len` bytes travels as: its first [`CMD_INLINE_LEN`] bytes inline in the entry
//! (`in` / `out`), the rest in a chain of mailbox blocks of [`MAILBOX_DATA_LEN`] bytes each,
//! linked by `next` and numbered by `block_num` from 0; `in_ptr` / `out_ptr` point at the first.
//! The `sig` / `ctrl_sig` bytes are checked only under the `cmdif_checksum` capability, which
//! rdma-core clears in SET_HCA_CAP and never computes; bypass does the same and leaves them 0.
//!
//! Sources: Linux `include/linux/mlx5/device.h` (`struct mlx5_cmd_layout`,
//! `struct mlx5_cmd_prot_block`) and `mlx5_ifc.h` (`mlx5_ifc_cmd_queue_entry_bits`,
//! `mlx5_ifc_cmd_if_box_bits`); rdma-core `providers/mlx5/mlx5_vfio.{h,c}` (`struct
//! mlx5_cmd_layout`, `struct mlx5_cmd_block`, `mlx5_calc_cmd_blocks`, `mlx5_vfio_post_cmd`).
//! `tests/ifc_layout_bringup.rs` checks every byte offset against the kernel's bit layouts.
//!
//! Owns: the formats and the block arithmetic. Must not: post commands (the driver's `cmdq`).

use core::fmt;
use core::ops::Range;

use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Size of one command queue entry in bytes (`sizeof(struct mlx5_cmd_layout)`).
pub const CMD_ENTRY_SIZE: usize = 64;
/// Bytes of input (and of output) carried inline in the entry (`in[4]` / `out[4]` dwords).
pub const CMD_INLINE_LEN: usize = 16;
/// Data bytes in one mailbox block (kernel `MLX5_CMD_DATA_BLOCK_SIZE`).
pub const MAILBOX_DATA_LEN: usize = 512;
/// Size of one mailbox block in bytes (`sizeof(struct mlx5_cmd_prot_block)`, 0x240).
pub const MAILBOX_SIZE: usize = 576;
/// Alignment a mailbox block's DMA address needs: the PRM drops the low 10 bits of
/// `next_pointer` (`mlx5_ifc_cmd_if_box_bits.next_pointer_31_10`); the kernel's DMA pool
/// aligns blocks to `roundup_pow_of_two(576)` = 1024.
pub const MAILBOX_ALIGN: usize = 1024;
/// Distance between mailbox blocks as rdma-core's mlx5_vfio allocates them: each block gets
/// its own 4 KiB page (`mlx5_vfio.c` `mlx5_vfio_alloc_cmd_msg` allocates one page per block;
/// a `struct mlx5_cmd_prot_block` uses 576 bytes of it).
pub const MAILBOX_STRIDE: usize = 4096;
/// The entry `type` of a PCIe command (kernel `MLX5_PCI_CMD_XPORT`,
/// `MLX5_CMD_QUEUE_ENTRY_TYPE_PCIE_CMD_IF_TRANSPORT`).
pub const MLX5_PCI_CMD_XPORT: u8 = 7;
/// Bit 0 of `status_own`: set = the device owns the entry (kernel `CMD_OWNER_HW`).
pub const CMD_OWNER_HW: u8 = 0x1;
/// Most command slots a queue can have (kernel `MLX5_MAX_COMMANDS`).
pub const MLX5_MAX_COMMANDS: usize = 32;

/// One command queue entry (`struct mlx5_cmd_layout`, kernel `device.h`; 64 bytes, all
/// big-endian). Field offsets: type 0x00, inlen 0x04, in_ptr 0x08, in 0x10, out 0x20,
/// out_ptr 0x30, outlen 0x38, token 0x3c, sig 0x3d, status_own 0x3f.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CmdLayout {
    /// Transport type; must be [`MLX5_PCI_CMD_XPORT`].
    pub type_: u8,
    /// Reserved.
    pub rsvd0: [u8; 3],
    /// Total input length in bytes (inline part included).
    pub inlen: U32,
    /// DMA address of the first input mailbox block (0 if none).
    pub in_ptr: U64,
    /// The first 16 bytes of the input.
    pub input: [u8; CMD_INLINE_LEN],
    /// The first 16 bytes of the output, written by the device.
    pub output: [u8; CMD_INLINE_LEN],
    /// DMA address of the first output mailbox block (0 if none).
    pub out_ptr: U64,
    /// Total output length in bytes (inline part included).
    pub outlen: U32,
    /// Token, echoed in every mailbox block of this command.
    pub token: u8,
    /// Entry signature (only checked with `cmdif_checksum`; bypass leaves it 0).
    pub sig: u8,
    /// Reserved.
    pub rsvd1: u8,
    /// Delivery status in bits 7..1, ownership in bit 0 ([`CMD_OWNER_HW`]).
    pub status_own: u8,
}

crate::impl_view!(CmdLayout => "mlx5_cmd_layout");

impl CmdLayout {
    /// Transport type (`type`).
    pub fn cmd_type(&self) -> u8 {
        self.type_
    }
    /// Sets the transport type.
    pub fn set_cmd_type(&mut self, v: u8) -> &mut Self {
        self.type_ = v;
        self
    }
    /// Input length in bytes.
    pub fn inlen(&self) -> u32 {
        self.inlen.get()
    }
    /// Sets the input length.
    pub fn set_inlen(&mut self, v: u32) -> &mut Self {
        self.inlen.set(v);
        self
    }
    /// First input mailbox address.
    pub fn in_ptr(&self) -> u64 {
        self.in_ptr.get()
    }
    /// Sets the first input mailbox address.
    pub fn set_in_ptr(&mut self, v: u64) -> &mut Self {
        self.in_ptr.set(v);
        self
    }
    /// First output mailbox address.
    pub fn out_ptr(&self) -> u64 {
        self.out_ptr.get()
    }
    /// Sets the first output mailbox address.
    pub fn set_out_ptr(&mut self, v: u64) -> &mut Self {
        self.out_ptr.set(v);
        self
    }
    /// Output length in bytes.
    pub fn outlen(&self) -> u32 {
        self.outlen.get()
    }
    /// Sets the output length.
    pub fn set_outlen(&mut self, v: u32) -> &mut Self {
        self.outlen.set(v);
        self
    }
    /// The token.
    pub fn token(&self) -> u8 {
        self.token
    }
    /// Sets the token.
    pub fn set_token(&mut self, v: u8) -> &mut Self {
        self.token = v;
        self
    }
    /// True while the device owns the entry (bit 0 of `status_own`).
    pub fn hw_owned(&self) -> bool {
        self.status_own & CMD_OWNER_HW != 0
    }
    /// The delivery status (bits 7..1 of `status_own`), valid once the device gave the entry back.
    pub fn delivery_status(&self) -> DeliveryStatus {
        DeliveryStatus(self.status_own >> 1)
    }
    /// Hands the entry to the device: `status_own = CMD_OWNER_HW`, status cleared (what
    /// rdma-core's `mlx5_vfio_post_cmd` and the kernel's `cmd_work_handler` write last,
    /// before the barrier and the doorbell).
    pub fn give_to_hw(&mut self) -> &mut Self {
        self.status_own = CMD_OWNER_HW;
        self
    }
    /// Sets the whole `status_own` byte (a device model completing the command writes
    /// `status << 1` with the ownership bit clear).
    pub fn set_status_own(&mut self, v: u8) -> &mut Self {
        self.status_own = v;
        self
    }
    /// Completes the entry as a device does: delivery status in bits 7..1, ownership cleared.
    ///
    /// Errors: [`crate::Error::FieldOverflow`] if `status` does not fit in 7 bits.
    pub fn complete(&mut self, status: DeliveryStatus) -> crate::Result<&mut Self> {
        if status.0 > 0x7f {
            return Err(crate::Error::FieldOverflow {
                what: "mlx5_cmd_layout.status",
                value: u64::from(status.0),
                bits: 7,
            });
        }
        self.status_own = status.0 << 1;
        Ok(self)
    }
}

/// One mailbox block (`struct mlx5_cmd_prot_block`, kernel `device.h`; rdma-core
/// `struct mlx5_cmd_block`): 512 data bytes, then the chain control fields. Offsets: data 0x000,
/// next 0x230, block_num 0x238, token 0x23d, ctrl_sig 0x23e, sig 0x23f; 576 bytes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CmdMailbox {
    /// This block's share of the message.
    pub data: [u8; MAILBOX_DATA_LEN],
    /// Reserved.
    pub rsvd0: [u8; 48],
    /// DMA address of the next block (0 in the last one). Must be [`MAILBOX_ALIGN`]-aligned.
    pub next: U64,
    /// This block's index in the chain, from 0.
    pub block_num: U32,
    /// Reserved.
    pub rsvd1: u8,
    /// The command's token (the same as the entry's).
    pub token: u8,
    /// Control signature (only checked with `cmdif_checksum`).
    pub ctrl_sig: u8,
    /// Block signature (only checked with `cmdif_checksum`).
    pub sig: u8,
}

crate::impl_view!(CmdMailbox => "mlx5_cmd_prot_block");

impl CmdMailbox {
    /// Next block address.
    pub fn next(&self) -> u64 {
        self.next.get()
    }
    /// Sets the next block address.
    pub fn set_next(&mut self, v: u64) -> &mut Self {
        self.next.set(v);
        self
    }
    /// Block number.
    pub fn block_num(&self) -> u32 {
        self.block_num.get()
    }
    /// Sets the block number.
    pub fn set_block_num(&mut self, v: u32) -> &mut Self {
        self.block_num.set(v);
        self
    }
    /// The token.
    pub fn token(&self) -> u8 {
        self.token
    }
    /// Sets the token.
    pub fn set_token(&mut self, v: u8) -> &mut Self {
        self.token = v;
        self
    }
}

/// How many mailbox blocks a message of `len` bytes needs: the first [`CMD_INLINE_LEN`] go
/// inline, the rest in blocks of [`MAILBOX_DATA_LEN`] (rdma-core `mlx5_calc_cmd_blocks`).
///
/// ```
/// use bypass_hw::cmd::entry::mailbox_blocks;
/// assert_eq!(mailbox_blocks(16), 0);
/// assert_eq!(mailbox_blocks(17), 1);
/// assert_eq!(mailbox_blocks(16 + 512), 1);
/// assert_eq!(mailbox_blocks(16 + 513), 2);
/// ```
pub const fn mailbox_blocks(len: usize) -> usize {
    len.saturating_sub(CMD_INLINE_LEN)
        .div_ceil(MAILBOX_DATA_LEN)
}

/// The byte range of a `len`-byte message that goes inline in the entry.
pub const fn inline_range(len: usize) -> Range<usize> {
    0..if len < CMD_INLINE_LEN {
        len
    } else {
        CMD_INLINE_LEN
    }
}

/// The byte range of a `len`-byte message that block number `block` carries, or `None` if the
/// message needs fewer blocks. The range starts at `CMD_INLINE_LEN + block * 512`.
pub fn block_range(len: usize, block: usize) -> Option<Range<usize>> {
    if block >= mailbox_blocks(len) {
        return None;
    }
    let start = CMD_INLINE_LEN.checked_add(block.checked_mul(MAILBOX_DATA_LEN)?)?;
    let end = start.saturating_add(MAILBOX_DATA_LEN).min(len);
    Some(start..end)
}

crate::syndrome::explained_codes! {
    /// The delivery status the device writes in bits 7..1 of an entry's `status_own`: whether the
    /// command could be delivered to the firmware at all (the command's own result is in
    /// `mbox_out.status`). Values: kernel `drivers/net/ethernet/mellanox/mlx5/core/cmd.c`
    /// `MLX5_CMD_DELIVERY_STAT_*`, names and meanings from its `deliv_status_to_str`.
    pub struct DeliveryStatus(u8) {
    /// `MLX5_CMD_DELIVERY_STAT_OK`.
    OK = 0x0 => "delivered; read mbox_out.status for the command's own result",
    /// `MLX5_CMD_DELIVERY_STAT_SIGNAT_ERR`.
    SIGNAT_ERR = 0x1 => "bad entry/mailbox signature: clear cmdif_checksum in SET_HCA_CAP or compute signatures",
    /// `MLX5_CMD_DELIVERY_STAT_TOK_ERR`.
    TOK_ERR = 0x2 => "a mailbox token differs from the entry's: write the same token in every block",
    /// `MLX5_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR`.
    BAD_BLK_NUM_ERR = 0x3 => "mailbox block numbers are not 0, 1, 2, ...: renumber the chain",
    /// `MLX5_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR`.
    OUT_PTR_ALIGN_ERR = 0x4 => "output mailbox pointer not aligned: align blocks to 1 KiB (MAILBOX_ALIGN)",
    /// `MLX5_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR`.
    IN_PTR_ALIGN_ERR = 0x5 => "input mailbox pointer not aligned: align blocks to 1 KiB (MAILBOX_ALIGN)",
    /// `MLX5_CMD_DELIVERY_STAT_FW_ERR`.
    FW_ERR = 0x6 => "firmware internal error: check the health buffer; the device may need a reset",
    /// `MLX5_CMD_DELIVERY_STAT_IN_LENGTH_ERR`.
    IN_LENGTH_ERR = 0x7 => "input length wrong for the opcode or the chain too short: check inlen and the block count",
    /// `MLX5_CMD_DELIVERY_STAT_OUT_LENGTH_ERR`.
    OUT_LENGTH_ERR = 0x8 => "output length wrong for the opcode or the chain too short: check outlen and the block count",
    /// `MLX5_CMD_DELIVERY_STAT_RES_FLD_NOT_CLR_ERR`.
    RES_FLD_NOT_CLR_ERR = 0x9 => "a reserved field is not zero: zero the entry and mailboxes before filling them",
    /// `MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR`.
    CMD_DESCR_ERR = 0x10 => "bad command descriptor (e.g. type is not 7): set type = MLX5_PCI_CMD_XPORT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::View;

    #[test]
    fn sizes_match_the_kernel_structs() {
        assert_eq!(CmdLayout::SIZE, CMD_ENTRY_SIZE);
        assert_eq!(CmdMailbox::SIZE, MAILBOX_SIZE);
        const { assert!(MAILBOX_SIZE <= MAILBOX_ALIGN && MAILBOX_ALIGN <= MAILBOX_STRIDE) };
    }

    #[test]
    fn block_ranges_tile_the_message() {
        for len in [0usize, 1, 16, 17, 528, 529, 4096, 0x1010] {
            let mut next = inline_range(len).end;
            for b in 0..mailbox_blocks(len) {
                let r = block_range(len, b).unwrap();
                assert_eq!(r.start, next);
                assert!(r.len() <= MAILBOX_DATA_LEN && !r.is_empty());
                next = r.end;
            }
            assert_eq!(next, len);
            assert_eq!(block_range(len, mailbox_blocks(len)), None);
        }
    }

    #[test]
    fn ownership_and_status() {
        let mut buf = [0u8; 64];
        let e = CmdLayout::view_mut(&mut buf).unwrap();
        e.give_to_hw();
        assert!(e.hw_owned());
        e.complete(DeliveryStatus::IN_LENGTH_ERR).unwrap();
        assert!(!e.hw_owned());
        assert_eq!(e.delivery_status(), DeliveryStatus::IN_LENGTH_ERR);
        assert_eq!(buf[0x3f], 0x0e);
        assert!(
            CmdLayout::view_mut(&mut buf)
                .unwrap()
                .complete(DeliveryStatus(0x80))
                .is_err()
        );
    }
}
