//! Criterion benchmarks of the data path on the stepped sim: `post_send` of a 1-SGE RDMA
//! WRITE and `poll_one` of one CQE, and the specialised paths beside them (rdma-core's
//! extended API): `post_write` of the same WRITE, and `start_poll` reading one CQE's `wr_id`
//! and status. The simulated device runs outside the measured sections
//! (between batches), so the numbers are the driver's own cost plus the backend's doorbell
//! call.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use bypass_driver::post::{RemoteAddr, SendFlags, SendOp, SendWr};
use bypass_sim::fabric::SimFabric;
use common::{settle, setup};
use criterion::{Criterion, criterion_group, criterion_main};

const BATCH: u64 = 64;

fn bench(c: &mut Criterion) {
    let (f, mut a, b) = setup();
    let sge = [a.mr.sge(0, 64)];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let wr = SendWr::new(7, SendOp::Write { remote }, &sge);
    let local = sge[0];
    c.bench_function("post_send rdma_write 1 sge (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            batched(iters, |n| {
                let t = Instant::now();
                for _ in 0..n {
                    // SAFETY: the bench's SGEs name its own MR, read only by copies and alive past the post.
                    black_box(unsafe { a.qp.post_send(black_box(&wr)) }).expect("post");
                }
                let d = t.elapsed();
                settle(&f);
                while a.cq.poll_one().is_some() {}
                d
            })
        })
    });
    c.bench_function("poll_one 1 cqe (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            batched(iters, |n| {
                fill(&mut a.qp, &wr, n, &f);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(a.cq.poll_one()).expect("cqe");
                }
                t.elapsed()
            })
        })
    });
    c.bench_function("post_write rdma_write 1 sge (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            batched(iters, |n| {
                let t = Instant::now();
                for _ in 0..n {
                    // SAFETY: the bench's SGEs name its own MR, read only by copies and alive past the post.
                    black_box(unsafe {
                        a.qp.post_write(
                            black_box(7),
                            black_box(local),
                            black_box(remote),
                            black_box(SendFlags::SIGNALED),
                        )
                    })
                    .expect("post");
                }
                let d = t.elapsed();
                settle(&f);
                while a.cq.poll_one().is_some() {}
                d
            })
        })
    });
    c.bench_function("start_poll 1 cqe (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            batched(iters, |n| {
                fill(&mut a.qp, &wr, n, &f);
                let t = Instant::now();
                for _ in 0..n {
                    let p = a.cq.start_poll().expect("cqe");
                    black_box((p.wr_id(), p.is_ok()));
                }
                t.elapsed()
            })
        })
    });
}

/// Runs `iters` operations in batches of at most [`BATCH`] (the send queue's depth):
/// `batch(n)` does `n` of them and returns the time of its measured part only.
fn batched(iters: u64, mut batch: impl FnMut(u64) -> Duration) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        total += batch(n);
        left -= n;
    }
    total
}

/// Posts `n` WRITEs and lets the device complete them: `n` CQEs to poll.
fn fill(qp: &mut bypass_driver::qp::Qp, wr: &SendWr<'_>, n: u64, f: &SimFabric) {
    for _ in 0..n {
        // SAFETY: the bench's SGEs name its own MR, read only by copies and alive past the post.
        unsafe { qp.post_send(wr) }.expect("post");
    }
    settle(f);
}

/// The benchmark group (criterion's macros generate undocumented items).
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, bench);
}
criterion_main!(group::benches);
