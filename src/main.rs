//! `bypass`: the command-line tool of the bypass RDMA stack.
//!
//! Owns: the command line (clap) and the dispatch to one module per command. Must not hold
//! measurement or device logic itself: `explain`, `perf`, `stats` and `baseline` do.

mod alloc_count;
mod args;
mod baseline;
mod chart;
mod cong_cmd;
mod counters_view;
mod device;
mod device_stats;
mod devinfo;
mod exchange_key;
mod explain;
mod gpu_check;
mod gpu_cmd;
mod perf;
mod ping;
mod ping_probe;
mod pingpong;
mod progress;
mod ramp;
mod resolve;
mod sim;
mod stats;
mod stats_view;
mod topo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::args::parse_u8;
use crate::explain::CodeKind;

/// Counts heap bytes for `perf qp-scale` (one relaxed add per allocation).
#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// A kernel-bypass RDMA stack for mlx5 NICs.
#[derive(Parser)]
#[command(name = "bypass", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Name a status or syndrome and say what usually causes it and how to fix it.
    Explain {
        /// Which kind of code VALUE is.
        kind: CodeKind,
        /// The code: decimal, or hex with 0x.
        #[arg(value_parser = parse_u8)]
        value: u8,
    },
    /// Show a device like ibv_devinfo: firmware, capabilities, ports, MTU, GIDs.
    Devinfo(devinfo::DevinfoOpts),
    /// Connect two RC endpoints step by step and exchange a 1-byte SEND.
    Ping(ping::PingOpts),
    /// ibv_rc_pingpong over a simulated NIC on a UDP socket (interoperable with the real
    /// tool on a Linux rxe peer): server without HOST, client with it.
    Pingpong(pingpong::PingpongOpts),
    /// Make a pre-shared key file for the authenticated out-of-band exchange of the
    /// two-process commands (copy it to the peer's host).
    ExchangeKey(exchange_key::ExchangeKeyOpts),
    /// Benchmarks in the style of perftest, and the baselines they are judged against.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
    /// A device's counters per port and per QP, named as `rdma statistic` shows them
    /// (sim devices; --workload N first sends N 1-byte SENDs between two sim NICs).
    Stats(device_stats::StatsOpts),
    /// PCIe/NUMA placement of NICs and GPUs, like `nvidia-smi topo -m`, with GPUDirect checks.
    Topo(topo::TopoOpts),
    /// Congestion control (RoCE ECN / DCQCN): status per priority, parameters, counters.
    #[command(subcommand)]
    Cong(cong_cmd::CongCommand),
    /// CUDA devices (`info`) and RDMA to and from GPU memory over two sim NICs (`check`).
    #[command(subcommand)]
    Gpu(gpu_cmd::GpuCommand),
    /// Experiments on simulated networks: `incast` (congestion: lossy, PFC, PFC + DCQCN) and
    /// `soak` (load, faults and object churn over time, with leak checks).
    #[command(subcommand)]
    Sim(sim::SimCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Explain { kind, value } => {
            println!("{}", explain::explain(kind, value));
            Ok(())
        }
        Command::Devinfo(opts) => devinfo::run(&opts).map_err(Into::into),
        Command::Ping(opts) => ping::run(&opts),
        Command::Pingpong(opts) => pingpong::run(&opts).map_err(Into::into),
        Command::ExchangeKey(opts) => exchange_key::run(&opts).map_err(Into::into),
        Command::Perf(cmd) => perf::run(cmd).map_err(Into::into),
        Command::Stats(opts) => device_stats::run(&opts).map_err(Into::into),
        Command::Topo(opts) => topo::run(&opts).map_err(Into::into),
        Command::Cong(cmd) => cong_cmd::run(&cmd).map_err(Into::into),
        Command::Gpu(cmd) => return gpu_cmd::main(&cmd),
        Command::Sim(cmd) => sim::run(&cmd).map_err(Into::into),
    };
    let result: Result<(), Box<dyn std::error::Error>> = result;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bypass: {e}");
            ExitCode::FAILURE
        }
    }
}
