//! The command queue as the device processes it: entries and mailbox chains, by DMA.
//!
//! Owns: [`process`] (one `cmd_dbell` write), the commands that wait for a QP's bursts in
//! flight ([`retry_waiting`]; the ledger keeps them), reading an entry, gathering its input
//! from the inline bytes and the `in_ptr` mailbox chain, checking the `out_ptr` chain,
//! scattering the output, the delivery status, handing the entry back, and the CMD
//! completion event. Must not: interpret commands (that is [`super::execute`]).
//!
//! Sources: kernel `drivers/net/ethernet/mellanox/mlx5/core/cmd.c` (`mlx5_copy_to_msg`,
//! `mlx5_copy_from_msg`: 16 bytes inline, then 512-byte blocks chained by `next`, numbered by
//! `block_num` from 0, each carrying the entry's `token`; `cmd_work_handler`: ownership bit
//! set last; `mlx5_cmd_comp_handler`: the CMD EQE's `vector` is a bitmap of completed slots;
//! `deliv_status_to_str`), rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_post_cmd`), and
//! `mlx5_ifc.h` (`cmd_if_box_bits.next_pointer_31_10`: blocks are 1 KiB aligned). Where the
//! sources are silent, [`deliver`] documents the choice.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::entry::{
    CMD_ENTRY_SIZE, CMD_INLINE_LEN, CmdLayout, CmdMailbox, DeliveryStatus, MAILBOX_ALIGN,
    MAILBOX_DATA_LEN, MAILBOX_SIZE, MLX5_PCI_CMD_XPORT, block_range, mailbox_blocks,
};
use bypass_hw::cmd::qp::{DestroyQpIn, Qp2RstIn};
use bypass_hw::eqe::{EQE_DATA_LEN, EventType};
use zerocopy::FromBytes;

use super::Hca;
use crate::bar0::{CMDQ_LOG_SIZE, CMDQ_LOG_STRIDE};
use crate::io::Io;
use crate::iommu::DmaFault;
use crate::trace::TraceEvent;

/// The longest command input or output the device accepts: 16 inline bytes and 2048 mailbox
/// blocks (1 MiB), more than any command needs (a 128 K-entry MTT list).
pub const MAX_MSG_LEN: usize = CMD_INLINE_LEN + 2048 * MAILBOX_DATA_LEN;

/// Byte offset of `out[16]` in an entry.
const ENTRY_OUT_OFF: u64 = 0x20;
/// Byte offset of `status_own` in an entry.
const ENTRY_STATUS_OWN_OFF: u64 = 0x3f;

/// Processes the command queue slots in `slots` (the `cmd_dbell` bitmask), lowest first. A
/// command that must wait for its QP's bursts in flight ([`waits_for`]) is kept by the burst
/// ledger (`engine::ledger`) and run by [`retry_waiting`] once they are read.
pub(crate) fn process(c: &mut Hca<'_>, slots: u32) {
    let nslots = 1u32 << CMDQ_LOG_SIZE;
    for slot in 0..nslots.min(32) {
        if slots & (1 << slot) != 0 {
            match waits_for(c, slot as u8) {
                Some(qpn) => c.dp.hold_command(slot as u8, qpn),
                None => run_slot(c, slot as u8),
            }
        }
    }
}

/// Runs the waiting commands whose QP no burst reads any more, in slot order; true if one ran.
pub(crate) fn retry_waiting(c: &mut Hca<'_>) -> bool {
    let mut ran = false;
    let mut at = 0;
    while let Some(slot) = c.dp.next_command(&mut at) {
        run_slot(c, slot);
        ran = true;
    }
    ran
}

/// The QP whose bursts the command in `slot` must wait for: a 2RST_QP or DESTROY_QP of a QP
/// whose by-reference bursts still read its memory. Either hands the QP's buffers back to the
/// application (the driver cleans its CQs and the verbs layer releases every request still
/// outstanding), so it may complete only once nothing the QP sent still reads them: a NIC
/// quiesces a QP's DMA before it completes these commands (the kernel frees or reuses the
/// QP's buffers as soon as `mlx5_core_qp_modify` to RESET / `mlx5_core_destroy_qp` return).
/// Both inputs are 16 bytes, inline in the entry, which stays the device's until the command
/// completes. Anything else, or an entry that cannot be read, does not wait ([`run_slot`]
/// reports what is wrong with it).
fn waits_for(c: &mut Hca<'_>, slot: u8) -> Option<u32> {
    let addr = c.cmdq.wrapping_add(u64::from(slot) << CMDQ_LOG_STRIDE);
    let mut raw = [0u8; CMD_ENTRY_SIZE];
    c.io.dma.read(addr, &mut raw).ok()?;
    let entry = CmdLayout::read_from_bytes(&raw[..]).ok()?;
    if !entry.hw_owned() {
        return None;
    }
    let input = &entry.input[..];
    let qpn = match Opcode(bypass_hw::cmd::MboxIn::wrap_unchecked(input).opcode() as u16) {
        Opcode::QP_2RST => Qp2RstIn::new_checked(input).ok()?.qpn(),
        Opcode::DESTROY_QP => DestroyQpIn::new_checked(input).ok()?.qpn(),
        _ => return None,
    };
    c.dp.bursts_in_flight(qpn).then_some(qpn)
}

fn run_slot(c: &mut Hca<'_>, slot: u8) {
    let addr = c.cmdq.wrapping_add(u64::from(slot) << CMDQ_LOG_STRIDE);
    let mut raw = [0u8; CMD_ENTRY_SIZE];
    if let Err(f) = c.io.dma.read(addr, &mut raw) {
        c.io.dma_fault(f);
        return;
    }
    let Ok(entry) = CmdLayout::read_from_bytes(&raw[..]) else {
        return;
    };
    if !entry.hw_owned() {
        // The driver did not hand this slot over: nothing to do (kernel and rdma-core set
        // the ownership bit before ringing).
        return;
    }
    let inline_in = entry.input;
    let (delivery, out_inline, exec) = match deliver(c, &entry) {
        Ok((out, exec)) => (DeliveryStatus::OK, out, Some(exec)),
        Err(d) => (d, [0u8; CMD_INLINE_LEN], None),
    };
    if delivery == DeliveryStatus::OK
        && let Err(f) =
            c.io.dma
                .write(addr.wrapping_add(ENTRY_OUT_OFF), &out_inline)
    {
        c.io.dma_fault(f);
        return;
    }
    // Ownership goes back last: status in bits 7..1, owner bit clear.
    if let Err(f) =
        c.io.dma
            .write(addr.wrapping_add(ENTRY_STATUS_OWN_OFF), &[delivery.0 << 1])
    {
        c.io.dma_fault(f);
        return;
    }
    c.io.counters.commands += 1;
    let at = c.io.now;
    let hdr = bypass_hw::cmd::MboxIn::wrap_unchecked(&inline_in[..]);
    let (opcode, op_mod, status, syndrome) = match exec {
        Some(e) => (e.opcode, e.op_mod, e.status, e.syndrome),
        None => (hdr.opcode() as u16, hdr.op_mod() as u16, 0, 0),
    };
    c.io.trace.record(|| TraceEvent::Command {
        at,
        slot,
        opcode,
        op_mod,
        delivery: delivery.0,
        status,
        syndrome,
    });
    if c.comp.event_subscribed(EventType::CMD) {
        let mut data = [0u8; EQE_DATA_LEN];
        data[..4].copy_from_slice(&(1u32 << slot).to_be_bytes());
        c.comp.post_event(&mut c.io, EventType::CMD, 0, &data);
    }
}

/// Gathers the input, checks the output chain, runs the command and scatters its output.
/// Returns the 16 inline output bytes.
///
/// Choices where the sources are silent (documented, stable):
/// - A mailbox the IOMMU refuses is reported as a pointer error of its direction
///   (IN_PTR_ALIGN_ERR / OUT_PTR_ALIGN_ERR): the pointer does not name usable memory.
/// - A chain that ends (next = 0) before `inlen`/`outlen` is covered: IN_/OUT_LENGTH_ERR.
/// - `inlen`/`outlen` above [`MAX_MSG_LEN`]: IN_/OUT_LENGTH_ERR (no command is that long).
/// - The output chain is checked (alignment, block numbers, token, writability) before the
///   command runs, so a bad output chain never leaves a command half done.
/// - An entry the device cannot read is counted as a DMA fault and left alone ([`run_slot`]):
///   there is no way to report anything in memory the device cannot reach.
fn deliver(
    c: &mut Hca<'_>,
    entry: &CmdLayout,
) -> Result<([u8; CMD_INLINE_LEN], super::Executed), DeliveryStatus> {
    if entry.cmd_type() != MLX5_PCI_CMD_XPORT {
        return Err(DeliveryStatus::CMD_DESCR_ERR);
    }
    let inlen = usize::try_from(entry.inlen()).unwrap_or(usize::MAX);
    let outlen = usize::try_from(entry.outlen()).unwrap_or(usize::MAX);
    if inlen > MAX_MSG_LEN {
        return Err(DeliveryStatus::IN_LENGTH_ERR);
    }
    if outlen > MAX_MSG_LEN {
        return Err(DeliveryStatus::OUT_LENGTH_ERR);
    }
    let token = entry.token();
    let mut input = Vec::with_capacity(inlen.min(64 * 1024));
    input.extend_from_slice(entry.input.get(..inlen.min(CMD_INLINE_LEN)).unwrap_or(&[]));
    walk_chain(
        &mut c.io,
        entry.in_ptr(),
        token,
        inlen,
        Chain::In(&mut input),
    )?;
    let mut out_blocks = Vec::new();
    walk_chain(
        &mut c.io,
        entry.out_ptr(),
        token,
        outlen,
        Chain::Out(&mut out_blocks),
    )?;

    let (output, exec) = super::execute(c, &input, outlen);

    let mut inline = [0u8; CMD_INLINE_LEN];
    let n = output.len().min(CMD_INLINE_LEN);
    inline[..n].copy_from_slice(&output[..n]);
    let meaningful = output.len().min(outlen);
    for (b, &addr) in out_blocks.iter().enumerate() {
        let Some(r) = block_range(outlen, b) else {
            break;
        };
        let start = r.start.min(meaningful);
        let end = r.end.min(meaningful);
        if start >= end {
            break;
        }
        if let Err(f) = c.io.dma.write(addr, &output[start..end]) {
            c.io.dma_fault(f);
            return Err(DeliveryStatus::OUT_PTR_ALIGN_ERR);
        }
    }
    Ok((inline, exec))
}

/// What a chain walk does with each block.
enum Chain<'a> {
    /// Append the block's share of the input.
    In(&'a mut Vec<u8>),
    /// Check the block is writable (its data is zeroed) and remember its address.
    Out(&'a mut Vec<u64>),
}

/// Walks the mailbox chain from `first` that carries a `len`-byte message.
fn walk_chain(
    io: &mut Io<'_>,
    first: u64,
    token: u8,
    len: usize,
    mut what: Chain<'_>,
) -> Result<(), DeliveryStatus> {
    let (align_err, len_err) = match what {
        Chain::In(_) => (
            DeliveryStatus::IN_PTR_ALIGN_ERR,
            DeliveryStatus::IN_LENGTH_ERR,
        ),
        Chain::Out(_) => (
            DeliveryStatus::OUT_PTR_ALIGN_ERR,
            DeliveryStatus::OUT_LENGTH_ERR,
        ),
    };
    let mut ptr = first;
    for b in 0..mailbox_blocks(len) {
        if ptr == 0 {
            return Err(len_err);
        }
        if !ptr.is_multiple_of(MAILBOX_ALIGN as u64) {
            return Err(align_err);
        }
        let mut raw = [0u8; MAILBOX_SIZE];
        if let Err(f) = io.dma.read(ptr, &mut raw) {
            io.dma_fault(f);
            return Err(align_err);
        }
        let Ok(block) = CmdMailbox::read_from_bytes(&raw[..]) else {
            return Err(align_err);
        };
        if u64::from(block.block_num()) != b as u64 {
            return Err(DeliveryStatus::BAD_BLK_NUM_ERR);
        }
        if block.token() != token {
            return Err(DeliveryStatus::TOK_ERR);
        }
        let Some(r) = block_range(len, b) else {
            return Err(len_err);
        };
        match &mut what {
            Chain::In(input) => input.extend_from_slice(&block.data[..r.len()]),
            Chain::Out(blocks) => {
                if let Err(f) = zero_data(io, ptr) {
                    io.dma_fault(f);
                    return Err(align_err);
                }
                blocks.push(ptr);
            }
        }
        ptr = block.next();
    }
    Ok(())
}

fn zero_data(io: &mut Io<'_>, ptr: u64) -> Result<(), DmaFault> {
    io.dma.write(ptr, &[0u8; MAILBOX_DATA_LEN])
}
