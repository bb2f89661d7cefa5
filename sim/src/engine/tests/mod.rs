//! Tests of the send side (engine, requester, completer) on the test rig: WQEs are posted on
//! host A, its packets are inspected, and responses are hand-built on host B (the responder is
//! not used) and fed back to A.

mod errors;
mod rc;
mod ring;
mod ud;

use bypass_hw::cqe::{Cqe64, CqeOpcode};
use bypass_hw::roce::{Aeth, BthFields, BthOpcode, ExtFields, RocePacket};
use bypass_hw::syndrome::{AethSyndrome, CqeSyndrome};
use bypass_hw::wqe::{DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, RaddrSeg, WqeOpcode};
use zerocopy::{FromBytes, IntoBytes};

use crate::objects::AddressPath;
use crate::testkit::{Host, HostCq, HostMr, HostQp, Pair, RC, ctrl};
use crate::transport::wire::Route;

/// The remote QPN every RC QP here is connected to.
pub const REMOTE: u32 = 0x99;

/// Host A with one RC QP in RTS towards host B, a CQ and a 64 KiB MR.
pub struct Rig {
    pub p: Pair,
    pub cq: HostCq,
    pub qp: HostQp,
    pub mr: HostMr,
}

impl Rig {
    /// An RC rig with path MTU `mtu` and first PSN `psn`.
    pub fn rc(mtu: u32, psn: u32) -> Self {
        Self::new(RC, mtu, psn, 4)
    }

    /// A rig of service type `st` with an SQ of `1 << log_sq` WQEBBs.
    pub fn new(st: u8, mtu: u32, psn: u32, log_sq: u8) -> Self {
        let mut p = Pair::new();
        let cq = p.a.cq(6);
        let qp = p.a.qp(st, &cq, &cq, log_sq, 4);
        let remote = p.b.gid();
        p.a.make_rts(&qp, REMOTE, remote, mtu, psn, 0);
        // Entering RTS: the device looks once for WQEs posted earlier (there are none).
        p.a.dev.step();
        let mr = p.a.mr(64 << 10, Host::all_access());
        for i in 0..(64 << 10) / 256 {
            let chunk: Vec<u8> = (0..=255u8).map(|b| b.wrapping_add(i as u8)).collect();
            p.a.write(mr.off + i * 256, &chunk);
        }
        Self { p, cq, qp, mr }
    }

    /// The QP's device state.
    pub fn qp_mut(&mut self) -> &mut crate::objects::Qp {
        self.p.a.dev.objs.qps.get_mut(self.qp.qpn).expect("qp")
    }

    /// Posts a WQE of `op` with `segs` after the ctrl segment, `fm_ce_se` flags, and steps.
    pub fn post(&mut self, op: WqeOpcode, segs: &[&[u8]], imm: u32, flags: u8) -> u16 {
        let idx = self.qp.sq_pi as u16;
        let body: usize = segs.iter().map(|s| s.len()).sum();
        let ds = (1 + body.div_ceil(16)) as u8;
        let mut w = ctrl(op, idx, self.qp.qpn, ds, imm);
        w[11] = flags;
        for s in segs {
            w.extend_from_slice(s);
        }
        w.resize(w.len().div_ceil(16) * 16, 0);
        let mut qp = self.qp;
        self.p.a.post_send(&mut qp, &w);
        self.qp = qp;
        self.p.a.dev.step();
        idx
    }

    /// A signaled SEND of `len` bytes from the MR's start.
    pub fn send(&mut self, len: u32) -> u16 {
        let d = DataSeg::new(len, self.mr.key, self.mr.va);
        self.post(WqeOpcode::SEND, &[d.as_bytes()], 0, MLX5_WQE_CTRL_CQ_UPDATE)
    }

    /// A signaled RDMA WRITE of `len` bytes from the MR's start.
    pub fn write(&mut self, len: u32) -> u16 {
        let r = RaddrSeg::new(0xabc0_0000, 0x77);
        let d = DataSeg::new(len, self.mr.key, self.mr.va);
        self.post(
            WqeOpcode::RDMA_WRITE,
            &[r.as_bytes(), d.as_bytes()],
            0,
            MLX5_WQE_CTRL_CQ_UPDATE,
        )
    }

    /// A signaled RDMA READ of `len` bytes into the MR at `off`.
    pub fn read(&mut self, len: u32, off: u64) -> u16 {
        let r = RaddrSeg::new(0xabc0_0000, 0x77);
        let d = DataSeg::new(len, self.mr.key, self.mr.va + off);
        self.post(
            WqeOpcode::RDMA_READ,
            &[r.as_bytes(), d.as_bytes()],
            0,
            MLX5_WQE_CTRL_CQ_UPDATE,
        )
    }

    /// Every packet A has sent since the last call.
    pub fn sent(&mut self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.p.a.dev.take_tx()).collect()
    }

    /// Builds a response on B and hands it to A, then steps A.
    pub fn respond(&mut self, op: BthOpcode, psn: u32, ext: ExtFields, payload: &[u8]) {
        let path = AddressPath {
            rgid: self.p.a.gid(),
            port: 1,
            hop_limit: 64,
            ..Default::default()
        };
        let route = Route {
            port: 1,
            path: &path,
            src_qpn: REMOTE,
        };
        let bth = BthFields {
            opcode: op,
            pkey: 0xffff,
            dest_qp: self.qp.qpn,
            psn,
            ..Default::default()
        };
        assert!(self.p.b.dev.data_path().send(route, bth, ext, payload));
        let pkt = self.p.b.dev.take_tx().expect("built");
        self.p.a.dev.receive(pkt);
        self.p.a.dev.step();
    }

    /// An ACKNOWLEDGE with AETH `syndrome` at `psn`.
    pub fn aeth(&mut self, psn: u32, syndrome: u8) {
        let ext = ExtFields {
            aeth: Some(Aeth::new(AethSyndrome(syndrome), 1).expect("aeth")),
            ..Default::default()
        };
        self.respond(BthOpcode::RC_ACKNOWLEDGE, psn, ext, &[]);
    }

    /// A positive ACK of everything up to `psn`.
    pub fn ack(&mut self, psn: u32) {
        self.aeth(psn, 0x1f);
    }

    /// The next CQE, if any.
    pub fn poll(&mut self) -> Option<Cqe64> {
        let mut cq = self.cq;
        let c = self.p.a.poll(&mut cq);
        self.cq = cq;
        c.map(|b| Cqe64::read_from_bytes(&b[..]).expect("64 bytes"))
    }

    /// Every CQE available now.
    pub fn poll_all(&mut self) -> Vec<Cqe64> {
        std::iter::from_fn(|| self.poll()).collect()
    }

    /// Advances A's clock to `t` and steps it.
    pub fn at(&mut self, t: u64) {
        self.p.a.dev.set_time(t);
        self.p.a.dev.step();
    }
}

/// Parses a packet A sent.
pub fn parse(b: &[u8]) -> RocePacket<'_> {
    let p = RocePacket::parse(b).expect("a valid packet");
    assert!(p.icrc_ok());
    p
}

/// Asserts `c` is a successful requester CQE for WQE `idx`.
pub fn assert_ok(c: &Cqe64, qpn: u32, idx: u16, op: WqeOpcode) {
    assert_eq!(c.opcode(), CqeOpcode::REQ, "not a success CQE: {c:?}");
    assert_eq!((c.qpn(), c.wqe_counter(), c.wqe_opcode()), (qpn, idx, op));
}

/// Asserts `c` is a requester error CQE for WQE `idx` with `synd`.
pub fn assert_err(c: &Cqe64, qpn: u32, idx: u16, synd: CqeSyndrome) {
    assert_eq!(c.opcode(), CqeOpcode::REQ_ERR, "not an error CQE: {c:?}");
    let e = c.as_err();
    assert_eq!(
        (e.qpn(), e.wqe_counter(), e.syndrome()),
        (qpn, idx, synd),
        "{}",
        e.syndrome()
    );
}
