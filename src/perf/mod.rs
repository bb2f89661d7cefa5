//! `bypass perf`: perftest-style benchmarks on simulated NICs and the baselines they are
//! reported against.
//!
//! Owns: the `perf` subcommands' options, their output framing (perftest's header and
//! tables) and their dispatch. Must not compute statistics (`crate::stats`), measure
//! baselines (`crate::baseline`) or touch the device outside `pair`, `lat` and `bw`.

mod baselines;
mod bw;
mod compare;
mod lat;
mod msg_rate;
mod pair;
mod qp_scale;
mod remote;
mod udp_compare;

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::args::{DeviceSpec, parse_size};
use crate::device::DeviceError;
use crate::stats::{BwUnits, LAT_HEADER, RESULT_LINE};

/// The largest message of an `-a` sweep: 2^23 bytes (perftest `MAX_SIZE`).
pub const MAX_SIZE: u64 = 1 << 23;

/// The `perf` subcommands.
#[derive(Subcommand)]
pub enum PerfCommand {
    /// RDMA WRITE ping-pong latency (like ib_write_lat): two simulated NICs in this process,
    /// or, with -d udp:ADDR, one side of a two-process run (server without HOST).
    WriteLat(LatOpts),
    /// RDMA WRITE streaming bandwidth (like ib_write_bw): two simulated NICs in this process,
    /// or, with -d udp:ADDR, one side of a two-process run (server without HOST).
    WriteBw(BwOpts),
    /// The sim against its baselines in one run: WRITE bandwidth vs memcpy, WRITE ping-pong
    /// round trip vs a TCP loopback busy-poll round trip; medians and ratios.
    Compare(compare::CompareOpts),
    /// The UDP link against plain sockets in one run: 8-byte WRITE round trip vs a UDP
    /// busy-poll ping-pong between the same two addresses, 1 MiB WRITE bandwidth vs TCP
    /// loopback streaming; medians and ratios.
    CompareUdp(udp_compare::UdpCompareOpts),
    /// Measure the baselines alone: memcpy bandwidth and a TCP loopback busy-poll ping-pong.
    Baselines(baselines::BaselineOpts),
    /// Creation time per QP and host memory per idle RC QP at 1k, 4k, 16k and 64k QPs on one
    /// simulated NIC.
    QpScale(qp_scale::QpScaleOpts),
    /// 8-byte RDMA WRITE message rate (64 WRITEs per doorbell, two simulated NICs) vs
    /// 8-byte UDP datagrams on loopback (sendmmsg/recvmmsg); medians, ranges and the ratio.
    MsgRate(msg_rate::MsgRateOpts),
    /// Simulated packets per second of wall time: stepped fabric (one core) vs threaded
    /// fabric (engine thread), same RC WRITE workload; medians, ranges and the ratio.
    SimSpeed(msg_rate::SimSpeedOpts),
}

/// Options every sim benchmark takes (perftest's names).
#[derive(Args, Debug)]
pub struct CommonOpts {
    /// The device: `sim` (two simulated NICs on one fabric run by an engine thread), or
    /// `udp:ADDR[:PORT]` (one simulated NIC on a UDP socket; the peer is another process).
    #[arg(short = 'd', long, default_value = "sim")]
    pub device: DeviceSpec,
    /// Message size in bytes (K/M suffixes allowed).
    #[arg(short = 's', long, value_parser = parse_size, conflicts_with = "all")]
    pub size: Option<u64>,
    /// Run every size from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Options of `bypass perf write-lat`.
#[derive(Args, Debug)]
pub struct LatOpts {
    #[command(flatten)]
    common: CommonOpts,
    #[command(flatten)]
    net: remote::NetOpts,
    /// Iterations (round trips) per size; at least 5.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(5..))]
    iters: u64,
}

/// Options of `bypass perf write-bw`.
#[derive(Args, Debug)]
pub struct BwOpts {
    #[command(flatten)]
    common: CommonOpts,
    #[command(flatten)]
    net: remote::NetOpts,
    /// Messages per size; at least 5.
    #[arg(short = 'n', long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(5..))]
    iters: u64,
    /// WRITEs kept outstanding (capped so that depth × size stays within 64 MiB).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    tx_depth: u32,
    /// Ask for a completion every N WRITEs (and for the last).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    cq_mod: u32,
    /// Report Gb/s instead of MiB/s.
    #[arg(long = "report-gbits", alias = "report_gbits")]
    report_gbits: bool,
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
    /// The device could not be opened.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A verbs call failed (its text names the object, the cause and the fix).
    #[error(transparent)]
    Verbs(#[from] bypass_verbs::VerbsError),
    /// A WRITE completed with an error status.
    #[error("WRITE wr_id {wr_id} completed with {status}")]
    Completion {
        /// The work request.
        wr_id: u64,
        /// The status with its name, cause and fix.
        status: String,
    },
    /// The rig made no progress.
    #[error(
        "benchmark stalled: waited {after:?} for {what}; {seen} (the sim engine thread is starved, or the QP left RTS: run `bypass ping` to check the connection)"
    )]
    Stalled {
        /// What was awaited.
        what: &'static str,
        /// How long.
        after: Duration,
        /// What the rig looked like then: QP state, work outstanding, packets in flight.
        seen: String,
    },
    /// The out-of-band exchange of a two-process run failed.
    #[error("two-process run: {0}")]
    Oob(String),
    /// The two sides of a two-process run were started with different options.
    #[error("two-process run: {0}")]
    Mismatch(String),
    /// The server's buffer did not hold the client's last WRITE.
    #[error(
        "data check failed at {size} bytes: byte {offset} is {got:#04x}, the last WRITE carried {expected:#04x} (data was lost, reordered or corrupted on the way)"
    )]
    DataCheck {
        /// The message size.
        size: u64,
        /// The first bad byte.
        offset: usize,
        /// What the buffer holds.
        got: u8,
        /// What the last WRITE carried.
        expected: u8,
    },
    /// A HOST was given for the in-process device.
    #[error("{0}")]
    Usage(String),
    /// A size or count does not fit this machine's address space.
    #[error("{size} is too large for this machine (sizes up to 8 MiB are supported)")]
    TooLarge {
        /// The value.
        size: u64,
    },
}

/// Runs one `perf` subcommand, printing its tables on stdout.
pub fn run(cmd: PerfCommand) -> Result<(), PerfError> {
    match cmd {
        PerfCommand::WriteLat(o) => run_lat(&o),
        PerfCommand::WriteBw(o) => run_bw(&o),
        PerfCommand::Compare(o) => compare::run(&o),
        PerfCommand::CompareUdp(o) => udp_compare::run(&o),
        PerfCommand::Baselines(o) => baselines::run(&o),
        PerfCommand::QpScale(o) => qp_scale::run(&o),
        PerfCommand::MsgRate(o) => msg_rate::run_msg_rate(&o),
        PerfCommand::SimSpeed(o) => msg_rate::run_sim_speed(&o),
    }
}

/// The sizes a run covers: `-a` → 2, 4, … 8 MiB; else `-s` or the default.
fn sizes(c: &CommonOpts, default: u64) -> Vec<u64> {
    if c.all {
        (1..=23).map(|k| 1u64 << k).collect()
    } else {
        vec![c.size.unwrap_or(default)]
    }
}

fn check_sizes(sizes: &[u64]) -> Result<(), PerfError> {
    match sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        Some(&size) => Err(PerfError::TooLarge { size }),
        None => Ok(()),
    }
}

fn print_test_info(title: &str, c: &CommonOpts, net: &remote::NetOpts, lines: &[(&str, String)]) {
    println!("{RESULT_LINE}");
    println!("                    {title}");
    if c.device.is_network() {
        println!(" Device          : {}", remote::describe(c, net));
    } else {
        println!(
            " Device          : {} (two simulated NICs, threaded fabric, seed {})",
            c.device, c.seed
        );
    }
    println!(" Number of qps   : 1\t\tTransport type : IB");
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    for (k, v) in lines {
        println!(" {k:<15} : {v}");
    }
    if c.device.is_network() {
        println!(" Link type       : Ethernet (RoCEv2 over UDP)");
    } else {
        println!(" Link type       : Ethernet (RoCEv2, in-process)");
    }
    println!("{RESULT_LINE}");
}

fn run_lat(o: &LatOpts) -> Result<(), PerfError> {
    // perftest DEF_SIZE_LAT = 2.
    let sizes = sizes(&o.common, 2);
    check_sizes(&sizes)?;
    check_host(&o.common, &o.net)?;
    print_test_info(
        "RDMA_Write Latency Test",
        &o.common,
        &o.net,
        &[
            ("TX depth", "1 (ping-pong)".into()),
            ("Max inline data", format!("{}[B]", pair::MAX_INLINE)),
        ],
    );
    println!("{LAT_HEADER}");
    if o.common.device.is_network() {
        remote::write_lat(&o.common, &o.net, &sizes, o.iters, |r| println!("{r}"))?;
        println!("{RESULT_LINE}");
        return Ok(());
    }
    for size in sizes {
        let r = lat::write_lat(o.common.seed, size, o.iters)?;
        println!("{r}");
    }
    println!("{RESULT_LINE}");
    Ok(())
}

fn run_bw(o: &BwOpts) -> Result<(), PerfError> {
    // perftest DEF_SIZE_BW = 65536.
    let sizes = sizes(&o.common, 65536);
    check_sizes(&sizes)?;
    check_host(&o.common, &o.net)?;
    let units = if o.report_gbits {
        BwUnits::GbitPerSec
    } else {
        BwUnits::MibPerSec
    };
    print_test_info(
        "RDMA_Write BW Test",
        &o.common,
        &o.net,
        &[
            ("TX depth", o.tx_depth.to_string()),
            ("CQ Moderation", o.cq_mod.to_string()),
            ("Max inline data", format!("{}[B]", pair::MAX_INLINE)),
        ],
    );
    if o.common.device.is_network() {
        return run_bw_remote(o, &sizes, units);
    }
    println!("{}", units.header());
    for size in sizes {
        let r = bw::write_bw(o.common.seed, size, o.iters, o.tx_depth, o.cq_mod, units)?;
        println!("{r}");
    }
    println!("{RESULT_LINE}");
    Ok(())
}

/// A HOST only means something with a network device.
fn check_host(c: &CommonOpts, net: &remote::NetOpts) -> Result<(), PerfError> {
    match (&c.device, &net.host) {
        (DeviceSpec::Sim, Some(h)) => Err(PerfError::Usage(format!(
            "HOST {h} given with -d sim: the in-process form runs both NICs here; for a two-process run give both sides -d udp:ADDR (e.g. -d udp:127.0.0.2 here, -d udp:127.0.0.1 on the server)"
        ))),
        _ => Ok(()),
    }
}

/// The two-process write-bw: the client prints the table, the server its data checks.
fn run_bw_remote(o: &BwOpts, sizes: &[u64], units: BwUnits) -> Result<(), PerfError> {
    let client = o.net.host.is_some();
    if client {
        println!("{}", units.header());
    }
    let mut failed = None;
    remote::write_bw(
        &o.common,
        &o.net,
        sizes,
        o.iters,
        o.tx_depth,
        o.cq_mod,
        units,
        |row| match row {
            remote::BwRow::Report(r) => println!("{r}"),
            remote::BwRow::Checked { size, result } => match result {
                None => println!(" {size} bytes: {} WRITEs received (no --check)", o.iters),
                Some(Ok(())) => println!(
                    " {size} bytes: data check ok (the buffer holds WRITE {} of {} exactly)",
                    o.iters, o.iters
                ),
                Some(Err((offset, got, expected))) => {
                    println!(" {size} bytes: data check FAILED at byte {offset}");
                    failed.get_or_insert(PerfError::DataCheck {
                        size,
                        offset,
                        got,
                        expected,
                    });
                }
            },
        },
    )?;
    println!("{RESULT_LINE}");
    failed.map_or(Ok(()), Err)
}
