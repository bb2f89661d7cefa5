//! Shared setup of the data-path tests: a stepped fabric, a side (HCA, PD, CQ, 1 MiB MR, QP)
//! per device, connected pairs, and helpers to run the fabric, drain CQs and read the trace.
//!
//! Owns: test scaffolding only. Must not: reach into driver internals (public API only).

#![allow(dead_code)] // each test binary uses a subset

use std::sync::Arc;

use bypass_driver::Hca;
use bypass_driver::backend::Backend;
use bypass_driver::cq::Cq;
use bypass_driver::mr::{MkeyAccess, Mr};
use bypass_driver::pd::Pd;
use bypass_driver::poll::WorkCompletion;
use bypass_driver::post::RecvWr;
use bypass_driver::qp::Qp;
use bypass_driver::qp_attr::{Init2Rtr, QpCaps, QpType, Rst2Init, Rtr2Rts};
use bypass_sim::Profile;
use bypass_sim::fabric::{SimBackend, SimFabric};
use bypass_sim::trace::TraceEvent;

/// The Q_Key UD tests use.
pub const QKEY: u32 = 0x1111_1111;
/// MR size per side.
pub const MR_LEN: usize = 1 << 20;

/// A stepped fabric.
pub fn fabric(seed: u64) -> SimFabric {
    SimFabric::stepped(seed)
}

/// One device with everything a test posts on. Field order is drop order: QP first.
pub struct Side {
    pub qp: Qp,
    pub mr: Mr,
    pub cq: Cq,
    pub pd: Arc<Pd>,
    pub hca: Arc<Hca>,
    pub backend: Arc<SimBackend>,
    pub id: usize,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

impl Side {
    /// A device of id `n` on `f` with a QP of `t` (BlueFlame if `bf`, else shut up).
    pub fn new(f: &SimFabric, n: u8, t: QpType, bf: bool) -> Self {
        let backend = f.add_device(Profile::with_id(n)).unwrap();
        let id = backend.id();
        let hca = Arc::new(Hca::open(backend.clone()).unwrap());
        let pd = Pd::alloc(&hca).unwrap();
        let cq = Cq::create(&hca, 256).unwrap();
        let buf = hca.alloc_dma(MR_LEN).unwrap();
        let mr = Mr::register(&pd, buf, MkeyAccess::all()).unwrap();
        let caps = QpCaps::default();
        // BlueFlame follows the device and BYPASS_SHUT_UP_BF (set only by the test binary
        // that checks it); `_bf` documents what the caller expects.
        let _ = bf;
        let qp = Qp::create(&pd, &cq, &cq, t, &caps).unwrap();
        let port = hca.port(1).unwrap();
        let gid = port.gids[0];
        let mac = port.mac;
        Self {
            qp,
            mr,
            cq,
            pd,
            hca,
            backend,
            id,
            gid,
            mac,
        }
    }

    /// Writes `bytes` at `off` of the MR.
    pub fn write(&self, off: usize, bytes: &[u8]) {
        self.mr.buf().write(off, bytes).unwrap();
    }

    /// Reads `len` bytes at `off` of the MR.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.mr.buf().read(off, &mut v).unwrap();
        v
    }

    /// Posts a receive of `len` bytes at `off`.
    pub fn recv(&mut self, wr_id: u64, off: u64, len: u32) {
        let s = [self.mr.sge(off, len)];
        // SAFETY: the SGEs name this test's MRs, read only by copies and alive past the post.
        unsafe { self.qp.post_recv(&RecvWr { wr_id, sges: &s }) }.unwrap();
    }

    /// Polls exactly `n` completions (panics with what it got otherwise).
    pub fn drain(&mut self, n: usize) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        while let Some(w) = self.cq.poll_one() {
            v.push(w);
        }
        assert_eq!(v.len(), n, "completions: {v:#?}");
        v
    }

    /// Polls whatever is there.
    pub fn drain_all(&mut self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        while let Some(w) = self.cq.poll_one() {
            v.push(w);
        }
        v
    }

    /// Polls and discards whatever is there.
    pub fn drain_some(&mut self) {
        while self.cq.poll_one().is_some() {}
    }

    /// Turns the device trace on/off (and clears it).
    pub fn trace(&self, on: bool) {
        self.backend
            .with_device(|d| {
                d.trace.set_enabled(on);
                d.trace.take();
            })
            .unwrap();
    }

    /// MMIO writes to BlueFlame registers seen since tracing started: (offset, bytes).
    pub fn uar_writes(&self) -> Vec<(u64, Vec<u8>)> {
        self.backend
            .with_device(|d| {
                d.trace
                    .events()
                    .iter()
                    .filter_map(|e| match e {
                        TraceEvent::MmioWrite { offset, data, .. } if offset % 4096 >= 0x800 => {
                            Some((*offset, data.clone()))
                        }
                        _ => None,
                    })
                    .collect()
            })
            .unwrap()
    }
}

/// Connects two QPs (RC: the whole walk with PSNs 0x100/0x200; UD: Q_Key [`QKEY`]).
pub fn connect(a: &mut Side, b: &mut Side, t: QpType) {
    let (aq, bq) = (a.qp.qpn(), b.qp.qpn());
    let (ag, bg) = (a.gid, b.gid);
    walk(&mut a.qp, t, bq, bg, 0x100, 0x200);
    walk(&mut b.qp, t, aq, ag, 0x200, 0x100);
}

fn walk(qp: &mut Qp, t: QpType, dest: u32, rgid: [u8; 16], sq_psn: u32, rq_psn: u32) {
    qp.rst2init(&Rst2Init {
        qkey: QKEY,
        ..Rst2Init::default()
    })
    .unwrap();
    let rtr = if t == QpType::Rc {
        Init2Rtr::rc(dest, rq_psn, rgid)
    } else {
        Init2Rtr::ud()
    };
    qp.init2rtr(&rtr).unwrap();
    qp.rtr2rts(&Rtr2Rts::new(sq_psn)).unwrap();
}

/// Two connected sides on a fresh fabric.
pub fn pair(seed: u64, t: QpType, bf: bool) -> (SimFabric, Side, Side) {
    let f = fabric(seed);
    let mut a = Side::new(&f, 1, t, bf);
    let mut b = Side::new(&f, 2, t, bf);
    connect(&mut a, &mut b, t);
    (f, a, b)
}

/// Runs the fabric until nothing is left to do (advancing virtual time through timers).
pub fn settle(f: &SimFabric) {
    for _ in 0..100_000 {
        f.run_until_idle().unwrap();
        let Some(next) = f.with_world(|w| w.next_event()) else {
            return;
        };
        f.with_world(|w| {
            let now = w.now();
            w.advance(next.saturating_sub(now).max(1))
        })
        .unwrap();
    }
    panic!("the fabric never went idle");
}

/// Opcodes of every command that completed OK, in order.
pub fn ok_commands(dev: &SimBackend) -> Vec<u16> {
    dev.with_device(|d| d.trace.ok_commands()).unwrap()
}

/// Keeps `Backend` in scope for callers' `progress()`.
pub fn progress(b: &dyn Backend) {
    b.progress();
}
