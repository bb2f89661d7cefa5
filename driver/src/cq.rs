//! Completion queues: the ring (from `alloc_dma`, every CQE initialised invalid), the doorbell
//! record, CREATE_CQ reporting to the completion EQ of the vector its creator chose (`c_eqn`),
//! polling (see `poll.rs`), arming with the arm sequence number, and a blocking wait on the
//! CQ's own events (`cq_events.rs`, `comp_channel.rs`). DESTROY_CQ on drop.
//!
//! Follows rdma-core `providers/mlx5/cq.c` (`mlx5_alloc_cq_buf` initialisation, `mlx5_arm_cq`:
//! DBR arm word, `mmio_wc_start`, 64-bit doorbell at UAR + `MLX5_CQ_DOORBELL`,
//! `mmio_flush_writes`; `mlx5_cq_event`: `arm_sn++` per event) and `tests/mlx5_base.py`
//! `create_cq` for the `cqc` fields (cqe_sz 64: the size the poller reads, log size, uar page,
//! `c_eqn`, dbr address).
//!
//! Owns: [`Cq`], [`CqShared`]. Must not: decode CQEs (`poll.rs`) or create the EQ (the
//! `Hca` owns it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::cq::{CreateCqIn, CreateCqOut, DestroyCqIn, cqe_sz, create_cq_in_len};
use bypass_hw::doorbell::{cq_arm_doorbell, cq_arm_value};
use bypass_hw::uar::{MLX5_CQ_DOORBELL, uar_bar_offset};

use crate::barrier::{mmio_flush_writes, mmio_wc_start};
use crate::cmdq::input;
use crate::comp_channel::{ChannelCore, CompletionChannel};
use crate::completion::CQE_SIZE;
use crate::cq_events::CqEventSink;
use crate::dma::DmaBuf;
use crate::error::{DriverError, Result};
use crate::hca::Hca;
use crate::poll::{CqPollGuard, CqPoller, QpTable, WorkCompletion};
use crate::wq::RingPtr;

/// The `cqc.cqe_sz` code of the CQE size the poller reads ([`CQE_SIZE`]): one constant for
/// both, checked when this compiles.
const CQE_SZ: u8 = match cqe_sz::from_bytes(CQE_SIZE) {
    Some(code) => code,
    None => panic!("CQE_SIZE is not a size cqc.cqe_sz can encode"),
};

/// The `op_own` every CQE starts with: opcode INVALID, owner 1 (as the raw test driver and
/// rdma-core's DEVX tests initialise it; never software-owned whatever the lap).
pub const CQE_INIT_OP_OWN: u8 = 0xf1;

/// The part of a CQ that QPs hold on to: its number, its memory and the table of QPs that
/// report to it. DESTROY_CQ runs when the last holder (the [`Cq`], its QPs) drops.
#[derive(Debug)]
pub struct CqShared {
    hca: Arc<Hca>,
    cqn: u32,
    table: Arc<QpTable>,
    // Views of `buf` and `dbr` for cleaning (see `clean`).
    ring: RingPtr,
    dbr_ring: RingPtr,
    nent: u32,
    // Dropped after DESTROY_CQ (see `Drop`): the device may write them until then.
    buf: DmaBuf,
    dbr: DmaBuf,
}

impl CqShared {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The QPs reporting to this CQ.
    pub fn table(&self) -> &Arc<QpTable> {
        &self.table
    }

    /// Removes every unpolled CQE of QP `qpn` from the ring (rdma-core `__mlx5_cq_clean`; see
    /// [`QpTable::clean`]) and returns how many. Called after DESTROY_QP and 2RST, when the
    /// device writes no more CQEs for that QP; waits while a poll of this CQ is in progress.
    pub fn clean(&self, qpn: u32) -> u32 {
        let n = self.table.clean(&self.ring, self.nent, &self.dbr_ring, qpn);
        if n > 0 {
            tracing::debug!(
                cqn = self.cqn,
                qpn,
                dropped = n,
                "CQ cleaned of a QP's CQEs"
            );
        }
        n
    }

    /// IOVA of the ring (research access).
    pub fn ring_iova(&self) -> u64 {
        self.buf.iova()
    }

    /// IOVA of the doorbell record.
    pub fn dbr_iova(&self) -> u64 {
        self.dbr.iova()
    }
}

impl Drop for CqShared {
    fn drop(&mut self) {
        let mut i = input(Opcode::DESTROY_CQ, 0, DestroyCqIn::LEN);
        if let Ok(mut d) = DestroyCqIn::new_checked(&mut i[..]) {
            let _ = d.set_cqn(self.cqn);
        }
        if let Err(e) = self.hca.cmdq().exec(&i, 16) {
            tracing::error!(cqn = self.cqn, error = %e, "DESTROY_CQ failed; the CQ leaks");
        }
    }
}

/// A completion queue and its consumer state. Polling takes `&mut self`: one poller at a
/// time, no lock.
#[derive(Debug)]
pub struct Cq {
    // `poller` points into `shared`'s buffers: declared first so it is dropped first.
    poller: CqPoller,
    shared: Arc<CqShared>,
    events: Arc<CqEventSink>,
    uar_offset: u64,
}

/// How a CQ reports its events (`ibv_create_cq`'s `channel` and `comp_vector`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CqConfig<'a> {
    /// The completion vector (`0..Hca::num_comp_vectors()`): the EQ, and so the MSI-X vector,
    /// its events go to.
    pub comp_vector: u32,
    /// The completion channel its events are queued on (`None`: only `Cq::wait` sees them).
    pub channel: Option<&'a CompletionChannel>,
}

impl Cq {
    /// Creates a CQ of at least `min_cqes` entries (rounded up to a power of two) reporting
    /// to the HCA's completion EQ.
    ///
    /// Errors: no completion EQ (open the `Hca` with one), a size beyond `log_max_cq_sz`, DMA
    /// or command failures.
    pub fn create(hca: &Arc<Hca>, min_cqes: u32) -> Result<Self> {
        Self::create_with(hca, min_cqes, CqConfig::default())
    }

    /// [`Cq::create`] on completion vector `config.comp_vector`, its events queued on
    /// `config.channel` if given (libibverbs `ibv_create_cq(ctx, cqe, ctx, channel,
    /// comp_vector)`).
    ///
    /// Errors: as [`Cq::create`]; [`DriverError::NoCompVector`] for a vector the HCA does not
    /// have; [`DriverError::Unsupported`] for a channel made on another HCA.
    pub fn create_with(hca: &Arc<Hca>, min_cqes: u32, config: CqConfig<'_>) -> Result<Self> {
        if hca.num_comp_vectors() == 0 {
            return Err(DriverError::Unsupported {
                what: "completion queues without a completion EQ",
                fix: "open the Hca with HcaConfig { completion_eq: true, .. } on a device with at least two MSI-X vectors",
            });
        }
        let ceq = usize::try_from(config.comp_vector)
            .ok()
            .and_then(|v| hca.completion_eqs().get(v))
            .ok_or(DriverError::NoCompVector {
                vector: config.comp_vector,
                available: hca.num_comp_vectors(),
            })?;
        if config.channel.is_some_and(|c| !c.is_on(hca)) {
            return Err(DriverError::Unsupported {
                what: "a CQ on a completion channel of another device",
                fix: "make the channel on the same Hca (Context) as the CQ",
            });
        }
        let (eqn, vector) = (ceq.eqn(), ceq.vector());
        // The cap is checked on the caller's value before rounding: `u32::MAX` has no power
        // of two above it in a u32.
        let max = hca.caps().max_cqe();
        if min_cqes > max {
            return Err(DriverError::CqTooLarge {
                asked: min_cqes,
                max,
            });
        }
        let nent = min_cqes.max(2).next_power_of_two();
        let log = nent.trailing_zeros() as u8;
        let bytes = nent as usize * CQE_SIZE;
        let buf = hca.alloc_dma(bytes.max(4096))?;
        for k in 0..nent as usize {
            buf.write(k * CQE_SIZE + CQE_SIZE - 1, &[CQE_INIT_OP_OWN])?;
        }
        let dbr = hca.alloc_dma(64)?;
        let uar = hca.uar_index();
        let npages = bytes.div_ceil(4096);
        let mut i = input(Opcode::CREATE_CQ, 0, create_cq_in_len(npages));
        {
            let e = |source| DriverError::BuildInput {
                what: "CREATE_CQ",
                source,
            };
            let mut c = CreateCqIn::new_checked(&mut i[..]).map_err(e)?;
            for k in 0..npages {
                c.set_pas(k, buf.iova_at(k * 4096)?).map_err(e)?;
            }
            let mut x = c.cqc_mut();
            x.set_cqe_sz(CQE_SZ.into()).map_err(e)?;
            x.set_log_cq_size(log.into()).map_err(e)?;
            x.set_uar_page(uar).map_err(e)?;
            x.set_c_eqn(eqn).map_err(e)?;
            x.set_log_page_size(0).map_err(e)?;
            x.set_dbr_addr(dbr.iova()).map_err(e)?;
        }
        let o = hca.exec_create(&i, CreateCqOut::LEN, crate::limits::Resource::Cq)?;
        let cqn = CreateCqOut::new_checked(&o[..])
            .map_err(|source| DriverError::BadOutput {
                op: Opcode::CREATE_CQ,
                source,
            })?
            .cqn();
        tracing::debug!(cqn, nent, eqn, "CREATE_CQ");
        // SAFETY: `buf` (≥ `bytes`, a power of two) and `dbr` (≥ 64) are owned by `shared`,
        // which the `Cq` holds for as long as the poller (declared before it) lives; nothing
        // else in the driver makes Rust references into them.
        // The second pair, for `CqShared::clean`, is used only while the poller is not running
        // (the `QpTable` consumer flag).
        let (ring, dbr_ring, ring2, dbr_ring2) = unsafe {
            (
                RingPtr::new(buf.as_ptr(), bytes),
                RingPtr::new(dbr.as_ptr(), 64),
                RingPtr::new(buf.as_ptr(), bytes),
                RingPtr::new(dbr.as_ptr(), 64),
            )
        };
        let (Some(ring), Some(dbr_ring), Some(ring2), Some(dbr_ring2)) =
            (ring, dbr_ring, ring2, dbr_ring2)
        else {
            return Err(DriverError::Unsupported {
                what: "a CQ ring whose size is not a power of two",
                fix: "this is a driver bug: report it",
            });
        };
        let table = Arc::new(QpTable::new());
        let shared = Arc::new(CqShared {
            hca: hca.clone(),
            cqn,
            table: table.clone(),
            ring: ring2,
            dbr_ring: dbr_ring2,
            nent,
            buf,
            dbr,
        });
        let poller = CqPoller::new(ring, nent, dbr_ring, table)?;
        let channel = config.channel.map(|c| c.core().clone());
        if let Some(c) = &channel {
            c.watch_vector(vector)?;
        }
        let events = Arc::new(CqEventSink::new(cqn, vector, channel));
        hca.cq_router().insert(&events);
        Ok(Self {
            poller,
            shared,
            events,
            uar_offset: uar_bar_offset(uar) + MLX5_CQ_DOORBELL as u64,
        })
    }

    /// The CQ's event state (arm sequence number, unacknowledged events).
    pub fn events(&self) -> &Arc<CqEventSink> {
        &self.events
    }

    /// Acknowledges `n` events taken from the CQ's channel (libibverbs `ibv_ack_cq_events`).
    ///
    /// Errors: [`DriverError::AckTooMany`] when fewer than `n` were taken and not yet
    /// acknowledged.
    pub fn ack_events(&self, n: u32) -> Result<()> {
        self.events.ack(n)
    }

    /// Destroys the CQ, refusing while events taken from its channel are unacknowledged
    /// (`ibv_destroy_cq` would wait for them forever): the CQ comes back with
    /// [`DriverError::CqEventsUnacked`].
    pub fn destroy(self) -> std::result::Result<(), Box<(Self, DriverError)>> {
        let unacked = self.events.unacked();
        if unacked > 0 {
            let cqn = self.cqn();
            return Err(Box::new((
                self,
                DriverError::CqEventsUnacked { cqn, unacked },
            )));
        }
        drop(self);
        Ok(())
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.shared.cqn
    }

    /// Entries in the ring.
    pub fn nent(&self) -> u32 {
        self.poller.nent()
    }

    /// The part QPs hold.
    pub fn shared(&self) -> &Arc<CqShared> {
        &self.shared
    }

    /// Polls up to `out.len()` completions; returns how many (0: none ready). No allocation,
    /// lock or syscall.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.poller.poll(out)
    }

    /// [`Cq::poll`] with the sequence number of `out[0]` (`out[i]`: plus `i`); see
    /// [`CqPoller::poll_seq`].
    #[inline]
    pub fn poll_seq(&mut self, out: &mut [WorkCompletion]) -> (usize, u64) {
        self.poller.poll_seq(out)
    }

    /// Polls one completion.
    #[inline]
    pub fn poll_one(&mut self) -> Option<WorkCompletion> {
        self.poller.poll_one()
    }

    /// Polls one completion with its sequence number: the consumer count its CQE brought the
    /// CQ to, taken while the poll holds the consumer side (see [`QpTable::consumed`] for
    /// what it proves; the safe verbs layer numbers its completion proofs with it).
    #[inline]
    pub fn poll_one_seq(&mut self) -> Option<(WorkCompletion, u64)> {
        self.poller.poll_one_seq()
    }

    /// Starts an extended poll (rdma-core `ibv_start_poll`): the oldest completion, its
    /// fields read on demand, more with [`CqPollGuard::next_poll`], the consumer index
    /// published once when the guard drops. `None`: nothing ready.
    #[inline(always)]
    pub fn start_poll(&mut self) -> Option<CqPollGuard<'_>> {
        self.poller.start_poll()
    }

    /// Polls one completion with its raw CQE bytes (research access).
    pub fn poll_raw(&mut self) -> Option<(WorkCompletion, [u8; 64])> {
        self.poller.poll_raw()
    }

    /// [`Cq::poll_raw`] with the completion's sequence number (as [`Cq::poll_one_seq`]).
    pub fn poll_raw_seq(&mut self) -> Option<(WorkCompletion, [u8; 64], u64)> {
        self.poller.poll_raw_seq()
    }

    /// The raw bytes of the CQE at consumer index `ci` (research access).
    pub fn cqe_bytes(&self, ci: u32) -> [u8; 64] {
        self.poller.cqe_bytes(ci)
    }

    /// The consumer index (the low 32 bits of [`Cq::consumed`]).
    pub fn consumer_index(&self) -> u32 {
        self.poller.consumer_index()
    }

    /// CQEs consumed since creation (free-running, 64 bits; see [`QpTable::consumed`]).
    pub fn consumed(&self) -> u64 {
        self.poller.consumed()
    }

    /// Arms the CQ: the next completion (`solicited`: the next solicited one) raises an event
    /// on the completion EQ. rdma-core `mlx5_arm_cq`: the arm word into the doorbell record,
    /// `mmio_wc_start`, the 64-bit doorbell at UAR + 0x20, `mmio_flush_writes`.
    /// The sequence number is the count of events taken (`mlx5_cq_event`): arming again
    /// before the last event was taken repeats the request, and the device raises nothing
    /// new for it (see `sim/src/ring.rs`).
    pub fn arm(&mut self, solicited: bool) {
        let ci = self.poller.consumer_index();
        let sn = self.events.arm_sn() & 3;
        self.poller
            .dbr()
            .write_be32(4, cq_arm_value(sn, solicited, ci));
        // The device must see the arm word before the doorbell that makes it look.
        mmio_wc_start();
        let db = cq_arm_doorbell(sn, solicited, ci, self.shared.cqn);
        // SAFETY: the arm doorbell of this CQ, in the UAR page the CQ was created with; the CQ
        // ring and its doorbell record stay mapped while the CQ lives.
        unsafe { self.shared.hca.dev().write64(self.uar_offset, db.to_be()) };
        mmio_flush_writes();
    }

    /// Waits up to `timeout` for a completion: polls, and if none is ready arms the CQ and
    /// sleeps on the completion EQ's interrupt (which, for a stepped sim, runs the world).
    /// Returns the completion, or `None` on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<WorkCompletion>> {
        Ok(self.wait_seq(timeout)?.map(|(wc, _)| wc))
    }

    /// [`Cq::wait`] with the completion's sequence number (as [`Cq::poll_one_seq`]).
    ///
    /// Waits on the CQ's own events only (a private channel made at the first wait): another
    /// CQ's completion neither wakes it nor is consumed by it.
    ///
    /// Errors: [`DriverError::CqOnChannel`] for a CQ created on a completion channel (its
    /// events belong to the channel's reader).
    pub fn wait_seq(&mut self, timeout: Duration) -> Result<Option<(WorkCompletion, u64)>> {
        let deadline = Instant::now() + timeout;
        if self.events.bound() {
            return Err(DriverError::CqOnChannel { cqn: self.cqn() });
        }
        let hca = self.shared.hca.clone();
        let vector = self.events.vector();
        let channel = self.events.set_target_if_none(|| {
            let c = ChannelCore::new(&hca)?;
            c.watch_vector(vector)?;
            Ok(c)
        })?;
        loop {
            if let Some(got) = self.poll_one_seq() {
                return Ok(Some(got));
            }
            self.arm(false);
            // A completion may have landed between the poll and the arm.
            if let Some(got) = self.poll_one_seq() {
                return Ok(Some(got));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match channel.get(left)? {
                // The private channel's events are acknowledged here: nobody else sees them.
                Some(sink) => sink.ack(1)?,
                // Timed out, or a stepped sim went idle: nothing more will come.
                None => return Ok(self.poll_one_seq()),
            }
        }
    }

    /// Events this CQ consumed so far (the arm sequence number).
    pub fn arm_sn(&self) -> u32 {
        self.events.arm_sn()
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.shared.hca.cq_router().remove(&self.events);
        let unacked = self.events.unacked();
        if unacked > 0 {
            tracing::warn!(
                cqn = self.cqn(),
                unacked,
                "CQ dropped with completion events not acknowledged"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cqs_are_created_with_the_cqe_size_the_poller_reads() {
        assert_eq!(cqe_sz::bytes(CQE_SZ), Some(CQE_SIZE));
        assert_eq!(CQE_SIZE, core::mem::size_of::<bypass_hw::cqe::Cqe64>());
    }
}
