//! The bandwidth half of the perf engine (`send-bw`, `write-bw`, `read-bw`, `atomic-bw`):
//! stream one verb over one or `-q N` QPs, one way or both (`-b`), for `-n` messages or
//! `-D` seconds, and report perftest's numbers.
//!
//! Owns: [`BwSpec`] / [`BwResult`] / [`measure_bw`] (the library entry point, also used by
//! `perf sweep`), and [`Stream`], the streaming loop shared with the two-process form.
//! Must not build QPs (`flows`), compute statistics (`stats`) or print.
//!
//! The loop follows perftest `run_iter_bw` / `run_iter_bw_server` / `run_iter_bi`
//! (src/perftest_resources.c): per QP keep up to `tx_depth` operations outstanding, signal
//! every `cq_mod`-th (and the last), stamp `tposted[totscnt]` at each post and
//! `tcompleted[totccnt]` for every message a polled completion covers, counting over all
//! QPs. Without `--check` every SEND/WRITE reads one shared local buffer, as perftest's do.

use std::time::{Duration, Instant};

use bypass_verbs::Mtu;
use serde::Serialize;

use super::PerfError;
use super::flows::{Queue, Side, SideSpec, Waiter, fit_depth};
use super::local::LocalPair;
use super::ops::{Conn, Verb, mismatch};
use crate::baseline::elapsed_ns;
use crate::counters_view::Labelled;
use crate::stats::{BwReport, BwUnits};

/// What a bandwidth run does. Build it with `BwSpec { size: 4096, ..BwSpec::default() }`.
#[derive(Debug, Clone, Serialize)]
pub struct BwSpec {
    /// The operation (default RDMA WRITE).
    pub verb: Verb,
    /// The transport (default RC).
    pub conn: Conn,
    /// Message size in bytes (atomics: always 8).
    pub size: u64,
    /// Messages in all, spread over the QPs (ignored with `duration`).
    pub iters: u64,
    /// Run this long instead of `iters` messages (perftest `-D`).
    pub duration: Option<Duration>,
    /// Operations outstanding per QP (capped so that the buffers fit 64 MiB).
    pub tx_depth: u32,
    /// Signal every `cq_mod`-th operation.
    pub cq_mod: u32,
    /// QPs.
    pub qps: u32,
    /// Block on a completion channel instead of spinning (perftest `-e`).
    pub events: bool,
    /// Fabric seed.
    pub seed: u64,
    /// Both directions at once (perftest `-b`).
    pub bidirectional: bool,
    /// Largest message sent inline (`None`: perftest's default for the verb).
    pub inline: Option<u32>,
    /// Path MTU (`None`: the port's active MTU).
    #[serde(skip)]
    pub mtu: Option<Mtu>,
    /// Check the data that landed.
    pub check: bool,
    /// Units of the report's bandwidth columns.
    #[serde(skip)]
    pub units: BwUnits,
    /// Target and sources in this CUDA device's memory (`--use-cuda`).
    pub cuda: Option<u32>,
}

impl Default for BwSpec {
    fn default() -> Self {
        Self {
            verb: Verb::Write,
            conn: Conn::Rc,
            size: 65536,
            iters: 5000,
            duration: None,
            tx_depth: 128,
            cq_mod: 100,
            qps: 1,
            events: false,
            seed: 1,
            bidirectional: false,
            inline: None,
            mtu: None,
            check: false,
            units: BwUnits::MibPerSec,
            cuda: None,
        }
    }
}

/// What a bandwidth run measured.
#[derive(Debug, Clone)]
#[allow(dead_code)] // the library result: `perf sweep` and the tests read what the CLI does not
pub struct BwResult {
    /// Message size.
    pub size: u64,
    /// Messages completed, all QPs and directions.
    pub messages: u64,
    /// Bytes moved (messages × size).
    pub bytes: u64,
    /// From the first post to the last completion.
    pub seconds: f64,
    /// Average bandwidth in Gb/s (10^9 bit/s).
    pub gbps: f64,
    /// Average message rate in millions per second.
    pub mpps: f64,
    /// perftest's row (peak, average, message rate in `units`).
    pub report: BwReport,
    /// CPU utilisation over the run, percent of all CPUs (`None`: /proc/stat unreadable).
    pub cpu_util: Option<f64>,
    /// The devices' counters after the run (port and per QP).
    pub counters: Vec<Labelled>,
    /// The operations the loop used per QP (`tx_depth` after the memory cap).
    pub depth: u32,
}

/// Post and completion timestamps (ns) of one single-QP run (`perf compare`).
pub struct BwTimes {
    /// `tcompleted[j]`.
    pub completed: Vec<u64>,
    /// The moderation used.
    pub cq_mod: u32,
}

/// The depth and moderation a single-QP run uses for `size`.
pub fn effective_depth(size: u64, tx_depth: u32, cq_mod: u32) -> (u32, u32) {
    fit_depth(size, 1, tx_depth, cq_mod)
}

impl BwSpec {
    /// Refuses option combinations perftest refuses, with the fix.
    pub fn validate(&self) -> Result<(), PerfError> {
        self.verb.check_conn(self.conn).map_err(PerfError::Usage)?;
        super::check_sizes(&[self.verb.size(self.size)])?;
        super::check_iters(self.iters)?;
        if self.qps == 0 || self.qps > 256 {
            return Err(PerfError::Usage(format!(
                "-q {}: run 1 to 256 QPs",
                self.qps
            )));
        }
        if self.duration.is_none() && self.iters < u64::from(self.qps) {
            return Err(PerfError::Usage(format!(
                "-n {} over -q {}: give every QP at least one message (-n ≥ -q)",
                self.iters, self.qps
            )));
        }
        Ok(())
    }

    /// The side this spec builds, for messages of `size` bytes.
    pub fn side(&self, size: u64, net: bool) -> SideSpec {
        let (depth, _) = fit_depth(size, self.qps, self.tx_depth, self.cq_mod);
        let rx = fit_depth(size + 40, self.qps, depth.max(512), 1).0;
        SideSpec {
            verb: self.verb,
            conn: self.conn,
            size: size as usize,
            qps: self.qps,
            depth,
            rx_depth: if self.verb.needs_recv() { rx } else { 0 },
            inline: self
                .inline
                .unwrap_or_else(|| self.verb.default_inline(self.conn)),
            events: self.events,
            net,
            cuda: self.cuda,
        }
    }
}

/// Runs one bandwidth measurement on two simulated NICs in this process.
pub fn measure_bw(spec: &BwSpec) -> Result<BwResult, PerfError> {
    spec.validate()?;
    let size = spec.verb.size(spec.size);
    let side = spec.side(size, false);
    let mut pair = LocalPair::new(spec.seed, side, spec.mtu)?;
    let (depth, cq_mod) = fit_depth(size, spec.qps, spec.tx_depth, spec.cq_mod);
    let mut fwd = Stream::new(spec, depth, cq_mod);
    let mut back = spec.bidirectional.then(|| Stream::new(spec, depth, cq_mod));
    let cpu = super::cpu::Sampler::start();
    let t0 = Instant::now();
    let mut w = Waiter::new("a completion of the stream");
    let (a, b) = (&mut pair.a, &mut pair.b);
    loop {
        let mut moved = fwd.receive(b, t0)? > 0;
        moved |= fwd.step(a, Some(&b.recv_posted), t0)?;
        if let Some(bk) = back.as_mut() {
            moved |= bk.receive(a, t0)? > 0;
            moved |= bk.step(b, Some(&a.recv_posted), t0)?;
        }
        if fwd.finished() && back.as_ref().is_none_or(Stream::finished) {
            break;
        }
        if moved {
            w.reset();
        } else if fwd.in_flight() {
            w.idle(a, Queue::Send)?;
        } else if back.as_ref().is_some_and(Stream::in_flight) {
            w.idle(b, Queue::Send)?;
        } else if !fwd.finished() {
            w.idle(b, Queue::Recv)?;
        } else {
            w.idle(a, Queue::Recv)?;
        }
    }
    // Every SEND that completed has its receive (credits saw to that): take the last ones,
    // so that each is counted and, with --check, checked.
    fwd.finish_receives(b, t0)?;
    if let Some(bk) = back.as_mut() {
        bk.finish_receives(a, t0)?;
    }
    let cpu_util = cpu.and_then(|c| c.stop());
    fwd.check_landed(b)?;
    if let Some(bk) = &back {
        bk.check_landed(a)?;
    }
    let mut report = fwd.report(spec.units)?;
    let mut messages = fwd.tot_done;
    let mut seconds = fwd.seconds();
    if let Some(bk) = &back {
        let r = bk.report(spec.units)?;
        report.bw_peak += r.bw_peak;
        report.bw_avg += r.bw_avg;
        report.msg_rate_mpps += r.msg_rate_mpps;
        messages += bk.tot_done;
        seconds = seconds.max(bk.seconds());
    }
    let counters = pair.counters();
    Ok(BwResult::new(
        size, messages, seconds, report, cpu_util, counters, depth,
    ))
}

impl BwResult {
    /// The result of `messages` of `size` bytes in `seconds`.
    pub fn new(
        size: u64,
        messages: u64,
        seconds: f64,
        report: BwReport,
        cpu_util: Option<f64>,
        counters: Vec<Labelled>,
        depth: u32,
    ) -> Self {
        let bytes = size.saturating_mul(messages);
        let secs = seconds.max(1e-9);
        Self {
            size,
            messages,
            bytes,
            seconds,
            gbps: bytes as f64 * 8.0 / secs / 1e9,
            mpps: messages as f64 / secs / 1e6,
            report,
            cpu_util,
            counters,
            depth,
        }
    }
}

/// The single-QP WRITE stream `perf compare` measures: returns its timestamps.
pub fn write_bw_times(
    seed: u64,
    size: u64,
    iters: u64,
    tx_depth: u32,
    cq_mod: u32,
) -> Result<BwTimes, PerfError> {
    let spec = BwSpec {
        seed,
        size,
        iters,
        tx_depth,
        cq_mod,
        ..BwSpec::default()
    };
    spec.validate()?;
    let side = spec.side(size, false);
    let mut pair = LocalPair::new(seed, side, None)?;
    let (depth, cq_mod) = effective_depth(size, tx_depth, cq_mod);
    let mut s = Stream::new(&spec, depth, cq_mod);
    let t0 = Instant::now();
    let mut w = Waiter::new("a WRITE completion");
    while !s.finished() {
        if s.step(&mut pair.a, None, t0)? {
            w.reset();
        } else {
            w.idle(&mut pair.a, Queue::Send)?;
        }
    }
    Ok(BwTimes {
        completed: s.completed,
        cq_mod,
    })
}

/// One direction of a stream: what each QP may still post, and the timestamps.
pub struct Stream {
    verb: Verb,
    size: usize,
    depth: u32,
    cq_mod: u32,
    check: bool,
    /// Messages each QP sends (`u64::MAX` until a duration run's time is up).
    quota: Vec<u64>,
    sent: Vec<u64>,
    done: Vec<u64>,
    deadline_ns: Option<u64>,
    /// `tposted` / `tcompleted` over all QPs (empty in a duration run).
    posted: Vec<u64>,
    completed: Vec<u64>,
    tot_sent: u64,
    tot_done: u64,
    first_post: Option<u64>,
    last_done: u64,
    /// The first bad byte a check found: (offset, got, expected).
    bad: Option<(usize, u8, u8)>,
}

impl Stream {
    /// A stream of `spec` at `depth` per QP, signalling every `cq_mod`-th operation.
    pub fn new(spec: &BwSpec, depth: u32, cq_mod: u32) -> Self {
        let qps = spec.qps.max(1) as usize;
        let (quota, n) = match spec.duration {
            Some(_) => (vec![u64::MAX; qps], 0),
            None => {
                let per = spec.iters / qps as u64;
                let extra = (spec.iters % qps as u64) as usize;
                let q = (0..qps).map(|i| per + u64::from(i < extra)).collect();
                (q, usize::try_from(spec.iters).unwrap_or(0))
            }
        };
        Self {
            verb: spec.verb,
            size: spec.verb.size(spec.size) as usize,
            depth,
            cq_mod,
            check: spec.check,
            quota,
            sent: vec![0; qps],
            done: vec![0; qps],
            deadline_ns: spec
                .duration
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            posted: vec![0; n],
            completed: vec![0; n],
            tot_sent: 0,
            tot_done: 0,
            first_post: None,
            last_done: 0,
            bad: None,
        }
    }

    /// Every QP has had all its operations complete.
    pub fn finished(&self) -> bool {
        self.done.iter().zip(&self.quota).all(|(d, q)| d == q)
    }

    /// Operations posted and not yet completed.
    pub fn in_flight(&self) -> bool {
        self.tot_sent > self.tot_done
    }

    /// Posts what each QP may (depth, quota and, in process, the peer's posted receives in
    /// `credits`), then reaps completions. Returns whether anything moved.
    pub fn step(
        &mut self,
        tx: &mut Side,
        credits: Option<&[u64]>,
        t0: Instant,
    ) -> Result<bool, PerfError> {
        let mut moved = false;
        let send_credits = credits.filter(|_| self.verb.needs_recv());
        for i in 0..self.sent.len() {
            loop {
                let (sent, done) = (self.sent[i], self.done[i]);
                let room = sent - done < u64::from(self.depth);
                let credit = send_credits.is_none_or(|c| c.get(i).is_some_and(|&p| sent < p));
                if !(room && credit && sent < self.quota[i]) {
                    break;
                }
                let now = elapsed_ns(t0);
                if self.deadline_ns.is_some_and(|d| now >= d) {
                    // Time is up: this QP's next post is its last, and signalled.
                    self.quota[i] = sent + 1;
                }
                let last = sent + 1 == self.quota[i];
                let signaled = (sent + 1) % u64::from(self.cq_mod) == 0 || last;
                if let Some(p) = self.posted.get_mut(self.tot_sent as usize) {
                    *p = now;
                }
                self.first_post.get_or_insert(now);
                tx.post(i, sent, self.size, None, signaled, self.check)?;
                self.sent[i] += 1;
                self.tot_sent += 1;
                moved = true;
            }
        }
        let Self {
            verb,
            check,
            size,
            done,
            completed,
            tot_done,
            last_done,
            bad,
            ..
        } = self;
        let n = tx.poll_sends(usize::MAX, |i, seq, bufs| {
            if *check && *verb == Verb::Read && bad.is_none() {
                for l in bufs.into_leases() {
                    *bad = mismatch(l.as_slice().get(..*size).unwrap_or(&[]), 0);
                }
            }
            let now = elapsed_ns(t0);
            if let Some(d) = done.get_mut(i) {
                // A signalled completion covers every earlier operation of its QP.
                let newly = (seq + 1).saturating_sub(*d);
                *d += newly;
                for _ in 0..newly {
                    if let Some(c) = completed.get_mut(*tot_done as usize) {
                        *c = now;
                    }
                    *tot_done += 1;
                }
            }
            *last_done = now;
            Ok(())
        })?;
        Ok(moved || n > 0)
    }

    /// SEND: polls the receiver `rx` of this stream, checking each message with `--check`
    /// (message `k` of a QP carries pattern `k`). Returns how many arrived.
    pub fn receive(&mut self, rx: &mut Side, _t0: Instant) -> Result<usize, PerfError> {
        if !self.verb.needs_recv() {
            return Ok(0);
        }
        let check = self.check;
        let mut bad = None;
        let n = rx.poll_recvs(|_, nth, data| {
            if check && bad.is_none() {
                bad = mismatch(data, nth);
            }
            Ok(())
        })?;
        self.bad = self.bad.or(bad);
        Ok(n)
    }

    /// In process, after the stream: polls `rx` until a receive has completed for every SEND
    /// that did (failing with [`PerfError::Stalled`] if some never arrive).
    pub fn finish_receives(&mut self, rx: &mut Side, t0: Instant) -> Result<(), PerfError> {
        if !self.verb.needs_recv() {
            return Ok(());
        }
        let mut w = Waiter::new("the receives of the last SENDs");
        while rx.recv_done.iter().sum::<u64>() < self.tot_done {
            if self.receive(rx, t0)? == 0 {
                w.idle(rx, Queue::Recv)?;
            }
        }
        Ok(())
    }

    /// After the run: the check's verdict on what landed at `rx` (see [`check_target`]; SEND
    /// and READ data were checked as they completed).
    pub fn check_landed(&self, rx: &Side) -> Result<(), PerfError> {
        if !self.check {
            return Ok(());
        }
        check_target(self.verb, self.size, &self.done, self.bad, rx)
    }

    /// Operations posted so far, per QP.
    pub fn sent(&self) -> &[u64] {
        &self.sent
    }

    /// The first bad byte a check of arriving data found.
    pub fn bad(&self) -> Option<(usize, u8, u8)> {
        self.bad
    }

    /// Seconds from the first post to the last completion.
    pub fn seconds(&self) -> f64 {
        self.last_done
            .saturating_sub(self.first_post.unwrap_or(0))
            .max(1) as f64
            / 1e9
    }

    /// perftest's row: from the timestamps (one QP: at signalled completions, as perftest;
    /// several: every message covered), or, in a duration run, the average for the peak too.
    pub fn report(&self, units: BwUnits) -> Result<BwReport, PerfError> {
        if self.posted.is_empty() {
            let secs = self.seconds();
            let avg = self.size as f64 * self.tot_done as f64 / secs;
            let per_unit = match units {
                BwUnits::MibPerSec => 1_048_576.0,
                BwUnits::GbitPerSec => 125_000_000.0,
            };
            return Ok(BwReport {
                bytes: self.size as u64,
                iterations: self.tot_done,
                bw_peak: avg / per_unit,
                bw_avg: avg / per_unit,
                msg_rate_mpps: self.tot_done as f64 / secs / 1e6,
                units,
            });
        }
        let cq_mod = if self.sent.len() == 1 { self.cq_mod } else { 1 };
        Ok(BwReport::from_times(
            self.size as u64,
            &self.posted,
            &self.completed,
            cq_mod as usize,
            1,
            units,
        )?)
    }
}

/// The `--check` verdict on the receiving side `rx` of a stream whose QP `i` completed
/// `counts[i]` operations: `bad` (a bad byte seen on the way) first; then WRITE: each QP's
/// slot holds its last WRITE exactly; atomics: each QP's word counts every operation.
pub fn check_target(
    verb: Verb,
    size: usize,
    counts: &[u64],
    bad: Option<(usize, u8, u8)>,
    rx: &Side,
) -> Result<(), PerfError> {
    let fail = |(offset, got, expected): (usize, u8, u8)| PerfError::DataCheck {
        size: size as u64,
        offset,
        got,
        expected,
    };
    if let Some(b) = bad {
        return Err(fail(b));
    }
    for (i, &n) in counts.iter().enumerate() {
        let at = i * rx.slot;
        match verb {
            Verb::Write if n > 0 => {
                let mut got = vec![0u8; size];
                rx.target.read(at, &mut got)?;
                if let Some(b) = mismatch(&got, n - 1) {
                    return Err(fail(b));
                }
            }
            Verb::Atomic(_) => {
                let got = rx.target.read_u64_be(at)?;
                if got != n {
                    return Err(PerfError::AtomicCheck {
                        qp: i,
                        got,
                        expected: n,
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}
