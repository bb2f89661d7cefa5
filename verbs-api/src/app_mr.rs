//! Memory regions over memory the application owns: `ibv_reg_mr` / `ibv_reg_mr_iova2`.
//!
//! Owns: [`OwnedMr`] (the owning form: the region holds the buffer, any [`MrOwner`] such as a
//! `Vec<u8>` or `Box<[u8]>`, and gives it back on [`OwnedMr::deregister`]), [`RawMr`] (the
//! `unsafe` form over an address and a length, for the C ABI), [`MrOptions`] and
//! [`DeregisterError`]. Must not: build commands or pin pages (the driver's `user_mr` and
//! `user_dma` do) or decide the buffer's contents.
//!
//! The soundness rules are the crate's (see its docs): a region registered for local access
//! only (and remote read) is cut into leases, exactly as a [`crate::MemoryPool`] is, and posts
//! take those leases; while any lease is alive, posted or held, deregistration is refused with
//! [`VerbsError::MrInUse`] and the region comes back unchanged. A region a peer may write
//! (REMOTE_WRITE or REMOTE_ATOMIC) hands out no lease and no reference (rule 6): it is read
//! and written by copies ([`OwnedMr::read`], [`OwnedMr::write`]). The owner goes back only
//! once DESTROY_MKEY ran and its pages are unmapped; if the unmap fails it is leaked, never
//! freed while the device may reach it.

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::{DerefMut, Range};
use std::ptr::NonNull;
use std::sync::Arc;

use stable_deref_trait::StableDeref;

use crate::driver::mr::MkeyAccess;
use crate::driver::post::Sge;
use crate::driver::user_mr::UserMr;
use crate::endpoint::RemoteBuffer;
use crate::error::VerbsError;
use crate::pd::Pd;
use crate::pool::{Lease, MemoryPool, PoolMemory};

/// A buffer an [`OwnedMr`] can hold: its bytes stay where they are however the owner moves
/// (`StableDeref`), and it may be dropped on another thread: `Vec<u8>`, `Box<[u8]>` and any
/// such owner qualify.
pub trait MrOwner: StableDeref + DerefMut<Target = [u8]> + Send + 'static {}

impl<T: StableDeref + DerefMut<Target = [u8]> + Send + 'static> MrOwner for T {}

/// How to register an owner's bytes (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MrOptions {
    /// The bytes of the owner to register (unaligned start and length allowed); all of them
    /// when `None`.
    pub range: Option<Range<usize>>,
    /// The address work requests and peers use for the first registered byte
    /// (`ibv_reg_mr_iova2`); its host address when `None`. It must have that address's offset
    /// in a 4 KiB page.
    pub iova: Option<u64>,
    /// The size of each lease the region is cut into; the whole region (one lease) when
    /// `None`. Ignored for regions a peer may write (they have no leases).
    pub chunk: Option<usize>,
}

fn peer_writable(access: MkeyAccess) -> bool {
    access.intersects(MkeyAccess::REMOTE_WRITE | MkeyAccess::REMOTE_ATOMIC)
}

/// The registration and its owner, shared by the region and its leases.
struct Region<O> {
    /// The owner; reached only at registration and when handed back (both with the `Arc`
    /// unique), never through `&Region`, so sharing a `Region` shares nothing of `O`.
    owner: UnsafeCell<Option<O>>,
    mr: Option<UserMr>,
    base: NonNull<u8>,
    len: usize,
    _pd: Pd,
}

// SAFETY: `O: Send`; a shared `Region` gives no access to `O` (see `owner`), and the rest is
// a driver registration (Send + Sync) and the address of bytes reached by raw pointers only.
unsafe impl<O: Send> Send for Region<O> {}
// SAFETY: as above.
unsafe impl<O: Send> Sync for Region<O> {}

impl<O> Region<O> {
    /// Deregisters and hands the owner back; leaks it if the device may still reach it.
    fn finish(&mut self) -> Result<Option<O>, VerbsError> {
        let owner = self.owner.get_mut().take();
        let Some(mr) = self.mr.take() else {
            return Ok(owner);
        };
        match mr.deregister() {
            Ok(()) => Ok(owner),
            Err(e) => {
                std::mem::forget(owner);
                Err(e.into())
            }
        }
    }
}

impl<O> Drop for Region<O> {
    fn drop(&mut self) {
        // A failure was logged by the driver; the owner is leaked then, never freed.
        let _ = self.finish();
    }
}

// SAFETY: `base..base + len` are bytes of the owner, which the region keeps (never moved:
// `MrOwner: StableDeref`, and the owner itself sits still in the `Arc`'s allocation) and
// registered under `lkey()` at `iova()` until it drops; leases exist only for regions no peer
// may write, and the region hands out no other reference into the bytes.
unsafe impl<O: Send> PoolMemory for Region<O> {
    fn base(&self) -> NonNull<u8> {
        self.base
    }
    fn len(&self) -> usize {
        self.len
    }
    fn iova(&self) -> u64 {
        self.mr.as_ref().map_or(0, UserMr::addr)
    }
    fn lkey(&self) -> u32 {
        self.mr.as_ref().map_or(0, UserMr::lkey)
    }
}

/// A registered region holding the application buffer it covers (`ibv_reg_mr` of memory the
/// application owned before). Dropping it deregisters and drops the buffer; use
/// [`OwnedMr::deregister`] to get the buffer back.
///
/// ```
/// use bypass_testbed::SimContext;
/// use bypass_verbs::{Access, Context};
/// let pair = Context::sim_pair(1)?;
/// let pd = pair.a.alloc_pd()?;
/// let mr = pd.register_owned(vec![7u8; 100], Access::LOCAL_WRITE)?;
/// let lease = mr.lease(100)?; // what a work request takes
/// assert_eq!(lease.as_slice()[99], 7);
/// let mr = match mr.deregister() {
///     Err(bypass_verbs::DeregisterError::InUse { mr, leases: 1 }) => mr, // refused: leased
///     other => panic!("{other:?}"),
/// };
/// drop(lease);
/// let v = mr.deregister().expect("no lease left");
/// assert_eq!(v.len(), 100);
/// # Ok::<(), bypass_verbs::VerbsError>(())
/// ```
pub struct OwnedMr<O: MrOwner> {
    region: Arc<Region<O>>,
    pool: Option<MemoryPool>,
    access: MkeyAccess,
}

impl<O: MrOwner> fmt::Debug for OwnedMr<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedMr")
            .field("addr", &crate::driver::redact::Addr(self.addr()))
            .field("len", &self.len())
            .field("access", &self.access)
            .field("leased", &self.leased())
            .finish()
    }
}

/// Why [`OwnedMr::deregister`] did not hand the owner back.
pub enum DeregisterError<O: MrOwner> {
    /// Refused, nothing changed: leases of the region are alive (posted or held). Poll,
    /// reclaim and drop them, then try again with the region given back here.
    InUse {
        /// The region, unchanged.
        mr: OwnedMr<O>,
        /// Leases alive.
        leases: usize,
    },
    /// Deregistered, but the device may still reach the memory (an unmap failed): the owner
    /// is leaked, never freed.
    Failed(VerbsError),
}

impl<O: MrOwner> fmt::Debug for DeregisterError<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InUse { leases, .. } => f.debug_struct("InUse").field("leases", leases).finish(),
            Self::Failed(e) => f.debug_tuple("Failed").field(e).finish(),
        }
    }
}

impl<O: MrOwner> DeregisterError<O> {
    /// The error this stands for ([`VerbsError::MrInUse`] for a refusal, dropping the region
    /// it carries).
    pub fn into_error(self) -> VerbsError {
        match self {
            Self::InUse { leases, .. } => VerbsError::MrInUse { leases },
            Self::Failed(e) => e,
        }
    }
}

impl<O: MrOwner> OwnedMr<O> {
    pub(crate) fn register(
        pd: &Pd,
        owner: O,
        access: MkeyAccess,
        opts: MrOptions,
    ) -> Result<Self, VerbsError> {
        let mut region = Arc::new(Region {
            owner: UnsafeCell::new(Some(owner)),
            mr: None,
            base: NonNull::dangling(),
            len: 0,
            _pd: pd.clone(),
        });
        let r = Arc::get_mut(&mut region).ok_or(VerbsError::MrAccessMode {
            what: "registering",
            fix: "unreachable: the region was just made",
        })?;
        let bytes: &mut [u8] = match r.owner.get_mut() {
            Some(o) => o.deref_mut(),
            None => &mut [],
        };
        let total = bytes.len();
        let range = opts.range.clone().unwrap_or(0..total);
        if range.start >= range.end || range.end > total {
            return Err(VerbsError::BadMrRange {
                start: range.start,
                end: range.end,
                len: total,
            });
        }
        let len = range.end - range.start;
        // A pointer with the owner's write provenance over the registered bytes; the `&mut`
        // ends here, and nothing forms a reference into the bytes until they are handed back.
        let base = NonNull::from(&mut bytes[range.clone()]).cast::<u8>();
        // SAFETY: `base..base + len` are bytes of the owner, which stays in place (StableDeref,
        // inside the Arc) and allocated until the registration is gone (`Region::finish` hands
        // it back, or leaks it, only after `deregister`); they are reached only through raw
        // pointers and leases while registered (see the module doc).
        let mr = unsafe { UserMr::register(pd.driver(), base, len, opts.iova, access)? };
        r.mr = Some(mr);
        r.base = base;
        r.len = len;
        let pool = if peer_writable(access) {
            None
        } else {
            let chunk = opts.chunk.unwrap_or(len).clamp(1, len);
            let mem: Arc<dyn PoolMemory> = region.clone();
            Some(MemoryPool::from_memory(mem, chunk, len / chunk)?)
        };
        Ok(Self {
            region,
            pool,
            access,
        })
    }

    fn mr(&self) -> Option<&UserMr> {
        self.region.mr.as_ref()
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr().map_or(0, UserMr::lkey)
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.mr().map_or(0, UserMr::rkey)
    }

    /// The address work requests and peers use for the first registered byte (the IOVA).
    pub fn addr(&self) -> u64 {
        self.mr().map_or(0, UserMr::addr)
    }

    /// The host address of the first registered byte.
    pub fn host_addr(&self) -> u64 {
        self.region.base.as_ptr() as u64
    }

    /// Registered bytes (exact).
    pub fn len(&self) -> usize {
        self.region.len
    }

    /// Always false (an empty range is refused).
    pub fn is_empty(&self) -> bool {
        self.region.len == 0
    }

    /// The access rights.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }

    /// The driver's registration (keys, MTT pages: research access).
    pub fn driver(&self) -> Option<&UserMr> {
        self.mr()
    }

    /// What a peer needs to READ (or WRITE, where allowed) the region.
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.rkey(),
            len: self.len() as u64,
        }
    }

    /// Leases a chunk of the region ([`MrOptions::chunk`]; the whole region by default), the
    /// first `len` bytes of it being the lease: post it as any lease.
    ///
    /// Errors: [`VerbsError::MrAccessMode`] for a region a peer may write (no leases: rule
    /// 6), [`VerbsError::PoolExhausted`] when every chunk is leased,
    /// [`VerbsError::LeaseTooLarge`].
    pub fn lease(&self, len: usize) -> Result<Lease, VerbsError> {
        match &self.pool {
            Some(p) => p.lease(len),
            None => Err(VerbsError::MrAccessMode {
                what: "a region a peer may write has no leases",
                fix: "copy with OwnedMr::read/write, or register local-only memory to post from",
            }),
        }
    }

    /// Leases alive now (posted or held).
    pub fn leased(&self) -> usize {
        self.pool.as_ref().map_or(0, MemoryPool::leased)
    }

    /// Copies `src` into a region a peer may write, at `offset` (as [`crate::Mr::write`]).
    ///
    /// Errors: [`VerbsError::OutsideMr`]; [`VerbsError::MrAccessMode`] for a leased region
    /// (write through a lease).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        let p = self.copy_target(offset, src.len())?;
        // SAFETY: inside the registered bytes (checked), reached only through raw pointers
        // (no lease exists for this region); `src` is a distinct slice.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.as_ptr(), src.len()) };
        Ok(())
    }

    /// Copies bytes at `offset` of a region a peer may write into `dst`.
    ///
    /// Errors: as [`OwnedMr::write`].
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        let p = self.copy_target(offset, dst.len())?;
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy_target(&self, offset: usize, len: usize) -> Result<NonNull<u8>, VerbsError> {
        if self.pool.is_some() {
            return Err(VerbsError::MrAccessMode {
                what: "a leased region is read and written through its leases",
                fix: "lease it (OwnedMr::lease) and use the lease's slices",
            });
        }
        if offset.checked_add(len).is_none_or(|e| e > self.len()) {
            return Err(VerbsError::OutsideMr {
                offset: offset as u64,
                len: len as u64,
                mr_len: self.len() as u64,
            });
        }
        // SAFETY: offset + len <= len of the registered bytes (checked).
        Ok(unsafe { self.region.base.add(offset) })
    }

    /// Deregisters (DESTROY_MKEY, the pages unmapped and unpinned) and gives the owner back.
    ///
    /// Errors: [`DeregisterError::InUse`] while any lease is alive (nothing changes; the
    /// region comes back), [`DeregisterError::Failed`] if the device may still reach the
    /// memory (the owner is then leaked).
    pub fn deregister(self) -> Result<O, DeregisterError<O>> {
        let OwnedMr {
            region,
            pool,
            access,
        } = self;
        if let Some(pool) = pool
            && let Err(pool) = pool.try_close()
        {
            let leases = pool.leased();
            return Err(DeregisterError::InUse {
                mr: OwnedMr {
                    region,
                    pool: Some(pool),
                    access,
                },
                leases,
            });
        }
        // The pool held the only other reference; no lease can exist any more.
        let mut region = Arc::try_unwrap(region)
            .map_err(|_| DeregisterError::Failed(VerbsError::MrInUse { leases: 0 }))?;
        match region.finish() {
            Ok(Some(o)) => Ok(o),
            Ok(None) => Err(DeregisterError::Failed(VerbsError::MrAccessMode {
                what: "the owner was handed back already",
                fix: "unreachable",
            })),
            Err(e) => Err(DeregisterError::Failed(e)),
        }
    }
}

/// A registered region over memory the caller vouches for: the `unsafe` form of
/// `ibv_reg_mr` / `ibv_reg_mr_iova2`, for callers that manage the memory themselves (the C
/// ABI). Posting from it goes through the driver with [`RawMr::sge`]; peers reach it with
/// [`RawMr::remote`]. Dropping it deregisters (a failed unmap is logged by the driver).
#[derive(Debug)]
pub struct RawMr {
    inner: UserMr,
    _pd: Pd,
}

impl RawMr {
    /// See [`Pd::register_raw`].
    pub(crate) unsafe fn register(
        pd: &Pd,
        addr: NonNull<u8>,
        len: usize,
        access: MkeyAccess,
        iova: Option<u64>,
    ) -> Result<Self, VerbsError> {
        // SAFETY: the caller's contract (Pd::register_raw) is UserMr::register's.
        let inner = unsafe { UserMr::register(pd.driver(), addr, len, iova, access)? };
        Ok(Self {
            inner,
            _pd: pd.clone(),
        })
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// The address work requests and peers use for byte 0 (the IOVA).
    pub fn addr(&self) -> u64 {
        self.inner.addr()
    }

    /// Registered bytes.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The access rights.
    pub fn access(&self) -> MkeyAccess {
        self.inner.access()
    }

    /// The driver's registration.
    pub fn driver(&self) -> &UserMr {
        &self.inner
    }

    /// What a peer needs to reach the region.
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.rkey(),
            len: self.len() as u64,
        }
    }

    /// An SGE over `len` bytes at `off` (for the driver's post calls; not checked).
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        self.inner.sge(off, len)
    }

    /// Deregisters. After `Ok` the memory is the caller's again.
    ///
    /// Errors: the driver's [`crate::driver::DriverError::StillMapped`]: the device may still
    /// reach the memory; keep it mapped for the rest of the process.
    pub fn deregister(self) -> Result<(), VerbsError> {
        Ok(self.inner.deregister()?)
    }
}

impl Pd {
    /// Registers all of `owner`'s bytes with `access`, addressed by their host address
    /// (`ibv_reg_mr`). See [`OwnedMr`].
    ///
    /// Errors: those of [`Pd::register_owned_with`].
    pub fn register_owned<O: MrOwner>(
        &self,
        owner: O,
        access: MkeyAccess,
    ) -> Result<OwnedMr<O>, VerbsError> {
        OwnedMr::register(self, owner, access, MrOptions::default())
    }

    /// Registers part of `owner`'s bytes, at an IOVA of the caller's choice and cut into
    /// leases of a chosen size ([`MrOptions`]; `ibv_reg_mr_iova2`).
    ///
    /// Errors: [`VerbsError::BadMrRange`], [`VerbsError::PoolSize`] (a chunk that does not
    /// divide into the region), and the driver's: an IOVA with another page offset than the
    /// bytes (`IovaOffsetMismatch`), the locked-memory limit (`Backend(MemlockLimit)`, with
    /// the numbers and the fix), CREATE_MKEY failures.
    pub fn register_owned_with<O: MrOwner>(
        &self,
        owner: O,
        access: MkeyAccess,
        opts: MrOptions,
    ) -> Result<OwnedMr<O>, VerbsError> {
        OwnedMr::register(self, owner, access, opts)
    }

    /// Registers `len` bytes at `addr` with `access`, addressed from `iova` (`None`: the host
    /// address).
    ///
    /// # Safety
    /// - `addr..addr + len` is memory of this process that stays mapped and allocated until
    ///   the returned [`RawMr`] is deregistered: [`RawMr::deregister`] returned `Ok`, or it was
    ///   dropped (after a failed unmap, which the driver logs, it must stay for good).
    /// - While registered the device reads those bytes and, as `access` allows, writes them
    ///   (receives and READ results with LOCAL_WRITE; a peer at any time with REMOTE_WRITE or
    ///   REMOTE_ATOMIC). No Rust reference to them may exist while the device may write them:
    ///   touch them through raw pointers only.
    /// - Bytes a posted work request names must not be changed (sources) or read (targets)
    ///   until its completion is polled.
    ///
    /// The rest of the pages holding the range is the caller's: the device never touches it.
    ///
    /// Errors: as [`Pd::register_owned_with`].
    pub unsafe fn register_raw(
        &self,
        addr: NonNull<u8>,
        len: usize,
        access: MkeyAccess,
        iova: Option<u64>,
    ) -> Result<RawMr, VerbsError> {
        // SAFETY: the caller's contract above.
        unsafe { RawMr::register(self, addr, len, access, iova) }
    }
}
