//! One lane of the soak: an RC QP pair between the two sim NICs with its own CQs, buffer
//! pools and target MR, carrying a seeded mix of SEND, WRITE, READ and atomics, every one
//! checked end to end.
//!
//! Owns: [`Lane`] (its objects, what it has posted and what it expects back), [`LaneError`]
//! and the message mix. Must not: touch the fabric beyond settling it when the lane drains
//! ([`Lane::finish`]), nor other lanes' objects; the soak (`mod.rs`) decides when a lane is
//! replaced.
//!
//! The checks follow `tests/fault_soak.rs`: each requester completion is the next posted WQE
//! (RC completes in order) with success status; a WRITE's bytes are at the target when it
//! completes; a READ returns the source bytes; an atomic returns the value the lane's model
//! of the target had, and the target ends at the model's value; SENDs arrive once, in order,
//! intact. Payloads carry the lane's generation and the message number, so a packet of a
//! replaced lane's QP that reached its successor (same QPN) would fail the check.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bypass_testbed::SimFabric;
use bypass_verbs::{
    Access, Completion, Context, Cq, Lease, MemoryPool, Mr, Mtu, Pd, Qp, QpBuilder, RecvWr, SendOp,
    SendWr, VerbsError, WcOpcode, WcStatus,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Largest message (4 packets at the lanes' 1024-byte path MTU).
pub const MAX_MSG: usize = 4096;
/// WQEs outstanding on the requester.
const WINDOW: usize = 4;
/// Receives kept posted on the responder.
const RECVS: usize = 8;
/// WRITE slots in the target MR, one per window position.
const SLOT: usize = MAX_MSG;
/// READ source: offset and length in the target MR.
const READ_OFF: usize = WINDOW * SLOT;
const READ_LEN: usize = MAX_MSG;
/// The atomic target.
const ATOMIC_OFF: usize = READ_OFF + READ_LEN;
const MR_LEN: usize = ATOMIC_OFF + 64;
/// How long one wait for a completion may take (wall clock) before the lane is called stuck.
const WAIT: Duration = Duration::from_secs(60);
/// Virtual time a draining lane lets the fabric run for its last packets.
const SETTLE_NS: u64 = 10_000_000_000;

/// A lane's data went wrong, or a verb failed.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// A message completed wrongly or its data differs.
    #[error("lane {lane} message {seq} ({kind}): {what}")]
    Data {
        /// The lane's generation.
        lane: u64,
        /// The message number within the lane.
        seq: u64,
        /// SEND, WRITE, READ, FETCH_ADD or CMP_SWAP.
        kind: &'static str,
        /// What was wrong.
        what: String,
    },
    /// The lane stopped making progress or ended with messages unaccounted for.
    #[error("lane {lane}: {what}")]
    Stuck {
        /// The lane's generation.
        lane: u64,
        /// What is missing.
        what: String,
    },
    /// A verb failed.
    #[error("lane {lane}: {what}: {source}")]
    Verb {
        /// The lane's generation.
        lane: u64,
        /// The call.
        what: &'static str,
        /// Its error.
        source: VerbsError,
    },
}

/// Messages a lane completed, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mixed {
    /// SENDs (each also a receive at the responder).
    pub sends: u64,
    /// RDMA WRITEs.
    pub writes: u64,
    /// RDMA READs.
    pub reads: u64,
    /// Fetch-and-add and compare-and-swap.
    pub atomics: u64,
}

impl Mixed {
    /// Every message.
    pub fn total(&self) -> u64 {
        self.sends + self.writes + self.reads + self.atomics
    }

    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Mixed) {
        self.sends += o.sends;
        self.writes += o.writes;
        self.reads += o.reads;
        self.atomics += o.atomics;
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send { len: usize },
    Write { slot: usize, len: usize },
    Read { off: usize, len: usize },
    FetchAdd { add: u64, old: u64 },
    CompareSwap { compare: u64, swap: u64, old: u64 },
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Send { .. } => "SEND",
            Self::Write { .. } => "WRITE",
            Self::Read { .. } => "READ",
            Self::FetchAdd { .. } => "FETCH_ADD",
            Self::CompareSwap { .. } => "CMP_SWAP",
        }
    }
}

/// A number below `n` (0 for `n` 0) from the lane's seeded generator: its deterministic
/// choices.
fn below(mix: &mut ChaCha8Rng, n: u64) -> u64 {
    mix.next_u64() % n.max(1)
}

/// The bytes of message `seq` of lane `lane`: both numbers, then a keyed pattern.
fn payload(lane: u64, seq: u64, len: usize) -> Vec<u8> {
    let key = lane.wrapping_mul(0x1000_0000_01b3) ^ seq;
    let mut v: Vec<u8> = (0..len)
        .map(|i| (key.wrapping_mul(31).wrapping_add(i as u64 * 7) >> (i % 5)) as u8)
        .collect();
    let mut tag = [0u8; 16];
    tag[..8].copy_from_slice(&lane.to_le_bytes());
    tag[8..].copy_from_slice(&seq.to_le_bytes());
    let n = tag.len().min(len);
    v[..n].copy_from_slice(&tag[..n]);
    v
}

fn read_source(lane: u64) -> Vec<u8> {
    (0..READ_LEN)
        .map(|i| (i as u64 * 13 + lane) as u8 ^ (i / 256) as u8)
        .collect()
}

/// One QP pair and everything it owns. Field order is drop order: the QPs go before the
/// CQs, pools and MR they use.
pub struct Lane {
    qa: Qp,
    qb: Qp,
    a_pool: MemoryPool,
    b_pool: MemoryPool,
    mr: Mr,
    a_cq: Cq,
    b_cq: Cq,
    generation: u64,
    mix: ChaCha8Rng,
    source: Vec<u8>,
    atomic_value: u64,
    pending: VecDeque<(u64, Kind)>,
    expected_sends: VecDeque<(u64, usize)>,
    next_recv: u64,
    posted: u64,
    done: Mixed,
}

impl Lane {
    /// A new lane of generation `generation` (its payloads and mix are keyed by it): CQs,
    /// pools and an MR on each side, two RC QPs connected at a 1024-byte path MTU, receives
    /// posted.
    pub fn new(
        a: &Arc<Context>,
        b: &Arc<Context>,
        pd_a: &Pd,
        pd_b: &Pd,
        generation: u64,
        seed: u64,
    ) -> Result<Self, LaneError> {
        let v = |what| {
            move |source| LaneError::Verb {
                lane: generation,
                what,
                source,
            }
        };
        let a_cq = Cq::new(a, 64).map_err(v("CREATE_CQ (requester)"))?;
        let b_cq = Cq::new(b, 64).map_err(v("CREATE_CQ (responder)"))?;
        let a_pool = pd_a
            .create_pool(MAX_MSG, 2 * WINDOW)
            .map_err(v("requester pool"))?;
        let b_pool = pd_b
            .create_pool(MAX_MSG, RECVS + 2)
            .map_err(v("responder pool"))?;
        let mr = pd_b
            .register(
                MR_LEN,
                Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC,
            )
            .map_err(v("register the target MR"))?;
        let source = read_source(generation);
        mr.write(READ_OFF, &source).map_err(v("MR write"))?;
        mr.write_u64_be(ATOMIC_OFF, 0).map_err(v("MR write"))?;
        let mut qa = QpBuilder::rc(pd_a, &a_cq, &a_cq)
            .max_send_wr(WINDOW as u32)
            .build()
            .map_err(v("CREATE_QP (requester)"))?;
        let mut qb = QpBuilder::rc(pd_b, &b_cq, &b_cq)
            .max_recv_wr(RECVS as u32)
            .build()
            .map_err(v("CREATE_QP (responder)"))?;
        let mut ea = qa.endpoint().map_err(v("endpoint"))?;
        let mut eb = qb.endpoint().map_err(v("endpoint"))?;
        ea.mtu = Mtu::Mtu1024;
        eb.mtu = Mtu::Mtu1024;
        qa.connect(&eb).map_err(v("connect the requester"))?;
        qb.connect(&ea).map_err(v("connect the responder"))?;
        let mut lane = Self {
            qa,
            qb,
            a_pool,
            b_pool,
            mr,
            a_cq,
            b_cq,
            generation,
            mix: ChaCha8Rng::seed_from_u64(seed ^ generation.wrapping_mul(0x2545_f491_4f6c_dd1d)),
            source,
            atomic_value: 0,
            pending: VecDeque::new(),
            expected_sends: VecDeque::new(),
            next_recv: 0,
            posted: 0,
            done: Mixed::default(),
        };
        for _ in 0..RECVS {
            lane.post_recv()?;
        }
        Ok(lane)
    }

    /// Messages completed and checked so far.
    pub fn done(&self) -> Mixed {
        self.done
    }

    /// Fills the window, waits for the oldest outstanding message (the stepped fabric moves
    /// while it waits) and checks every completion there is, both sides.
    pub fn step(&mut self) -> Result<(), LaneError> {
        while self.pending.len() < WINDOW {
            self.post_next()?;
        }
        let c = self.wait_one()?;
        self.complete(c)?;
        while let Some(c) = self.a_cq.poll_one() {
            self.complete(c)?;
        }
        self.drain_recvs()
    }

    /// Drains the lane: completes what is outstanding, lets the fabric deliver the last
    /// packets, and checks every SEND arrived and the atomic target holds the model's value.
    pub fn finish(&mut self, fabric: &SimFabric) -> Result<(), LaneError> {
        while !self.pending.is_empty() {
            let c = self.wait_one()?;
            self.complete(c)?;
        }
        let _ = fabric.with_world(|w| w.settle(SETTLE_NS));
        self.drain_recvs()?;
        if !self.expected_sends.is_empty() {
            return Err(self.stuck(format!("{} SENDs never arrived", self.expected_sends.len())));
        }
        let v = self
            .mr
            .read_u64_be(ATOMIC_OFF)
            .map_err(|source| LaneError::Verb {
                lane: self.generation,
                what: "MR read",
                source,
            })?;
        if v != self.atomic_value {
            return Err(self.stuck(format!(
                "atomic target {v:#x}, expected {:#x}: an atomic ran twice or never",
                self.atomic_value
            )));
        }
        Ok(())
    }

    fn stuck(&self, what: String) -> LaneError {
        LaneError::Stuck {
            lane: self.generation,
            what: format!(
                "{what} ({} posted, {} outstanding)",
                self.posted,
                self.pending.len()
            ),
        }
    }

    fn verb(&self, what: &'static str) -> impl FnOnce(VerbsError) -> LaneError {
        let lane = self.generation;
        move |source| LaneError::Verb { lane, what, source }
    }

    fn pick(&mut self, seq: u64) -> Kind {
        let slot = (seq as usize) % WINDOW;
        let len = match below(&mut self.mix, 4) {
            0 => 1 + below(&mut self.mix, 64) as usize,
            1 => 64 + below(&mut self.mix, 1024) as usize,
            _ => 1 + below(&mut self.mix, MAX_MSG as u64) as usize,
        };
        match below(&mut self.mix, 10) {
            0..=3 => Kind::Send { len },
            4..=5 => Kind::Write { slot, len },
            6..=7 => {
                let len = len.min(READ_LEN);
                let off = below(&mut self.mix, (READ_LEN - len + 1) as u64) as usize;
                Kind::Read { off, len }
            }
            8 => {
                let add = 1 + below(&mut self.mix, 1000);
                let old = self.atomic_value;
                self.atomic_value = old.wrapping_add(add);
                Kind::FetchAdd { add, old }
            }
            _ => {
                let old = self.atomic_value;
                let hit = below(&mut self.mix, 2) == 0;
                let compare = if hit { old } else { old ^ 1 };
                let swap = self.mix.next_u64();
                if hit {
                    self.atomic_value = swap;
                }
                Kind::CompareSwap { compare, swap, old }
            }
        }
    }

    fn lease_with(&self, bytes: &[u8]) -> Result<Lease, LaneError> {
        let mut l = self
            .a_pool
            .lease(bytes.len())
            .map_err(self.verb("requester lease"))?;
        l.as_mut_slice().copy_from_slice(bytes);
        Ok(l)
    }

    fn post_next(&mut self) -> Result<(), LaneError> {
        let seq = self.posted;
        let kind = self.pick(seq);
        let remote = self.mr.remote();
        let slice = |off: usize, len: usize| {
            remote
                .slice(off as u64, len as u64)
                .ok_or_else(|| self.stuck(format!("no {len} bytes at {off} in the target MR")))
        };
        let lease = |len: usize| self.a_pool.lease(len).map_err(self.verb("requester lease"));
        let g = self.generation;
        let wr = match kind {
            Kind::Send { len } => {
                SendWr::new(seq, SendOp::Send).sge(self.lease_with(&payload(g, seq, len))?)
            }
            Kind::Write { slot, len } => SendWr::new(seq, SendOp::Write(slice(slot * SLOT, len)?))
                .sge(self.lease_with(&payload(g, seq, len))?),
            Kind::Read { off, len } => {
                SendWr::new(seq, SendOp::Read(slice(READ_OFF + off, len)?)).sge(lease(len)?)
            }
            Kind::FetchAdd { add, .. } => SendWr::new(
                seq,
                SendOp::FetchAdd {
                    remote: slice(ATOMIC_OFF, 8)?,
                    add,
                },
            )
            .sge(lease(8)?),
            Kind::CompareSwap { compare, swap, .. } => SendWr::new(
                seq,
                SendOp::CompareSwap {
                    remote: slice(ATOMIC_OFF, 8)?,
                    compare,
                    swap,
                },
            )
            .sge(lease(8)?),
        };
        self.qa.post_send(wr).map_err(self.verb("post_send"))?;
        if let Kind::Send { len } = kind {
            self.expected_sends.push_back((seq, len));
        }
        self.pending.push_back((seq, kind));
        self.posted += 1;
        Ok(())
    }

    fn post_recv(&mut self) -> Result<(), LaneError> {
        let l = self
            .b_pool
            .lease(MAX_MSG)
            .map_err(self.verb("receive lease"))?;
        self.qb
            .post_recv(RecvWr::new(self.next_recv, l))
            .map_err(self.verb("post_recv"))?;
        self.next_recv += 1;
        Ok(())
    }

    /// The next send-side completion, waiting up to [`WAIT`]; none by then is a stuck lane.
    fn wait_one(&mut self) -> Result<Completion, LaneError> {
        self.a_cq
            .wait(WAIT)
            .map_err(|source| LaneError::Verb {
                lane: self.generation,
                what: "waiting for a completion",
                source,
            })?
            .ok_or_else(|| self.stuck(format!("no completion within {WAIT:?}")))
    }

    fn complete(&mut self, c: Completion) -> Result<(), LaneError> {
        let Some((seq, kind)) = self.pending.pop_front() else {
            return Err(self.stuck(format!("a completion nothing was waiting for: {c}")));
        };
        let bad = |what: String| LaneError::Data {
            lane: self.generation,
            seq,
            kind: kind.name(),
            what,
        };
        if c.status() != WcStatus::Success || c.wr_id() != seq {
            return Err(bad(format!("completed as wr_id {}: {c}", c.wr_id())));
        }
        let op = c.opcode();
        let got = self.qa.reclaim_lease(c).map_err(self.verb("reclaim"))?;
        match kind {
            Kind::Send { .. } => {
                if op != WcOpcode::Send {
                    return Err(bad(format!("opcode {op:?}")));
                }
                self.done.sends += 1;
            }
            Kind::Write { slot, len } => {
                let mut buf = vec![0u8; len];
                self.mr
                    .read(slot * SLOT, &mut buf)
                    .map_err(self.verb("MR read"))?;
                if buf != payload(self.generation, seq, len) {
                    return Err(bad("the target does not hold the written bytes".into()));
                }
                self.done.writes += 1;
            }
            Kind::Read { off, len } => {
                let l = got.ok_or_else(|| bad("no READ buffer".into()))?;
                if l.as_slice().get(..len) != self.source.get(off..off + len) {
                    return Err(bad("READ data differs from the source".into()));
                }
                self.done.reads += 1;
            }
            Kind::FetchAdd { old, .. } | Kind::CompareSwap { old, .. } => {
                let l = got.ok_or_else(|| bad("no atomic buffer".into()))?;
                let v = l
                    .as_slice()
                    .get(..8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| bad("atomic buffer shorter than 8 bytes".into()))?;
                if v != old {
                    return Err(bad(format!("atomic returned {v:#x}, expected {old:#x}")));
                }
                self.done.atomics += 1;
            }
        }
        Ok(())
    }

    /// Checks every receive completion is the next SEND, in order, with its bytes, and
    /// reposts a receive for it.
    fn drain_recvs(&mut self) -> Result<(), LaneError> {
        while let Some(c) = self.b_cq.poll_one() {
            let Some((seq, len)) = self.expected_sends.pop_front() else {
                return Err(self.stuck(format!("a receive no SEND was posted for: {c}")));
            };
            let bad = |what: String| LaneError::Data {
                lane: self.generation,
                seq,
                kind: "SEND",
                what,
            };
            if !c.is_ok() || c.opcode() != WcOpcode::Recv || c.byte_len() as usize != len {
                return Err(bad(format!("arrived as {c} of {} B", c.byte_len())));
            }
            let mut l = self
                .qb
                .reclaim_lease(c)
                .map_err(self.verb("reclaim"))?
                .ok_or_else(|| bad("no receive buffer".into()))?;
            l.set_len(len).map_err(self.verb("set_len"))?;
            if l.as_slice() != payload(self.generation, seq, len).as_slice() {
                return Err(bad("arrived corrupted, duplicated or out of order".into()));
            }
            drop(l);
            self.post_recv()?;
        }
        Ok(())
    }
}
