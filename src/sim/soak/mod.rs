//! `bypass sim soak`: load and exhaustion over time. Two sim NICs on a stepped, seeded fabric
//! whose link drops, duplicates, reorders and corrupts packets; `--qps` lanes (RC QP pairs,
//! each with its own CQs, pools and MR) carry mixed SEND/WRITE/READ/atomic traffic checked
//! end to end; every `--replace-after` messages a lane is drained, torn down and recreated,
//! so the create and destroy paths are soaked too. At the end every lane is drained and
//! destroyed and the devices' object counts must be back where they were before the first
//! lane, and the process's RSS must not have grown past `--max-rss-growth-mib` after warm-up.
//!
//! Owns: [`SoakCmd`], [`SoakError`], the run and its report. Must not: check data itself
//! (`lane.rs` does) or read device state beyond object counts and fault statistics.
//!
//! RSS is `VmRSS` from `/proc/self/status` (proc(5)); warm-up is the first tenth of the run,
//! when allocators, pools and the fabric's queues reach their working size. Exit status: 0
//! when every message checked, the counts came back and RSS stayed in bound; 1 otherwise
//! (the report is printed first either way).

mod lane;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_sim::ObjectCounts;
use bypass_sim::faults::{FaultPlan, FaultStats, Rate};
use bypass_testbed::{SimContext, SimFabric};
use bypass_verbs::{Context, VerbsError};

use crate::alloc_count::live_bytes;
use lane::{Lane, LaneError, Mixed};

/// `bypass sim soak` options.
#[derive(Debug, Clone, clap::Args)]
pub struct SoakCmd {
    /// How long to run (wall clock): a number with ms, s, m or h (`90s`, `10m`).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// QP pairs carrying traffic at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub qps: u32,
    /// Seed of the fabric (its faults) and of the message mix: one seed, one run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Messages a lane carries before it is drained, destroyed and recreated.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub replace_after: u64,
    /// Chance each packet is dropped, duplicated, reordered and corrupted (each), in parts
    /// per million.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(0..=50_000))]
    pub fault_ppm: u32,
    /// Most the RSS may grow from the end of warm-up to the end, MiB.
    #[arg(long, default_value_t = 32)]
    pub max_rss_growth_mib: u64,
}

/// Parses `500ms`, `90s`, `10m`, `1h` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration: give a number with ms, s, m or h"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}`; use ms, s, m or h (e.g. 90s, 10m)"
            ));
        }
    };
    if d.is_zero() {
        return Err("the duration must be more than 0".into());
    }
    Ok(d)
}

/// Why a soak failed.
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    /// The sim NICs or their PDs could not be set up.
    #[error("setting up the sim NICs: {0}")]
    Setup(#[from] VerbsError),
    /// A lane's data was wrong or it stopped making progress.
    #[error("{0}")]
    Lane(#[from] LaneError),
    /// Objects were left on a device after every lane was destroyed.
    #[error(
        "objects leaked on {device}: {diffs} (start → end); a create or destroy path does not free what it made"
    )]
    Leak {
        /// `a` or `b`.
        device: &'static str,
        /// The counts that differ.
        diffs: String,
    },
    /// The process grew past the bound after warm-up.
    #[error(
        "RSS grew {grew_kib} KiB after warm-up ({warm_kib} → {end_kib} KiB), more than the {bound_mib} MiB allowed (--max-rss-growth-mib)"
    )]
    RssGrowth {
        /// Growth.
        grew_kib: u64,
        /// At the end of warm-up.
        warm_kib: u64,
        /// At the end.
        end_kib: u64,
        /// The bound.
        bound_mib: u64,
    },
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Io(#[from] std::io::Error),
}

/// The process's resident set, KiB (`VmRSS`), or 0 where /proc is not there.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn counts(ctx: &Context) -> ObjectCounts {
    ctx.sim()
        .and_then(|d| d.with_device(|d| d.object_counts()).ok())
        .unwrap_or_default()
}

/// What a soak did.
#[derive(Debug, Default)]
struct Report {
    done: Mixed,
    replaced: u64,
    faults: FaultStats,
    rss_start: u64,
    rss_warm: u64,
    rss_mid: u64,
    rss_end: u64,
    /// Live heap bytes (the binary's counting allocator) at warm-up, middle and end: tells
    /// a growing RSS made of live objects from one made of allocator slack.
    heap: [isize; 3],
    /// Live heap bytes before the first lane and after the last was destroyed.
    heap_idle: [isize; 2],
    counts_start: [ObjectCounts; 2],
    counts_peak: [ObjectCounts; 2],
    counts_end: [ObjectCounts; 2],
    wall: Duration,
    virtual_ns: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.done;
        writeln!(
            f,
            "messages   {} in {:.1?} wall, {:.3} s virtual: {} SEND, {} WRITE, {} READ, {} atomic",
            d.total(),
            self.wall,
            self.virtual_ns as f64 / 1e9,
            d.sends,
            d.writes,
            d.reads,
            d.atomics
        )?;
        let x = &self.faults;
        writeln!(
            f,
            "faults     {} dropped, {} duplicated, {} reordered, {} corrupted",
            x.dropped, x.duplicated, x.reordered, x.corrupted
        )?;
        writeln!(f, "lanes      {} replaced", self.replaced)?;
        writeln!(
            f,
            "rss        start {} KiB, after warm-up {} KiB, middle {} KiB, end {} KiB",
            self.rss_start, self.rss_warm, self.rss_mid, self.rss_end
        )?;
        writeln!(
            f,
            "heap       after warm-up {} B, middle {} B, end {} B; without lanes {} B before, {} B after",
            self.heap[0], self.heap[1], self.heap[2], self.heap_idle[0], self.heap_idle[1]
        )?;
        for (i, name) in ["a", "b"].iter().enumerate() {
            writeln!(f, "objects {name}  start {}", self.counts_start[i])?;
            writeln!(f, "           loaded {}", self.counts_peak[i])?;
            writeln!(f, "           end   {}", self.counts_end[i])?;
        }
        Ok(())
    }
}

fn add_faults(t: &mut FaultStats, s: &FaultStats) {
    t.dropped += s.dropped;
    t.duplicated += s.duplicated;
    t.reordered += s.reordered;
    t.corrupted += s.corrupted;
    t.delayed += s.delayed;
}

/// Runs the soak and prints its report; an error after the report when a check failed.
pub fn run(c: &SoakCmd) -> Result<(), SoakError> {
    let started = Instant::now();
    let fabric = SimFabric::stepped(c.seed);
    let a = Context::open_sim(&fabric, 1)?;
    let b = Context::open_sim(&fabric, 2)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let mut report = Report {
        counts_start: [counts(&a), counts(&b)],
        rss_start: rss_kib(),
        ..Report::default()
    };
    let rate = Rate::per_million(c.fault_ppm);
    fabric.with_world(|w| {
        w.set_faults(Some(FaultPlan {
            drop: rate,
            duplicate: rate,
            reorder: rate,
            corrupt: rate,
            ..FaultPlan::default()
        }))
    });
    let result = soak(c, &fabric, (&a, &b), (&pd_a, &pd_b), started, &mut report);
    // Counted whatever happened: a failed run's leaks are worth seeing too.
    report.counts_end = [counts(&a), counts(&b)];
    let (ia, ib) = (a.sim().map_or(0, |d| d.id()), b.sim().map_or(1, |d| d.id()));
    fabric.with_world(|w| {
        add_faults(&mut report.faults, &w.fault_stats_from(ia));
        add_faults(&mut report.faults, &w.fault_stats_from(ib));
        report.virtual_ns = w.now();
    });
    report.wall = started.elapsed();
    print!("{report}");
    result?;
    for (i, device) in ["a", "b"].into_iter().enumerate() {
        let diffs = report.counts_start[i].differences(&report.counts_end[i]);
        if !diffs.is_empty() {
            let diffs = diffs
                .iter()
                .map(|(n, s, e)| format!("{n} {s} → {e}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(SoakError::Leak { device, diffs });
        }
    }
    let grew = report.rss_end.saturating_sub(report.rss_warm);
    if grew > c.max_rss_growth_mib * 1024 {
        return Err(SoakError::RssGrowth {
            grew_kib: grew,
            warm_kib: report.rss_warm,
            end_kib: report.rss_end,
            bound_mib: c.max_rss_growth_mib,
        });
    }
    println!("ok: every message checked, object counts back to start, RSS within bound");
    Ok(())
}

/// The traffic: lanes stepped round robin until the deadline, replaced as they reach
/// `replace_after`, then drained and dropped (RSS taken before the drop, with every lane
/// still up, the same state as after warm-up).
fn soak(
    c: &SoakCmd,
    fabric: &SimFabric,
    (a, b): (&Arc<Context>, &Arc<Context>),
    (pd_a, pd_b): (&bypass_verbs::Pd, &bypass_verbs::Pd),
    started: Instant,
    report: &mut Report,
) -> Result<(), SoakError> {
    report.heap_idle[0] = live_bytes();
    let mut generation = 0u64;
    let mut lanes = Vec::with_capacity(c.qps as usize);
    for _ in 0..c.qps {
        lanes.push(Some(Lane::new(a, b, pd_a, pd_b, generation, c.seed)?));
        generation += 1;
    }
    report.counts_peak = [counts(a), counts(b)];
    let warm_at = c.duration / 10;
    let mid_at = c.duration / 2;
    let (mut warm, mut mid) = (false, false);
    while started.elapsed() < c.duration {
        for slot in lanes.iter_mut() {
            let Some(lane) = slot.as_mut() else { continue };
            lane.step()?;
            if lane.done().total() >= c.replace_after {
                lane.finish(fabric)?;
                report.done.add(&lane.done());
                // The old lane goes first, so its QPNs and keys are free for the new one.
                *slot = None;
                *slot = Some(Lane::new(a, b, pd_a, pd_b, generation, c.seed)?);
                generation += 1;
                report.replaced += 1;
            }
        }
        let t = started.elapsed();
        if !warm && t >= warm_at {
            warm = true;
            report.rss_warm = rss_kib();
            report.heap[0] = live_bytes();
        }
        if !mid && t >= mid_at {
            mid = true;
            report.rss_mid = rss_kib();
            report.heap[1] = live_bytes();
        }
    }
    for l in lanes.iter_mut().flatten() {
        l.finish(fabric)?;
        report.done.add(&l.done());
    }
    if !warm {
        report.rss_warm = rss_kib();
        report.heap[0] = live_bytes();
    }
    if !mid {
        report.rss_mid = report.rss_warm;
        report.heap[1] = report.heap[0];
    }
    report.rss_end = rss_kib();
    report.heap[2] = live_bytes();
    drop(lanes);
    report.heap_idle[1] = live_bytes();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "m", "10x", "-1s", "0s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
