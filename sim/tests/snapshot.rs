//! Device snapshots and resets (`Device::snapshot`, `Device::reset_to`), as the persistent
//! fuzz targets use them: after a reset, two connected NICs behave input for input as they
//! did when the snapshot was taken, whatever ran in between (commands that destroyed
//! objects, data-path traffic, memory scribbled over), so a fuzz finding replays from its
//! input alone.

mod common;

use bypass_hw::cmd::Opcode;
use bypass_hw::wqe::{DataSeg, RaddrSeg, WqeOpcode};
use bypass_sim::memory::HostMemory as _;
use common::pair::Pair;
use common::qp::wqe;
use zerocopy::IntoBytes;

/// Host memory per NIC (what a reset copies back).
const MEM: usize = 1 << 20;

/// Everything one run can observe: CQEs polled, counters, time and every byte of both
/// NICs' host memory.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    cqes: Vec<[u8; 64]>,
    counters: Vec<String>,
    now: [u64; 2],
    qpns: [Vec<u32>; 2],
    memory: [Vec<u8>; 2],
}

/// A SEND, an RDMA WRITE from A to B over RC, and a SEND over UD, carried, both CQs polled.
fn traffic(p: &mut Pair) -> Outcome {
    let (a, b) = (&mut p.a, &mut p.b);
    let seg = DataSeg::new(256, a.mr.key, a.mr.va + 4096);
    a.raw.write(a.mr.off + 4096, &[0x5a; 256]);
    let mut rc = a.rc;
    let send = wqe(WqeOpcode::SEND, rc.sq_pi, rc.qpn, 0, &[seg.as_bytes()]);
    a.raw.post_send(&mut rc, &send);
    let raddr = RaddrSeg::new(b.mr.va + (16 << 10), b.mr.key);
    let write = wqe(
        WqeOpcode::RDMA_WRITE,
        rc.sq_pi,
        rc.qpn,
        0,
        &[raddr.as_bytes(), seg.as_bytes()],
    );
    a.raw.post_send(&mut rc, &write);
    a.rc = rc;
    p.carry(256);
    let cqes = p.poll_all();
    Outcome {
        cqes,
        counters: [&p.a, &p.b]
            .map(|n| format!("{:?}", n.raw.dev.counters))
            .to_vec(),
        now: [p.a.raw.dev.now(), p.b.raw.dev.now()],
        qpns: [p.a.raw.dev.live_qpns(), p.b.raw.dev.live_qpns()],
        memory: [&p.a, &p.b].map(|n| n.raw.read(0, n.raw.mem.len())),
    }
}

#[test]
fn a_reset_pair_repeats_its_traffic_byte_for_byte() {
    let mut p = Pair::connected(MEM);
    let snap = p.snapshot();
    let first = traffic(&mut p);
    assert!(
        first.cqes.len() >= 3,
        "the traffic completed: {:?}",
        first.cqes.len()
    );
    p.reset_to(&snap);
    let second = traffic(&mut p);
    assert_eq!(first, second);
}

#[test]
fn a_reset_undoes_commands_traffic_and_scribbled_memory() {
    let mut p = Pair::connected(MEM);
    let before = [&p.a, &p.b].map(|n| n.raw.read(0, MEM));
    let snap = p.snapshot();
    let first = traffic(&mut p);
    p.reset_to(&snap);
    // Damage everything an input can reach: objects destroyed, memory overwritten, time
    // moved, counters run up.
    let _ = traffic(&mut p);
    let (bqp, bcq) = (p.b.rc.qpn, p.b.cq.cqn);
    p.b.raw
        .destroy(Opcode::DESTROY_QP, bqp)
        .expect("DESTROY_QP");
    let _ = p.b.raw.destroy(Opcode::DESTROY_CQ, bcq);
    p.a.raw.write(0x8000, &[0xee; 0x8000]);
    p.carry(64);
    assert_ne!(p.b.raw.dev.live_qpns(), first.qpns[1]);
    p.reset_to(&snap);
    assert!(
        [&p.a, &p.b]
            .iter()
            .zip(&before)
            .all(|(n, m)| n.raw.read(0, MEM) == *m),
        "host memory is back as it was"
    );
    assert_eq!(traffic(&mut p), first);
}
