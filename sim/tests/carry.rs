//! `Pair::carry`'s skipping of idle rounds changes nothing the devices can see: an exchange
//! that waits on the transport's timers (RNR NAK waits, ACK timeouts and the retries they
//! start) ends in the same CQEs, counters, time and host memory when it is
//! carried by `Pair::carry` as when it is stepped one round after another with nothing
//! skipped (`round_by_round`, the reference written out here). The fuzz targets rely on this:
//! a skipped round that would have acted would make their inputs explore a device no driver
//! can meet.

mod common;

use bypass_hw::cmd::Opcode;
use bypass_hw::wqe::{DataSeg, WqeOpcode};
use bypass_sim::counters::Counters;
use bypass_sim::memory::HostMemory as _;
use common::pair::Pair;
use common::qp::wqe;
use zerocopy::IntoBytes;

/// Host memory per NIC.
const MEM: usize = 1 << 20;

/// Time one round moves on, as `Pair::carry` has it.
const ROUND: u64 = 50_000;

/// Steps both devices and carries packets between them, `rounds` rounds of [`ROUND`] each,
/// stopping early only when both are idle with no timer pending: `Pair::carry` without its
/// skipping of idle rounds.
fn round_by_round(p: &mut Pair, rounds: usize, mut seen: impl FnMut(u64, &[u8])) {
    let (a, b) = (&mut p.a.raw.dev, &mut p.b.raw.dev);
    let mut now = a.now().max(b.now());
    for _ in 0..rounds {
        now += ROUND;
        a.set_time(now);
        b.set_time(now);
        let mut moved = a.step() | b.step();
        while let Some(pkt) = a.take_tx() {
            seen(now, &pkt);
            b.receive(pkt);
            moved = true;
        }
        while let Some(pkt) = b.take_tx() {
            seen(now, &pkt);
            a.receive(pkt);
            moved = true;
        }
        if !moved && a.next_deadline().is_none() && b.next_deadline().is_none() {
            break;
        }
    }
}

/// What the devices showed in each phase: every packet carried and when, then the CQEs
/// polled, counters and time.
struct Seen {
    packets: Vec<(u64, Vec<u8>)>,
    cqes: Vec<[u8; 64]>,
    counters: [Counters; 2],
    now: [u64; 2],
}

/// Carries a pair some rounds, showing a closure each packet and the time it was carried.
type Carry = fn(&mut Pair, usize, &mut dyn FnMut(u64, &[u8]));

/// Everything an exchange showed, phase by phase, and both NICs' host memory at the end.
struct Outcome {
    phases: Vec<Seen>,
    memory: [Vec<u8>; 2],
}

fn seen(p: &mut Pair, packets: Vec<(u64, Vec<u8>)>) -> Seen {
    let cqes = p.poll_all();
    Seen {
        packets,
        cqes,
        counters: [&p.a, &p.b].map(|n| n.raw.dev.counters.clone()),
        now: [p.a.raw.dev.now(), p.b.raw.dev.now()],
    }
}

/// Posts `n` 256-byte SENDs on A's RC QP.
fn sends(p: &mut Pair, n: usize) {
    let a = &mut p.a;
    let seg = DataSeg::new(256, a.mr.key, a.mr.va + (40 << 10));
    let mut rc = a.rc;
    for _ in 0..n {
        let send = wqe(WqeOpcode::SEND, rc.sq_pi, rc.qpn, 0, &[seg.as_bytes()]);
        a.raw.post_send(&mut rc, &send);
    }
    a.rc = rc;
}

/// Carries `p` by `carry` in steps of `rounds` each, then polls: what the phase showed.
fn phase(p: &mut Pair, carry: Carry, rounds: &[usize]) -> Seen {
    let mut packets = Vec::new();
    for &n in rounds {
        carry(p, n, &mut |t, pkt| packets.push((t, pkt.to_vec())));
    }
    seen(p, packets)
}

/// Twelve SENDs onto B's eight receives (RNR NAKs, A waiting out B's RNR timer), eight more
/// receives on B (the waiting SENDs land), then B's RC QP destroyed under one more SEND (an
/// ACK timeout and a retry every 67 ms: retry count 7 retries forever, as rxe has it), each
/// phase carried by `carry` in steps of uneven lengths.
fn exchange(carry: Carry) -> Outcome {
    let mut p = Pair::connected(MEM);
    let mut phases = Vec::new();
    sends(&mut p, 12);
    phases.push(phase(&mut p, carry, &[1, 3, 64, 500]));
    p.b.post_recvs();
    phases.push(phase(&mut p, carry, &[7, 2_000]));
    let bqp = p.b.rc.qpn;
    p.b.raw
        .destroy(Opcode::DESTROY_QP, bqp)
        .expect("DESTROY_QP");
    sends(&mut p, 1);
    phases.push(phase(&mut p, carry, &[5, 1_000, 40_000]));
    let memory = [&p.a, &p.b].map(|n| n.raw.read(0, n.raw.mem.len()));
    Outcome { phases, memory }
}

#[test]
fn carrying_skips_only_rounds_in_which_nothing_happens() {
    let reference = exchange(|p, n, seen| round_by_round(p, n, seen));
    // The exchange waited on both timers, which is what makes the comparison worth making.
    let a = &reference.phases[2].counters[0];
    assert!(
        a.rnr_nak_received > 0 && a.local_ack_timeout_err > 0 && a.completer_retry_err > 0,
        "A met RNR NAKs and ACK timeouts in the reference run: {a:?}"
    );
    let carried = exchange(|p, n, seen| p.carry_seeing(n, seen));
    for (k, (c, r)) in carried.phases.iter().zip(&reference.phases).enumerate() {
        // The first packet that differs says when the two parted (the whole of both would be
        // thousands of packets).
        let first = c.packets.iter().zip(&r.packets).position(|(x, y)| x != y);
        if let Some(i) = first {
            panic!(
                "phase {k}, packet {i}: carried at {} ns, round by round at {} ns (or other bytes)",
                c.packets[i].0, r.packets[i].0
            );
        }
        assert_eq!(
            c.packets.len(),
            r.packets.len(),
            "phase {k}: packets carried"
        );
        assert_eq!(c.cqes, r.cqes, "phase {k}: CQEs");
        assert_eq!(c.counters, r.counters, "phase {k}: counters");
        assert_eq!(c.now, r.now, "phase {k}: time");
    }
    for (n, (c, r)) in carried.memory.iter().zip(&reference.memory).enumerate() {
        let first = c.iter().zip(r).position(|(x, y)| x != y);
        assert_eq!(
            first, None,
            "NIC {n}: host memory differs first at this offset"
        );
    }
}
