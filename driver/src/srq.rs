//! Shared receive queues: [`Srq`] (CREATE_RMP, MODIFY_RMP to arm the limit, QUERY_RMP,
//! DESTROY_RMP), its WQE list, and [`Srq::post_srq_recv`].
//!
//! Owns: the SRQ buffer and doorbell record, the free list of WQEs (`head`/`tail` over the
//! next segments' links), the `wr_id` table the SRQ's completions index ([`SrqShared`]), and
//! the RMP commands. Must not: poll CQs (the poller hands a receive CQE of a QP on an SRQ to
//! [`SrqShared::complete`]) or create QPs (`qp.rs` attaches one).
//!
//! Sources: which command: the kernel's `mlx5_ib` `srq_cmd.c` (`create_srq_split`: on ISSI 1
//! and later a basic SRQ is an RMP; `create_rmp_cmd`, `arm_rmp_cmd`, `query_rmp_cmd`,
//! `destroy_rmp_cmd`; `set_wq`: `log_wq_stride = wqe_shift + 4` when `wqe_shift` counts
//! 16-byte units, i.e. log2 of the stride in bytes) and `srq.c` (`mlx5_ib_create_srq`:
//! `max_wr` below `1 << log_max_srq_sz`, `mlx5_ib_modify_srq`: a limit at or above the size is
//! refused with EINVAL). The WQE list: rdma-core `providers/mlx5/srq.c` (`mlx5_alloc_srq_buf`:
//! `max = roundup_pow_of_two(max_wr + 1)` WQEs linked `i -> i + 1`, `head = 0`,
//! `tail = max - 1`; `mlx5_post_srq_recv`: full when `head == tail`, the `wr_id` at `head`,
//! `head` follows the WQE's `next_wqe_index`, the terminator after a short scatter list, the
//! posted count (BE32) to the doorbell record after a barrier; `mlx5_free_srq_wqe`: a
//! completed WQE is linked after `tail` under the SRQ's lock). The wait queue rdma-core
//! keeps for ODP page faults is not kept (no ODP here).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::caps::CmdHcaCap;
use bypass_hw::cmd::rmp::{
    CreateRmpIn, CreateRmpOut, DestroyRmpIn, ModifyRmpIn, QueryRmpIn, QueryRmpOut,
    create_rmp_in_len, state as rmp_state,
};
use bypass_hw::srq_wqe::{SRQ_NEXT_SEG_LEN, SrqNextSeg, srq_wqe_stride};
use bypass_hw::wqe::DataSeg;
use zerocopy::IntoBytes;

use crate::barrier::udma_to_device_barrier;
use crate::cmdq::input;
use crate::dma::DmaBuf;
use crate::error::{DriverError, Result};
use crate::pd::Pd;
use crate::post::{PostError, PostListError, RecvWr};
use crate::wq::RingPtr;

/// What an SRQ is created with (ibverbs `struct ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive work requests it holds at once.
    pub max_wr: u32,
    /// Scatter entries per work request.
    pub max_sge: u32,
    /// The limit armed at creation (0: none): an SRQ_LIMIT event once fewer WQEs are posted.
    pub srq_limit: u32,
}

impl Default for SrqAttr {
    fn default() -> Self {
        Self {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        }
    }
}

/// The free list: rdma-core's `head`, `tail` and `counter`.
#[derive(Debug)]
struct FreeList {
    head: u16,
    tail: u16,
    /// WQEs posted, wrapping (the doorbell record's value).
    counter: u32,
}

/// What the SRQ's posts and its completions share: the buffer, the free list, the `wr_id`s.
#[derive(Debug)]
pub struct SrqShared {
    srqn: u32,
    ring: RingPtr,
    dbr: RingPtr,
    stride: usize,
    /// WQEs in the buffer (a power of two).
    wqes: u32,
    max_sge: usize,
    list: Mutex<FreeList>,
    wrid: Box<[AtomicU64]>,
    // The memory the rings point into; dropped after them (field order), and only when the
    // last QP attached and the `Srq` are gone.
    _buf: DmaBuf,
    _dbr: DmaBuf,
}

impl SrqShared {
    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    fn link(&self, at: u16, next: u16) {
        let off = (u32::from(at) & (self.wqes - 1)) as usize * self.stride;
        self.ring.write(off, SrqNextSeg::new(next).as_bytes());
    }

    /// A receive CQE named SRQ WQE `index` (`wqe_counter`): its `wr_id`, and the WQE goes back
    /// to the free list (rdma-core `cq.c` `handle_responder` + `mlx5_free_srq_wqe`).
    pub fn complete(&self, index: u16) -> u64 {
        let slot = (u32::from(index) & (self.wqes - 1)) as usize;
        let wr_id = self.wrid.get(slot).map_or(0, |w| w.load(Ordering::Relaxed));
        let mut l = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        self.link(l.tail, index);
        l.tail = index;
        wr_id
    }
}

/// A shared receive queue. QPs created on it ([`crate::qp::Qp::create_on_srq`]) take their
/// receives from it; DESTROY_RMP runs when it drops (or [`Srq::destroy`]), which the device
/// refuses while a QP is attached.
#[derive(Debug)]
pub struct Srq {
    shared: Arc<SrqShared>,
    pd: Arc<Pd>,
    max_wr: u32,
    /// DESTROY_RMP has not succeeded yet (`Drop` sends it while true).
    live: bool,
}

/// `log2(n)` of a power of two.
fn log2(n: u32) -> u32 {
    n.trailing_zeros()
}

impl Srq {
    /// CREATE_RMP in `pd`, sized for `attr`.
    ///
    /// Errors: [`DriverError::Unsupported`] for sizes the device does not take (`max_wr` 0 or
    /// not below `1 << log_max_srq_sz`, a WQE above `max_wqe_sz_rq`, a limit at or above
    /// `max_wr`); the command's failure otherwise.
    pub fn create(pd: &Arc<Pd>, attr: &SrqAttr) -> Result<Self> {
        let hca = pd.hca().clone();
        let caps = hca.caps();
        let log_max = CmdHcaCap::wrap_unchecked(&caps.general_page[..]).log_max_srq_sz();
        if attr.max_wr == 0 || u64::from(attr.max_wr) >= 1u64 << log_max.min(31) {
            return Err(DriverError::Unsupported {
                what: "an SRQ of this many work requests (max_wr 0 or not below 2^log_max_srq_sz)",
                fix: "ask for between 1 and 2^log_max_srq_sz - 1 work requests",
            });
        }
        let stride = srq_wqe_stride(attr.max_sge.max(1))
            .filter(|&s| s <= u32::from(caps.max_wqe_sz_rq))
            .ok_or(DriverError::Unsupported {
                what: "an SRQ WQE this large (max_sge too large for max_wqe_sz_rq)",
                fix: "ask for fewer scatter entries",
            })?;
        let wqes = (attr.max_wr + 1).next_power_of_two();
        if attr.srq_limit >= attr.max_wr {
            return Err(DriverError::Unsupported {
                what: "an SRQ limit at or above max_wr",
                fix: "arm a limit below the SRQ's max_wr",
            });
        }
        let len = wqes as usize * stride as usize;
        let buf = hca.alloc_dma(len)?;
        let dbr = hca.alloc_dma(64)?;
        // SAFETY: `buf` holds `len` bytes and `dbr` 64; both live in the `SrqShared` that owns
        // these rings, and are dropped after them (field order).
        let (Some(ring), Some(dbr_ring)) = (unsafe {
            (
                RingPtr::new(buf.as_ptr(), len),
                RingPtr::new(dbr.as_ptr(), 64),
            )
        }) else {
            return Err(DriverError::Unsupported {
                what: "an SRQ buffer whose size is not a power of two",
                fix: "this is a driver bug: report it",
            });
        };
        let pages: Vec<u64> = (0..len.div_ceil(4096))
            .map(|k| buf.iova_at(k * 4096))
            .collect::<Result<_>>()?;
        let e = |source| DriverError::BuildInput {
            what: "CREATE_RMP",
            source,
        };
        let mut i = input(Opcode::CREATE_RMP, 0, create_rmp_in_len(pages.len()));
        {
            let mut c = CreateRmpIn::new_checked(&mut i[..]).map_err(e)?;
            for (k, &pa) in pages.iter().enumerate() {
                c.set_pas(k, pa).map_err(e)?;
            }
            let mut ctx = c.ctx_mut();
            ctx.set_state(rmp_state::RDY.into()).map_err(e)?;
            let mut wq = ctx.wq_mut();
            wq.set_log_wq_pg_sz(0).map_err(e)?;
            wq.set_log_wq_stride(log2(stride)).map_err(e)?;
            wq.set_log_wq_sz(log2(wqes)).map_err(e)?;
            wq.set_lwm(attr.srq_limit).map_err(e)?;
            wq.set_pd(pd.pdn()).map_err(e)?;
            wq.set_dbr_addr(dbr.iova()).map_err(e)?;
        }
        let shared = SrqShared {
            srqn: 0,
            ring,
            dbr: dbr_ring,
            stride: stride as usize,
            wqes,
            max_sge: (stride as usize - SRQ_NEXT_SEG_LEN) / 16,
            list: Mutex::new(FreeList {
                head: 0,
                tail: (wqes - 1) as u16,
                counter: 0,
            }),
            wrid: (0..wqes).map(|_| AtomicU64::new(0)).collect(),
            _buf: buf,
            _dbr: dbr,
        };
        // The free list before the device sees the buffer (`set_srq_buf_ll`).
        for k in 0..wqes - 1 {
            shared.link(k as u16, (k + 1) as u16);
        }
        let o = hca.exec_create(&i, CreateRmpOut::LEN, crate::limits::Resource::Srq)?;
        let srqn = CreateRmpOut::new_checked(&o[..])
            .map_err(|source| DriverError::BadOutput {
                op: Opcode::CREATE_RMP,
                source,
            })?
            .rmpn();
        tracing::debug!(srqn, wqes, stride, "CREATE_RMP");
        Ok(Self {
            shared: Arc::new(SrqShared { srqn, ..shared }),
            pd: pd.clone(),
            max_wr: wqes - 1,
            live: true,
        })
    }

    /// The SRQ number (`qpc.srqn_rmpn_xrqn` of the QPs on it).
    pub fn srqn(&self) -> u32 {
        self.shared.srqn
    }

    /// Work requests it holds at once (at least the `max_wr` asked for).
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// Scatter entries per work request.
    pub fn max_sge(&self) -> usize {
        self.shared.max_sge
    }

    /// Its PD.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The bookkeeping its QPs and completions share.
    pub fn shared(&self) -> &Arc<SrqShared> {
        &self.shared
    }

    /// QPs attached (holding its bookkeeping).
    pub fn attached(&self) -> usize {
        Arc::strong_count(&self.shared) - 1
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): one SRQ_LIMIT event once fewer
    /// than `limit` WQEs are posted, then disarmed (MODIFY_RMP, `arm_rmp_cmd`).
    ///
    /// Errors: [`DriverError::Unsupported`] for a limit at or above `max_wr` (as
    /// `mlx5_ib_modify_srq`), or the command's failure.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        if limit >= self.max_wr {
            return Err(DriverError::Unsupported {
                what: "an SRQ limit at or above max_wr",
                fix: "arm a limit below the SRQ's max_wr",
            });
        }
        let e = |source| DriverError::BuildInput {
            what: "MODIFY_RMP",
            source,
        };
        let mut i = input(Opcode::MODIFY_RMP, 0, ModifyRmpIn::LEN);
        {
            let mut m = ModifyRmpIn::new_checked(&mut i[..]).map_err(e)?;
            m.set_rmp_state(rmp_state::RDY.into()).map_err(e)?;
            m.set_rmpn(self.srqn()).map_err(e)?;
            m.bitmask_mut().set_lwm(1).map_err(e)?;
            let mut ctx = m.ctx_mut();
            ctx.set_state(rmp_state::RDY.into()).map_err(e)?;
            ctx.wq_mut().set_lwm(limit).map_err(e)?;
        }
        self.pd.hca().cmdq().exec(&i, 16)?;
        Ok(())
    }

    /// QUERY_RMP: the attributes as the device holds them (`query_rmp_cmd` + `get_wq`):
    /// `max_wr`, `max_sge`, and the limit still armed (0 once it fired).
    pub fn query(&self) -> Result<SrqAttr> {
        let mut i = input(Opcode::QUERY_RMP, 0, QueryRmpIn::LEN);
        QueryRmpIn::new_checked(&mut i[..])
            .and_then(|mut q| q.set_rmpn(self.srqn()).map(|_| ()))
            .map_err(|source| DriverError::BuildInput {
                what: "QUERY_RMP",
                source,
            })?;
        let o = self.pd.hca().cmdq().exec(&i, QueryRmpOut::LEN)?;
        let q = QueryRmpOut::new_checked(&o[..]).map_err(|source| DriverError::BadOutput {
            op: Opcode::QUERY_RMP,
            source,
        })?;
        let ctx = q.rmp_context();
        let wq = ctx.wq();
        let wqes = 1u32 << wq.log_wq_sz().min(16);
        let stride = 1usize << wq.log_wq_stride().min(12);
        Ok(SrqAttr {
            max_wr: wqes - 1,
            max_sge: (stride.saturating_sub(SRQ_NEXT_SEG_LEN) / 16) as u32,
            srq_limit: wq.lwm(),
        })
    }

    /// DESTROY_RMP now. The device refuses it while a QP is attached: the SRQ comes back with
    /// the error.
    pub fn destroy(mut self) -> core::result::Result<(), (Self, DriverError)> {
        match self.destroy_cmd() {
            Ok(()) => {
                self.live = false;
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }

    fn destroy_cmd(&self) -> Result<()> {
        let mut i = input(Opcode::DESTROY_RMP, 0, DestroyRmpIn::LEN);
        DestroyRmpIn::new_checked(&mut i[..])
            .and_then(|mut d| d.set_rmpn(self.srqn()).map(|_| ()))
            .map_err(|source| DriverError::BuildInput {
                what: "DESTROY_RMP",
                source,
            })?;
        self.pd.hca().cmdq().exec(&i, 16)?;
        Ok(())
    }

    /// Writes one receive at the list's head (`mlx5_post_srq_recv`'s loop body); the WQE's
    /// index.
    fn write(&self, l: &mut FreeList, wr: &RecvWr<'_>) -> core::result::Result<u16, PostError> {
        let s = &self.shared;
        if wr.sges.len() > s.max_sge {
            return Err(PostError::TooManySges {
                qpn: s.srqn,
                queue: "srq",
                got: wr.sges.len(),
                max: s.max_sge,
            });
        }
        if l.head == l.tail {
            return Err(PostError::SrqFull {
                srqn: s.srqn,
                depth: self.max_wr,
            });
        }
        let slot = (u32::from(l.head) & (s.wqes - 1)) as usize;
        if let Some(w) = s.wrid.get(slot) {
            w.store(wr.wr_id, Ordering::Relaxed);
        }
        let base = slot * s.stride;
        let mut next = [0u8; 2];
        s.ring.read(base + 2, &mut next);
        let mut off = base + SRQ_NEXT_SEG_LEN;
        for g in wr.sges {
            s.ring
                .write(off, DataSeg::new(g.length, g.lkey, g.addr).as_bytes());
            off += 16;
        }
        if wr.sges.len() < s.max_sge {
            s.ring.write(off, DataSeg::end_of_list().as_bytes());
        }
        let index = l.head;
        l.head = u16::from_be_bytes(next);
        l.counter = l.counter.wrapping_add(1);
        Ok(index)
    }

    /// Posts one receive to the SRQ (`ibv_post_srq_recv`): whichever QP on it receives the
    /// next message takes it. Returns the index of the WQE it took (the `wqe_counter` of its
    /// completion).
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the SRQ is destroyed.
    pub unsafe fn post_srq_recv(&self, wr: &RecvWr<'_>) -> core::result::Result<u16, PostError> {
        let mut l = self
            .shared
            .list
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let index = self.write(&mut l, wr)?;
        udma_to_device_barrier();
        self.shared.dbr.write_be32(0, l.counter);
        Ok(index)
    }

    /// Posts a list of receives with one doorbell-record update.
    ///
    /// # Safety
    /// The contract of [`crate::post`] ("Posting is unsafe"): every SGE names registered memory
    /// that no Rust reference covers while the device may access it, which stays registered
    /// and mapped until the WQE's completion is polled or the SRQ is destroyed.
    pub unsafe fn post_srq_recv_list(
        &self,
        wrs: &[RecvWr<'_>],
    ) -> core::result::Result<(), PostListError> {
        let mut l = self
            .shared
            .list
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut res = Ok(());
        let mut n = 0;
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = self.write(&mut l, wr) {
                res = Err(PostListError { index, error });
                break;
            }
            n += 1;
        }
        if n > 0 {
            udma_to_device_barrier();
            self.shared.dbr.write_be32(0, l.counter);
        }
        res
    }

    /// The buffer's base address (research access and tests).
    pub fn ring_base(&self) -> NonNull<u8> {
        self.shared.ring.base()
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        if let Err(e) = self.destroy_cmd() {
            tracing::error!(srqn = self.srqn(), error = %e, "DESTROY_RMP failed; the SRQ leaks");
        }
    }
}
