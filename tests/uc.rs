//! UC QPs through the safe API on two stepped sim NICs: SEND, SEND_IMM, WRITE and WRITE_IMM
//! delivered; a lost middle packet drops its message (no retransmission, the sender completes
//! anyway) and the next message arrives into the same receive; READ and atomics refused at
//! post time.

#[path = "verbs_support.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bypass_sim::link::rule::{Packet, Rule, Verdict};
use bypass_verbs::driver::post::PostError;
use bypass_verbs::driver::qp_attr::Init2Rtr;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Qp, QpBuilder, QpState, VerbsError, WcOpcode};
use rand_core::RngCore;
use support::*;

/// A UC QP on each side, connected at MTU 1024 (so 3000 bytes are three packets).
fn uc_pair(r: &Rig) -> (Qp, Qp) {
    let mut a = QpBuilder::uc(&r.a.pd, &r.a.cq, &r.a.cq).build().unwrap();
    let mut b = QpBuilder::uc(&r.b.pd, &r.b.cq, &r.b.cq).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    for (q, peer) in [(&mut a, &eb), (&mut b, &ea)] {
        q.modify_to_init().unwrap();
        q.modify_to_rtr_with(&Init2Rtr::rc(peer.qpn, peer.psn, peer.gid.0))
            .unwrap();
        q.modify_to_rts().unwrap();
    }
    (a, b)
}

/// Counts the UC request packets entering the wire and drops the first `drop` whose BTH
/// opcode is `opcode`.
struct DropUc {
    opcode: u8,
    drop: usize,
    seen: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Rule for DropUc {
    fn on_packet(&mut self, pkt: &mut Packet<'_>, _rng: &mut dyn RngCore) -> Verdict {
        let ip = match pkt.bytes.first().map(|b| b >> 4) {
            Some(4) => usize::from(pkt.bytes[0] & 0xf) * 4,
            _ => 40,
        };
        let Some(&op) = pkt.bytes.get(ip + 8) else {
            return Verdict::Pass;
        };
        if (0x20..=0x2b).contains(&op) {
            self.seen.fetch_add(1, Ordering::Relaxed);
        }
        if op == self.opcode && self.dropped.load(Ordering::Relaxed) < self.drop {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Verdict::Drop;
        }
        Verdict::Pass
    }

    fn active(&self) -> bool {
        true
    }
}

fn drop_first(r: &Rig, opcode: u8) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let rule = DropUc {
        opcode,
        drop: 1,
        seen: seen.clone(),
        dropped: dropped.clone(),
    };
    r.fabric.with_world(|w| w.add_rule(Box::new(rule)));
    (seen, dropped)
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
fn uc_send_send_imm_write_and_write_imm_are_delivered() {
    let mut r = rig();
    let (mut a, mut b) = uc_pair(&r);
    assert_eq!(a.state().unwrap(), QpState::Rts);
    for id in 0..3 {
        b.post_recv(RecvWr::new(id, r.b.pool.lease(4096).unwrap()))
            .unwrap();
    }
    let big = pattern(3, 3000);
    a.post_send(send_of(&r.a.pool, 10, &big)).unwrap();
    a.post_send(SendWr::new(11, SendOp::SendImm(0xfeed)).sge(lease_with(&r.a.pool, b"imm")))
        .unwrap();
    let target = r.b.mr.remote();
    a.post_send(
        SendWr::new(12, SendOp::Write(target.slice(0, 2500).unwrap()))
            .sge(lease_with(&r.a.pool, &pattern(9, 2500))),
    )
    .unwrap();
    a.post_send(
        SendWr::new(13, SendOp::WriteImm(target.slice(3000, 4).unwrap(), 0x77))
            .sge(lease_with(&r.a.pool, b"last")),
    )
    .unwrap();
    let mut ops = Vec::new();
    for _ in 0..4 {
        let c = wait1(&mut r.a.cq, "UC send");
        assert!(c.is_ok(), "{c}");
        ops.push((c.wr_id(), c.opcode()));
        drop(a.reclaim(c).unwrap());
    }
    assert_eq!(
        ops,
        [
            (10, WcOpcode::Send),
            (11, WcOpcode::Send),
            (12, WcOpcode::RdmaWrite),
            (13, WcOpcode::RdmaWrite)
        ]
    );
    let rc = wait1(&mut r.b.cq, "3000-byte SEND");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!((rc.wr_id(), rc.byte_len()), (0, 3000));
    assert_eq!(rc.src_qp(), a.qpn());
    let l = b.reclaim_lease(rc).unwrap().unwrap();
    assert_eq!(&l.as_slice()[..3000], &big[..]);
    let rc = wait1(&mut r.b.cq, "SEND_IMM");
    assert_eq!((rc.wr_id(), rc.imm()), (1, Some(0xfeed)));
    drop(b.reclaim(rc).unwrap());
    let rc = wait1(&mut r.b.cq, "WRITE_IMM");
    assert_eq!(
        (rc.wr_id(), rc.opcode(), rc.imm()),
        (2, WcOpcode::RecvRdmaWithImm, Some(0x77))
    );
    drop(b.reclaim(rc).unwrap());
    let mut buf = vec![0u8; 2500];
    r.b.mr.read(0, &mut buf).unwrap();
    assert_eq!(buf, pattern(9, 2500));
    r.b.mr.read(3000, &mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], b"last");
}

#[test]
fn a_lost_middle_packet_drops_the_uc_send_and_the_next_arrives_without_retransmission() {
    let mut r = rig();
    let (mut a, mut b) = uc_pair(&r);
    // UC_SEND_MIDDLE (IBTA table 38: 0x21).
    let (seen, dropped) = drop_first(&r, 0x21);
    for id in 0..2 {
        b.post_recv(RecvWr::new(id, r.b.pool.lease(4096).unwrap()))
            .unwrap();
    }
    let (first, second) = (pattern(1, 3000), pattern(100, 3000));
    a.post_send(send_of(&r.a.pool, 1, &first)).unwrap();
    a.post_send(send_of(&r.a.pool, 2, &second)).unwrap();
    // The sender completes both: UC does not know what was lost.
    for id in [1, 2] {
        let c = wait1(&mut r.a.cq, "UC send");
        assert!(c.is_ok(), "{c}");
        assert_eq!(c.wr_id(), id);
        drop(a.reclaim(c).unwrap());
    }
    // The first message is gone; the second lands in the receive posted first.
    let rc = wait1(&mut r.b.cq, "the second SEND");
    assert!(rc.is_ok(), "{rc}");
    assert_eq!((rc.wr_id(), rc.byte_len()), (0, 3000));
    let l = b.reclaim_lease(rc).unwrap().unwrap();
    assert_eq!(&l.as_slice()[..3000], &second[..]);
    assert!(r.b.cq.poll_one().is_none(), "nothing else arrived");
    assert_eq!(
        b.recvs_outstanding(),
        1,
        "the second receive is still posted"
    );
    assert_eq!(dropped.load(Ordering::Relaxed), 1);
    assert_eq!(
        seen.load(Ordering::Relaxed),
        6,
        "three packets per message, none sent again"
    );
    assert_eq!(a.state().unwrap(), QpState::Rts);
    assert_eq!(b.state().unwrap(), QpState::Rts);
}

#[test]
fn a_lost_middle_packet_drops_the_rest_of_a_uc_write() {
    let mut r = rig();
    let (mut a, mut b) = uc_pair(&r);
    // UC_RDMA_WRITE_MIDDLE (0x27).
    let (seen, dropped) = drop_first(&r, 0x27);
    let target = r.b.mr.remote();
    a.post_send(
        SendWr::new(1, SendOp::Write(target.slice(0, 3000).unwrap()))
            .sge(lease_with(&r.a.pool, &vec![0xaa; 3000])),
    )
    .unwrap();
    b.post_recv(RecvWr::new(9, r.b.pool.lease(64).unwrap()))
        .unwrap();
    a.post_send(
        SendWr::new(2, SendOp::WriteImm(target.slice(3500, 3).unwrap(), 5))
            .sge(lease_with(&r.a.pool, b"yes")),
    )
    .unwrap();
    for _ in 0..2 {
        let c = wait1(&mut r.a.cq, "UC write");
        assert!(c.is_ok(), "{c}");
        drop(a.reclaim(c).unwrap());
    }
    let rc = wait1(&mut r.b.cq, "the WRITE_IMM after the loss");
    assert_eq!((rc.wr_id(), rc.imm()), (9, Some(5)));
    drop(b.reclaim(rc).unwrap());
    let mut buf = vec![0u8; 3000];
    r.b.mr.read(0, &mut buf).unwrap();
    // The FIRST packet was placed before the loss; the LAST was dropped with the message.
    assert!(buf[..1024].iter().all(|&x| x == 0xaa));
    assert!(
        buf[2048..].iter().all(|&x| x == 0),
        "the rest was not written"
    );
    r.b.mr.read(3500, &mut buf[..3]).unwrap();
    assert_eq!(&buf[..3], b"yes");
    assert_eq!(dropped.load(Ordering::Relaxed), 1);
    assert_eq!(seen.load(Ordering::Relaxed), 4);
}

#[test]
fn uc_refuses_read_and_atomics_at_post_time() {
    let r = rig();
    let (mut a, _b) = uc_pair(&r);
    let remote = r.b.mr.remote().slice(0, 8).unwrap();
    for op in [
        SendOp::Read(remote),
        SendOp::FetchAdd { remote, add: 1 },
        SendOp::CompareSwap {
            remote,
            compare: 0,
            swap: 1,
        },
    ] {
        let err = a
            .post_send(SendWr::new(1, op).sge(r.a.pool.lease(8).unwrap()))
            .unwrap_err();
        assert!(
            matches!(err, VerbsError::Post(PostError::BadRequest { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("UC"), "{err}");
    }
    assert_eq!(r.a.pool.leased(), 0, "the buffers came back");
    assert_eq!(a.sends_outstanding(), 0);
}
