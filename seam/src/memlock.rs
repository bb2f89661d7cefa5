//! How much memory this process may pin for DMA, checked before anything is pinned.
//!
//! Owns: [`MemlockState`]. Must not: pin anything itself. Both ways memory gets pinned charge
//! `RLIMIT_MEMLOCK`: `mlock(2)` of a region the driver allocates, and VFIO type1's pin on
//! `VFIO_IOMMU_MAP_DMA` (`vfio_iommu_type1.c` `vfio_pin_pages_remote` → `vfio_lock_acct`).
//! Checking first turns the kernel's bare `ENOMEM`/`EAGAIN` into an error with the numbers and
//! the fix ([`BackendError::MemlockLimit`]).

use nix::sys::resource::{Resource, getrlimit};

use crate::BackendError;

/// How much the process may lock, and how much it has locked (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockState {
    /// `RLIMIT_MEMLOCK` soft limit in bytes; `None` = unlimited.
    pub limit: Option<u64>,
    /// `VmLck` from `/proc/self/status`, bytes.
    pub locked: u64,
    /// The process has `CAP_IPC_LOCK` in its effective set (the limit does not apply; mlock(2)).
    pub cap_ipc_lock: bool,
}

impl MemlockState {
    /// The state of this process now.
    pub fn current() -> Self {
        let limit = match getrlimit(Resource::RLIMIT_MEMLOCK) {
            Ok((soft, _)) if soft == nix::libc::RLIM_INFINITY => None,
            Ok((soft, _)) => Some(soft),
            Err(_) => None,
        };
        // The calling thread's status: capabilities are per thread (mlock checks the
        // caller's), VmLck is per process and the same in every thread's file.
        let status = std::fs::read_to_string("/proc/thread-self/status")
            .or_else(|_| std::fs::read_to_string("/proc/self/status"))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let locked = field("VmLck:")
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        // CAP_IPC_LOCK is capability 14 (linux/capability.h).
        let cap_ipc_lock = field("CapEff:")
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .is_some_and(|caps| caps & (1 << 14) != 0);
        Self {
            limit,
            locked,
            cap_ipc_lock,
        }
    }

    /// Checks that `needed` more bytes may be locked.
    ///
    /// Errors: [`BackendError::MemlockLimit`], with the numbers and how to raise the limit.
    pub fn check(&self, needed: u64) -> Result<(), BackendError> {
        match self.limit {
            Some(limit) if !self.cap_ipc_lock && self.locked.saturating_add(needed) > limit => {
                Err(BackendError::MemlockLimit {
                    needed,
                    locked: self.locked,
                    limit,
                })
            }
            _ => Ok(()),
        }
    }
}
