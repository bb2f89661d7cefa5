//! The benchmark rig: two simulated NICs on one fabric, an RC QP on each connected to the
//! other, a remotely writable region on each (the WRITE target) and a pool of source buffers.
//!
//! Owns: building and connecting that rig, and the no-allocation helpers the measured loops
//! use (post a WRITE, drain a CQ, spin on a byte of a region). Must not time anything or
//! print: `lat` and `bw` do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_testbed::{FabricOptions, SimContext, SimFabric};
use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{
    Context, Cq, MemoryPool, Mr, Pd, Qp, QpBuilder, RemoteBuffer, SharedLease, VerbsError,
};

use super::PerfError;

/// How long a measured loop may wait for one event before it reports the rig stuck.
pub const STALL: Duration = Duration::from_secs(10);

/// One end of the rig.
pub struct End {
    /// Its device.
    pub ctx: Arc<Context>,
    /// The send and receive CQ.
    pub cq: Cq,
    /// The RC QP, in RTS.
    pub qp: Qp,
    /// The region the peer WRITEs into (REMOTE_WRITE), `size` bytes.
    pub target: Mr,
    /// Source buffers for WRITEs too large to inline.
    pub pool: MemoryPool,
    /// The payload of inline WRITEs (its last byte carries the tag).
    inline: Vec<u8>,
    /// Kept for the objects above (dropped after them).
    _pd: Pd,
}

/// Two connected ends on one fabric.
pub struct Rig {
    /// The client (the side that timestamps).
    pub a: End,
    /// The server.
    pub b: End,
    /// The largest message this QP sends inline.
    pub max_inline: usize,
    /// Kept alive for the ends (its engine thread stops when it drops).
    _fabric: SimFabric,
}

/// The inline size the rig's QPs ask for (perftest's write default is 220; 256 keeps an
/// 8-byte WRITE, and anything up to 256 bytes, inside the WQE).
pub const MAX_INLINE: u32 = 256;

/// One kind of WRITE a loop posts over and over.
#[derive(Debug, Clone, Copy)]
pub struct WriteSpec {
    /// Where it lands.
    pub remote: RemoteBuffer,
    /// Its length.
    pub size: usize,
    /// The largest length sent inline.
    pub max_inline: usize,
}

/// What the rig is built for.
#[derive(Debug, Clone, Copy)]
pub struct RigSpec {
    /// Fabric seed.
    pub seed: u64,
    /// Largest message size.
    pub size: usize,
    /// Send queue depth (and pool chunks per end).
    pub depth: u32,
}

impl Rig {
    /// Builds the rig on a threaded fabric (zero-latency link, doorbells acted on in the
    /// posting thread) and connects the QPs.
    pub fn new(spec: RigSpec) -> Result<Self, PerfError> {
        let fabric = SimFabric::threaded_with(spec.seed, FabricOptions::low_latency());
        let a = Context::open_sim(&fabric, 1)?;
        let b = Context::open_sim(&fabric, 2)?;
        let mut a = End::new(&a, spec)?;
        let mut b = End::new(&b, spec)?;
        let (ea, eb) = (a.qp.endpoint()?, b.qp.endpoint()?);
        a.qp.connect(&eb)?;
        b.qp.connect(&ea)?;
        let max_inline = a.qp.options().caps.max_inline_data as usize;
        Ok(Self {
            a,
            b,
            max_inline,
            _fabric: fabric,
        })
    }
}

impl End {
    /// One end on `ctx`: PD, CQ, a `spec.size` WRITE target, a pool and an RC QP (not
    /// connected).
    pub(super) fn new(ctx: &Arc<Context>, spec: RigSpec) -> Result<Self, VerbsError> {
        let pd = ctx.alloc_pd()?;
        let cq = Cq::new(ctx, spec.depth.saturating_mul(2).max(16))?;
        let target = pd.register(
            spec.size.max(1),
            MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE,
        )?;
        let pool = pd.create_pool(spec.size.max(64), spec.depth as usize + 1)?;
        let qp = QpBuilder::rc(&pd, &cq, &cq)
            .max_send_wr(spec.depth)
            .max_recv_wr(1)
            .max_send_sge(1)
            .max_recv_sge(1)
            .max_inline(MAX_INLINE)
            .build()?;
        Ok(Self {
            ctx: ctx.clone(),
            cq,
            qp,
            target,
            pool,
            inline: vec![0; MAX_INLINE as usize],
            _pd: pd,
        })
    }

    /// Posts one RDMA WRITE as `w` says, whose last byte is `tag` (the value the peer spins
    /// on): inline when it fits, else from a pool lease.
    pub fn post_write(
        &mut self,
        w: &WriteSpec,
        tag: u8,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        let op = SendOp::Write(w.remote);
        let wr = if w.size <= w.max_inline {
            if let Some(last) = self.inline.get_mut(w.size.wrapping_sub(1)) {
                *last = tag;
            }
            SendWr::new(wr_id, op).inline(self.inline.get(..w.size).unwrap_or(&[]))
        } else {
            let mut lease = self.pool.lease(w.size)?;
            if let Some(last) = lease.as_mut_slice().last_mut() {
                *last = tag;
            }
            SendWr::new(wr_id, op).sge(lease)
        };
        let wr = if signaled { wr } else { wr.unsignaled() };
        self.qp.post_send(wr)
    }

    /// Posts one RDMA WRITE of all of `src` to `w.remote`, from the one shared source buffer
    /// every WRITE of a bandwidth run reads (perftest `ib_write_bw` posts every WRITE from the
    /// same local buffer): one atomic increment, no lease per WRITE.
    pub fn post_write_shared(
        &mut self,
        w: &WriteSpec,
        src: &SharedLease,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        let wr = SendWr::new(wr_id, SendOp::Write(w.remote)).sge(src.clone());
        let wr = if signaled { wr } else { wr.unsignaled() };
        self.qp.post_send(wr)
    }

    /// Polls every completion ready on the CQ, reclaiming the buffers of successful ones;
    /// returns how many completed and the largest `wr_id` among them. An error completion
    /// is returned as the error it explains.
    pub fn drain(&mut self) -> Result<(usize, Option<u64>), PerfError> {
        let mut n = 0;
        let mut last = None;
        while let Some(c) = self.cq.poll_one() {
            if !c.is_ok() {
                return Err(PerfError::Completion {
                    wr_id: c.wr_id(),
                    status: c.status().to_string(),
                });
            }
            last = Some(last.map_or(c.wr_id(), |l: u64| l.max(c.wr_id())));
            n += 1;
            self.qp.reclaim(c)?;
        }
        Ok((n, last))
    }

    /// Spins until the last byte of the first `size` bytes of this end's target region is
    /// `tag` (the peer's WRITE landed), letting a stepped device move meanwhile.
    pub fn spin_for(&self, size: usize, tag: u8) -> Result<(), PerfError> {
        let off = size.saturating_sub(1);
        let mut b = [0u8; 1];
        let mut spinner = Spinner::new("the peer's RDMA WRITE to land");
        loop {
            self.target.read(off, &mut b)?;
            if b[0] == tag {
                return Ok(());
            }
            spinner.spin(self)?;
        }
    }

    /// The QP's state as the device reports it, its work outstanding and the packets the
    /// fabric has in flight: what a stalled run reports (control path; allocates).
    fn describe(&self) -> String {
        let state = self
            .qp
            .state()
            .map_or_else(|e| format!("QUERY_QP failed: {e}"), |s| s.to_string());
        let in_flight = self
            .ctx
            .sim()
            .map_or(0, |d| d.fabric().with_world(|w| w.in_flight()));
        let errors = self.ctx.sim().map_or(0, |d| d.fabric().world_errors());
        format!(
            "QP {:#x} is in {state} with {} send WQEBBs outstanding; {in_flight} packets in flight, {errors} world errors",
            self.qp.qpn(),
            self.qp.sends_outstanding()
        )
    }

    /// Polls until one completion is ready (perftest's `ibv_poll_cq(cq, 1, &wc)` loop) and
    /// reclaims its buffers; returns its `wr_id`. An error completion is returned as the
    /// error it explains.
    pub fn wait_one(&mut self) -> Result<u64, PerfError> {
        let mut spinner = Spinner::new("a send completion");
        loop {
            if let Some(c) = self.cq.poll_one() {
                if !c.is_ok() {
                    return Err(PerfError::Completion {
                        wr_id: c.wr_id(),
                        status: c.status().to_string(),
                    });
                }
                let wr_id = c.wr_id();
                self.qp.reclaim(c)?;
                return Ok(wr_id);
            }
            spinner.spin(self)?;
        }
    }

    /// Spins until at least one completion is ready, then drains as [`End::drain`] does.
    pub fn wait_some(&mut self) -> Result<(usize, Option<u64>), PerfError> {
        let mut spinner = Spinner::new("a send completion");
        loop {
            let got = self.drain()?;
            if got.0 > 0 {
                return Ok(got);
            }
            spinner.spin(self)?;
        }
    }
}

/// The bookkeeping of a busy-wait loop: every 4096 spins it lets the device move, and it fails
/// with [`PerfError::Stalled`] once [`STALL`] has passed without the awaited event.
struct Spinner {
    what: &'static str,
    spins: u32,
    since: Option<Instant>,
}

impl Spinner {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            spins: 0,
            since: None,
        }
    }

    /// One more spin of a wait on `end`; an error when the wait has stalled.
    #[inline]
    fn spin(&mut self, end: &End) -> Result<(), PerfError> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % 4096 == 0 {
            end.ctx.progress();
            let t = *self.since.get_or_insert_with(Instant::now);
            if t.elapsed() > STALL {
                return Err(PerfError::Stalled {
                    what: self.what,
                    after: STALL,
                    seen: end.describe(),
                });
            }
        }
        std::hint::spin_loop();
        Ok(())
    }
}
