//! One end of `ping --ramp`: its device objects (PD, one CQ, the RC QPs of every stage, a
//! pool of small buffers, the regions the peer WRITEs and READs) and the waits on its CQ.
//!
//! Owns: [`End`], the check of the data pattern both ends agree on ([`check`], over perf's
//! `ops::pattern`) and the size limits of a ramp. Must not print or know which stage it is in (the stages and the
//! responder do).

use std::sync::Arc;
use std::time::Duration;

use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::{Context, Cq, Lease, MemoryPool, Mr, Pd, Qp, QpBuilder, QpEndpoint, VerbsError};

use crate::perf::ops::mismatch;

/// The most QPs stage 2 opens at once.
pub const MAX_QPS: u32 = 64;
/// Stage 2's message size (a few packets at a 1024-byte MTU).
pub const QP_MSG: u32 = 4096;
/// The largest stage 3 message a ramp asks for, whatever the device allows: it registers
/// three regions of that size (the peer's, and a source and a sink here).
pub const MAX_SIZE_LIMIT: u64 = 1 << 30;

pub use crate::perf::ops::fill;

/// Checks `buf` against the pattern of `tag`: `Err` names the first wrong byte.
pub fn check(buf: &[u8], tag: u64) -> Result<(), String> {
    match mismatch(buf, tag) {
        None => Ok(()),
        Some((j, got, want)) => Err(format!(
            "byte {j} of {} is {got:#04x}, expected {want:#04x} (the data was not delivered intact)",
            buf.len()
        )),
    }
}

/// `bytes` as a person reads it: `8 MiB`, `4 KiB`, `1 GiB` when exact, else `N B`.
pub fn human(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

/// What a completion carried, once its buffers are back.
#[derive(Debug)]
pub struct Done {
    /// The QP it belongs to.
    pub qpn: u32,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// The buffer of a one-buffer request.
    pub lease: Option<Lease>,
}

/// The stage 3 buffers of one end.
pub struct Big {
    /// The region the peer WRITEs into and READs from.
    pub target: Mr,
    /// Local source and sink buffers of up to the largest size.
    pub pool: MemoryPool,
}

/// One end's objects.
pub struct End {
    /// The end's name in messages (`A`, `B`).
    pub name: &'static str,
    /// Its RC QPs: index 0 is stage 1's (reused by stage 3), then stage 2's.
    pub qps: Vec<Qp>,
    /// Small buffers (sends and receives of stages 1 and 2).
    pub pool: MemoryPool,
    /// Stage 2's WRITE target: `qps × QP_MSG` bytes.
    pub target: Option<Mr>,
    /// Stage 3's buffers.
    pub big: Option<Big>,
    /// The CQ every QP completes on.
    pub cq: Cq,
    /// The protection domain.
    pub pd: Pd,
    /// The device.
    pub ctx: Arc<Context>,
    /// How long a wait for one completion may take.
    pub timeout: Duration,
}

impl End {
    /// PD, CQ and small-buffer pool on `ctx`; no QP yet.
    pub fn new(
        name: &'static str,
        ctx: &Arc<Context>,
        timeout: Duration,
    ) -> Result<Self, VerbsError> {
        let pd = ctx.alloc_pd()?;
        let cq = Cq::new(ctx, 4 * MAX_QPS + 16)?;
        let pool = pd.create_pool(QP_MSG as usize, 2 * MAX_QPS as usize + 4)?;
        Ok(Self {
            name,
            qps: Vec::new(),
            pool,
            target: None,
            big: None,
            cq,
            pd,
            ctx: ctx.clone(),
            timeout,
        })
    }

    /// Creates `n` RC QPs and moves them to INIT (receives may be posted from there);
    /// returns their endpoints.
    pub fn add_qps(&mut self, n: u32) -> Result<Vec<QpEndpoint>, VerbsError> {
        let mut eps = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let qp = QpBuilder::rc(&self.pd, &self.cq, &self.cq)
                .max_send_wr(4)
                .max_recv_wr(2)
                .build()?;
            let mut qp = qp;
            qp.modify_to_init()?;
            eps.push(qp.endpoint()?);
            self.qps.push(qp);
        }
        Ok(eps)
    }

    /// Connects the last `remote.len()` QPs (in INIT) to `remote`, in order (INIT → RTR →
    /// RTS).
    pub fn connect_last(&mut self, remote: &[QpEndpoint]) -> Result<(), VerbsError> {
        let from = self.qps.len().saturating_sub(remote.len());
        for (qp, ep) in self.qps.iter_mut().skip(from).zip(remote) {
            qp.modify_to_rtr(ep)?;
            qp.modify_to_rts()?;
        }
        Ok(())
    }

    /// The largest message this end's device takes (`max_msg_sz`).
    pub fn device_limit(&self) -> u64 {
        1u64 << self.ctx.device_info().caps.log_max_msg.min(62)
    }

    /// Registers stage 3's buffers for messages of up to `max_size` bytes; refuses sizes
    /// above the device's and the ramp's limit before allocating anything.
    pub fn make_big(&mut self, max_size: u64) -> Result<(), String> {
        let dev = self.device_limit();
        let limit = dev.min(MAX_SIZE_LIMIT);
        if max_size == 0 || max_size > limit {
            return Err(format!(
                "--max-size {} is outside 1 B ..= {}: {}'s device takes messages of at most {} (max_msg_sz), and a ramp stops at {} (it registers three buffers of that size); give --max-size {}M or less",
                human(max_size),
                human(limit),
                self.name,
                human(dev),
                human(MAX_SIZE_LIMIT),
                limit >> 20,
            ));
        }
        let size = usize::try_from(max_size).map_err(|e| e.to_string())?;
        let access = MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE | MkeyAccess::REMOTE_READ;
        let target = self.pd.register(size, access).map_err(|e| e.to_string())?;
        let pool = self.pd.create_pool(size, 2).map_err(|e| e.to_string())?;
        self.big = Some(Big { target, pool });
        Ok(())
    }

    /// Waits for one completion, takes its buffers back from its QP, and turns an error
    /// status or a timeout into the text the user sees.
    pub fn wait(&mut self, what: &str) -> Result<Done, String> {
        let c = match self.cq.wait(self.timeout) {
            Ok(Some(c)) => c,
            Ok(None) => {
                return Err(format!(
                    "no {what} completion on {}'s CQ within {} ms (the peer never answered: check both ends' QPs are connected toward each other, or raise --timeout-ms)",
                    self.name,
                    self.timeout.as_millis()
                ));
            }
            Err(e) => return Err(e.to_string()),
        };
        if !c.is_ok() {
            return Err(format!(
                "{what}: wr_id {} on qpn {:#x} completed with {}",
                c.wr_id(),
                c.qpn(),
                c.status()
            ));
        }
        let (qpn, byte_len) = (c.qpn(), c.byte_len());
        let qp = self
            .qps
            .iter_mut()
            .find(|q| q.qpn() == qpn)
            .ok_or_else(|| {
                format!(
                    "{what}: a completion for qpn {qpn:#x}, which {} does not own",
                    self.name
                )
            })?;
        let lease = qp.reclaim_lease(c).map_err(|e| e.to_string())?;
        Ok(Done {
            qpn,
            byte_len,
            lease,
        })
    }
}
