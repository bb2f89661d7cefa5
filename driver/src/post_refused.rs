//! The error of the specialised post ([`crate::qp::Qp::post_write`]): [`PostRefused`], eight
//! bytes, so that `Result<(), PostRefused>` comes back in a register and the post needs no
//! return slot in memory (a 40-byte `Result<(), PostError>` is returned through a pointer the
//! post must keep alive across its doorbell call, which costs callee-saved register spills).
//! It converts losslessly into the explained [`PostError`] that [`crate::qp::Qp::post_send`]
//! gives for the same request, and displays as that error.
//!
//! Owns: [`PostRefused`], [`Refusal`]. Must not: decide when a post is refused (that is
//! `post_write.rs` and `qp.rs`), allocate or format on the data path.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::wqe::WqeOpcode;

use crate::post::{PostError, UD_RDMA_WHY};

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
