//! The one error type of the driver: what failed, why, and what to do about it.
//!
//! Owns: [`DriverError`] and [`Result`]. Must not: decide policy (retry, fall back); callers
//! do. Every Display text names the operation, the cause and the fix, so a log line alone
//! tells the user what to do.

use std::time::Duration;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::entry::DeliveryStatus;
use bypass_hw::syndrome::CmdStatus;

/// `Result` with [`DriverError`].
pub type Result<T, E = DriverError> = std::result::Result<T, E>;

/// Everything that can go wrong in the driver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// `mlock` failed.
    #[error(
        "mlock of {len} bytes of DMA memory failed: {source}. Raise the locked-memory limit (`ulimit -l`, `LimitMEMLOCK=` in systemd, /etc/security/limits.conf) or free pinned memory"
    )]
    Mlock {
        /// Bytes to pin.
        len: usize,
        /// The errno.
        source: nix::Error,
    },
    /// Anonymous memory could not be mapped.
    #[error(
        "mapping {len} bytes of anonymous memory for DMA failed: {source}; the host is out of memory or address space"
    )]
    Mmap {
        /// Bytes asked for.
        len: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// A zero-length or absurdly large DMA allocation.
    #[error("a DMA buffer of {len} bytes cannot be allocated: ask for 1 byte to 2^46 bytes")]
    BadDmaLength {
        /// Bytes asked for.
        len: usize,
    },
    /// A key's page list could not become an MTT.
    #[error(transparent)]
    Mtt(#[from] crate::mtt_pages::MttError),
    /// No free IOVA range is large enough.
    #[error(
        "no free IOVA range of {len:#x} bytes aligned to {align:#x} is left in the IOMMU apertures: free DMA buffers, or use fewer/smaller ones"
    )]
    IovaExhausted {
        /// Bytes asked for.
        len: u64,
        /// Alignment asked for.
        align: u64,
    },
    /// An offset/length outside a DMA buffer.
    #[error(
        "access of {len} bytes at offset {off:#x} is outside the {buf_len}-byte DMA buffer: check ring and buffer arithmetic"
    )]
    DmaOutOfRange {
        /// Offset.
        off: usize,
        /// Length.
        len: usize,
        /// The buffer's length.
        buf_len: usize,
    },
    /// The command interface revision is not the one this driver speaks.
    #[error(
        "the device's command interface revision is {found}, but bypass speaks revision 5 (cmdif_rev in the init segment): the firmware is too old or too new, or BAR0 is not an mlx5 init segment"
    )]
    CmdifRev {
        /// Revision found.
        found: u32,
    },
    /// The command queue geometry in the init segment is invalid.
    #[error(
        "the init segment reports a command queue of 2^{log_size} entries of 2^{log_stride} bytes, which does not fit one 4 KiB page with at most 32 slots: the device is not a supported mlx5 function"
    )]
    CmdqGeometry {
        /// log2 of the slot count.
        log_size: u8,
        /// log2 of the entry stride.
        log_stride: u8,
    },
    /// The firmware did not finish initializing.
    #[error(
        "the firmware is still initializing after {waited:?} (init segment `initializing` bit 31): the device may be resetting or dead; reset the function (`echo 1 > /sys/bus/pci/devices/<bdf>/reset`) and retry"
    )]
    FirmwareInit {
        /// How long we waited.
        waited: Duration,
    },
    /// A command input longer than the mailbox chain can carry.
    #[error(
        "{op}: the command message is {len} bytes, more than the {max} bytes a command can carry: split the request"
    )]
    CmdTooLong {
        /// Opcode.
        op: Opcode,
        /// Length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A command input shorter than its 16-byte header.
    #[error(
        "a command input must hold at least the 16-byte mbox_in header (opcode, op_mod); got {len} bytes"
    )]
    CmdTooShort {
        /// Length given.
        len: usize,
    },
    /// The device did not complete a command in time.
    #[error(
        "{op} (op_mod {op_mod:#x}) did not complete within {waited:?}: the firmware is hung or the device is gone; check the health buffer and reset the function"
    )]
    CmdTimeout {
        /// Opcode.
        op: Opcode,
        /// Opcode modifier.
        op_mod: u16,
        /// How long we waited.
        waited: Duration,
    },
    /// A stepped device went idle with the command still owned by the device.
    #[error(
        "{op} (op_mod {op_mod:#x}) was never completed: the simulated device is idle and still owns the command entry (was the doorbell refused? see the backend's MMIO error count)"
    )]
    CmdNotCompleted {
        /// Opcode.
        op: Opcode,
        /// Opcode modifier.
        op_mod: u16,
    },
    /// The device could not deliver the command to the firmware.
    #[error("{op} (op_mod {op_mod:#x}) was not delivered: {status}")]
    CmdDelivery {
        /// Opcode.
        op: Opcode,
        /// Opcode modifier.
        op_mod: u16,
        /// Delivery status (its Display says cause and fix).
        status: DeliveryStatus,
    },
    /// The firmware ran the command and it failed.
    #[error("{op} (op_mod {op_mod:#x}) failed with status {status}; syndrome {syndrome:#010x}{}", syndrome_name.map(|n| format!(" ({n})")).unwrap_or_default())]
    CmdFailed {
        /// Opcode.
        op: Opcode,
        /// Opcode modifier.
        op_mod: u16,
        /// Status (its Display gives name, cause and fix).
        status: CmdStatus,
        /// Syndrome.
        syndrome: u32,
        /// The syndrome's name, where the backend knows it.
        syndrome_name: Option<&'static str>,
    },
    /// A command's output could not be parsed (too short for its layout).
    #[error("{op}: the output does not hold the expected layout: {source}")]
    BadOutput {
        /// Opcode.
        op: Opcode,
        /// The view error.
        source: bypass_hw::Error,
    },
    /// Building a command input failed (a value too wide for its field).
    #[error(
        "building the {what} input failed: {source}: a caller passed a value outside the field's range"
    )]
    BuildInput {
        /// The command being built.
        what: &'static str,
        /// The view error.
        source: bypass_hw::Error,
    },
    /// The device lacks something the driver needs.
    #[error("the device does not support {what}: {fix}")]
    Unsupported {
        /// What is missing.
        what: &'static str,
        /// What to do.
        fix: &'static str,
    },
    /// A QP cap beyond what a QP of its type holds on this device; nothing was allocated.
    #[error(
        "create QP ({qp_type}): {cap} {asked} is more than this device holds for {qp_type} QPs: ask for at most {max}"
    )]
    QpCapTooLarge {
        /// RC, UC or UD.
        qp_type: &'static str,
        /// The `QpCaps` field (`max_send_wr`, `max_send_sge`, `max_inline_data`, ...).
        cap: &'static str,
        /// What was asked.
        asked: u32,
        /// The largest value accepted (with the other caps as given).
        max: u64,
    },
    /// A CQ larger than the device's `max_cqe` (`2^log_max_cq_sz`); nothing was allocated.
    #[error(
        "create CQ: {asked} CQEs asked, but this device holds at most {max} per CQ (max_cqe, 2^log_max_cq_sz): ask for at most {max}"
    )]
    CqTooLarge {
        /// The CQEs asked for.
        asked: u32,
        /// The device's `max_cqe`.
        max: u32,
    },
    /// The device has no more objects of a kind: the firmware refused the create command
    /// with an exhaustion status (`limits.rs`). Nothing was created; freeing one makes room.
    #[error(
        "{op}: every {resource} of this device is in use ({cap}{}; firmware syndrome {syndrome:#010x}): {knob}",
        limit.map(|l| format!(" = {l}")).unwrap_or_default()
    )]
    ResourceLimit {
        /// What ran out.
        resource: crate::limits::Resource,
        /// The create command the firmware refused.
        op: Opcode,
        /// The most objects the capabilities allow, where they say.
        limit: Option<u64>,
        /// The capability that bounds the count (`log_max_qp`, ...).
        cap: &'static str,
        /// What raises the limit or makes room.
        knob: &'static str,
        /// The firmware's syndrome.
        syndrome: u32,
    },
    /// The firmware asked for more pages than the driver's budget lets it lend.
    #[error(
        "the firmware asked for {asked} more pages but {held} are lent already and HcaConfig::max_firmware_pages is {limit}: {}",
        crate::limits::Resource::FirmwarePages.knob()
    )]
    FirmwarePagesLimit {
        /// Pages asked for.
        asked: u64,
        /// Pages the firmware holds.
        held: u64,
        /// The budget (`HcaConfig::max_firmware_pages`).
        limit: u64,
    },
    /// The firmware asked for pages and the driver could not give them.
    #[error("giving {pages} pages to the firmware failed: {reason}")]
    Pages {
        /// Pages involved.
        pages: i64,
        /// Why.
        reason: String,
    },
    /// The device refused a DMA mapping or an interrupt wait, or pinning would pass
    /// `RLIMIT_MEMLOCK` (the seam's error; its text has the cause and the fix).
    #[error(transparent)]
    Backend(#[from] bypass_seam::BackendError),
    /// The CQ poller refused the ring the driver made for it (a driver bug).
    #[error("the CQ poller cannot read this CQ's ring: {0}. This is a driver bug: report it")]
    CqGeometry(#[from] crate::poll::CqGeometryError),
    /// A registration whose IOVA and address differ in their offset within a page.
    #[error(
        "memory at {addr:#x} cannot be registered at IOVA {iova:#x}: the two must have the same offset in a 4 KiB page (the MTT maps whole pages; `mlx5_vfio_reg_mr` and the kernel's `ib_umem_find_best_pgsz` refuse it too): choose an IOVA with the low 12 bits of the address"
    )]
    IovaOffsetMismatch {
        /// Host address of the first byte.
        addr: u64,
        /// The IOVA asked for.
        iova: u64,
    },
    /// The IOVA range of a registration wraps around the address space.
    #[error(
        "a registration of {len} bytes at IOVA {iova:#x} wraps around the 64-bit address space: choose a lower IOVA"
    )]
    IovaWraps {
        /// The IOVA asked for.
        iova: u64,
        /// Bytes.
        len: usize,
    },
    /// Application memory could not be prepared for DMA (`madvise`, `mlock` on its pages).
    #[error(
        "{op} of the pages at {addr:#x} ({len:#x} bytes) failed: {source}{}",
        if *source == nix::errno::Errno::ENOMEM { ": part of the range is not mapped in this process (register only memory it owns), or mlock hit the locked-memory limit" } else { "" }
    )]
    CallerMemory {
        /// `madvise(MADV_DONTFORK)` or `mlock`.
        op: &'static str,
        /// First page.
        addr: u64,
        /// Bytes (whole pages).
        len: u64,
        /// The errno.
        source: nix::Error,
    },
    /// An fd given as a dma-buf that is not one.
    #[error("{reason}")]
    NotADmaBuf {
        /// What `/proc/self/fdinfo` said, and the fix (`DmaBufFile::from_fd`'s text).
        reason: String,
    },
    /// A dma-buf registration asked for access rights `ibv_reg_dmabuf_mr` does not grant.
    #[error(
        "a dma-buf cannot be registered with access bits {bits:#x}: only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ and REMOTE_ATOMIC are allowed (and RELAXED_ORDERING, a hint; man 3 ibv_reg_dmabuf_mr): drop the others (memory windows, zero-based or on-demand MRs are not offered for dma-bufs)"
    )]
    DmaBufAccess {
        /// The access bits asked for.
        bits: u32,
    },
    /// A dma-buf registration of no bytes.
    #[error(
        "a dma-buf registration of 0 bytes at offset {offset:#x} is refused (EINVAL): register at least one byte"
    )]
    DmaBufEmpty {
        /// The offset asked for.
        offset: u64,
    },
    /// A dma-buf registration that reaches past the end of the buffer.
    #[error(
        "registering {len:#x} bytes at offset {offset:#x} of a {size:#x}-byte dma-buf from {exporter} reaches past its end (EINVAL): offset + length must be at most the dma-buf's size"
    )]
    DmaBufOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: usize,
        /// The dma-buf's size.
        size: u64,
        /// The exporter's name.
        exporter: String,
    },
    /// A dma-buf registration whose IOVA and offset differ in their offset within a page.
    #[error(
        "a dma-buf registration from offset {offset:#x} cannot be addressed from IOVA {iova:#x}: the two must have the same offset in a 4 KiB page (the MTT maps whole pages; the kernel's mlx5_ib_reg_user_mr_dmabuf refuses it too): choose an IOVA with the low 12 bits of the offset"
    )]
    DmaBufIovaOffset {
        /// The offset in the dma-buf.
        offset: u64,
        /// The IOVA asked for.
        iova: u64,
    },
    /// A dma-buf registration whose IOVA range wraps.
    #[error(
        "a dma-buf registration of {len:#x} bytes at IOVA {iova:#x} wraps around the 64-bit address space (EINVAL): choose a lower IOVA"
    )]
    DmaBufIovaWraps {
        /// The IOVA asked for.
        iova: u64,
        /// Bytes.
        len: usize,
    },
    /// A memfd's size could not be read, or the memfd range could not be mapped.
    #[error(
        "{op} of the memfd (fd {fd}) failed: {source}: pass an open memfd (memfd_create) or another shmem fd that can be mmapped MAP_SHARED"
    )]
    Memfd {
        /// `fstat` or `mmap`.
        op: &'static str,
        /// The fd.
        fd: i32,
        /// The OS error.
        source: std::io::Error,
    },
    /// A memfd registration that reaches past the end of the memfd.
    #[error(
        "registering {len:#x} bytes at offset {offset:#x} of a {size:#x}-byte memfd reaches past its end: ftruncate it first (and seal it with F_SEAL_SHRINK so it cannot shrink under the device)"
    )]
    MemfdOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: usize,
        /// The memfd's size.
        size: u64,
    },
    /// Unmapping application memory failed: the device may still reach it.
    #[error(
        "unmapping the application memory at {addr:#x} ({len} bytes) from the device failed (see the log): the device may still reach it, so it is kept (leaked), never handed back or freed"
    )]
    StillMapped {
        /// Host address of the first byte.
        addr: u64,
        /// Bytes.
        len: usize,
    },
    /// A CQ asked for a completion vector the HCA does not have.
    #[error(
        "completion vector {vector} does not exist (this HCA has {available}, one completion EQ each): use a vector below {available} (Hca::num_comp_vectors)"
    )]
    NoCompVector {
        /// The vector asked for.
        vector: u32,
        /// Completion vectors of the HCA.
        available: u32,
    },
    /// A CQ with completion events not yet acknowledged cannot be destroyed (libibverbs
    /// `ibv_destroy_cq` would block until they are).
    #[error(
        "CQ {cqn:#x} has {unacked} completion event(s) taken with get_cq_event and not acknowledged: call ack_cq_events for them before destroying it"
    )]
    CqEventsUnacked {
        /// The CQ.
        cqn: u32,
        /// Events taken and not acknowledged.
        unacked: u32,
    },
    /// More events acknowledged than were taken.
    #[error(
        "ack_cq_events on CQ {cqn:#x} acknowledged {acked} event(s) but only {taken} were taken with get_cq_event and not yet acknowledged: acknowledge each event once"
    )]
    AckTooMany {
        /// The CQ.
        cqn: u32,
        /// Events the call acknowledged.
        acked: u32,
        /// Events outstanding.
        taken: u32,
    },
    /// An eventfd or epoll instance for an event channel could not be made or used.
    #[error("{what} failed: {source} (raise the open-file limit, `ulimit -n`, if it is EMFILE)")]
    EventChannel {
        /// What was being done.
        what: &'static str,
        /// The errno.
        source: nix::Error,
    },
    /// A CQ bound to a completion channel reports its events there only.
    #[error(
        "CQ {cqn:#x} reports to a completion channel: wait on the channel (get_cq_event), not with Cq::wait"
    )]
    CqOnChannel {
        /// The CQ.
        cqn: u32,
    },
    /// A QP state transition that the verbs state table (`ib_modify_qp_is_ok`) does not have
    /// from the QP's state for its type; nothing was sent to the device.
    #[error("QP {qpn:#x} ({qp_type}): {transition} does not start from {from}: {fix}")]
    BadQpTransition {
        /// QP number.
        qpn: u32,
        /// RC, UC or UD.
        qp_type: &'static str,
        /// The transition asked for (e.g. "RTS→SQD").
        transition: &'static str,
        /// The state it was asked from.
        from: &'static str,
        /// What to do.
        fix: &'static str,
    },
    /// An attribute that a transition does not take for this QP type (`ib_modify_qp_is_ok`'s
    /// optional attributes); nothing was sent to the device.
    #[error(
        "QP {qpn:#x} ({qp_type}): {transition} does not take {attr} (not an optional attribute of that transition for this QP type): leave it unset"
    )]
    QpAttrNotAllowed {
        /// QP number.
        qpn: u32,
        /// RC, UC or UD.
        qp_type: &'static str,
        /// The transition.
        transition: &'static str,
        /// The attribute given.
        attr: &'static str,
    },
    /// A congestion-control call the driver refused before sending it.
    #[error("{op}: {cause}")]
    Congestion {
        /// The command it would have sent.
        op: bypass_hw::cmd::Opcode,
        /// Why, and what to do.
        cause: crate::cong::CongError,
    },
}

impl DriverError {
    /// The command status, if this is a firmware command failure.
    pub fn cmd_status(&self) -> Option<CmdStatus> {
        match self {
            Self::CmdFailed { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The syndrome, if this is a firmware command failure.
    pub fn syndrome(&self) -> Option<u32> {
        match self {
            Self::CmdFailed { syndrome, .. } => Some(*syndrome),
            _ => None,
        }
    }
}
