//! Event queues: the EQE ring in DMA memory, CREATE_EQ/DESTROY_EQ, polling with the owner
//! rule, and the EQ doorbell (consumer index, arm).
//!
//! Owns: [`EventQueue`] (one EQ: ring, number, consumer index, UAR, MSI-X vector),
//! [`AsyncEvent`] (an EQE copied out of the ring) and [`CompletionEq`] (the EQ that CQs
//! report to, on its own vector). Must not: act on events (the command queue takes CMD
//! completions, [`crate::Hca::process_events`] answers page requests, CQ owners take
//! completion events).
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_create_eq`, `init_eq_buf`,
//! `mlx5_eq_get_eqe`, `eq_update_ci`, `mlx5_vfio_process_async_events`), kernel
//! `drivers/net/ethernet/mellanox/mlx5/core/eq.c` (`next_eqe_sw`, `eq_update_ci`,
//! `MLX5_NUM_SPARE_EQE`).

use std::sync::atomic::{Ordering, fence};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::eq::{CreateEqIn, CreateEqOut, DestroyEqIn, create_eq_in_len};
use bypass_hw::doorbell::eq_doorbell_value;
use bypass_hw::eqe::{EQE_DATA_LEN, EQE_OWNER_INIT_VAL, Eqe, EventType, MLX5_NUM_SPARE_EQE};
use bypass_hw::uar::{eq_doorbell_offset, uar_bar_offset};
use zerocopy::FromBytes;

use crate::backend::Backend;
use crate::cmdq::{CmdQueue, input};
use crate::dma::{DmaBuf, DmaMapper, PAGE_SIZE};
use crate::error::{DriverError, Result};

/// Bytes per EQE.
const EQE_SIZE: usize = 64;
/// Offset of the owner byte in an EQE.
const OWNER_OFF: usize = 63;

/// One event, copied out of an EQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The event type.
    pub event_type: EventType,
    /// The sub-type (port change: `MLX5_PORT_CHANGE_SUBTYPE_*`).
    pub sub_type: u8,
    /// The 28 data bytes (`union ev_data`); view them with `bypass_hw::eqe`'s types.
    pub data: [u8; EQE_DATA_LEN],
}

impl AsyncEvent {
    fn from_eqe(e: &Eqe) -> Self {
        Self {
            event_type: e.event_type(),
            sub_type: e.sub_type(),
            data: e.data,
        }
    }

    fn eqe(&self) -> Eqe {
        let mut e = <Eqe as zerocopy::FromZeros>::new_zeroed();
        e.event_type = self.event_type.0;
        e.sub_type = self.sub_type;
        e.data = self.data;
        e
    }

    /// A CMD event's bitmap of completed slots (0 for other types).
    pub fn cmd_vector(&self) -> u32 {
        if self.event_type == EventType::CMD {
            self.eqe().cmd().vector()
        } else {
            0
        }
    }

    /// A PAGE_REQUEST event's signed page count (0 for other types).
    pub fn page_request(&self) -> i32 {
        if self.event_type == EventType::PAGE_REQUEST {
            self.eqe().page_req().num_pages()
        } else {
            0
        }
    }

    /// The SRQ number of an SRQ_LIMIT event (`qp_srq_n`, as the kernel's
    /// `srq_event_notifier` reads it).
    pub fn srq_limit_srqn(&self) -> Option<u32> {
        (self.event_type == EventType::SRQ_LIMIT).then(|| self.eqe().qp_srq().qp_srq_n())
    }

    /// The QP number of a LAST_WQE (last WQE reached) event: a QP attached to an SRQ reached
    /// the error state and will take no more of its WQEs.
    pub fn last_wqe_qpn(&self) -> Option<u32> {
        (self.event_type == EventType::LAST_WQE).then(|| self.eqe().qp_srq().qp_srq_n())
    }

    /// The QP whose send queue drained, for an SQ_DRAINED event (`MLX5_EVENT_TYPE_SQ_DRAINED`,
    /// 0x03, kernel `include/linux/mlx5/device.h`; the QP number in the QP/SRQ event data, as
    /// `mlx5_ib` `mlx5_ib_qp_event` reads it); `None` for other events.
    pub fn drained_qpn(&self) -> Option<u32> {
        (self.event_type == EventType::SQ_DRAINED).then(|| self.eqe().qp_srq().qp_srq_n())
    }

    /// The CQ number of a COMPLETION or CQ_ERROR event.
    pub fn cqn(&self) -> Option<u32> {
        match self.event_type {
            EventType::COMPLETION => Some(self.eqe().comp().cqn()),
            EventType::CQ_ERROR => Some(self.eqe().cq_err().cqn()),
            _ => None,
        }
    }
}

/// One event queue.
#[derive(Debug)]
pub struct EventQueue {
    ring: DmaBuf,
    eqn: u8,
    nent: u32,
    ci: u32,
    uar: u32,
    vector: u16,
    /// EQEs consumed since the last doorbell.
    since_update: u32,
}

impl EventQueue {
    /// Creates an EQ of `1 << log_size` EQEs on UAR page `uar`, raising MSI-X `vector`,
    /// subscribed to `events` (completion events reach an EQ through the CQ's `c_eqn`, not
    /// the bitmask). The ring's owner bytes start at 1 (`init_eq_buf`). Not armed yet.
    pub fn create(
        cmd: &CmdQueue,
        dma: &Arc<DmaMapper>,
        uar: u32,
        log_size: u8,
        vector: u16,
        events: &[EventType],
    ) -> Result<Self> {
        let nent = 1u32
            .checked_shl(u32::from(log_size))
            .filter(|&n| n <= 1 << 22)
            .ok_or(DriverError::Unsupported {
                what: "an EQ that large",
                fix: "use log_size <= 22",
            })?;
        let bytes = (nent as usize * EQE_SIZE).max(PAGE_SIZE);
        let ring = dma.alloc(bytes)?;
        for k in 0..nent as usize {
            ring.write(k * EQE_SIZE + OWNER_OFF, &[EQE_OWNER_INIT_VAL])?;
        }
        let npages = ring.len() / PAGE_SIZE;
        let mut i = input(Opcode::CREATE_EQ, 0, create_eq_in_len(npages));
        let build = |source| DriverError::BuildInput {
            what: "CREATE_EQ",
            source,
        };
        {
            let mut c = CreateEqIn::new_checked(&mut i[..]).map_err(build)?;
            for t in events {
                c.enable_event(t.0.into()).map_err(build)?;
            }
            for k in 0..npages {
                c.set_pas(k, ring.iova_at(k * PAGE_SIZE)?).map_err(build)?;
            }
            let mut e = c.eqc_mut();
            e.set_log_eq_size(log_size.into()).map_err(build)?;
            e.set_uar_page(uar).map_err(build)?;
            e.set_intr(vector.into()).map_err(build)?;
            // 4 KiB pages: log_page_size counts in 4 KiB units (PRM `eqc.log_page_size`).
            e.set_log_page_size(0).map_err(build)?;
        }
        let o = cmd.exec(&i, CreateEqOut::LEN)?;
        let eqn = CreateEqOut::new_checked(&o[..])
            .map_err(|source| DriverError::BadOutput {
                op: Opcode::CREATE_EQ,
                source,
            })?
            .eq_number() as u8;
        tracing::debug!(eqn, nent, vector, "EQ created");
        Ok(Self {
            ring,
            eqn,
            nent,
            ci: 0,
            uar,
            vector,
            since_update: 0,
        })
    }

    /// The EQ number.
    pub fn eqn(&self) -> u32 {
        u32::from(self.eqn)
    }

    /// The MSI-X vector it raises.
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// Entries in the ring.
    pub fn nent(&self) -> u32 {
        self.nent
    }

    /// The consumer index.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Takes every EQE software owns (rdma-core `mlx5_eq_get_eqe`: owner bit against the
    /// lap of the consumer index), calling `f` on each; updates the consumer index on the
    /// device every [`MLX5_NUM_SPARE_EQE`] entries so it never reports overflow. Returns the
    /// number taken. Call [`EventQueue::update_ci`] after.
    pub fn poll(&mut self, backend: &dyn Backend, mut f: impl FnMut(&AsyncEvent)) -> usize {
        let mut n = 0;
        loop {
            let off = (self.ci & (self.nent - 1)) as usize * EQE_SIZE;
            let Ok(owner) = self.ring.read_u8_volatile(off + OWNER_OFF) else {
                break;
            };
            if !bypass_hw::eqe::eqe_sw_owns(owner, self.ci, self.nent) {
                break;
            }
            // udma_from_device_barrier: read the EQE only after its owner bit says it is ours.
            fence(Ordering::Acquire);
            let mut raw = [0u8; EQE_SIZE];
            if self.ring.read(off, &mut raw).is_err() {
                break;
            }
            if let Ok(e) = Eqe::read_from_bytes(&raw[..]) {
                f(&AsyncEvent::from_eqe(&e));
            }
            self.ci = self.ci.wrapping_add(1);
            n += 1;
            self.since_update += 1;
            if self.since_update >= MLX5_NUM_SPARE_EQE {
                self.update_ci(backend, false);
            }
        }
        n
    }

    /// Writes the consumer index to the EQ doorbell, arming the EQ (`uar + 0x40`) or not
    /// (`uar + 0x48`): kernel `eq_update_ci`.
    pub fn update_ci(&mut self, backend: &dyn Backend, arm: bool) {
        self.since_update = 0;
        let off = uar_bar_offset(self.uar) + eq_doorbell_offset(arm) as u64;
        // The consumer index is updated only after the EQEs were read.
        fence(Ordering::SeqCst);
        // SAFETY: this EQ's consumer-index doorbell in its own UAR page; it only tells the
        // device which EQEs were consumed.
        unsafe { backend.write32(off, eq_doorbell_value(self.ci, self.eqn).to_be()) };
    }

    /// Destroys the EQ (DESTROY_EQ); the ring is freed when `self` drops.
    pub fn destroy(self, cmd: &CmdQueue) -> Result<()> {
        let mut i = input(Opcode::DESTROY_EQ, 0, DestroyEqIn::LEN);
        DestroyEqIn::new_checked(&mut i[..])
            .and_then(|mut d| d.set_eq_number(self.eqn.into()).map(|_| ()))
            .map_err(|source| DriverError::BuildInput {
                what: "DESTROY_EQ",
                source,
            })?;
        cmd.exec(&i, 16).map(|_| ())
    }
}

/// The EQ that completion queues report to, on its own MSI-X vector (not 0, which belongs to
/// the async EQ; rdma-core's `vfio_devx_create_eq` refuses `intr == 0` for the same reason).
#[derive(Debug)]
pub struct CompletionEq {
    eq: Mutex<EventQueue>,
    eqn: u32,
    vector: u16,
    backend: Arc<dyn Backend>,
}

impl CompletionEq {
    pub(crate) fn new(eq: EventQueue, backend: Arc<dyn Backend>) -> Self {
        Self {
            eqn: eq.eqn(),
            vector: eq.vector(),
            eq: Mutex::new(eq),
            backend,
        }
    }

    pub(crate) fn into_inner(self) -> EventQueue {
        self.eq.into_inner().unwrap_or_else(PoisonError::into_inner)
    }

    /// The EQ number to put in a CQ's `cqc.c_eqn`.
    pub fn eqn(&self) -> u32 {
        self.eqn
    }

    /// The MSI-X vector it raises (wait on it with [`CompletionEq::wait`] or poll
    /// `backend.irq_fd(vector)`).
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// Takes the pending completion events, calling `f(cqn)` for each, then re-arms the EQ.
    /// Returns how many there were.
    pub fn poll(&self, mut f: impl FnMut(u32)) -> usize {
        let mut eq = self.eq.lock().unwrap_or_else(PoisonError::into_inner);
        let n = eq.poll(&*self.backend, |ev| {
            if let Some(cqn) = ev.cqn() {
                f(cqn);
            }
        });
        eq.update_ci(&*self.backend, true);
        n
    }

    /// Takes the pending completion events as [`CompletionEq::poll`] does, but re-arms the EQ
    /// only when it took some or `fired` (its interrupt was seen): an EQ that raised nothing
    /// is still armed, and skipping the doorbell keeps an idle service call free of MMIO.
    pub(crate) fn service(&self, fired: bool, mut f: impl FnMut(u32)) -> usize {
        let mut eq = self.eq.lock().unwrap_or_else(PoisonError::into_inner);
        let n = eq.poll(&*self.backend, |ev| {
            if let Some(cqn) = ev.cqn() {
                f(cqn);
            }
        });
        if n > 0 || fired {
            eq.update_ci(&*self.backend, true);
        }
        n
    }

    /// Arms the EQ without consuming anything.
    pub fn arm(&self) {
        let mut eq = self.eq.lock().unwrap_or_else(PoisonError::into_inner);
        eq.update_ci(&*self.backend, true);
    }

    /// Waits up to `timeout` for the EQ's interrupt.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        Ok(self.backend.wait_irq(self.vector, timeout)?)
    }
}
