//! # bypass-verbs: the safe application API of bypass
//!
//! [`Context`], [`Pd`], [`Mr`], [`MemoryPool`], [`Cq`] and [`Qp`] over `bypass-driver`, the
//! endpoints two peers exchange ([`QpEndpoint`], [`RemoteBuffer`]) and a TCP out-of-band
//! exchange ([`exchange`]: authenticated and encrypted under a pre-shared key, or plaintext
//! when asked).
//!
//! ```
//! use std::time::Duration;
//! use bypass_testbed::SimContext; // the simulated NICs (a dev-dependency)
//! use bypass_verbs::{Context, Cq, QpBuilder, RecvWr, SendOp, SendWr};
//!
//! let pair = Context::sim_pair(1)?; // two simulated NICs on a stepped fabric
//! let (pd_a, pd_b) = (pair.a.alloc_pd()?, pair.b.alloc_pd()?);
//! let (mut cq_a, mut cq_b) = (Cq::new(&pair.a, 64)?, Cq::new(&pair.b, 64)?);
//! let (pool_a, pool_b) = (pd_a.create_pool(4096, 8)?, pd_b.create_pool(4096, 8)?);
//! let mut a = QpBuilder::rc(&pd_a, &cq_a, &cq_a).build()?;
//! let mut b = QpBuilder::rc(&pd_b, &cq_b, &cq_b).build()?;
//! let (ea, eb) = (a.endpoint()?, b.endpoint()?); // exchanged out of band in real life
//! a.connect(&eb)?;
//! b.connect(&ea)?;
//!
//! b.post_recv(RecvWr::new(1, pool_b.lease(64)?))?;
//! let mut msg = pool_a.lease(5)?;
//! msg.as_mut_slice().copy_from_slice(b"hello");
//! a.post_send(SendWr::new(2, SendOp::Send).sge(msg))?; // the lease moves into the QP
//!
//! let c = cq_b.wait(Duration::from_secs(1))?.expect("a receive");
//! assert!(c.is_ok(), "{c}");
//! let len = c.byte_len() as usize;
//! let mut got = b.reclaim_lease(c)?.expect("the receive buffer");
//! got.set_len(len)?;
//! assert_eq!(got.as_slice(), b"hello");
//! let sent = cq_a.wait(Duration::from_secs(1))?.expect("the send");
//! drop(a.reclaim(sent)?); // the source lease goes back to its pool
//! assert_eq!(pool_a.leased(), 0);
//! # Ok::<(), bypass_verbs::VerbsError>(())
//! ```
//!
//! Owns: the public API and its soundness rules. Must not: format WQEs or CQEs itself (the
//! driver does), or touch the device except through the driver.
//! Sources: the libibverbs verbs (`ibv_post_send`, `ibv_poll_cq`, `ibv_modify_qp`) for what
//! each call does; io_uring's owned buffers and `vm-memory`'s guest memory for the ownership
//! rules below.
//!
//! ## Soundness: who may touch memory the NIC may access
//!
//! `post_send(&buf); drop(buf);` lets the NIC DMA from freed memory, and
//! `post_recv(&buf); buf[0]` reads bytes the NIC may be writing (phoenix-dataplane #83, "post_send
//! should be unsafe"). bypass keeps posting safe by **ownership**:
//!
//! 1. **Leases.** Application buffers come from a [`MemoryPool`]: one region registered once,
//!    cut into chunks, each handed out as a [`Lease`], an owned, non-`Clone` handle that is the
//!    only way to reach its bytes (`as_slice`/`as_mut_slice`) and returns the chunk to the pool
//!    when dropped. Leasing neither registers nor allocates (the free set is an atomic bitmap).
//! 2. **Posting moves the lease.** A work request ([`wr::SendWr`], [`wr::RecvWr`]) owns its
//!    buffers in a fixed-size [`wr::SgeList`]; `post_send`/`post_recv` move that list into the
//!    QP's outstanding table, a pre-sized array indexed by the WQE's ring index. From then on no
//!    safe code holds a handle: the bytes cannot be read, written or freed while the NIC may
//!    access them.
//! 3. **The completion gives it back.** A polled [`Completion`] is a proof, made only by a
//!    [`Cq`], that the NIC is done with its WQE and every earlier WQE of that queue (mlx5 writes
//!    a queue's CQEs in order). [`Qp::reclaim`] consumes it and hands back that WQE's buffers (a
//!    receive's data, a READ's result), dropping those of earlier unsignaled WQEs into their
//!    pools. A completion cannot be forged or copied, and a stale one releases nothing:
//!    - it carries its CQ's identity and a sequence number, the CQ's consumer count once its CQE
//!      was consumed, taken by the driver's poll while it still holds the CQ's consumer side;
//!      each parked WQE keeps the count at its post. A completion polled before the WQE now at
//!      its ring slot was posted (of a destroyed QP whose number the firmware gave to this one,
//!      or from before a reset) is refused with [`VerbsError::StaleCompletion`];
//!    - the 16-bit WQE index it names (a send CQE's `wqe_counter`; for a receive, the receive
//!      WQE the driver matched it to) is matched against the outstanding window modulo 2^16
//!      (rings hold at most 2^15 WQEBBs), so a completion of an earlier lap of the ring, kept
//!      while its slot was reposted, falls outside the window.
//! 4. **Teardown.** A QP destroys its hardware object first (after DESTROY_QP the NIC stops),
//!    then drops the parked leases. The driver removes the CQEs a destroyed or reset QP left
//!    unpolled from its CQs (as rdma-core `__mlx5_cq_clean`), so a new QP with the same QPN is
//!    never credited with them. [`Qp::reset`] is refused while WQEs are outstanding: move the QP
//!    to ERR, poll and reclaim the flushed completions, then reset. Parents (`Pd`, `Cq`, the
//!    pool's `Mr`, the `Context`) are held by `Arc`: an MR lives as long as any lease of its
//!    pool, a CQ as long as any QP on it.
//! 5. **Inline data is borrowed**: it is copied into the WQE before `post_send` returns.
//! 6. **Remote access.** Memory a peer may write (REMOTE_WRITE/ATOMIC) can change at any time
//!    without a local completion, so no `&[u8]` into it is handed out: [`Mr::read`] and
//!    [`Mr::write`] copy through raw pointers (as `vm-memory` treats guest memory). The pool
//!    registers its region for local access only.
//! 7. **Shared sources.** [`Lease::freeze`] turns a lease into a [`SharedLease`]: read-only,
//!    `Clone` (one atomic count, no allocation per clone), postable by many SENDs and WRITEs at
//!    once, as perftest `ib_write_bw` posts every WRITE from one buffer (the NIC only reads a
//!    gather list). No `&mut` to its bytes exists while any clone lives, those parked in QPs
//!    included; [`SharedLease::try_unfreeze`] gives the writable lease back to the last handle
//!    only. Receives, READs and atomics, where the NIC writes, refuse it
//!    ([`VerbsError::SharedBufferWritten`]).
//! 8. **Device memory.** A dma-buf or a memfd range ([`Pd::register_dmabuf`],
//!    [`Pd::register_memfd`]) is a [`DeviceMr`]: GPU memory has no CPU pointer and a memfd's
//!    pages are shared with its other mappings, so the CPU reaches both by copies only
//!    ([`DeviceMr::read`], [`DeviceMr::write`]). A [`DevicePool`] cuts a local-only one into
//!    [`DeviceLease`]s, which work requests take as any lease ([`wr::LocalBuf::Device`]);
//!    since no Rust reference covers their bytes, they may be receive, READ and atomic
//!    targets as well as sources.
//!
//! 9. **The driver underneath.** The driver this crate re-exports as [`driver`] takes raw
//!    SGEs (an address and an lkey), so every driver function that posts them is an `unsafe
//!    fn` whose contract the rules above keep (`bypass_driver::post`, "Posting is unsafe"):
//!    safe code reaches the NIC only through this crate's owned work requests.
//!
//! What the compiler refuses (each example is a `compile_fail` doc test):
//!
//! A lease moved into a work request cannot be touched afterwards:
//! ```compile_fail,E0382
//! use bypass_verbs::{Lease, wr::{SendOp, SendWr}};
//! fn misuse(mut lease: Lease) {
//!     let wr = SendWr::new(1, SendOp::Send).sge(lease);
//!     lease.as_mut_slice()[0] = 1; // the NIC may be reading it: refused (E0382)
//!     drop(wr);
//! }
//! ```
//! A lease cannot be duplicated to keep a second handle:
//! ```compile_fail,E0599
//! use bypass_verbs::Lease;
//! fn misuse(lease: Lease) {
//!     let keep = lease.clone(); // no Clone: refused (E0599)
//! }
//! ```
//! A completion is a one-time proof: it cannot be reclaimed twice ...
//! ```compile_fail,E0382
//! use bypass_verbs::{Completion, Qp};
//! fn misuse(qp: &mut Qp, c: Completion) {
//!     let _ = qp.reclaim(c);
//!     let _ = qp.reclaim(c); // moved: refused (E0382)
//! }
//! ```
//! ... nor copied:
//! ```compile_fail,E0599
//! use bypass_verbs::Completion;
//! fn misuse(c: Completion) {
//!     let again = c.clone(); // no Clone: refused (E0599)
//! }
//! ```
//! A shared lease cannot be written:
//! ```compile_fail,E0599
//! use bypass_verbs::SharedLease;
//! fn misuse(s: SharedLease) {
//!     s.as_mut_slice()[0] = 1; // read-only while shared: refused (E0599)
//! }
//! ```
//! A slice borrowed from a lease cannot outlive the lease being moved into a request:
//! ```compile_fail,E0505
//! use bypass_verbs::{Lease, wr::RecvWr};
//! fn misuse(lease: Lease) -> u8 {
//!     let bytes = lease.as_slice();
//!     let wr = RecvWr::new(1, lease); // moving while borrowed: refused (E0505)
//!     bytes[0]
//! }
//! ```

pub use bypass_driver as driver;

pub mod app_mr;
mod chunks;
pub mod congestion;
pub mod context;
pub mod cq;
pub mod device_mr;
pub mod device_pool;
pub mod endpoint;
pub mod error;
pub mod exchange;
mod lower;
pub mod mr;
mod outstanding;
pub mod pd;
pub mod pool;
pub mod qp;
pub mod shared;
pub mod srq;
#[cfg(test)]
mod test_pair;
pub mod wr;
pub mod write_batch;

pub use app_mr::{DeregisterError, MrOptions, MrOwner, OwnedMr, RawMr};
pub use congestion::Congestion;
pub use context::Context;
pub use cq::{Completion, Cq, Poll};
pub use device_mr::{DeviceMr, DmaBufSource};
pub use device_pool::{DeviceLease, DevicePool};
pub use driver::async_events::{AsyncEventKind, AsyncEventRecord, AsyncEvents};
pub use driver::backend::{DmaBufFile, Exporter, MemfdRange, PeerError, PeerMemory};
pub use driver::comp_channel::{CompletionChannel, CqEvent};
pub use driver::mr::MkeyAccess as Access;
pub use driver::poll::{WcFlags, WcOpcode, WcStatus};
pub use endpoint::{EndpointParseError, Gid, Mtu, QpEndpoint, RemoteBuffer};
pub use error::{QpState, VerbsError};
pub use exchange::{
    ExchangeAuth, ExchangeError, ExchangeKey, ExchangeServer, ExchangeSession, PeerInfo,
};
pub use mr::Mr;
pub use pd::Pd;
pub use pool::{Lease, MemoryPool};
pub use qp::{Qp, QpAccess, QpBuilder, QpCaps, QpOptions, SqAttrs};
pub use shared::SharedLease;
pub use srq::{Srq, SrqOptions};
pub use wr::{RecvWr, SendOp, SendWr, UdDest};
pub use write_batch::WriteBatch;
