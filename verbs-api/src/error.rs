//! The crate's error type: every failure names what failed, why, and the fix.
//!
//! Owns: [`VerbsError`] and [`QpState`]'s names. Must not: hide the driver's or the device's
//! own explanation (driver errors are wrapped with their text intact).

use std::fmt;

use crate::driver::DriverError;
use crate::driver::hw::cmd::qp::QpState as HwQpState;
use crate::driver::post::PostError;
use crate::driver::qp::PostListError;
use crate::endpoint::EndpointParseError;
use crate::exchange::ExchangeError;

/// A QP state, as QUERY_QP reports it (`qpc.state`, PRM values as `enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// RESET: just created or reset; nothing can be posted.
    Reset,
    /// INIT: receives may be posted; nothing is sent.
    Init,
    /// RTR (ready to receive): receives complete; nothing is sent.
    Rtr,
    /// RTS (ready to send): both directions work.
    Rts,
    /// SQD (send queue drained).
    Sqd,
    /// SQE (send queue error; UD/UC only).
    Sqe,
    /// ERR: every outstanding request is flushed with WR_FLUSH_ERR.
    Err,
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

impl QpState {
    /// The verbs state of a PRM state (`SQ_DRAINING` and `SUSPENDED` read as SQD, as the
    /// kernel's `to_ib_qp_state` maps them).
    pub const fn from_hw(s: HwQpState) -> Self {
        match s {
            HwQpState::Rst => QpState::Reset,
            HwQpState::Init => QpState::Init,
            HwQpState::Rtr => QpState::Rtr,
            HwQpState::Rts => QpState::Rts,
            HwQpState::Sqer => QpState::Sqe,
            HwQpState::Sqd | HwQpState::SqDraining | HwQpState::Suspended => QpState::Sqd,
            HwQpState::Err => QpState::Err,
        }
    }

    /// What to do from this state to be able to send.
    pub fn how_to_reach_rts(self) -> &'static str {
        match self {
            QpState::Reset => "connect() or modify it to INIT, RTR and RTS first",
            QpState::Init => "connect() or modify it to RTR and RTS first",
            QpState::Rtr => "modify it to RTS first (modify_to_rts)",
            QpState::Rts => "it is ready",
            QpState::Sqd | QpState::Sqe => "modify it back to RTS first",
            QpState::Err => {
                "it failed earlier: poll its error completion for the cause, then reset() and connect() again"
            }
        }
    }
}

/// Why a verbs call failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// A post on a QP whose state does not allow it.
    #[error("QP {qpn:#x} is in {state}: {}", state.how_to_reach_rts())]
    QpNotReady {
        /// The QP number.
        qpn: u32,
        /// Its state.
        state: QpState,
    },
    /// A receive posted on a QP in RESET.
    #[error(
        "QP {qpn:#x} is in RESET: receives can be posted from INIT on; modify it to INIT (or connect()) first"
    )]
    RecvInReset {
        /// The QP number.
        qpn: u32,
    },
    /// A transition the QP state machine does not have.
    #[error(
        "QP {qpn:#x} cannot go from {from} to {to}: the verbs state machine walks RESET, INIT, RTR, RTS (any state can go to ERR or RESET); query state() and take the next step"
    )]
    BadTransition {
        /// The QP number.
        qpn: u32,
        /// The current state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// The pool has no free chunk.
    #[error(
        "the memory pool's {count} chunks of {chunk} bytes are all leased: drop leases you hold, poll completions (posted leases come back with them), or create a larger pool"
    )]
    PoolExhausted {
        /// Chunks in the pool.
        count: usize,
        /// Chunk size.
        chunk: usize,
    },
    /// A lease longer than a chunk.
    #[error(
        "a lease of {len} bytes does not fit a {chunk}-byte chunk: create the pool with a chunk size at least as large as the largest message"
    )]
    LeaseTooLarge {
        /// The length asked for.
        len: usize,
        /// The chunk size.
        chunk: usize,
    },
    /// A pool bigger than its memory, or empty.
    #[error(
        "a pool of {count} chunks of {chunk} bytes does not fit {have} bytes of memory (or is empty): give a non-zero chunk size and count whose product fits"
    )]
    PoolSize {
        /// Chunk size.
        chunk: usize,
        /// Chunk count.
        count: usize,
        /// Bytes available.
        have: usize,
    },
    /// A local buffer outside its memory region.
    #[error(
        "a local buffer [{offset}, {offset}+{len}) lies outside its memory region of {mr_len} bytes: slice within the registration (checked before posting, so nothing reached the NIC)"
    )]
    OutsideMr {
        /// Offset in the MR.
        offset: u64,
        /// Length.
        len: u64,
        /// The MR's length.
        mr_len: u64,
    },
    /// More scatter/gather entries than the QP was created for.
    #[error(
        "a work request has {sges} scatter/gather entries but the QP allows {max}: create the QP with a larger max_send_sge/max_recv_sge, or coalesce buffers"
    )]
    TooManySges {
        /// The count given.
        sges: usize,
        /// The QP's limit.
        max: usize,
    },
    /// Inline data longer than the QP's inline size.
    #[error(
        "{len} bytes of inline data exceed the QP's max_inline_data of {max}: create the QP with a larger max_inline, or send from registered memory"
    )]
    InlineTooLong {
        /// The length given.
        len: usize,
        /// The QP's limit.
        max: usize,
    },
    /// A message larger than the remote buffer the peer advertised.
    #[error(
        "the message of {len} bytes does not fit the remote buffer of {remote_len} bytes: slice the RemoteBuffer the peer sent, or send less (checked before posting, so nothing reached the NIC)"
    )]
    RemoteTooSmall {
        /// Message length.
        len: u64,
        /// The remote buffer's length.
        remote_len: u64,
    },
    /// An atomic whose target or result buffer is not 8 aligned bytes.
    #[error(
        "an atomic needs an 8-byte, 8-aligned remote target and one 8-byte local buffer for the old value (remote {remote_len} bytes, aligned: {aligned}; local {local_len} bytes)"
    )]
    BadAtomic {
        /// The remote buffer's length.
        remote_len: u64,
        /// Whether the remote address is 8-aligned.
        aligned: bool,
        /// The local buffers' total length.
        local_len: u64,
    },
    /// A completion handed to a QP it does not belong to.
    #[error(
        "this completion belongs to QP {wc_qpn:#x} (on its CQ or device), not to QP {qpn:#x}: reclaim each completion on the QP that posted its work request"
    )]
    ForeignCompletion {
        /// The completion's QP.
        wc_qpn: u32,
        /// The QP asked.
        qpn: u32,
    },
    /// A completion polled before the work request now at its ring slot was posted: one of an
    /// earlier QP that had this QP's number (destroyed, the number reused by the firmware), or
    /// of this QP before a reset. It proves nothing about the WQE there, so nothing is
    /// released.
    #[error(
        "this completion of QP {qpn:#x} was polled before the {queue} work request now at its ring slot was posted (completion {seq} of its CQ; the request was posted when the CQ had consumed {posted_at}): it belongs to an earlier QP with this number or to before a reset, and proves nothing about the new request: drop it, and reclaim the new request with its own completion"
    )]
    StaleCompletion {
        /// The QP number.
        qpn: u32,
        /// `"send"` or `"receive"`.
        queue: &'static str,
        /// The completion's sequence number (its CQ's consumer count once its CQE was
        /// consumed).
        seq: u64,
        /// The CQ's consumer count when the request at that slot was posted.
        posted_at: u64,
    },
    /// A reset asked for while work requests are still outstanding (their completions could
    /// otherwise be reclaimed against WQEs posted after the reset).
    #[error(
        "QP {qpn:#x} still has {sends} send and {recvs} receive WQE slots outstanding: move it to ERR (to_error), poll the flushed completions and reclaim them, then reset (or drop the QP and create a new one)"
    )]
    OutstandingAtReset {
        /// The QP number.
        qpn: u32,
        /// Send WQEBBs outstanding.
        sends: u32,
        /// Receives outstanding.
        recvs: u32,
    },
    /// A shared (frozen) lease was given where the NIC would write into it.
    #[error(
        "a shared lease cannot be the local buffer of {op}: the NIC writes there, and other work requests or handles may be reading it; post a plain Lease (SharedLease::try_unfreeze gives it back once every other handle is gone)"
    )]
    SharedBufferWritten {
        /// The operation ("a receive", "an RDMA READ", "an atomic").
        op: &'static str,
    },
    /// The port has no usable GID or MTU.
    #[error(
        "port {port} has no {what}: check the port is up (bypass devinfo) and has a GID configured"
    )]
    PortUnusable {
        /// The port.
        port: u8,
        /// What is missing ("GID at index 0", "active MTU").
        what: &'static str,
    },
    /// INIT2RTR at a path MTU whose packets do not fit the local port's Ethernet MTU: they
    /// would be dropped at the port and the QP would end in TRANSPORT_RETRY_EXC.
    #[error("QP {qpn:#x} cannot connect: {why}")]
    PathMtuTooLarge {
        /// The QP.
        qpn: u32,
        /// The path MTU, the port's Ethernet MTU and (in its Display) the fix.
        why: crate::driver::hw::roce::mtu::TooLarge,
    },
    /// The two ends of a connection report different active MTUs (their ports' Ethernet
    /// MTUs differ): the connection would run at the smaller, or one end is misconfigured.
    #[error(
        "QP {qpn:#x}: this end's port carries path MTU {local}, the peer's {remote}: the ports' Ethernet MTUs differ; set the same MTU (e.g. 9000) on both ends and every hop between, or connect at path MTU {} on purpose",
        (*local).min(*remote)
    )]
    PathMtuMismatch {
        /// The local QP.
        qpn: u32,
        /// This end's active MTU (bytes).
        local: u32,
        /// The peer's, from its endpoint (bytes).
        remote: u32,
    },
    /// A send completed with TRANSPORT_RETRY_EXC_ERR while the sending port dropped the QP's
    /// packets for being larger than an Ethernet MTU: the retries could never pass.
    #[error(
        "QP {qpn:#x} completed with TRANSPORT_RETRY_EXC_ERR: {drops} of its packets were dropped as larger than the Ethernet MTU {eth_mtu} ({why})"
    )]
    RetryExcMtu {
        /// The QP.
        qpn: u32,
        /// Packets dropped for their size (the QP's `tx_mtu_drops`, or a link's).
        drops: u64,
        /// The Ethernet MTU that dropped them (bytes).
        eth_mtu: u32,
        /// The path MTU against that Ethernet MTU, and the fix.
        why: crate::driver::hw::roce::mtu::TooLarge,
    },
    /// The driver or the device refused a control-path call (the text explains the
    /// command, its status and syndrome and the fix).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The driver refused a post (queue full, bad opcode for the QP type, ...).
    #[error(transparent)]
    Post(#[from] PostError),
    /// A post list stopped at a request the driver refused (those before it were posted).
    #[error(transparent)]
    PostList(#[from] PostListError),
    /// An endpoint text or value was malformed.
    #[error(transparent)]
    Endpoint(#[from] EndpointParseError),
    /// The out-of-band exchange failed.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// Deregistration of application memory while leases of it are alive (posted in work
    /// requests or held): the region is given back unchanged.
    #[error(
        "the memory region still has {leases} lease(s) alive (posted work requests or held leases): poll their completions and reclaim and drop the leases, then deregister"
    )]
    MrInUse {
        /// Leases alive.
        leases: usize,
    },
    /// An owned region used in a way its access rights rule out.
    #[error("{what}: {fix}")]
    MrAccessMode {
        /// What was refused.
        what: &'static str,
        /// What to do instead.
        fix: &'static str,
    },
    /// A range of the owner's bytes to register that is empty or outside them.
    #[error(
        "the range {start}..{end} is not a non-empty range inside the {len}-byte buffer: register bytes the buffer has"
    )]
    BadMrRange {
        /// Start asked for.
        start: usize,
        /// End asked for.
        end: usize,
        /// The buffer's length.
        len: usize,
    },
    /// An SRQ destroyed while QPs still take receives from it.
    #[error("SRQ {srqn:#x} is used by {qps} QP(s): destroy them first")]
    SrqInUse {
        /// The SRQ number.
        srqn: u32,
        /// QPs built on it.
        qps: usize,
    },
    /// A QP built on an SRQ with another receive CQ than the SRQ's.
    #[error(
        "SRQ {srqn:#x} was created for receive CQ {srq_cqn:#x}, the QP reports receives to CQ {cqn:#x}: build every QP on one SRQ with the SRQ's CQ as its receive CQ"
    )]
    SrqCqMismatch {
        /// The SRQ number.
        srqn: u32,
        /// The SRQ's CQ.
        srq_cqn: u32,
        /// The QP's receive CQ.
        cqn: u32,
    },
    /// A copy into or out of device memory (through its `PeerMemory`) failed.
    #[error("copying device memory failed: {0}")]
    DeviceCopy(#[from] crate::driver::backend::PeerError),
    /// A device MR whose bytes the CPU has no way to reach.
    #[error(
        "the dma-buf from {exporter} has no CPU path: give its DmaBufSource a PeerMemory (device memory) or its backing memfd (a udmabuf) to read and write it from the CPU"
    )]
    NoCpuAccess {
        /// The exporter's name.
        exporter: String,
    },
}
