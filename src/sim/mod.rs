//! `bypass sim`: experiments on simulated networks of sim NICs (stepped, seeded: one seed,
//! one run), beginning with congestion (`incast`).
//!
//! Owns: the `sim` subcommands' options and dispatch, and the text/JSON report of an incast
//! (`report`). Must not: build flows or networks itself (`flows`, `incast`) or draw
//! (`series` and `crate::chart`).

mod cong;
mod flows;
mod incast;
mod report;
mod series;

use clap::Subcommand;

/// The `sim` subcommands.
#[derive(Subcommand)]
pub enum SimCommand {
    /// N senders WRITE to one receiver through a simulated switch: lossy, PFC, or PFC with
    /// ECN (DCQCN). Prints per-flow rates, the queue, pauses, drops and CNPs; --out PREFIX
    /// writes PREFIX.csv and PREFIX-{rate,queue}.svg; --compare runs all three modes.
    Incast(report::IncastCmd),
}

/// Runs a `sim` subcommand.
pub fn run(cmd: &SimCommand) -> Result<(), report::ReportError> {
    match cmd {
        SimCommand::Incast(c) => report::run(c),
    }
}
