//! The library functions with no device behind them: rate conversions and fork ranges.
//!
//! Owns: `ibv_rate_to_mult` / `mult_to_ibv_rate` / `ibv_rate_to_mbps` / `mbps_to_ibv_rate`
//! (one table, read both ways) and `ibv_dontfork_range` / `ibv_dofork_range`.
//! Must not: touch devices.
//!
//! Sources: rdma-core `libibverbs/verbs.c` (the rate tables), `libibverbs/memory.c`
//! (`ibv_madvise_range`: page-rounded `madvise` of the range).

use std::ffi::{c_int, c_void};

use crate::abi;

/// (rate, multiple of 2.5 Gb/s or -1, Mb/s).
const RATES: &[(u32, c_int, c_int)] = &[
    (abi::IBV_RATE_2_5_GBPS, 1, 2500),
    (abi::IBV_RATE_5_GBPS, 2, 5000),
    (abi::IBV_RATE_10_GBPS, 4, 10000),
    (abi::IBV_RATE_20_GBPS, 8, 20000),
    (abi::IBV_RATE_30_GBPS, 12, 30000),
    (abi::IBV_RATE_40_GBPS, 16, 40000),
    (abi::IBV_RATE_60_GBPS, 24, 60000),
    (abi::IBV_RATE_80_GBPS, 32, 80000),
    (abi::IBV_RATE_120_GBPS, 48, 120000),
    (abi::IBV_RATE_14_GBPS, -1, 14062),
    (abi::IBV_RATE_56_GBPS, -1, 56250),
    (abi::IBV_RATE_112_GBPS, -1, 112500),
    (abi::IBV_RATE_168_GBPS, -1, 168750),
    (abi::IBV_RATE_25_GBPS, -1, 25781),
    (abi::IBV_RATE_100_GBPS, -1, 103125),
    (abi::IBV_RATE_200_GBPS, -1, 206250),
    (abi::IBV_RATE_300_GBPS, -1, 309375),
    (abi::IBV_RATE_28_GBPS, 11, 28125),
    (abi::IBV_RATE_50_GBPS, 20, 53125),
    (abi::IBV_RATE_400_GBPS, 160, 425000),
    (abi::IBV_RATE_600_GBPS, 240, 637500),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, or -1.
#[unsafe(export_name = "__bypass_ibv_rate_to_mult")]
pub extern "C" fn ibv_rate_to_mult(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`: the rate of a multiple of 2.5 Gb/s, or `IBV_RATE_MAX`.
#[unsafe(export_name = "__bypass_mult_to_ibv_rate")]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> u32 {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(abi::IBV_RATE_MAX, |r| r.0)
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, or -1.
#[unsafe(export_name = "__bypass_ibv_rate_to_mbps")]
pub extern "C" fn ibv_rate_to_mbps(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`: the rate of a Mb/s figure, or `IBV_RATE_MAX`.
#[unsafe(export_name = "__bypass_mbps_to_ibv_rate")]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> u32 {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(abi::IBV_RATE_MAX, |r| r.0)
}

fn madvise_range(base: *mut c_void, size: usize, advice: c_int) -> c_int {
    if size == 0 {
        return 0;
    }
    let page = 4096usize;
    let start = (base as usize) & !(page - 1);
    let Some(end) = (base as usize)
        .checked_add(size)
        .and_then(|e| e.checked_add(page - 1))
    else {
        return libc::EINVAL;
    };
    let end = end & !(page - 1);
    // SAFETY: `madvise` with DONTFORK/DOFORK changes only how the range is inherited; a
    // range that is not mapped fails with ENOMEM, nothing else happens.
    let r = unsafe { libc::madvise(start as *mut c_void, end - start, advice) };
    if r == 0 { 0 } else { crate::ffi::errno() }
}

/// `ibv_dontfork_range`: `MADV_DONTFORK` on the pages of the range. 0 or an errno.
///
/// # Safety
/// Any range: `madvise` checks it.
#[unsafe(export_name = "__bypass_ibv_dontfork_range")]
pub unsafe extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    madvise_range(base, size, libc::MADV_DONTFORK)
}

/// `ibv_dofork_range`: `MADV_DOFORK` on the pages of the range. 0 or an errno.
///
/// # Safety
/// Any range: `madvise` checks it.
#[unsafe(export_name = "__bypass_ibv_dofork_range")]
pub unsafe extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    madvise_range(base, size, libc::MADV_DOFORK)
}
