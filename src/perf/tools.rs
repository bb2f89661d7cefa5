//! The eight perftest tools of `bypass perf` (`send-lat`, `send-bw`, `write-lat`,
//! `write-bw`, `read-lat`, `read-bw`, `atomic-lat`, `atomic-bw`): their shared options and
//! their output (perftest's header, table, `--cpu_util` column, JSON, counters).
//!
//! Owns: turning options into a [`LatSpec`] / [`BwSpec`], refusing combinations that do not
//! apply, and printing. Must not measure: `lat`, `bw` (in process) and `remote` (two
//! processes) do.
//!
//! Sources: perftest's option names and defaults (src/perftest_parameters.c `parser`,
//! README), `ctx_print_test_info` for the header, `print_report_lat` / `print_report_bw`
//! for the rows (`crate::stats`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bypass_verbs::Mtu;
use clap::Args;

use super::bw::{BwSpec, measure_bw};
use super::gpu_mem;
use super::lat::{LatSpec, measure_lat};
use super::ops::{AtomicOp, Conn, Verb};
use super::remote::{self, NetOpts, Row};
use super::{CommonOpts, PerfError, check_host, check_sizes, sizes};
use crate::counters_view::{Labelled, print_counters};
use crate::progress::Progress;
use crate::stats::{
    BwUnits, LAT_DUR_HEADER, LAT_HEADER, RESULT_LINE, lat_duration_row, with_cpu_util,
};

/// Latency or bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One operation in flight, timed per round trip.
    Lat,
    /// A stream of operations.
    Bw,
}

/// The options every perf tool takes (perftest's names).
#[derive(Args, Debug)]
pub struct ToolOpts {
    #[command(flatten)]
    common: CommonOpts,
    #[command(flatten)]
    net: NetOpts,
    #[command(flatten)]
    cpu: super::pin::CpuOpts,
    /// Iterations per size (default 1000 for latency, 5000 for bandwidth); 5 to 10000000.
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(5..=super::MAX_ITERS), conflicts_with = "duration")]
    iters: Option<u64>,
    /// Run for SECS seconds instead of a number of iterations.
    #[arg(short = 'D', long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    duration: Option<u64>,
    /// QPs (bandwidth tools): the iterations (or the duration) are spread over them and
    /// their results summed.
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    qps: u32,
    /// Both directions at once (bandwidth tools).
    #[arg(short = 'b', long)]
    bidirectional: bool,
    /// Operations kept outstanding per QP (bandwidth tools; capped so that the buffers fit
    /// 64 MiB).
    #[arg(short = 't', long = "tx-depth", value_parser = clap::value_parser!(u32).range(1..=8192))]
    tx_depth: Option<u32>,
    /// Ask for a completion every N operations (and for the last).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    cq_mod: u32,
    /// Largest message sent inline (default: perftest's for the verb and transport).
    #[arg(short = 'I', long = "inline_size", value_parser = clap::value_parser!(u32).range(0..=1024))]
    inline: Option<u32>,
    /// Path MTU of the QPs: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, value_parser = parse_mtu)]
    mtu: Option<Mtu>,
    /// Transport: RC, UC (SEND and WRITE) or UD (SEND, one packet per message).
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC")]
    conn: Conn,
    /// The atomic operation (atomic tools).
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic: AtomicOp,
    /// Sleep on a completion channel for completions instead of busy polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Report the CPU utilisation over the measured interval (from /proc/stat).
    #[arg(long = "cpu_util", alias = "cpu-util")]
    cpu_util: bool,
    /// Report Gb/s instead of MiB/s.
    #[arg(long = "report-gbits", alias = "report_gbits")]
    report_gbits: bool,
    /// Write the results as perftest's JSON, to perftest_out.json in the working directory
    /// (perftest's default) or to --out_json_file.
    #[arg(long = "out_json", alias = "out-json")]
    out_json: bool,
    /// The file --out_json writes (implies --out_json).
    #[arg(long = "out_json_file", alias = "out-json-file", value_name = "PATH")]
    out_json_file: Option<PathBuf>,
    /// After each size, print the device counters (the port's and each QP's) that moved.
    #[arg(long = "report-counters", alias = "report_counters")]
    report_counters: bool,
    /// Put the target and source buffers in CUDA memory of GPU (default 0), registered
    /// through dma-bufs (perftest's --use_cuda=GPU; write-bw, no inline). In process both
    /// sides use it; across two processes each side decides for its own buffers.
    #[arg(
        long = "use-cuda",
        alias = "use_cuda",
        value_name = "GPU",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "0"
    )]
    use_cuda: Option<u32>,
}

fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<u32>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("{s} is not a path MTU: use 256, 512, 1024, 2048 or 4096"))
}

/// One tool: its verb (the atomic tools take -A) and kind.
pub fn run(verb: Verb, kind: Kind, o: &ToolOpts) -> Result<(), PerfError> {
    let verb = match verb {
        Verb::Atomic(_) => Verb::Atomic(o.atomic),
        v => v,
    };
    let default = if kind == Kind::Lat { 2 } else { 65536 };
    let mut sizes = sizes(&o.common, default);
    if let Verb::Atomic(_) = verb {
        sizes = vec![8];
    }
    check_sizes(&sizes)?;
    check_host(&o.common, &o.net)?;
    check_options(verb, kind, o)?;
    check_cuda(verb, kind, o, &sizes)?;
    // Before anything starts a thread: the fabric's engine, the link and CUDA's own threads
    // inherit the mask.
    super::pin::apply(&o.cpu, &o.common.device)?;
    if let Some(gpu) = gpu_mem::open(o.use_cuda)? {
        let i = gpu.info();
        println!(
            "GPU memory: GPU {} ({}, {}), target and sources registered through dma-bufs",
            i.ordinal, i.name, i.pci_bus_id
        );
    }
    let units = if o.report_gbits {
        BwUnits::GbitPerSec
    } else {
        BwUnits::MibPerSec
    };
    let duration = o.duration.map(Duration::from_secs);
    let lat = LatSpec {
        verb,
        conn: o.conn,
        size: 0,
        iters: o.iters.unwrap_or(1000),
        duration,
        events: o.events,
        seed: o.common.seed,
        inline: o.inline,
        mtu: o.mtu,
        check: o.net.check,
    };
    // perftest never inlines CUDA messages: --use-cuda's default inline size is 0.
    let bw_inline = match o.use_cuda {
        Some(_) => Some(o.inline.unwrap_or(0)),
        None => o.inline,
    };
    let bw = BwSpec {
        verb,
        conn: o.conn,
        size: 0,
        iters: o.iters.unwrap_or(5000),
        duration,
        tx_depth: o.tx_depth.unwrap_or(128),
        cq_mod: o.cq_mod,
        qps: o.qps,
        events: o.events,
        seed: o.common.seed,
        bidirectional: o.bidirectional,
        inline: bw_inline,
        mtu: o.mtu,
        check: o.net.check,
        units,
        cuda: o.use_cuda,
    };
    let info = test_info(verb, kind, o, &bw);
    print_info(verb, kind, &info);
    let header = match (kind, duration) {
        (Kind::Lat, Some(_)) => LAT_DUR_HEADER,
        (Kind::Lat, None) => LAT_HEADER,
        (Kind::Bw, _) => units.header(),
    };
    let client = !o.common.device.is_network() || o.net.host.is_some();
    // The passive side of a two-process run prints a table only where it times too.
    let prints_table =
        client || (kind == Kind::Bw && o.bidirectional) || (kind == Kind::Lat && !verb.fetches());
    if prints_table {
        if o.cpu_util {
            println!("{}{}", header.trim_end(), crate::stats::CPU_UTIL_COLUMN);
        } else {
            println!("{header}");
        }
    }
    let mut out = Output {
        o,
        header,
        json: Vec::new(),
        failed: None,
    };
    // A long run (`-a`, `-D`) shows its sizes done on a terminal; a single short one does not.
    let long = sizes.len() > 1 || duration.is_some();
    let bar = Progress::with_terminal(
        sizes.len() as u64,
        "sizes",
        long && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let mut row = |r: Row| {
        out.row(r);
        bar.inc(1);
    };
    if o.common.device.is_network() {
        let test = format!(
            "{}-{}",
            verb.tool(),
            if kind == Kind::Lat { "lat" } else { "bw" }
        );
        let r = match kind {
            Kind::Lat => remote::run_lat(&o.common, &o.net, &test, &lat, &sizes, &mut row),
            Kind::Bw => remote::run_bw(&o.common, &o.net, &test, &bw, &sizes, &mut row),
        };
        r?;
    } else {
        for &size in &sizes {
            match kind {
                Kind::Lat => row(Row::Lat(measure_lat(&LatSpec {
                    size,
                    ..lat.clone()
                })?)),
                Kind::Bw => row(Row::Bw(measure_bw(&BwSpec { size, ..bw.clone() })?)),
            }
        }
    }
    bar.finish();
    println!("{RESULT_LINE}");
    let test = format!(
        "{}_{}_Test",
        verb.title(),
        if kind == Kind::Lat { "Latency" } else { "BW" }
    );
    out.finish(&test, &info)
}

/// `--use-cuda` where it does not apply, refused with perftest's reason or the fix.
fn check_cuda(verb: Verb, kind: Kind, o: &ToolOpts, sizes: &[u64]) -> Result<(), PerfError> {
    let Some(gpu) = o.use_cuda else {
        return Ok(());
    };
    let usage = |s: String| Err(PerfError::Usage(s));
    if kind == Kind::Lat {
        return usage(format!(
            "--use-cuda={gpu}: perftest supports CUDA latency tests with read/send verbs only, and this tool has CUDA for write-bw alone: use write-bw --use-cuda={gpu}"
        ));
    }
    if verb != Verb::Write {
        return usage(format!(
            "--use-cuda={gpu}: GPU memory is built for write-bw here: use write-bw --use-cuda={gpu}"
        ));
    }
    if o.bidirectional {
        return usage(format!("--use-cuda={gpu} with -b: run one direction"));
    }
    if let Some(i) = o.inline
        && sizes.iter().any(|&s| s <= u64::from(i))
    {
        return usage(format!(
            "--use-cuda={gpu} with -I {i}: perftest doesn't support CUDA tests with inline messages; leave -I out (it is 0 with --use-cuda) or give -s above {i}"
        ));
    }
    Ok(())
}

/// Options that do not apply to this tool, refused with the fix.
fn check_options(verb: Verb, kind: Kind, o: &ToolOpts) -> Result<(), PerfError> {
    let usage = |s: String| Err(PerfError::Usage(s));
    verb.check_conn(o.conn).map_err(PerfError::Usage)?;
    if kind == Kind::Lat {
        if o.qps > 1 {
            return usage(format!(
                "-q {}: the latency tools run one QP (one operation in flight); use {}-bw for several QPs",
                o.qps,
                verb.tool()
            ));
        }
        if o.bidirectional {
            return usage(format!(
                "-b: a latency test is a ping-pong already; use {}-bw -b",
                verb.tool()
            ));
        }
        if o.tx_depth.is_some() {
            return usage(format!(
                "-t: a latency test keeps one operation in flight; use {}-bw -t",
                verb.tool()
            ));
        }
        if o.duration.is_some() && o.common.device.is_network() {
            return usage(
                "-D with -d udp:…: the two-process latency tests run a number of iterations; use -n".into(),
            );
        }
    }
    if o.atomic != AtomicOp::FetchAndAdd && !matches!(verb, Verb::Atomic(_)) {
        return usage(format!(
            "-A applies to the atomic tools, not {}; use atomic-lat or atomic-bw",
            verb.title()
        ));
    }
    if o.common.size.is_some_and(|s| s != 8) && matches!(verb, Verb::Atomic(_)) {
        return usage("-s: atomics are 8 bytes; leave -s out (or give -s 8)".into());
    }
    Ok(())
}

/// The file `--out_json` writes without `--out_json_file` (perftest's default).
const DEFAULT_JSON_FILE: &str = "perftest_out.json";

/// The header's key/value lines (also the JSON `test_info`).
fn test_info(verb: Verb, kind: Kind, o: &ToolOpts, bw: &BwSpec) -> Vec<(String, String)> {
    let device = if o.common.device.is_network() {
        remote::describe(&o.common, &o.net)
    } else {
        format!(
            "{} (two simulated NICs, threaded fabric, seed {})",
            o.common.device, o.common.seed
        )
    };
    let mut v: Vec<(&str, String)> = vec![
        ("Dual-port", "OFF".into()),
        ("Device", device),
        ("Number of qps", o.qps.to_string()),
        ("Transport type", "IB".into()),
        ("Connection type", format!("{:?}", o.conn).to_uppercase()),
        ("Using SRQ", "OFF".into()),
    ];
    match kind {
        Kind::Lat => v.push(("TX depth", "1".into())),
        Kind::Bw => {
            v.push(("TX depth", bw.tx_depth.to_string()));
            v.push(("CQ Moderation", o.cq_mod.to_string()));
        }
    }
    v.push((
        "Mtu",
        o.mtu
            .map_or_else(|| "the port's active MTU".into(), |m| format!("{m}[B]")),
    ));
    v.push((
        "Link type",
        if o.common.device.is_network() {
            "Ethernet (RoCEv2 over UDP)".into()
        } else {
            "Ethernet (RoCEv2, in-process)".into()
        },
    ));
    let inline = match (o.inline, o.use_cuda) {
        (Some(i), _) => i,
        (None, Some(_)) => 0,
        (None, None) => verb.default_inline(o.conn),
    };
    v.push(("Max inline data", format!("{inline}[B]")));
    if let Some(gpu) = o.use_cuda {
        v.push(("Use CUDA", format!("GPU {gpu} (dma-buf MRs)")));
    }
    if let Verb::Atomic(op) = verb {
        v.push((
            "Atomic type",
            match op {
                AtomicOp::FetchAndAdd => "FETCH_AND_ADD".into(),
                AtomicOp::CmpAndSwap => "CMP_AND_SWAP".into(),
            },
        ));
    }
    if o.bidirectional {
        v.push(("Bidirectional", "ON".into()));
    }
    if o.events {
        v.push(("Using Events", "ON (sleeps on a completion channel)".into()));
    }
    if let Some(d) = o.duration {
        v.push(("Duration", format!("{d}[s]")));
    }
    let exchange = if !o.common.device.is_network() {
        "Ethernet (JSON over TCP)"
    } else if o.net.auth.plaintext {
        "Ethernet (JSON over TCP, plaintext)"
    } else {
        "Ethernet (JSON over TCP, Noise PSK: authenticated, encrypted)"
    };
    v.push(("Data ex. method", exchange.into()));
    v.into_iter().map(|(k, s)| (k.to_owned(), s)).collect()
}

fn print_info(verb: Verb, kind: Kind, info: &[(String, String)]) {
    println!("{RESULT_LINE}");
    let what = if kind == Kind::Lat { "Latency" } else { "BW" };
    println!("                    {} {what} Test", verb.title());
    let mut it = info.iter().peekable();
    // perftest pairs its first six keys on three lines.
    for _ in 0..3 {
        if let (Some((k1, v1)), Some((k2, v2))) = (it.next(), it.next()) {
            println!(" {k1:<15} : {v1}\t\t{k2:<14} : {v2}");
        }
    }
    for (k, v) in it {
        println!(" {k:<15} : {v}");
    }
    println!("{RESULT_LINE}");
}

/// The rows printed so far and what goes after the table.
struct Output<'a> {
    o: &'a ToolOpts,
    header: &'static str,
    json: Vec<serde_json::Value>,
    failed: Option<PerfError>,
}

impl Output<'_> {
    fn row(&mut self, r: Row) {
        let cpu = self.o.cpu_util;
        let cell = |row: String, util: Option<f64>| {
            if cpu {
                with_cpu_util(self.header, &row, util)
            } else {
                row
            }
        };
        let json_cpu = |u: Option<f64>| cpu.then_some(u);
        let counters: Option<Vec<Labelled>> = match r {
            Row::Lat(l) => {
                match &l.report {
                    Some(rep) => {
                        println!("{}", cell(rep.to_string(), l.cpu_util));
                        self.json
                            .push(super::json::lat_result(rep, json_cpu(l.cpu_util)));
                    }
                    None => {
                        let row = lat_duration_row(l.size, l.iterations, l.t_avg_us, l.tps);
                        println!("{}", cell(row, l.cpu_util));
                        self.json.push(super::json::lat_duration_result(
                            l.size,
                            l.iterations,
                            l.t_avg_us,
                            l.tps,
                            json_cpu(l.cpu_util),
                        ));
                    }
                }
                Some(l.counters)
            }
            Row::Bw(b) => {
                println!("{}", cell(b.report.to_string(), b.cpu_util));
                self.json
                    .push(super::json::bw_result(&b.report, json_cpu(b.cpu_util)));
                Some(b.counters)
            }
            Row::Server { line, counters } => {
                println!("{line}");
                Some(counters)
            }
            Row::Failed(e) => {
                self.failed.get_or_insert(e);
                None
            }
        };
        if let (true, Some(c)) = (self.o.report_counters, counters) {
            let mut stdout = std::io::stdout().lock();
            let _ = print_counters(&mut stdout, &c, true);
        }
    }

    fn finish(self, test: &str, info: &[(String, String)]) -> Result<(), PerfError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if !(self.o.out_json || self.o.out_json_file.is_some()) || self.json.is_empty() {
            return Ok(());
        }
        let doc = super::json::document(test, info, self.json);
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        // perftest's default file: perftest_out.json in the working directory.
        let path = self
            .o
            .out_json_file
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_JSON_FILE));
        std::fs::File::create(&path)
            .and_then(|mut f| writeln!(f, "{text}"))
            .map_err(|e| {
                PerfError::Usage(format!(
                    "--out_json_file {}: cannot write it ({e}); give a path in a writable directory",
                    path.display()
                ))
            })
    }
}
