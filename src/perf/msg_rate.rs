//! `bypass perf msg-rate` and `bypass perf sim-speed`: rates against a baseline measured in
//! the same run, each as median and range over `--reps` repetitions, and their ratio.
//!
//! msg-rate: 8-byte RDMA WRITEs posted 64 per `WriteBatch` (one doorbell) on the threaded
//! two-NIC rig (`pair`), against 8-byte UDP datagrams on loopback sent with `sendmmsg` by
//! one thread and drained with `recvmmsg` by another (datagrams received per second).
//! sim-speed: the same N-WRITE workload on a stepped fabric (one core, the world moves in
//! `progress`) and on a threaded one (engine thread); simulated packets (both devices'
//! `port_xmit_packets`) per second of wall time.
//! Owns: these loops and their tables. Must not: touch `pair`'s rig beyond its API.
//! Sources: perftest `ib_write_bw` message rate (MsgRate[Mpps]); sendmmsg(2), recvmmsg(2).

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_testbed::{FabricOptions, SimContext, SimFabric};
use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::{Context, Cq, Qp, QpBuilder, SharedLease};
use clap::Args;

use super::PerfError;
use super::flows::STALL;

/// WRITEs per doorbell in msg-rate.
const BATCH: u32 = 64;
/// Send queue depth of the rigs.
const DEPTH: u32 = 512;

/// Options of `bypass perf msg-rate`.
#[derive(Args, Debug)]
pub struct MsgRateOpts {
    /// 8-byte messages per repetition (each side).
    #[arg(short = 'n', long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(64..=100_000_000))]
    iters: u64,
    /// Repetitions (median and range over them).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    reps: u32,
    /// Loopback address of the UDP baseline (receiver port 0: the kernel picks).
    #[arg(long, default_value = "127.0.0.1")]
    udp_addr: std::net::Ipv4Addr,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Options of `bypass perf sim-speed`.
#[derive(Args, Debug)]
pub struct SimSpeedOpts {
    /// RC WRITEs per repetition.
    #[arg(short = 'n', long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    iters: u64,
    /// WRITE size in bytes (more than the 1024-byte MTU makes several packets per WRITE).
    #[arg(short = 's', long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    size: u64,
    /// Repetitions (median and range over them).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    reps: u32,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Median, min and max of samples (at least one).
fn summary(v: &[f64]) -> (f64, f64, f64) {
    let med = crate::stats::median(v).unwrap_or(0.0);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    (med, min, max)
}

/// Prints the table: one row per measurement, then the ratio of the medians.
fn print_table(unit: &str, scale: f64, rows: &[(&str, &[f64])], ratio_label: &str) {
    println!("{}", crate::stats::RESULT_LINE);
    println!(
        " {:<34} {:>14} {:>24}",
        "measurement",
        format!("median {unit}"),
        format!("range {unit}")
    );
    let mut meds = Vec::new();
    for (name, v) in rows {
        let (m, lo, hi) = summary(v);
        meds.push(m);
        println!(
            " {:<34} {:>14.3} {:>24}",
            name,
            m / scale,
            format!("{:.3}-{:.3}", lo / scale, hi / scale)
        );
    }
    let ratio = match (meds.first(), meds.get(1)) {
        (Some(a), Some(b)) if *b > 0.0 => a / b,
        _ => 0.0,
    };
    println!(" {ratio_label:<34} {ratio:>14.3}");
    println!("{}", crate::stats::RESULT_LINE);
}

/// Runs `bypass perf msg-rate`.
pub fn run_msg_rate(o: &MsgRateOpts) -> Result<(), PerfError> {
    let (mut sim, mut udp) = (Vec::new(), Vec::new());
    for rep in 0..o.reps {
        sim.push(write_rate(o.seed.wrapping_add(u64::from(rep)), o.iters)?);
        udp.push(udp_rate(o.udp_addr, o.iters)?);
    }
    println!(
        " 8-byte messages: {} per repetition, {} repetitions, WRITEs {BATCH} per doorbell",
        o.iters, o.reps
    );
    print_table(
        "Mpps",
        1e6,
        &[
            ("bypass WRITE (WriteBatch, sim)", &sim),
            ("UDP loopback sendmmsg/recvmmsg", &udp),
        ],
        "ratio bypass/UDP",
    );
    Ok(())
}

/// One end of a rig: CQ and QP (the PD and the target are kept alive in `Rig2`).
struct Rig2 {
    a_ctx: Arc<Context>,
    b_ctx: Arc<Context>,
    a_cq: Cq,
    a_qp: Qp,
    _b_cq: Cq,
    _b_qp: Qp,
    target: bypass_verbs::Mr,
    src: SharedLease,
    _pds: (bypass_verbs::Pd, bypass_verbs::Pd),
}

fn rig(fabric: &SimFabric, size: usize) -> Result<Rig2, PerfError> {
    let a_ctx = Context::open_sim(fabric, 1)?;
    let b_ctx = Context::open_sim(fabric, 2)?;
    let (pa, pb) = (a_ctx.alloc_pd()?, b_ctx.alloc_pd()?);
    let a_cq = Cq::new(&a_ctx, DEPTH * 2)?;
    let b_cq = Cq::new(&b_ctx, 16)?;
    let target = pb.register(size, MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE)?;
    let pool = pa.create_pool(size, 1)?;
    let src = pool.lease(size)?.freeze();
    let mut a_qp = QpBuilder::rc(&pa, &a_cq, &a_cq)
        .max_send_wr(DEPTH)
        .max_send_sge(1)
        .max_recv_wr(1)
        .build()?;
    let mut b_qp = QpBuilder::rc(&pb, &b_cq, &b_cq).max_recv_wr(1).build()?;
    let (ea, eb) = (a_qp.endpoint()?, b_qp.endpoint()?);
    a_qp.connect(&eb)?;
    b_qp.connect(&ea)?;
    Ok(Rig2 {
        a_ctx,
        b_ctx,
        a_cq,
        a_qp,
        _b_cq: b_cq,
        _b_qp: b_qp,
        target,
        src,
        _pds: (pa, pb),
    })
}

/// Posts `n` WRITEs of the rig's source, `batch` per doorbell, the last of each batch
/// signaled, keeping at most `DEPTH / 2` outstanding; returns when all completed.
fn write_loop(r: &mut Rig2, n: u64, batch: u32) -> Result<(), PerfError> {
    let remote = r.target.remote();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut since = Instant::now();
    while done < n {
        while posted < n && posted - done + u64::from(batch) <= u64::from(DEPTH / 2) {
            let k = u64::from(batch).min(n - posted);
            let mut b = r.a_qp.write_batch()?;
            for i in 0..k {
                b.write(posted + i, r.src.clone(), remote, i + 1 == k)?;
            }
            drop(b);
            posted += k;
        }
        let mut got = false;
        while let Some(c) = r.a_cq.poll_one() {
            if !c.is_ok() {
                return Err(PerfError::Completion {
                    wr_id: c.wr_id(),
                    status: c.status().to_string(),
                });
            }
            done = done.max(c.wr_id() + 1);
            drop(r.a_qp.reclaim(c)?);
            got = true;
        }
        if got {
            since = Instant::now();
        } else {
            r.a_ctx.progress();
            r.b_ctx.progress();
            if since.elapsed() > STALL {
                return Err(PerfError::Stalled {
                    what: "a batched WRITE's completion",
                    after: STALL,
                    seen: format!("{done} of {n} WRITEs complete, {posted} posted"),
                });
            }
        }
    }
    Ok(())
}

/// 8-byte WRITEs per second on the threaded low-latency rig.
fn write_rate(seed: u64, n: u64) -> Result<f64, PerfError> {
    let fabric = SimFabric::threaded_with(seed, FabricOptions::low_latency());
    let mut r = rig(&fabric, 8)?;
    write_loop(&mut r, n.min(4096), BATCH)?; // warm-up
    let t = Instant::now();
    write_loop(&mut r, n, BATCH)?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Runs `bypass perf sim-speed`.
pub fn run_sim_speed(o: &SimSpeedOpts) -> Result<(), PerfError> {
    let size = usize::try_from(o.size).map_err(|_| PerfError::TooLarge { size: o.size })?;
    let (mut stepped, mut threaded) = (Vec::new(), Vec::new());
    let mut packets = 0;
    for rep in 0..o.reps {
        let seed = o.seed.wrapping_add(u64::from(rep));
        let (p, s) = sim_speed(SimFabric::stepped(seed), size, o.iters)?;
        stepped.push(s);
        packets = p;
        let fab = SimFabric::threaded_with(seed, FabricOptions::default());
        threaded.push(sim_speed(fab, size, o.iters)?.1);
    }
    println!(
        " {} RC WRITEs of {} bytes per repetition ({packets} packets, both directions), {} repetitions",
        o.iters, o.size, o.reps
    );
    print_table(
        "Mpkt/s",
        1e6,
        &[
            ("stepped fabric (one core)", &stepped),
            ("threaded fabric (engine thread)", &threaded),
        ],
        "ratio stepped/threaded",
    );
    Ok(())
}

/// Packets both devices sent running `n` WRITEs of `size` bytes, and packets per second.
fn sim_speed(fabric: SimFabric, size: usize, n: u64) -> Result<(u64, f64), PerfError> {
    let mut r = rig(&fabric, size)?;
    let xmit = |f: &SimFabric| -> u64 {
        (0..2)
            .filter_map(|id| f.with_device(id, |d| d.counters.port_xmit_packets).ok())
            .sum()
    };
    let before = xmit(&fabric);
    let t = Instant::now();
    write_loop(&mut r, n, 16)?;
    let secs = t.elapsed().as_secs_f64();
    let p = xmit(&fabric).saturating_sub(before);
    Ok((p, p as f64 / secs))
}

/// 8-byte datagrams received per second over loopback: a sender thread batching 64 per
/// `sendmmsg`, this thread draining with `recvmmsg`; the sender stops after `n`, the
/// receiver after `n` or 200 ms without a datagram (loopback drops when the socket buffer
/// is full; those are not counted).
fn udp_rate(addr: std::net::Ipv4Addr, n: u64) -> Result<f64, PerfError> {
    use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrIn, recvmmsg, sendmmsg};
    let io = |e: std::io::Error| {
        PerfError::Usage(format!(
            "UDP baseline on {addr}: {e} (use --udp-addr with a loopback address this machine has)"
        ))
    };
    let rx = UdpSocket::bind((addr, 0)).map_err(io)?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(io)?;
    let dst = rx.local_addr().map_err(io)?;
    let tx = UdpSocket::bind((addr, 0)).map_err(io)?;
    tx.connect(dst).map_err(io)?;
    let sender = std::thread::spawn(move || {
        let payload = [[7u8; 8]; BATCH as usize];
        let iovs: Vec<[std::io::IoSlice<'_>; 1]> =
            payload.iter().map(|p| [std::io::IoSlice::new(p)]).collect();
        let mut hdrs = MultiHeaders::<SockaddrIn>::preallocate(BATCH as usize, None);
        let mut sent = 0u64;
        while sent < n {
            let k = (n - sent).min(u64::from(BATCH)) as usize;
            let addrs = [None::<SockaddrIn>; BATCH as usize];
            match sendmmsg(
                tx.as_raw_fd(),
                &mut hdrs,
                &iovs[..k],
                &addrs[..k],
                [],
                MsgFlags::empty(),
            ) {
                Ok(r) => sent += r.count() as u64,
                Err(nix::errno::Errno::ENOBUFS | nix::errno::Errno::EAGAIN) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    });
    let mut bufs = [[0u8; 16]; BATCH as usize];
    let mut got = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut hdrs = MultiHeaders::<SockaddrIn>::preallocate(BATCH as usize, None);
    while got < n {
        let mut iovs: Vec<[std::io::IoSliceMut<'_>; 1]> = bufs
            .iter_mut()
            .map(|b| [std::io::IoSliceMut::new(b)])
            .collect();
        match recvmmsg(
            rx.as_raw_fd(),
            &mut hdrs,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        ) {
            Ok(r) => {
                let k = r.count() as u64;
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
                got += k;
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => break,
            Err(e) => return Err(io(e.into())),
        }
    }
    let sent = sender
        .join()
        .map_err(|_| PerfError::Usage("the UDP sender thread panicked".into()))?
        .map_err(|e| io(e.into()))?;
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    if got < 2 || secs <= 0.0 {
        return Err(PerfError::Usage(format!(
            "UDP baseline: {got} of {sent} datagrams received on {dst}; nothing to time"
        )));
    }
    Ok(got as f64 / secs)
}
