//! A small binary for `scripts/callgrind.sh`: posts and polls in two `#[inline(never)]`
//! functions that callgrind's `--toggle-collect` can isolate, on the stepped sim (the device
//! runs between rounds, outside both functions).
//!
//! Usage: `callgrind_hot_path [rounds]`; prints how many posts and polls it made.

mod common;

use std::hint::black_box;

use bypass_driver::cq::Cq;
use bypass_driver::poll::WorkCompletion;
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
    let (mut posts, mut polls) = (0usize, 0usize);
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
