//! One side of a perf run: its QPs (one or `-q N`), CQs, the region the peer targets and the
//! buffers it posts from, on any device (the in-process sim or a UDP-linked one).
//!
//! Owns: building and connecting those objects, posting one operation of a [`Verb`] on a QP,
//! keeping receives posted, and polling or blocking (`-e`) for completions with a deadline.
//! Must not time or print: `bw` and `lat` do.
//!
//! Sources: perftest `ctx_init` / `create_qp` / `ctx_connect` (src/perftest_resources.c):
//! one send CQ and one receive CQ shared by every QP of a side, each QP targeting its own
//! slice of the peer's buffer; `-e` arms the CQ and sleeps in `ibv_get_cq_event` (here
//! [`CompletionChannel::get_cq_event`] in short slices, so that a stalled peer still ends the
//! wait at [`STALL`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::wr::{RecvWr, SendWr, SgeList};
use bypass_verbs::{
    CompletionChannel, Context, Cq, MemoryPool, Mtu, Pd, Qp, QpBuilder, QpEndpoint, RemoteBuffer,
    SharedLease, UdDest,
};

use super::PerfError;
use super::gpu_mem::{self, Sources, Target};
use super::ops::{Conn, GRH, Verb, fill};

/// How long a wait may go without the awaited event before the run is reported stuck.
pub const STALL: Duration = Duration::from_secs(10);

/// The bits of a `wr_id` below the QP index.
const QP_SHIFT: u32 = 40;

/// Bytes of buffers a side may pin for outstanding work (depth × size × QPs is capped by it).
pub const MAX_INFLIGHT_BYTES: u64 = 64 << 20;

/// What a side is built for.
#[derive(Debug, Clone, Copy)]
pub struct SideSpec {
    /// The operation.
    pub verb: Verb,
    /// The transport.
    pub conn: Conn,
    /// The largest message.
    pub size: usize,
    /// QPs.
    pub qps: u32,
    /// Send queue depth per QP.
    pub depth: u32,
    /// Receives kept posted per QP (SEND only).
    pub rx_depth: u32,
    /// Largest message sent inline.
    pub inline: u32,
    /// Block on a completion channel instead of spinning.
    pub events: bool,
    /// Pump the device from this thread on every wait (a UDP-linked device).
    pub net: bool,
    /// Target and sources in this CUDA device's memory (`--use-cuda`), else host memory.
    pub cuda: Option<u32>,
}

/// Which queue a wait is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Send completions.
    Send,
    /// Receive completions.
    Recv,
}

/// One side: its QPs and what they post from and into.
pub struct Side {
    /// The device.
    pub ctx: Arc<Context>,
    /// What it was built for.
    pub spec: SideSpec,
    /// The QPs, in RTS once connected.
    pub qps: Vec<Qp>,
    /// Send CQ of every QP.
    scq: Cq,
    /// Receive CQ of every QP.
    rcq: Cq,
    /// The channel both CQs report to with `-e`.
    channel: Option<CompletionChannel>,
    /// The region the peer targets: one `slot` per QP (READ reads the pattern it holds).
    pub target: Target,
    /// Bytes per QP in `target`.
    pub slot: usize,
    /// Source and fetch buffers.
    pool: Sources,
    /// Receive buffers.
    rpool: Option<MemoryPool>,
    /// The frozen source every non-inline SEND/WRITE posts without `--check`.
    shared: Option<SharedLease>,
    /// The payload of inline posts (last byte: the latency tag).
    inline_buf: Vec<u8>,
    /// The peer's slot of each QP.
    remote: Vec<RemoteBuffer>,
    /// UD: the address of each QP's peer.
    dests: Vec<UdDest>,
    /// Receives posted so far, per QP.
    pub recv_posted: Vec<u64>,
    /// Receives completed so far, per QP.
    pub recv_done: Vec<u64>,
    /// The largest inline message.
    pub max_inline: usize,
    /// Kept for the objects above (dropped after them).
    _pd: Pd,
}

/// What one side tells the other: its QPs and its target.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SideInfo {
    /// Endpoints of the QPs, in order.
    pub qps: Vec<QpEndpoint>,
    /// The target region.
    pub target: RemoteBuffer,
    /// Bytes per QP in it.
    pub slot: u64,
}

/// QP `i`'s part of the peer's target: `size` bytes at `i × slot`, or, when the peer's hello
/// does not hold them (a target smaller than its slots, slots that overflow), the error
/// saying so: the hello is a peer's input, checked where it enters.
fn peer_slot(peer: &SideInfo, i: usize, size: usize) -> Result<RemoteBuffer, PerfError> {
    // The peer's slot and buffer are its word: a slice that does not fit (or whose offset
    // overflows) is its -s or -q differing from this side's.
    let size = size as u64;
    let offset = (i as u64).checked_mul(peer.slot);
    offset
        .and_then(|off| peer.target.slice(off, size))
        .ok_or(PerfError::PeerBufferTooSmall {
            qp: i,
            size,
            offset: offset.unwrap_or(u64::MAX),
            have: peer.target.len,
        })
}

/// The send depth that keeps `qps` × depth × `size` bytes within [`MAX_INFLIGHT_BYTES`]
/// (at least 2), and the moderation no larger than it.
pub fn fit_depth(size: u64, qps: u32, tx_depth: u32, cq_mod: u32) -> (u32, u32) {
    let per = size.max(1).saturating_mul(u64::from(qps.max(1)));
    let fit = (MAX_INFLIGHT_BYTES / per).clamp(2, u64::from(u32::MAX)) as u32;
    let depth = tx_depth.clamp(1, fit);
    (depth, cq_mod.clamp(1, depth))
}

fn wr_id(qp: usize, seq: u64) -> u64 {
    ((qp as u64) << QP_SHIFT) | seq
}

fn split(wr_id: u64) -> (usize, u64) {
    ((wr_id >> QP_SHIFT) as usize, wr_id & ((1 << QP_SHIFT) - 1))
}

/// QP `i` of `qps`, named by work request `wr_id`.
/// A QP refused for a cap an option set, said in that option (`-t` the send queue's depth,
/// `-I` the inline size; the other caps are the tool's own, so their errors stay the
/// driver's).
fn cap_error(e: bypass_verbs::VerbsError, spec: &SideSpec) -> PerfError {
    use bypass_verbs::VerbsError::Driver;
    use bypass_verbs::driver::DriverError::QpCapTooLarge;
    match e {
        Driver(QpCapTooLarge {
            cap: "max_send_wr",
            max,
            ..
        }) => PerfError::Usage(format!(
            "-t {}: this device's send queue holds at most {max} operations of this message size and inline setting: give -t {max} or less",
            spec.depth
        )),
        Driver(QpCapTooLarge {
            cap: "max_inline_data",
            qp_type,
            max,
            ..
        }) => PerfError::Usage(format!(
            "-I {}: a send WQE of {qp_type} QPs holds at most {max} inline bytes: give -I {max} or less",
            spec.inline
        )),
        e => e.into(),
    }
}

fn qp_at(qps: &mut [Qp], i: usize, wr_id: u64) -> Result<&mut Qp, PerfError> {
    let n = qps.len();
    qps.get_mut(i).ok_or(PerfError::NoSuchQp {
        wr_id,
        qp: i,
        qps: n,
    })
}

impl Side {
    /// Builds a side on `ctx` (not connected).
    pub fn new(ctx: &Arc<Context>, spec: SideSpec) -> Result<Self, PerfError> {
        let pd = ctx.alloc_pd()?;
        let qps = spec.qps.max(1) as usize;
        let channel = if spec.events {
            Some(ctx.create_comp_channel()?)
        } else {
            None
        };
        let cqes = (spec.depth.max(spec.rx_depth) + 2).saturating_mul(qps as u32);
        let scq = Cq::with_channel(ctx, cqes.max(16), channel.as_ref(), 0)?;
        let rcq = Cq::with_channel(ctx, cqes.max(16), channel.as_ref(), 0)?;
        let slot = spec.size.max(8).next_multiple_of(64);
        let target_len = slot
            .checked_mul(qps)
            .filter(|&l| l as u64 <= 4 * MAX_INFLIGHT_BYTES)
            .ok_or_else(|| {
                PerfError::Usage(format!(
                    "-q {qps} × -s {}: each QP targets its own buffer, {} MiB in all, more than the {} MiB a side may register; use fewer QPs or smaller messages",
                    spec.size,
                    (slot as u64).saturating_mul(qps as u64) >> 20,
                    (4 * MAX_INFLIGHT_BYTES) >> 20
                ))
            })?;
        let gpu = gpu_mem::open(spec.cuda)?;
        let target = Target::register(
            &pd,
            gpu.as_ref(),
            target_len,
            MkeyAccess::LOCAL_WRITE
                | MkeyAccess::REMOTE_WRITE
                | MkeyAccess::REMOTE_READ
                | MkeyAccess::REMOTE_ATOMIC,
        )?;
        // What a READ fetches: message 0's pattern in every slot (the others start at zero:
        // the atomics count from it, the latency tags are never 0).
        if spec.verb == Verb::Read {
            let mut pat = vec![0u8; spec.size];
            fill(&mut pat, 0);
            for q in 0..qps {
                target.write(q * slot, &pat)?;
            }
        }
        let chunks = qps * (spec.depth as usize + 1) + 1;
        let pool = Sources::new(&pd, gpu.as_ref(), spec.size.max(64), chunks)?;
        let rpool = if spec.verb.needs_recv() {
            Some(pd.create_pool((spec.size + GRH).max(64), qps * spec.rx_depth as usize + 1)?)
        } else {
            None
        };
        let mut built = Vec::with_capacity(qps);
        for _ in 0..qps {
            let b = match spec.conn {
                Conn::Rc => QpBuilder::rc(&pd, &scq, &rcq),
                Conn::Uc => QpBuilder::uc(&pd, &scq, &rcq),
                Conn::Ud => QpBuilder::ud(&pd, &scq, &rcq),
            };
            built.push(
                b.max_send_wr(spec.depth)
                    .max_recv_wr(spec.rx_depth.max(1))
                    .max_send_sge(1)
                    .max_recv_sge(1)
                    .max_inline(spec.inline)
                    .build()
                    .map_err(|e| cap_error(e, &spec))?,
            );
        }
        let max_inline = built.first().map_or(0, |q| {
            (q.options().caps.max_inline_data as usize).min(spec.inline as usize)
        });
        // GPU memory has no frozen shared lease: each of its posts leases a chunk.
        let shared = match pool.host() {
            Some(host) if spec.size > max_inline && !spec.verb.fetches() => {
                let mut l = host.lease(spec.size)?;
                fill(l.as_mut_slice(), 0);
                Some(l.freeze())
            }
            _ => None,
        };
        let mut inline_buf = vec![0u8; spec.size.min(max_inline)];
        fill(&mut inline_buf, 0);
        Ok(Self {
            ctx: ctx.clone(),
            spec,
            qps: built,
            scq,
            rcq,
            channel,
            target,
            slot,
            pool,
            rpool,
            shared,
            inline_buf,
            remote: Vec::new(),
            dests: Vec::new(),
            recv_posted: vec![0; qps],
            recv_done: vec![0; qps],
            max_inline,
            _pd: pd,
        })
    }

    /// What the peer needs to connect to this side.
    pub fn info(&self) -> Result<SideInfo, PerfError> {
        Ok(SideInfo {
            qps: self
                .qps
                .iter()
                .map(Qp::endpoint)
                .collect::<Result<_, _>>()?,
            target: self.target.remote(),
            slot: self.slot as u64,
        })
    }

    /// What to warn of before connecting to `peer` at `mtu` (`-m`): a `-m` this port cannot
    /// carry (the fix computed), or two ends whose ports carry different MTUs (both named).
    /// Either way the QPs run at the smallest.
    fn mtu_warning(&self, peer: &SideInfo, mtu: Option<Mtu>) -> Option<String> {
        let (qp, ep) = (self.qps.first()?, peer.qps.first()?);
        let active = self.ctx.active_mtu(1).ok()?;
        if let Some(m) = mtu.filter(|&m| m > active) {
            let why = bypass_verbs::driver::hw::roce::mtu::TooLarge {
                path_mtu: m.bytes(),
                eth_mtu: self.ctx.eth_mtu(1).ok()?,
            };
            return Some(format!(
                "-m {m}: {why}; running at path MTU {}",
                active.min(ep.mtu)
            ));
        }
        qp.check_peer_mtu(ep).err().map(|e| e.to_string())
    }

    /// Connects QP `i` to the peer's QP `i` at the smaller of the two MTUs and `mtu` (`-m`),
    /// and, for SEND, posts the receives.
    pub fn connect(&mut self, peer: &SideInfo, mtu: Option<Mtu>) -> Result<(), PerfError> {
        if peer.qps.len() != self.qps.len() {
            return Err(PerfError::Mismatch(format!(
                "this side has {} QPs, the peer {}: give both sides the same -q",
                self.qps.len(),
                peer.qps.len()
            )));
        }
        if let Some(note) = self.mtu_warning(peer, mtu) {
            eprintln!("warning: {note}");
        }
        for (i, (qp, ep)) in self.qps.iter_mut().zip(&peer.qps).enumerate() {
            let mut ep = *ep;
            if let Some(m) = mtu {
                ep.mtu = ep.mtu.min(m);
            }
            qp.connect(&ep)?;
            self.remote.push(peer_slot(peer, i, self.spec.size)?);
            if self.spec.conn == Conn::Ud {
                self.dests.push(qp.ud_dest(&ep)?);
            }
        }
        if self.spec.verb.needs_recv() {
            for i in 0..self.qps.len() {
                for _ in 0..self.spec.rx_depth {
                    self.post_recv(i)?;
                }
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, i: usize) -> Result<(), PerfError> {
        let extra = if self.spec.conn == Conn::Ud { GRH } else { 0 };
        let Some(rpool) = &self.rpool else {
            return Ok(());
        };
        let lease = rpool.lease(self.spec.size + extra)?;
        let seq = self.recv_posted.get(i).copied().unwrap_or(0);
        if let Some(qp) = self.qps.get_mut(i) {
            qp.post_recv(RecvWr::new(wr_id(i, seq), lease))?;
        }
        if let Some(n) = self.recv_posted.get_mut(i) {
            *n += 1;
        }
        Ok(())
    }

    /// Posts operation `k` of `size` bytes on QP `i`. `tag` (non-zero) replaces the last byte
    /// (the latency tests spin on it); `check` makes SEND/WRITE carry message `k`'s pattern.
    pub fn post(
        &mut self,
        i: usize,
        k: u64,
        size: usize,
        tag: Option<u8>,
        signaled: bool,
        check: bool,
    ) -> Result<(), PerfError> {
        let verb = self.spec.verb;
        let remote = self
            .remote
            .get(i)
            .copied()
            .ok_or_else(|| PerfError::Usage(format!("QP {i} is not connected")))?;
        let remote = remote.slice(0, size as u64).unwrap_or(remote);
        let op = verb.op(remote, k);
        let id = wr_id(i, k);
        let wr = if verb.fetches() {
            SendWr::new(id, op).sge(self.pool.lease(size, None, None)?)
        } else if size <= self.max_inline && !check {
            let buf = self.inline_buf.get_mut(..size).unwrap_or_default();
            if let (Some(t), Some(last)) = (tag, buf.last_mut()) {
                *last = t;
            }
            SendWr::new(id, op).inline(self.inline_buf.get(..size).unwrap_or(&[]))
        } else if check || tag.is_some() || self.shared.is_none() {
            // Without --check the bytes are whatever the buffer holds (perftest sends its
            // buffer as it is): only the tag is written, so a post costs no copy of the message.
            SendWr::new(id, op).sge(self.pool.lease(size, check.then_some(k), tag)?)
        } else {
            let src = self.shared.clone();
            match src {
                Some(s) => SendWr::new(id, op).sge(s),
                None => SendWr::new(id, op),
            }
        };
        let wr = if signaled { wr } else { wr.unsignaled() };
        let wr = match self.dests.get(i) {
            Some(d) => wr.to(d),
            None => wr,
        };
        Ok(qp_at(&mut self.qps, i, id)?.post_send(wr)?)
    }

    /// Polls up to `max` ready send completions; `f(qp, seq, buffers)` sees each. Returns
    /// how many (a latency loop asks for one: no empty poll after it).
    pub fn poll_sends(
        &mut self,
        max: usize,
        mut f: impl FnMut(usize, u64, SgeList) -> Result<(), PerfError>,
    ) -> Result<usize, PerfError> {
        let mut n = 0;
        while n < max {
            let Some(c) = self.scq.poll_one() else {
                break;
            };
            if !c.is_ok() {
                return Err(PerfError::Completion {
                    wr_id: split(c.wr_id()).1,
                    status: c.status().to_string(),
                });
            }
            let (i, seq) = split(c.wr_id());
            let bufs = qp_at(&mut self.qps, i, c.wr_id())?.reclaim(c)?;
            f(i, seq, bufs)?;
            n += 1;
        }
        Ok(n)
    }

    /// Polls every ready receive, hands `f(qp, nth receive of that QP, payload)` each
    /// (after the GRH on UD) and posts a receive in its place. Returns how many.
    pub fn poll_recvs(
        &mut self,
        mut f: impl FnMut(usize, u64, &[u8]) -> Result<(), PerfError>,
    ) -> Result<usize, PerfError> {
        let extra = if self.spec.conn == Conn::Ud { GRH } else { 0 };
        let mut n = 0;
        while let Some(c) = self.rcq.poll_one() {
            if !c.is_ok() {
                return Err(PerfError::Completion {
                    wr_id: split(c.wr_id()).1,
                    status: c.status().to_string(),
                });
            }
            let (i, _) = split(c.wr_id());
            let len = c.byte_len() as usize;
            let lease = qp_at(&mut self.qps, i, c.wr_id())?.reclaim_lease(c)?;
            let nth = self.recv_done.get(i).copied().unwrap_or(0);
            if let Some(l) = &lease {
                let data = l.as_slice().get(extra..len.max(extra)).unwrap_or(&[]);
                f(i, nth, data)?;
            }
            drop(lease);
            if let Some(d) = self.recv_done.get_mut(i) {
                *d += 1;
            }
            self.post_recv(i)?;
            n += 1;
        }
        Ok(n)
    }

    /// The QP states and work outstanding, for a stall report (control path).
    pub fn describe(&self) -> String {
        let qp = self.qps.first();
        let state = qp.map_or_else(
            || "no QP".to_owned(),
            |q| {
                q.state()
                    .map_or_else(|e| format!("QUERY_QP failed: {e}"), |s| s.to_string())
            },
        );
        let outstanding: u32 = self.qps.iter().map(Qp::sends_outstanding).sum();
        format!(
            "{} QPs, the first in {state}; {outstanding} send WQEBBs outstanding",
            self.qps.len()
        )
    }
}

/// The bookkeeping of a waiting loop: spin (pumping the device now and then) or block on
/// the side's channel, failing with [`PerfError::Stalled`] after [`STALL`] without progress.
pub struct Waiter {
    what: &'static str,
    spins: u32,
    since: Option<Instant>,
    /// The queue whose CQ this wait armed and has not slept on since.
    armed: Option<Queue>,
}

impl Waiter {
    /// A wait for `what`.
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            spins: 0,
            since: None,
            armed: None,
        }
    }

    /// The awaited event happened: the stall clock starts again.
    pub fn reset(&mut self) {
        self.since = None;
    }

    /// Runs the device once and fails with [`PerfError::Stalled`] once this wait has lasted
    /// [`STALL`].
    fn pump(&mut self, side: &Side) -> Result<(), PerfError> {
        side.ctx.progress();
        let t = *self.since.get_or_insert_with(Instant::now);
        if t.elapsed() > STALL {
            return Err(PerfError::Stalled {
                what: self.what,
                after: STALL,
                seen: side.describe(),
            });
        }
        Ok(())
    }

    /// A spin on memory the peer writes (no completion to block on): pump the device now
    /// and then, fail after [`STALL`].
    pub fn idle_memory(&mut self, side: &Side) -> Result<(), PerfError> {
        self.spins = self.spins.wrapping_add(1);
        if side.spec.net || self.spins.is_multiple_of(4096) {
            self.pump(side)?;
        }
        if side.spec.net {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Nothing was ready on `q` of `side`: spin once; or, with `-e`, arm the CQ (the caller
    /// polls once more, catching what completed before the arm) and on the next call sleep on
    /// the channel until an event or a short slice passes.
    pub fn idle(&mut self, side: &mut Side, q: Queue) -> Result<(), PerfError> {
        self.spins = self.spins.wrapping_add(1);
        if side.spec.net || side.spec.events || self.spins.is_multiple_of(4096) {
            self.pump(side)?;
        }
        if side.spec.events {
            if self.armed != Some(q) {
                match q {
                    Queue::Send => side.scq.req_notify(false),
                    Queue::Recv => side.rcq.req_notify(false),
                }
                self.armed = Some(q);
                return Ok(());
            }
            self.armed = None;
            let slice = Duration::from_millis(if side.spec.net { 1 } else { 20 });
            let ev = match &side.channel {
                Some(ch) => ch
                    .get_cq_event(slice)
                    .map_err(bypass_verbs::VerbsError::from)?,
                None => None,
            };
            if let Some(ev) = ev {
                for cq in [&side.scq, &side.rcq] {
                    if cq.owns(&ev) {
                        cq.ack_events(1)?;
                    }
                }
            }
        } else if side.spec.net {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

impl Drop for Side {
    /// Acknowledges events still queued (an arm whose completion was polled before it fired).
    fn drop(&mut self) {
        if let Some(ch) = &self.channel {
            while let Ok(Some(ev)) = ch.try_get_cq_event() {
                for cq in [&self.scq, &self.rcq] {
                    if cq.owns(&ev) {
                        let _ = cq.ack_events(1);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "peer_hello_tests.rs"]
mod peer_hello_tests;
