//! `bypass perf compare`: the sim measured against its baselines in one run, as medians and
//! ratios, with the project's targets ([`BW_TARGET`], [`RTT_TARGET`]).
//!
//! Medians:
//! - memcpy: of per-copy bandwidths, one source buffer into one destination (the memory the
//!   WRITE stream touches too: every WRITE reads one shared source into one remote buffer).
//! - sim WRITE bandwidth: of per-segment bandwidths, a segment being the WRITEs between two
//!   signalled completions one send queue apart: the steady-state rate, without the ramp-up.
//! - round trips: of per-iteration round-trip times (not halved).
//!
//! The four run in interleaved rounds (`--rounds`): the figures printed are the medians of all
//! rounds' samples pooled; each verdict is the median of the rounds' ratios, so that a stall
//! during one measurement moves one round, not the verdict.
//!
//! Owns: which measurements are compared, how each median is taken, and the verdict lines.
//! Must not measure anything itself: it calls `lat`, `bw` and `crate::baseline`.

use clap::Args;

use super::PerfError;
use super::{bw, lat};
use crate::args::parse_size;
use crate::baseline::{memcpy_times, tcp_pingpong_rtts};
use crate::stats::{median, ratio_list};

/// Target: in-process WRITE bandwidth at least this fraction of memcpy's.
pub const BW_TARGET: f64 = 0.8;
/// Target: in-process WRITE ping-pong round trip at most this fraction of TCP busy-poll's.
pub const RTT_TARGET: f64 = 0.15;

/// Options of `bypass perf compare`.
#[derive(Args, Debug)]
pub struct CompareOpts {
    /// Message size of the bandwidth comparison.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub bw_size: u64,
    /// Message size of the round-trip comparison.
    #[arg(long, default_value = "8", value_parser = parse_size)]
    pub lat_size: u64,
    /// Iterations of each measurement, split between the rounds (at least 50 per round; the
    /// bandwidth runs use at least 2 × tx-depth).
    #[arg(short = 'n', long, default_value_t = 7000, value_parser = clap::value_parser!(u64).range(50..=super::MAX_ITERS))]
    pub iters: u64,
    /// WRITEs outstanding in the bandwidth run.
    #[arg(short = 't', long = "tx-depth", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub tx_depth: u32,
    /// Completion every N WRITEs in the bandwidth run.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub cq_mod: u32,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rounds of the four measurements, interleaved; `--iters` is split between them. The
    /// verdicts are on the median of the rounds' ratios.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
}

/// One measured figure: the median of its samples pooled over every round.
struct Figure {
    what: String,
    median: f64,
    unit: &'static str,
}

/// The samples of one round of the four measurements.
#[derive(Default)]
struct Round {
    /// memcpy, MiB/s per copy.
    memcpy: Vec<f64>,
    /// sim WRITE, MiB/s per window.
    sim_bw: Vec<f64>,
    /// TCP busy-poll round trips, µs.
    tcp: Vec<f64>,
    /// sim WRITE ping-pong round trips, µs.
    sim_rtt: Vec<f64>,
}

impl Round {
    /// Runs the four measurements once, in order (memcpy, sim bandwidth, TCP, sim round
    /// trip), `iters` iterations each.
    fn measure(o: &CompareOpts, iters: u64) -> Result<Self, PerfError> {
        let n = usize::try_from(iters).unwrap_or(usize::MAX);
        let copy =
            usize::try_from(o.bw_size).map_err(|_| PerfError::TooLarge { size: o.bw_size })?;
        let mib = 1_048_576.0;
        let memcpy = memcpy_times(copy, n)
            .into_iter()
            .map(|ns| o.bw_size as f64 / (ns.max(1) as f64 / 1e9) / mib)
            .collect();
        let (depth, _) = bw::effective_depth(o.bw_size, o.tx_depth, o.cq_mod);
        let t = bw::write_bw_times(o.seed, o.bw_size, iters, o.tx_depth, o.cq_mod)?;
        let sim_bw = window_bandwidths(&t, o.bw_size, depth)
            .into_iter()
            .map(|b| b / mib)
            .collect();
        let lat_bytes =
            usize::try_from(o.lat_size).map_err(|_| PerfError::TooLarge { size: o.lat_size })?;
        let tcp = tcp_pingpong_rtts(lat_bytes, n, n / 10)?
            .into_iter()
            .map(|ns| ns as f64 / 1000.0)
            .collect();
        let posted = lat::write_lat_post_times(o.seed, o.lat_size, iters)?;
        let sim_rtt = posted
            .windows(2)
            .filter_map(|w| match w {
                [a, b] => Some(b.saturating_sub(*a) as f64 / 1000.0),
                _ => None,
            })
            .collect();
        Ok(Self {
            memcpy,
            sim_bw,
            tcp,
            sim_rtt,
        })
    }

    /// This round's ratios: (sim / memcpy bandwidth, sim / TCP round trip), of its medians.
    fn ratios(&self) -> (f64, f64) {
        let m = |v: &[f64]| median(v).unwrap_or(0.0);
        (
            ratio(m(&self.sim_bw), m(&self.memcpy)),
            ratio(m(&self.sim_rtt), m(&self.tcp)),
        )
    }
}

/// Runs the four measurements `rounds` times, interleaved (so that a burst of noise from the
/// machine's other tenants lands on one round's pair, not on one side of every ratio), and
/// prints the pooled medians, each round's ratios, and the verdicts on the median of the
/// rounds' ratios.
pub fn run(o: &CompareOpts) -> Result<(), PerfError> {
    super::check_size("--bw-size", o.bw_size)?;
    super::check_size("--lat-size", o.lat_size)?;
    let rounds = o.rounds.max(1);
    // Each round gets its share of the iterations, but never fewer than 50.
    let per_round = (o.iters / u64::from(rounds)).max(50);
    let mut all = Round::default();
    let (mut bw_ratios, mut rtt_ratios) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let r = Round::measure(o, per_round)?;
        let (b, t) = r.ratios();
        bw_ratios.push(b);
        rtt_ratios.push(t);
        all.memcpy.extend(r.memcpy);
        all.sim_bw.extend(r.sim_bw);
        all.tcp.extend(r.tcp);
        all.sim_rtt.extend(r.sim_rtt);
    }
    let (depth, cq_mod) = bw::effective_depth(o.bw_size, o.tx_depth, o.cq_mod);
    let m = |v: &[f64]| median(v).unwrap_or(0.0);
    let figures = [
        Figure {
            what: format!("memcpy {} B (one thread)", o.bw_size),
            median: m(&all.memcpy),
            unit: "MiB/s",
        },
        Figure {
            what: format!(
                "sim RDMA WRITE {} B (tx-depth {depth}, cq-mod {cq_mod})",
                o.bw_size
            ),
            median: m(&all.sim_bw),
            unit: "MiB/s",
        },
        Figure {
            what: format!("TCP loopback busy-poll round trip {} B", o.lat_size),
            median: m(&all.tcp),
            unit: "us",
        },
        Figure {
            what: format!("sim RDMA WRITE ping-pong round trip {} B", o.lat_size),
            median: m(&all.sim_rtt),
            unit: "us",
        },
    ];

    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "bypass perf compare: medians of {rounds} interleaved rounds ({cores} cores, \
         {per_round} iterations per measurement per round)"
    );
    println!(" {:<58} {:>12}  {:<6}", "measurement", "median", "unit");
    for f in &figures {
        println!(" {:<58} {:>12.2}  {:<6}", f.what, f.median, f.unit);
    }
    println!(" per round: sim / memcpy {}", ratio_list(&bw_ratios, 3));
    println!(" per round: sim / TCP    {}", ratio_list(&rtt_ratios, 3));
    let bw_ratio = m(&bw_ratios);
    let rtt_ratio = m(&rtt_ratios);
    println!(
        " bandwidth: sim / memcpy = {bw_ratio:.3} (median of the rounds; target >= {BW_TARGET:.2}): {}",
        verdict(bw_ratio >= BW_TARGET)
    );
    println!(
        " round trip: sim / TCP = {rtt_ratio:.3} (median of the rounds; target <= {RTT_TARGET:.2}): {}",
        verdict(rtt_ratio <= RTT_TARGET)
    );
    Ok(())
}

/// Per-segment bandwidths in bytes/s. A segment spans `k` signalled completions, `k` chosen
/// so that it holds at least one send queue's worth of WRITEs: completions polled together
/// in one batch (at most a queue's worth are outstanding) then blur no segment's rate.
fn window_bandwidths(t: &bw::BwTimes, size: u64, depth: u32) -> Vec<f64> {
    let step = t.cq_mod.max(1) as usize;
    let marks: Vec<u64> = t
        .completed
        .iter()
        .skip(step - 1)
        .step_by(step)
        .copied()
        .collect();
    let want = depth as usize;
    let k = want.div_ceil(step).max(1);
    marks
        .iter()
        .step_by(k)
        .zip(marks.iter().skip(k).step_by(k))
        .filter(|(a, b)| b > a)
        .map(|(a, b)| (k * step) as f64 * size as f64 / ((b - a) as f64 / 1e9))
        .collect()
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}
