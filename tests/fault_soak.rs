//! The fault soak: mixed SEND/WRITE/READ/atomic traffic through the verbs API on two stepped
//! sim NICs whose link drops, duplicates, reorders and corrupts packets from the world's
//! seeded RNG. Every message must arrive exactly once, in order and intact (SEND payloads and
//! their order at the receiver, WRITE data at the target, READ data, atomics' returned values
//! and the target's final value), and the counters must account for the recoveries. A cut
//! link must end in TRANSPORT_RETRY_EXC on the first outstanding WQE, the QP in ERR and the
//! rest flushed.
//!
//! Message count per setting: `BYPASS_SOAK_MESSAGES`. A plain `cargo test` runs 3 000 per
//! setting (the same checks); `scripts/test.sh` runs the full soak, 100 000 per setting. Seed:
//! `BYPASS_SEED` (default fixed); a failure prints the seed and the command that replays it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_sim::counters::Counters;
use bypass_sim::fabric::SimFabric;
use bypass_sim::faults::{FaultPlan, FaultStats, Rate};
use bypass_testbed::SimContext;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{
    Completion, Context, MemoryPool, Mtu, Qp, QpBuilder, QpState, WcOpcode, WcStatus,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Largest message.
const MAX_MSG: usize = 9_000;
/// WQEs outstanding on the requester.
const WINDOW: usize = 8;
/// Receives kept posted on the responder.
const RECVS: usize = 16;
/// WRITE slots in the target MR (one per window position).
const SLOT: usize = 16 * 1024;
/// READ source region: offset and length in the target MR.
const READ_OFF: usize = WINDOW * SLOT;
const READ_LEN: usize = 16 * 1024;
/// The atomic target.
const ATOMIC_OFF: usize = READ_OFF + READ_LEN;
const MR_LEN: usize = ATOMIC_OFF + 4096;

/// A number below `n` from the test's seeded generator (message mix and sizes).
fn below(mix: &mut ChaCha8Rng, n: u64) -> u64 {
    mix.next_u64() % n
}

/// The bytes of message `seq` (`len` long): the sequence number, then a keyed pattern.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (seq.wrapping_mul(31).wrapping_add(i as u64 * 7) >> (i % 5)) as u8)
        .collect();
    let tag = seq.to_le_bytes();
    let n = tag.len().min(len);
    v[..n].copy_from_slice(&tag[..n]);
    v
}

fn read_source() -> Vec<u8> {
    (0..READ_LEN).map(|i| (i * 13 + i / 256) as u8).collect()
}

#[path = "verbs_support.rs"]
mod verbs_support;
use verbs_support::Side;

fn side(ctx: Arc<Context>) -> Side {
    verbs_support::side_sized(ctx, MAX_MSG, 64, MR_LEN)
}

struct Rig {
    fabric: SimFabric,
    a: Side,
    b: Side,
    qa: Qp,
    qb: Qp,
}

/// Two NICs, one RC QP each, connected at `mtu`, the requester sending from `psn`, with
/// `retry_cnt` transport retries.
fn rig(seed: u64, mtu: Mtu, psn: u32, retry_cnt: u8) -> Rig {
    build_rig(seed, Some(mtu), Some(psn), None, retry_cnt)
}

/// The rig of [`rig`] with what is not given left at the QP's defaults; `timeout` is the
/// requester's ACK timeout code.
fn build_rig(
    seed: u64,
    mtu: Option<Mtu>,
    psn: Option<u32>,
    timeout: Option<u8>,
    retry_cnt: u8,
) -> Rig {
    let pair = Context::sim_pair(seed).expect("two sim NICs");
    let (a, b) = (side(pair.a), side(pair.b));
    let mut qa = QpBuilder::rc(&a.pd, &a.cq, &a.cq).max_send_wr(64);
    if let Some(psn) = psn {
        qa = qa.psn(psn);
    }
    let mut qa = qa.build().expect("QP a");
    let mut qb = QpBuilder::rc(&b.pd, &b.cq, &b.cq)
        .max_recv_wr(64)
        .build()
        .expect("QP b");
    let (mut ea, mut eb) = (qa.endpoint().unwrap(), qb.endpoint().unwrap());
    if let Some(mtu) = mtu {
        ea.mtu = mtu;
        eb.mtu = mtu;
    }
    qa.modify_to_init().unwrap();
    qa.modify_to_rtr(&eb).unwrap();
    let base = bypass_verbs::driver::qp_attr::Rtr2Rts::new(qa.psn());
    let rts = bypass_verbs::driver::qp_attr::Rtr2Rts {
        timeout: timeout.unwrap_or(base.timeout),
        retry_cnt,
        ..base
    };
    qa.modify_to_rts_with(&rts).unwrap();
    qb.connect(&ea).expect("connect b");
    Rig {
        fabric: pair.fabric,
        a,
        b,
        qa,
        qb,
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

fn seed() -> u64 {
    std::env::var("BYPASS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0005)
}

fn messages() -> u64 {
    std::env::var("BYPASS_SOAK_MESSAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000)
}

/// Panics with the seed and how to replay.
fn fail(seed: u64, setting: &str, what: String) -> ! {
    panic!(
        "{setting}: {what}\n  seed {seed}: replay with BYPASS_SEED={seed} BYPASS_SOAK_MESSAGES={} cargo test -p bypass --test fault_soak",
        messages()
    )
}

/// What a soak run saw.
#[derive(Debug)]
struct Outcome {
    faults_a: FaultStats,
    faults_b: FaultStats,
    a: Counters,
    b: Counters,
    sends: u64,
    virtual_ns: u64,
}

/// Runs `n` mixed messages under `plan` and checks every one.
fn soak(setting: &str, seed: u64, n: u64, plan: FaultPlan, mtu: Mtu, psn: u32) -> Outcome {
    let mut r = rig(seed, mtu, psn, 7);
    r.b.mr.write(READ_OFF, &read_source()).unwrap();
    r.b.mr.write_u64_be(ATOMIC_OFF, 0).unwrap();
    r.fabric.with_world(|w| w.set_faults(Some(plan)));
    let src = read_source();
    let mut mix = ChaCha8Rng::seed_from_u64(seed ^ 0xa5a5);
    let mut atomic_value = 0u64;
    let mut pending: std::collections::VecDeque<(u64, Kind)> = Default::default();
    let mut expected_sends: std::collections::VecDeque<(u64, usize)> = Default::default();
    let mut next_recv_id = 0u64;
    for _ in 0..RECVS {
        post_recv(&mut r, &mut next_recv_id);
    }
    let (mut posted, mut done, mut sends) = (0u64, 0u64, 0u64);
    while done < n {
        while pending.len() < WINDOW && posted < n {
            let seq = posted;
            let slot = (seq as usize) % WINDOW;
            let len = match below(&mut mix, 4) {
                0 => 1 + below(&mut mix, 64) as usize,
                1 => 64 + below(&mut mix, 1024) as usize,
                _ => 1 + below(&mut mix, MAX_MSG as u64) as usize,
            };
            let kind = match below(&mut mix, 10) {
                0..=3 => Kind::Send { len },
                4..=5 => Kind::Write { slot, len },
                6..=7 => {
                    let len = len.min(READ_LEN);
                    let off = below(&mut mix, (READ_LEN - len + 1) as u64) as usize;
                    Kind::Read { off, len }
                }
                8 => {
                    let add = 1 + below(&mut mix, 1000);
                    let old = atomic_value;
                    atomic_value = atomic_value.wrapping_add(add);
                    Kind::FetchAdd { add, old }
                }
                _ => {
                    let old = atomic_value;
                    let hit = below(&mut mix, 2) == 0;
                    let compare = if hit { old } else { old ^ 1 };
                    let swap = mix.next_u64();
                    if hit {
                        atomic_value = swap;
                    }
                    Kind::CompareSwap { compare, swap, old }
                }
            };
            post(&mut r, seq, kind);
            if let Kind::Send { len } = kind {
                expected_sends.push_back((seq, len));
            }
            pending.push_back((seq, kind));
            posted += 1;
        }
        let c = match r.a.cq.wait(Duration::from_secs(60)) {
            Ok(Some(c)) => c,
            Ok(None) => fail(seed, setting, format!("no completion after {done} of {n}")),
            Err(e) => fail(seed, setting, format!("waiting after {done} of {n}: {e}")),
        };
        let Some((seq, kind)) = pending.pop_front() else {
            fail(
                seed,
                setting,
                format!("a completion nothing was waiting for: {c}"),
            )
        };
        check_completion(&mut r, seed, setting, seq, kind, c, &src);
        done += 1;
        sends += drain_recvs(
            &mut r,
            seed,
            setting,
            &mut expected_sends,
            &mut next_recv_id,
        );
    }
    // The last SENDs' receives may complete after the requester's completions were polled.
    let _ = r.fabric.with_world(|w| w.settle(10_000_000_000));
    sends += drain_recvs(
        &mut r,
        seed,
        setting,
        &mut expected_sends,
        &mut next_recv_id,
    );
    if !expected_sends.is_empty() {
        fail(
            seed,
            setting,
            format!("{} SENDs never arrived", expected_sends.len()),
        );
    }
    let final_value = r.b.mr.read_u64_be(ATOMIC_OFF).unwrap();
    if final_value != atomic_value {
        fail(
            seed,
            setting,
            format!(
                "atomic target {final_value:#x}, expected {atomic_value:#x}: an atomic ran twice or never"
            ),
        );
    }
    let a_id = r.a.ctx.sim().unwrap().id();
    let b_id = r.b.ctx.sim().unwrap().id();
    let (faults_a, faults_b, virtual_ns) = r
        .fabric
        .with_world(|w| (w.fault_stats_from(a_id), w.fault_stats_from(b_id), w.now()));
    let a = r.fabric.with_device(a_id, |d| d.counters.clone()).unwrap();
    let b = r.fabric.with_device(b_id, |d| d.counters.clone()).unwrap();
    Outcome {
        faults_a,
        faults_b,
        a,
        b,
        sends,
        virtual_ns,
    }
}

fn post_recv(r: &mut Rig, next: &mut u64) {
    let l = r.b.pool.lease(MAX_MSG).expect("receive lease");
    r.qb.post_recv(RecvWr::new(*next, l)).expect("post_recv");
    *next += 1;
}

fn post(r: &mut Rig, seq: u64, kind: Kind) {
    let remote = r.b.mr.remote();
    let wr = match kind {
        Kind::Send { len } => {
            SendWr::new(seq, SendOp::Send).sge(lease(&r.a.pool, &payload(seq, len)))
        }
        Kind::Write { slot, len } => SendWr::new(
            seq,
            SendOp::Write(remote.slice((slot * SLOT) as u64, len as u64).unwrap()),
        )
        .sge(lease(&r.a.pool, &payload(seq, len))),
        Kind::Read { off, len } => SendWr::new(
            seq,
            SendOp::Read(
                remote
                    .slice(off as u64 + READ_OFF as u64, len as u64)
                    .unwrap(),
            ),
        )
        .sge(r.a.pool.lease(len).unwrap()),
        Kind::FetchAdd { add, .. } => SendWr::new(
            seq,
            SendOp::FetchAdd {
                remote: remote.slice(ATOMIC_OFF as u64, 8).unwrap(),
                add,
            },
        )
        .sge(r.a.pool.lease(8).unwrap()),
        Kind::CompareSwap { compare, swap, .. } => SendWr::new(
            seq,
            SendOp::CompareSwap {
                remote: remote.slice(ATOMIC_OFF as u64, 8).unwrap(),
                compare,
                swap,
            },
        )
        .sge(r.a.pool.lease(8).unwrap()),
    };
    r.qa.post_send(wr).expect("post_send");
}

fn lease(pool: &MemoryPool, bytes: &[u8]) -> bypass_verbs::Lease {
    let mut l = pool.lease(bytes.len()).expect("lease");
    l.as_mut_slice().copy_from_slice(bytes);
    l
}

fn check_completion(
    r: &mut Rig,
    seed: u64,
    setting: &str,
    seq: u64,
    kind: Kind,
    c: Completion,
    src: &[u8],
) {
    if c.status() != WcStatus::Success || c.wr_id() != seq {
        fail(
            seed,
            setting,
            format!(
                "message {seq} ({kind:?}) completed as wr_id {}: {c}",
                c.wr_id()
            ),
        );
    }
    let op = c.opcode();
    let got = r.qa.reclaim_lease(c).unwrap();
    let bad = |what: String| fail(seed, setting, format!("message {seq} ({kind:?}): {what}"));
    match kind {
        Kind::Send { .. } => {
            if op != WcOpcode::Send {
                bad(format!("opcode {op:?}"));
            }
        }
        Kind::Write { slot, len } => {
            let mut buf = vec![0u8; len];
            r.b.mr.read(slot * SLOT, &mut buf).unwrap();
            if buf != payload(seq, len) {
                bad("the target does not hold the written bytes".into());
            }
        }
        Kind::Read { off, len } => {
            let l = got.unwrap_or_else(|| bad("no READ buffer".into()));
            if l.as_slice().get(..len) != src.get(off..off + len) {
                bad("READ data differs from the source".into());
            }
        }
        Kind::FetchAdd { old, .. } | Kind::CompareSwap { old, .. } => {
            let l = got.unwrap_or_else(|| bad("no atomic buffer".into()));
            let v = u64::from_be_bytes(l.as_slice()[..8].try_into().unwrap());
            if v != old {
                bad(format!("atomic returned {v:#x}, expected {old:#x}"));
            }
        }
    }
}

/// Takes every receive completion, checks it is the next SEND in order with its bytes, and
/// reposts a receive. Returns how many arrived.
fn drain_recvs(
    r: &mut Rig,
    seed: u64,
    setting: &str,
    expected: &mut std::collections::VecDeque<(u64, usize)>,
    next_recv_id: &mut u64,
) -> u64 {
    let mut n = 0;
    while let Some(c) = r.b.cq.poll_one() {
        if !c.is_ok() {
            let k: Vec<Counters> = (0..2)
                .map(|d| r.fabric.with_device(d, |d| d.counters.clone()).unwrap())
                .collect();
            eprintln!("receive error {c}; counters {k:?}");
        }
        let Some((seq, len)) = expected.pop_front() else {
            fail(
                seed,
                setting,
                format!("a receive no SEND was posted for: {c}"),
            );
        };
        if !c.is_ok() || c.opcode() != WcOpcode::Recv || c.byte_len() as usize != len {
            fail(
                seed,
                setting,
                format!("SEND {seq} ({len} B) arrived as {c} of {} B", c.byte_len()),
            );
        }
        let mut l = r.qb.reclaim_lease(c).unwrap().expect("receive lease");
        l.set_len(len).unwrap();
        if l.as_slice() != payload(seq, len).as_slice() {
            fail(
                seed,
                setting,
                format!("SEND {seq} ({len} B) arrived corrupted, duplicated or out of order"),
            );
        }
        drop(l);
        post_recv(r, next_recv_id);
        n += 1;
    }
    n
}

fn report(setting: &str, n: u64, o: &Outcome, wall: Duration) {
    eprintln!(
        "{setting}: {n} messages ({} SENDs) in {:.2?} wall, {:.3} s virtual\n  faults a->b {:?}\n  faults b->a {:?}\n  a: retransmits {} completer_retry_err {} local_ack_timeout_err {} packet_seq_err {} implied_nak_seq_err {} naks_received {} rx_icrc_errors {}\n  b: out_of_sequence {} duplicate_request {} naks_sent {} rx_icrc_errors {} rx_discards {}",
        o.sends,
        wall,
        o.virtual_ns as f64 / 1e9,
        o.faults_a,
        o.faults_b,
        o.a.retransmits,
        o.a.completer_retry_err,
        o.a.local_ack_timeout_err,
        o.a.packet_seq_err,
        o.a.implied_nak_seq_err,
        o.a.naks_received,
        o.a.rx_icrc_errors,
        o.b.out_of_sequence,
        o.b.duplicate_request,
        o.b.naks_sent,
        o.b.rx_icrc_errors,
        o.b.rx_discards,
    );
}

/// The counters account for the recoveries the faults forced.
fn check_accounting(setting: &str, seed: u64, o: &Outcome) {
    let bad = |what: String| fail(seed, setting, format!("accounting: {what} ({o:?})"));
    // Every corrupted packet is dropped by the receiver's ICRC check and counted there.
    if o.b.rx_icrc_errors != o.faults_a.corrupted {
        bad("b's rx_icrc_errors differs from the packets corrupted on the way to b".into());
    }
    if o.a.rx_icrc_errors != o.faults_b.corrupted {
        bad("a's rx_icrc_errors differs from the packets corrupted on the way to a".into());
    }
    // Nothing else was thrown away: every drop is the link's or the ICRC check's.
    if o.a.rx_discards != 0 || o.b.rx_discards != 0 {
        bad("packets were discarded for another reason than a bad ICRC".into());
    }
    // Every request packet lost on the way (dropped, or corrupted and so dropped) had to be
    // sent again.
    let lost_requests = o.faults_a.dropped + o.faults_a.corrupted;
    if o.a.retransmits < lost_requests {
        bad(format!(
            "{} retransmitted packets cannot cover {lost_requests} lost request packets",
            o.a.retransmits
        ));
    }
    // Retransmitted packets come from retry events: timeouts, NAKs, or lost responses seen.
    let lost_any = lost_requests + o.faults_b.dropped + o.faults_b.corrupted;
    if lost_any > 0 && o.a.completer_retry_err == 0 {
        bad("packets were lost but no retry was counted".into());
    }
    if o.a.retransmits > 0 && o.a.completer_retry_err == 0 {
        bad("retransmits without a retry event".into());
    }
    // Each retry has a cause: a timeout, a sequence NAK or an implied NAK (NAKs that arrive
    // while a retry is already under way start none).
    if o.a.completer_retry_err
        > o.a.local_ack_timeout_err + o.a.packet_seq_err + o.a.implied_nak_seq_err
    {
        bad("more retries than timeouts + sequence NAKs + implied NAKs".into());
    }
    // Every retransmitted or duplicated request the responder saw again is a duplicate or out
    // of sequence there.
    if o.faults_a.duplicated > 0 && o.b.duplicate_request + o.b.out_of_sequence == 0 {
        bad("duplicated requests reached b without being counted".into());
    }
    let reordered = o.faults_a.reordered + o.faults_b.reordered;
    if lost_any == 0 && reordered == 0 && o.faults_a.duplicated == 0 && o.faults_b.duplicated == 0 {
        let clean = o.a.retransmits == 0 && o.b.duplicate_request == 0;
        if !clean {
            bad("recoveries on a link without loss".into());
        }
    }
}

fn run_setting(setting: &str, plan: FaultPlan, mtu: Mtu, psn: u32) {
    let seed = seed();
    let n = messages();
    let t = Instant::now();
    let o = soak(setting, seed, n, plan, mtu, psn);
    report(setting, n, &o, t.elapsed());
    check_accounting(setting, seed, &o);
}

#[test]
fn soak_1_percent_loss() {
    run_setting(
        "1% loss",
        FaultPlan::drop(Rate::percent(1)),
        Mtu::Mtu1024,
        0x00ff_fff0,
    );
}

#[test]
fn soak_5_percent_loss() {
    run_setting(
        "5% loss",
        FaultPlan::drop(Rate::percent(5)),
        Mtu::Mtu4096,
        0,
    );
}

#[test]
fn soak_20_percent_loss() {
    run_setting(
        "20% loss",
        FaultPlan::drop(Rate::percent(20)),
        Mtu::Mtu1024,
        0x00ff_ff00,
    );
}

#[test]
fn soak_1_percent_duplicate() {
    run_setting(
        "1% duplicate",
        FaultPlan {
            duplicate: Rate::percent(1),
            ..FaultPlan::default()
        },
        Mtu::Mtu2048,
        0x00ff_fffe,
    );
}

#[test]
fn soak_1_percent_reorder() {
    run_setting(
        "1% reorder",
        FaultPlan {
            reorder: Rate::percent(1),
            ..FaultPlan::default()
        },
        Mtu::Mtu1024,
        0x123,
    );
}

#[test]
fn soak_1_percent_corruption() {
    run_setting(
        "1% corruption",
        FaultPlan {
            corrupt: Rate::percent(1),
            ..FaultPlan::default()
        },
        Mtu::Mtu4096,
        0x00ff_8000,
    );
}

#[test]
fn a_cut_link_ends_in_retry_exceeded_then_flushes_the_rest() {
    let seed = seed();
    let setting = "cut link";
    let mut r = rig(seed, Mtu::Mtu1024, 0x00ff_fffd, 3);
    for i in 0..RECVS as u64 {
        let l = r.b.pool.lease(MAX_MSG).unwrap();
        r.qb.post_recv(RecvWr::new(i, l)).unwrap();
    }
    // Two messages get through, then the link is cut for ever.
    r.fabric
        .with_world(|w| w.set_faults(Some(FaultPlan::cut(0, u64::MAX))));
    for seq in 0..5u64 {
        r.qa.post_send(SendWr::new(seq, SendOp::Send).sge(lease(&r.a.pool, &payload(seq, 3000))))
            .unwrap();
    }
    let first = wait_on(&mut r.a.cq, 60, "a completion");
    let status = format!("{}", first.status());
    if first.wr_id() != 0 || !status.contains("RETRY_EXC") || status.contains("RNR") {
        fail(seed, setting, format!("first completion {first}"));
    }
    for seq in 1..5u64 {
        let c =
            r.a.cq
                .wait(Duration::from_secs(60))
                .unwrap()
                .expect("a flush");
        let s = format!("{}", c.status());
        if c.wr_id() != seq || !s.contains("FLUSH") {
            fail(seed, setting, format!("completion {seq}: {c}"));
        }
    }
    assert_eq!(r.qa.state().unwrap(), QpState::Err, "seed {seed}");
    let a_id = r.a.ctx.sim().unwrap().id();
    let k = r.fabric.with_device(a_id, |d| d.counters.clone()).unwrap();
    assert_eq!(k.retry_exceeded_err, 1, "seed {seed}: {k:?}");
    assert_eq!(
        k.local_ack_timeout_err, 4,
        "3 retries + the one that found none left"
    );
    assert!(
        k.retransmits >= 3 * 3,
        "each retry resent the first message's packets"
    );
}

/// A rig whose requester has ACK timeout code `timeout` and `retry_cnt` retries.
fn timed_rig(seed: u64, timeout: u8, retry_cnt: u8) -> Rig {
    build_rig(seed, None, None, Some(timeout), retry_cnt)
}

/// The next completion on `cq` within `secs` seconds (of wall time; the stepped world moves
/// virtual time as fast as it can); `what` names it in the failure.
fn wait_on(cq: &mut bypass_verbs::Cq, secs: u64, what: &str) -> Completion {
    cq.wait(Duration::from_secs(secs))
        .unwrap()
        .unwrap_or_else(|| panic!("no {what} within {secs} s"))
}

/// Drops the first packet device b sends from now on.
fn lose_first_packet_of_b(r: &Rig) {
    use bypass_sim::faults::{Fault, Trigger};
    let b_id = r.b.ctx.sim().unwrap().id();
    r.fabric.with_world(|w| {
        w.set_faults_from(
            b_id,
            Some(FaultPlan::default().with(Trigger::Packet(0), Fault::Drop)),
        )
    });
}

fn counters(r: &Rig, side_a: bool) -> Counters {
    let s = if side_a { &r.a } else { &r.b };
    let id = s.ctx.sim().unwrap().id();
    r.fabric.with_device(id, |d| d.counters.clone()).unwrap()
}

#[test]
fn the_retransmit_timer_is_4_096_us_times_two_to_the_ack_timeout() {
    // IBTA §9.7.6.1.3 / rxe `rxe_qp.c` (`qp_timeout_jiffies = 4.096 µs << timeout`): with the
    // link cut, each of the 1 + retry_cnt transmissions waits one timeout, so the
    // RETRY_EXC completion comes (1 + retry_cnt) timeouts after the post, in virtual time.
    for (timeout, retry_cnt) in [(10u8, 2u8), (14, 1), (5, 0)] {
        let mut r = timed_rig(seed(), timeout, retry_cnt);
        r.fabric
            .with_world(|w| w.set_faults(Some(FaultPlan::cut(0, u64::MAX))));
        let t0 = r.fabric.with_world(|w| w.now());
        r.qa.post_send(SendWr::new(1, SendOp::Send).sge(lease(&r.a.pool, b"lost")))
            .unwrap();
        let c =
            r.a.cq
                .wait(Duration::from_secs(60))
                .unwrap()
                .expect("a completion");
        assert!(format!("{}", c.status()).contains("RETRY_EXC"), "{c}");
        let elapsed = r.fabric.with_world(|w| w.now()) - t0;
        let period = 4_096u64 << timeout;
        let want = period * (1 + u64::from(retry_cnt));
        assert!(
            (want..want + period / 100 + 10_000).contains(&elapsed),
            "timeout {timeout}, retry_cnt {retry_cnt}: failed after {elapsed} ns, want {want}"
        );
        let k = counters(&r, true);
        assert_eq!(k.local_ack_timeout_err, 1 + u64::from(retry_cnt));
        assert_eq!(k.retransmits, u64::from(retry_cnt));
    }
}

#[test]
fn retry_cnt_7_retries_for_ever_and_recovers_when_the_link_comes_back() {
    // rxe `rxe_comp.c` COMPST_ERROR_RETRY: `if (qp->comp.retry_cnt != 7) retry_cnt--`.
    let mut r = timed_rig(seed(), 8, 7);
    let period = 4_096u64 << 8;
    // Cut for 20 timeouts: far more than 7 retries.
    r.fabric
        .with_world(|w| w.set_faults(Some(FaultPlan::cut(0, 20 * period))));
    r.qb.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    r.qa.post_send(SendWr::new(1, SendOp::Send).sge(lease(&r.a.pool, b"late")))
        .unwrap();
    let c = wait_on(&mut r.a.cq, 60, "a completion");
    assert!(c.is_ok(), "{c}");
    let k = counters(&r, true);
    assert!(k.local_ack_timeout_err >= 20, "{k:?}");
    assert_eq!(k.retry_exceeded_err, 0);
    let rc = wait_on(&mut r.b.cq, 1, "the receive");
    assert!(rc.is_ok() && rc.byte_len() == 4, "{rc}");
    assert!(r.b.cq.poll_one().is_none(), "delivered once");
}

#[test]
fn a_lost_ack_makes_a_duplicate_that_is_acked_again_and_delivered_once() {
    let mut r = timed_rig(seed(), 10, 3);
    // b's first packet (the ACK of the SEND) is lost.
    lose_first_packet_of_b(&r);
    r.qb.post_recv(RecvWr::new(1, r.b.pool.lease(64).unwrap()))
        .unwrap();
    r.qb.post_recv(RecvWr::new(2, r.b.pool.lease(64).unwrap()))
        .unwrap();
    r.qa.post_send(SendWr::new(1, SendOp::Send).sge(lease(&r.a.pool, b"once")))
        .unwrap();
    let c = wait_on(&mut r.a.cq, 60, "a completion");
    assert!(c.is_ok(), "{c}");
    let (ka, kb) = (counters(&r, true), counters(&r, false));
    assert_eq!(ka.local_ack_timeout_err, 1);
    assert_eq!(ka.retransmits, 1);
    assert_eq!(kb.duplicate_request, 1, "{kb:?}");
    let rc = wait_on(&mut r.b.cq, 1, "the receive");
    assert_eq!(rc.wr_id(), 1);
    assert!(
        r.b.cq.poll_one().is_none(),
        "the duplicate consumed no receive"
    );
}

#[test]
fn a_lost_atomic_ack_replays_the_saved_result_without_executing_twice() {
    let mut r = timed_rig(seed(), 10, 3);
    r.b.mr.write_u64_be(ATOMIC_OFF, 100).unwrap();
    // b's first packet (the atomic's ACK, with the original value) is lost.
    lose_first_packet_of_b(&r);
    let remote = r.b.mr.remote().slice(ATOMIC_OFF as u64, 8).unwrap();
    r.qa.post_send(
        SendWr::new(1, SendOp::FetchAdd { remote, add: 5 }).sge(r.a.pool.lease(8).unwrap()),
    )
    .unwrap();
    let c = wait_on(&mut r.a.cq, 60, "a completion");
    assert!(c.is_ok(), "{c}");
    let old = r.qa.reclaim_lease(c).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(old.as_slice().try_into().unwrap()), 100);
    assert_eq!(
        r.b.mr.read_u64_be(ATOMIC_OFF).unwrap(),
        105,
        "executed once"
    );
    let kb = counters(&r, false);
    assert_eq!(
        (kb.duplicate_request, kb.rx_atomic_requests),
        (1, 1),
        "{kb:?}"
    );
}

#[test]
fn requests_sent_around_the_psn_wrap_complete_in_order() {
    // The first PSN 3 below 2^24: a 5-packet SEND crosses the wrap, losses included.
    let mut r = rig(seed(), Mtu::Mtu1024, 0x00ff_fffd, 7);
    r.fabric
        .with_world(|w| w.set_faults(Some(FaultPlan::drop(Rate::percent(10)))));
    for i in 0..8 {
        r.qb.post_recv(RecvWr::new(i, r.b.pool.lease(MAX_MSG).unwrap()))
            .unwrap();
    }
    for seq in 0..8u64 {
        r.qa.post_send(SendWr::new(seq, SendOp::Send).sge(lease(&r.a.pool, &payload(seq, 4500))))
            .unwrap();
    }
    for seq in 0..8u64 {
        let c =
            r.a.cq
                .wait(Duration::from_secs(60))
                .unwrap()
                .expect("a completion");
        assert!(c.is_ok() && c.wr_id() == seq, "{c}");
        drop(r.qa.reclaim(c).unwrap());
    }
    let _ = r.fabric.with_world(|w| w.settle(10_000_000_000));
    for seq in 0..8u64 {
        let c = r.b.cq.poll_one().expect("a receive");
        let mut l = r.qb.reclaim_lease(c).unwrap().unwrap();
        l.set_len(4500).unwrap();
        assert_eq!(l.as_slice(), payload(seq, 4500).as_slice(), "SEND {seq}");
    }
    let info = r.qa.query().unwrap();
    assert_eq!(
        info.sq_psn,
        (0x00ff_fffd + 8 * 5) & 0x00ff_ffff,
        "the PSN wrapped"
    );
    assert_eq!(r.qb.query().unwrap().rq_psn, info.sq_psn);
}

#[test]
fn the_requester_keeps_at_most_max_rd_atomic_reads_and_atomics_outstanding() {
    // rxe `rxe_req.c` `check_init_depth` / mlx5 `log_sra_max`: with 2^1 allowed, the third
    // READ waits for the first one's response.
    let pair = Context::sim_pair(seed()).expect("two sim NICs");
    let (mut a, b) = (side(pair.a), side(pair.b));
    let mut qa = QpBuilder::rc(&a.pd, &a.cq, &a.cq).build().unwrap();
    let mut qb = QpBuilder::rc(&b.pd, &b.cq, &b.cq).build().unwrap();
    let (ea, eb) = (qa.endpoint().unwrap(), qb.endpoint().unwrap());
    qa.modify_to_init().unwrap();
    qa.modify_to_rtr(&eb).unwrap();
    let rts = bypass_verbs::driver::qp_attr::Rtr2Rts {
        log_max_rd_atomic: 1,
        ..bypass_verbs::driver::qp_attr::Rtr2Rts::new(qa.psn())
    };
    qa.modify_to_rts_with(&rts).unwrap();
    qb.connect(&ea).unwrap();
    let fabric = pair.fabric;
    let remote = b.mr.remote();
    for i in 0..3u64 {
        qa.post_send(
            SendWr::new(i, SendOp::Read(remote.slice(i * 64, 64).unwrap()))
                .sge(a.pool.lease(64).unwrap()),
        )
        .unwrap();
    }
    qa.post_send(
        SendWr::new(
            3,
            SendOp::FetchAdd {
                remote: remote.slice(ATOMIC_OFF as u64, 8).unwrap(),
                add: 1,
            },
        )
        .sge(a.pool.lease(8).unwrap()),
    )
    .unwrap();
    // Before any response can arrive: two requests on the wire, not four.
    let on_wire = fabric.with_world(|w| {
        w.run_until_idle().unwrap();
        w.in_flight()
    });
    assert_eq!(on_wire, 2);
    for i in 0..4u64 {
        let c =
            a.cq.wait(Duration::from_secs(5))
                .unwrap()
                .expect("a completion");
        assert!(c.is_ok() && c.wr_id() == i, "{c}");
        drop(qa.reclaim(c).unwrap());
    }
    drop(qb);
}
