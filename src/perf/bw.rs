//! `bypass perf write-bw`: unidirectional RDMA WRITE bandwidth, as perftest's `ib_write_bw`.
//!
//! Owns: the streaming loop and its timestamps. Must not compute statistics (`stats`) or
//! build the rig (`pair`).
//!
//! The loop follows perftest `run_iter_bw` (src/perftest_resources.c): keep up to `tx_depth`
//! WRITEs outstanding, signal every `cq_mod`-th (and the last), stamp `tposted[i]` at each
//! post and `tcompleted[j]` when the signalled completion covering `j` is polled. Every
//! WRITE reads the same local buffer and targets the same remote buffer, as perftest does
//! (a [`bypass_verbs::SharedLease`] posted by every WRITE; inline below the inline size).

use std::time::Instant;

use super::PerfError;
use super::pair::{Rig, RigSpec, WriteSpec};
use crate::baseline::elapsed_ns;
use crate::stats::{BwReport, BwUnits};

/// Bytes of source buffers the rig may pin per end (depth × size is capped by it, so that an
/// 8 MiB sweep fits in memory).
const MAX_INFLIGHT_BYTES: u64 = 64 << 20;

/// The depth and moderation a run actually uses for `size`: `tx_depth` capped so that the
/// source buffers fit [`MAX_INFLIGHT_BYTES`], and `cq_mod` no larger than the depth.
pub fn effective_depth(size: u64, tx_depth: u32, cq_mod: u32) -> (u32, u32) {
    let fit = (MAX_INFLIGHT_BYTES / size.max(1)).clamp(2, u64::from(u32::MAX)) as u32;
    let depth = tx_depth.clamp(1, fit.max(1));
    (depth, cq_mod.clamp(1, depth))
}

/// Post and completion timestamps (ns) of one run.
pub struct BwTimes {
    /// `tposted[i]`.
    pub posted: Vec<u64>,
    /// `tcompleted[j]` (meaningful at signalled indices).
    pub completed: Vec<u64>,
    /// The moderation used.
    pub cq_mod: u32,
}

/// Runs `iters` WRITEs of `size` bytes and returns perftest's bandwidth report.
pub fn write_bw(
    seed: u64,
    size: u64,
    iters: u64,
    tx_depth: u32,
    cq_mod: u32,
    units: BwUnits,
) -> Result<BwReport, PerfError> {
    let t = write_bw_times(seed, size, iters, tx_depth, cq_mod)?;
    Ok(BwReport::from_times(
        size,
        &t.posted,
        &t.completed,
        t.cq_mod as usize,
        1,
        units,
    )?)
}

/// The streaming loop: returns the timestamps.
pub fn write_bw_times(
    seed: u64,
    size: u64,
    iters: u64,
    tx_depth: u32,
    cq_mod: u32,
) -> Result<BwTimes, PerfError> {
    let bytes = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
    let n = usize::try_from(iters).map_err(|_| PerfError::TooLarge { size: iters })?;
    let (depth, cq_mod) = effective_depth(size, tx_depth, cq_mod);
    let mut rig = Rig::new(RigSpec {
        seed,
        size: bytes,
        depth,
    })?;
    let remote = rig
        .b
        .target
        .remote()
        .slice(0, size)
        .ok_or(PerfError::TooLarge { size })?;
    let w = WriteSpec {
        remote,
        size: bytes,
        max_inline: rig.max_inline,
    };
    // One source for every WRITE too large to inline, frozen so all may read it at once.
    let src = if bytes > w.max_inline {
        let mut l = rig.a.pool.lease(bytes)?;
        l.as_mut_slice().fill(0x5a);
        Some(l.freeze())
    } else {
        None
    };
    let mut posted = vec![0u64; n];
    let mut completed = vec![0u64; n];
    let (mut scnt, mut ccnt) = (0usize, 0usize);
    let t0 = Instant::now();
    let a = &mut rig.a;

    while ccnt < n {
        while scnt < n && scnt - ccnt < depth as usize {
            let signaled = (scnt + 1) % cq_mod as usize == 0 || scnt + 1 == n;
            if let Some(p) = posted.get_mut(scnt) {
                *p = elapsed_ns(t0);
            }
            match &src {
                Some(src) => a.post_write_shared(&w, src, signaled, scnt as u64)?,
                None => a.post_write(&w, (scnt % 255) as u8 + 1, signaled, scnt as u64)?,
            }
            scnt += 1;
        }
        let (_, last) = a.wait_some()?;
        let now = elapsed_ns(t0);
        if let Some(last) = last {
            // A signalled completion of WR `last` covers every WR up to it.
            let upto = (last as usize + 1).min(n);
            for c in completed.iter_mut().take(upto).skip(ccnt) {
                *c = now;
            }
            ccnt = ccnt.max(upto);
        }
    }
    Ok(BwTimes {
        posted,
        completed,
        cq_mod,
    })
}
