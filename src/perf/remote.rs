//! `bypass perf write-lat|write-bw` between two processes, each a simulated NIC on a UDP
//! socket (`-d udp:ADDR[:PORT]`): server without HOST, client with it, as perftest.
//!
//! Owns: the out-of-band protocol of the two-process form (JSON over TCP, port `-p`), the
//! two-process loops and the data check. Must not compute statistics (`crate::stats`) or
//! print tables (`super` does, with the same headers as the in-process form).
//!
//! Protocol: the client connects and sends its [`Hello`] (QP endpoint, WRITE target, sizes,
//! iterations); the server answers with its own; each checks that the other runs the same
//! test and connects its QP. Then per size:
//! - write-lat: perftest `run_iter_lat_write`: the client WRITEs `size` bytes ending in the
//!   iteration's tag into the server's buffer and spins until the server's answer (same tag)
//!   lands in its own; the server spins, then answers. Both sides time their posts.
//! - write-bw: perftest `run_iter_bw`: the client streams `iters` WRITEs to the server's
//!   buffer (at most `tx_depth` outstanding, every `cq_mod`-th signalled). With `--check`
//!   WRITE `k` carries [`pattern`]`(k)`; after the last completion (the server's NIC
//!   acknowledged every byte) the client tells the server, which checks that its buffer holds
//!   exactly the last WRITE's bytes.

use std::time::{Duration, Instant};

use bypass_verbs::exchange::{ExchangeServer, exchange_as_client};
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{QpEndpoint, RemoteBuffer};
use clap::Args;
use serde::{Deserialize, Serialize};

use super::pair::{End, RigSpec, WriteSpec};
use super::{PerfError, lat::WARMUP};
use crate::baseline::elapsed_ns;
use crate::device::{NetDevice, open_net};
use crate::stats::{BwReport, BwUnits, LatencyReport};

/// How long each out-of-band step may take (the server waits this long for its client).
const OOB_TIMEOUT: Duration = Duration::from_secs(120);

/// Options of the two-process form.
#[derive(Args, Debug, Clone, Default)]
pub struct NetOpts {
    /// The server to connect to (two-process form, with -d udp:…); without it, with
    /// -d udp:…, this side is the server.
    pub host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// write-bw, two-process form: the server checks that its buffer holds the last WRITE's
    /// bytes exactly (every WRITE carries its own pattern).
    #[arg(long)]
    pub check: bool,
    /// Two-process form: record every packet the UDP link sends and receives in this pcap
    /// file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
}

/// What each side tells the other before the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hello {
    /// The QP to connect to.
    qp: QpEndpoint,
    /// The buffer the peer WRITEs into.
    target: RemoteBuffer,
    /// The test (`write-lat` / `write-bw`).
    test: String,
    /// Message sizes, in order.
    sizes: Vec<u64>,
    /// Iterations per size.
    iters: u64,
}

/// What client and server swap after each size (the client: its run is over; the server:
/// it saw that).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sync {
    size: u64,
    iters: u64,
}

/// Byte `j` of WRITE `k` under `--check` (never the same for two consecutive WRITEs).
pub fn pattern(k: u64, j: usize) -> u8 {
    (k.wrapping_mul(131) as u8).wrapping_add((j as u8).wrapping_mul(7)) ^ (j >> 8) as u8
}

/// One side of a two-process run, connected.
struct Side {
    dev: NetDevice,
    end: End,
    peer: Hello,
    server: Option<ExchangeServer>,
    host: Option<String>,
    port: u16,
}

fn oob(e: bypass_verbs::exchange::ExchangeError) -> PerfError {
    PerfError::Oob(e.to_string())
}

impl Side {
    fn open(
        c: &super::CommonOpts,
        net: &NetOpts,
        test: &str,
        sizes: &[u64],
        iters: u64,
        depth: u32,
    ) -> Result<Self, PerfError> {
        let dev = open_net(&c.device, c.seed, "perf", net.pcap.as_deref())?;
        let max = sizes.iter().copied().max().unwrap_or(1);
        let size = usize::try_from(max).map_err(|_| PerfError::TooLarge { size: max })?;
        let mut end = End::new(
            &dev.ctx,
            RigSpec {
                seed: c.seed,
                size,
                depth,
            },
        )?;
        let hello = Hello {
            qp: end.qp.endpoint()?,
            target: end.target.remote(),
            test: test.to_owned(),
            sizes: sizes.to_vec(),
            iters,
        };
        let (peer, server) = match &net.host {
            Some(host) => {
                let peer: Hello =
                    exchange_as_client((host.as_str(), net.port), &hello, OOB_TIMEOUT)
                        .map_err(oob)?;
                (peer, None)
            }
            None => {
                let server = ExchangeServer::bind(("0.0.0.0", net.port)).map_err(oob)?;
                let peer: Hello = server.exchange(&hello, OOB_TIMEOUT).map_err(oob)?;
                (peer, Some(server))
            }
        };
        if peer.test != hello.test || peer.sizes != hello.sizes || peer.iters != hello.iters {
            return Err(PerfError::Mismatch(format!(
                "this side runs {} -s {:?} -n {}, the peer {} -s {:?} -n {}: give both sides the same test, sizes and iterations",
                hello.test, hello.sizes, hello.iters, peer.test, peer.sizes, peer.iters
            )));
        }
        end.qp.connect(&peer.qp)?;
        Ok(Side {
            dev,
            end,
            peer,
            server,
            host: net.host.clone(),
            port: net.port,
        })
    }

    fn remote(&self, size: u64) -> Result<RemoteBuffer, PerfError> {
        self.peer
            .target
            .slice(0, size)
            .ok_or(PerfError::TooLarge { size })
    }

    /// A one-line account of the link, for stderr.
    fn link_summary(&self) -> String {
        self.dev
            .link_summary()
            .unwrap_or_else(|| "no link counters (a real NIC)".to_owned())
    }
}

/// The device line of the two-process form.
pub fn describe(c: &super::CommonOpts, net: &NetOpts) -> String {
    match &net.host {
        Some(h) => format!(
            "{} ({}), client of {h}:{}",
            c.device,
            c.device.kind(),
            net.port
        ),
        None => format!(
            "{} ({}), server on TCP port {}",
            c.device,
            c.device.kind(),
            net.port
        ),
    }
}

/// write-lat, two processes: returns one report per size.
pub fn write_lat(
    c: &super::CommonOpts,
    net: &NetOpts,
    sizes: &[u64],
    iters: u64,
    mut row: impl FnMut(&LatencyReport),
) -> Result<(), PerfError> {
    let mut side = Side::open(c, net, "write-lat", sizes, iters, 4)?;
    let client = side.host.is_some();
    let n = usize::try_from(iters).map_err(|_| PerfError::TooLarge { size: iters })?;
    for &size in sizes {
        let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
        let w = WriteSpec {
            remote: side.remote(size)?,
            size: bytes,
            max_inline: side.end.qp.options().caps.max_inline_data as usize,
        };
        let mut posted = vec![0u64; n];
        let mut outstanding = 0u32;
        let t0 = Instant::now();
        for i in 0..(n + WARMUP) {
            let tag = (i % 255) as u8 + 1;
            if !client {
                spin_yield(&side.end, bytes, tag)?;
            }
            if let Some(slot) = i.checked_sub(WARMUP).and_then(|k| posted.get_mut(k)) {
                *slot = elapsed_ns(t0);
            }
            let (done, _) = side.end.drain()?;
            outstanding = outstanding.saturating_sub(done as u32);
            while outstanding >= 4 {
                let (done, _) = wait_yield(&mut side.end)?;
                outstanding = outstanding.saturating_sub(done as u32);
            }
            side.end.post_write(&w, tag, true, i as u64)?;
            outstanding += 1;
            if client {
                spin_yield(&side.end, bytes, tag)?;
            }
        }
        // Zero the buffer for the next size (its tags start again at 1, and a stale byte at
        // its tag position must not look like one).
        side.end
            .target
            .write(0, &vec![0u8; side.end.target.len()])?;
        sync(&side, size, iters)?;
        row(&LatencyReport::from_post_times(size, iters, &posted, 2)?);
    }
    eprintln!("{}", side.link_summary());
    Ok(())
}

/// The client and server meet after each size (a TCP round trip), so that neither starts the
/// next size while the other still spins on the last.
fn sync(side: &Side, size: u64, iters: u64) -> Result<(), PerfError> {
    match (&side.host, &side.server) {
        (Some(host), _) => {
            let _: Sync = exchange_as_client(
                (host.as_str(), side.port),
                &Sync { size, iters },
                OOB_TIMEOUT,
            )
            .map_err(oob)?;
            Ok(())
        }
        (None, Some(server)) => {
            let got: Sync = server
                .exchange(&Sync { size, iters }, OOB_TIMEOUT)
                .map_err(oob)?;
            if got.size != size || got.iters != iters {
                return Err(PerfError::Mismatch(format!(
                    "the client finished {} × {} bytes while this server expected {iters} × {size}",
                    got.iters, got.size
                )));
            }
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

/// What the server of a bandwidth run prints per size.
pub enum BwRow {
    /// The client's measurement.
    Report(BwReport),
    /// The server's data check: `None` when not asked, else the first differing byte.
    Checked {
        /// The size.
        size: u64,
        /// `Ok` or the first bad byte (offset, got, expected).
        result: Option<Result<(), (usize, u8, u8)>>,
    },
}

/// write-bw, two processes.
#[allow(clippy::too_many_arguments)]
pub fn write_bw(
    c: &super::CommonOpts,
    net: &NetOpts,
    sizes: &[u64],
    iters: u64,
    tx_depth: u32,
    cq_mod: u32,
    units: BwUnits,
    mut row: impl FnMut(BwRow),
) -> Result<(), PerfError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let (depth, _) = super::bw::effective_depth(max, tx_depth, cq_mod);
    let mut side = Side::open(c, net, "write-bw", sizes, iters, depth)?;
    let n = usize::try_from(iters).map_err(|_| PerfError::TooLarge { size: iters })?;
    for &size in sizes {
        let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
        if side.host.is_none() {
            // Server: wait for the client's "done", then look at what landed.
            sync(&side, size, iters)?;
            let result = net
                .check
                .then(|| check_buffer(&side.end, bytes, iters.saturating_sub(1)))
                .transpose()?;
            row(BwRow::Checked { size, result });
            continue;
        }
        let (depth, cq_mod) = super::bw::effective_depth(size, tx_depth, cq_mod);
        let remote = side.remote(size)?;
        let mut posted = vec![0u64; n];
        let mut completed = vec![0u64; n];
        let (mut scnt, mut ccnt) = (0usize, 0usize);
        let t0 = Instant::now();
        while ccnt < n {
            while scnt < n && scnt - ccnt < depth as usize {
                let signaled = (scnt + 1) % cq_mod as usize == 0 || scnt + 1 == n;
                if let Some(p) = posted.get_mut(scnt) {
                    *p = elapsed_ns(t0);
                }
                post_patterned(
                    &mut side.end,
                    remote,
                    bytes,
                    scnt as u64,
                    signaled,
                    net.check,
                )?;
                scnt += 1;
            }
            let (_, last) = wait_yield(&mut side.end)?;
            let now = elapsed_ns(t0);
            if let Some(last) = last {
                let upto = (last as usize + 1).min(n);
                for c in completed.iter_mut().take(upto).skip(ccnt) {
                    *c = now;
                }
                ccnt = ccnt.max(upto);
            }
        }
        sync(&side, size, iters)?;
        row(BwRow::Report(BwReport::from_times(
            size,
            &posted,
            &completed,
            cq_mod as usize,
            1,
            units,
        )?));
    }
    eprintln!("{}", side.link_summary());
    Ok(())
}

/// Posts WRITE `k` of `bytes` from a pool lease: [`pattern`]`(k)` when checking, else the
/// lease as it is (perftest sends whatever its buffer holds).
fn post_patterned(
    end: &mut End,
    remote: RemoteBuffer,
    bytes: usize,
    k: u64,
    signaled: bool,
    check: bool,
) -> Result<(), PerfError> {
    let mut lease = end.pool.lease(bytes)?;
    if check {
        for (j, b) in lease.as_mut_slice().iter_mut().enumerate() {
            *b = pattern(k, j);
        }
    }
    let wr = SendWr::new(k, SendOp::Write(remote)).sge(lease);
    let wr = if signaled { wr } else { wr.unsignaled() };
    end.qp.post_send(wr)?;
    Ok(())
}

/// Compares the first `bytes` of the server's buffer with WRITE `last`'s pattern.
fn check_buffer(
    end: &End,
    bytes: usize,
    last: u64,
) -> Result<Result<(), (usize, u8, u8)>, PerfError> {
    let mut got = vec![0u8; bytes];
    end.target.read(0, &mut got)?;
    Ok(
        match got
            .iter()
            .enumerate()
            .find(|&(j, &b)| b != pattern(last, j))
        {
            None => Ok(()),
            Some((j, &b)) => Err((j, b, pattern(last, j))),
        },
    )
}

/// Waits until the last byte of `end`'s first `size` bytes is `tag`, pumping the device
/// (`Context::progress`: on a UDP device, this thread reads the socket and runs the NIC) and
/// yielding the core between reads (cores may be few).
pub(super) fn spin_yield(end: &End, size: usize, tag: u8) -> Result<(), PerfError> {
    let off = size.saturating_sub(1);
    let mut b = [0u8; 1];
    let t0 = Instant::now();
    loop {
        // Pump the link in this thread first (a UDP device: read the socket, run the NIC,
        // send what it answers): what the peer sent is usually waiting already.
        end.ctx.progress();
        end.target.read(off, &mut b)?;
        if b[0] == tag {
            return Ok(());
        }
        if t0.elapsed() > super::pair::STALL {
            return Err(PerfError::Stalled {
                what: "the peer's RDMA WRITE to land",
                after: super::pair::STALL,
                seen: format!("QP {:#x}", end.qp.qpn()),
            });
        }
        std::thread::yield_now();
    }
}

/// [`End::wait_some`], pumping the device and yielding the core between polls (as
/// [`spin_yield`]).
pub(super) fn wait_yield(end: &mut End) -> Result<(usize, Option<u64>), PerfError> {
    let t0 = Instant::now();
    loop {
        let got = end.drain()?;
        if got.0 > 0 {
            return Ok(got);
        }
        end.ctx.progress();
        let got = end.drain()?;
        if got.0 > 0 {
            return Ok(got);
        }
        if t0.elapsed() > super::pair::STALL {
            return Err(PerfError::Stalled {
                what: "a send completion",
                after: super::pair::STALL,
                seen: format!(
                    "QP {:#x} with {} send WQEBBs outstanding",
                    end.qp.qpn(),
                    end.qp.sends_outstanding()
                ),
            });
        }
        std::thread::yield_now();
    }
}
