//! The C boundary: panics stopped at it, `errno`, and the errno of each driver error.
//!
//! Owns: [`guard`] (every exported function runs its body inside it, so a panic becomes the
//! failure value libibverbs documents for that function instead of an abort across
//! `extern "C"`), [`set_errno`], and [`errno_of`], the one mapping from a typed
//! [`DriverError`] to the errno a C caller sees.
//! Must not: print or log on the success path; decide what a function returns on failure
//! (each caller passes its own: NULL, -1, or an errno value).
//!
//! Sources: libibverbs' convention (`man 3 ibv_*`: pointer-returning verbs return NULL and set
//! errno, int-returning ones return 0 or an errno value; `ibv_post_*`/`ibv_poll_cq` return
//! the errno directly); the kernel's `mlx5_cmd_check` status-to-errno table
//! (`drivers/net/ethernet/mellanox/mlx5/core/cmd.c`, `cmd_status_to_err`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use bypass_driver::DriverError;
use bypass_driver::hw::syndrome::CmdStatus;

/// Runs `f`; a panic inside it is reported once on stderr and turned into `on_panic`, with
/// errno set to `EIO` (the program cannot be given the panic; it can be told the call failed).
#[inline]
pub(crate) fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            eprintln!("bypass libibverbs: internal error, the call fails with EIO: {what}");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Sets the calling thread's `errno`.
#[inline]
pub(crate) fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Reads the calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    // SAFETY: as in `set_errno`.
    unsafe { *libc::__errno_location() }
}

/// The errno libibverbs would report for `e`, with the error logged when
/// `BYPASS_VERBS_DEBUG` is set (a C caller sees only the number; the typed error says why).
pub(crate) fn errno_of(e: &DriverError) -> i32 {
    crate::log::failure(e);
    match e {
        DriverError::Mlock { .. }
        | DriverError::Mmap { .. }
        | DriverError::IovaExhausted { .. } => libc::ENOMEM,
        // Every object of a kind in use, or the firmware-page budget spent: the kernel's
        // `cmd_status_to_err` gives LIM_ERR ENOMEM, and `ibv_create_qp(3)` documents ENOMEM
        // for "not enough resources".
        DriverError::ResourceLimit { .. } | DriverError::FirmwarePagesLimit { .. } => libc::ENOMEM,
        DriverError::CallerMemory { source, .. } => *source as i32,
        DriverError::Unsupported { .. } => libc::EOPNOTSUPP,
        DriverError::CmdTimeout { .. } | DriverError::CmdNotCompleted { .. } => libc::ETIMEDOUT,
        DriverError::CmdFailed { status, .. } => cmd_status_errno(*status),
        DriverError::CqEventsUnacked { .. } | DriverError::StillMapped { .. } => libc::EBUSY,
        DriverError::Backend(bypass_seam::BackendError::MemlockLimit { .. }) => libc::ENOMEM,
        // An exporter the backend cannot map (rdma-core: the provider lacks the support).
        DriverError::Backend(bypass_seam::BackendError::DmaBuf { .. }) => libc::EOPNOTSUPP,
        DriverError::Backend(_) | DriverError::Pages { .. } | DriverError::FirmwareInit { .. } => {
            libc::EIO
        }
        _ => libc::EINVAL,
    }
}

/// The kernel's `cmd_status_to_err` for a firmware command status.
fn cmd_status_errno(s: CmdStatus) -> i32 {
    match s {
        CmdStatus::BAD_SYS_STATE_ERR | CmdStatus::BAD_INP_LEN_ERR | CmdStatus::BAD_OUTP_LEN_ERR => {
            libc::EIO
        }
        CmdStatus::RES_BUSY => libc::EBUSY,
        CmdStatus::LIM_ERR => libc::ENOMEM,
        CmdStatus::NO_RES_ERR => libc::EAGAIN,
        _ => libc::EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_driver::hw::cmd::Opcode;
    use bypass_driver::limits::Resource;

    #[test]
    fn resource_limits_are_enomem() {
        let e = DriverError::ResourceLimit {
            resource: Resource::Qp,
            op: Opcode::CREATE_QP,
            limit: Some(4),
            cap: Resource::Qp.cap(),
            knob: Resource::Qp.knob(),
            syndrome: 0,
        };
        assert_eq!(errno_of(&e), libc::ENOMEM);
        let e = DriverError::FirmwarePagesLimit {
            asked: 1,
            held: 2,
            limit: 2,
        };
        assert_eq!(errno_of(&e), libc::ENOMEM);
    }
}
