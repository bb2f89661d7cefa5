//! `bypass gpu check`: RDMA to and from GPU memory through two simulated NICs, every byte
//! checked on the host, and GPU→GPU WRITE bandwidth against `cuMemcpyDtoD` in the same run.
//!
//! Owns: the check's rig (two sim NICs on one fabric, an RC QP each, GPU memory registered
//! through its dma-buf on both: [`bypass_gpu::GpuPool`] for sources, a `GpuMr` as target),
//! the data checks [`data_checks`] (also stage 4 of `ping --ramp`), the bandwidth
//! comparison, and [`CheckError`] with its exit code (77 when there is no GPU). Must not:
//! call CUDA except through `bypass-gpu`, or read the memory it checks through the path
//! under test: results are copied back with `cuMemcpyDtoH` (host memory: the MR's own read)
//! and compared there.
//!
//! Each check writes a pattern of its own into the source, clears the destination, moves
//! the bytes with one work request and compares: WRITE and READ GPU→GPU, GPU→host and
//! host→GPU, and SEND GPU→GPU. With two GPUs, NIC 1 uses GPU 0 and NIC 2 GPU 1 (the sim
//! reaches each through its own `CudaPeer`); with one, both use GPU 0.
//! Sources: perftest `ib_write_bw --use_cuda` (buffers from `cuda_memory.c`, registered with
//! `ibv_reg_dmabuf_mr`), perftest's report of bandwidth per run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_gpu::{Gpu, GpuError, GpuMr, GpuMrError, GpuPool};
use bypass_testbed::{FabricOptions, SimContext, SimFabric};
use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::wr::SgeList;
use bypass_verbs::{Context, Cq, Mr, Pd, Qp, QpBuilder, RecvWr, SendOp, SendWr, VerbsError};
use clap::Args;

/// The exit code of a run that found no GPU (automake's "skipped").
pub const EXIT_NO_GPU: u8 = 77;

/// Options of `bypass gpu check`.
#[derive(Args, Debug)]
pub struct CheckOpts {
    /// Bytes per message and per buffer.
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(64..=(64 << 20)))]
    pub size: u64,
    /// Rounds of the bandwidth comparison (each side's median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=101))]
    pub rounds: u32,
    /// WRITEs (and DtoD copies) per round, the WRITEs all outstanding at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub burst: u32,
    /// Export with CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (driver 12.8 or later).
    #[arg(long)]
    pub pcie_mapping: bool,
    /// Fabric seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds each completion may take.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

/// Why a check failed (or could not run).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// No GPU here: nothing was checked.
    #[error("gpu check: skipped, no GPU: {0}")]
    NoGpu(GpuError),
    /// A CUDA call.
    #[error("gpu check: {0}")]
    Gpu(#[from] GpuError),
    /// Registering or leasing GPU memory.
    #[error("gpu check: {0}")]
    Mr(#[from] GpuMrError),
    /// A verbs call.
    #[error("gpu check: {0}")]
    Verbs(#[from] VerbsError),
    /// A completion did not come.
    #[error(
        "gpu check {what}: no completion within {secs} s: the sim stalled; rerun with --timeout larger, or report it with the seed"
    )]
    Timeout {
        /// The check.
        what: String,
        /// The wait.
        secs: u64,
    },
    /// A completion with an error status.
    #[error("gpu check {what}: the completion failed: {status}")]
    Completion {
        /// The check.
        what: String,
        /// The completion, printed (status, syndrome).
        status: String,
    },
    /// Bytes differ.
    #[error(
        "gpu check {what}: byte {at} is {got:#04x}, expected {want:#04x} ({bad} of {len} bytes differ): the data path corrupted GPU memory"
    )]
    Mismatch {
        /// The check.
        what: String,
        /// First differing byte.
        at: usize,
        /// Its value.
        got: u8,
        /// The pattern's.
        want: u8,
        /// Bytes that differ.
        bad: usize,
        /// Bytes compared.
        len: usize,
    },
}

impl CheckError {
    /// 77 for [`CheckError::NoGpu`], 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::NoGpu(_) => EXIT_NO_GPU,
            _ => 1,
        }
    }
}

/// One side: a device's PD, CQ and connected RC QP.
struct End {
    qp: Qp,
    cq: Cq,
    pd: Pd,
}

impl End {
    fn new(ctx: &Arc<Context>, depth: u32) -> Result<Self, VerbsError> {
        let pd = ctx.alloc_pd()?;
        let cq = Cq::new(ctx, (2 * depth + 8).max(64))?;
        let qp = QpBuilder::rc(&pd, &cq, &cq)
            .max_send_wr(depth + 4)
            .max_recv_wr(8)
            .build()?;
        Ok(Self { qp, cq, pd })
    }

    /// Waits for one completion of `what` and reclaims its buffers.
    fn complete(&mut self, what: &str, timeout: Duration) -> Result<SgeList, CheckError> {
        let c = self.cq.wait(timeout)?.ok_or_else(|| CheckError::Timeout {
            what: what.to_owned(),
            secs: timeout.as_secs(),
        })?;
        if !c.is_ok() {
            return Err(CheckError::Completion {
                what: what.to_owned(),
                status: c.to_string(),
            });
        }
        Ok(self.qp.reclaim(c)?)
    }
}

/// Two connected ends.
fn connect(ca: &Arc<Context>, cb: &Arc<Context>, depth: u32) -> Result<(End, End), CheckError> {
    let (mut a, mut b) = (End::new(ca, depth)?, End::new(cb, depth)?);
    let (ea, eb) = (a.qp.endpoint()?, b.qp.endpoint()?);
    a.qp.connect(&eb)?;
    b.qp.connect(&ea)?;
    Ok((a, b))
}

/// `len` bytes of check `tag`'s pattern (no two checks share one, none is all zeros).
pub fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ ((i >> 8) as u8) ^ tag.wrapping_mul(0x5b) ^ 0xa5)
        .collect()
}

/// `Ok` when `got == want`, else the first difference and the count.
fn compare(what: &str, got: &[u8], want: &[u8]) -> Result<(), CheckError> {
    let bad = got.iter().zip(want).filter(|(g, w)| g != w).count() + got.len().abs_diff(want.len());
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if bad == 0 => Ok(()),
        at => {
            let at = at.unwrap_or(got.len().min(want.len()));
            Err(CheckError::Mismatch {
                what: what.to_owned(),
                at,
                got: got.get(at).copied().unwrap_or(0),
                want: want.get(at).copied().unwrap_or(0),
                bad,
                len: want.len(),
            })
        }
    }
}

/// The memory of the data checks: sources on A, targets on B.
struct Memory {
    /// A's GPU sources and READ destinations.
    gpu_a: GpuPool,
    /// A's host sources and READ destinations.
    host_a: bypass_verbs::MemoryPool,
    /// B's GPU target (remote read/write).
    gpu_b: GpuMr,
    /// B's host target.
    host_b: Mr,
    /// B's GPU receive buffers.
    recv_b: GpuPool,
}

const TARGET: MkeyAccess = MkeyAccess::LOCAL_WRITE
    .union(MkeyAccess::REMOTE_WRITE)
    .union(MkeyAccess::REMOTE_READ);

impl Memory {
    /// `count` GPU source chunks on A; `pcie` exports every GPU buffer with the PCIe
    /// mapping flag.
    fn new(
        (ga, gb): (&Gpu, &Gpu),
        (a, b): (&End, &End),
        size: usize,
        count: usize,
        pcie: bool,
    ) -> Result<Self, CheckError> {
        Ok(Self {
            gpu_a: GpuPool::new(ga, &a.pd, size, count, pcie)?,
            host_a: a.pd.create_pool(size, 2)?,
            gpu_b: gb.alloc_mr(&b.pd, size, TARGET, pcie)?,
            host_b: b.pd.register(size, TARGET)?,
            recv_b: GpuPool::new(gb, &b.pd, size, 1, pcie)?,
        })
    }
}

/// The byte offset of a GPU pool lease in the pool's buffer.
fn offset_in(pool: &GpuPool, iova: u64) -> usize {
    (iova - pool.buffer().dptr()) as usize
}

/// Runs the seven data checks on two connected ends; returns one line per check.
fn run_checks(
    a: &mut End,
    b: &mut End,
    m: &Memory,
    names: (&str, &str),
    size: usize,
    timeout: Duration,
) -> Result<Vec<String>, CheckError> {
    let (ga, gb) = names;
    let mut lines = Vec::new();
    let mut got = vec![0u8; size];
    let ok = |what: &str| format!("{what}: ok, {size} bytes, each compared on the host");

    // 1. WRITE GPU -> GPU.
    let what = format!("WRITE {ga} -> {gb}");
    let pat = pattern(1, size);
    let src = m.gpu_a.lease(size)?;
    m.gpu_a
        .buffer()
        .copy_from_host(offset_in(&m.gpu_a, src.iova()), &pat)?;
    m.gpu_b.buf.fill(0, size, 0)?;
    a.qp.post_send(SendWr::new(1, SendOp::Write(m.gpu_b.mr.remote())).sge(src))?;
    a.complete(&what, timeout)?;
    m.gpu_b.buf.copy_to_host(0, &mut got)?;
    compare(&what, &got, &pat)?;
    lines.push(ok(&what));

    // 2. READ GPU -> GPU (A reads B's GPU into its GPU).
    let what = format!("READ {gb} -> {ga}");
    let pat = pattern(2, size);
    m.gpu_b.buf.copy_from_host(0, &pat)?;
    let dst = m.gpu_a.lease(size)?;
    let at = offset_in(&m.gpu_a, dst.iova());
    m.gpu_a.buffer().fill(at, size, 0)?;
    a.qp.post_send(SendWr::new(2, SendOp::Read(m.gpu_b.mr.remote())).sge(dst))?;
    a.complete(&what, timeout)?;
    m.gpu_a.buffer().copy_to_host(at, &mut got)?;
    compare(&what, &got, &pat)?;
    lines.push(ok(&what));

    // 3. WRITE GPU -> host.
    let what = format!("WRITE {ga} -> host");
    let pat = pattern(3, size);
    let src = m.gpu_a.lease(size)?;
    m.gpu_a
        .buffer()
        .copy_from_host(offset_in(&m.gpu_a, src.iova()), &pat)?;
    m.host_b.write(0, &vec![0u8; size])?;
    a.qp.post_send(SendWr::new(3, SendOp::Write(m.host_b.remote())).sge(src))?;
    a.complete(&what, timeout)?;
    m.host_b.read(0, &mut got)?;
    compare(&what, &got, &pat)?;
    lines.push(ok(&what));

    // 4. READ GPU -> host (A's host buffer reads B's GPU).
    let what = format!("READ {gb} -> host");
    let pat = pattern(4, size);
    m.gpu_b.buf.copy_from_host(0, &pat)?;
    let mut dst = m.host_a.lease(size)?;
    dst.as_mut_slice().fill(0);
    a.qp.post_send(SendWr::new(4, SendOp::Read(m.gpu_b.mr.remote())).sge(dst))?;
    let back = a.complete(&what, timeout)?.into_leases().next();
    let back = back.ok_or_else(|| CheckError::Completion {
        what: what.clone(),
        status: "the READ's host buffer did not come back with its completion".into(),
    })?;
    compare(&what, back.as_slice(), &pat)?;
    drop(back);
    lines.push(ok(&what));

    // 5. WRITE host -> GPU.
    let what = format!("WRITE host -> {gb}");
    let pat = pattern(5, size);
    let mut src = m.host_a.lease(size)?;
    src.as_mut_slice().copy_from_slice(&pat);
    m.gpu_b.buf.fill(0, size, 0)?;
    a.qp.post_send(SendWr::new(5, SendOp::Write(m.gpu_b.mr.remote())).sge(src))?;
    a.complete(&what, timeout)?;
    m.gpu_b.buf.copy_to_host(0, &mut got)?;
    compare(&what, &got, &pat)?;
    lines.push(ok(&what));

    // 6. READ host -> GPU (A's GPU buffer reads B's host memory).
    let what = format!("READ host -> {ga}");
    let pat = pattern(6, size);
    m.host_b.write(0, &pat)?;
    let dst = m.gpu_a.lease(size)?;
    let at = offset_in(&m.gpu_a, dst.iova());
    m.gpu_a.buffer().fill(at, size, 0)?;
    a.qp.post_send(SendWr::new(6, SendOp::Read(m.host_b.remote())).sge(dst))?;
    a.complete(&what, timeout)?;
    m.gpu_a.buffer().copy_to_host(at, &mut got)?;
    compare(&what, &got, &pat)?;
    lines.push(ok(&what));

    // 7. SEND GPU -> GPU (into a receive posted in B's GPU memory).
    let what = format!("SEND {ga} -> {gb}");
    let pat = pattern(7, size);
    let rbuf = m.recv_b.lease(size)?;
    let rat = offset_in(&m.recv_b, rbuf.iova());
    m.recv_b.buffer().fill(rat, size, 0)?;
    b.qp.post_recv(RecvWr::new(7, rbuf))?;
    let src = m.gpu_a.lease(size)?;
    m.gpu_a
        .buffer()
        .copy_from_host(offset_in(&m.gpu_a, src.iova()), &pat)?;
    a.qp.post_send(SendWr::new(8, SendOp::Send).sge(src))?;
    a.complete(&what, timeout)?;
    b.complete(&what, timeout)?;
    m.recv_b.buffer().copy_to_host(rat, &mut got)?;
    compare(&what, &got, &pat)?;
    lines.push(ok(&what));
    Ok(lines)
}

/// The data checks on two devices of one fabric, GPU `ga` behind `ca` and `gb` behind
/// `cb`: one line per check passed. Used by `gpu check` and stage 4 of `ping --ramp`.
///
/// Errors: the first failure ([`CheckError`]).
pub fn data_checks(
    ca: &Arc<Context>,
    cb: &Arc<Context>,
    ga: &Gpu,
    gb: &Gpu,
    size: usize,
    timeout: Duration,
) -> Result<Vec<String>, CheckError> {
    let (mut a, mut b) = connect(ca, cb, 8)?;
    let m = Memory::new((ga, gb), (&a, &b), size, 2, false)?;
    let names = (gpu_name(ga), gpu_name(gb));
    run_checks(&mut a, &mut b, &m, (&names.0, &names.1), size, timeout)
}

fn gpu_name(g: &Gpu) -> String {
    format!("GPU{}", g.info().ordinal)
}

/// Opens GPU 0, and GPU 1 when there is one (GPU 0 twice otherwise).
///
/// Errors: [`CheckError::NoGpu`] when CUDA or its devices are absent, else the error.
pub fn open_gpus() -> Result<(Gpu, Gpu), CheckError> {
    let classify = |e: GpuError| {
        if e.is_no_gpu() {
            CheckError::NoGpu(e)
        } else {
            CheckError::Gpu(e)
        }
    };
    let (_, list) = bypass_gpu::devices().map_err(classify)?;
    let g0 = Gpu::open(0).map_err(classify)?;
    let g1 = if list.len() > 1 {
        Gpu::open(1)?
    } else {
        g0.clone()
    };
    Ok((g0, g1))
}

/// The median of `v` (sorted in place; the upper middle for an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// GB/s (10^9 bytes per second) of `bytes` in `d`.
fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-9) / 1e9
}

/// One round of `burst` GPU→GPU WRITEs, all outstanding, timed from the first post to the
/// last completion.
fn write_round(
    a: &mut End,
    m: &Memory,
    size: usize,
    burst: u32,
    timeout: Duration,
) -> Result<Duration, CheckError> {
    let leases = (0..burst)
        .map(|_| m.gpu_a.lease(size))
        .collect::<Result<Vec<_>, _>>()?;
    let t0 = Instant::now();
    for (i, l) in leases.into_iter().enumerate() {
        a.qp.post_send(SendWr::new(100 + i as u64, SendOp::Write(m.gpu_b.mr.remote())).sge(l))?;
    }
    for _ in 0..burst {
        a.complete("bandwidth WRITE", timeout)?;
    }
    Ok(t0.elapsed())
}

/// One round of `burst` synchronous `cuMemcpyDtoD`s of `size` bytes.
fn dtod_round(
    dst: &bypass_gpu::GpuBuffer,
    src: &bypass_gpu::GpuBuffer,
    size: usize,
    burst: u32,
) -> Result<Duration, CheckError> {
    let t0 = Instant::now();
    for _ in 0..burst {
        dst.memcpy_dtod(0, src, 0, size)?;
    }
    Ok(t0.elapsed())
}

/// Runs `bypass gpu check`: prints each check's line, then the bandwidth comparison.
pub fn run(o: &CheckOpts) -> Result<(), CheckError> {
    let size = o.size as usize;
    let timeout = Duration::from_secs(o.timeout);
    let (ga, gb) = open_gpus()?;
    let two = ga.info().ordinal != gb.info().ordinal;
    for g in if two { vec![&ga, &gb] } else { vec![&ga] } {
        let i = g.info();
        println!(
            "{}: {} at {}, dma-buf {}, CUDA driver {}.{}",
            gpu_name(g),
            i.name,
            i.pci_bus_id,
            if i.dma_buf { "yes" } else { "no" },
            g.driver_version() / 1000,
            (g.driver_version() % 1000) / 10
        );
    }
    if !two {
        println!("one GPU: both NICs use {}", gpu_name(&ga));
    }
    let fabric = SimFabric::threaded_with(o.seed, FabricOptions::low_latency());
    let (ca, cb) = (
        Context::open_sim(&fabric, 1)?,
        Context::open_sim(&fabric, 2)?,
    );
    println!(
        "NIC1 (sim) with {} memory, NIC2 (sim) with {} memory, RC, dma-buf MRs (nv_dmabuf, reached by cuMemcpyDtoH/HtoD){}",
        gpu_name(&ga),
        gpu_name(&gb),
        if o.pcie_mapping { ", PCIe mapping" } else { "" }
    );
    let (mut a, mut b) = connect(&ca, &cb, o.burst)?;
    let m = Memory::new((&ga, &gb), (&a, &b), size, o.burst as usize, o.pcie_mapping)?;
    let names = (gpu_name(&ga), gpu_name(&gb));
    for line in run_checks(&mut a, &mut b, &m, (&names.0, &names.1), size, timeout)? {
        println!("{line}");
    }
    let (src, dst) = (ga.alloc(size)?, ga.alloc(size)?);
    let bytes = size * o.burst as usize;
    let (mut sim, mut dtod) = (Vec::new(), Vec::new());
    for _ in 0..o.rounds {
        sim.push(gbps(
            bytes,
            write_round(&mut a, &m, size, o.burst, timeout)?,
        ));
        dtod.push(gbps(bytes, dtod_round(&dst, &src, size, o.burst)?));
    }
    let (s, d) = (median(&mut sim), median(&mut dtod));
    println!(
        "bandwidth, {} rounds of {} x {} bytes, medians: sim RDMA WRITE {} -> {}: {s:.3} GB/s; cuMemcpyDtoD on {}: {d:.3} GB/s; sim / DtoD = {:.4}",
        o.rounds,
        o.burst,
        size,
        names.0,
        names.1,
        names.0,
        s / d.max(1e-12)
    );
    println!("gpu check: ok");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_per_check_and_are_not_zero() {
        let (p1, p2) = (pattern(1, 4096), pattern(2, 4096));
        assert_ne!(p1, p2);
        assert!(p1.iter().any(|&b| b != 0) && p2.iter().any(|&b| b != 0));
        assert_ne!(
            p1[..256],
            p1[256..512],
            "the high byte of the index changes the pattern"
        );
    }

    #[test]
    fn compare_names_the_first_difference_and_counts() {
        let want = pattern(3, 100);
        let mut got = want.clone();
        got[10] ^= 1;
        got[90] ^= 2;
        match compare("x", &got, &want) {
            Err(CheckError::Mismatch { at, bad, len, .. }) => {
                assert_eq!((at, bad, len), (10, 2, 100))
            }
            other => panic!("{other:?}"),
        }
        assert!(compare("x", &want, &want).is_ok());
        assert!(matches!(
            compare("x", &want[..50], &want),
            Err(CheckError::Mismatch {
                at: 50,
                bad: 50,
                ..
            })
        ));
    }

    #[test]
    fn no_gpu_exits_77_and_other_errors_1() {
        let none = CheckError::NoGpu(GpuError::NoCudaLibrary {
            tried: vec!["libcuda.so.1".into()],
        });
        assert_eq!(none.exit_code(), 77);
        let other = CheckError::Gpu(GpuError::MissingSymbol { symbol: "cuInit" });
        assert_eq!(other.exit_code(), 1);
    }

    #[test]
    fn the_median_is_the_middle_value() {
        assert_eq!(median(&mut [5.0, 1.0, 3.0, 2.0, 4.0]), 3.0);
        assert_eq!(median(&mut []), 0.0);
    }
}
