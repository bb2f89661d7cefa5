//! BTH opcodes, the per-opcode header table, and the small arithmetic every RoCE endpoint
//! needs (PSN wrap and compare, pad count, the rxe UDP source port).
//!
//! Owns: [`BthOpcode`], [`OpcodeInfo`] and its table, [`ExtHeaders`], [`psn_add`],
//! [`psn_diff`], [`psn_compare`], [`pad_len`], [`rxe_udp_sport`].
//! Must not: parse bytes (that is `bth`/`packet`).
//!
//! Sources: IBTA vol. 1 §9.2 (BTH, table 38 "OpCode field"), §9.3 (which extension headers each
//! opcode carries, table 39); Linux `include/rdma/ib_pack.h` (`IB_OPCODE_*` names and values);
//! Linux `drivers/infiniband/sw/rxe/rxe_opcode.c` (`rxe_opcode[]`: header mask, `length` and
//! per-header `offset` for each opcode), which this table follows entry by entry.

use core::cmp::Ordering;

bitflags::bitflags! {
    /// The extension headers an opcode carries after the BTH (IBTA §9.3, table 39; rxe
    /// `rxe_hdr_mask` in `rxe_opcode.h`).
    ///
    /// On the wire they appear in the fixed order DETH, RETH, AtomicETH, AETH, AtomicAckETH,
    /// ImmDt, IETH ([`ExtHeaders::WIRE_ORDER`]), which is the order of rxe's `offset[]` entries.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ExtHeaders: u8 {
        /// Datagram ETH (8 bytes): UD.
        const DETH = 1 << 0;
        /// RDMA ETH (16 bytes): WRITE FIRST/ONLY, READ request.
        const RETH = 1 << 1;
        /// Atomic ETH (28 bytes): CMP_SWAP, FETCH_ADD.
        const ATOMIC_ETH = 1 << 2;
        /// ACK ETH (4 bytes): ACK, READ response FIRST/LAST/ONLY, ATOMIC ACK.
        const AETH = 1 << 3;
        /// Atomic ACK ETH (8 bytes): ATOMIC ACK.
        const ATOMIC_ACK_ETH = 1 << 4;
        /// Immediate data (4 bytes): `*_WITH_IMMEDIATE`.
        const IMM_DT = 1 << 5;
        /// Invalidate ETH (4 bytes): `SEND_*_WITH_INVALIDATE`.
        const IETH = 1 << 6;
    }
}

impl ExtHeaders {
    /// Every extension header with its size, in the order they follow the BTH on the wire
    /// (rxe `rxe_opcode.c` offsets; IBTA §9.3).
    pub const WIRE_ORDER: [(ExtHeaders, usize); 7] = [
        (ExtHeaders::DETH, 8),
        (ExtHeaders::RETH, 16),
        (ExtHeaders::ATOMIC_ETH, 28),
        (ExtHeaders::AETH, 4),
        (ExtHeaders::ATOMIC_ACK_ETH, 8),
        (ExtHeaders::IMM_DT, 4),
        (ExtHeaders::IETH, 4),
    ];

    /// Total size in bytes of the headers in `self` (rxe `RXE_*_BYTES`).
    pub const fn byte_len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Self::WIRE_ORDER.len() {
            if self.contains(Self::WIRE_ORDER[i].0) {
                n += Self::WIRE_ORDER[i].1;
            }
            i += 1;
        }
        n
    }
}

/// Where a packet sits in its message (rxe `RXE_START_MASK` / `RXE_MIDDLE_MASK` /
/// `RXE_END_MASK`; IBTA §9.4 "packet sequencing").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message (START only).
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message (END only).
    Last,
    /// The whole message in one packet (START and END).
    Only,
}

/// Whether an opcode is sent by the requester or the responder (rxe `RXE_REQ_MASK` /
/// `RXE_ACK_MASK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Requester to responder (SEND, WRITE, READ request, atomics).
    Request,
    /// Responder to requester (ACK/NAK, READ response, ATOMIC ACK).
    Response,
}

/// The transport service an opcode belongs to: bits 7..5 of the opcode (IBTA table 38;
/// `ib_pack.h` `IB_OPCODE_RC` 0x00, `UC` 0x20, `RD` 0x40, `UD` 0x60, `CNP` 0x80).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram (not supported by bypass; rxe never sends it).
    Rd,
    /// Unreliable datagram.
    Ud,
    /// Congestion notification packet (RoCEv2 annex A17).
    Cnp,
    /// Reserved / manufacturer-specific ranges.
    Other,
}

/// One row of the opcode table: what follows the BTH for this opcode (rxe `struct
/// rxe_opcode_info`: `mask`, `length`, `offset[]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The kernel name (`ib_pack.h` `IB_OPCODE_<name>`).
    pub name: &'static str,
    /// The extension headers carried.
    pub headers: ExtHeaders,
    /// Whether the opcode carries a payload (rxe `RXE_PAYLOAD_MASK`).
    pub payload: bool,
    /// Place in the message.
    pub position: Position,
    /// Request or response.
    pub direction: Direction,
    /// BTH plus extension headers, in bytes (rxe `.length`); the payload starts here
    /// (rxe `.offset[RXE_PAYLOAD]`).
    pub length: usize,
}

impl OpcodeInfo {
    /// Offset from the start of the BTH of extension header `h`, or `None` when this opcode
    /// does not carry it (rxe `.offset[RXE_xxx]`).
    pub const fn offset(&self, h: ExtHeaders) -> Option<usize> {
        if !self.headers.contains(h) || h.bits().count_ones() != 1 {
            return None;
        }
        let mut off = crate::roce::bth::BTH_LEN;
        let mut i = 0;
        while i < ExtHeaders::WIRE_ORDER.len() {
            let (e, n) = ExtHeaders::WIRE_ORDER[i];
            if e.bits() == h.bits() {
                return Some(off);
            }
            if self.headers.contains(e) {
                off += n;
            }
            i += 1;
        }
        None
    }

    /// Offset of the payload from the start of the BTH (rxe `.offset[RXE_PAYLOAD]`).
    pub const fn payload_offset(&self) -> usize {
        self.length
    }
}

/// The BTH opcode byte (IBTA §9.2, table 38; values from `include/rdma/ib_pack.h`).
///
/// A newtype so that unknown values (RD, CNP, vendor opcodes, a corrupt byte) still round-trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BthOpcode(pub u8);

/// Builds the table: `name = value, headers, payload, position, direction`.
macro_rules! opcodes {
    ($( $(#[$m:meta])* $name:ident = $val:expr, [$($h:ident)|*], $pay:expr, $pos:ident, $dir:ident; )*) => {
        impl BthOpcode {
            $( $(#[$m])* pub const $name: Self = Self($val); )*

            /// Every opcode bypass knows, in numeric order within each transport.
            pub const ALL: &'static [Self] = &[$(Self::$name),*];

            /// The table row for this opcode, or `None` for one bypass does not know (RD, CNP,
            /// FLUSH, ATOMIC_WRITE, reserved values).
            pub const fn info(self) -> Option<&'static OpcodeInfo> {
                match self.0 {
                    $( v if v == $val => Some(&const { OpcodeInfo {
                        name: stringify!($name),
                        headers: ExtHeaders::empty() $(.union(ExtHeaders::$h))*,
                        payload: $pay,
                        position: Position::$pos,
                        direction: Direction::$dir,
                        length: crate::roce::bth::BTH_LEN
                            + ExtHeaders::empty() $(.union(ExtHeaders::$h))* .byte_len(),
                    } }), )*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    /// RC SEND First (BTH only).
    RC_SEND_FIRST = 0x00, [], true, First, Request;
    /// RC SEND Middle.
    RC_SEND_MIDDLE = 0x01, [], true, Middle, Request;
    /// RC SEND Last.
    RC_SEND_LAST = 0x02, [], true, Last, Request;
    /// RC SEND Last with Immediate (ImmDt).
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, [IMM_DT], true, Last, Request;
    /// RC SEND Only.
    RC_SEND_ONLY = 0x04, [], true, Only, Request;
    /// RC SEND Only with Immediate (ImmDt).
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, [IMM_DT], true, Only, Request;
    /// RC RDMA WRITE First (RETH).
    RC_RDMA_WRITE_FIRST = 0x06, [RETH], true, First, Request;
    /// RC RDMA WRITE Middle.
    RC_RDMA_WRITE_MIDDLE = 0x07, [], true, Middle, Request;
    /// RC RDMA WRITE Last.
    RC_RDMA_WRITE_LAST = 0x08, [], true, Last, Request;
    /// RC RDMA WRITE Last with Immediate (ImmDt).
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, [IMM_DT], true, Last, Request;
    /// RC RDMA WRITE Only (RETH).
    RC_RDMA_WRITE_ONLY = 0x0a, [RETH], true, Only, Request;
    /// RC RDMA WRITE Only with Immediate (RETH, ImmDt).
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, [RETH | IMM_DT], true, Only, Request;
    /// RC RDMA READ Request (RETH, no payload).
    RC_RDMA_READ_REQUEST = 0x0c, [RETH], false, Only, Request;
    /// RC RDMA READ Response First (AETH).
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, [AETH], true, First, Response;
    /// RC RDMA READ Response Middle (no AETH).
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, [], true, Middle, Response;
    /// RC RDMA READ Response Last (AETH).
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, [AETH], true, Last, Response;
    /// RC RDMA READ Response Only (AETH).
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, [AETH], true, Only, Response;
    /// RC Acknowledge: ACK, RNR NAK or NAK (AETH).
    RC_ACKNOWLEDGE = 0x11, [AETH], false, Only, Response;
    /// RC Atomic Acknowledge (AETH, AtomicAckETH).
    RC_ATOMIC_ACKNOWLEDGE = 0x12, [AETH | ATOMIC_ACK_ETH], false, Only, Response;
    /// RC Compare & Swap (AtomicETH).
    RC_COMPARE_SWAP = 0x13, [ATOMIC_ETH], false, Only, Request;
    /// RC Fetch & Add (AtomicETH).
    RC_FETCH_ADD = 0x14, [ATOMIC_ETH], false, Only, Request;
    /// RC SEND Last with Invalidate (IETH).
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, [IETH], true, Last, Request;
    /// RC SEND Only with Invalidate (IETH).
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, [IETH], true, Only, Request;

    /// UC SEND First.
    UC_SEND_FIRST = 0x20, [], true, First, Request;
    /// UC SEND Middle.
    UC_SEND_MIDDLE = 0x21, [], true, Middle, Request;
    /// UC SEND Last.
    UC_SEND_LAST = 0x22, [], true, Last, Request;
    /// UC SEND Last with Immediate.
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, [IMM_DT], true, Last, Request;
    /// UC SEND Only.
    UC_SEND_ONLY = 0x24, [], true, Only, Request;
    /// UC SEND Only with Immediate.
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, [IMM_DT], true, Only, Request;
    /// UC RDMA WRITE First (RETH).
    UC_RDMA_WRITE_FIRST = 0x26, [RETH], true, First, Request;
    /// UC RDMA WRITE Middle.
    UC_RDMA_WRITE_MIDDLE = 0x27, [], true, Middle, Request;
    /// UC RDMA WRITE Last.
    UC_RDMA_WRITE_LAST = 0x28, [], true, Last, Request;
    /// UC RDMA WRITE Last with Immediate.
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, [IMM_DT], true, Last, Request;
    /// UC RDMA WRITE Only (RETH).
    UC_RDMA_WRITE_ONLY = 0x2a, [RETH], true, Only, Request;
    /// UC RDMA WRITE Only with Immediate (RETH, ImmDt).
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, [RETH | IMM_DT], true, Only, Request;

    /// UD SEND Only (DETH).
    UD_SEND_ONLY = 0x64, [DETH], true, Only, Request;
    /// UD SEND Only with Immediate (DETH, ImmDt).
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, [DETH | IMM_DT], true, Only, Request;
}

impl BthOpcode {
    /// Short alias of [`Self::RC_SEND_LAST_WITH_INVALIDATE`] (`ib_pack.h` `IB_OPCODE_SEND_LAST_INV`).
    pub const RC_SEND_LAST_INV: Self = Self::RC_SEND_LAST_WITH_INVALIDATE;
    /// Short alias of [`Self::RC_SEND_ONLY_WITH_INVALIDATE`] (`ib_pack.h` `IB_OPCODE_SEND_ONLY_INV`).
    pub const RC_SEND_ONLY_INV: Self = Self::RC_SEND_ONLY_WITH_INVALIDATE;
    /// Short alias of [`Self::UD_SEND_ONLY_WITH_IMMEDIATE`].
    pub const UD_SEND_ONLY_IMM: Self = Self::UD_SEND_ONLY_WITH_IMMEDIATE;
    /// The RoCEv2 congestion notification packet (annex A17.9.3; `ib_pack.h` `IB_OPCODE_CNP`).
    /// Not in the table: [`crate::roce::cnp`] builds and parses CNPs.
    pub const CNP: Self = Self(0x81);

    /// The transport service (bits 7..5, IBTA table 38).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            _ => Transport::Other,
        }
    }

    /// The kernel name, or `None` for an opcode not in the table.
    pub const fn name(self) -> Option<&'static str> {
        match self.info() {
            Some(i) => Some(i.name),
            None => None,
        }
    }
}

impl core::fmt::Display for BthOpcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({:#04x})", self.0),
            None => write!(f, "UNKNOWN({:#04x})", self.0),
        }
    }
}

/// Mask of the 24-bit PSN / QPN / MSN fields (rxe `BTH_PSN_MASK`, `BTH_QPN_MASK`).
pub const MASK_24: u32 = 0x00ff_ffff;

/// `psn + n` modulo 2^24 (IBTA §9.7.1: PSNs wrap at 2^24).
pub const fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK_24
}

/// The signed distance `a - b` between two PSNs in the 24-bit circle, in
/// `-2^23 ..= 2^23 - 1` (rxe `rxe.h` `psn_compare`: `(s32)((a - b) << 8)`, here scaled back).
pub const fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// Orders two PSNs as rxe does: `a` is after `b` when it is less than 2^23 ahead (rxe `rxe.h`
/// `psn_compare`).
pub const fn psn_compare(a: u32, b: u32) -> Ordering {
    let d = psn_diff(a, b);
    if d < 0 {
        Ordering::Less
    } else if d > 0 {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// The BTH PadCnt for a payload of `len` bytes: `(-len) & 3` (IBTA §9.2.3; rxe `rxe_req.c`
/// `pad = (-payload) & 0x3`).
pub const fn pad_len(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

/// Linux `include/linux/hash.h` `hash_32(val, bits)`: `(val * GOLDEN_RATIO_32) >> (32 - bits)`
/// with `GOLDEN_RATIO_32 = 0x61C88647` (the generic version, which x86 and arm64 use).
/// `bits` is clamped to 1..=32.
pub const fn hash_32(val: u32, bits: u32) -> u32 {
    let bits = if bits == 0 {
        1
    } else if bits > 32 {
        32
    } else {
        bits
    };
    let h = val.wrapping_mul(0x61C8_8647);
    if bits == 32 { h } else { h >> (32 - bits) }
}

/// The UDP source port rxe uses for a QP: `0xc000 + (hash_32(qpn, 14) & 0x3fff)`
/// (rxe `rxe_qp.c` `rxe_qp_init_req`, `RXE_ROCE_V2_SPORT` in `rxe.h`).
pub const fn rxe_udp_sport(qpn: u32) -> u16 {
    0xc000 + (hash_32(qpn, 14) & 0x3fff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lengths_match_rxe() {
        // (opcode, rxe .length) from rxe_opcode.c.
        let rxe = [
            (BthOpcode::RC_SEND_FIRST, 12),
            (BthOpcode::RC_SEND_LAST_WITH_IMMEDIATE, 16),
            (BthOpcode::RC_RDMA_WRITE_FIRST, 28),
            (BthOpcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 32),
            (BthOpcode::RC_RDMA_READ_REQUEST, 28),
            (BthOpcode::RC_RDMA_READ_RESPONSE_FIRST, 16),
            (BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE, 12),
            (BthOpcode::RC_ACKNOWLEDGE, 16),
            (BthOpcode::RC_ATOMIC_ACKNOWLEDGE, 24),
            (BthOpcode::RC_COMPARE_SWAP, 40),
            (BthOpcode::RC_SEND_ONLY_INV, 16),
            (BthOpcode::UD_SEND_ONLY, 20),
            (BthOpcode::UD_SEND_ONLY_IMM, 24),
        ];
        for (op, len) in rxe {
            assert_eq!(op.info().unwrap().length, len, "{op}");
        }
        let ack = BthOpcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(ack.offset(ExtHeaders::AETH), Some(12));
        assert_eq!(ack.offset(ExtHeaders::ATOMIC_ACK_ETH), Some(16));
        let wi = BthOpcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(wi.offset(ExtHeaders::RETH), Some(12));
        assert_eq!(wi.offset(ExtHeaders::IMM_DT), Some(28));
        assert_eq!(wi.offset(ExtHeaders::AETH), None);
        let ud = BthOpcode::UD_SEND_ONLY_IMM.info().unwrap();
        assert_eq!(ud.offset(ExtHeaders::DETH), Some(12));
        assert_eq!(ud.offset(ExtHeaders::IMM_DT), Some(20));
        assert_eq!(BthOpcode(0x15).info(), None);
        assert_eq!(BthOpcode::CNP.transport(), Transport::Cnp);
    }

    #[test]
    fn psn_arithmetic_wraps() {
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_add(0xff_fffe, 5), 3);
        assert_eq!(psn_compare(0, 0xff_ffff), Ordering::Greater);
        assert_eq!(psn_compare(0xff_ffff, 0), Ordering::Less);
        assert_eq!(psn_diff(3, 0xff_fffe), 5);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
        assert_eq!(psn_compare(7, 7), Ordering::Equal);
    }

    #[test]
    fn pad_and_sport() {
        assert_eq!([0, 1, 2, 3, 4, 5].map(pad_len), [0, 3, 2, 1, 0, 3]);
        // hash_32(17, 14) = (17 * 0x61c88647 mod 2^32) >> 18.
        assert_eq!(hash_32(17, 14), (17u32.wrapping_mul(0x61c8_8647)) >> 18);
        assert_eq!(rxe_udp_sport(17), 0xc000 + (hash_32(17, 14) as u16));
        assert!(rxe_udp_sport(0xff_ffff) >= 0xc000);
    }
}
