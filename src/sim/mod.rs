//! `bypass sim`: experiments on simulated networks of sim NICs (stepped, seeded: one seed,
//! one run): congestion (`incast`) and load and exhaustion over time (`soak`).
//!
//! Owns: the `sim` subcommands' options and dispatch, and the text/JSON report of an incast
//! (`report`); the soak and its report live in `soak`. Must not: build flows or networks itself (`flows`, `incast`) or draw
//! (`series` and `crate::chart`).

mod cong;
mod flows;
mod incast;
mod report;
mod series;
mod soak;

use clap::Subcommand;

/// The `sim` subcommands.
#[derive(Subcommand)]
pub enum SimCommand {
    /// N senders WRITE to one receiver through a simulated switch: lossy, PFC, or PFC with
    /// ECN (DCQCN). Prints per-flow rates, the queue, pauses, drops and CNPs; --out PREFIX
    /// writes PREFIX.csv and PREFIX-{rate,queue}.svg; --compare runs all three modes.
    Incast(report::IncastCmd),
    /// Load and exhaustion over time: --qps RC QP pairs between two sim NICs with seeded
    /// drops, duplicates, reorders and corruption carry mixed SEND/WRITE/READ/atomic traffic
    /// checked end to end for --duration, each pair replaced every --replace-after messages.
    /// Prints messages, faults by kind, lanes replaced, RSS and object counts; fails if data
    /// was wrong, objects leaked or RSS grew past --max-rss-growth-mib after warm-up.
    Soak(soak::SoakCmd),
}

/// Why a `sim` subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// `sim incast`.
    #[error(transparent)]
    Incast(#[from] report::ReportError),
    /// `sim soak`.
    #[error(transparent)]
    Soak(#[from] soak::SoakError),
}

/// Runs a `sim` subcommand.
pub fn run(cmd: &SimCommand) -> Result<(), SimError> {
    match cmd {
        SimCommand::Incast(c) => Ok(report::run(c)?),
        SimCommand::Soak(c) => Ok(soak::run(c)?),
    }
}
