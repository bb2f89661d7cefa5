//! Work requests as the safe API takes them: owned local buffers ([`LocalBuf`]) in a
//! fixed-capacity list ([`SgeList`]), the send opcodes ([`SendOp`]) and flags.
//!
//! A work request *owns* its local buffers: posting moves them into the QP, which keeps them
//! until the completion is polled (see `outstanding` and the crate docs). Inline data is
//! borrowed: it is copied into the WQE during the post, so the borrow ends when `post` returns.
//!
//! Owns: the request types. Must not: build WQE bytes (the driver does).
//! Sources: libibverbs `struct ibv_send_wr` / `struct ibv_recv_wr` and the `IBV_SEND_*` flags
//! (`verbs.h`), whose fields these types carry.

use crate::device_pool::DeviceLease;
pub use crate::driver::post::UdDest;
use crate::endpoint::RemoteBuffer;
use crate::pool::Lease;
use crate::shared::SharedLease;

/// The most scatter/gather entries one safe work request carries (the list is a fixed array,
/// so posting allocates nothing). The QP's own `max_send_sge`/`max_recv_sge` may be lower.
pub const MAX_SGES: usize = 4;

/// One local buffer of a work request, owned for as long as the request is outstanding.
#[derive(Debug)]
pub enum LocalBuf {
    /// A pool lease: all `len()` bytes of it.
    Lease(Lease),
    /// A frozen lease other work requests may read at the same time: SEND/WRITE sources
    /// only (refused where the NIC writes: receives, READ and atomic results).
    Shared(SharedLease),
    /// A lease of device memory ([`crate::DevicePool`]): no Rust reference covers its bytes,
    /// so the NIC may read or write it (sources, receives, READ and atomic results).
    Device(DeviceLease),
}

impl LocalBuf {
    /// Device address of the first byte.
    pub fn addr(&self) -> u64 {
        match self {
            LocalBuf::Lease(l) => l.iova(),
            LocalBuf::Shared(s) => s.iova(),
            LocalBuf::Device(d) => d.iova(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            LocalBuf::Lease(l) => l.len(),
            LocalBuf::Shared(s) => s.len(),
            LocalBuf::Device(d) => d.len(),
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        match self {
            LocalBuf::Lease(l) => l.lkey(),
            LocalBuf::Shared(s) => s.lkey(),
            LocalBuf::Device(d) => d.lkey(),
        }
    }

    /// The lease, if this buffer is one.
    pub fn into_lease(self) -> Option<Lease> {
        match self {
            LocalBuf::Lease(l) => Some(l),
            LocalBuf::Shared(_) | LocalBuf::Device(_) => None,
        }
    }

    /// The device lease, if this buffer is one.
    pub fn into_device_lease(self) -> Option<DeviceLease> {
        match self {
            LocalBuf::Device(d) => Some(d),
            LocalBuf::Lease(_) | LocalBuf::Shared(_) => None,
        }
    }

    /// Whether the NIC may only read this buffer (a [`SharedLease`]).
    pub fn is_shared(&self) -> bool {
        matches!(self, LocalBuf::Shared(_))
    }
}

impl From<SharedLease> for LocalBuf {
    fn from(s: SharedLease) -> Self {
        LocalBuf::Shared(s)
    }
}

impl From<DeviceLease> for LocalBuf {
    fn from(d: DeviceLease) -> Self {
        LocalBuf::Device(d)
    }
}

impl From<Lease> for LocalBuf {
    fn from(l: Lease) -> Self {
        LocalBuf::Lease(l)
    }
}

/// Up to [`MAX_SGES`] owned local buffers, in order. No allocation.
#[derive(Debug, Default)]
pub struct SgeList {
    bufs: [Option<LocalBuf>; MAX_SGES],
    n: u8,
    /// A push was refused (the request is invalid; posting reports `TooManySges`).
    overflow: bool,
}

impl SgeList {
    /// An empty list.
    pub const fn new() -> Self {
        SgeList {
            bufs: [None, None, None, None],
            n: 0,
            overflow: false,
        }
    }

    /// A list of one buffer.
    pub fn one(b: impl Into<LocalBuf>) -> Self {
        let mut l = SgeList::new();
        // Cannot fail: the list is empty.
        let _ = l.push(b.into());
        l
    }

    /// Appends a buffer; gives it back if the list is full.
    pub fn push(&mut self, b: impl Into<LocalBuf>) -> Result<(), LocalBuf> {
        let b = b.into();
        match self.bufs.get_mut(usize::from(self.n)) {
            Some(slot) => {
                *slot = Some(b);
                self.n += 1;
                Ok(())
            }
            None => {
                self.overflow = true;
                Err(b)
            }
        }
    }

    /// Whether a push was refused because the list was full.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// How many buffers.
    pub fn len(&self) -> usize {
        usize::from(self.n)
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The buffers, in order.
    pub fn iter(&self) -> impl Iterator<Item = &LocalBuf> {
        self.bufs.iter().flatten()
    }

    /// Whether any buffer is shared (read-only for the NIC).
    pub fn any_shared(&self) -> bool {
        self.iter().any(LocalBuf::is_shared)
    }

    /// The total length of all buffers.
    pub fn total_len(&self) -> u64 {
        self.iter().map(|b| b.len() as u64).sum()
    }

    /// Takes the buffers out, leaving the list empty.
    pub fn take(&mut self) -> SgeList {
        std::mem::take(self)
    }

    /// The buffers as leases (the usual case), in order.
    pub fn into_leases(self) -> impl Iterator<Item = Lease> {
        self.bufs
            .into_iter()
            .flatten()
            .filter_map(LocalBuf::into_lease)
    }

    /// The device leases among the buffers, in order (a receive or READ into device memory).
    pub fn into_device_leases(self) -> impl Iterator<Item = DeviceLease> {
        self.bufs
            .into_iter()
            .flatten()
            .filter_map(LocalBuf::into_device_lease)
    }
}

/// What a send work request does. Remote buffers are plain values (the peer owns that memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: the peer consumes a receive.
    Send,
    /// SEND with immediate data (network order on the wire; here a host value).
    SendImm(u32),
    /// RDMA WRITE into `remote`.
    Write(RemoteBuffer),
    /// RDMA WRITE with immediate: consumes a receive at the peer.
    WriteImm(RemoteBuffer, u32),
    /// RDMA READ from `remote` into the local buffers.
    Read(RemoteBuffer),
    /// 8-byte compare-and-swap at `remote`; the old value lands in the local buffer.
    CompareSwap {
        /// The 8-byte target.
        remote: RemoteBuffer,
        /// The value expected.
        compare: u64,
        /// The value written if it matched.
        swap: u64,
    },
    /// 8-byte fetch-and-add at `remote`; the old value lands in the local buffer.
    FetchAdd {
        /// The 8-byte target.
        remote: RemoteBuffer,
        /// The value added.
        add: u64,
    },
}

/// A send work request: opcode, owned local buffers (or inline data), flags.
///
/// ```
/// # fn f(lease: bypass_verbs::Lease, remote: bypass_verbs::RemoteBuffer) {
/// use bypass_verbs::wr::{SendOp, SendWr};
/// let wr = SendWr::new(7, SendOp::Write(remote)).sge(lease).unsignaled();
/// # let _ = wr; }
/// ```
#[derive(Debug)]
pub struct SendWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers (gather for sends/writes, scatter for reads/atomics).
    pub sges: SgeList,
    /// Inline payload, copied into the WQE (SEND/WRITE only); used instead of `sges` when set.
    pub inline: Option<&'a [u8]>,
    /// Ask for a completion (forced on when the QP was created with `sig_all`).
    pub signaled: bool,
    /// Wait for earlier READs/atomics before this one (IBV_SEND_FENCE).
    pub fence: bool,
    /// Set the solicited-event bit (IBV_SEND_SOLICITED).
    pub solicited: bool,
    /// UD only: the destination (an address handle; see `Qp::ud_dest`).
    pub ud: Option<&'a UdDest>,
}

impl<'a> SendWr<'a> {
    /// A signaled request with no buffers yet.
    pub fn new(wr_id: u64, op: SendOp) -> Self {
        SendWr {
            wr_id,
            op,
            sges: SgeList::new(),
            inline: None,
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        }
    }

    /// Sends to `dest` (UD QPs: SEND and SEND_IMM only).
    pub fn to(mut self, dest: &'a UdDest) -> Self {
        self.ud = Some(dest);
        self
    }

    /// Adds a local buffer (the lease moves into the request). Beyond [`MAX_SGES`] the
    /// buffer is dropped (returned to its pool) and the post fails with `TooManySges`.
    pub fn sge(mut self, b: impl Into<LocalBuf>) -> Self {
        // A refused buffer drops here (back to its pool); the list remembers the overflow.
        let _ = self.sges.push(b);
        self
    }

    /// Sends `data` inline (copied into the WQE at post time).
    pub fn inline(mut self, data: &'a [u8]) -> Self {
        self.inline = Some(data);
        self
    }

    /// No completion for this request (unless the QP has `sig_all`).
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }

    /// Sets the fence flag.
    pub fn fenced(mut self) -> Self {
        self.fence = true;
        self
    }

    /// Sets the solicited-event flag.
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }

    /// The number of SGEs, or `None` if more than [`MAX_SGES`] were added.
    pub fn sge_count(&self) -> Option<usize> {
        (!self.sges.overflow).then(|| self.sges.len())
    }
}

/// A receive work request: where an incoming SEND (or WRITE_IMM's immediate) lands.
#[derive(Debug)]
pub struct RecvWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The scatter list.
    pub sges: SgeList,
}

impl RecvWr {
    /// A receive into one buffer.
    pub fn new(wr_id: u64, b: impl Into<LocalBuf>) -> Self {
        RecvWr {
            wr_id,
            sges: SgeList::one(b),
        }
    }
}
