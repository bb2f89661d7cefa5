//! The requests of the send and receive paths and their errors: what a work request is
//! ([`SendWr`], [`RecvWr`], [`Sge`], [`SendOp`], [`Payload`], [`UdDest`]), why one was not
//! posted ([`PostError`], [`PostListError`]), and the eight-byte error of the specialised post
//! ([`PostRefused`], [`Refusal`]), which comes back in a register and converts losslessly
//! into the [`PostError`] that [`crate::qp::Qp::post_send`] gives for the same request.
//!
//! Follows ibverbs `struct ibv_send_wr` / `ibv_recv_wr` / `ibv_sge` and the `IBV_SEND_*`
//! flags; the opcode table is rdma-core `providers/mlx5/qp.c` `mlx5_ib_opcode[]`, the UD
//! address vector rdma-core `providers/mlx5/verbs.c` `mlx5_create_ah`.
//!
//! ## Posting is unsafe
//!
//! An [`Sge`] is a raw address and an lkey: the device reads (sends, WRITE sources) or writes
//! (receives, READ and atomic results) whatever registered memory it names, with no Rust
//! borrow involved. So every driver function that posts SGEs (`Qp::post_send`,
//! `post_write`, `post_send_list`, `post_recv`, `post_recv_list`, `WriteBatch::write`,
//! `Srq::post_srq_recv[_list]`) is `unsafe`, with one contract: every SGE names memory
//! registered under its lkey that no Rust reference covers while the device may access it
//! (no `&mut` to a source, no `&` or `&mut` to a target), and which stays registered and mapped
//! until the WQE's completion is polled or its queue is reset or destroyed. Inline payloads
//! are copied before the call returns and need nothing. `bypass-verbs` keeps this contract
//! by ownership (leases moved into the QP) and is the safe API; the C ABI passes it on to the
//! C caller, as `ibv_post_send` does.
//!
//! Safe code cannot post SGEs (each is a `compile_fail` doc test):
//! ```compile_fail,E0133
//! use bypass_driver::{post::SendWr, qp::Qp};
//! fn misuse(qp: &mut Qp, wr: &SendWr<'_>) {
//!     let _ = qp.post_send(wr); // unsafe fn: refused (E0133)
//! }
//! ```
//! ```compile_fail,E0133
//! use bypass_driver::{post::RecvWr, qp::Qp};
//! fn misuse(qp: &mut Qp, wr: &RecvWr<'_>) {
//!     let _ = qp.post_recv(wr); // unsafe fn: refused (E0133)
//! }
//! ```
//! ```compile_fail,E0133
//! use bypass_driver::{post::{RemoteAddr, SendFlags, Sge}, qp::Qp};
//! fn misuse(qp: &mut Qp, local: Sge, remote: RemoteAddr) {
//!     let _ = qp.post_write(1, local, remote, SendFlags::SIGNALED); // refused (E0133)
//! }
//! ```
//! ```compile_fail,E0133
//! use bypass_driver::{post::{RemoteAddr, SendFlags, Sge}, qp::Qp};
//! fn misuse(qp: &mut Qp, local: Sge, remote: RemoteAddr) {
//!     if let Ok(mut b) = qp.write_batch() {
//!         let _ = b.write(1, local, remote, SendFlags::SIGNALED); // refused (E0133)
//!     }
//! }
//! ```
//! ```compile_fail,E0133
//! use bypass_driver::{post::RecvWr, srq::Srq};
//! fn misuse(srq: &Srq, wr: &RecvWr<'_>) {
//!     let _ = srq.post_srq_recv(wr); // unsafe fn: refused (E0133)
//! }
//! ```
//! ```compile_fail,E0133
//! use bypass_driver::{post::{RecvWr, SendWr}, qp::Qp};
//! fn misuse(qp: &mut Qp, s: &[SendWr<'_>], r: &[RecvWr<'_>]) {
//!     let _ = qp.post_send_list(s); // unsafe fn: refused (E0133)
//!     let _ = qp.post_recv_list(r);
//! }
//! ```
//!
//! Owns: the request types and the post errors. Must not: write WQEs (`wqe.rs`), ring
//! doorbells (`doorbell.rs`), or allocate or format on the data path (errors format only when
//! displayed).

use bypass_hw::cmd::qp::QpState;
use bypass_hw::wqe::{Av, DgramParams, WqeOpcode};

use crate::redact::{Addr, Key};

/// One gather/scatter entry: `length` bytes at `addr` (an address inside a registered region)
/// under local key `lkey`.
/// `#[repr(C)]`: the layout of `struct ibv_sge`, so the C library hands a program's SGE
/// array to the driver as it is.
/// `Debug` redacts the address and the key ([`crate::redact`]).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Address inside the memory region (the region's start address plus an offset).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

impl core::fmt::Debug for Sge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sge")
            .field("addr", &Addr(self.addr))
            .field("length", &self.length)
            .field("lkey", &Key(self.lkey))
            .finish()
    }
}

/// A remote buffer: an address inside the peer's memory region and its rkey. `Debug`
/// redacts both ([`crate::redact`]).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

impl core::fmt::Debug for RemoteAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RemoteAddr")
            .field("addr", &Addr(self.addr))
            .field("rkey", &Key(self.rkey))
            .finish()
    }
}

/// What a send work request does (RC: all of them; UD: `Send` and `SendImm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: the payload lands in the peer's next receive WQE.
    Send,
    /// SEND with immediate data (delivered in the peer's receive completion).
    SendImm {
        /// Immediate data (host order; it travels big-endian).
        imm: u32,
    },
    /// RDMA WRITE of the payload to `remote`.
    Write {
        /// Destination.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate data (consumes a receive WQE at the peer).
    WriteImm {
        /// Destination.
        remote: RemoteAddr,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from `remote` into the payload's SGEs.
    Read {
        /// Source.
        remote: RemoteAddr,
    },
    /// 8-byte compare-and-swap at `remote`; the original value lands in the single 8-byte SGE.
    CompareSwap {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch-and-add at `remote`; the original value lands in the single 8-byte SGE.
    FetchAdd {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
}

impl SendOp {
    /// The mlx5 opcode (rdma-core `mlx5_ib_opcode[]`).
    #[inline(always)]
    pub const fn opcode(&self) -> WqeOpcode {
        match self {
            Self::Send => WqeOpcode::SEND,
            Self::SendImm { .. } => WqeOpcode::SEND_IMM,
            Self::Write { .. } => WqeOpcode::RDMA_WRITE,
            Self::WriteImm { .. } => WqeOpcode::RDMA_WRITE_IMM,
            Self::Read { .. } => WqeOpcode::RDMA_READ,
            Self::CompareSwap { .. } => WqeOpcode::ATOMIC_CS,
            Self::FetchAdd { .. } => WqeOpcode::ATOMIC_FA,
        }
    }
}

bitflags::bitflags! {
    /// Per-request flags (ibverbs `IBV_SEND_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u8 {
        /// Generate a completion (`MLX5_WQE_CTRL_CQ_UPDATE`); implied when the QP has
        /// `sq_sig_all`.
        const SIGNALED = 1 << 0;
        /// Set the solicited-event bit (`MLX5_WQE_CTRL_SOLICITED`).
        const SOLICITED = 1 << 1;
        /// Wait for earlier RDMA READs and atomics before this WQE (`MLX5_WQE_CTRL_FENCE`).
        const FENCE = 1 << 2;
    }
}

/// Where a send's data comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Gathered by the NIC's DMA from registered memory (the only copy).
    Sges(&'a [Sge]),
    /// Copied into the WQE (up to the QP's `max_inline_data`; SEND, SEND_IMM, WRITE,
    /// WRITE_IMM only). No registration needed.
    Inline(&'a [u8]),
}

/// The destination of a UD send: the address vector (`mlx5_wqe_av`) with the remote QPN and
/// Q_Key filled in, ready to copy into the datagram segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    av: Av,
}

impl UdDest {
    /// A RoCE v2 destination: remote QP `dqpn` with Q_Key `qkey`, at `rgid` (IPv6 or
    /// IPv4-mapped), through remote MAC `rmac`, from local GID index `sgid_index`.
    ///
    /// Encoded as rdma-core `mlx5_create_ah` (`providers/mlx5/verbs.c`): extended AV,
    /// `grh_gid_fl = 1 << 30 | sgid_index << 20 | flow_label`, hop limit, traffic class, rgid,
    /// rmac; `mlx5dv_set_dgram_seg` puts `dqpn | MLX5_EXTENDED_UD_AV` and the Q_Key.
    pub fn roce(
        dqpn: u32,
        qkey: u32,
        rgid: [u8; 16],
        rmac: [u8; 6],
        sgid_index: u8,
        hop_limit: u8,
    ) -> Self {
        let av = Av::new(&DgramParams {
            key: u64::from(qkey) << 32,
            dqp_dct: dqpn & 0x00ff_ffff,
            ext: true,
            hop_limit,
            rmac,
            grh_gid_fl: (1 << 30) | (u32::from(sgid_index) << 20),
            rgid,
            ..Default::default()
        });
        // `dqp_dct` is masked to 24 bits above, so `Av::new` cannot refuse it.
        let av = av.unwrap_or_else(|_| zerocopy::FromZeros::new_zeroed());
        Self { av }
    }

    /// The address vector as the WQE will carry it.
    pub fn av(&self) -> &Av {
        &self.av
    }

    /// The destination QPN.
    pub fn dqpn(&self) -> u32 {
        self.av.dqpn()
    }
}

/// A send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// The caller's id, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The data.
    pub payload: Payload<'a>,
    /// Flags.
    pub flags: SendFlags,
    /// UD only: where to send.
    pub ud: Option<&'a UdDest>,
}

impl<'a> SendWr<'a> {
    /// A signaled request of `op` gathering `sges`.
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> Self {
        Self {
            wr_id,
            op,
            payload: Payload::Sges(sges),
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }
}

/// A receive work request: scatter the incoming message over `sges`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// The caller's id, returned in the completion.
    pub wr_id: u64,
    /// Where the data lands (for UD, the first 40 bytes receive the GRH).
    pub sges: &'a [Sge],
}

/// Why a work request was not posted. Nothing of a refused request reaches the ring; requests
/// of the same list before it were posted (and their doorbell rung).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The send queue has no room for the WQE.
    #[error(
        "QP {qpn:#x}: send queue full (the WQE needs {need} WQEBBs, {free} are free): poll the send CQ to retire completed WQEs, signal at least one WQE in every SQ-depth of unsignaled ones, or create the QP with a deeper SQ"
    )]
    SqFull {
        /// QP number.
        qpn: u32,
        /// WQEBBs the WQE needs.
        need: u32,
        /// WQEBBs free.
        free: u32,
    },
    /// The receive queue is full.
    #[error(
        "QP {qpn:#x}: receive queue full ({depth} receives outstanding): poll the receive CQ, or create the QP with a deeper RQ"
    )]
    RqFull {
        /// QP number.
        qpn: u32,
        /// The RQ depth.
        depth: u32,
    },
    /// More SGEs than the queue allows.
    #[error(
        "QP {qpn:#x}: {got} SGEs but the {queue} queue takes at most {max}: split the request or create the QP with a larger max_{queue}_sge"
    )]
    TooManySges {
        /// QP number.
        qpn: u32,
        /// "send" or "recv".
        queue: &'static str,
        /// SGEs in the request.
        got: usize,
        /// The limit.
        max: usize,
    },
    /// Inline data longer than the QP's `max_inline_data`.
    #[error(
        "QP {qpn:#x}: {len} bytes of inline data but the QP allows {max}: send from registered memory (SGEs) or create the QP with a larger max_inline_data"
    )]
    InlineTooLong {
        /// QP number.
        qpn: u32,
        /// Bytes asked.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The operation is not valid on this QP or with this payload.
    #[error("QP {qpn:#x}: {opcode} {why}")]
    BadRequest {
        /// QP number.
        qpn: u32,
        /// The opcode.
        opcode: WqeOpcode,
        /// What is wrong and how to fix it.
        why: &'static str,
    },
    /// The QP is not in a state that accepts this post.
    #[error("QP {qpn:#x} is in {state}: {fix}")]
    BadState {
        /// QP number.
        qpn: u32,
        /// The state name.
        state: &'static str,
        /// What to do.
        fix: &'static str,
    },
    /// The SRQ has no free WQE.
    #[error(
        "SRQ {srqn:#x}: full ({depth} receives outstanding): poll the CQs of its QPs, or create the SRQ with a larger max_wr"
    )]
    SrqFull {
        /// SRQ number.
        srqn: u32,
        /// Its depth.
        depth: u32,
    },
    /// A receive posted to a QP that takes its receives from an SRQ.
    #[error("QP {qpn:#x} receives from SRQ {srqn:#x}: post the receive to the SRQ (post_srq_recv)")]
    OnSrq {
        /// QP number.
        qpn: u32,
        /// Its SRQ.
        srqn: u32,
    },
}

/// [`PostError::BadRequest`]'s reason for an RDMA or atomic request on a UD QP.
/// Why a READ or atomic is refused on a UC QP.
pub(crate) const UC_READ_ATOMIC_WHY: &str = "is not available on a UC QP (UC carries SEND, SEND_IMM, RDMA_WRITE and RDMA_WRITE_IMM only: IBTA table 38 has no UC READ or atomic opcode): use an RC QP";

pub(crate) const UD_RDMA_WHY: &str =
    "is not available on a UD QP (UD carries SEND and SEND_IMM only): use an RC QP";

/// Why a post list stopped: the request at `index` was refused; those before it were
/// posted and their doorbell rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} of the list was not posted ({index} before it were): {error}")]
pub struct PostListError {
    /// Index of the refused request.
    pub index: usize,
    /// Why.
    pub error: PostError,
}

/// What [`PostError::BadState`] advises for a post on a QP that cannot send.
pub(crate) const NOT_READY_FIX: &str = "move it to RTS first (rst2init, init2rtr, rtr2rts)";

/// Why a specialised post was refused (see [`PostRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No free WQEBB in the send queue ([`PostError::SqFull`] with `need` 1, `free` 0).
    SqFull,
    /// The QP is in this state, which takes no sends ([`PostError::BadState`]).
    BadState(QpState),
    /// RDMA WRITE on a UD QP ([`PostError::BadRequest`]).
    UdWrite,
    /// The QP takes no send SGE (`max_send_sge` 0: [`PostError::TooManySges`], 1 of 0).
    NoSendSge,
}

/// Why [`crate::qp::Qp::post_write`] (or a [`crate::qp::WriteBatch`] write) posted nothing:
/// the QP and the [`Refusal`]. `PostError::from` gives the full explained error, the same one
/// [`crate::qp::Qp::post_send`] gives for the equivalent request; `Display` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostRefused {
    qpn: u32,
    why: Refusal,
}

impl PostRefused {
    /// QP `qpn` refused a post for `why`.
    #[inline(always)]
    pub const fn new(qpn: u32, why: Refusal) -> Self {
        Self { qpn, why }
    }

    /// The QP number.
    pub const fn qpn(self) -> u32 {
        self.qpn
    }

    /// Why.
    pub const fn why(self) -> Refusal {
        self.why
    }

    /// True when the send queue was full (poll the send CQ and post again).
    pub const fn is_sq_full(self) -> bool {
        matches!(self.why, Refusal::SqFull)
    }
}

impl From<PostRefused> for PostError {
    fn from(r: PostRefused) -> Self {
        let qpn = r.qpn;
        match r.why {
            // A one-WQEBB WQE is refused only when `cur_post - tail >= wqebbs`, where
            // `SqRing::free` (`wqebbs.saturating_sub(cur_post - tail)`) is 0.
            Refusal::SqFull => PostError::SqFull {
                qpn,
                need: 1,
                free: 0,
            },
            Refusal::BadState(s) => PostError::BadState {
                qpn,
                state: s.name(),
                fix: NOT_READY_FIX,
            },
            Refusal::UdWrite => PostError::BadRequest {
                qpn,
                opcode: WqeOpcode::RDMA_WRITE,
                why: UD_RDMA_WHY,
            },
            Refusal::NoSendSge => PostError::TooManySges {
                qpn,
                queue: "send",
                got: 1,
                max: 0,
            },
        }
    }
}

impl core::fmt::Display for PostRefused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&PostError::from(*self), f)
    }
}

impl std::error::Error for PostRefused {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_refused_fits_a_register_and_explains_itself_as_post_error() {
        assert!(core::mem::size_of::<Result<(), PostRefused>>() <= 8);
        let e = PostRefused::new(0x12, Refusal::SqFull);
        assert!(e.is_sq_full());
        assert_eq!(
            PostError::from(e),
            PostError::SqFull {
                qpn: 0x12,
                need: 1,
                free: 0
            }
        );
        assert_eq!(e.to_string(), PostError::from(e).to_string());
        let s = PostRefused::new(7, Refusal::BadState(QpState::Init)).to_string();
        assert!(s.contains("INIT") && s.contains("RTS"), "{s}");
        assert!(
            PostRefused::new(7, Refusal::UdWrite)
                .to_string()
                .contains("UD QP")
        );
        assert!(matches!(
            PostError::from(PostRefused::new(7, Refusal::NoSendSge)),
            PostError::TooManySges { got: 1, max: 0, .. }
        ));
    }
}
