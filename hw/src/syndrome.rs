//! Every code the device or the peer can answer with, named, and explained in one line
//! that says what usually causes it and what to do about it.
//!
//! Owns: [`CmdStatus`] (firmware command status), [`CqeSyndrome`] (error CQE syndrome),
//! [`AethSyndrome`] (the AETH syndrome byte of an ACK/NAK on the wire).
//! Must not: decide policy (retry or not); it only names and explains.
//!
//! Each type is a newtype over the raw value, so a value the tables do not know (new firmware,
//! a buggy peer) still round-trips and prints as `UNKNOWN(0x..)` instead of being lost.
//!
//! Sources: kernel `include/linux/mlx5/device.h` (`MLX5_CMD_STAT_*`), rdma-core
//! `providers/mlx5/mlx5dv.h` (`MLX5_CQE_SYNDROME_*`) and `cq.c` (`mlx5_handle_error_cqe`),
//! IBTA vol. 1 §9.7.5.1 and rxe `rxe_hdr.h` (AETH syndromes), cited at each table.

use core::fmt;

/// Defines a code newtype with named constants, `ALL`, `name()`, `cause_and_fix()` and
/// `Display` ("NAME (0x..): cause and fix"). Every table of codes a user may need explained
/// (command status, delivery status, CQE syndrome, AETH syndrome, health syndrome) uses it.
macro_rules! explained_codes {
    (
        $(#[$meta:meta])*
        pub struct $ty:ident($raw:ty) {
            $( $(#[$cmeta:meta])* $name:ident = $val:expr => $why:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $ty(pub $raw);

        impl $ty {
            $( $(#[$cmeta])* #[doc = concat!("\n\n", $why)] pub const $name: Self = Self($val); )*

            /// Every named code, in table order.
            pub const ALL: &'static [Self] = &[$(Self::$name),*];

            /// The code's name as the source spells it, or `None` for an unknown value.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( v if v == $val => Some(stringify!($name)), )*
                    _ => None,
                }
            }

            /// One line: what usually causes this code, and what to do about it.
            pub const fn cause_and_fix(self) -> &'static str {
                match self.0 {
                    $( v if v == $val => $why, )*
                    _ => "a code this version of bypass does not know: check the PRM or a newer bypass, and report it",
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => write!(f, "{} ({:#x}): {}", n, self.0, self.cause_and_fix()),
                    None => write!(f, "UNKNOWN({:#x}): {}", self.0, self.cause_and_fix()),
                }
            }
        }
    };
}

pub(crate) use explained_codes;

explained_codes! {
    /// Status byte of a firmware command's output (`mbox_out.status`, byte 0).
    ///
    /// Values: kernel `include/linux/mlx5/device.h` `MLX5_CMD_STAT_*` and rdma-core
    /// `providers/mlx5/mlx5_ifc.h` (`MLX5_CMD_STAT_*`); the syndrome (byte 4) narrows the cause.
    pub struct CmdStatus(u8) {
        /// Success.
        OK = 0x00 => "the command succeeded",
        /// Internal error.
        INT_ERR = 0x01 => "the firmware hit an internal error: read the syndrome and the health buffer; a reset of the function usually clears it",
        /// Unknown opcode.
        BAD_OP_ERR = 0x02 => "the firmware does not know this opcode (or op_mod): check the opcode against mlx5_ifc.h and the device's capabilities",
        /// A field of the input is invalid.
        BAD_PARAM_ERR = 0x03 => "a field of the command input is out of range or inconsistent: compare every field with the PRM limits and the HCA caps (the syndrome names the check that failed)",
        /// The command is not allowed in the device's current state.
        BAD_SYS_STATE_ERR = 0x04 => "the command is not allowed in the device's current state: follow the bring-up order ENABLE_HCA, SET_ISSI, MANAGE_PAGES (boot), SET_HCA_CAP, MANAGE_PAGES (init), INIT_HCA",
        /// The object the command names does not exist or belongs to someone else.
        BAD_RES_ERR = 0x05 => "the object the command names (QPN, CQN, PD, mkey, UAR, EQN) does not exist or was already destroyed: check the number and the creation order",
        /// The object is in use.
        RES_BUSY = 0x06 => "the object is still in use by another object (a CQ by a QP, a PD by an mkey, a UAR by a queue): destroy the users first, in reverse order of creation",
        /// A capability limit was exceeded.
        LIM_ERR = 0x08 => "a size or count exceeds the device's capability (log_max_qp, log_max_cq_sz, max message size, ...): query HCA caps and stay within them",
        /// The object is in the wrong state for this command.
        BAD_RES_STATE_ERR = 0x09 => "the object is in the wrong state for this command (e.g. INIT2RTR on a QP in RESET): walk the QP state machine RESET, INIT, RTR, RTS in order",
        /// A given index is invalid.
        IX_ERR = 0x0a => "an index in the command (GID index, pkey index, port, vector) is outside the table: query the table size first",
        /// No resources left.
        NO_RES_ERR = 0x0f => "the device ran out of a resource (firmware pages, ICM, objects): give the pages QUERY_PAGES asks for, or free objects",
        /// Bad input length.
        BAD_INP_LEN_ERR = 0x50 => "the command entry's input length does not match what the opcode needs: set ilen to the layout size (plus the PAS list) and chain enough mailboxes",
        /// Bad output length.
        BAD_OUTP_LEN_ERR = 0x51 => "the command entry's output length is too small for the reply: set olen to the output layout size and chain enough mailboxes",
        /// The QP is in a state that forbids the command.
        BAD_QP_STATE_ERR = 0x10 => "the QP's current state does not allow this transition: query the QP and use a transition that starts from that state",
        /// Bad packet (MAD_IFC).
        BAD_PKT_ERR = 0x30 => "the packet carried by the command is malformed: check the MAD or packet layout",
        /// Too many outstanding CQEs for a CQ resize.
        BAD_SIZE_OUTS_CQES_ERR = 0x40 => "the new CQ size cannot hold the CQEs still outstanding: poll the CQ empty or choose a larger size",
    }
}

explained_codes! {
    /// Syndrome of an error CQE (`mlx5_err_cqe.syndrome`, byte 0x37).
    ///
    /// Values: rdma-core `providers/mlx5/mlx5dv.h` `MLX5_CQE_SYNDROME_*`; the mapping to verbs
    /// work-completion status is `mlx5_handle_error_cqe` in `providers/mlx5/cq.c`.
    pub struct CqeSyndrome(u8) {
        /// IBV_WC_LOC_LEN_ERR.
        LOCAL_LENGTH_ERR = 0x01 => "a message was longer than the receive buffer or the send exceeded the max message size: post receives at least as large as the largest send, and check every SGE length",
        /// IBV_WC_LOC_QP_OP_ERR.
        LOCAL_QP_OP_ERR = 0x02 => "the WQE is malformed for this QP (bad opcode for the QP type, ds too small, inline too long, too many SGEs): check the WQE layout and the QP's limits",
        /// IBV_WC_LOC_PROT_ERR.
        LOCAL_PROT_ERR = 0x04 => "a local SGE's lkey is invalid, belongs to another PD, or its address range is outside the MR: check lkey/addr/length against the registration",
        /// IBV_WC_WR_FLUSH_ERR.
        WR_FLUSH_ERR = 0x05 => "the work request was flushed because the QP had already moved to the error state: find the first error completion on this QP, which is the real cause",
        /// IBV_WC_MW_BIND_ERR.
        MW_BIND_ERR = 0x06 => "a memory-window bind failed: check the MW type, the MR's bind access and the range",
        /// IBV_WC_BAD_RESP_ERR.
        BAD_RESP_ERR = 0x10 => "the responder sent an unexpected response (wrong opcode or length): the peer's transport is misbehaving; capture the traffic",
        /// IBV_WC_LOC_ACCESS_ERR.
        LOCAL_ACCESS_ERR = 0x11 => "the local MR does not allow the access (e.g. a RDMA READ response or receive into an MR without LOCAL_WRITE): register the buffer with local write access",
        /// IBV_WC_REM_INV_REQ_ERR.
        REMOTE_INVAL_REQ_ERR = 0x12 => "the remote side rejected the request as invalid (opcode it does not support, length above its limits, no RDMA/atomic access enabled on its QP): check the peer QP's access flags and max message size",
        /// IBV_WC_REM_ACCESS_ERR.
        REMOTE_ACCESS_ERR = 0x13 => "the remote side rejected the rkey, address range or access rights: check that the rkey/addr were exchanged after registration and the MR allows remote access",
        /// IBV_WC_REM_OP_ERR.
        REMOTE_OP_ERR = 0x14 => "the remote side could not complete the operation (e.g. its receive WQE was malformed or its local access failed): look at the peer's error completions",
        /// IBV_WC_RETRY_EXC_ERR.
        TRANSPORT_RETRY_EXC_ERR = 0x15 => "no ACK arrived within ack_timeout after retry_cnt retries: the peer is down, unreachable, or its QP is not in RTR/RTS; check the path (GID, MTU, remote QPN/PSN) and the link",
        /// IBV_WC_RNR_RETRY_EXC_ERR.
        RNR_RETRY_EXC_ERR = 0x16 => "the peer had no receive posted for rnr_retry attempts: post receives before the sender sends, or raise rnr_retry (7 = infinite) / min_rnr_timer",
        /// IBV_WC_REM_ABORT_ERR.
        REMOTE_ABORTED_ERR = 0x22 => "the remote side aborted the operation: look at the peer's completions and its QP state",
    }
}

explained_codes! {
    /// The AETH syndrome byte of an ACK, RNR NAK or NAK (IBTA 9.7.5.1; rxe `rxe_hdr.h`
    /// `enum aeth_syndrome`). The top three bits give the type (ACK 0x00, RNR NAK 0x20,
    /// NAK 0x60); for ACK the low five bits are the credit count, for RNR NAK the timer.
    pub struct AethSyndrome(u8) {
        /// ACK with unlimited credits (what rxe always sends).
        ACK_UNLIMITED = 0x1f => "positive acknowledgement (credits unlimited): nothing to do",
        /// RNR NAK (the low five bits carry the RNR timer; this constant has timer 0).
        RNR_NAK = 0x20 => "receiver not ready: the responder had no receive WQE posted; the requester waits min_rnr_timer and retries (rnr_retry times); post receives earlier",
        /// NAK: PSN sequence error.
        NAK_PSN_SEQ_ERROR = 0x60 => "the responder saw a PSN gap (a lost or reordered packet); the requester goes back to the PSN in the NAK and resends: frequent ones mean a lossy path",
        /// NAK: invalid request.
        NAK_INVALID_REQUEST = 0x61 => "the responder rejected the request as invalid (unsupported opcode, bad length, too many outstanding reads/atomics, access not enabled on its QP): check max_rd_atomic and the peer QP's access flags",
        /// NAK: remote access error.
        NAK_REMOTE_ACCESS_ERROR = 0x62 => "the responder rejected the rkey, address range or access rights: check that the rkey/addr were exchanged after registration and the MR allows remote access",
        /// NAK: remote operational error.
        NAK_REMOTE_OPERATIONAL_ERROR = 0x63 => "the responder could not complete the request for an internal reason (e.g. a malformed receive WQE): look at the responder's error completion",
        /// NAK: invalid RD request.
        NAK_INVALID_RD_REQUEST = 0x64 => "an RD-only NAK arrived on a connection that is not RD: the peer is confused about the transport",
    }
}

/// The type of an AETH syndrome: bits 7..5 of the syndrome byte (IBTA table 45).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethKind {
    /// Positive ACK; the value is the credit count code (0x1f = unlimited).
    Ack(u8),
    /// Receiver-not-ready NAK; the value is the RNR timer code (index into the IBTA table).
    RnrNak(u8),
    /// Reserved type values 0x40 and 0x80..0xe0.
    Reserved(u8),
    /// NAK; the value is the NAK code (0 PSN seq, 1 invalid req, 2 remote access, 3 remote op, 4 invalid RD).
    Nak(u8),
}

impl AethSyndrome {
    /// Splits the syndrome into its type and 5-bit value.
    pub const fn kind(self) -> AethKind {
        let value = self.0 & 0x1f;
        match self.0 >> 5 {
            0 => AethKind::Ack(value),
            1 => AethKind::RnrNak(value),
            3 => AethKind::Nak(value),
            _ => AethKind::Reserved(self.0),
        }
    }

    /// An RNR NAK syndrome carrying the 5-bit `min_rnr_timer` code (values above 31 are masked,
    /// as the wire has only five bits).
    pub const fn rnr_nak(timer: u8) -> Self {
        Self(0x20 | (timer & 0x1f))
    }

    /// The name and cause-and-fix for any syndrome value, treating an ACK with any credit
    /// count as ACK and an RNR NAK with any timer as RNR NAK.
    pub const fn explain(self) -> Self {
        match self.kind() {
            AethKind::Ack(_) => Self::ACK_UNLIMITED,
            AethKind::RnrNak(_) => Self::RNR_NAK,
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn every_code_has_a_distinct_name_and_an_explanation() {
        fn check<T: Copy + fmt::Display>(
            all: &[T],
            name: impl Fn(T) -> Option<&'static str>,
            why: impl Fn(T) -> &'static str,
        ) {
            let mut names = std::collections::BTreeSet::new();
            for &c in all {
                let n = name(c).expect("named");
                assert!(names.insert(n), "duplicate name {n}");
                assert!(
                    why(c).contains(':') || why(c).len() > 20,
                    "{n} lacks a cause and fix"
                );
                assert!(c.to_string().starts_with(n));
            }
        }
        check(CmdStatus::ALL, CmdStatus::name, CmdStatus::cause_and_fix);
        check(
            CqeSyndrome::ALL,
            CqeSyndrome::name,
            CqeSyndrome::cause_and_fix,
        );
        check(
            AethSyndrome::ALL,
            AethSyndrome::name,
            AethSyndrome::cause_and_fix,
        );
    }

    #[test]
    fn unknown_codes_round_trip_and_say_so() {
        assert_eq!(CqeSyndrome(0x99).name(), None);
        assert!(CqeSyndrome(0x99).to_string().starts_with("UNKNOWN(0x99)"));
    }

    #[test]
    fn rem_access_text_is_the_documented_one() {
        assert_eq!(
            CqeSyndrome::REMOTE_ACCESS_ERR.to_string(),
            "REMOTE_ACCESS_ERR (0x13): the remote side rejected the rkey, address range or access rights: check that the rkey/addr were exchanged after registration and the MR allows remote access"
        );
    }

    #[test]
    fn aeth_kinds() {
        assert_eq!(AethSyndrome(0x1f).kind(), AethKind::Ack(0x1f));
        assert_eq!(AethSyndrome::rnr_nak(12).kind(), AethKind::RnrNak(12));
        assert_eq!(AethSyndrome(0x62).kind(), AethKind::Nak(2));
        assert_eq!(AethSyndrome::rnr_nak(12).explain(), AethSyndrome::RNR_NAK);
        assert_eq!(AethSyndrome(0x40).kind(), AethKind::Reserved(0x40));
    }
}
