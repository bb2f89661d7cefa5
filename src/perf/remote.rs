//! The perf tools between two processes, each a simulated NIC on a UDP socket
//! (`-d udp:ADDR[:PORT]`): server without HOST, client with it, as perftest.
//!
//! Owns: the out-of-band protocol of the two-process form (JSON over TCP, port `-p`; a
//! Noise handshake with the pre-shared key first and every message encrypted, unless both
//! sides give `--plaintext`: `bypass_verbs::exchange`) and
//! each side's part of a run. Must not compute statistics (`crate::stats`), build QPs
//! (`flows`) or print (`tools` does, with the same headers as the in-process form).
//!
//! Protocol: the client connects and sends its [`Hello`] (QPs, target, test, sizes,
//! iterations ...); the server answers with its own; each checks that the other runs the
//! same test, connects its QPs and posts its receives, and the two meet again. Then per size:
//! - latency: perftest `run_iter_lat_write` / `run_iter_lat_send`: the client sends the
//!   iteration's tagged message and waits for the server's answer; the server waits, then
//!   answers; both time their posts. READ and atomics: the client alone posts and times.
//! - bandwidth: perftest `run_iter_bw`: the sender (the client; with `-b` both) streams;
//!   a SEND's receiver keeps receives posted (RC: an early SEND is retried after an RNR
//!   NAK). When a side has nothing left to send it meets the other over TCP ([`Sync`]:
//!   what it sent, what it measured); the receiver takes the last SENDs, checks what landed
//!   (`--check`), and the two meet again before the next size.
//!
//! Every message of a run travels on the one TCP connection the client's hello came on
//! ([`ExchangeSession`]): a second connection during the run is closed unread and logged on
//! stderr, so nothing but the real client can speak for it; under the key, a message altered
//! on that connection fails its integrity check and ends the run. `BYPASS_LOG_KEYS=1` prints
//! the hello this side sent (its QPNs, rkeys, addresses), for debugging and for the test
//! that checks none of them crosses the wire in clear. Each meeting has one deadline
//! for the whole message ([`OOB_TIMEOUT`]), not one per read.

use std::time::{Duration, Instant};

use std::sync::Mutex;

use bypass_verbs::exchange::ExchangeError;
use bypass_verbs::{ExchangeServer, ExchangeSession};
use clap::Args;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::bw::{BwResult, BwSpec, Stream, check_target};
use super::flows::{Queue, Side, SideInfo, SideSpec, Waiter};
use super::lat::{LatResult, LatSpec, WARMUP, arrive, ping, tag};
use super::local::check_ud_size;
use super::ops::{Conn, Verb};
use super::{CommonOpts, PerfError};
use crate::baseline::elapsed_ns;
use crate::counters_view::{Labelled, collect};
use crate::device::{NetDevice, open_net};
use crate::exchange_key::AuthOpts;
use crate::stats::BwReport;

/// How long each out-of-band step may take (the server waits this long for its client).
const OOB_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a receiver of UC/UD SENDs waits for one more after the sender is done.
const QUIET: Duration = Duration::from_millis(50);

/// Options of the two-process form.
#[derive(Args, Debug, Clone, Default)]
pub struct NetOpts {
    /// The server to connect to (two-process form, with -d udp:…); without it, with
    /// -d udp:…, this side is the server.
    pub host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Check the data: every message carries its own pattern and the receiving side checks
    /// it (WRITE: the buffer holds the last WRITE exactly; atomics: each word counts them).
    #[arg(long)]
    pub check: bool,
    /// Two-process form: record every packet the UDP link sends and receives in this pcap
    /// file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// How the out-of-band exchange is protected.
    #[command(flatten)]
    pub auth: AuthOpts,
}

/// What one size of a run gives the printer.
pub enum Row {
    /// A latency row.
    Lat(LatResult),
    /// A bandwidth row.
    Bw(BwResult),
    /// The passive side's account of a size (what arrived, the check) and its counters.
    Server {
        /// The line to print.
        line: String,
        /// This device's counters.
        counters: Vec<Labelled>,
    },
    /// A size failed its data check (the run goes on; the command fails at the end).
    Failed(PerfError),
}

/// What each side tells the other before the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hello {
    /// The QPs to connect to and the buffer to target.
    side: SideInfo,
    /// The test and every option both sides must agree on.
    test: String,
    /// Message sizes, in order.
    sizes: Vec<u64>,
    /// Iterations per size.
    iters: u64,
}

/// What the sides swap when one is done with a size: what it sent per QP and its row.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Sync {
    size: u64,
    sent: Vec<u64>,
    peak: f64,
    avg: f64,
    rate: f64,
}

/// One side of a two-process run, connected.
struct Link {
    dev: NetDevice,
    /// The connection to the peer, for every meeting of the run (a meeting runs on a
    /// thread while this one keeps the QPs going, hence the lock).
    session: Mutex<ExchangeSession>,
    /// This side is the client (it gave HOST).
    client: bool,
}

fn oob(e: ExchangeError) -> PerfError {
    PerfError::Oob(e.to_string())
}

impl Link {
    /// Opens the device, builds the side, swaps hellos and connects.
    fn open(
        c: &CommonOpts,
        net: &NetOpts,
        test: String,
        sizes: &[u64],
        iters: u64,
        spec: SideSpec,
        mtu: Option<bypass_verbs::Mtu>,
    ) -> Result<(Self, Side), PerfError> {
        if let Some(host) = &net.host {
            crate::resolve::resolve(host, net.port)?;
        }
        let auth = net.auth.auth().map_err(|e| PerfError::Oob(e.to_string()))?;
        let dev = open_net(&c.device, c.seed, "perf", net.pcap.as_deref())?;
        check_ud_size(&spec, dev.ctx.active_mtu(1)?, mtu)?;
        let mut side = Side::new(&dev.ctx, spec)?;
        let hello = Hello {
            side: side.info()?,
            test,
            sizes: sizes.to_vec(),
            iters,
        };
        let mut session = match &net.host {
            Some(host) => ExchangeSession::connect((host.as_str(), net.port), &auth, OOB_TIMEOUT)
                .map_err(oob)?,
            None => {
                let server = ExchangeServer::bind(("0.0.0.0", net.port)).map_err(oob)?;
                if net.port == 0 {
                    // The port the OS chose is the only way a client can find this server.
                    let bound = server.local_addr().map_err(oob)?;
                    println!(" server listening on TCP port {}", bound.port());
                }
                let session = server.accept_session(&auth, OOB_TIMEOUT).map_err(oob)?;
                eprintln!(
                    " out-of-band client {}: the run talks to it alone (other connections are closed unread)",
                    session.peer_addr()
                );
                session
            }
        };
        if bypass_driver::redact::keys_shown() {
            // The opt-in that reveals keys (BYPASS_LOG_KEYS=1): what this side sends.
            eprintln!(" out-of-band hello sent: {:?}", hello.side);
        }
        let peer: Hello = session.swap(&hello, OOB_TIMEOUT).map_err(oob)?;
        if peer.test != hello.test || peer.sizes != hello.sizes || peer.iters != hello.iters {
            return Err(PerfError::Mismatch(format!(
                "this side runs {} -s {:?} -n {}, the peer {} -s {:?} -n {}: give both sides the same test, sizes and iterations",
                hello.test, hello.sizes, hello.iters, peer.test, peer.sizes, peer.iters
            )));
        }
        side.connect(&peer.side, mtu)?;
        let link = Link {
            dev,
            session: Mutex::new(session),
            client: net.host.is_some(),
        };
        // Meet once more: neither side sends before the other's QPs are in RTR with their
        // receives posted (UC and UD would lose what arrived earlier; nothing resends it).
        let _: Sync = link.meet(&Sync::default())?;
        Ok((link, side))
    }

    /// Meets the peer over TCP: sends `msg`, returns the peer's. Logs any other connection
    /// the session closed unread meanwhile.
    fn meet<T: Serialize + DeserializeOwned>(&self, msg: &T) -> Result<T, PerfError> {
        let mut session = self
            .session
            .lock()
            .map_err(|_| PerfError::Oob("a meeting thread panicked".into()))?;
        let got = session.swap(msg, OOB_TIMEOUT).map_err(oob);
        for from in session.take_refused() {
            eprintln!(
                " refused an out-of-band connection from {from} during the run (closed unread; the run's client is {})",
                session.peer_addr()
            );
        }
        got
    }

    fn counters(&self, side: &Side) -> Vec<Labelled> {
        let qpns: Vec<u32> = side.qps.iter().map(|q| q.qpn()).collect();
        collect(&self.dev.ctx, "this side", &qpns)
    }
}

/// The device line of the two-process form.
pub fn describe(c: &CommonOpts, net: &NetOpts) -> String {
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

fn data_check(size: u64, (offset, got, expected): (usize, u8, u8)) -> PerfError {
    PerfError::DataCheck {
        size,
        offset,
        got,
        expected,
    }
}

/// A latency tool, two processes: one row per size on each side that times.
pub fn run_lat(
    c: &CommonOpts,
    net: &NetOpts,
    test: &str,
    spec: &LatSpec,
    sizes: &[u64],
    mut row: impl FnMut(Row),
) -> Result<(), PerfError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    LatSpec {
        size: max,
        ..spec.clone()
    }
    .validate()?;
    let test = format!("{test} {:?} {:?}", spec.verb, spec.conn);
    let (link, mut side) = Link::open(
        c,
        net,
        test,
        sizes,
        spec.iters,
        spec.side(max, true),
        spec.mtu,
    )?;
    let client = link.client;
    let pingpong = !spec.verb.fetches();
    let n = usize::try_from(spec.iters).map_err(|_| PerfError::TooLarge { size: spec.iters })?;
    for &size in sizes {
        let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
        let mut posted = vec![0u64; n];
        let mut bad = None;
        let cpu = super::cpu::Sampler::start();
        let t0 = Instant::now();
        let rounds = if client || pingpong { n + WARMUP } else { 0 };
        for i in 0..rounds {
            if let Some(slot) = i.checked_sub(WARMUP).and_then(|k| posted.get_mut(k)) {
                *slot = elapsed_ns(t0);
            }
            let (t, k) = (tag(i), i as u64);
            if client {
                bad = bad.or(ping(&mut side, bytes, k, t, spec.check)?);
            }
            if pingpong {
                bad = bad.or(arrive(&mut side, bytes, k, t, spec.check)?);
            }
            if !client {
                bad = bad.or(ping(&mut side, bytes, k, t, spec.check)?);
            }
        }
        let cpu_util = cpu.and_then(|c| c.stop());
        // Zero the buffer for the next size (its tags start again at 1, and a stale byte at
        // its tag position must not look like one).
        if spec.verb == Verb::Write {
            side.target.write(0, &vec![0u8; side.target.len()])?;
        }
        let sent = vec![rounds as u64];
        let peer = link.meet(&Sync {
            size,
            sent,
            ..Sync::default()
        })?;
        if let Some(b) = bad {
            row(Row::Failed(data_check(size, b)));
            continue;
        }
        if !client && !pingpong {
            let counts = peer.sent.clone();
            let checked = spec
                .check
                .then(|| check_target(spec.verb, bytes, &counts, None, &side));
            row(server_row(
                size,
                &peer,
                spec.verb,
                checked,
                link.counters(&side),
            ));
            continue;
        }
        row(Row::Lat(spec.result(
            size,
            &posted,
            cpu_util,
            link.counters(&side),
        )?));
    }
    eprintln!("{}", link_summary(&link));
    Ok(())
}

/// The passive side's line for a size: what the peer did and the check's verdict.
fn server_row(
    size: u64,
    peer: &Sync,
    verb: Verb,
    checked: Option<Result<(), PerfError>>,
    counters: Vec<Labelled>,
) -> Row {
    let n: u64 = peer.sent.iter().sum();
    let what = match verb {
        Verb::Send => "SENDs",
        Verb::Write => "WRITEs",
        Verb::Read => "READs",
        Verb::Atomic(_) => "atomics",
    };
    let line = match checked {
        None => format!(" {size} bytes: {n} {what} from the peer (no --check)"),
        Some(Err(e)) => return Row::Failed(e),
        Some(Ok(())) => match verb {
            Verb::Write if peer.sent.len() == 1 => {
                format!(" {size} bytes: data check ok (the buffer holds WRITE {n} of {n} exactly)")
            }
            Verb::Write => format!(
                " {size} bytes: data check ok (each QP's slot holds its last WRITE exactly, {n} WRITEs in all)"
            ),
            Verb::Send => {
                format!(" {size} bytes: data check ok (each of {n} SENDs held its pattern)")
            }
            Verb::Atomic(_) => {
                format!(" {size} bytes: data check ok (each word counts its atomics, {n} in all)")
            }
            Verb::Read => format!(" {size} bytes: {n} READs served (the client checks their data)"),
        },
    };
    Row::Server { line, counters }
}

/// A bandwidth tool, two processes.
pub fn run_bw(
    c: &CommonOpts,
    net: &NetOpts,
    test: &str,
    spec: &BwSpec,
    sizes: &[u64],
    mut row: impl FnMut(Row),
) -> Result<(), PerfError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    BwSpec {
        size: max,
        ..spec.clone()
    }
    .validate()?;
    let test = format!(
        "{test} {:?} {:?} -q {} -b {} -D {:?}",
        spec.verb, spec.conn, spec.qps, spec.bidirectional, spec.duration
    );
    let side_spec = spec.side(max, true);
    let (link, mut side) = Link::open(c, net, test, sizes, spec.iters, side_spec, spec.mtu)?;
    let client = link.client;
    let sending = client || spec.bidirectional;
    let depth = side_spec.depth;
    for &size in sizes {
        // Each size counts its own receives (the n-th of a size carries pattern n).
        side.recv_done.iter_mut().for_each(|d| *d = 0);
        let this = BwSpec {
            size,
            ..spec.clone()
        };
        let cq_mod = spec.cq_mod.clamp(1, depth);
        let mut out = Stream::new(&this, depth, cq_mod);
        let mut inc = Stream::new(&this, depth, cq_mod);
        let cpu = super::cpu::Sampler::start();
        let t0 = Instant::now();
        let peer = stream_and_meet(
            &link, &mut side, &mut out, &mut inc, sending, spec.units, t0,
        )?;
        let receiving = !client || spec.bidirectional;
        if receiving && spec.verb.needs_recv() {
            take_arrivals(&mut side, &mut inc, peer.sent.iter().sum(), t0)?;
        }
        let cpu_util = cpu.and_then(|c| c.stop());
        let counters = link.counters(&side);
        let verdict = receiving_verdict(&side, &inc, &peer, spec, size, receiving);
        // Meet again, after the check has read what landed: the sender starts the next size
        // only once the receiver is done with this one (what it sends next must not be
        // counted or checked as this size's).
        let _: Sync = link.meet(&Sync::default())?;
        if let Err(e) = verdict {
            row(Row::Failed(e));
            continue;
        }
        if sending {
            if let Some(b) = out.bad() {
                row(Row::Failed(data_check(size, b)));
                continue;
            }
            let mut report = out.report(spec.units)?;
            let mut messages = out.sent().iter().sum::<u64>();
            if spec.bidirectional {
                report.bw_peak += peer.peak;
                report.bw_avg += peer.avg;
                report.msg_rate_mpps += peer.rate;
                messages += peer.sent.iter().sum::<u64>();
            }
            let size = spec.verb.size(size);
            row(Row::Bw(BwResult::new(
                size,
                messages,
                out.seconds(),
                report,
                cpu_util,
                counters,
                depth,
            )));
        } else {
            let mut peer = peer;
            if spec.verb == Verb::Send {
                // What arrived, not what was sent (UC/UD may lose some).
                peer.sent = side.recv_done.clone();
            }
            let checked = spec.check.then_some(Ok(()));
            row(server_row(size, &peer, spec.verb, checked, counters));
        }
    }
    eprintln!("{}", link_summary(&link));
    Ok(())
}

/// Streams `out` (when `sending`) and receives into `inc` until both sides are done with
/// the size: once this side has nothing left to send, a thread meets the peer over TCP while
/// this one keeps the receives going. Returns the peer's [`Sync`].
fn stream_and_meet(
    link: &Link,
    side: &mut Side,
    out: &mut Stream,
    inc: &mut Stream,
    sending: bool,
    units: crate::stats::BwUnits,
    t0: Instant,
) -> Result<Sync, PerfError> {
    let verb = side.spec.verb;
    std::thread::scope(|s| {
        let mut meeting = None;
        let mut w = Waiter::new("a completion of the stream");
        loop {
            let mut moved = false;
            if sending && !out.finished() {
                moved |= out.step(side, None, t0)?;
            }
            moved |= inc.receive(side, t0)? > 0;
            if meeting.is_none() && (!sending || out.finished()) {
                let msg = sync_of(out, sending, units);
                meeting = Some(s.spawn(move || link.meet(&msg)));
            }
            if meeting.as_ref().is_some_and(|h| h.is_finished()) {
                break;
            }
            if moved {
                w.reset();
            } else if out.in_flight() {
                w.idle(side, Queue::Send)?;
            } else if verb.needs_recv() && !side.spec.events {
                w.idle(side, Queue::Recv)?;
            } else {
                side.ctx.progress();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        match meeting.map(|h| h.join()) {
            Some(Ok(r)) => r,
            _ => Err(PerfError::Oob("the meeting thread panicked".into())),
        }
    })
}

/// The receiving side's verdict on a size: an RC SEND lost, or (`--check`) the data.
fn receiving_verdict(
    side: &Side,
    inc: &Stream,
    peer: &Sync,
    spec: &BwSpec,
    size: u64,
    receiving: bool,
) -> Result<(), PerfError> {
    if !receiving {
        return Ok(());
    }
    let arrived: u64 = side.recv_done.iter().sum();
    let sent: u64 = peer.sent.iter().sum();
    if spec.verb.needs_recv() && spec.conn == Conn::Rc && arrived != sent {
        return Err(PerfError::Lost {
            size,
            sent,
            arrived,
        });
    }
    if !spec.check {
        return Ok(());
    }
    let counts = if spec.verb == Verb::Send {
        &side.recv_done
    } else {
        &peer.sent
    };
    let bytes = spec.verb.size(size) as usize;
    check_target(spec.verb, bytes, counts, inc.bad(), side)
}

/// After the meeting: takes the receives of the `sent` SENDs the peer completed. RC: all
/// have landed already (the peer's completion follows this NIC's ACK); UC and UD: waits
/// until they have, or until none has arrived for [`QUIET`] (the rest were lost).
fn take_arrivals(
    side: &mut Side,
    inc: &mut Stream,
    sent: u64,
    t0: Instant,
) -> Result<(), PerfError> {
    let mut last = Instant::now();
    while side.recv_done.iter().sum::<u64>() < sent && last.elapsed() < QUIET {
        side.ctx.progress();
        if inc.receive(side, t0)? > 0 {
            last = Instant::now();
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}

fn sync_of(out: &Stream, sending: bool, units: crate::stats::BwUnits) -> Sync {
    let r: Option<BwReport> = sending.then(|| out.report(units).ok()).flatten();
    Sync {
        size: 0,
        sent: if sending {
            out.sent().to_vec()
        } else {
            Vec::new()
        },
        peak: r.map_or(0.0, |r| r.bw_peak),
        avg: r.map_or(0.0, |r| r.bw_avg),
        rate: r.map_or(0.0, |r| r.msg_rate_mpps),
    }
}

/// A one-line account of the link, for stderr.
fn link_summary(link: &Link) -> String {
    link.dev
        .link_summary()
        .unwrap_or_else(|| "no link counters (a real NIC)".to_owned())
}
