//! # bypass-verbs: the safe application API of bypass
//!
//! [`Context`], [`Pd`], [`Mr`], [`MemoryPool`], [`Cq`] and [`Qp`] on top of `bypass-driver`,
//! plus the endpoints two peers exchange ([`QpEndpoint`], [`RemoteBuffer`]) and a TCP
//! out-of-band exchange ([`exchange`]).
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
//!
//! ## Soundness: who may touch memory the NIC may access
//!
//! The hazard (phoenix-dataplane #83, "post_send should be unsafe"): `post_send(&buf);
//! drop(buf);` lets the NIC DMA into freed memory, and `post_recv(&buf); buf[0]` reads bytes
//! the NIC may be writing. rust-ibverbs and sideway made posting `unsafe`. bypass keeps the
//! safe path safe by **ownership**, io_uring style, and offers the `unsafe` path for users
//! who manage lifetimes themselves:
//!
//! 1. **Leases.** Application buffers come from a [`MemoryPool`]: one region registered once,
//!    cut into chunks, each handed out as a [`Lease`] — an owned, non-`Clone` handle that is
//!    the only way to reach its bytes (`as_slice`/`as_mut_slice`) and returns the chunk to the
//!    pool when dropped. No registration per message, no allocation (the pool's free set is an
//!    atomic bitmap).
//! 2. **Posting moves the lease.** A work request ([`wr::SendWr`], [`wr::RecvWr`]) owns its
//!    buffers in a fixed-size [`wr::SgeList`]; `post_send`/`post_recv` move that list into the
//!    QP's outstanding table, a pre-sized array indexed by the WQE's ring index (no
//!    allocation). From then on no safe code holds a handle: the bytes cannot be read,
//!    written or freed while the NIC may access them.
//! 3. **The completion gives it back.** A polled completion is a proof, produced only by the
//!    CQ, that the NIC is done with its WQE and every earlier WQE of that queue (mlx5 writes a
//!    queue's CQEs in order). `Qp::reclaim(completion)` consumes the proof and hands back the
//!    buffers of that WQE (a receive's data, a READ's result), dropping those of earlier
//!    unsignaled WQEs back into their pools. A completion cannot be forged or copied, and a
//!    stale one releases nothing: each [`Completion`] carries its CQ's identity and its
//!    sequence number — the CQ's consumer count once its CQE was consumed, which the
//!    driver's poll hands back while it still holds the CQ's consumer side — and each parked
//!    WQE the consumer count when it was posted, so a completion polled *before* the WQE now
//!    at its ring slot was posted (of a destroyed QP whose number the firmware gave to this
//!    one, or of a WQE before a reset) is refused ([`VerbsError::StaleCompletion`]); the
//!    16-bit WQE index a completion names (a send CQE's `wqe_counter`; for a receive, the
//!    receive WQE the driver matched it to, in order) is matched against the outstanding
//!    window modulo 2^16 (rings hold at most 2^15 WQEBBs, so it is never ambiguous; an
//!    earlier lap's completion, kept while its slot was reposted, falls outside the window
//!    and releases nothing). The number is taken under the consumer side
//!    because a QP's destroy or reset takes that side to clean the CQ: a poll that took a
//!    CQE of the old QP is ordered before the clean, and every post after it reads a count
//!    at least that CQE's (see `driver::poll::QpTable::consumed`).
//! 4. **Teardown.** A QP destroys its hardware object first (after DESTROY_QP the NIC stops),
//!    then drops the parked leases. [`Qp::reset`] is refused while WQEs are outstanding
//!    (their CQEs could still be in the CQ and be taken, after the reset, for WQEs posted
//!    later): move the QP to ERR, poll and reclaim the flushed completions, then reset.
//!    CQEs a destroyed (or reset) QP left unpolled are removed from its CQs by the driver
//!    (as rdma-core `__mlx5_cq_clean`), so a new QP that gets the same QPN is never credited
//!    with them. Parents (`Pd`, `Cq`, the pool's
//!    `Mr`, the `Context`) are held by `Arc`, so an MR cannot be deregistered while a lease of
//!    its pool exists, nor a CQ destroyed under a QP.
//! 5. **Inline data is borrowed**, because it is copied into the WQE before `post_send`
//!    returns.
//! 6. **Remote access.** Memory a peer may write (REMOTE_WRITE/ATOMIC) can change at any time
//!    without a local completion, so no `&[u8]` into it is ever handed out: such regions are
//!    read and written through copies that use raw pointers only (as `vm-memory` treats guest
//!    memory). The pool registers its region for local access only.
//!
//! 7. **Shared sources.** [`Lease::freeze`] turns a lease into a [`SharedLease`]: read-only,
//!    `Clone` (one atomic count, no allocation per clone), postable by many SENDs and WRITEs
//!    at once — the NIC only reads a gather list, as perftest `ib_write_bw` posts every WRITE
//!    from one buffer. No `&mut` to its bytes exists while any clone lives, including the
//!    clones parked in QPs by posted requests; [`SharedLease::try_unfreeze`] gives the
//!    writable lease back only to the last handle. Receives, READs and atomics, where the NIC
//!    writes, refuse it ([`VerbsError::SharedBufferWritten`]).
//!
//! What the compiler refuses, in tests:
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

pub mod context;
pub mod cq;
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
pub mod wr;

pub use context::Context;
pub use cq::{Completion, Cq, Poll};
pub use driver::mr::MkeyAccess as Access;
pub use driver::poll::{WcFlags, WcOpcode, WcStatus};
pub use endpoint::{EndpointParseError, Gid, Mtu, QpEndpoint, RemoteBuffer};
pub use error::{QpState, VerbsError};
pub use exchange::{ExchangeError, ExchangeServer, PeerInfo};
pub use mr::Mr;
pub use pd::Pd;
pub use pool::{Lease, MemoryPool};
pub use qp::{Qp, QpAccess, QpBuilder, QpCaps, QpOptions};
pub use shared::SharedLease;
pub use wr::{RecvWr, SendOp, SendWr, UdDest};
