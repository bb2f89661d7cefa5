//! The RoCE extension transport headers that follow the BTH: RETH, AETH, AtomicETH,
//! AtomicAckETH, ImmDt, IETH, DETH. Which ones an opcode carries, and in which order, is in
//! `opcode` ([`crate::roce::opcode::OpcodeInfo`]).
//!
//! Owns: the header layouts, each a `zerocopy` view with typed getters and setters.
//! Must not: decide which headers are present.
//!
//! Sources: IBTA vol. 1 §9.3 (figures 96-104); Linux `drivers/infiniband/sw/rxe/rxe_hdr.h`
//! (`struct rxe_reth`, `rxe_aeth`, `rxe_atmeth` (packed), `rxe_atmack`, `rxe_immdt`,
//! `rxe_ieth`, `rxe_deth`, and `RXE_*_BYTES`).

use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};
use crate::roce::opcode::MASK_24;
use crate::syndrome::AethSyndrome;

/// The Q_Key of the general services interface, QP1 (IBTA §13.5.1; rxe `GSI_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// RDMA Extended Transport Header, 16 bytes (IBTA §9.3.3; rxe `struct rxe_reth`):
/// virtual address (8) | R_Key (4) | DMA length (4). `Debug` shows neither the address nor the
/// key (they let a peer reach that memory): read them with [`Reth::va`] and [`Reth::rkey`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq, Default,
)]
#[repr(C)]
pub struct Reth {
    va: U64,
    rkey: U32,
    len: U32,
}

/// ACK Extended Transport Header, 4 bytes (IBTA §9.3.5; rxe `struct rxe_aeth`):
/// syndrome (8) | MSN (24).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct Aeth {
    smsn: U32,
}

/// Atomic Extended Transport Header, 28 bytes, packed (IBTA §9.3.4; rxe `struct rxe_atmeth`,
/// `__packed`): virtual address (8) | R_Key (4) | swap or add data (8) | compare data (8).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq, Default,
)]
#[repr(C)]
pub struct AtomicEth {
    va: U64,
    rkey: U32,
    swap_add: U64,
    comp: U64,
}

/// Atomic Acknowledge Extended Transport Header, 8 bytes (IBTA §9.3.6; rxe `struct rxe_atmack`):
/// the original remote data.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct AtomicAckEth {
    orig: U64,
}

/// Immediate Data, 4 bytes (IBTA §9.3.7; rxe `struct rxe_immdt`). Opaque to the transport;
/// verbs hand it over as a big-endian 32-bit value (`imm_data` is `__be32`).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct ImmDt {
    imm: U32,
}

/// Invalidate Extended Transport Header, 4 bytes (IBTA §9.3.8; rxe `struct rxe_ieth`):
/// the R_Key to invalidate.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq, Default,
)]
#[repr(C)]
pub struct Ieth {
    rkey: U32,
}

/// Datagram Extended Transport Header, 8 bytes (IBTA §9.3.2; rxe `struct rxe_deth`):
/// Q_Key (4) | reserved (8 bits) | source QP (24 bits).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct Deth {
    qkey: U32,
    sqp: U32,
}

crate::impl_view!(
    Reth => "rxe_reth",
    Aeth => "rxe_aeth",
    AtomicEth => "rxe_atmeth",
    AtomicAckEth => "rxe_atmack",
    ImmDt => "rxe_immdt",
    Ieth => "rxe_ieth",
    Deth => "rxe_deth",
);

impl Reth {
    /// A RETH with these fields.
    pub fn new(va: u64, rkey: u32, len: u32) -> Self {
        Self {
            va: va.into(),
            rkey: rkey.into(),
            len: len.into(),
        }
    }
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        self.va.get()
    }
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        self.va.set(v);
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        self.rkey.set(v);
    }
    /// DMA length: the length of the whole message, not of this packet.
    pub fn len(&self) -> u32 {
        self.len.get()
    }
    /// True when the DMA length is zero (a zero-length WRITE or READ).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Sets the DMA length.
    pub fn set_len(&mut self, v: u32) {
        self.len.set(v);
    }
}

impl Aeth {
    /// An AETH with this syndrome and MSN; an MSN wider than 24 bits is an error.
    pub fn new(syndrome: AethSyndrome, msn: u32) -> Result<Self> {
        let mut a = Self::default();
        a.set_syndrome(syndrome);
        a.set_msn(msn)?;
        Ok(a)
    }
    /// Syndrome: ACK (with credits), RNR NAK (with timer) or NAK code.
    pub fn syndrome(&self) -> AethSyndrome {
        AethSyndrome((self.smsn.get() >> 24) as u8)
    }
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: AethSyndrome) {
        self.smsn
            .set((self.smsn.get() & MASK_24) | ((s.0 as u32) << 24));
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        self.smsn.get() & MASK_24
    }
    /// Sets the MSN; values wider than 24 bits are a [`Error::FieldOverflow`].
    pub fn set_msn(&mut self, v: u32) -> Result<()> {
        if v > MASK_24 {
            return Err(Error::FieldOverflow {
                what: "rxe_aeth.msn",
                value: v as u64,
                bits: 24,
            });
        }
        self.smsn.set((self.smsn.get() & !MASK_24) | v);
        Ok(())
    }
}

impl AtomicEth {
    /// An AtomicETH with these fields.
    pub fn new(va: u64, rkey: u32, swap_add: u64, comp: u64) -> Self {
        Self {
            va: va.into(),
            rkey: rkey.into(),
            swap_add: swap_add.into(),
            comp: comp.into(),
        }
    }
    /// Remote virtual address (8-byte aligned for a valid request).
    pub fn va(&self) -> u64 {
        self.va.get()
    }
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        self.va.set(v);
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        self.rkey.set(v);
    }
    /// Swap data (CMP_SWAP) or add data (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        self.swap_add.get()
    }
    /// Sets the swap/add data.
    pub fn set_swap_add(&mut self, v: u64) {
        self.swap_add.set(v);
    }
    /// Compare data (CMP_SWAP only).
    pub fn comp(&self) -> u64 {
        self.comp.get()
    }
    /// Sets the compare data.
    pub fn set_comp(&mut self, v: u64) {
        self.comp.set(v);
    }
}

impl AtomicAckEth {
    /// An AtomicAckETH carrying `orig`.
    pub fn new(orig: u64) -> Self {
        Self { orig: orig.into() }
    }
    /// The remote data before the atomic operation.
    pub fn orig(&self) -> u64 {
        self.orig.get()
    }
    /// Sets the original remote data.
    pub fn set_orig(&mut self, v: u64) {
        self.orig.set(v);
    }
}

impl ImmDt {
    /// Immediate data holding `imm` (big-endian on the wire).
    pub fn new(imm: u32) -> Self {
        Self { imm: imm.into() }
    }
    /// The immediate data, read big-endian.
    pub fn imm(&self) -> u32 {
        self.imm.get()
    }
    /// Sets the immediate data.
    pub fn set_imm(&mut self, v: u32) {
        self.imm.set(v);
    }
}

impl Ieth {
    /// An IETH invalidating `rkey`.
    pub fn new(rkey: u32) -> Self {
        Self { rkey: rkey.into() }
    }
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        self.rkey.set(v);
    }
}

impl Deth {
    /// A DETH with this Q_Key and source QP; a source QP wider than 24 bits is an error.
    pub fn new(qkey: u32, src_qp: u32) -> Result<Self> {
        let mut d = Self {
            qkey: qkey.into(),
            sqp: 0.into(),
        };
        d.set_src_qp(src_qp)?;
        Ok(d)
    }
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        self.qkey.get()
    }
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        self.qkey.set(v);
    }
    /// Source QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        self.sqp.get() & MASK_24
    }
    /// Sets the source QP; values wider than 24 bits are a [`Error::FieldOverflow`].
    pub fn set_src_qp(&mut self, v: u32) -> Result<()> {
        if v > MASK_24 {
            return Err(Error::FieldOverflow {
                what: "rxe_deth.src_qp",
                value: v as u64,
                bits: 24,
            });
        }
        self.sqp.set((self.sqp.get() & !MASK_24) | v);
        Ok(())
    }
}

/// What `Debug` of a header shows for its R_Key and virtual address.
const REDACTED: &str = "<redacted>";

impl core::fmt::Debug for Reth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reth")
            .field("va", &REDACTED)
            .field("rkey", &REDACTED)
            .field("len", &self.len())
            .finish()
    }
}

impl core::fmt::Debug for AtomicEth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AtomicEth")
            .field("va", &REDACTED)
            .field("rkey", &REDACTED)
            .field("swap_add", &self.swap_add())
            .field("comp", &self.comp())
            .finish()
    }
}

impl core::fmt::Debug for Ieth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ieth").field("rkey", &REDACTED).finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_shows_no_rkey_or_address() {
        let (va, rkey) = (0x7f12_3456_7000_u64, 0x00ab_cd42_u32);
        let text = [
            format!("{:?}", Reth::new(va, rkey, 64)),
            format!("{:?}", AtomicEth::new(va, rkey, 1, 2)),
            format!("{:?}", Ieth::new(rkey)),
        ];
        for t in &text {
            for secret in [
                format!("{va}"),
                format!("{va:x}"),
                format!("{rkey}"),
                format!("{rkey:x}"),
            ] {
                assert!(!t.contains(&secret), "{t} shows {secret}");
            }
            assert!(t.contains(REDACTED), "{t}");
        }
        assert!(text[0].contains("len: 64"), "{}", text[0]);
    }

    use super::*;
    use crate::view::View;

    #[test]
    fn sizes_match_rxe_bytes() {
        assert_eq!(
            (Reth::SIZE, Aeth::SIZE, AtomicEth::SIZE, AtomicAckEth::SIZE),
            (16, 4, 28, 8)
        );
        assert_eq!((ImmDt::SIZE, Ieth::SIZE, Deth::SIZE), (4, 4, 8));
    }

    #[test]
    fn layouts_are_big_endian() {
        let r = Reth::new(0x0102_0304_0506_0708, 0x1122_3344, 0x5566_7788);
        assert_eq!(
            r.as_bytes(),
            &[
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88
            ]
        );
        let a = Aeth::new(AethSyndrome::NAK_PSN_SEQ_ERROR, 0x01_0203).unwrap();
        assert_eq!(a.as_bytes(), &[0x60, 1, 2, 3]);
        assert_eq!(a.syndrome(), AethSyndrome::NAK_PSN_SEQ_ERROR);
        let d = Deth::new(GSI_QKEY, 0xab_cdef).unwrap();
        assert_eq!(d.as_bytes(), &[0x80, 0x01, 0, 0, 0, 0xab, 0xcd, 0xef]);
        let at = AtomicEth::new(1, 2, 3, 4);
        assert_eq!(at.as_bytes()[12..20], [0, 0, 0, 0, 0, 0, 0, 3]);
        assert!(Deth::new(0, 1 << 24).is_err());
        assert!(Aeth::new(AethSyndrome::ACK_UNLIMITED, 1 << 24).is_err());
    }
}
