//! `bypass perf sweep`: the seed's §5.2 tuning method as one command. Measure RDMA WRITE
//! bandwidth over queue depth, message size and QP count (spinning and blocking on events),
//! then print a table, write a CSV and one SVG chart per knob with each curve's knee marked.
//!
//! Owns: the sweep's options, the run over the planned points (each distinct point measured
//! once) and the files under `--out`. Must not build rigs or stream (`bw::measure_bw`,
//! `lat::measure_lat` do), plan points (`sweep_plan`) or format results (`sweep_out`).
//!
//! Runs on the in-process sim (two simulated NICs on a threaded fabric). Each point is a
//! perftest `ib_write_bw -t DEPTH -s SIZE -q QPS [-e]` run; points of the size sweep also
//! get an `ib_write_lat -s SIZE` ping-pong for the latency column.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::PerfError;
use super::bw::{BwSpec, measure_bw};
use super::lat::{LatSpec, measure_lat};
use super::sweep_out::{Measured, Row, charts, csv, knee_lines, table};
use super::sweep_plan::{Grid, Knob, Mode, PlanError, Point, plan};
use crate::args::parse_size;
use crate::chart::{ChartError, write_svg};
use crate::progress::Progress;

/// Which completion modes to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EventsArg {
    /// Spinning polls and blocking ones.
    Both,
    /// Busy-poll the CQ only.
    Spin,
    /// Block on a completion channel only (perftest `-e`).
    Event,
}

/// Options of `bypass perf sweep`.
#[derive(Args, Debug)]
pub struct SweepOpts {
    /// Queue depths (WRs outstanding per QP) of the depth sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256,1024,2048",
          value_parser = clap::value_parser!(u32).range(1..=8192))]
    depths: Vec<u32>,
    /// Message sizes of the size sweep (K/M suffixes allowed, up to 8M).
    #[arg(long, value_delimiter = ',', default_value = "8,64,512,4K,32K,256K,1M",
          value_parser = parse_point_size)]
    sizes: Vec<u64>,
    /// QP counts of the QP sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    qps: Vec<u32>,
    /// The depth held while size or QPs vary (the seed's starting point).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=8192))]
    base_depth: u32,
    /// The size held while depth or QPs vary.
    #[arg(long, default_value = "4K", value_parser = parse_point_size)]
    base_size: u64,
    /// The QP count held while depth or size vary.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    base_qps: u32,
    /// Completion modes: spin (busy-poll), event (completion channel), or both.
    #[arg(long, value_enum, default_value_t = EventsArg::Both)]
    events: EventsArg,
    /// Measure every combination of depth × size × QPs instead of one knob at a time.
    #[arg(long)]
    full_grid: bool,
    /// Messages per run (over all its QPs) instead of a duration; at most 10^7, since each
    /// message keeps two timestamps (160 MB at the limit).
    #[arg(short = 'n', long, conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(5..=10_000_000))]
    iters: Option<u64>,
    /// Seconds per run (fractions allowed; default 0.33 when -n is not given).
    #[arg(short = 'D', long, value_parser = parse_seconds)]
    duration: Option<f64>,
    /// Rounds over all points; each point reports its median run (by bandwidth), so a burst
    /// of load from other processes moves one round, not the result.
    #[arg(short = 'r', long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    repeats: u32,
    /// Ping-pong round trips per size-sweep point for the latency column (0: none).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    lat_iters: u64,
    /// Ask for a completion every N WRITEs (capped at the depth).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    cq_mod: u32,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder for sweep.csv and the charts (created if missing).
    #[arg(long, default_value = "sweep-out")]
    out: PathBuf,
}

/// Why a sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The options make no sweep.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// One point's measurement failed.
    #[error("sweep point (depth {}, size {}, {} QPs, {}): {source}",
            point.depth, point.size, point.qps, point.mode)]
    Measure {
        /// The point.
        point: Point,
        /// Why.
        source: Box<PerfError>,
    },
    /// A chart could not be made.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// An output file or folder could not be written.
    #[error("cannot write {path}: {source} (check that --out names a writable folder)")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Seconds per run when neither `-n` nor `-D` is given: the default lists make 17 distinct
/// points per mode, so 3 rounds of 34 runs stream for 34 s, plus rig setup and latency runs,
/// within the ~1 min a default sweep should take in a release build.
const DEFAULT_SECONDS: f64 = 0.33;

/// The operation every point streams (named in chart titles).
const VERB: &str = "RDMA WRITE";

fn parse_point_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err(format!("{s:?}: a message has at least 1 byte")),
        n if n > super::MAX_SIZE => Err(format!("{s:?}: sizes up to 8M are supported")),
        n => Ok(n),
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.01..=60.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a duration: give seconds per point from 0.01 to 60 (e.g. 0.5)"
        )),
    }
}

impl SweepOpts {
    fn grid(&self) -> Grid {
        let modes = match self.events {
            EventsArg::Both => vec![Mode::Spin, Mode::Event],
            EventsArg::Spin => vec![Mode::Spin],
            EventsArg::Event => vec![Mode::Event],
        };
        Grid {
            depths: self.depths.clone(),
            sizes: self.sizes.clone(),
            qps: self.qps.clone(),
            modes,
            base_depth: self.base_depth,
            base_size: self.base_size,
            base_qps: self.base_qps,
        }
    }

    /// The bandwidth run of one point.
    fn bw_spec(&self, p: &Point) -> BwSpec {
        let duration = match (self.iters, self.duration) {
            (Some(_), _) => None,
            (None, d) => Some(Duration::from_secs_f64(d.unwrap_or(DEFAULT_SECONDS))),
        };
        BwSpec {
            size: p.size,
            // At least one message per QP (measure_bw refuses fewer).
            iters: self.iters.unwrap_or(0).max(u64::from(p.qps)),
            duration,
            tx_depth: p.depth,
            cq_mod: self.cq_mod,
            qps: p.qps,
            events: p.mode == Mode::Event,
            seed: self.seed,
            ..BwSpec::default()
        }
    }
}

/// Runs the sweep: table and knees on stdout, CSV and charts under `--out`.
pub fn run(o: &SweepOpts) -> Result<(), SweepError> {
    let grid = o.grid();
    let planned = plan(&grid, o.full_grid)?;
    let mut distinct: Vec<Point> = Vec::new();
    for (_, p) in &planned {
        if !distinct.contains(p) {
            distinct.push(*p);
        }
    }
    let per_point = match (o.iters, o.duration) {
        (Some(n), _) => format!("{n} messages"),
        (None, d) => format!("{:.2} s", d.unwrap_or(DEFAULT_SECONDS)),
    };
    println!(
        " {VERB} sweep on the in-process sim (seed {}): {} rows, {} distinct points, {} rounds of {per_point} each (median run reported)",
        o.seed,
        planned.len(),
        distinct.len(),
        o.repeats
    );
    std::fs::create_dir_all(&o.out).map_err(|source| SweepError::Io {
        path: o.out.clone(),
        source,
    })?;
    let (done, lats) = measure_all(o, &planned, &distinct)?;
    let rows: Vec<Row> = planned
        .iter()
        .filter_map(|&(knob, point)| {
            let m = done.iter().find(|(p, _)| *p == point)?.1;
            // Latency belongs to the size sweep's rows only.
            let lat_us = lats
                .iter()
                .find(|(k, _)| *k == (point.size, point.mode))
                .filter(|_| matches!(knob, Knob::Size | Knob::Grid))
                .map(|(_, l)| *l);
            Some(Row {
                knob,
                point,
                m: Measured { lat_us, ..m },
            })
        })
        .collect();
    print!("{}", table(&rows));
    let base = if o.full_grid {
        grid.grid_base()
    } else {
        (o.base_depth, o.base_size, o.base_qps)
    };
    let charts = charts(&rows, base, VERB);
    print!("{}", knee_lines(&charts));
    let csv_path = o.out.join("sweep.csv");
    write(&csv_path, &csv(&rows))?;
    println!(" wrote {}", csv_path.display());
    for (knob, chart) in &charts {
        let path = o.out.join(format!("{}.svg", knob.name()));
        write_svg(chart, &path)?;
        println!(" wrote {}", path.display());
    }
    Ok(())
}

/// Every distinct point's median run over `--repeats` interleaved rounds, and the median
/// latency of each (size, mode) the size sweep (or grid) holds.
#[allow(clippy::type_complexity)]
fn measure_all(
    o: &SweepOpts,
    planned: &[(Knob, Point)],
    distinct: &[Point],
) -> Result<(Vec<(Point, Measured)>, Vec<((u64, Mode), f64)>), SweepError> {
    let lat_keys: Vec<(u64, Mode)> = if o.lat_iters == 0 {
        Vec::new()
    } else {
        let mut v = Vec::new();
        for (k, p) in planned {
            if matches!(k, Knob::Size | Knob::Grid) && !v.contains(&(p.size, p.mode)) {
                v.push((p.size, p.mode));
            }
        }
        v
    };
    let rounds = o.repeats as usize;
    let bar = Progress::new(((distinct.len() + lat_keys.len()) * rounds) as u64, "sweep");
    let mut runs: Vec<Vec<Measured>> = vec![Vec::with_capacity(rounds); distinct.len()];
    let mut lats: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); lat_keys.len()];
    for _ in 0..rounds {
        for (p, r) in distinct.iter().zip(&mut runs) {
            r.push(measure(o, p)?);
            bar.inc(1);
        }
        for (&(size, mode), l) in lat_keys.iter().zip(&mut lats) {
            l.push(latency(o, size, mode)?);
            bar.inc(1);
        }
    }
    bar.finish();
    let done = distinct
        .iter()
        .zip(runs)
        .filter_map(|(p, r)| Some((*p, median_run(r)?)))
        .collect();
    let lats = lat_keys
        .into_iter()
        .zip(lats)
        .filter_map(|(k, l)| Some((k, median(l)?)))
        .collect();
    Ok((done, lats))
}

/// The run with the median bandwidth (the lower middle one of an even count).
fn median_run(mut runs: Vec<Measured>) -> Option<Measured> {
    runs.sort_by(|a, b| a.gbps.total_cmp(&b.gbps));
    runs.get(runs.len().checked_sub(1)? / 2).copied()
}

/// The median (the lower middle value of an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len().checked_sub(1)? / 2).copied()
}

fn fail(p: &Point) -> impl FnOnce(PerfError) -> SweepError + '_ {
    move |e| SweepError::Measure {
        point: *p,
        source: Box::new(e),
    }
}

/// Measures one point's bandwidth run.
fn measure(o: &SweepOpts, p: &Point) -> Result<Measured, SweepError> {
    let r = measure_bw(&o.bw_spec(p)).map_err(fail(p))?;
    Ok(Measured {
        depth_used: r.depth,
        messages: r.messages,
        seconds: r.seconds,
        gbps: r.gbps,
        mpps: r.mpps,
        lat_us: None,
        cpu_pct: r.cpu_util,
    })
}

/// The typical ping-pong latency (µs) at `size` bytes in `mode`.
fn latency(o: &SweepOpts, size: u64, mode: Mode) -> Result<f64, SweepError> {
    let spec = LatSpec {
        size,
        iters: o.lat_iters.max(5),
        events: mode == Mode::Event,
        seed: o.seed,
        ..LatSpec::default()
    };
    let point = Point {
        depth: 1,
        size,
        qps: 1,
        mode,
    };
    let l = measure_lat(&spec).map_err(fail(&point))?;
    Ok(l.report.map_or(l.t_avg_us, |r| r.t_typical))
}

fn write(path: &Path, text: &str) -> Result<(), SweepError> {
    std::fs::write(path, text).map_err(|source| SweepError::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(gbps: f64, messages: u64) -> Measured {
        Measured {
            depth_used: 16,
            messages,
            seconds: 1.0,
            gbps,
            mpps: gbps / 10.0,
            lat_us: None,
            cpu_pct: Some(50.0),
        }
    }

    #[test]
    fn a_point_reports_its_median_run_whole() {
        let m = median_run(vec![run(30.0, 1), run(10.0, 2), run(20.0, 3)]).unwrap();
        assert_eq!((m.gbps, m.messages), (20.0, 3));
        let m = median_run(vec![run(40.0, 1), run(10.0, 2)]).unwrap();
        assert_eq!(m.messages, 2);
        assert_eq!(median_run(vec![run(5.0, 9)]).unwrap().messages, 9);
        assert!(median_run(Vec::new()).is_none());
        assert_eq!(median(vec![3.0, 1.0, 2.0, 9.0, 0.5]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }
}
