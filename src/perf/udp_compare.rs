//! `bypass perf compare-udp`: the UDP link measured against plain sockets in one run, as
//! medians and ratios, with the project's targets ([`RTT_TARGET`], [`BW_TARGET`]).
//!
//! Two comparisons (`--only rtt|bw` runs one): an 8-byte RDMA WRITE round trip between two
//! simulated NICs on UDP sockets (127.0.0.1 and 127.0.0.2 by default, one thread each,
//! `--rtt-threads`) against a plain UDP busy-poll ping-pong between the same addresses; 1 MiB
//! RDMA WRITE bandwidth over those links against TCP loopback streaming of 1 MiB writes. Each
//! also measures the floor of the link's own socket calls (`bypass_sim::link::floor`). They run
//! in interleaved rounds (`--rounds`; the bandwidth rounds first): each round measures the
//! baseline, the floor and the link, so that a stall, or a baseline that jumps between modes
//! with how the scheduler places its threads, hits both sides of a ratio alike. A round's
//! figure is a median of per-iteration round trips, or of whole bandwidth runs (`--runs`, each
//! from first post to last completion). Printed: the median of the rounds' figures, every
//! round's ratio, the verdict on their median.
//!
//! Owns: the two comparisons and their baselines (on another port of the same two addresses:
//! the links hold theirs). Must not print tables (the verdict lines only) or touch the device
//! outside the verbs API.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use clap::Args;

use super::PerfError;
use super::lat::WARMUP;
use super::pair::{End, RigSpec, WriteSpec};
use super::pair::{spin_yield, wait_yield};
use crate::args::{DeviceSpec, parse_size};
use crate::baseline::elapsed_ns;
use crate::device::{NetDevice, open_net};
use crate::stats::{median, ratio_list};
use bypass_sim::link::floor::{
    link_pingpong_rtts, segmented_stream_rate, write_round_trip_lens, write_stream_segment_len,
};
use bypass_verbs::SharedLease;

/// Target: UDP WRITE round trip at most this multiple of the plain UDP ping-pong's.
pub const RTT_TARGET: f64 = 1.25;
/// Target: UDP WRITE bandwidth at least this multiple of TCP loopback streaming.
pub const BW_TARGET: f64 = 1.0;

/// Options of `bypass perf compare-udp`.
#[derive(Args, Debug)]
pub struct UdpCompareOpts {
    /// Address of the first NIC (and of the first socket of the baselines).
    #[arg(long, default_value = "127.0.0.1")]
    pub addr_a: IpAddr,
    /// Address of the second NIC.
    #[arg(long, default_value = "127.0.0.2")]
    pub addr_b: IpAddr,
    /// Message size of the round-trip comparison.
    #[arg(long, default_value = "8", value_parser = parse_size)]
    pub lat_size: u64,
    /// Message size of the bandwidth comparison.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub bw_size: u64,
    /// Round trips measured in each round (after a warm-up).
    #[arg(short = 'n', long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(50..=super::MAX_ITERS))]
    pub iters: u64,
    /// Threads of the WRITE ping-pong: 2, one per NIC (as the baseline's two sockets, and
    /// as two processes), or 1 (both NICs in one thread, one after the other).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub rtt_threads: u8,
    /// WRITEs per bandwidth run.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(8..=super::MAX_ITERS))]
    pub bw_iters: u64,
    /// Bandwidth runs of each side in each round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Interleaved rounds: each round measures both sides of each comparison; the figures are
    /// the medians of the rounds' medians, each verdict the median of the rounds' ratios.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// WRITEs outstanding in the bandwidth runs.
    #[arg(short = 't', long = "tx-depth", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub tx_depth: u32,
    /// Run only one of the two comparisons (to profile or count system calls of one).
    #[arg(long, value_enum)]
    pub only: Option<Only>,
}

/// One of the two comparisons of `bypass perf compare-udp`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// The round-trip comparison alone.
    Rtt,
    /// The bandwidth comparison alone.
    Bw,
}

fn io(step: &'static str) -> impl Fn(std::io::Error) -> PerfError {
    move |e| PerfError::Oob(format!("baseline: {step}: {e}"))
}

/// A UDP port free on both addresses now (the kernel picks one on `a`; `b` is checked).
fn free_port(a: IpAddr, b: IpAddr) -> Result<u16, PerfError> {
    for _ in 0..32 {
        let sa = UdpSocket::bind((a, 0)).map_err(io("binding a UDP port"))?;
        let port = sa.local_addr().map_err(io("local_addr"))?.port();
        if UdpSocket::bind((b, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(PerfError::Oob(format!(
        "no UDP port free on both {a} and {b}"
    )))
}

/// Plain UDP busy-poll ping-pong between `a` and `b` (non-blocking sockets, both spinning,
/// yielding between polls like the sim's engine and `bypass pingpong`): the round-trip times
/// in ns.
fn udp_pingpong_rtts(
    a: SocketAddr,
    b: SocketAddr,
    size: usize,
    iters: usize,
) -> Result<Vec<u64>, PerfError> {
    let sa = UdpSocket::bind(a).map_err(io("binding the first socket"))?;
    let sb = UdpSocket::bind(b).map_err(io("binding the second socket"))?;
    sa.set_nonblocking(true).map_err(io("non-blocking"))?;
    sb.set_nonblocking(true).map_err(io("non-blocking"))?;
    let total = iters + WARMUP;
    let deadline = Instant::now() + Duration::from_secs(30);
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; size.max(1)];
        let mut n = 0;
        while n < total && Instant::now() < deadline {
            if let Ok((len, from)) = sb.recv_from(&mut buf) {
                let _ = sb.send_to(buf.get(..len).unwrap_or(&[]), from);
                n += 1;
            } else {
                // Busy-poll as the sim's engine does: yield the core between polls, so
                // that on a machine with few cores the two spinning threads take turns.
                std::thread::yield_now();
            }
        }
    });
    let msg = vec![0x5au8; size.max(1)];
    let mut reply = vec![0u8; size.max(1)];
    let mut rtts = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = Instant::now();
        sa.send_to(&msg, b).map_err(io("send"))?;
        loop {
            match sa.recv_from(&mut reply) {
                Ok(_) => break,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => return Err(io("the echo never answered")(e)),
            }
        }
        if i >= WARMUP {
            rtts.push(elapsed_ns(t0));
        }
    }
    let _ = echo.join();
    Ok(rtts)
}

/// TCP loopback streaming: `runs` times, `count` writes of `chunk` bytes into a socket a
/// reader thread drains; the bytes per second of each run.
fn tcp_stream_rates(chunk: usize, count: usize, runs: u32) -> Result<Vec<f64>, PerfError> {
    let mut rates = Vec::new();
    for _ in 0..runs {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io("TCP bind"))?;
        let addr = l.local_addr().map_err(io("TCP local_addr"))?;
        let total = chunk * count;
        let reader = std::thread::spawn(move || -> std::io::Result<usize> {
            let (mut s, _) = l.accept()?;
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < total {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            s.write_all(b"k")?;
            Ok(got)
        });
        let mut s = TcpStream::connect(addr).map_err(io("TCP connect"))?;
        let data = vec![0x5au8; chunk];
        let t0 = Instant::now();
        for _ in 0..count {
            s.write_all(&data).map_err(io("TCP write"))?;
        }
        let mut k = [0u8; 1];
        s.read_exact(&mut k).map_err(io("TCP reader's ack"))?;
        let secs = t0.elapsed().as_secs_f64();
        let _ = reader.join();
        rates.push(total as f64 / secs);
    }
    Ok(rates)
}

/// Two simulated NICs on UDP links, their ends connected.
struct UdpPair {
    a: End,
    b: End,
    max_inline: usize,
    /// The path MTU the two QPs use, in bytes.
    mtu: usize,
    devs: [NetDevice; 2],
}

impl UdpPair {
    fn new(a: SocketAddr, b: SocketAddr, size: usize, depth: u32) -> Result<Self, PerfError> {
        let da = open_net(&DeviceSpec::Udp(a), 1, "perf compare-udp", None)?;
        let db = open_net(&DeviceSpec::Udp(b), 2, "perf compare-udp", None)?;
        let spec = RigSpec { size, depth };
        let mut ea = End::new(&da.ctx, spec)?;
        let mut eb = End::new(&db.ctx, spec)?;
        let (pa, pb) = (ea.qp.endpoint()?, eb.qp.endpoint()?);
        let mtu = pa.mtu.bytes().min(pb.mtu.bytes()) as usize;
        ea.qp.connect(&pb)?;
        eb.qp.connect(&pa)?;
        let max_inline = ea.qp.options().caps.max_inline_data as usize;
        Ok(Self {
            a: ea,
            b: eb,
            max_inline,
            mtu,
            devs: [da, db],
        })
    }

    fn write_spec(&self, to_b: bool, size: u64) -> Result<WriteSpec, PerfError> {
        let target = if to_b { &self.b.target } else { &self.a.target };
        Ok(WriteSpec {
            remote: target
                .remote()
                .slice(0, size)
                .ok_or(PerfError::TooLarge { size })?,
            size: usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?,
            max_inline: self.max_inline,
        })
    }
}

/// The WRITE ping-pong: round-trip times in ns. With `threads` 2 (the default) each NIC is
/// driven by its own thread, as the baseline's two sockets are and as two processes run
/// `bypass perf write-lat`: the client thread posts and spins on its buffer, the server
/// thread spins on its own and answers; each reaps its completions after it posts, as
/// perftest's `run_iter_lat_write` polls after posting. With 1, both ends run in this thread,
/// one after the other (`scripts/callgrind-udp.sh` counts that loop: no empty polls in it).
///
/// In one thread the socket calls and the NIC work of both sides add up on the round trip; in
/// two, each side's work after its send overlaps the peer's receive, as between two processes
/// (docs/perf.md has the figures of both).
fn write_rtts(
    p: &mut UdpPair,
    size: u64,
    iters: usize,
    threads: u8,
) -> Result<Vec<u64>, PerfError> {
    if threads < 2 {
        return write_rtts_one_thread(p, size, iters);
    }
    let (ab, ba) = (p.write_spec(true, size)?, p.write_spec(false, size)?);
    let bytes = ab.size;
    let (ea, eb) = (&mut p.a, &mut p.b);
    std::thread::scope(|s| {
        // The server: waits for the client's WRITE, answers with its own (a stalled client
        // ends it by `spin_yield`'s stall limit).
        let server = s.spawn(move || -> Result<(), PerfError> {
            let mut ob = 0u32;
            for i in 0..(iters + WARMUP) {
                let tag = (i % 255) as u8 + 1;
                spin_yield(eb, bytes, tag)?;
                eb.post_write(&ba, tag, true, i as u64)?;
                ob += 1;
                reap(eb, &mut ob)?;
            }
            drain_all(eb, &mut ob)
        });
        let client = (|| -> Result<Vec<u64>, PerfError> {
            let mut rtts = Vec::with_capacity(iters);
            let mut oa = 0u32;
            for i in 0..(iters + WARMUP) {
                let tag = (i % 255) as u8 + 1;
                let t0 = Instant::now();
                ea.post_write(&ab, tag, true, i as u64)?;
                oa += 1;
                spin_yield(ea, bytes, tag)?;
                if i >= WARMUP {
                    rtts.push(elapsed_ns(t0));
                }
                reap(ea, &mut oa)?;
            }
            drain_all(ea, &mut oa)?;
            Ok(rtts)
        })();
        let served = server
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The client's error first: a server that stalled did so because the client stopped.
        let rtts = client?;
        served?;
        Ok(rtts)
    })
}

/// [`write_rtts`] with both ends in this thread.
fn write_rtts_one_thread(p: &mut UdpPair, size: u64, iters: usize) -> Result<Vec<u64>, PerfError> {
    let (ab, ba) = (p.write_spec(true, size)?, p.write_spec(false, size)?);
    let bytes = ab.size;
    let mut rtts = Vec::with_capacity(iters);
    let (mut oa, mut ob) = (0u32, 0u32);
    for i in 0..(iters + WARMUP) {
        let tag = (i % 255) as u8 + 1;
        let t0 = Instant::now();
        reap(&mut p.a, &mut oa)?;
        p.a.post_write(&ab, tag, true, i as u64)?;
        oa += 1;
        spin_yield(&p.b, bytes, tag)?;
        reap(&mut p.b, &mut ob)?;
        p.b.post_write(&ba, tag, true, i as u64)?;
        ob += 1;
        spin_yield(&p.a, bytes, tag)?;
        if i >= WARMUP {
            rtts.push(elapsed_ns(t0));
        }
    }
    drain_all(&mut p.a, &mut oa)?;
    drain_all(&mut p.b, &mut ob)?;
    Ok(rtts)
}

/// Reaps every completion still outstanding, so that the next phase's wr_ids are not
/// confused with these.
fn drain_all(end: &mut End, outstanding: &mut u32) -> Result<(), PerfError> {
    while *outstanding > 0 {
        let (n, _) = wait_yield(end)?;
        *outstanding = outstanding.saturating_sub(n as u32);
    }
    Ok(())
}

fn reap(end: &mut End, outstanding: &mut u32) -> Result<(), PerfError> {
    let (n, _) = end.drain()?;
    *outstanding = outstanding.saturating_sub(n as u32);
    while *outstanding >= 4 {
        let (n, _) = wait_yield(end)?;
        *outstanding = outstanding.saturating_sub(n as u32);
    }
    Ok(())
}

/// One bandwidth run a → b: `iters` WRITEs of `size`, `depth` outstanding, each signalled
/// every `depth / 2`; bytes per second from the first post to the last completion. Every
/// WRITE too large to inline reads one shared source buffer, as `perf write-bw` and perftest
/// `ib_write_bw` post them (and as the TCP baseline writes one buffer): a lease per WRITE
/// would stream `depth` MiB of cold source memory through the cache instead.
// Not inlined: `scripts/callgrind-udp.sh` collects the sending thread's instructions under
// this symbol (`--toggle-collect='*write_bw_rate*'`).
#[inline(never)]
fn write_bw_rate(
    p: &mut UdpPair,
    (w, src): (&WriteSpec, Option<&SharedLease>),
    iters: usize,
    depth: u32,
) -> Result<f64, PerfError> {
    let cq_mod = (depth / 2).max(1) as usize;
    let (mut scnt, mut ccnt) = (0usize, 0usize);
    let t0 = Instant::now();
    while ccnt < iters {
        while scnt < iters && scnt - ccnt < depth as usize {
            let signaled = (scnt + 1) % cq_mod == 0 || scnt + 1 == iters;
            match src {
                Some(src) => p.a.post_write_shared(w, src, signaled, scnt as u64)?,
                None => p.a.post_write(w, 1, signaled, scnt as u64)?,
            }
            scnt += 1;
        }
        let (_, last) = wait_yield(&mut p.a)?;
        if let Some(last) = last {
            ccnt = ccnt.max((last as usize + 1).min(iters));
        }
    }
    Ok(w.size as f64 * iters as f64 / t0.elapsed().as_secs_f64())
}

/// The bandwidth WRITEs of `size` bytes a → b and, for one too large to inline, the one
/// source buffer every such WRITE reads (filled once, before any run).
fn bw_source(p: &mut UdpPair, size: u64) -> Result<(WriteSpec, Option<SharedLease>), PerfError> {
    let w = p.write_spec(true, size)?;
    let src = if w.size > w.max_inline {
        let mut l = p.a.pool.lease(w.size)?;
        l.as_mut_slice().fill(0x5a);
        Some(l.freeze())
    } else {
        None
    };
    Ok((w, src))
}

/// One round's medians of one comparison: the link, its baseline, the floor of its socket
/// calls.
#[derive(Debug, Clone, Copy)]
struct Round {
    link: f64,
    baseline: f64,
    floor: f64,
}

/// The medians over `rounds` of the link's figure, the baseline's and the floor's, and the
/// rounds' ratios (link / baseline) with their median.
struct Summary {
    link: f64,
    baseline: f64,
    floor: f64,
    ratios: Vec<f64>,
    ratio: f64,
}

fn summarize(rounds: &[Round]) -> Summary {
    let pick = |f: fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let ratios: Vec<f64> = rounds.iter().map(|r| r.link / r.baseline).collect();
    Summary {
        link: pick(|r| r.link).unwrap_or(0.0),
        baseline: pick(|r| r.baseline).unwrap_or(0.0),
        floor: pick(|r| r.floor).unwrap_or(0.0),
        ratio: median(&ratios).unwrap_or(0.0),
        ratios,
    }
}

/// Runs both comparisons in interleaved rounds and prints medians, ratios and verdicts.
pub fn run(o: &UdpCompareOpts) -> Result<(), PerfError> {
    super::check_size("--lat-size", o.lat_size)?;
    super::check_size("--bw-size", o.bw_size)?;
    if o.addr_a == o.addr_b {
        return Err(PerfError::Usage(format!(
            "--addr-a and --addr-b are both {}: each NIC's link needs its own address (e.g. 127.0.0.1 and 127.0.0.2)",
            o.addr_a
        )));
    }
    let n = usize::try_from(o.iters).unwrap_or(usize::MAX);
    let lat_size =
        usize::try_from(o.lat_size).map_err(|_| PerfError::TooLarge { size: o.lat_size })?;
    let bw_size =
        usize::try_from(o.bw_size).map_err(|_| PerfError::TooLarge { size: o.bw_size })?;
    let port = free_port(o.addr_a, o.addr_b)?;
    let (a, b) = (
        SocketAddr::new(o.addr_a, port),
        SocketAddr::new(o.addr_b, port),
    );
    let (rtt, bw) = (o.only != Some(Only::Bw), o.only != Some(Only::Rtt));
    let bw_iters = usize::try_from(o.bw_iters).unwrap_or(200);
    let depth = super::bw::effective_depth(o.bw_size, o.tx_depth, 1).0;
    let mut pair = UdpPair::new(a, b, bw_size.max(lat_size), depth)?;
    // The links hold `port`: the baselines take another one on the same two addresses.
    let base_port = free_port(o.addr_a, o.addr_b)?;
    let (ba, bb) = (
        SocketAddr::new(o.addr_a, base_port),
        SocketAddr::new(o.addr_b, base_port),
    );
    let (request, ack) =
        write_round_trip_lens(lat_size).ok_or(PerfError::TooLarge { size: o.lat_size })?;
    let seg = write_stream_segment_len(pair.mtu).ok_or(PerfError::TooLarge {
        size: pair.mtu as u64,
    })?;
    // The window the requester keeps (`requester::MAX_UNACKED_PSNS` packets, as rxe).
    let unacked = bypass_sim::transport::requester::MAX_UNACKED_PSNS.unsigned_abs();
    let window = u64::from(unacked) * seg as u64;
    let total = o.bw_size.saturating_mul(o.bw_iters);
    let (fa, fb) = (SocketAddr::new(o.addr_a, 0), SocketAddr::new(o.addr_b, 0));
    let bw_in = if bw {
        Some(bw_source(&mut pair, o.bw_size)?)
    } else {
        None
    };
    let mut rtt_rounds = Vec::new();
    let mut bw_rounds = Vec::new();
    // The bandwidth rounds first: after the two-thread round trips, TCP streaming reads lower
    // for the rest of the process (docs/perf.md), which would flatter the bandwidth ratio.
    // Within each comparison the rounds still interleave the link and its baseline.
    if let Some((bw_w, bw_src)) = &bw_in {
        for _ in 0..o.rounds {
            let mib = f64::from(1u32 << 20);
            let baseline = median(&tcp_stream_rates(bw_size, bw_iters, o.runs)?).unwrap_or(0.0);
            let mut rates = Vec::new();
            let mut floor = Vec::new();
            for _ in 0..o.runs {
                rates.push(write_bw_rate(
                    &mut pair,
                    (bw_w, bw_src.as_ref()),
                    bw_iters,
                    depth,
                )?);
                // The same bytes through the link's socket calls alone, in the same window
                // the requester keeps (rxe's RXE_MAX_UNACKED_PSNS packets), on fresh ports.
                floor.push(
                    segmented_stream_rate(fa, fb, seg, total, window)
                        .map_err(io("the segmented stream"))?,
                );
            }
            bw_rounds.push(Round {
                link: median(&rates).unwrap_or(0.0) / mib,
                baseline: baseline / mib,
                floor: median(&floor).unwrap_or(0.0) / mib,
            });
        }
    }
    if rtt {
        for _ in 0..o.rounds {
            let baseline = median_us(&udp_pingpong_rtts(ba, bb, lat_size, n)?);
            let floor = median_us(
                &link_pingpong_rtts(ba, bb, (request, ack), (n, WARMUP), o.rtt_threads)
                    .map_err(io("the link-shaped ping-pong"))?,
            );
            let link = median_us(&write_rtts(&mut pair, o.lat_size, n, o.rtt_threads)?);
            rtt_rounds.push(Round {
                link,
                baseline,
                floor,
            });
        }
    }
    println!(
        "bypass perf compare-udp: {a} <-> {b} (baselines on port {base_port}; medians of {} interleaved rounds)",
        o.rounds
    );
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    if rtt {
        let s = summarize(&rtt_rounds);
        println!(
            " {}-byte RDMA WRITE round trip over UDP : {:10.2} us",
            o.lat_size, s.link
        );
        println!(
            " {}-byte UDP busy-poll ping-pong         : {:10.2} us",
            o.lat_size, s.baseline
        );
        println!(
            " round-trip ratio                      : {:10.2} x  (median of the rounds' ratios; target <= {RTT_TARGET}: {})",
            s.ratio,
            verdict(s.ratio <= RTT_TARGET)
        );
        println!(" rounds' round-trip ratios: {}", ratio_list(&s.ratios, 2));
        println!(
            " its socket calls alone ({request} B, then {ack} B): {:10.2} us  ({:.2} x the ping-pong; the link above it {:.2} us)",
            s.floor,
            s.floor / s.baseline,
            s.link - s.floor
        );
    }
    if bw {
        let s = summarize(&bw_rounds);
        println!(
            " {} B RDMA WRITE bandwidth over UDP  : {:10.1} MiB/s (depth {depth}, {} run(s) a round)",
            o.bw_size, s.link, o.runs
        );
        println!(
            " TCP loopback streaming ({} B writes): {:10.1} MiB/s",
            o.bw_size, s.baseline
        );
        println!(
            " bandwidth ratio                       : {:10.2} x  (median of the rounds' ratios; target >= {BW_TARGET}: {})",
            s.ratio,
            verdict(s.ratio >= BW_TARGET)
        );
        println!(" rounds' bandwidth ratios: {}", ratio_list(&s.ratios, 2));
        println!(
            " its socket calls alone ({seg} B datagrams in segmented sends, {} KiB window): {:.1} MiB/s ({:.2} x TCP)",
            window >> 10,
            s.floor,
            s.floor / s.baseline
        );
    }
    for d in &pair.devs {
        if let Some(line) = d.link_summary() {
            println!(" {line}");
        }
    }
    Ok(())
}

fn median_us(ns: &[u64]) -> f64 {
    let v: Vec<f64> = ns.iter().map(|&x| x as f64 / 1000.0).collect();
    median(&v).unwrap_or(0.0)
}
