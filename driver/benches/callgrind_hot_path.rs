//! A small binary for `scripts/callgrind.sh`: posts and polls in two `#[inline(never)]`
//! functions that callgrind's `--toggle-collect` can isolate, on the stepped sim (the device
//! runs between rounds, outside both functions).
//!
//! Usage: `callgrind_hot_path [rounds] [batch]`; prints how many posts and polls it made. With
//! `batch`, completions are polled 16 at a time through `bypass_measured_poll_batch`
//! (`Cq::poll`, one consumer-index update per call, as `ibv_poll_cq` with a WC array) instead
//! of one at a time.

mod common;

use std::hint::black_box;

use bypass_driver::cq::Cq;
use bypass_driver::poll::{WorkCompletion, decode};
use bypass_driver::post::{PostError, RemoteAddr, SendOp, SendWr};
use bypass_driver::qp::Qp;
use common::{settle, setup};

/// One `post_send` (the measured function).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn bypass_measured_post(qp: &mut Qp, wr: &SendWr<'_>) -> Result<(), PostError> {
    qp.post_send(wr)
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
    let batch = std::env::args().nth(2).is_some_and(|a| a == "batch");
    let mut wcs = [decode(&zerocopy::FromZeros::new_zeroed()); 16];
    let (mut posts, mut polls) = (0usize, 0usize);
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
        for _ in 0..BATCH {
            if bypass_measured_post(&mut a.qp, black_box(&wr)).is_ok() {
                posts += 1;
            }
        }
        settle(&f);
        while bypass_measured_poll(&mut a.cq).is_some() {
            polls += 1;
        }
    }
    // The last call of every round found the CQ empty: count those too, separately.
    println!("posts {posts} polls {polls} empty_polls {rounds}");
}
