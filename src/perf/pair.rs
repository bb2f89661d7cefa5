//! The single-QP WRITE end `perf compare-udp` drives on each of its two UDP-linked NICs: an
//! RC QP, a remotely writable region (the WRITE target) and a pool of source buffers.
//!
//! Owns: building that end and the no-allocation helpers its measured loops use (post a
//! WRITE, drain the CQ, wait on a byte of the region or a completion while pumping the
//! device). Must not time anything or print: `udp_compare` does. The perf tools use the
//! multi-QP, every-verb engine in `flows` instead.

use std::sync::Arc;
use std::time::Instant;

use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{
    Context, Cq, MemoryPool, Mr, Pd, Qp, QpBuilder, RemoteBuffer, SharedLease, VerbsError,
};

use super::PerfError;
use super::flows::STALL;

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
    /// Largest message size.
    pub size: usize,
    /// Send queue depth (and pool chunks per end).
    pub depth: u32,
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
}

/// Waits until the last byte of `end`'s first `size` bytes is `tag`, pumping the device
/// (`Context::progress`: on a UDP device, this thread reads the socket and runs the NIC) and
/// yielding the core between reads (cores may be few).
pub fn spin_yield(end: &End, size: usize, tag: u8) -> Result<(), PerfError> {
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
        if t0.elapsed() > STALL {
            return Err(PerfError::Stalled {
                what: "the peer's RDMA WRITE to land",
                after: STALL,
                seen: format!("QP {:#x}", end.qp.qpn()),
            });
        }
        std::thread::yield_now();
    }
}

/// [`End::wait_some`], pumping the device and yielding the core between polls (as
/// [`spin_yield`]).
pub fn wait_yield(end: &mut End) -> Result<(usize, Option<u64>), PerfError> {
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
        if t0.elapsed() > STALL {
            return Err(PerfError::Stalled {
                what: "a send completion",
                after: STALL,
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
