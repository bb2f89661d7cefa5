//! Protection domains: the scope of memory regions, pools and QPs.
//!
//! Owns: [`Pd`] (a handle on the driver's PD that keeps the [`Context`] alive) and the entry
//! points that register memory in it. Must not: build commands (the driver does).

use std::sync::Arc;

use crate::context::Context;
use crate::driver::mr::MkeyAccess;
use crate::driver::pd::Pd as DriverPd;
use crate::error::VerbsError;
use crate::mr::Mr;
use crate::pool::MemoryPool;

/// A protection domain. Cloning is cheap (an `Arc`); DEALLOC_PD runs when the last clone and
/// the last MR, pool or QP made in it are gone.
#[derive(Debug, Clone)]
pub struct Pd {
    inner: Arc<DriverPd>,
    ctx: Arc<Context>,
}

impl Pd {
    pub(crate) fn alloc(ctx: &Arc<Context>) -> Result<Self, VerbsError> {
        Ok(Pd {
            inner: DriverPd::alloc(ctx.hca())?,
            ctx: ctx.clone(),
        })
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn()
    }

    /// The context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn driver(&self) -> &Arc<DriverPd> {
        &self.inner
    }

    /// Allocates `len` bytes of zeroed, pinned DMA memory and registers it with `access`.
    /// Use it for memory a peer reads or writes ([`Mr::remote`]); for local message buffers,
    /// prefer a [`MemoryPool`] ([`Pd::create_pool`]).
    ///
    /// ```
    /// use bypass_verbs::{Access, Context};
    /// use bypass_testbed::SimContext;
    /// let pair = Context::sim_pair(1)?;
    /// let pd = pair.a.alloc_pd()?;
    /// let mr = pd.register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    /// mr.write(0, b"hello")?;
    /// let mut b = [0u8; 5];
    /// mr.read(0, &mut b)?;
    /// assert_eq!(&b, b"hello");
    /// # Ok::<(), bypass_verbs::VerbsError>(())
    /// ```
    pub fn register(&self, len: usize, access: MkeyAccess) -> Result<Mr, VerbsError> {
        Mr::register(self, len, access)
    }

    /// Registers one region of `chunk * count` bytes (local access only: see the crate docs,
    /// rule 6) and cuts it into `count` leasable chunks of `chunk` bytes.
    ///
    /// ```
    /// use bypass_verbs::Context;
    /// use bypass_testbed::SimContext;
    /// let pair = Context::sim_pair(1)?;
    /// let pool = pair.a.alloc_pd()?.create_pool(4096, 16)?;
    /// let mut lease = pool.lease(100)?;
    /// lease.as_mut_slice().fill(7);
    /// assert_eq!(pool.leased(), 1);
    /// drop(lease);
    /// assert_eq!(pool.leased(), 0);
    /// # Ok::<(), bypass_verbs::VerbsError>(())
    /// ```
    pub fn create_pool(&self, chunk: usize, count: usize) -> Result<MemoryPool, VerbsError> {
        let len = chunk
            .checked_mul(count)
            .filter(|&n| n > 0)
            .ok_or(VerbsError::PoolSize {
                chunk,
                count,
                have: 0,
            })?;
        let mr = Mr::register(self, len, MkeyAccess::LOCAL_WRITE)?;
        MemoryPool::from_memory(Arc::new(mr), chunk, count)
    }
}
