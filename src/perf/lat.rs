//! The latency half of the perf engine (`send-lat`, `write-lat`, `read-lat`, `atomic-lat`):
//! one operation in flight, timed per round trip.
//!
//! Owns: [`LatSpec`] / [`LatResult`] / [`measure_lat`] (the library entry point, also used
//! by `perf sweep`) and the ping-pong primitives [`ping`] and [`arrive`] the two-process
//! form shares. Must not build QPs (`flows`), compute statistics (`stats`) or print.
//!
//! The loops follow perftest (src/perftest_resources.c): `run_iter_lat_write` (WRITE `size`
//! bytes whose last byte is the iteration's tag, poll the send CQ for its completion, spin
//! on the last byte of the own buffer until the peer's answer with the same tag lands),
//! `run_iter_lat_send` (SEND, wait for the peer's SEND in a posted receive) and
//! `run_iter_lat` (READ / atomic: post one, poll its completion). Samples are consecutive
//! post-time differences over `rtt_factor` (2 for ping-pongs, 1 for READ/atomic). Here both
//! NICs' sides run in one thread, so the machine needs one core for it and one for the sim.

use std::time::{Duration, Instant};

use bypass_verbs::Mtu;
use serde::Serialize;

use super::PerfError;
use super::flows::{Queue, Side, SideSpec, Waiter};
use super::local::LocalPair;
use super::ops::{Conn, Verb, mismatch};
use crate::baseline::elapsed_ns;
use crate::counters_view::Labelled;
use crate::stats::LatencyReport;

/// Round trips run before the measured ones (caches, first-touch of the rings).
pub const WARMUP: usize = 16;

/// The send queue depth of a latency side: one operation is in flight (perftest
/// `DEF_TX_LAT` 1); a few more entries so that the loop never meets a full queue.
pub const LAT_DEPTH: u32 = 4;

/// What a latency run does. Build it with `LatSpec { size: 8, ..LatSpec::default() }`.
#[derive(Debug, Clone, Serialize)]
pub struct LatSpec {
    /// The operation (default RDMA WRITE).
    pub verb: Verb,
    /// The transport (default RC).
    pub conn: Conn,
    /// Message size (atomics: always 8).
    pub size: u64,
    /// Round trips (ignored with `duration`); at least 5.
    pub iters: u64,
    /// Run this long instead (perftest `-D`: only the average is reported).
    pub duration: Option<Duration>,
    /// Block on a completion channel for completions instead of spinning (`-e`).
    pub events: bool,
    /// Fabric seed.
    pub seed: u64,
    /// Largest message sent inline (`None`: perftest's default for the verb).
    pub inline: Option<u32>,
    /// Path MTU (`None`: the port's active MTU).
    #[serde(skip)]
    pub mtu: Option<Mtu>,
    /// Check the data of every message.
    pub check: bool,
}

impl Default for LatSpec {
    fn default() -> Self {
        Self {
            verb: Verb::Write,
            conn: Conn::Rc,
            size: 2,
            iters: 1000,
            duration: None,
            events: false,
            seed: 1,
            inline: None,
            mtu: None,
            check: false,
        }
    }
}

/// What a latency run measured.
#[derive(Debug, Clone)]
pub struct LatResult {
    /// Message size.
    pub size: u64,
    /// Round trips measured.
    pub iterations: u64,
    /// perftest's row; `None` in a duration run (perftest prints only the average there).
    pub report: Option<LatencyReport>,
    /// Mean one-way latency, µs.
    pub t_avg_us: f64,
    /// Round trips per second.
    pub tps: f64,
    /// CPU utilisation over the run, percent (`None`: /proc/stat unreadable).
    pub cpu_util: Option<f64>,
    /// The devices' counters after the run.
    pub counters: Vec<Labelled>,
}

impl LatSpec {
    /// Refuses combinations perftest refuses, with the fix.
    pub fn validate(&self) -> Result<(), PerfError> {
        self.verb.check_conn(self.conn).map_err(PerfError::Usage)?;
        super::check_sizes(&[self.verb.size(self.size)])?;
        super::check_iters(self.iters)
    }

    /// The result of an iteration run from its post times (ns).
    pub fn result(
        &self,
        size: u64,
        posted: &[u64],
        cpu_util: Option<f64>,
        counters: Vec<Labelled>,
    ) -> Result<LatResult, PerfError> {
        let r = LatencyReport::from_post_times(size, self.iters, posted, self.verb.rtt_factor())?;
        let span = posted.last().copied().unwrap_or(0) - posted.first().copied().unwrap_or(0);
        let rounds = posted.len().saturating_sub(1).max(1) as f64;
        Ok(LatResult {
            size,
            iterations: self.iters,
            t_avg_us: r.t_avg,
            tps: rounds / (span.max(1) as f64 / 1e9),
            report: Some(r),
            cpu_util,
            counters,
        })
    }

    /// The side this spec builds for `size`-byte messages.
    pub fn side(&self, size: u64, net: bool) -> SideSpec {
        SideSpec {
            verb: self.verb,
            conn: self.conn,
            size: size as usize,
            qps: 1,
            depth: LAT_DEPTH,
            rx_depth: if self.verb.needs_recv() { LAT_DEPTH } else { 0 },
            inline: self
                .inline
                .unwrap_or_else(|| self.verb.default_inline(self.conn)),
            events: self.events,
            net,
            // perftest refuses CUDA for WRITE latency; the tools refuse --use-cuda for it.
            cuda: None,
        }
    }
}

/// Iteration `i`'s tag: 1..=255, never the same twice in a row, so a stale byte never
/// matches.
pub fn tag(i: usize) -> u8 {
    (i % 255) as u8 + 1
}

/// Posts operation `k` of `size` bytes (signalled, tagged) on QP 0 and waits for its completion (perftest
/// polls one completion per post). With `check`, a READ's data is compared with what the
/// peer's buffer holds; the first bad byte is returned.
pub fn ping(
    side: &mut Side,
    size: usize,
    k: u64,
    tag: u8,
    check: bool,
) -> Result<Option<(usize, u8, u8)>, PerfError> {
    let verb = side.spec.verb;
    side.post(0, k, size, Some(tag), true, check)?;
    let mut w = Waiter::new("the completion of a latency operation");
    let mut bad = None;
    loop {
        let n = side.poll_sends(1, |_, _, bufs| {
            if check && verb == Verb::Read {
                for l in bufs.into_leases() {
                    bad = bad.or(mismatch(l.as_slice().get(..size).unwrap_or(&[]), 0));
                }
            }
            Ok(())
        })?;
        if n > 0 {
            return Ok(bad);
        }
        w.idle(side, Queue::Send)?;
    }
}

/// Waits until the peer's message with `tag` has arrived: WRITE, its last byte in QP 0's
/// slot; SEND, a receive. With `check`, message `k`'s bytes (all but the tag) are compared
/// with its pattern; the first bad byte is returned.
pub fn arrive(
    side: &mut Side,
    size: usize,
    k: u64,
    tag: u8,
    check: bool,
) -> Result<Option<(usize, u8, u8)>, PerfError> {
    let mut w = Waiter::new("the peer's message to arrive");
    if side.spec.verb == Verb::Send {
        let mut bad = None;
        loop {
            let n = side.poll_recvs(|_, _, data| {
                bad = bad.or(check_tagged(data, k, tag, check));
                Ok(())
            })?;
            if n > 0 {
                return Ok(bad);
            }
            w.idle(side, Queue::Recv)?;
        }
    }
    let off = size.saturating_sub(1);
    let mut b = [0u8; 1];
    loop {
        side.target.read(off, &mut b)?;
        if b[0] == tag {
            break;
        }
        // The WRITE raises no completion here: spin on memory (perftest does too).
        w.idle_memory(side)?;
    }
    if !check {
        return Ok(None);
    }
    let mut got = vec![0u8; size];
    side.target.read(0, &mut got)?;
    Ok(check_tagged(&got, k, tag, true))
}

/// Message `k` with its last byte replaced by `tag`: the first differing byte.
fn check_tagged(data: &[u8], k: u64, tag: u8, check: bool) -> Option<(usize, u8, u8)> {
    if !check {
        return None;
    }
    let (body, last) = match data.split_last() {
        Some((l, body)) => (body, *l),
        None => return None,
    };
    mismatch(body, k).or((last != tag).then_some((body.len(), last, tag)))
}

/// Runs one latency measurement on two simulated NICs in this process.
pub fn measure_lat(spec: &LatSpec) -> Result<LatResult, PerfError> {
    spec.validate()?;
    let size = spec.verb.size(spec.size);
    let mut pair = LocalPair::new(spec.seed, spec.side(size, false), spec.mtu)?;
    let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
    let n = match spec.duration {
        Some(_) => 0,
        None => {
            usize::try_from(spec.iters).map_err(|_| PerfError::TooLarge { size: spec.iters })?
        }
    };
    let mut posted = vec![0u64; n];
    let deadline = spec
        .duration
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let cpu = super::cpu::Sampler::start();
    let t0 = Instant::now();
    let (mut total, mut first, mut last) = (0usize, None, 0u64);
    let check = spec.check;
    let fail = |(offset, got, expected)| PerfError::DataCheck {
        size,
        offset,
        got,
        expected,
    };
    for i in 0.. {
        let now = elapsed_ns(t0);
        if i >= WARMUP {
            let m = i - WARMUP;
            match deadline {
                Some(d) => {
                    let f = *first.get_or_insert(now);
                    if now - f >= d {
                        (last, total) = (now, i);
                        break;
                    }
                }
                None if m >= n => {
                    total = i;
                    break;
                }
                None => {}
            }
            if let Some(p) = posted.get_mut(m) {
                *p = now;
            }
        }
        let (t, k) = (tag(i), i as u64);
        let (a, b) = (&mut pair.a, &mut pair.b);
        if let Some(bad) = ping(a, bytes, k, t, check)? {
            return Err(fail(bad));
        }
        if matches!(spec.verb, Verb::Send | Verb::Write) {
            if let Some(bad) = arrive(b, bytes, k, t, check)? {
                return Err(fail(bad));
            }
            if let Some(bad) = ping(b, bytes, k, t, check)? {
                return Err(fail(bad));
            }
            if let Some(bad) = arrive(a, bytes, k, t, check)? {
                return Err(fail(bad));
            }
        }
    }
    let cpu_util = cpu.and_then(|c| c.stop());
    if let (true, Verb::Atomic(_)) = (check, spec.verb) {
        let got = pair.b.target.read_u64_be(0)?;
        let want = total as u64;
        if got != want {
            return Err(PerfError::AtomicCheck {
                qp: 0,
                got,
                expected: want,
            });
        }
    }
    let counters = pair.counters();
    let rtt = f64::from(spec.verb.rtt_factor());
    match deadline {
        None => spec.result(size, &posted, cpu_util, counters),
        Some(_) => {
            let span = last.saturating_sub(first.unwrap_or(0)).max(1) as f64;
            let measured = total.saturating_sub(WARMUP) as u64;
            let rounds = measured.max(1) as f64;
            Ok(LatResult {
                size,
                iterations: measured,
                t_avg_us: span / rounds / 1000.0 / rtt,
                tps: rounds / (span / 1e9),
                report: None,
                cpu_util,
                counters,
            })
        }
    }
}

/// The WRITE ping-pong `perf compare` times: `iters` client post timestamps (ns).
pub fn write_lat_post_times(seed: u64, size: u64, iters: u64) -> Result<Vec<u64>, PerfError> {
    let spec = LatSpec {
        seed,
        size,
        iters,
        ..LatSpec::default()
    };
    spec.validate()?;
    let n = usize::try_from(iters).map_err(|_| PerfError::TooLarge { size: iters })?;
    let mut pair = LocalPair::new(seed, spec.side(size, false), None)?;
    let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
    let mut posted = vec![0u64; n];
    let t0 = Instant::now();
    for i in 0..(n + WARMUP) {
        if let Some(slot) = i.checked_sub(WARMUP).and_then(|k| posted.get_mut(k)) {
            *slot = elapsed_ns(t0);
        }
        let (t, k) = (tag(i), i as u64);
        ping(&mut pair.a, bytes, k, t, false)?;
        arrive(&mut pair.b, bytes, k, t, false)?;
        ping(&mut pair.b, bytes, k, t, false)?;
        arrive(&mut pair.a, bytes, k, t, false)?;
    }
    Ok(posted)
}
