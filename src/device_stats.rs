//! `bypass stats`: a device's counters per port and per QP under the `rdma statistic` names,
//! after an optional small workload so the in-process view is not all zeros.
//!
//! Owns: that command's options, its workload (N 1-byte RC SENDs between two sim NICs, one
//! at a time) and the errors for devices whose counters it cannot read. Must not format
//! counters itself (`crate::stats_view` does) nor touch the device except through the
//! verbs API. Sources: iproute2 `rdma statistic show` / `rdma statistic qp show` (the line
//! form), the kernel's mlx5 `counters.c` (the names).

use std::sync::Arc;
use std::time::Duration;

use bypass_testbed::{SimContext, SimFabric};
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Context, Cq, QpBuilder, VerbsError};
use clap::Args;

use crate::args::DeviceSpec;
use crate::stats_view::{DeviceCounters, counters_json, print_counters, sim_counters};

/// The largest `--workload` (one SEND at a time: bounded memory, a few seconds in debug).
pub const MAX_WORKLOAD: u32 = 100_000;

/// Options of `bypass stats`.
#[derive(Args, Debug)]
pub struct StatsOpts {
    /// The device: `sim` (two simulated NICs on one in-process fabric, both shown).
    #[arg(short = 'd', long, default_value = "sim")]
    pub device: DeviceSpec,
    /// First send this many 1-byte RC SENDs from the first NIC to the second.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=MAX_WORKLOAD as i64))]
    pub workload: u32,
    /// Print JSON (an array of devices, each with its port counters and its QPs').
    #[arg(long)]
    pub json: bool,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long to wait for each completion of the workload, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
}

/// Why `bypass stats` could not show counters.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// A real NIC keeps its counters in firmware Q counters, which this build cannot read.
    #[error(
        "reading a real NIC's counters is not implemented yet: mlx5 keeps them in firmware Q counters (ALLOC_Q_COUNTER / QUERY_Q_COUNTER), and this driver issues neither command; -d {device} cannot be shown (use -d sim, or the kernel's `rdma statistic show` on a NIC bound to mlx5_core)"
    )]
    QCounterNotImplemented {
        /// The device given.
        device: String,
    },
    /// A UDP NIC's counters live in the process that drives it.
    #[error(
        "-d {device} is a simulated NIC on a UDP socket whose counters live only in the process that drives it; `bypass stats` shows in-process devices: use -d sim (with --workload N for traffic)"
    )]
    NotInProcess {
        /// The device given.
        device: String,
    },
    /// The workload's set-up or traffic failed.
    #[error("the workload failed while {step}: {source}")]
    Workload {
        /// What it was doing.
        step: &'static str,
        /// The verbs error.
        #[source]
        source: VerbsError,
    },
    /// A completion did not come, or came with an error.
    #[error("the workload's SEND {n} of {total}: {why}")]
    Completion {
        /// Which SEND (1-based).
        n: u32,
        /// How many were asked for.
        total: u32,
        /// What went wrong.
        why: String,
    },
    /// The counters could not be read from the sim device.
    #[error("the counters of {device} could not be read (its sim device is gone)")]
    Unreadable {
        /// The device.
        device: String,
    },
    /// Writing the output failed.
    #[error("writing the counters: {0}")]
    Output(#[from] std::io::Error),
}

fn step(step: &'static str) -> impl FnOnce(VerbsError) -> StatsError {
    move |source| StatsError::Workload { step, source }
}

/// Runs `bypass stats`.
pub fn run(opts: &StatsOpts) -> Result<(), StatsError> {
    match &opts.device {
        DeviceSpec::Vfio(_) => {
            return Err(StatsError::QCounterNotImplemented {
                device: opts.device.to_string(),
            });
        }
        DeviceSpec::Udp(_) => {
            return Err(StatsError::NotInProcess {
                device: opts.device.to_string(),
            });
        }
        DeviceSpec::Sim => {}
    }
    let fabric = SimFabric::stepped(opts.seed);
    let a = Context::open_sim(&fabric, 1).map_err(step("opening the first sim NIC"))?;
    let b = Context::open_sim(&fabric, 2).map_err(step("opening the second sim NIC"))?;
    let devs = workload(&a, &b, opts)?;
    let mut out = std::io::stdout().lock();
    if opts.json {
        use std::io::Write;
        writeln!(out, "{}", counters_json(&devs))?;
    } else {
        print_counters(&mut out, &devs)?;
    }
    Ok(())
}

/// Sends `opts.workload` 1-byte SENDs from `a` to `b` over one RC QP pair, then snapshots
/// both devices' counters while the QPs still exist (so their per-QP lines show).
fn workload(
    a: &Arc<Context>,
    b: &Arc<Context>,
    opts: &StatsOpts,
) -> Result<Vec<DeviceCounters>, StatsError> {
    let timeout = Duration::from_millis(opts.timeout_ms);
    let (pa, pb) = (
        a.alloc_pd().map_err(step("allocating a PD"))?,
        b.alloc_pd().map_err(step("allocating a PD"))?,
    );
    let (mut cqa, mut cqb) = (
        Cq::new(a, 16).map_err(step("creating a CQ"))?,
        Cq::new(b, 16).map_err(step("creating a CQ"))?,
    );
    let (poola, poolb) = (
        pa.create_pool(64, 2)
            .map_err(step("creating a buffer pool"))?,
        pb.create_pool(64, 2)
            .map_err(step("creating a buffer pool"))?,
    );
    let build = |pd, cq| {
        QpBuilder::rc(pd, cq, cq)
            .max_send_wr(2)
            .max_recv_wr(2)
            .build()
    };
    let mut qa = build(&pa, &cqa).map_err(step("creating an RC QP"))?;
    let mut qb = build(&pb, &cqb).map_err(step("creating an RC QP"))?;
    let (ea, eb) = (
        qa.endpoint().map_err(step("reading an endpoint"))?,
        qb.endpoint().map_err(step("reading an endpoint"))?,
    );
    qa.connect(&eb).map_err(step("connecting the QPs"))?;
    qb.connect(&ea).map_err(step("connecting the QPs"))?;
    let total = opts.workload;
    for n in 1..=total {
        let fail = |why: String| StatsError::Completion { n, total, why };
        let recv = poolb.lease(1).map_err(step("leasing a receive buffer"))?;
        qb.post_recv(RecvWr::new(u64::from(n), recv))
            .map_err(step("posting a receive"))?;
        let mut send = poola.lease(1).map_err(step("leasing a send buffer"))?;
        send.as_mut_slice().fill(n as u8);
        qa.post_send(SendWr::new(u64::from(n), SendOp::Send).sge(send))
            .map_err(step("posting a SEND"))?;
        for (side, cq, qp) in [("send", &mut cqa, &mut qa), ("receive", &mut cqb, &mut qb)] {
            match cq.wait(timeout) {
                Ok(Some(c)) if c.is_ok() => {
                    qp.reclaim(c).map_err(step("reclaiming a buffer"))?;
                }
                Ok(Some(c)) => {
                    return Err(fail(format!("its {side} completed with {}", c.status())));
                }
                Ok(None) => {
                    return Err(fail(format!(
                        "no {side} completion within {} ms (raise --timeout-ms on a slow machine)",
                        timeout.as_millis()
                    )));
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        }
    }
    [a, b]
        .iter()
        .map(|ctx| {
            sim_counters(ctx).ok_or_else(|| StatsError::Unreadable {
                device: ctx.device_info().name,
            })
        })
        .collect()
}
