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
    c.bench_function("post_send rdma_write 1 sge (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(a.qp.post_send(black_box(&wr))).expect("post");
                }
                total += t.elapsed();
                settle(&f);
                while a.cq.poll_one().is_some() {}
                left -= n;
            }
            total
        })
    });
    c.bench_function("poll_one 1 cqe (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                for _ in 0..n {
                    a.qp.post_send(&wr).expect("post");
                }
                settle(&f);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(a.cq.poll_one()).expect("cqe");
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
    let local = sge[0];
    c.bench_function("post_write rdma_write 1 sge (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(a.qp.post_write(
                        black_box(7),
                        black_box(local),
                        black_box(remote),
                        black_box(SendFlags::SIGNALED),
                    ))
                    .expect("post");
                }
                total += t.elapsed();
                settle(&f);
                while a.cq.poll_one().is_some() {}
                left -= n;
            }
            total
        })
    });
    c.bench_function("start_poll 1 cqe (stepped sim)", |bn| {
        bn.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                for _ in 0..n {
                    a.qp.post_send(&wr).expect("post");
                }
                settle(&f);
                let t = Instant::now();
                for _ in 0..n {
                    let p = a.cq.start_poll().expect("cqe");
                    black_box((p.wr_id(), p.is_ok()));
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
}

/// The benchmark group (criterion's macros generate undocumented items).
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, bench);
}
criterion_main!(group::benches);
