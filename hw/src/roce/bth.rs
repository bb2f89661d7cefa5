//! The Base Transport Header (12 bytes), first header of every RoCEv2 UDP payload.
//!
//! Owns: [`Bth`] (the in-place view) and [`BthFields`] (its decoded value).
//! Must not: know which extension headers follow (that is `opcode`).
//!
//! Sources: IBTA vol. 1 §9.2 (figure 93 "BTH", table 38); Linux
//! `drivers/infiniband/sw/rxe/rxe_hdr.h` (`struct rxe_bth`, `BTH_*_MASK`).

use zerocopy::byteorder::big_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};
use crate::roce::opcode::{BthOpcode, MASK_24};

/// Size of the BTH in bytes (rxe `RXE_BTH_BYTES`).
pub const BTH_LEN: usize = 12;

/// The UDP destination port of RoCEv2 (IBTA annex A17.2.1; rxe `ROCE_V2_UDP_DPORT`).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;

/// The default (full-membership) partition key, the only one rxe sends and accepts
/// (rxe `rxe_param.h` default pkey table; `rxe_recv.c` `pkey_match`).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// Flags byte bits (rxe `rxe_hdr.h` `BTH_SE_MASK`, `BTH_MIG_MASK`, `BTH_PAD_MASK`, `BTH_TVER_MASK`).
const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const TVER: u8 = 0x0f;
/// QPN dword bits (rxe `BTH_FECN_MASK`, `BTH_BECN_MASK`).
const FECN: u32 = 0x8000_0000;
const BECN: u32 = 0x4000_0000;
/// PSN dword bit (rxe `BTH_ACK_MASK`).
const ACKREQ: u32 = 0x8000_0000;

/// Base Transport Header (IBTA §9.2; rxe `struct rxe_bth`), big-endian on the wire:
/// opcode (1) | SE MigReq PadCnt(2) TVer(4) (1) | P_Key (2) | FECN BECN resv6 DestQP(24) (4) |
/// AckReq resv7 PSN(24) (4).
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
pub struct Bth {
    opcode: u8,
    flags: u8,
    pkey: U16,
    qpn: U32,
    apsn: U32,
}

crate::impl_view!(Bth => "rxe_bth");

/// Decoded BTH fields (all of them, reserved bits excepted), for building and comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BthFields {
    /// OpCode.
    pub opcode: BthOpcode,
    /// Solicited Event.
    pub se: bool,
    /// MigReq.
    pub mig_req: bool,
    /// PadCnt (0..=3); the emitter computes it from the payload length.
    pub pad_cnt: u8,
    /// Transport header version (must be 0).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    /// OpCode.
    pub fn opcode(&self) -> BthOpcode {
        BthOpcode(self.opcode)
    }
    /// Sets OpCode.
    pub fn set_opcode(&mut self, op: BthOpcode) {
        self.opcode = op.0;
    }
    /// Solicited Event.
    pub fn se(&self) -> bool {
        self.flags & SE != 0
    }
    /// Sets Solicited Event.
    pub fn set_se(&mut self, v: bool) {
        self.flags = (self.flags & !SE) | if v { SE } else { 0 };
    }
    /// MigReq (path migration state).
    pub fn mig_req(&self) -> bool {
        self.flags & MIG != 0
    }
    /// Sets MigReq.
    pub fn set_mig_req(&mut self, v: bool) {
        self.flags = (self.flags & !MIG) | if v { MIG } else { 0 };
    }
    /// PadCnt: bytes of pad between the payload and the ICRC (0..=3).
    pub fn pad_cnt(&self) -> u8 {
        (self.flags >> PAD_SHIFT) & 3
    }
    /// Sets PadCnt; values above 3 are a [`Error::FieldOverflow`].
    pub fn set_pad_cnt(&mut self, v: u8) -> Result<()> {
        if v > 3 {
            return Err(Error::FieldOverflow {
                what: "rxe_bth.pad_cnt",
                value: v as u64,
                bits: 2,
            });
        }
        self.flags = (self.flags & !(3 << PAD_SHIFT)) | (v << PAD_SHIFT);
        Ok(())
    }
    /// Transport header version (IBTA: 0; rxe drops anything else).
    pub fn tver(&self) -> u8 {
        self.flags & TVER
    }
    /// Sets TVer; values above 15 are a [`Error::FieldOverflow`].
    pub fn set_tver(&mut self, v: u8) -> Result<()> {
        if v > TVER {
            return Err(Error::FieldOverflow {
                what: "rxe_bth.tver",
                value: v as u64,
                bits: 4,
            });
        }
        self.flags = (self.flags & !TVER) | v;
        Ok(())
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        self.pkey.get()
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        self.pkey.set(v);
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.qpn.get() & FECN != 0
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        self.qpn
            .set((self.qpn.get() & !FECN) | if v { FECN } else { 0 });
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.qpn.get() & BECN != 0
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        self.qpn
            .set((self.qpn.get() & !BECN) | if v { BECN } else { 0 });
    }
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        self.qpn.get() & MASK_24
    }
    /// Sets the destination QP; values wider than 24 bits are a [`Error::FieldOverflow`].
    pub fn set_dest_qp(&mut self, v: u32) -> Result<()> {
        if v > MASK_24 {
            return Err(Error::FieldOverflow {
                what: "rxe_bth.dest_qp",
                value: v as u64,
                bits: 24,
            });
        }
        self.qpn.set((self.qpn.get() & !MASK_24) | v);
        Ok(())
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.apsn.get() & ACKREQ != 0
    }
    /// Sets AckReq.
    pub fn set_ack_req(&mut self, v: bool) {
        self.apsn
            .set((self.apsn.get() & !ACKREQ) | if v { ACKREQ } else { 0 });
    }
    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        self.apsn.get() & MASK_24
    }
    /// Sets the PSN; values wider than 24 bits are a [`Error::FieldOverflow`].
    pub fn set_psn(&mut self, v: u32) -> Result<()> {
        if v > MASK_24 {
            return Err(Error::FieldOverflow {
                what: "rxe_bth.psn",
                value: v as u64,
                bits: 24,
            });
        }
        self.apsn.set((self.apsn.get() & !MASK_24) | v);
        Ok(())
    }

    /// All fields, decoded.
    pub fn fields(&self) -> BthFields {
        BthFields {
            opcode: self.opcode(),
            se: self.se(),
            mig_req: self.mig_req(),
            pad_cnt: self.pad_cnt(),
            tver: self.tver(),
            pkey: self.pkey(),
            fecn: self.fecn(),
            becn: self.becn(),
            dest_qp: self.dest_qp(),
            ack_req: self.ack_req(),
            psn: self.psn(),
        }
    }

    /// A BTH holding `f`, reserved bits zero; a field too wide for the wire is an error.
    pub fn from_fields(f: &BthFields) -> Result<Self> {
        let mut b = Self::default();
        b.set_opcode(f.opcode);
        b.set_se(f.se);
        b.set_mig_req(f.mig_req);
        b.set_pad_cnt(f.pad_cnt)?;
        b.set_tver(f.tver)?;
        b.set_pkey(f.pkey);
        b.set_fecn(f.fecn);
        b.set_becn(f.becn);
        b.set_dest_qp(f.dest_qp)?;
        b.set_ack_req(f.ack_req);
        b.set_psn(f.psn)?;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::View;

    #[test]
    fn bit_positions_follow_rxe_hdr_h() {
        let f = BthFields {
            opcode: BthOpcode(0x0a),
            se: true,
            mig_req: false,
            pad_cnt: 2,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: 0xab_cdef,
        };
        let b = Bth::from_fields(&f).unwrap();
        assert_eq!(
            b.as_bytes(),
            &[
                0x0a, 0xa0, 0xff, 0xff, 0x40, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef
            ]
        );
        assert_eq!(Bth::view(b.as_bytes()).unwrap().fields(), f);
        assert!(Bth::view(&[0u8; 11]).is_err());
        assert!(Bth::default().set_psn(1 << 24).is_err());
        assert!(Bth::default().set_dest_qp(1 << 24).is_err());
        assert!(Bth::default().set_pad_cnt(4).is_err());
    }
}
