//! Event queue commands: the EQ context (`eqc`) and CREATE_EQ / QUERY_EQ / DESTROY_EQ, with the
//! EQ status and arm-state values and the event-type subscription bitmask.
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_eqc_bits`,
//! `mlx5_ifc_create_eq_in_bits`, `MLX5_EQC_*`); the event-type subscription follows the kernel's
//! `drivers/net/ethernet/mellanox/mlx5/core/eq.c` (`create_map_eq`: bit `t % 64` of 64-bit word `t
//! / 64` of `event_bitmask`) and rdma-core `providers/mlx5/mlx5_vfio.c` (`create_async_eqs`).
//!
//! Owns: the EQ command layouts. Must not: poll EQs or keep state.

use crate::cmd::list::{be64_capacity, be64_get, be64_list, be64_set, with_be64_list};
use crate::error::Result;

/// `eqc.status` values (kernel mlx5_ifc.h `MLX5_EQC_STATUS_*`).
pub mod status {
    /// `MLX5_EQC_STATUS_OK`.
    pub const OK: u8 = 0x0;
    /// `MLX5_EQC_STATUS_EQ_WRITE_FAILURE`: the device could not write an EQE.
    pub const EQ_WRITE_FAILURE: u8 = 0xa;
}

/// `eqc.st` (arm state) values (kernel mlx5_ifc.h `MLX5_EQC_ST_*`).
pub mod st {
    /// `MLX5_EQC_ST_ARMED`: the next EQE raises the interrupt.
    pub const ARMED: u8 = 0x9;
    /// `MLX5_EQC_ST_FIRED`: an interrupt was raised; arm again through the UAR.
    pub const FIRED: u8 = 0xa;
}

crate::prm_layout! {
    /// The EQ context (`mlx5_ifc_eqc_bits`, 64 bytes).
    pub struct Eqc("eqc", 0x40) {
        /// EQ status ([`status`]); read-only.
        status, set_status: 0x0, 4;
        /// Event collapse: every EQE goes to entry 0.
        ec, set_ec: 0xd, 1;
        /// Overrun ignore.
        oi, set_oi: 0xe, 1;
        /// Arm state ([`st`]).
        st, set_st: 0x14, 4;
        /// Offset of the ring inside its first page, in 64-byte units.
        page_offset, set_page_offset: 0x54, 6;
        /// log2 of the number of EQEs.
        log_eq_size, set_log_eq_size: 0x63, 5;
        /// UAR page whose doorbells arm this EQ and update its consumer index.
        uar_page, set_uar_page: 0x68, 24;
        /// MSI-X vector raised by this EQ (12 bits; older kernels: 8 bits at bit 0xb8).
        intr, set_intr: 0xb4, 12;
        /// log2 of the page size of the PAS list, relative to 4 KiB.
        log_page_size, set_log_page_size: 0xc3, 5;
        /// Consumer counter (QUERY_EQ).
        consumer_counter, set_consumer_counter: 0x148, 24;
        /// Producer counter (QUERY_EQ).
        producer_counter, set_producer_counter: 0x168, 24;
    }
}

/// Byte offset of `pas[]` in CREATE_EQ / QUERY_EQ (bit 0x880).
pub const EQ_PAS_OFFSET: usize = 0x110;
/// Byte offset of `create_eq_in.event_bitmask` (bit 0x2c0): 4 big-endian 64-bit words.
pub const EVENT_BITMASK_OFFSET: usize = 0x58;
/// Number of 64-bit words in `create_eq_in.event_bitmask[4][0x40]`.
pub const EVENT_BITMASK_WORDS: usize = 4;

crate::prm_layout! {
    /// CREATE_EQ input (`mlx5_ifc_create_eq_in_bits`): 0x110 bytes, then `pas[]`. The
    /// 256-bit `event_bitmask` has hand-written accessors ([`CreateEqIn::event_bitmask`]).
    pub struct CreateEqIn("create_eq_in", 0x110) {
        /// [`crate::cmd::Opcode::CREATE_EQ`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        sub {
            /// The EQ context.
            eq_context_entry, eq_context_entry_mut: Eqc @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// CREATE_EQ output (`mlx5_ifc_create_eq_out_bits`).
    pub struct CreateEqOut("create_eq_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The new EQ number (8 bits).
        eq_number, set_eq_number: 0x58, 8;
    }
}

crate::prm_layout! {
    /// QUERY_EQ input (`mlx5_ifc_query_eq_in_bits`).
    pub struct QueryEqIn("query_eq_in", 0x10) {
        /// [`crate::cmd::Opcode::QUERY_EQ`].
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The EQ to query.
        eq_number, set_eq_number: 0x58, 8;
    }
}

crate::prm_layout! {
    /// QUERY_EQ output (`mlx5_ifc_query_eq_out_bits`): 0x110 bytes, then `pas[]`. Unlike
    /// CREATE_EQ it returns only the first 64-bit word of the event bitmask.
    pub struct QueryEqOut("query_eq_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// Event types 0..63 this EQ is subscribed to (bit `t` = type `t`).
        event_bitmask, set_event_bitmask: 0x2c0, 64;
        sub {
            /// The EQ context.
            eq_context_entry, eq_context_entry_mut: Eqc @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// DESTROY_EQ input (`mlx5_ifc_destroy_eq_in_bits`).
    pub struct DestroyEqIn("destroy_eq_in", 0x10) {
        /// [`crate::cmd::Opcode::DESTROY_EQ`].
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The EQ to destroy.
        eq_number, set_eq_number: 0x58, 8;
    }
}

crate::prm_layout! {
    /// DESTROY_EQ output (`mlx5_ifc_destroy_eq_out_bits`).
    pub struct DestroyEqOut("destroy_eq_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

be64_list!(
    CreateEqIn,
    "create_eq_in.pas",
    EQ_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);
be64_list!(
    QueryEqOut,
    "query_eq_out.pas",
    EQ_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);

/// Bytes of a CREATE_EQ input with `n_pas` page addresses.
pub const fn create_eq_in_len(n_pas: usize) -> usize {
    with_be64_list(CreateEqIn::LEN, n_pas)
}

/// The `event_bitmask` word and bit that subscribe to event type `event_type` (`t / 64`,
/// `1 << (t % 64)`), or `None` for a type past the 256 the bitmask holds.
pub const fn event_bit(event_type: u16) -> Option<(usize, u64)> {
    let word = (event_type / 64) as usize;
    if word >= EVENT_BITMASK_WORDS {
        None
    } else {
        Some((word, 1u64 << (event_type % 64)))
    }
}

impl<T: AsRef<[u8]>> CreateEqIn<T> {
    /// Word `index` (0..4) of `event_bitmask[4][0x40]`: event types `64*index .. 64*index+63`.
    ///
    /// Errors: [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for `index >= 4`.
    pub fn event_bitmask(&self, index: usize) -> Result<u64> {
        let b = self.buf.as_ref();
        let fixed = b
            .get(..EVENT_BITMASK_OFFSET + 8 * EVENT_BITMASK_WORDS)
            .unwrap_or(b);
        check_word(index)?;
        be64_get(
            "create_eq_in.event_bitmask",
            fixed,
            EVENT_BITMASK_OFFSET,
            index,
        )
    }

    /// True if the bitmask subscribes to `event_type`.
    pub fn has_event(&self, event_type: u16) -> bool {
        match event_bit(event_type) {
            Some((w, bit)) => self.event_bitmask(w).is_ok_and(|v| v & bit != 0),
            None => false,
        }
    }

    /// Alias of [`CreateEqIn::eq_context_entry`] (the `eqc`).
    pub fn eqc(&self) -> Eqc<&[u8]> {
        self.eq_context_entry()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CreateEqIn<T> {
    /// Sets word `index` (0..4) of `event_bitmask`.
    ///
    /// Errors: [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for `index >= 4` or a
    /// buffer too short to hold the word.
    pub fn set_event_bitmask(&mut self, index: usize, value: u64) -> Result<&mut Self> {
        check_word(index)?;
        let b = self.buf.as_mut();
        let n = b.len().min(EVENT_BITMASK_OFFSET + 8 * EVENT_BITMASK_WORDS);
        let fixed = b.get_mut(..n).unwrap_or_default();
        be64_set(
            "create_eq_in.event_bitmask",
            fixed,
            EVENT_BITMASK_OFFSET,
            index,
            value,
        )?;
        Ok(self)
    }

    /// Subscribes the EQ to event type `event_type` ([`crate::eqe`] event types), keeping the
    /// other bits.
    ///
    /// Errors: [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for a type >= 256.
    pub fn enable_event(&mut self, event_type: u16) -> Result<&mut Self> {
        let (w, bit) = event_bit(event_type).ok_or(crate::Error::IndexOutOfRange {
            what: "create_eq_in.event_bitmask",
            index: usize::from(event_type),
            len: EVENT_BITMASK_WORDS * 64,
        })?;
        let old = self.event_bitmask(w)?;
        self.set_event_bitmask(w, old | bit)
    }

    /// Alias of [`CreateEqIn::eq_context_entry_mut`] (the `eqc`).
    pub fn eqc_mut(&mut self) -> Eqc<&mut [u8]> {
        self.eq_context_entry_mut()
    }
}

fn check_word(index: usize) -> Result<()> {
    if index < EVENT_BITMASK_WORDS {
        Ok(())
    } else {
        Err(crate::Error::IndexOutOfRange {
            what: "create_eq_in.event_bitmask",
            index,
            len: EVENT_BITMASK_WORDS,
        })
    }
}

/// Bytes of the EQE ring: `(1 << log_eq_size) * 64` (EQEs are 64 bytes), or `None` on overflow.
pub fn eq_buf_bytes(log_eq_size: u8) -> Option<u64> {
    1u64.checked_shl(u32::from(log_eq_size))?.checked_mul(64)
}

const _: () = assert!(be64_capacity(CreateEqIn::LEN, EQ_PAS_OFFSET) == 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_bits_land_in_the_right_word() {
        let mut b = [0u8; 0x110];
        let mut v = CreateEqIn::new_checked(&mut b[..]).unwrap();
        v.enable_event(0x0a)
            .unwrap()
            .enable_event(0x0b)
            .unwrap()
            .enable_event(65)
            .unwrap();
        assert!(v.enable_event(256).is_err());
        assert_eq!(&b[0x58..0x60], &[0, 0, 0, 0, 0, 0, 0x0c, 0x00]);
        assert_eq!(&b[0x60..0x68], &[0, 0, 0, 0, 0, 0, 0, 0x02]);
        let v = CreateEqIn::new_checked(&b[..]).unwrap();
        assert!(v.has_event(0xa) && v.has_event(65) && !v.has_event(1) && !v.has_event(300));
        assert!(v.event_bitmask(4).is_err());
        assert_eq!(
            v.pas(0),
            Err(crate::Error::IndexOutOfRange {
                what: "create_eq_in.pas",
                index: 0,
                len: 0
            })
        );
    }
}
