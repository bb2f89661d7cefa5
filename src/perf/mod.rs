//! `bypass perf`: perftest-style benchmarks on simulated NICs and the baselines they are
//! reported against.
//!
//! Owns: the `perf` subcommands' options, their output framing (perftest's header and
//! tables) and their dispatch. Must not compute statistics (`crate::stats`), measure
//! baselines (`crate::baseline`) or touch the device outside `pair`, `lat` and `bw`.

mod baselines;
pub mod bw;
mod compare;
mod cpu;
#[cfg(test)]
mod engine_tests;
pub mod flows;
mod gpu_mem;
mod json;
mod knee;
pub mod lat;
mod local;
mod msg_rate;
pub mod ops;
mod pair;
mod pin;
mod qp_scale;
mod reg_cost;
mod reg_sources;
mod remote;
mod sweep;
mod sweep_out;
mod sweep_plan;
mod tools;
mod udp_compare;

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::args::{DeviceSpec, parse_size};
use crate::device::DeviceError;

/// The largest message of an `-a` sweep: 2^23 bytes (perftest `MAX_SIZE`).
pub const MAX_SIZE: u64 = 1 << 23;

/// The most iterations per size (`-n`): every timestamp is kept for the percentiles (8 bytes
/// per operation, 16 for the bandwidth tools' post and completion times), so the bound keeps
/// a run's samples within 160 MiB; longer runs take `-D SECS`, which keeps none.
pub const MAX_ITERS: u64 = 10_000_000;

/// The `perf` subcommands.
#[derive(Subcommand)]
pub enum PerfCommand {
    /// SEND ping-pong latency (like ib_send_lat): two simulated NICs in this process, or,
    /// with -d udp:ADDR, one side of a two-process run (server without HOST).
    SendLat(tools::ToolOpts),
    /// SEND streaming bandwidth (like ib_send_bw), in process or across two (-d udp:ADDR).
    SendBw(tools::ToolOpts),
    /// RDMA WRITE ping-pong latency (like ib_write_lat), in process or across two.
    WriteLat(tools::ToolOpts),
    /// RDMA WRITE streaming bandwidth (like ib_write_bw), in process or across two.
    WriteBw(tools::ToolOpts),
    /// RDMA READ latency (like ib_read_lat), in process or across two.
    ReadLat(tools::ToolOpts),
    /// RDMA READ streaming bandwidth (like ib_read_bw), in process or across two.
    ReadBw(tools::ToolOpts),
    /// Atomic latency, FETCH_AND_ADD or CMP_AND_SWAP (-A) (like ib_atomic_lat).
    AtomicLat(tools::ToolOpts),
    /// Atomic streaming bandwidth, FETCH_AND_ADD or CMP_AND_SWAP (-A) (like ib_atomic_bw).
    AtomicBw(tools::ToolOpts),
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
    /// The tuning sweep: WRITE bandwidth over queue depth, message size and QP count
    /// (spinning and blocking on events); a table, sweep.csv and one SVG chart per knob
    /// with the knee marked, under --out.
    Sweep(sweep::SweepOpts),
    /// 8-byte RDMA WRITE message rate (64 WRITEs per doorbell, two simulated NICs) vs
    /// 8-byte UDP datagrams on loopback (sendmmsg/recvmmsg); medians, ranges and the ratio.
    MsgRate(msg_rate::MsgRateOpts),
    /// Registration cost: register and deregister host memory (an application Vec and
    /// driver-allocated memory) at 4 KiB to 1 GiB, medians and ranges over rounds, and the
    /// pool's 4 KiB lease + drop in ns.
    RegCost(reg_cost::RegCostOpts),
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
    /// HOST does not resolve.
    #[error(transparent)]
    Resolve(#[from] crate::resolve::ResolveError),
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
    /// Fewer SENDs arrived over RC than the sender completed.
    #[error(
        "{size} bytes: the peer completed {sent} SENDs over RC but {arrived} arrived here (a receive was consumed twice or a SEND acknowledged without landing: a transport bug; rerun with --pcap to see the packets)"
    )]
    Lost {
        /// The message size.
        size: u64,
        /// SENDs the peer completed.
        sent: u64,
        /// Receives completed here.
        arrived: u64,
    },
    /// An atomic word did not count every operation on it.
    #[error(
        "atomic check failed on QP {qp}: its word holds {got}, {expected} operations ran on it (an atomic was lost, repeated or not atomic)"
    )]
    AtomicCheck {
        /// The QP whose word it is.
        qp: usize,
        /// The word's value.
        got: u64,
        /// The operations that completed.
        expected: u64,
    },
    /// A HOST was given for the in-process device.
    #[error("{0}")]
    Usage(String),
    /// `--use-cuda`: the GPU, or its memory's registration.
    #[error("--use-cuda: {0}")]
    Gpu(#[from] bypass_gpu::GpuMrError),
    /// A tuning sweep failed (the text names the point or file).
    #[error(transparent)]
    Sweep(#[from] sweep::SweepError),
    /// A completion (or a post) named a QP the side does not have: its wr_id is not one the
    /// engine wrote, and its buffers could not be reclaimed.
    #[error(
        "wr_id {wr_id:#x} names QP {qp} of a side with {qps}: not a work request this run posted"
    )]
    NoSuchQp {
        /// The work request.
        wr_id: u64,
        /// The QP index it names.
        qp: usize,
        /// The QPs the side has.
        qps: usize,
    },
    /// `perf reg-cost` cannot run as asked.
    #[error(transparent)]
    RegCost(#[from] reg_cost::RegCostError),
    /// `--cpu` could not pin the benchmark.
    #[error(transparent)]
    Pin(#[from] pin::PinError),
    /// A size or count does not fit this machine's address space.
    #[error("{size} is too large for this machine (sizes up to 8 MiB are supported)")]
    TooLarge {
        /// The value.
        size: u64,
    },
    /// A message size outside 1 byte to [`MAX_SIZE`].
    #[error(
        "{option} {size}: a message is 1 byte to 8 MiB (8388608 bytes, perftest's MAX_SIZE): give {option} in that range"
    )]
    SizeOutOfRange {
        /// The option that gave it (`-s`, `--lat-size`, ...).
        option: &'static str,
        /// The size given.
        size: u64,
    },
    /// More iterations than the sample buffers are sized for.
    #[error(
        "-n {iters}: at most {MAX_ITERS} iterations per size (every timestamp is kept for the percentiles); give a smaller -n, or -D SECS for a longer run"
    )]
    TooManyIters {
        /// The iterations given.
        iters: u64,
    },
    /// The peer's target buffer is smaller than this side's messages need.
    #[error(
        "the peer's buffer holds {have} bytes, but QP {qp} writes {size}-byte messages at offset {offset}: the two sides were started with different -s or -q; give both the same"
    )]
    PeerBufferTooSmall {
        /// The QP whose slice it is.
        qp: usize,
        /// This side's message size.
        size: u64,
        /// Where that QP's slice starts.
        offset: u64,
        /// The bytes the peer advertised.
        have: u64,
    },
}

/// Runs one `perf` subcommand, printing its tables on stdout.
pub fn run(cmd: PerfCommand) -> Result<(), PerfError> {
    use ops::{AtomicOp, Verb};
    use tools::Kind::{Bw, Lat};
    let atomic = Verb::Atomic(AtomicOp::FetchAndAdd);
    match cmd {
        PerfCommand::SendLat(o) => tools::run(Verb::Send, Lat, &o),
        PerfCommand::SendBw(o) => tools::run(Verb::Send, Bw, &o),
        PerfCommand::WriteLat(o) => tools::run(Verb::Write, Lat, &o),
        PerfCommand::WriteBw(o) => tools::run(Verb::Write, Bw, &o),
        PerfCommand::ReadLat(o) => tools::run(Verb::Read, Lat, &o),
        PerfCommand::ReadBw(o) => tools::run(Verb::Read, Bw, &o),
        PerfCommand::AtomicLat(o) => tools::run(atomic, Lat, &o),
        PerfCommand::AtomicBw(o) => tools::run(atomic, Bw, &o),
        PerfCommand::Compare(o) => compare::run(&o),
        PerfCommand::CompareUdp(o) => udp_compare::run(&o),
        PerfCommand::Sweep(o) => Ok(sweep::run(&o)?),
        PerfCommand::Baselines(o) => baselines::run(&o),
        PerfCommand::QpScale(o) => qp_scale::run(&o),
        PerfCommand::MsgRate(o) => msg_rate::run_msg_rate(&o),
        PerfCommand::SimSpeed(o) => msg_rate::run_sim_speed(&o),
        PerfCommand::RegCost(o) => reg_cost::run(&o),
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
    sizes.iter().try_for_each(|&s| check_size("-s", s))
}

/// A message size given by `option`, within 1 byte to [`MAX_SIZE`].
fn check_size(option: &'static str, size: u64) -> Result<(), PerfError> {
    if size == 0 || size > MAX_SIZE {
        return Err(PerfError::SizeOutOfRange { option, size });
    }
    Ok(())
}

/// `-n` within [`MAX_ITERS`] (what the sample buffers are sized by).
fn check_iters(iters: u64) -> Result<(), PerfError> {
    if iters > MAX_ITERS {
        return Err(PerfError::TooManyIters { iters });
    }
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

impl From<bypass_gpu::GpuError> for PerfError {
    fn from(e: bypass_gpu::GpuError) -> Self {
        Self::Gpu(e.into())
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn specs_refuse_iterations_beyond_the_sample_buffers_before_allocating() {
        let lat = lat::LatSpec {
            iters: u64::MAX,
            ..Default::default()
        };
        let e = lat.validate().unwrap_err();
        assert!(
            matches!(e, PerfError::TooManyIters { iters: u64::MAX }),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("-n 18446744073709551615: at most 10000000")
        );
        let bw = bw::BwSpec {
            iters: MAX_ITERS + 1,
            ..Default::default()
        };
        assert!(matches!(bw.validate(), Err(PerfError::TooManyIters { .. })));
        let bw = bw::BwSpec {
            iters: MAX_ITERS,
            ..Default::default()
        };
        assert!(bw.validate().is_ok());
    }

    #[test]
    fn sizes_out_of_range_name_the_range_not_the_machine() {
        for size in [0, MAX_SIZE + 1] {
            let e = check_sizes(&[size]).unwrap_err();
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("-s {size}: a message is 1 byte to 8 MiB")),
                "{text}"
            );
        }
        assert!(check_sizes(&[1, MAX_SIZE]).is_ok());
        let e = check_size("--lat-size", 0).unwrap_err();
        assert!(e.to_string().starts_with("--lat-size 0: "), "{e}");
    }
}
