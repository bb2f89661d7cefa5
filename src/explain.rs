//! `bypass explain`: names a command status, CQE syndrome or AETH syndrome and says what
//! usually causes it and how to fix it.
//!
//! Owns: the lookup from a user-given code to `bypass-hw`'s tables. Must not hold any text of
//! its own about codes: the names and cause-and-fix lines live in `bypass_hw::syndrome`.

use bypass_hw::syndrome::{AethSyndrome, CmdStatus, CqeSyndrome};
use clap::ValueEnum;

/// Which kind of code a value is.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CodeKind {
    /// A firmware command status (`mbox_out.status`).
    Status,
    /// An error-CQE syndrome (`mlx5_err_cqe.syndrome`).
    Syndrome,
    /// The AETH syndrome byte of an ACK/NAK on the wire.
    Aeth,
}

/// The one-line explanation of `value` read as `kind`.
pub fn explain(kind: CodeKind, value: u8) -> String {
    match kind {
        CodeKind::Status => CmdStatus(value).to_string(),
        CodeKind::Syndrome => CqeSyndrome(value).to_string(),
        CodeKind::Aeth => {
            let s = AethSyndrome(value);
            format!("{} [{:?}]", s.explain(), s.kind())
        }
    }
}
