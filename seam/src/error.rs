//! What a backend's DMA and interrupt calls can refuse.
//!
//! Owns: [`BackendError`]. Must not: decide policy; the driver wraps it
//! (`DriverError::Backend`) and callers decide. Every Display text names the operation, the
//! cause and the fix.

/// Everything a [`crate::DmaMap`] or [`crate::Interrupts`] call can refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Pinning would exceed `RLIMIT_MEMLOCK`.
    #[error(
        "pinning {needed} bytes of DMA memory would exceed the locked-memory limit: {locked} bytes are locked already and RLIMIT_MEMLOCK is {limit} bytes. Raise it: `ulimit -l unlimited` (or a size in KiB) in the shell, `LimitMEMLOCK=infinity` in the systemd unit, or a `memlock` line in /etc/security/limits.conf; or run with CAP_IPC_LOCK"
    )]
    MemlockLimit {
        /// Bytes this allocation pins.
        needed: u64,
        /// Bytes the process has locked already (`VmLck`).
        locked: u64,
        /// The soft limit in bytes.
        limit: u64,
    },
    /// The backend refused to map or unmap DMA memory.
    #[error("{op} of IOVA {iova:#x} ({len:#x} bytes) failed: {reason}")]
    DmaMap {
        /// `map` or `unmap`.
        op: &'static str,
        /// IOVA.
        iova: u64,
        /// Length.
        len: usize,
        /// The backend's explanation, with its fix.
        reason: String,
    },
    /// The backend cannot map (or unmap) a dma-buf.
    #[error(
        "mapping {len:#x} bytes of a dma-buf from {exporter} at IOVA {iova:#x} failed: {reason}"
    )]
    DmaBuf {
        /// IOVA.
        iova: u64,
        /// Length.
        len: usize,
        /// The exporter's name (fdinfo `exp_name`).
        exporter: String,
        /// What is missing, and the fix.
        reason: String,
    },
    /// An interrupt vector that does not exist.
    #[error(
        "MSI-X vector {vector} does not exist (the device has {available}): use a vector below {available}"
    )]
    NoVector {
        /// Vector asked for.
        vector: u16,
        /// Vectors available.
        available: u16,
    },
    /// Setting up or waiting on an interrupt eventfd failed.
    #[error("waiting for MSI-X vector {vector} failed: {source}")]
    Irq {
        /// Vector.
        vector: u16,
        /// The errno.
        source: nix::Error,
    },
}
