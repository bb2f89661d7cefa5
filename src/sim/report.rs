//! The report of `bypass sim incast`: a table per run (or one row per mode with
//! `--compare`), JSON, and the CSV and SVG files.
//!
//! Owns: [`IncastCmd`] (the options around [`IncastOpts`]: output form and files), the text
//! and JSON forms of an [`IncastResult`] and [`run`]. Must not: run anything but
//! [`run_incast`].

use std::io::Write;
use std::path::PathBuf;

use super::incast::{IncastError, IncastOpts, IncastResult, Mode, run_incast};
use crate::chart::ChartError;

/// `bypass sim incast` options.
#[derive(Debug, Clone, clap::Args)]
pub struct IncastCmd {
    /// The experiment.
    #[command(flatten)]
    pub opts: IncastOpts,
    /// Run lossy, pfc and pfc-ecn with the same options and print one row each.
    #[arg(long)]
    pub compare: bool,
    /// Print JSON (one object per run, one per line).
    #[arg(long)]
    pub json: bool,
    /// Write PREFIX.csv, PREFIX-rate.svg and PREFIX-queue.svg (with --compare:
    /// PREFIX-MODE.*).
    #[arg(long, value_name = "PREFIX")]
    pub out: Option<PathBuf>,
}

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The run failed.
    #[error(transparent)]
    Incast(#[from] IncastError),
    /// A chart or CSV could not be written.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// Standard output failed.
    #[error("writing the report: {0}")]
    Io(#[from] std::io::Error),
    /// JSON encoding failed.
    #[error("encoding the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Runs the command.
pub fn run(c: &IncastCmd) -> Result<(), ReportError> {
    let modes: Vec<Mode> = if c.compare {
        vec![Mode::Lossy, Mode::Pfc, Mode::PfcEcn]
    } else {
        vec![c.opts.mode]
    };
    let mut out = std::io::stdout().lock();
    let mut results = Vec::new();
    for m in modes {
        let o = IncastOpts {
            mode: m,
            ..c.opts.clone()
        };
        let r = run_incast(&o)?;
        let files = match &c.out {
            Some(prefix) => {
                let mut p = prefix.as_os_str().to_owned();
                if c.compare {
                    p.push(format!("-{}", m.name()));
                }
                let title = format!("{}:1 incast, {}", o.senders, m.name());
                r.series.write_files(&PathBuf::from(p), &title)?
            }
            None => Vec::new(),
        };
        if c.json {
            writeln!(out, "{}", serde_json::to_string(&r)?)?;
        } else if !c.compare {
            write!(out, "{}", text(&o, &r))?;
            for f in &files {
                writeln!(out, "wrote {f}")?;
            }
        }
        results.push((r, files));
    }
    if c.compare && !c.json {
        write!(
            out,
            "{}",
            compare_table(&c.opts, results.iter().map(|(r, _)| r))
        )?;
        for f in results.iter().flat_map(|(_, f)| f) {
            writeln!(out, "wrote {f}")?;
        }
    }
    Ok(())
}

/// The text report of one run.
pub fn text(o: &IncastOpts, r: &IncastResult) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "incast: {} senders -> 1 receiver, mode {}, {} Gb/s links, {} B WRITEs x{} in flight, {} µs (seed {})",
        r.senders,
        r.mode.name(),
        r.link_gbps,
        o.size,
        o.depth,
        o.duration_us,
        r.seed
    );
    let _ = writeln!(
        s,
        "{:<8} {:>12} {:>8} {:>10} {:>10} {:>10} {:>14}  after {} µs",
        "flow", "Gb/s", "WRITEs", "p50 µs", "p99 µs", "max µs", "RP Mb/s alpha", r.converge_us
    );
    for f in r.flows.iter().chain(&r.victim) {
        let _ = writeln!(
            s,
            "{:<8} {:>12.3} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>14}{}",
            f.name,
            f.gbps,
            f.writes,
            f.p50_us,
            f.p99_us,
            f.max_us,
            f.rp.filter(|r| r.limited)
                .map_or("-".into(), |r| format!("{} {}", r.current_mbps, r.alpha)),
            f.error
                .as_deref()
                .map(|e| format!("  {e}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        s,
        "total {:.3} Gb/s of {} ; Jain's index {}",
        r.total_gbps,
        r.link_gbps,
        r.jain.map_or("-".into(), |j| format!("{j:.4}"))
    );
    let _ = writeln!(
        s,
        "bottleneck queue: max {} KiB, after convergence max {} KiB mean {} KiB (Kmax {} KiB)",
        r.queue_max / 1024,
        r.queue_max_converged / 1024,
        r.queue_mean_converged / 1024,
        r.kmax / 1024
    );
    let _ = writeln!(
        s,
        "pauses (XOFF) {} ; switch drops {} ; fault drops {} ; retransmits {} ; ECN marks {} ; CNPs sent {} handled {}",
        r.pauses, r.drops, r.fault_drops, r.retransmits, r.ecn_marked, r.cnps_sent, r.cnps_handled
    );
    s
}

/// One row per mode.
pub fn compare_table<'a>(o: &IncastOpts, rs: impl Iterator<Item = &'a IncastResult>) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}:1 incast, {} Gb/s links, {} B WRITEs x{}, {} µs, seed {} (figures after {} µs)",
        o.senders,
        o.link_gbps,
        o.size,
        o.depth,
        o.duration_us,
        o.seed,
        o.converge_us.unwrap_or(o.duration_us / 2)
    );
    let _ = writeln!(
        s,
        "| mode | total Gb/s | Jain | queue max KiB | p99 µs | max µs | pauses | drops | CNPs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for r in rs {
        let p99 = r.flows.iter().map(|f| f.p99_us).fold(0.0, f64::max);
        let max = r.flows.iter().map(|f| f.max_us).fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {} | {:.2} | {} | {} | {:.1} | {:.1} | {} | {} | {} |",
            r.mode.name(),
            r.total_gbps,
            r.jain.map_or("-".into(), |j| format!("{j:.3}")),
            r.queue_max_converged / 1024,
            p99,
            max,
            r.pauses,
            r.drops + r.fault_drops,
            r.cnps_sent
        );
    }
    s
}
