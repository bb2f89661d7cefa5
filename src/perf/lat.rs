//! `bypass perf write-lat`: RDMA WRITE ping-pong latency, as perftest's `ib_write_lat`.
//!
//! Owns: the ping-pong loop and its timestamps. Must not compute statistics (`stats`) or
//! build the rig (`pair`).
//!
//! The loop follows perftest `run_iter_lat_write` (src/perftest_resources.c): the client
//! stamps `tposted[i]`, WRITEs `size` bytes whose last byte is the iteration's tag into the
//! server's buffer, polls its send CQ until that WRITE's completion (`ibv_poll_cq(send_cq,
//! 1, &wc)` while it returns 0: one completion per post, signaled WRITEs), and spins on the
//! last byte of its own buffer until the server's WRITE with the same tag lands; the server
//! spins on its buffer, answers and polls for its own completion. Consecutive `tposted`
//! differences are round trips; the report halves them (`rtt_factor` 2). Here both ends run
//! in one thread (the client's WRITE, the server's spin and answer, the client's spin), so
//! the machine needs one core for it and one for the sim's engine thread.

use std::time::Instant;

use super::PerfError;
use super::pair::{Rig, RigSpec, WriteSpec};
use crate::stats::LatencyReport;

/// Round trips run before the measured ones (caches, first-touch of the rings).
pub const WARMUP: usize = 16;

/// The send queue depth the latency rig asks for. Only one WRITE is ever outstanding (each
/// one's completion is polled before the next is posted, as with perftest's `DEF_TX_LAT` of
/// 1); the queue is a few entries deeper than that so that the measured loop never meets a
/// full queue, whatever the driver rounds the size to.
const LAT_DEPTH: u32 = 4;

/// Runs `iters` round trips of `size`-byte WRITEs and returns the report (perftest
/// `print_report_lat`, WRITE: rtt_factor 2).
pub fn write_lat(seed: u64, size: u64, iters: u64) -> Result<LatencyReport, PerfError> {
    let posted = write_lat_post_times(seed, size, iters)?;
    Ok(LatencyReport::from_post_times(size, iters, &posted, 2)?)
}

/// The ping-pong itself: returns `iters` client post timestamps in nanoseconds.
pub fn write_lat_post_times(seed: u64, size: u64, iters: u64) -> Result<Vec<u64>, PerfError> {
    let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
    let n = usize::try_from(iters).map_err(|_| PerfError::TooLarge { size: iters })?;
    let mut rig = Rig::new(RigSpec {
        seed,
        size: bytes,
        depth: LAT_DEPTH,
    })?;
    let to_b = rig
        .b
        .target
        .remote()
        .slice(0, size)
        .ok_or(PerfError::TooLarge { size })?;
    let to_a = rig
        .a
        .target
        .remote()
        .slice(0, size)
        .ok_or(PerfError::TooLarge { size })?;
    let a_to_b = WriteSpec {
        remote: to_b,
        size: bytes,
        max_inline: rig.max_inline,
    };
    let b_to_a = WriteSpec {
        remote: to_a,
        ..a_to_b
    };
    let mut posted = vec![0u64; n];
    let t0 = Instant::now();

    for i in 0..(n + WARMUP) {
        // Tags run 1..=255 and never repeat back to back, so a stale byte never matches.
        let tag = (i % 255) as u8 + 1;
        let now = elapsed_ns(t0);
        if let Some(slot) = i.checked_sub(WARMUP).and_then(|k| posted.get_mut(k)) {
            *slot = now;
        }
        rig.a.post_write(&a_to_b, tag, true, i as u64)?;
        rig.a.wait_one()?;
        rig.b.spin_for(bytes, tag)?;
        rig.b.post_write(&b_to_a, tag, true, i as u64)?;
        rig.b.wait_one()?;
        rig.a.spin_for(bytes, tag)?;
    }
    Ok(posted)
}

fn elapsed_ns(t0: Instant) -> u64 {
    crate::baseline::elapsed_ns(t0)
}
