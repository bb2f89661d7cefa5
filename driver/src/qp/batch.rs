//! A batch of one-SGE RDMA WRITEs under one doorbell: rdma-core's extended post API with
//! several WQEs between `ibv_wr_start` and `ibv_wr_complete` (`providers/mlx5/qp.c`
//! `mlx5_send_wr_start`, `mlx5_send_wr_rdma_write` + `mlx5_send_wr_set_sge` per WQE,
//! `mlx5_send_wr_complete` → `post_send_db` once: BlueFlame only when the batch holds one
//! WQE, otherwise the 8-byte doorbell of the last one).
//!
//! Owns: [`WriteBatch`]. Must not: build WQE bytes (`post_write.rs`) or ring doorbells other
//! than through [`Qp`]'s doorbell sequence.

use crate::post::{PostError, RemoteAddr, SendFlags, Sge};
use crate::post_refused::{PostRefused, Refusal};
use crate::post_write::{WriteWqe, write_rdma_write};

use super::Qp;

/// RDMA WRITEs written to the SQ but not yet announced: [`WriteBatch::write`] adds one,
/// [`WriteBatch::complete`] (or dropping the batch) rings one doorbell for all of them. Holds
/// the QP (`&mut`), so nothing else posts in between. A batch leaked with `mem::forget` rings
/// nothing: its WQEs stay written and counted, and the QP's next doorbell announces them.
#[derive(Debug)]
pub struct WriteBatch<'a> {
    qp: &'a mut Qp,
    /// WQEs written so far.
    n: u32,
    /// The last one (valid when `n > 0`).
    last: WriteWqe,
}

impl Qp {
    /// Starts a batch of RDMA WRITEs (rdma-core `ibv_wr_start`). The QP must be able to take
    /// [`Qp::post_write`] (RC, in RTS/SQD/ERR, at least one send SGE): otherwise the error
    /// that says why, and no batch.
    #[inline]
    pub fn write_batch(&mut self) -> Result<WriteBatch<'_>, PostError> {
        if !self.write_ok {
            return Err(self.write_refusal().into());
        }
        Ok(WriteBatch {
            qp: self,
            n: 0,
            last: WriteWqe {
                slot: 0,
                doorbell: 0,
            },
        })
    }
}

impl WriteBatch<'_> {
    /// Writes an RDMA WRITE of `local` to `remote` (rdma-core `ibv_wr_rdma_write` +
    /// `ibv_wr_set_sge`): the same WQE as [`Qp::post_write`], not yet visible to the NIC.
    /// [`Refusal::SqFull`] when the SQ has no free WQEBB (the WQEs written before stay in
    /// the batch; complete it, poll, and go on).
    #[inline]
    pub fn write(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<(), PostRefused> {
        let q = &mut *self.qp;
        let Some(w) = write_rdma_write(
            &mut q.sq,
            &q.shared,
            &q.write_tpl,
            wr_id,
            &local,
            &remote,
            flags,
        ) else {
            return Err(PostRefused::new(q.res.qpn, Refusal::SqFull));
        };
        self.last = w;
        self.n += 1;
        Ok(())
    }

    /// WQEs written so far.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// True when nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Rings one doorbell for the batch (rdma-core `ibv_wr_complete`); nothing when it is
    /// empty. Same as dropping it.
    #[inline]
    pub fn complete(self) {}
}

impl Drop for WriteBatch<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.n > 0 {
            // rdma-core `post_send_db`: BlueFlame only for a lone WQE.
            self.qp.ring_write(self.last, self.n == 1);
        }
    }
}
