//! A batch of RDMA WRITEs posted with one doorbell, safely: [`crate::Qp::write_batch`] starts it,
//! [`WriteBatch::write`] adds a one-buffer WRITE (its buffer parked in the QP until a
//! completion is reclaimed, as [`crate::Qp::post_send`] parks it), dropping or
//! [`WriteBatch::complete`] rings the doorbell once for all of them.
//!
//! Owns: [`WriteBatch`]. Must not: write WQEs or ring doorbells (the driver's
//! `bypass_driver::qp::WriteBatch` does), or release a parked buffer (`outstanding` does).
//! Sources: rdma-core's extended post API (`ibv_wr_start`, `ibv_wr_rdma_write`,
//! `ibv_wr_set_sge`, `ibv_wr_complete`; `providers/mlx5/qp.c` `mlx5_send_wr_complete` rings
//! one doorbell for the batch).

use crate::driver::post::{PostError, SendFlags};
use crate::driver::qp::WriteBatch as DriverBatch;
use crate::endpoint::RemoteBuffer;
use crate::error::VerbsError;
use crate::lower;
use crate::outstanding::Outstanding;
use crate::wr::{LocalBuf, SgeList};

/// RDMA WRITEs written to the send queue but not yet announced to the NIC. Holds the QP
/// (`&mut`), so nothing else posts in between; the doorbell rings when it drops.
pub struct WriteBatch<'a> {
    // Declared first: the doorbell rings (the driver batch drops) before anything else.
    inner: DriverBatch<'a>,
    sq: &'a mut Outstanding,
    last_send: &'a mut Option<(u32, u32)>,
    /// The send CQ's consumer count when the batch started (the `posted_at` of its WQEs).
    seq: u64,
}

impl std::fmt::Debug for WriteBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("written", &self.inner.len())
            .field("next_pos", &self.inner.sq_cur_post())
            .finish_non_exhaustive()
    }
}

impl<'a> WriteBatch<'a> {
    /// A batch over the driver's, parking into `sq` with `posted_at` `seq`
    /// ([`crate::Qp::write_batch`] passes its own parts).
    pub(crate) fn new(
        inner: DriverBatch<'a>,
        sq: &'a mut Outstanding,
        last_send: &'a mut Option<(u32, u32)>,
        seq: u64,
    ) -> Self {
        Self {
            inner,
            sq,
            last_send,
            seq,
        }
    }

    /// Adds an RDMA WRITE of all of `src` to `remote` (a [`crate::SharedLease`] clone when
    /// many WRITEs read one buffer), asking for a completion when `signaled`. The buffer is
    /// parked in the QP until a completion for it (or a later one) is reclaimed.
    ///
    /// Errors (nothing written, `src` back in its pool): [`VerbsError::RemoteTooSmall`] when
    /// `src` is longer than `remote`; the driver's "send queue full" when the SQ has no free
    /// WQEBB (the WRITEs added before stay in the batch: drop it, poll, reclaim, go on).
    #[inline]
    pub fn write(
        &mut self,
        wr_id: u64,
        src: impl Into<LocalBuf>,
        remote: RemoteBuffer,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let bufs = SgeList::one(src);
        let (sges, _) = lower::sges(&bufs)?;
        let local = sges[0];
        lower::fits(&remote, u64::from(local.length))?;
        let flags = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let start = self.inner.sq_cur_post();
        // SAFETY: `local` is the SGE of the buffer `bufs` owns (a WRITE only reads it), parked
        // in the QP's outstanding table right after until its completion.
        unsafe { self.inner.write(wr_id, local, lower::raddr(&remote), flags) }
            .map_err(PostError::from)?;
        let n = self.inner.sq_cur_post().wrapping_sub(start);
        self.sq.park(start, n, bufs, self.seq);
        *self.last_send = Some((start, n));
        Ok(())
    }

    /// WRITEs added so far.
    pub fn len(&self) -> u32 {
        self.inner.len()
    }

    /// True when nothing was added yet.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Rings one doorbell for the batch (nothing when it is empty); the same as dropping it.
    pub fn complete(self) {}
}
