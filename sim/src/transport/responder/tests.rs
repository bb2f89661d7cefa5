//! Responder tests: request packets built as a peer would (`transport::wire::send` on the other
//! host), received by the device under test, then its memory, CQEs and response packets
//! checked. The requester is not used.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::cqe::{Cqe64, CqeOpcode};
use bypass_hw::eqe::EventType;
use bypass_hw::roce::{
    AtomicEth, BthFields, BthOpcode, DEFAULT_PKEY, Deth, ExtFields, ImmDt, Reth, RocePacket,
};
use bypass_hw::syndrome::CqeSyndrome;
use zerocopy::FromBytes;

use crate::mkey::Access;
use crate::objects::AddressPath;
use crate::testkit::{Host, HostCq, HostMr, HostQp, Pair, RC, UD};
use crate::transport::wire::Route;

const EPSN: u32 = 0x00ff_fff0; // close to the wrap, so PSN arithmetic wraps in most tests
const MR_LEN: usize = 64 << 10;

/// A response packet, decoded.
#[derive(Debug, Clone)]
struct Resp {
    op: BthOpcode,
    psn: u32,
    dest: u32,
    syn: Option<u8>,
    msn: Option<u32>,
    orig: Option<u64>,
    payload: Vec<u8>,
}

/// Device B is under test; device A plays the peer.
struct Rig {
    p: Pair,
    qp: HostQp,
    rcq: HostCq,
    mr: HostMr,
    peer: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Req<'a> {
    op: BthOpcode,
    psn: u32,
    ack: bool,
    se: bool,
    ext: ExtFields,
    payload: &'a [u8],
    /// The BTH P_Key; `None`: the default.
    pkey: Option<u16>,
}

impl Rig {
    fn new(service: u8, mtu: u32) -> Self {
        let mut p = Pair::new();
        let acq = p.a.cq(4);
        let aqp = p.a.qp(service, &acq, &acq, 4, 4);
        let scq = p.b.cq(7);
        let rcq = p.b.cq(7);
        let qp = p.b.qp(service, &scq, &rcq, 4, 4);
        let (ga, gb) = (p.a.gid(), p.b.gid());
        p.b.make_rts(&qp, aqp.qpn, ga, mtu, 0, EPSN);
        p.a.make_rts(&aqp, qp.qpn, gb, mtu, EPSN, 0);
        let mr = p.b.mr(MR_LEN, Host::all_access());
        Self {
            p,
            qp,
            rcq,
            mr,
            peer: aqp.qpn,
        }
    }

    fn rc(mtu: u32) -> Self {
        Self::new(RC, mtu)
    }

    /// The path from A to B (local GID index `sgid`).
    fn path(&self, sgid: u8, rgid: [u8; 16]) -> AddressPath {
        AddressPath {
            rgid,
            src_addr_index: sgid,
            port: 1,
            hop_limit: 64,
            ..Default::default()
        }
    }

    /// Builds the request on A, carries it to B, and steps B.
    fn inject(&mut self, r: Req<'_>) {
        let path = self.path(0, self.p.b.gid());
        let pkt = self.build(&path, r);
        self.deliver(pkt);
    }

    fn build(&mut self, path: &AddressPath, r: Req<'_>) -> Vec<u8> {
        let bth = BthFields {
            opcode: r.op,
            pkey: r.pkey.unwrap_or(DEFAULT_PKEY),
            dest_qp: self.qp.qpn,
            psn: r.psn & 0x00ff_ffff,
            ack_req: r.ack,
            se: r.se,
            ..Default::default()
        };
        let route = Route {
            port: 1,
            path,
            src_qpn: self.peer,
        };
        assert!(self.p.a.dev.data_path().send(route, bth, r.ext, r.payload));
        self.p.a.dev.take_tx().expect("packet")
    }

    fn deliver(&mut self, pkt: Vec<u8>) {
        self.p.b.dev.receive(pkt);
        self.p.b.dev.step();
    }

    fn responses(&mut self) -> Vec<Resp> {
        let mut out = Vec::new();
        while let Some(bytes) = self.p.b.dev.take_tx() {
            let pkt = RocePacket::parse(&bytes).expect("parse");
            assert!(pkt.icrc_ok());
            out.push(Resp {
                op: pkt.opcode(),
                psn: pkt.bth().psn(),
                dest: pkt.bth().dest_qp(),
                syn: pkt.aeth().map(|a| a.syndrome().0),
                msn: pkt.aeth().map(|a| a.msn()),
                orig: pkt.atomic_ack_eth().map(|a| a.orig()),
                payload: pkt.payload().to_vec(),
            });
        }
        out
    }

    fn post_recv(&mut self, sges: &[(u32, u64, u32)]) {
        let mut qp = self.qp;
        self.p.b.post_recv(&mut qp, sges);
        self.qp = qp;
    }

    /// Posts one receive of `len` bytes at MR offset `off`.
    fn post_buf(&mut self, off: usize, len: u32) {
        let (key, va) = (self.mr.key, self.mr.va + off as u64);
        self.post_recv(&[(key, va, len)]);
    }

    fn poll(&mut self) -> Option<Cqe64> {
        let mut cq = self.rcq;
        let c = self.p.b.poll(&mut cq);
        self.rcq = cq;
        c.map(|b| Cqe64::read_from_bytes(&b).expect("cqe"))
    }

    fn mem(&self, off: usize, len: usize) -> Vec<u8> {
        self.p.b.read(self.mr.off + off, len)
    }

    fn fill(&self, off: usize, data: &[u8]) {
        self.p.b.write(self.mr.off + off, data);
    }

    fn qp_state(&self) -> QpState {
        self.p.b.dev.objs.qps.get(self.qp.qpn).unwrap().state
    }

    fn epsn(&self) -> u32 {
        self.p.b.dev.objs.qps.get(self.qp.qpn).unwrap().resp.epsn()
    }

    fn attrs(&mut self) -> &mut crate::objects::QpAttrs {
        &mut self.p.b.dev.objs.qps.get_mut(self.qp.qpn).unwrap().attrs
    }

    fn reth(&self, off: usize, len: u32) -> ExtFields {
        ExtFields {
            reth: Some(Reth::new(self.mr.va + off as u64, self.mr.key, len)),
            ..Default::default()
        }
    }
}

fn psn(n: u32) -> u32 {
    (EPSN + n) & 0x00ff_ffff
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn imm(v: u32) -> ExtFields {
    ExtFields {
        imm_dt: Some(ImmDt::new(v)),
        ..Default::default()
    }
}

fn is_ack(r: &Resp, psn: u32, msn: u32) -> bool {
    r.op == BthOpcode::RC_ACKNOWLEDGE && r.psn == psn && r.syn == Some(0x1f) && r.msn == Some(msn)
}

#[test]
fn send_only_scatters_into_a_multi_sge_receive_and_completes() {
    let mut r = Rig::rc(1024);
    let k = r.mr.key;
    let va = r.mr.va;
    r.post_recv(&[(k, va + 100, 10), (k, va + 1000, 20), (k, va + 5000, 100)]);
    let data = pattern(50, 1);
    r.inject(Req {
        op: BthOpcode::RC_SEND_ONLY,
        psn: psn(0),
        ack: true,
        payload: &data,
        ..Default::default()
    });
    assert_eq!(r.mem(100, 10), data[..10]);
    assert_eq!(r.mem(1000, 20), data[10..30]);
    assert_eq!(r.mem(5000, 20), data[30..]);
    assert_eq!(r.mem(5020, 4), vec![0; 4]);
    let c = r.poll().expect("cqe");
    assert_eq!(c.opcode(), CqeOpcode::RESP_SEND);
    assert_eq!(c.byte_cnt(), 50);
    assert_eq!(c.qpn(), r.qp.qpn);
    assert_eq!(
        c.srqn_uidx(),
        r.qp.qpn,
        "user index (the rig sets it to the QPN)"
    );
    assert_eq!(c.wqe_counter(), 0);
    assert_eq!(c.rqpn(), r.peer);
    assert_eq!(c.se(), 0);
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert!(is_ack(&resp[0], psn(0), 1), "{resp:?}");
    assert_eq!(resp[0].dest, r.peer);
    assert_eq!(r.epsn(), psn(1));
}

#[test]
fn multi_packet_send_spans_sges_at_every_mtu() {
    for mtu in [256u32, 512, 1024, 2048, 4096] {
        let mut r = Rig::rc(mtu);
        let m = mtu as usize;
        let len = 2 * m + m / 2 + 3;
        let data = pattern(len, mtu as u8);
        let (k, va) = (r.mr.key, r.mr.va);
        // Three SGEs with odd lengths that do not line up with packet boundaries.
        r.post_recv(&[
            (k, va + 7, 333),
            (k, va + 20_000, m as u32),
            (k, va + 40_000, 20_000),
        ]);
        let ops = [
            BthOpcode::RC_SEND_FIRST,
            BthOpcode::RC_SEND_MIDDLE,
            BthOpcode::RC_SEND_LAST,
        ];
        for (i, op) in ops.into_iter().enumerate() {
            let end = ((i + 1) * m).min(len);
            r.inject(Req {
                op,
                psn: psn(i as u32),
                ack: i == 2,
                payload: &data[i * m..end],
                ..Default::default()
            });
            if i < 2 {
                assert!(r.responses().is_empty(), "no ACK without AckReq");
                assert!(r.poll().is_none());
            }
        }
        let mut got = r.mem(7, 333);
        got.extend(r.mem(20_000, m));
        got.extend(r.mem(40_000, len - 333 - m));
        assert_eq!(got, data, "mtu {mtu}");
        let c = r.poll().expect("cqe");
        assert_eq!(c.byte_cnt() as usize, len);
        let resp = r.responses();
        assert_eq!(resp.len(), 1);
        assert!(is_ack(&resp[0], psn(2), 1));
    }
}

#[test]
fn send_imm_reports_the_immediate_and_the_solicited_bit() {
    let mut r = Rig::rc(1024);
    r.post_buf(0, 64);
    r.inject(Req {
        op: BthOpcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        psn: psn(0),
        ack: true,
        se: true,
        ext: imm(0xdead_beef),
        payload: b"hello",
        ..Default::default()
    });
    let c = r.poll().expect("cqe");
    assert_eq!(c.opcode(), CqeOpcode::RESP_SEND_IMM);
    assert_eq!(c.imm_inval_pkey(), 0xdead_beef);
    assert_eq!(c.byte_cnt(), 5);
    assert_eq!(c.se(), 1);
    assert_eq!(r.mem(0, 5), b"hello");
}

#[test]
fn rdma_write_only_and_multi_packet_land_in_memory_without_a_completion() {
    let mut r = Rig::rc(256);
    let a = pattern(100, 3);
    let ext = r.reth(10, 100);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_ONLY,
        psn: psn(0),
        ext,
        payload: &a,
        ..Default::default()
    });
    assert_eq!(r.mem(10, 100), a);
    assert!(r.responses().is_empty(), "no AckReq, no ACK");
    let b = pattern(600, 9);
    let ext = r.reth(4096 - 5, 600);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_FIRST,
        psn: psn(1),
        ext,
        payload: &b[..256],
        ..Default::default()
    });
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_MIDDLE,
        psn: psn(2),
        payload: &b[256..512],
        ..Default::default()
    });
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_LAST,
        psn: psn(3),
        ack: true,
        payload: &b[512..],
        ..Default::default()
    });
    assert_eq!(r.mem(4096 - 5, 600), b);
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert!(is_ack(&resp[0], psn(3), 2), "{resp:?}");
    assert!(r.poll().is_none());
    assert_eq!(r.p.b.dev.counters.rx_write_requests, 2);
}

#[test]
fn write_imm_consumes_a_receive_and_reports_the_reth_length() {
    let mut r = Rig::rc(256);
    r.post_buf(0, 16);
    let b = pattern(300, 5);
    let ext = r.reth(1000, 300);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_FIRST,
        psn: psn(0),
        ext,
        payload: &b[..256],
        ..Default::default()
    });
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        psn: psn(1),
        ack: true,
        ext: imm(77),
        payload: &b[256..],
        ..Default::default()
    });
    assert_eq!(r.mem(1000, 300), b);
    let c = r.poll().expect("cqe");
    assert_eq!(c.opcode(), CqeOpcode::RESP_WR_IMM);
    assert_eq!(c.byte_cnt(), 300);
    assert_eq!(c.imm_inval_pkey(), 77);
    assert_eq!(
        r.mem(0, 16),
        vec![0; 16],
        "the receive buffer is not written"
    );
}

#[test]
fn write_imm_without_a_receive_is_rnr_naked_then_succeeds_once_one_is_posted() {
    let mut r = Rig::rc(1024);
    let mut ext = r.reth(0, 8);
    ext.imm_dt = Some(ImmDt::new(5));
    let req = Req {
        op: BthOpcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        psn: psn(0),
        ack: true,
        ext,
        payload: b"12345678",
        ..Default::default()
    };
    r.inject(req);
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].op, BthOpcode::RC_ACKNOWLEDGE);
    assert_eq!(resp[0].syn, Some(0x20 | 1), "RNR NAK with min_rnr_nak");
    assert_eq!(resp[0].psn, psn(0));
    assert_eq!(
        r.mem(0, 8),
        vec![0; 8],
        "nothing written before the receive exists"
    );
    assert_eq!(r.epsn(), psn(0));
    r.post_buf(100, 8);
    r.inject(req);
    assert_eq!(r.mem(0, 8), b"12345678");
    assert_eq!(r.poll().expect("cqe").opcode(), CqeOpcode::RESP_WR_IMM);
    assert!(is_ack(&r.responses()[0], psn(0), 1));
}

#[test]
fn read_answers_with_one_or_many_response_packets() {
    let mut r = Rig::rc(256);
    let data = pattern(1000, 11);
    r.fill(3000, &data);
    let ext = r.reth(3000, 100);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(0),
        ack: true,
        ext,
        ..Default::default()
    });
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].op, BthOpcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(
        (resp[0].psn, resp[0].syn, resp[0].msn),
        (psn(0), Some(0x1f), Some(1))
    );
    assert_eq!(resp[0].payload, data[..100]);
    assert_eq!(r.epsn(), psn(1));

    let ext = r.reth(3000, 1000);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(1),
        ack: true,
        ext,
        ..Default::default()
    });
    let resp = r.responses();
    let ops: Vec<_> = resp.iter().map(|x| x.op).collect();
    assert_eq!(
        ops,
        [
            BthOpcode::RC_RDMA_READ_RESPONSE_FIRST,
            BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            BthOpcode::RC_RDMA_READ_RESPONSE_LAST,
        ]
    );
    let psns: Vec<_> = resp.iter().map(|x| x.psn).collect();
    assert_eq!(psns, [psn(1), psn(2), psn(3), psn(4)]);
    let msns: Vec<_> = resp.iter().map(|x| x.msn).collect();
    assert_eq!(msns, [Some(2), None, None, Some(2)]);
    let all: Vec<u8> = resp.iter().flat_map(|x| x.payload.clone()).collect();
    assert_eq!(all, data);
    assert_eq!(r.epsn(), psn(5), "a READ takes one PSN per response packet");
    assert_eq!(r.p.b.dev.counters.rx_read_requests, 2);
}

#[test]
fn zero_length_read_gets_one_empty_only_response_without_an_rkey_check() {
    let mut r = Rig::rc(1024);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(0),
        ack: true,
        ext: ExtFields {
            reth: Some(Reth::new(0, 0, 0)),
            ..Default::default()
        },
        ..Default::default()
    });
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].op, BthOpcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert!(resp[0].payload.is_empty());
    assert_eq!(r.qp_state(), QpState::Rts);
}

fn atomic_req(
    r: &Rig,
    op: BthOpcode,
    n: u32,
    off: usize,
    swap_add: u64,
    comp: u64,
) -> Req<'static> {
    Req {
        op,
        psn: psn(n),
        ack: true,
        ext: ExtFields {
            atomic_eth: Some(AtomicEth::new(
                r.mr.va + off as u64,
                r.mr.key,
                swap_add,
                comp,
            )),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn atomics_operate_on_big_endian_memory_and_return_the_original_value() {
    let mut r = Rig::rc(1024);
    r.fill(64, &100u64.to_be_bytes());
    let fa = atomic_req(&r, BthOpcode::RC_FETCH_ADD, 0, 64, 5, 0);
    r.inject(fa);
    assert_eq!(r.mem(64, 8), 105u64.to_be_bytes());
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].op, BthOpcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(
        (resp[0].psn, resp[0].orig, resp[0].msn),
        (psn(0), Some(100), Some(1))
    );
    // Compare fails: nothing changes.
    let cs = atomic_req(&r, BthOpcode::RC_COMPARE_SWAP, 1, 64, 7, 999);
    r.inject(cs);
    assert_eq!(r.mem(64, 8), 105u64.to_be_bytes());
    assert_eq!(r.responses()[0].orig, Some(105));
    // Compare matches: swapped.
    let cs = atomic_req(&r, BthOpcode::RC_COMPARE_SWAP, 2, 64, 7, 105);
    r.inject(cs);
    assert_eq!(r.mem(64, 8), 7u64.to_be_bytes());
    assert_eq!(r.responses()[0].orig, Some(105));
    assert_eq!(r.epsn(), psn(3));
    assert_eq!(r.p.b.dev.counters.rx_atomic_requests, 3);
}

#[test]
fn only_requests_with_ackreq_are_acknowledged() {
    let mut r = Rig::rc(1024);
    for i in 0..4 {
        r.post_buf(i * 100, 100);
    }
    for i in 0..4u32 {
        r.inject(Req {
            op: BthOpcode::RC_SEND_ONLY,
            psn: psn(i),
            ack: i == 3,
            payload: b"x",
            ..Default::default()
        });
    }
    let resp = r.responses();
    assert_eq!(resp.len(), 1, "one ACK covers all four");
    assert!(is_ack(&resp[0], psn(3), 4));
    for i in 0..4 {
        assert_eq!(r.poll().expect("cqe").wqe_counter(), i);
    }
}

#[test]
fn rnr_nak_then_success_once_a_receive_is_posted() {
    let mut r = Rig::rc(1024);
    let req = Req {
        op: BthOpcode::RC_SEND_ONLY,
        psn: psn(0),
        ack: true,
        payload: b"abc",
        ..Default::default()
    };
    r.inject(req);
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert_eq!((resp[0].syn, resp[0].psn), (Some(0x21), psn(0)));
    assert_eq!(r.p.b.dev.counters.out_of_buffer, 1);
    assert_eq!(r.epsn(), psn(0));
    assert_eq!(r.qp_state(), QpState::Rts);
    r.post_buf(0, 16);
    r.inject(req);
    assert!(is_ack(&r.responses()[0], psn(0), 1));
    assert_eq!(r.mem(0, 3), b"abc");
    assert!(r.poll().is_some());
}

#[test]
fn psn_gap_sends_one_nak_until_the_sequence_recovers() {
    let mut r = Rig::rc(1024);
    for _ in 0..3 {
        r.post_buf(0, 16);
    }
    let send = |n| Req {
        op: BthOpcode::RC_SEND_ONLY,
        psn: psn(n),
        ack: true,
        payload: b"z",
        ..Default::default()
    };
    r.inject(send(2));
    r.inject(send(3));
    let resp = r.responses();
    assert_eq!(resp.len(), 1, "one NAK per gap");
    assert_eq!(
        (resp[0].op, resp[0].syn, resp[0].psn),
        (BthOpcode::RC_ACKNOWLEDGE, Some(0x60), psn(0))
    );
    assert_eq!(r.p.b.dev.counters.out_of_sequence, 1);
    assert_eq!(r.p.b.dev.counters.naks_sent, 1);
    assert!(r.poll().is_none());
    r.inject(send(0));
    assert!(is_ack(&r.responses()[0], psn(0), 1));
    // A new gap after recovery gets a new NAK.
    r.inject(send(2));
    let resp = r.responses();
    assert_eq!((resp[0].syn, resp[0].psn), (Some(0x60), psn(1)));
    assert_eq!(r.qp_state(), QpState::Rts);
}

#[test]
fn duplicate_send_is_acked_again_with_the_last_psn_and_not_delivered_twice() {
    let mut r = Rig::rc(1024);
    r.post_buf(0, 16);
    r.post_buf(100, 16);
    let req = Req {
        op: BthOpcode::RC_SEND_ONLY,
        psn: psn(0),
        ack: true,
        payload: b"once",
        ..Default::default()
    };
    r.inject(req);
    r.responses();
    r.inject(Req { ack: false, ..req });
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert!(is_ack(&resp[0], psn(0), 1), "{resp:?}");
    assert!(r.poll().is_some());
    assert!(r.poll().is_none(), "delivered once");
    assert_eq!(r.p.b.dev.counters.duplicate_request, 1);
}

#[test]
fn duplicate_read_is_replayed_from_the_requested_psn() {
    let mut r = Rig::rc(256);
    let data = pattern(1000, 21);
    r.fill(0, &data);
    let ext = r.reth(0, 1000);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(0),
        ext,
        ..Default::default()
    });
    assert_eq!(r.responses().len(), 4);
    // The requester lost responses 2 and 3 and asks again from PSN +2 (rxe go-back-N).
    let ext = r.reth(512, 488);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(2),
        ext,
        ..Default::default()
    });
    let resp = r.responses();
    let ops: Vec<_> = resp.iter().map(|x| (x.op, x.psn)).collect();
    assert_eq!(
        ops,
        [
            (BthOpcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(2)),
            (BthOpcode::RC_RDMA_READ_RESPONSE_LAST, psn(3)),
        ]
    );
    let all: Vec<u8> = resp.iter().flat_map(|x| x.payload.clone()).collect();
    assert_eq!(all, data[512..]);
    // The whole READ again: FIRST .. LAST.
    let ext = r.reth(0, 1000);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(0),
        ext,
        ..Default::default()
    });
    let resp = r.responses();
    assert_eq!(resp.len(), 4);
    assert_eq!(resp[0].op, BthOpcode::RC_RDMA_READ_RESPONSE_FIRST);
    // A duplicate asking for more than the original is dropped.
    let ext = r.reth(0, 2000);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(0),
        ext,
        ..Default::default()
    });
    assert!(r.responses().is_empty());
    assert_eq!(r.epsn(), psn(4));
    assert_eq!(r.p.b.dev.counters.duplicate_request, 3);
}

#[test]
fn duplicate_atomic_returns_the_saved_result_without_executing_again() {
    let mut r = Rig::rc(1024);
    r.fill(8, &40u64.to_be_bytes());
    let fa = atomic_req(&r, BthOpcode::RC_FETCH_ADD, 0, 8, 2, 0);
    r.inject(fa);
    r.responses();
    r.inject(fa);
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert_eq!(
        (resp[0].op, resp[0].psn, resp[0].orig),
        (BthOpcode::RC_ATOMIC_ACKNOWLEDGE, psn(0), Some(40))
    );
    assert_eq!(r.mem(8, 8), 42u64.to_be_bytes(), "added once");
}

/// Checks a class C outcome: one NAK with `syn` and the request's PSN, QP in ERR.
fn assert_nak(r: &mut Rig, syn: u8, at: u32) {
    let resp = r.responses();
    assert_eq!(resp.len(), 1, "{resp:?}");
    assert_eq!(
        (resp[0].op, resp[0].syn, resp[0].psn),
        (BthOpcode::RC_ACKNOWLEDGE, Some(syn), at)
    );
    assert_eq!(r.qp_state(), QpState::Err);
    assert!(r.p.b.dev.counters.naks_sent >= 1);
}

#[test]
fn remote_access_not_enabled_on_the_qp_is_an_invalid_request() {
    for which in 0..3 {
        let mut r = Rig::rc(1024);
        let req = match which {
            0 => {
                r.attrs().rwe = false;
                let ext = r.reth(0, 4);
                Req {
                    op: BthOpcode::RC_RDMA_WRITE_ONLY,
                    psn: psn(0),
                    ext,
                    payload: b"abcd",
                    ..Default::default()
                }
            }
            1 => {
                r.attrs().rre = false;
                let ext = r.reth(0, 4);
                Req {
                    op: BthOpcode::RC_RDMA_READ_REQUEST,
                    psn: psn(0),
                    ext,
                    ..Default::default()
                }
            }
            _ => {
                r.attrs().rae = false;
                atomic_req(&r, BthOpcode::RC_COMPARE_SWAP, 0, 0, 1, 0)
            }
        };
        r.inject(req);
        assert_nak(&mut r, 0x61, psn(0));
        assert_eq!(r.mem(0, 4), vec![0; 4]);
    }
}

#[test]
fn bad_rkey_other_pd_out_of_range_or_missing_right_is_a_remote_access_error() {
    for which in 0..5 {
        let mut r = Rig::rc(1024);
        let (key, va, len) = match which {
            0 => (r.mr.key ^ 0x100, r.mr.va, 8),
            1 => {
                // An MR of another PD.
                let pd2 =
                    r.p.b
                        .dev
                        .objs
                        .pds
                        .insert_with(|_| Default::default())
                        .unwrap();
                let pd1 = std::mem::replace(&mut r.p.b.pd, pd2);
                let mr2 = r.p.b.mr(4096, Host::all_access());
                r.p.b.pd = pd1;
                (mr2.key, mr2.va, 8)
            }
            2 => (r.mr.key, r.mr.va + MR_LEN as u64 - 4, 8),
            3 => (r.mr.key.wrapping_add(1), r.mr.va, 8),
            _ => {
                let ro = r.p.b.mr(
                    4096,
                    Access {
                        local_read: true,
                        local_write: true,
                        remote_read: true,
                        ..Default::default()
                    },
                );
                (ro.key, ro.va, 8)
            }
        };
        r.inject(Req {
            op: BthOpcode::RC_RDMA_WRITE_ONLY,
            psn: psn(0),
            ack: true,
            ext: ExtFields {
                reth: Some(Reth::new(va, key, len)),
                ..Default::default()
            },
            payload: b"12345678",
            ..Default::default()
        });
        assert_nak(&mut r, 0x62, psn(0));
        assert_eq!(
            r.p.b.dev.counters.resp_remote_access_errors, 1,
            "case {which}"
        );
    }
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut r = Rig::rc(1024);
    let fa = atomic_req(&r, BthOpcode::RC_FETCH_ADD, 0, 4, 1, 0);
    r.inject(fa);
    assert_nak(&mut r, 0x61, psn(0));
}

/// A 16-byte READ request with PSN `n` from the start of the responder's MR.
fn read(r: &Rig, n: u32) -> Req<'static> {
    Req {
        op: BthOpcode::RC_RDMA_READ_REQUEST,
        psn: psn(n),
        ext: r.reth(0, 16),
        ..Default::default()
    }
}

#[test]
fn more_reads_than_responder_resources_outstanding_is_an_invalid_request() {
    // Two resources; responses that have left the device free theirs.
    let mut r = Rig::rc(1024);
    r.attrs().log_rra_max = 1;
    for n in 0..4 {
        let q = read(&r, n);
        r.inject(q);
        assert_eq!(
            r.responses().len(),
            1,
            "taken by the wire at once: never too many"
        );
    }
    // Now three while the responses stay queued in the device.
    for n in 4..6 {
        let q = read(&r, n);
        r.inject(q);
    }
    let q = read(&r, 6);
    r.inject(q);
    let resp = r.responses();
    assert_eq!(resp.len(), 3);
    assert_eq!((resp[2].syn, resp[2].psn), (Some(0x61), psn(6)));
    assert_eq!(r.qp_state(), QpState::Err);
}

#[test]
fn a_replayed_read_does_not_hold_its_resource_against_new_reads() {
    // Soak finding: a go-back-N resend brings duplicates of executed READs (replayed) and new
    // READs in one burst; the replays' queued responses must not make the new READs look
    // like too many (the requester only counts new ones against max_rd_atomic).
    let mut r = Rig::rc(1024);
    r.attrs().log_rra_max = 1;
    for n in 0..2 {
        let q = read(&r, n);
        r.inject(q);
        assert_eq!(r.responses().len(), 1);
    }
    // The burst: the duplicate of READ 0 and READ 1, then new READs 2 and 3, responses queued.
    for n in 0..4 {
        let q = read(&r, n);
        r.inject(q);
    }
    let resp = r.responses();
    let got: Vec<_> = resp.iter().map(|x| (x.op, x.psn, x.syn)).collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        resp.iter()
            .all(|x| x.op == BthOpcode::RC_RDMA_READ_RESPONSE_ONLY),
        "{got:?}"
    );
    assert_eq!(r.qp_state(), QpState::Rts);
}

#[test]
fn packet_length_violations_are_invalid_requests() {
    let mtu = 256u32;
    let big = vec![1u8; 300];
    let cases: Vec<(&str, BthOpcode, usize, bool)> = vec![
        (
            "FIRST shorter than the MTU",
            BthOpcode::RC_SEND_FIRST,
            100,
            false,
        ),
        (
            "ONLY longer than the MTU",
            BthOpcode::RC_SEND_ONLY,
            300,
            false,
        ),
        (
            "WRITE ONLY longer than its RETH",
            BthOpcode::RC_RDMA_WRITE_ONLY,
            20,
            true,
        ),
    ];
    for (what, op, n, write) in cases {
        let mut r = Rig::rc(mtu);
        r.post_buf(0, 4096);
        r.post_buf(0, 4096);
        let ext = if write {
            r.reth(0, 10)
        } else {
            ExtFields::default()
        };
        r.inject(Req {
            op,
            psn: psn(0),
            ext,
            payload: &big[..n],
            ..Default::default()
        });
        assert_nak(&mut r, 0x61, psn(0));
        if !write {
            let c = r.poll().expect(what);
            assert_eq!(c.opcode(), CqeOpcode::RESP_ERR, "{what}");
            assert_eq!(c.as_err().syndrome(), CqeSyndrome::REMOTE_INVAL_REQ_ERR);
        }
        // The other receive is flushed.
        let c = r.poll().expect("flush");
        assert_eq!(c.as_err().syndrome(), CqeSyndrome::WR_FLUSH_ERR, "{what}");
    }
}

#[test]
fn write_last_longer_than_what_remains_is_an_invalid_request() {
    let mut r = Rig::rc(256);
    let ext = r.reth(0, 300);
    let d = vec![2u8; 256];
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_FIRST,
        psn: psn(0),
        ext,
        payload: &d,
        ..Default::default()
    });
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_LAST,
        psn: psn(1),
        payload: &d[..100],
        ..Default::default()
    });
    assert_nak(&mut r, 0x61, psn(1));
}

#[test]
fn pad_count_that_disagrees_with_the_reth_length_is_an_invalid_request() {
    let mut r = Rig::rc(1024);
    let path = r.path(0, r.p.b.gid());
    let ext = r.reth(0, 4);
    let mut pkt = r.build(
        &path,
        Req {
            op: BthOpcode::RC_RDMA_WRITE_ONLY,
            psn: psn(0),
            ext,
            payload: b"abcd",
            ..Default::default()
        },
    );
    // BTH flags byte (IPv4 20 + UDP 8 + 1): pad 0 → 2, so the payload reads as 2 bytes; then
    // fix the ICRC so the packet arrives.
    pkt[29] |= 2 << 4;
    let n = pkt.len();
    let c = bypass_hw::roce::icrc::compute(&pkt).unwrap();
    pkt[n - 4..].copy_from_slice(&c.to_le_bytes());
    r.deliver(pkt);
    assert_nak(&mut r, 0x61, psn(0));
    assert_eq!(r.mem(0, 4), vec![0; 4]);
}

#[test]
fn opcode_sequence_errors_are_invalid_requests() {
    // MIDDLE without FIRST: nothing was consumed.
    let mut r = Rig::rc(256);
    r.post_buf(0, 4096);
    r.inject(Req {
        op: BthOpcode::RC_SEND_MIDDLE,
        psn: psn(0),
        payload: &[0; 256],
        ..Default::default()
    });
    assert_nak(&mut r, 0x61, psn(0));
    let c = r.poll().expect("flush");
    assert_eq!(c.as_err().syndrome(), CqeSyndrome::WR_FLUSH_ERR);

    // A WRITE in the middle of a SEND: the SEND's receive completes in error.
    let mut r = Rig::rc(256);
    r.post_buf(0, 4096);
    r.inject(Req {
        op: BthOpcode::RC_SEND_FIRST,
        psn: psn(0),
        payload: &[0; 256],
        ..Default::default()
    });
    let ext = r.reth(0, 4);
    r.inject(Req {
        op: BthOpcode::RC_RDMA_WRITE_ONLY,
        psn: psn(1),
        ext,
        payload: b"abcd",
        ..Default::default()
    });
    assert_nak(&mut r, 0x61, psn(1));
    let c = r.poll().expect("cqe");
    assert_eq!(c.as_err().syndrome(), CqeSyndrome::REMOTE_INVAL_REQ_ERR);
    assert!(r.poll().is_none());
}

#[test]
fn message_longer_than_the_receive_completes_with_local_length_error() {
    let mut r = Rig::rc(1024);
    r.post_buf(0, 100);
    r.post_buf(200, 100);
    r.inject(Req {
        op: BthOpcode::RC_SEND_ONLY,
        psn: psn(0),
        ack: true,
        payload: &[9; 200],
        ..Default::default()
    });
    assert_nak(&mut r, 0x61, psn(0));
    let c = r.poll().expect("cqe");
    assert_eq!(c.opcode(), CqeOpcode::RESP_ERR);
    assert_eq!(c.as_err().syndrome(), CqeSyndrome::LOCAL_LENGTH_ERR);
    assert_eq!(c.as_err().wqe_counter(), 0);
    assert_eq!(c.srqn_uidx(), r.qp.qpn);
    let c = r.poll().expect("flush");
    assert_eq!(c.as_err().syndrome(), CqeSyndrome::WR_FLUSH_ERR);
    assert_eq!(c.as_err().wqe_counter(), 1);
    let ctr = &r.p.b.dev.counters;
    assert_eq!(
        (
            ctr.resp_local_length_error,
            ctr.resp_cqe_error,
            ctr.resp_cqe_flush_error
        ),
        (1, 1, 1)
    );
}

#[test]
fn bad_lkey_in_the_receive_completes_with_local_protection_error() {
    let mut r = Rig::rc(1024);
    let va = r.mr.va;
    r.post_recv(&[(0x4242_4200, va, 100)]);
    r.inject(Req {
        op: BthOpcode::RC_SEND_ONLY,
        psn: psn(0),
        payload: b"data",
        ..Default::default()
    });
    assert_nak(&mut r, 0x63, psn(0));
    let c = r.poll().expect("cqe");
    assert_eq!(c.as_err().syndrome(), CqeSyndrome::LOCAL_PROT_ERR);
}

fn ud_req(r: &Rig, qkey: u32, payload: &[u8]) -> (ExtFields, Vec<u8>) {
    let ext = ExtFields {
        deth: Some(Deth::new(qkey, r.peer).unwrap()),
        ..Default::default()
    };
    (ext, payload.to_vec())
}

#[test]
fn ud_receive_over_ipv4_puts_the_ipv4_header_in_the_last_20_grh_bytes() {
    let mut r = Rig::new(UD, 1024);
    r.post_buf(0, 256);
    let (ext, data) = ud_req(&r, 0x1111_1111, b"datagram");
    let path = r.path(0, r.p.b.gid());
    let pkt = r.build(
        &path,
        Req {
            op: BthOpcode::UD_SEND_ONLY,
            psn: 5,
            ext,
            payload: &data,
            ..Default::default()
        },
    );
    let ip = pkt[..20].to_vec();
    r.deliver(pkt);
    assert_eq!(r.mem(0, 20), vec![0; 20]);
    assert_eq!(r.mem(20, 20), ip);
    assert_eq!(r.mem(40, 8), b"datagram");
    let c = r.poll().expect("cqe");
    assert_eq!(c.opcode(), CqeOpcode::RESP_SEND);
    assert_eq!(c.byte_cnt(), 48);
    assert_eq!(c.rqpn(), r.peer);
    assert_eq!(c.flags(), 0x12, "GRH present, RoCE L3 type IPv4");
    assert!(r.responses().is_empty(), "UD is never acknowledged");
}

#[test]
fn ud_receive_over_ipv6_puts_the_ipv6_header_in_the_grh() {
    let mut r = Rig::new(UD, 1024);
    let v6 = |id| {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = id;
        g
    };
    r.p.a.dev.profile.ports[0].gids.push(v6(1));
    r.p.b.dev.profile.ports[0].gids.push(v6(2));
    r.post_buf(0, 256);
    let (mut ext, data) = ud_req(&r, 0x1111_1111, b"v6");
    ext.imm_dt = Some(ImmDt::new(0x0102_0304));
    let path = r.path(1, v6(2));
    let pkt = r.build(
        &path,
        Req {
            op: BthOpcode::UD_SEND_ONLY_WITH_IMMEDIATE,
            psn: 1,
            ext,
            payload: &data,
            ..Default::default()
        },
    );
    let ip = pkt[..40].to_vec();
    r.deliver(pkt);
    assert_eq!(r.mem(0, 40), ip);
    assert_eq!(r.mem(40, 2), b"v6");
    let c = r.poll().expect("cqe");
    assert_eq!(c.opcode(), CqeOpcode::RESP_SEND_IMM);
    assert_eq!(c.imm_inval_pkey(), 0x0102_0304);
    assert_eq!(c.byte_cnt(), 42);
    assert_eq!(c.flags(), 0x11, "GRH present, RoCE L3 type IPv6");
}

#[test]
fn ud_drops_on_qkey_mismatch_or_missing_receive_and_fails_an_overlong_datagram() {
    let mut r = Rig::new(UD, 1024);
    let (ext, data) = ud_req(&r, 0x2222, b"x");
    let req = Req {
        op: BthOpcode::UD_SEND_ONLY,
        ext,
        payload: &data,
        ..Default::default()
    };
    r.post_buf(0, 64);
    r.inject(req);
    assert!(r.poll().is_none(), "Q_Key mismatch: dropped");
    assert_eq!(r.p.b.dev.counters.rx_discards, 1);
    let (ext, _) = ud_req(&r, 0x1111_1111, b"");
    let big = vec![3u8; 30];
    r.inject(Req {
        ext,
        payload: &big,
        ..req
    });
    let c = r.poll().expect("cqe");
    assert_eq!(
        c.as_err().syndrome(),
        CqeSyndrome::LOCAL_LENGTH_ERR,
        "40 + 30 > 64"
    );
    assert_eq!(r.qp_state(), QpState::Err);

    let mut r = Rig::new(UD, 1024);
    let (ext, data) = ud_req(&r, 0x1111_1111, b"x");
    r.inject(Req {
        op: BthOpcode::UD_SEND_ONLY,
        ext,
        payload: &data,
        ..Default::default()
    });
    assert_eq!(r.p.b.dev.counters.out_of_buffer, 1);
    assert!(r.responses().is_empty(), "no RNR on UD");
}

#[test]
fn receives_posted_before_and_after_the_qp_enters_err_are_flushed() {
    let mut r = Rig::rc(1024);
    r.post_buf(0, 16);
    r.post_buf(0, 16);
    r.p.b.dev.set_qp_state(r.qp.qpn, QpState::Err);
    for i in 0..2 {
        let c = r.poll().expect("flush");
        assert_eq!(c.opcode(), CqeOpcode::RESP_ERR);
        assert_eq!(c.as_err().syndrome(), CqeSyndrome::WR_FLUSH_ERR);
        assert_eq!(c.as_err().wqe_counter(), i);
    }
    assert!(r.poll().is_none());
    r.post_buf(0, 16);
    assert!(r.p.b.dev.step(), "the flush is progress");
    let c = r.poll().expect("late flush");
    assert_eq!(c.as_err().syndrome(), CqeSyndrome::WR_FLUSH_ERR);
    assert_eq!(c.as_err().wqe_counter(), 2);
    assert!(!r.p.b.dev.step());
    assert_eq!(r.p.b.dev.counters.resp_cqe_flush_error, 3);
}

#[test]
fn the_rq_ring_wraps_over_several_laps() {
    let mut r = Rig::rc(1024);
    // 16 receive WQEs; 50 messages, receives posted a few ahead.
    for i in 0..4 {
        r.post_buf(i * 64, 64);
    }
    for i in 0..50u32 {
        let data = pattern(20, i as u8);
        r.inject(Req {
            op: BthOpcode::RC_SEND_ONLY,
            psn: psn(i),
            ack: true,
            payload: &data,
            ..Default::default()
        });
        let c = r.poll().expect("cqe");
        assert_eq!(c.wqe_counter(), i as u16);
        assert_eq!(c.byte_cnt(), 20);
        let slot = (i % 4) as usize;
        assert_eq!(r.mem(slot * 64, 20), data);
        assert!(is_ack(&r.responses()[0], psn(i), i + 1));
        r.post_buf(slot * 64, 64);
    }
    assert_eq!(r.p.b.dev.objs.qps.get(r.qp.qpn).unwrap().rq_ci, 50);
}

#[test]
fn first_request_in_rtr_raises_comm_est_once() {
    let mut r = Rig::rc(1024);
    r.p.b.dev.objs.qps.get_mut(r.qp.qpn).unwrap().state = QpState::Rtr;
    r.post_buf(0, 16);
    r.post_buf(0, 16);
    for n in 0..2 {
        r.inject(Req {
            op: BthOpcode::RC_SEND_ONLY,
            psn: psn(n),
            payload: b"e",
            ..Default::default()
        });
    }
    // The rig's EQ is the first allocation of host B's memory.
    let eqe = r.p.b.read(0, 64);
    assert_eq!(eqe[1], EventType::COMM_EST.0);
    assert_eq!(
        u32::from_be_bytes([eqe[56], eqe[57], eqe[58], eqe[59]]),
        r.qp.qpn
    );
    let next = r.p.b.read(64, 64);
    assert_ne!(next[1], EventType::COMM_EST.0, "only once");
    assert_eq!(r.poll().map(|c| c.opcode()), Some(CqeOpcode::RESP_SEND));
}

#[test]
fn mutated_requests_never_panic_the_responder() {
    // A seeded LCG (deterministic): flip bytes of the BTH, extension headers and payload of
    // valid requests, fix the ICRC so they reach the responder, and keep the QP usable.
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let mut r = Rig::rc(256);
    for round in 0..1000u32 {
        if r.qp_state() == QpState::Err || round % 50 == 0 {
            r = Rig::rc(256);
        }
        r.post_buf(0, 512);
        let template = match round % 5 {
            0 => Req {
                op: BthOpcode::RC_SEND_ONLY,
                payload: &[7; 40],
                ..Default::default()
            },
            1 => Req {
                op: BthOpcode::RC_RDMA_WRITE_FIRST,
                ext: r.reth(0, 600),
                payload: &[8; 256],
                ..Default::default()
            },
            2 => Req {
                op: BthOpcode::RC_RDMA_READ_REQUEST,
                ext: r.reth(0, 700),
                ..Default::default()
            },
            3 => atomic_req(&r, BthOpcode::RC_FETCH_ADD, 0, 0, 1, 0),
            _ => Req {
                op: BthOpcode::RC_SEND_LAST_WITH_IMMEDIATE,
                ext: imm(1),
                payload: &[9; 4],
                ..Default::default()
            },
        };
        let epsn = r.epsn();
        let path = r.path(0, r.p.b.gid());
        let mut pkt = r.build(
            &path,
            Req {
                psn: epsn.wrapping_add((next() % 3) as u32),
                ack: next() % 2 == 0,
                ..template
            },
        );
        // Bytes from the BTH (after IPv4 + UDP) to just before the ICRC.
        let n = pkt.len();
        for _ in 0..1 + next() % 4 {
            let at = 28 + next() % (n - 32);
            pkt[at] ^= 1 << (next() % 8);
        }
        if let Ok(c) = bypass_hw::roce::icrc::compute(&pkt) {
            pkt[n - 4..].copy_from_slice(&c.to_le_bytes());
        }
        r.deliver(pkt);
        r.responses();
        while r.poll().is_some() {}
    }
}

/// A WRITE ONLY with AckReq at the first expected PSN (RETH and payload to be filled in).
fn write_only() -> Req<'static> {
    Req {
        op: BthOpcode::RC_RDMA_WRITE_ONLY,
        psn: psn(0),
        ack: true,
        ..Default::default()
    }
}

#[test]
fn rc_write_from_an_address_other_than_the_peer_is_dropped_unanswered_and_counted() {
    let mut r = Rig::rc(1024);
    // A second address on A's port: 10.0.0.9, not the one B's QP is connected to.
    let forged_gid = crate::profile::Profile::ipv4_gid([10, 0, 0, 9]);
    r.p.a.dev.profile.ports[0].gids.push(forged_gid);
    let data = pattern(64, 5);
    let ext = r.reth(0, 64);
    let path = r.path(1, r.p.b.gid());
    let forged = r.build(
        &path,
        Req {
            ext,
            payload: &data,
            ..write_only()
        },
    );
    assert_eq!(
        RocePacket::parse(&forged).expect("parse").ip().gids().0,
        forged_gid,
        "the forged packet comes from the second address"
    );
    r.deliver(forged);
    assert_eq!(
        r.mem(0, 64),
        vec![0; 64],
        "no byte of the forged WRITE lands"
    );
    assert!(r.responses().is_empty(), "no ACK or NAK to a spoofer");
    let dev = &r.p.b.dev;
    assert_eq!(dev.counters.rx_addr_errors, 1);
    assert_eq!(dev.counters.rx_write_requests, 0);
    assert_eq!(dev.counters.rx_discards, 0);
    let qpc = dev.qp_counters(r.qp.qpn).expect("qp");
    assert_eq!(qpc.rx_addr_errors, 1);
    // The real peer's WRITE at the same PSN still lands: the forged one consumed nothing.
    r.inject(Req {
        ext,
        payload: &data,
        ..write_only()
    });
    assert_eq!(r.mem(0, 64), data);
    let resp = r.responses();
    assert_eq!(resp.len(), 1);
    assert!(is_ack(&resp[0], psn(0), 1), "{resp:?}");
    assert_eq!(r.p.b.dev.counters.rx_addr_errors, 1);
}

#[test]
fn rc_packet_with_a_foreign_pkey_is_dropped_unanswered_and_counted() {
    let mut r = Rig::rc(1024);
    let data = pattern(32, 1);
    let ext = r.reth(0, 32);
    r.inject(Req {
        ext,
        payload: &data,
        pkey: Some(0x8001),
        ..write_only()
    });
    assert_eq!(r.mem(0, 32), vec![0; 32]);
    assert!(r.responses().is_empty());
    assert_eq!(r.p.b.dev.counters.rx_pkey_errors, 1);
    let qpc = r.p.b.dev.qp_counters(r.qp.qpn).expect("qp");
    assert_eq!(qpc.rx_pkey_errors, 1);
    // A limited member of the default partition (0x7fff) matches our full key.
    r.inject(Req {
        ext,
        payload: &data,
        pkey: Some(0x7fff),
        ..write_only()
    });
    assert_eq!(r.mem(0, 32), data);
    assert_eq!(r.p.b.dev.counters.rx_pkey_errors, 1);
}
