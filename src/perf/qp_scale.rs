//! `bypass perf qp-scale`: what a QP costs as their number grows, on one simulated NIC:
//! creation time per QP and host memory per idle RC QP (16-entry queues)
//! at 1k, 4k, 16k and 64k QPs. With `--connect` each QP is also connected (to itself) and
//! moved to RTS before memory is read; that walk is not timed, and it costs O(QPs) each
//! (every state change makes the sim's transport scan every QP once: `DESIGN.md`), so it is
//! off by default.
//!
//! Memory is measured, not estimated: the heap bytes the process holds (the counting global
//! allocator, `crate::alloc_count`: driver, verbs layer and sim are all in this process) plus
//! the DMA memory the driver has mapped for the device (its IOVA in use: WQ buffers,
//! doorbell records, pages lent to the firmware), after the QPs minus before them, over
//! their number. The sim keeps no memory of its own for a QP outside the heap.
//!
//! Owns: the measurement loop and its table. Must not: time anything but QP creation, or
//! touch the device outside the verbs API (plus the driver's DMA and bfreg views).

use std::time::{Duration, Instant};

use bypass_testbed::{SimContext, SimFabric};
use bypass_verbs::driver::bfregs::BfregClass;
use bypass_verbs::{Context, Cq, Qp, QpBuilder};
use clap::Args;

use super::PerfError;
use crate::alloc_count::live_bytes;

/// Options of `bypass perf qp-scale`.
#[derive(Args, Debug)]
pub struct QpScaleOpts {
    /// QP counts to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1024u32, 4096, 16384, 65536], value_parser = clap::value_parser!(u32).range(1..))]
    counts: Vec<u32>,
    /// Runs per count (medians are reported).
    #[arg(short = 'r', long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    repeats: u32,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Connect every QP (to itself) and move it to RTS before measuring memory.
    #[arg(long)]
    connect: bool,
}

/// One run at one count.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// Creation time per QP over all of them, and over the last 1024 created.
    create_all: Duration,
    create_last: Duration,
    heap_per_qp: f64,
    dma_per_qp: f64,
    classes: [usize; 3],
}

/// The QPs every run creates: RC, 16 sends and 16 receives of one SGE, no inline.
fn build(pd: &bypass_verbs::Pd, cq: &Cq) -> Result<Qp, PerfError> {
    Ok(QpBuilder::rc(pd, cq, cq)
        .max_send_wr(16)
        .max_recv_wr(16)
        .max_send_sge(1)
        .max_recv_sge(1)
        .max_inline(0)
        .build()?)
}

fn measure(seed: u64, n: usize, connect: bool) -> Result<Sample, PerfError> {
    let fabric = SimFabric::stepped(seed);
    let ctx = Context::open_sim(&fabric, 1)?;
    // Checked before the QP table is sized by it: the device's own limit, named.
    let max = 1u64 << ctx.caps().log_max_qp.min(32);
    if n as u64 > max {
        return Err(PerfError::Usage(format!(
            "--counts {n}: this device holds at most {max} QPs (max_qp, 2^log_max_qp): give counts up to {max}"
        )));
    }
    let pd = ctx.alloc_pd()?;
    let cq = Cq::new(&ctx, 16)?;
    let (heap0, free0) = (live_bytes(), ctx.free_iova_bytes());
    let mut qps: Vec<Qp> = Vec::with_capacity(n);
    let last = n.saturating_sub(1024);
    let start = Instant::now();
    let mut last_start = start;
    for k in 0..n {
        if k == last {
            last_start = Instant::now();
        }
        qps.push(build(&pd, &cq)?);
    }
    let end = Instant::now();
    // With `connect`: idle but live, each connected to itself and in RTS.
    for q in qps.iter_mut().filter(|_| connect) {
        let e = q.endpoint()?;
        q.connect(&e)?;
    }
    let (heap1, free1) = (live_bytes(), ctx.free_iova_bytes());
    let mut classes = [0usize; 3];
    for q in &qps {
        let i = match q.bfreg().class() {
            BfregClass::LowLatency => 0,
            BfregClass::Shared => 1,
            BfregClass::NoBlueFlame => 2,
        };
        classes[i] += 1;
    }
    drop(qps);
    let nf = n.max(1) as f64;
    Ok(Sample {
        create_all: (end - start) / n.max(1) as u32,
        create_last: (end - last_start) / (n - last).max(1) as u32,
        heap_per_qp: (heap1 - heap0) as f64 / nf,
        dma_per_qp: free0.saturating_sub(free1) as f64 / nf,
        classes,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the benchmark and prints its table.
pub fn run(o: &QpScaleOpts) -> Result<(), PerfError> {
    println!("{}", crate::stats::RESULT_LINE);
    println!("                    QP scale: creation time and host memory per idle QP");
    println!(
        " Device          : sim (one simulated NIC, stepped fabric, seed {})",
        o.seed
    );
    println!(
        " QPs             : RC, 16 send + 16 recv WQEs, 1 SGE, no inline; one shared CQ; {}",
        if o.connect {
            "connected, RTS"
        } else {
            "created (RST)"
        }
    );
    println!(" Memory          : heap (counting allocator) + driver DMA, after - before, per QP");
    println!(" Repeats         : {} (medians)", o.repeats);
    println!("{}", crate::stats::RESULT_LINE);
    println!(
        " {:>7}  {:>13}  {:>13}  {:>10}  {:>10}  {:>10}  {:>22}",
        "#QPs",
        "us/QP (all)",
        "us/QP (last1k)",
        "heap B/QP",
        "DMA B/QP",
        "total B/QP",
        "bfregs ded/shared/none"
    );
    for &n in &o.counts {
        let samples = (0..o.repeats)
            .map(|_| measure(o.seed, n as usize, o.connect))
            .collect::<Result<Vec<_>, _>>()?;
        let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        let all = m(|s| s.create_all.as_secs_f64() * 1e6);
        let last = m(|s| s.create_last.as_secs_f64() * 1e6);
        let heap = m(|s| s.heap_per_qp);
        let dma = m(|s| s.dma_per_qp);
        let c = samples.first().map(|s| s.classes).unwrap_or_default();
        println!(
            " {n:>7}  {all:>13.2}  {last:>14.2}  {heap:>10.0}  {dma:>10.0}  {:>10.0}  {:>22}",
            heap + dma,
            format!("{}/{}/{}", c[0], c[1], c[2])
        );
    }
    println!("{}", crate::stats::RESULT_LINE);
    Ok(())
}
