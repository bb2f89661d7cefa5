//! `bypass perf`: perftest-style benchmarks on simulated NICs and the baselines they are
//! reported against.
//!
//! Owns: the `perf` subcommands' options and their dispatch. Must not compute statistics
//! (`crate::stats`) or measure baselines itself (`crate::baseline`).

mod baselines;

use clap::Subcommand;

/// The `perf` subcommands.
#[derive(Subcommand)]
pub enum PerfCommand {
    /// Measure the baselines alone: memcpy bandwidth and a TCP loopback busy-poll ping-pong.
    Baselines(baselines::BaselineOpts),
}

/// Why a `perf` command failed.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// A baseline could not be measured.
    #[error(transparent)]
    Baseline(#[from] crate::baseline::BaselineError),
    /// The samples did not make a report.
    #[error(transparent)]
    Stats(#[from] crate::stats::StatsError),
}

/// Runs one `perf` subcommand, printing its tables on stdout.
pub fn run(cmd: PerfCommand) -> Result<(), PerfError> {
    match cmd {
        PerfCommand::Baselines(opts) => baselines::run(&opts),
    }
}
