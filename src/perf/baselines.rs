//! `bypass perf baselines`: the yardsticks on their own: memcpy bandwidth and TCP loopback
//! busy-poll latency, printed in perftest's tables.
//!
//! Owns: the options and output of that subcommand. Must not touch devices.

use clap::Args;

use super::PerfError;
use crate::args::parse_size;
use crate::baseline::{memcpy_times, tcp_pingpong_rtts};
use crate::stats::{BwReport, BwUnits, LAT_HEADER, LatencyReport, RESULT_LINE};

/// Options of `bypass perf baselines`.
#[derive(Args, Debug)]
pub struct BaselineOpts {
    /// Size of one memcpy (bytes; K/M suffixes allowed).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub copy_size: u64,
    /// Size of one TCP ping-pong message (bytes).
    #[arg(long, default_value = "8", value_parser = parse_size)]
    pub msg_size: u64,
    /// Iterations of each measurement.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(5..=super::MAX_ITERS))]
    pub iters: u64,
}

/// Runs the baselines and prints one table for each.
pub fn run(opts: &BaselineOpts) -> Result<(), PerfError> {
    let iters = usize::try_from(opts.iters).unwrap_or(usize::MAX);
    let copy = usize::try_from(opts.copy_size).unwrap_or(usize::MAX);
    let msg = usize::try_from(opts.msg_size).unwrap_or(usize::MAX);

    println!("{RESULT_LINE}");
    println!("                    memcpy BW baseline (one thread)");
    println!("{RESULT_LINE}");
    let times = memcpy_times(copy, iters);
    let (posted, completed) = back_to_back(&times);
    let bw = BwReport::from_times(
        opts.copy_size,
        &posted,
        &completed,
        1,
        1,
        BwUnits::default(),
    )?;
    println!("{}", BwUnits::default().header());
    println!("{bw}");

    println!("{RESULT_LINE}");
    println!("                    TCP loopback busy-poll latency baseline (TCP_NODELAY)");
    println!("{RESULT_LINE}");
    let rtts = tcp_pingpong_rtts(msg, iters, iters / 10)?;
    let lat = LatencyReport::from_round_trips(opts.msg_size, opts.iters, rtts, 2)?;
    println!("{LAT_HEADER}");
    println!("{lat}");
    println!("{RESULT_LINE}");
    Ok(())
}

/// Turns per-operation durations of a serial loop into post/completion timestamps: each
/// operation is posted when the previous one completed.
pub fn back_to_back(durations_ns: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut now = 0u64;
    let mut posted = Vec::with_capacity(durations_ns.len());
    let mut completed = Vec::with_capacity(durations_ns.len());
    for &d in durations_ns {
        posted.push(now);
        now = now.saturating_add(d);
        completed.push(now);
    }
    (posted, completed)
}
