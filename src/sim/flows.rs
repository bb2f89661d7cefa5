//! The flows of a `bypass sim` experiment: RC QP pairs between simulated NICs of one stepped
//! fabric, each sender keeping `depth` RDMA WRITEs of `size` bytes in flight, driven in fixed
//! quanta of virtual time.
//!
//! Owns: [`FlowSpec`], [`Flow`] (the two QPs, the WRITE target, the shared source buffer, the
//! post times of what is in flight) and [`drive`], which alternates "drain completions and
//! refill every flow" with one quantum of the world. Must not: build the network, read the
//! switch or print (`incast` and `report` do): it hands the world to a sampler between quanta.
//!
//! Timing: a WRITE is stamped with the virtual time of the quantum it was posted in and
//! completed at the quantum its completion was polled in, so a latency is exact to one
//! quantum. Everything is virtual: the same seed and options give the same run.

use std::collections::VecDeque;
use std::sync::Arc;

use bypass_sim::World;
use bypass_testbed::SimFabric;
use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::driver::qp_attr::{Init2Rtr, Rtr2Rts};
use bypass_verbs::wr::{SendOp, SendWr};
use bypass_verbs::{
    Context, Cq, Mr, Mtu, Pd, Qp, QpBuilder, RemoteBuffer, SharedLease, VerbsError,
};

/// One flow: who sends to whom, how, and how much at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    /// The sending NIC (index into the contexts).
    pub src: usize,
    /// The receiving NIC.
    pub dst: usize,
    /// The IP traffic class (DSCP << 2 | ECN) of its packets.
    pub tclass: u8,
    /// Bytes per WRITE.
    pub size: usize,
    /// WRITEs kept in flight.
    pub depth: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries before RETRY_EXC.
    pub retry_cnt: u8,
}

/// What a flow did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// WRITEs completed.
    pub completed: u64,
    /// Each completed WRITE's latency (post to completion), ns of virtual time.
    pub latencies_ns: Vec<u64>,
    /// The first error completion, which stopped the flow.
    pub error: Option<String>,
}

/// A running flow.
pub struct Flow {
    /// What it is.
    pub spec: FlowSpec,
    /// What it did so far.
    pub stats: FlowStats,
    /// The receiving QP's number.
    pub rx_qpn: u32,
    /// The sending QP's number.
    pub tx_qpn: u32,
    qp: Qp,
    cq: Cq,
    remote: RemoteBuffer,
    src: SharedLease,
    /// Post times of the WRITEs in flight, oldest first (completions come in order on RC).
    posted: VecDeque<u64>,
    next_id: u64,
    // Kept for the objects above; dropped after them.
    _rx: (Qp, Cq, Mr),
    _pds: (Pd, Pd),
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("spec", &self.spec)
            .field("tx_qpn", &self.tx_qpn)
            .field("rx_qpn", &self.rx_qpn)
            .field("in_flight", &self.posted.len())
            .finish_non_exhaustive()
    }
}

impl Flow {
    /// Builds and connects the flow's QPs between `ctxs[spec.src]` and `ctxs[spec.dst]`.
    pub fn new(ctxs: &[Arc<Context>], spec: FlowSpec) -> Result<Self, FlowError> {
        let ctx = |i: usize| {
            ctxs.get(i).ok_or(FlowError::NoSuchNic {
                index: i,
                nics: ctxs.len(),
            })
        };
        let (a, b) = (ctx(spec.src)?, ctx(spec.dst)?);
        let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
        let depth = spec.depth.max(1);
        let cq = Cq::new(a, depth.saturating_mul(2).max(16))?;
        let rcq = Cq::new(b, 16)?;
        let target = pb.register(
            spec.size.max(1),
            MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE,
        )?;
        let pool = pa.create_pool(spec.size.max(64), 1)?;
        let mut lease = pool.lease(spec.size.max(1))?;
        lease.as_mut_slice().fill(0x5a);
        let src = lease.freeze();
        let mut qp = QpBuilder::rc(&pa, &cq, &cq)
            .max_send_wr(depth)
            .max_recv_wr(1)
            .max_send_sge(1)
            .max_recv_sge(1)
            .build()?;
        let mut rqp = QpBuilder::rc(&pb, &rcq, &rcq)
            .max_send_wr(1)
            .max_recv_wr(1)
            .max_send_sge(1)
            .max_recv_sge(1)
            .build()?;
        let (ea, eb) = (qp.endpoint()?, rqp.endpoint()?);
        connect(&mut qp, &eb, spec)?;
        connect(&mut rqp, &ea, spec)?;
        Ok(Self {
            spec,
            stats: FlowStats::default(),
            rx_qpn: rqp.qpn(),
            tx_qpn: qp.qpn(),
            remote: target.remote(),
            qp,
            cq,
            src,
            posted: VecDeque::new(),
            next_id: 0,
            _rx: (rqp, rcq, target),
            _pds: (pa, pb),
        })
    }

    /// True while the flow runs (no error completion yet).
    pub fn running(&self) -> bool {
        self.stats.error.is_none()
    }

    /// Takes the completions ready at `now` and posts WRITEs until `depth` are in flight.
    fn service(&mut self, now: u64) -> Result<(), FlowError> {
        while let Some(c) = self.cq.poll_one() {
            if !c.is_ok() {
                self.stats.error = Some(format!(
                    "QP {:#x}: WRITE {} completed with {}",
                    self.tx_qpn,
                    c.wr_id(),
                    c.status()
                ));
                return Ok(());
            }
            if let Some(t) = self.posted.pop_front() {
                self.stats.latencies_ns.push(now.saturating_sub(t));
            }
            self.stats.completed += 1;
            self.qp.reclaim(c)?;
        }
        while self.running() && self.posted.len() < self.spec.depth.max(1) as usize {
            let wr = SendWr::new(self.next_id, SendOp::Write(self.remote)).sge(self.src.clone());
            self.qp.post_send(wr)?;
            self.next_id += 1;
            self.posted.push_back(now);
        }
        Ok(())
    }
}

/// INIT → RTR → RTS toward `remote` with the flow's MTU, traffic class, timeout and retries.
fn connect(
    qp: &mut Qp,
    remote: &bypass_verbs::QpEndpoint,
    spec: FlowSpec,
) -> Result<(), VerbsError> {
    qp.modify_to_init()?;
    let mut rtr = Init2Rtr::rc(remote.qpn, remote.psn, remote.gid.0);
    rtr.mtu = spec.mtu.to_path_mtu();
    rtr.path.traffic_class = spec.tclass;
    qp.modify_to_rtr_with(&rtr)?;
    let mut rts = Rtr2Rts::new(qp.psn());
    rts.timeout = spec.timeout;
    rts.retry_cnt = spec.retry_cnt;
    qp.modify_to_rts_with(&rts)
}

/// Runs `flows` on `fabric` for `duration_ns` of virtual time in quanta of `quantum_ns`:
/// at each quantum boundary every running flow drains its completions and refills, then
/// `sample` sees the world and the flows, then the world runs one quantum.
pub fn drive(
    fabric: &SimFabric,
    flows: &mut [Flow],
    duration_ns: u64,
    quantum_ns: u64,
    mut sample: impl FnMut(&mut World, &[Flow]),
) -> Result<(), FlowError> {
    let quantum = quantum_ns.max(1);
    let start = fabric.with_world(|w| w.now());
    let end = start.saturating_add(duration_ns);
    loop {
        let now = fabric.with_world(|w| w.now());
        for f in flows.iter_mut().filter(|f| f.running()) {
            f.service(now)?;
        }
        fabric.with_world(|w| sample(w, flows));
        if now >= end {
            return Ok(());
        }
        let step = quantum.min(end - now);
        fabric
            .with_world(|w| w.advance(step))
            .map_err(|e| FlowError::Livelock(e.to_string()))?;
    }
}

/// A flow could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// A flow names a NIC the experiment does not have.
    #[error(
        "flow names NIC {index} but the experiment has {nics}: a bug in the experiment's flow list"
    )]
    NoSuchNic {
        /// The index named.
        index: usize,
        /// NICs there are.
        nics: usize,
    },
    /// A verbs call failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The simulated world livelocked.
    #[error("the simulated network livelocked: {0}")]
    Livelock(String),
}
