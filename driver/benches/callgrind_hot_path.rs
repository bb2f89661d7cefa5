//! A small binary for `scripts/callgrind.sh`: posts and polls in two `#[inline(never)]`
//! functions that callgrind's `--toggle-collect` can isolate, on the stepped sim (the device
//! runs between rounds, outside both functions).
//!
//! Usage: `callgrind_hot_path [rounds] [batch|ext|ext-batch]`; prints how many posts and polls
//! it made. With `batch`, completions are polled 16 at a time through
//! `bypass_measured_poll_batch` (`Cq::poll`, one consumer-index update per call, as
//! `ibv_poll_cq` with a WC array) instead of one at a time. With `ext`, the specialised paths
//! (rdma-core's extended API): posts through `bypass_measured_post_write` (`Qp::post_write`)
//! and polls through `bypass_measured_poll_ext` (`Cq::start_poll`, reading `wr_id` and status,
//! ending the poll); `ext-batch` posts 64 WRITEs per `WriteBatch` (one doorbell,
//! `bypass_measured_post_write_batch`) and polls up to 16 per `start_poll` with `next_poll`
//! (`bypass_measured_poll_ext_batch`). `ext-2qp` is `ext` with two QPs on the CQ, their WRITEs
//! alternating: every CQE is of the other QP than the one before, so every poll misses the
//! last-QP cache and takes the cold path (the cold step's table lookup; the other figures
//! leave it out).

mod common;

use std::hint::black_box;

use bypass_driver::cq::Cq;
use bypass_driver::poll::{WorkCompletion, decode};
use bypass_driver::post::PostRefused;
use bypass_driver::post::{PostError, RemoteAddr, SendFlags, SendOp, SendWr, Sge};
use bypass_driver::qp::Qp;
use common::{second_pair, settle, setup};

/// One `post_send` (the measured function).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_post(qp: &mut Qp, wr: &SendWr<'_>) -> Result<(), PostError> {
    // SAFETY: the bench's SGEs name its own MR, read only by copies and alive past the post.
    unsafe { qp.post_send(wr) }
}

/// One `poll_one` (the measured function).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_poll(cq: &mut Cq) -> Option<WorkCompletion> {
    cq.poll_one()
}

/// One `poll` of up to `out.len()` completions (the measured function of the batch mode).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_poll_batch(cq: &mut Cq, out: &mut [WorkCompletion]) -> usize {
    cq.poll(out)
}

/// One `post_write` of a 1-SGE RDMA WRITE (the measured function of the `ext` modes).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_post_write(
    qp: &mut Qp,
    wr_id: u64,
    local: Sge,
    remote: RemoteAddr,
    flags: SendFlags,
) -> Result<(), PostRefused> {
    // SAFETY: the bench's SGEs name its own MR, read only by copies and alive past the post.
    unsafe { qp.post_write(wr_id, local, remote, flags) }
}

/// `n` RDMA WRITEs in one `WriteBatch` (one doorbell; the measured function of `ext-batch`).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_post_write_batch(
    qp: &mut Qp,
    local: &Sge,
    remote: &RemoteAddr,
    n: usize,
) -> usize {
    let Ok(mut b) = qp.write_batch() else {
        return 0;
    };
    let mut posted = 0;
    for k in 0..n {
        // SAFETY: the bench's SGEs name its own MR, read only by copies and alive past the post.
        if unsafe { b.write(k as u64, *local, *remote, SendFlags::SIGNALED) }.is_err() {
            break;
        }
        posted += 1;
    }
    posted
}

/// One extended poll of one CQE: `start_poll`, the `wr_id` and status, `end_poll` (the
/// measured function of the `ext` mode).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_poll_ext(cq: &mut Cq) -> Option<(u64, bool)> {
    let p = cq.start_poll()?;
    Some((p.wr_id(), p.is_ok()))
}

/// One extended poll of up to `out.len()` CQEs: `start_poll`, `next_poll` until empty or full,
/// each CQE's `wr_id` and status, one `end_poll` (the measured function of `ext-batch`).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_poll_ext_batch(cq: &mut Cq, out: &mut [(u64, bool)]) -> usize {
    let Some(mut p) = cq.start_poll() else {
        return 0;
    };
    let mut n = 0;
    for slot in out.iter_mut() {
        if n > 0 && !p.next_poll() {
            break;
        }
        *slot = (p.wr_id(), p.is_ok());
        n += 1;
    }
    n
}

const BATCH: usize = 64;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(32);
    let (f, mut a, b) = setup();
    let sge = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let wr = SendWr::new(7, SendOp::Write { remote }, &sge);
    let mut wcs = [decode(&zerocopy::FromZeros::new_zeroed()); 16];
    let (mut posts, mut polls) = (0usize, 0usize);
    let mode = std::env::args().nth(2).unwrap_or_default();
    let batch = mode == "batch";
    if mode == "ext-2qp" {
        let (mut qa2, _qb2) = second_pair(&a, &b);
        let local = sge[0];
        for _ in 0..rounds * BATCH / 2 {
            // One WRITE on each QP, then both completions: the device completes them in
            // posting order, so the CQEs alternate QPs from one pair to the next too.
            for qp in [&mut a.qp, &mut qa2] {
                posts += post_one_write(qp, local, remote);
            }
            settle(&f);
            polls += poll_each(&mut a.cq, 2, "start_poll", |cq| {
                bypass_measured_poll_ext(cq).is_some()
            });
            if a.cq.start_poll().is_some() {
                missing("an empty CQ after the pair");
            }
        }
        println!("posts {posts} polls {polls}");
        return;
    }
    if mode == "ext" || mode == "ext-batch" {
        let local = sge[0];
        let mut out = [(0u64, false); 16];
        let mut calls = 0usize;
        for _ in 0..rounds {
            let before = posts;
            if mode == "ext" {
                for _ in 0..BATCH {
                    posts += post_one_write(&mut a.qp, local, remote);
                }
            } else {
                posts += bypass_measured_post_write_batch(
                    &mut a.qp,
                    black_box(&local),
                    black_box(&remote),
                    black_box(BATCH),
                );
            }
            settle(&f);
            if mode == "ext" {
                // Exactly one CQE per signalled WRITE: every measured call returns one.
                polls += poll_each(&mut a.cq, posts - before, "start_poll", |cq| {
                    bypass_measured_poll_ext(cq).is_some()
                });
                if a.cq.start_poll().is_some() {
                    missing("an empty CQ after the round");
                }
            } else {
                loop {
                    calls += 1;
                    let n = bypass_measured_poll_ext_batch(&mut a.cq, &mut out);
                    if n == 0 {
                        break;
                    }
                    polls += n;
                }
            }
        }
        if mode == "ext" {
            println!("posts {posts} polls {polls}");
        } else {
            println!("posts {posts} cqes {polls} calls {calls} batches {rounds}");
        }
        return;
    }
    if batch {
        let mut calls = 0usize;
        for _ in 0..rounds {
            for _ in 0..BATCH {
                if bypass_measured_post(&mut a.qp, black_box(&wr)).is_ok() {
                    posts += 1;
                }
            }
            settle(&f);
            loop {
                calls += 1;
                let n = bypass_measured_poll_batch(&mut a.cq, &mut wcs);
                if n == 0 {
                    break;
                }
                polls += n;
            }
        }
        println!("posts {posts} cqes {polls} calls {calls}");
        return;
    }
    for _ in 0..rounds {
        let before = posts;
        for _ in 0..BATCH {
            if bypass_measured_post(&mut a.qp, black_box(&wr)).is_ok() {
                posts += 1;
            }
        }
        settle(&f);
        polls += poll_each(&mut a.cq, posts - before, "poll_one", |cq| {
            bypass_measured_poll(cq).is_some()
        });
        if a.cq.poll_one().is_some() {
            missing("an empty CQ after the round");
        }
    }
    println!("posts {posts} polls {polls}");
}

/// One signalled WRITE through the measured `post_write`: 1 if it was posted, else 0.
fn post_one_write(qp: &mut Qp, local: Sge, remote: RemoteAddr) -> usize {
    let r = bypass_measured_post_write(
        qp,
        black_box(7),
        black_box(local),
        black_box(remote),
        black_box(SendFlags::SIGNALED),
    );
    usize::from(r.is_ok())
}

/// Polls `n` CQEs from `cq` with `poll`, each of which must return one (else the run stops,
/// naming `what`); returns `n`.
fn poll_each(cq: &mut Cq, n: usize, what: &str, mut poll: impl FnMut(&mut Cq) -> bool) -> usize {
    for _ in 0..n {
        if !poll(cq) {
            missing(what);
        }
    }
    n
}

/// The measured polls must each return a CQE (and the CQ be empty after them): otherwise the
/// per-poll figure would mix in other work, so the run stops.
fn missing(what: &str) -> ! {
    eprintln!("callgrind_hot_path: {what}: not one CQE per signalled WRITE");
    std::process::exit(1)
}
