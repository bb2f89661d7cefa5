//! The memory barriers of the data path, named as rdma-core names them
//! (`util/udma_barrier.h`), each with the ordering it guarantees and why the driver needs it.
//!
//! Owns: [`udma_to_device_barrier`], [`udma_from_device_barrier`], [`mmio_wc_start`],
//! [`mmio_flush_writes`]. Must not: touch memory or registers itself; callers decide where the
//! barriers go (see `doorbell.rs`, `qp.rs` and `poll.rs` for the sequences).
//!
//! Mapping (rdma-core `util/udma_barrier.h`):
//!
//! | barrier | x86-64 | aarch64 | elsewhere |
//! |---|---|---|---|
//! | `udma_to_device_barrier` | compiler fence | `dmb oshst` | `fence(Release)` |
//! | `udma_from_device_barrier` | `lfence` | `dmb oshld` | `fence(Acquire)` |
//! | `mmio_wc_start` / `mmio_flush_writes` | `sfence` | `dsb st` | `fence(SeqCst)` |
//!
//! On targets without an explicit mapping the Rust fences are the closest portable
//! approximation (they order CPU-visible memory, which is what a simulated device in another
//! thread observes); a real NIC on such a target would need the architecture's own barrier.
//! Under Miri (`scripts/miri.sh`), which cannot execute `lfence`/`sfence` or inline `asm!`,
//! the portable fences stand in on every target, so Miri checks the same orderings the
//! simulated device relies on.

use core::sync::atomic::{Ordering, compiler_fence};

/// Orders the CPU's stores to DMA memory (WQEs, receive WQEs) before a later store that tells
/// the device to read them (the doorbell record).
///
/// rdma-core `udma_to_device_barrier`: on x86-64 stores to write-back memory are already seen
/// in program order by a coherent device (TSO), so only the compiler must be kept from
/// reordering; aarch64 needs `dmb oshst`.
#[inline(always)]
pub fn udma_to_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::SeqCst);
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshst` is a barrier instruction: it reads and writes no memory or registers
    // Rust knows about; it only orders this CPU's stores.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    core::sync::atomic::fence(Ordering::Release);
}

/// Orders the CPU's read of a CQE's ownership byte before its reads of the rest of the CQE,
/// so that no field is read from before the device finished writing the entry.
///
/// rdma-core `udma_from_device_barrier`, placed in `cq.c` right after `get_sw_cqe` said the
/// entry is software's: `lfence` on x86-64 (loads may otherwise be satisfied speculatively
/// ahead of the owner check), `dmb oshld` on aarch64.
#[inline(always)]
pub fn udma_from_device_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `_mm_lfence` needs SSE2, which every x86-64 CPU has (it is in the target's
    // baseline); the instruction only orders loads.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshld` is a barrier instruction: it touches no memory Rust knows about; it
    // only orders this CPU's loads.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    core::sync::atomic::fence(Ordering::Acquire);
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::SeqCst);
}

/// Starts a sequence of writes to write-combining MMIO (the UAR doorbell / BlueFlame
/// register): every earlier store (the doorbell record) is made globally visible first.
///
/// rdma-core `mmio_wc_start` (defined as `mmio_flush_writes`): `sfence` on x86-64, `dsb st` on
/// aarch64. `post_send_db` calls it after the doorbell record and before the doorbell.
#[inline(always)]
pub fn mmio_wc_start() {
    mmio_flush_writes();
}

/// Flushes the write-combining buffer: the doorbell / BlueFlame stores leave the CPU now and
/// in order with doorbells other CPUs ring later.
///
/// rdma-core `mmio_flush_writes`: `sfence` on x86-64, `dsb st` on aarch64. `post_send_db` calls
/// it after the doorbell ("must happen inside the lock so that doorbells from two CPUs stay
/// in order"; here a QP's doorbell register is its own, see `uar.rs`).
#[inline(always)]
pub fn mmio_flush_writes() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `_mm_sfence` needs SSE, which every x86-64 CPU has (it is in the target's
    // baseline); the instruction only orders stores.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dsb st` is a barrier instruction: it touches no memory Rust knows about; it
    // only waits for this CPU's stores to complete.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    core::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barriers_run_on_this_target() {
        udma_to_device_barrier();
        udma_from_device_barrier();
        mmio_wc_start();
        mmio_flush_writes();
    }
}
