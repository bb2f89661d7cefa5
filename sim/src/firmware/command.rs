//! What every command handler shares: the result of a command and why it failed, and the
//! data path's interface a QP command goes through.
//!
//! Owns: [`CmdError`] (the status and syndrome an output header carries), [`CmdResult`],
//! [`QpControl`]. Must not: depend on any handler (each handler module depends on this one).

use bypass_hw::cmd::qp::QpState;
use bypass_hw::syndrome::CmdStatus;

use crate::events::Completions;
use crate::io::Io;
use crate::objects::Qp;
use crate::table::Table;

/// Why a command failed: the status and syndrome its output header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmdError {
    /// `mbox_out.status`.
    pub status: CmdStatus,
    /// `mbox_out.syndrome`.
    pub syndrome: u32,
}

impl CmdError {
    /// A failure with `status` and `syndrome`.
    pub(crate) const fn new(status: CmdStatus, syndrome: u32) -> Self {
        Self { status, syndrome }
    }
    /// BAD_PARAM with `syndrome`.
    pub(crate) const fn param(syndrome: u32) -> Self {
        Self::new(CmdStatus::BAD_PARAM_ERR, syndrome)
    }
    /// BAD_RES with `syndrome`.
    pub(crate) const fn res(syndrome: u32) -> Self {
        Self::new(CmdStatus::BAD_RES_ERR, syndrome)
    }
    /// RES_BUSY with `syndrome`.
    pub(crate) const fn busy(syndrome: u32) -> Self {
        Self::new(CmdStatus::RES_BUSY, syndrome)
    }
    /// LIM_ERR with `syndrome`: a value above a capability, or a table already full (real
    /// firmware answers an exhausted mkey table with "CREATE_MKEY(0x200) op_mod(0x0) failed,
    /// status limits exceeded(0x8)": kernel `mlx5_cmd_check` log lines in public bug reports).
    pub(crate) const fn lim(syndrome: u32) -> Self {
        Self::new(CmdStatus::LIM_ERR, syndrome)
    }
    /// BAD_SYS_STATE with `syndrome`.
    pub(crate) const fn state(syndrome: u32) -> Self {
        Self::new(CmdStatus::BAD_SYS_STATE_ERR, syndrome)
    }
    /// BAD_INP_LEN with `syndrome`.
    pub(crate) const fn inlen(syndrome: u32) -> Self {
        Self::new(CmdStatus::BAD_INP_LEN_ERR, syndrome)
    }
}

/// A command handler's result. Handlers get the whole input (header included) and an output
/// buffer already sized to the opcode's output layout and zeroed; they fill the fields after
/// the header, and the dispatcher writes status and syndrome.
pub(crate) type CmdResult = Result<(), CmdError>;

/// What the firmware asks of the data path, and its only way in: QP state changes with the
/// flushes they imply, a QP's reset, and the bursts in flight a command must wait for
/// (`engine::ledger`). Implemented by the transport engine.
pub(crate) trait QpControl {
    /// Moves QP `qpn` to `to`; entering ERR flushes both its queues.
    fn set_state(
        &mut self,
        qps: &mut Table<Qp>,
        comp: &mut Completions,
        io: &mut Io<'_>,
        qpn: u32,
        to: QpState,
    );
    /// 2RST_QP: writes the error CQEs held for the QP's (read) bursts, moves it to RESET and
    /// forgets its transport state and work queue counters.
    fn reset(&mut self, qps: &mut Table<Qp>, comp: &mut Completions, io: &mut Io<'_>, qpn: u32);
    /// True if a by-reference burst of QP `qpn` still reads its memory.
    fn bursts_in_flight(&self, qpn: u32) -> bool;
    /// Keeps the command in `slot` until no burst of QP `qpn` reads its memory.
    fn hold_command(&mut self, slot: u8, qpn: u32);
    /// The next held command, from position `*at` on, that may run now (slot order).
    fn next_command(&mut self, at: &mut usize) -> Option<u8>;
    /// QP `qpn` was destroyed.
    fn forget(&mut self, qpn: u32);
    /// Every QP was destroyed.
    fn forget_all(&mut self);
}
