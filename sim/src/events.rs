//! Completions and events: the CQ and EQ tables, writing a CQE into its CQ, the completion
//! and error events that follow, asynchronous events to the EQ that subscribed to them,
//! MSI-X interrupts, and the CQ arm and EQ doorbells.
//!
//! Owns: [`Completions`], the device's single path from "something completed or happened"
//! to CQE/EQE bytes in host memory and an interrupt. Firmware, send queue and transport call
//! [`Completions::post_cqe`] and [`Completions::post_event`]; none of them touches a ring.
//! Must not: build CQE contents (callers do, with `bypass_hw::cqe`).
//!
//! Routing follows the PRM as the kernel's `mlx5_core` uses it: a CQ's completion events go to
//! the EQ named in its `cqc.c_eqn`; every other event goes to an EQ whose `event_bitmask`
//! has its type (the kernel creates one async EQ for all of them); a CQ overrun raises
//! `CQ_ERROR` with syndrome 1 (`MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN`).

use bypass_hw::eqe::{EQE_DATA_LEN, Eqe, EventType};
use zerocopy::FromZeros;

use crate::counters::Counters;
use crate::io::Io;
use crate::objects::{Cq, Eq};
use crate::profile::Caps;
use crate::ring::{CqPost, EqPost};
use crate::table::Table;
use crate::trace::{Trace, TraceEvent};

/// `CQ_ERROR` syndrome for an overrun (kernel `mlx5_ifc.h` `MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN`).
pub const CQ_ERROR_SYNDROME_OVERRUN: u8 = 0x1;

/// The device's MSI-X vectors: the handler interrupts go to, and how many each vector raised.
struct Msix {
    handler: Option<Box<dyn FnMut(u16) + Send>>,
    /// Interrupts raised per vector (also reported to the handler, if any).
    raised: Vec<u64>,
}

impl Msix {
    /// Raises `vector` at device time `now`: counted, traced, reported to the handler.
    fn raise(&mut self, vector: u16, counters: &mut Counters, trace: &mut Trace, now: u64) {
        if let Some(c) = self.raised.get_mut(usize::from(vector)) {
            *c += 1;
        }
        counters.interrupts += 1;
        trace.record(|| TraceEvent::Interrupt { at: now, vector });
        if let Some(h) = self.handler.as_mut() {
            h(vector);
        }
    }
}

/// A copy raises to no handler: the handler belongs to the device's owner, and
/// `Device::reset_to` keeps the one it has.
impl Clone for Msix {
    fn clone(&self) -> Self {
        Self {
            handler: None,
            raised: self.raised.clone(),
        }
    }
}

/// The CQs and EQs, and the interrupts their events raise.
#[derive(Clone)]
pub(crate) struct Completions {
    /// Completion queues.
    pub(crate) cqs: Table<Cq>,
    /// Event queues.
    pub(crate) eqs: Table<Eq>,
    msix: Msix,
}

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions")
            .field("cqs", &self.cqs.len())
            .field("eqs", &self.eqs.len())
            .field("interrupts", &self.msix.raised)
            .finish_non_exhaustive()
    }
}

impl Completions {
    /// Empty tables sized by `caps`, `vectors` MSI-X vectors and no handler.
    pub(crate) fn new(caps: &Caps, vectors: usize) -> Self {
        let cap = |log: u8| 1u32.checked_shl(u32::from(log)).unwrap_or(u32::MAX);
        Self {
            cqs: Table::new(1, cap(caps.log_max_cq), 1 << 24),
            eqs: Table::new(0, cap(caps.log_max_eq), 1 << 8),
            msix: Msix {
                handler: None,
                raised: vec![0; vectors],
            },
        }
    }

    /// Removes every CQ and EQ (TEARDOWN_HCA / DISABLE_HCA).
    pub(crate) fn clear(&mut self) {
        self.cqs.clear();
        self.eqs.clear();
    }

    /// Installs the interrupt handler.
    pub(crate) fn set_handler(&mut self, handler: impl FnMut(u16) + Send + 'static) {
        self.msix.handler = Some(Box::new(handler));
    }

    /// Removes the interrupt handler (for `Device::reset_to`, which puts it back).
    pub(crate) fn take_handler(&mut self) -> Option<Box<dyn FnMut(u16) + Send>> {
        self.msix.handler.take()
    }

    /// Installs `handler` (or none), as [`Completions::take_handler`] gave it.
    pub(crate) fn put_handler(&mut self, handler: Option<Box<dyn FnMut(u16) + Send>>) {
        self.msix.handler = handler;
    }

    /// Interrupts raised so far on `vector`.
    pub(crate) fn raised(&self, vector: u16) -> u64 {
        self.msix
            .raised
            .get(usize::from(vector))
            .copied()
            .unwrap_or(0)
    }

    /// Whether a CQE posted to `cqn` now would be dropped with nothing written, counted or
    /// raised: no CQ has that number, or the CQ is in overrun (it takes no CQE until it is
    /// destroyed; [`Completions::post_cqe`] raised the CQ error when it entered overrun).
    /// A flush uses it to consume, in one step, receives whose CQEs would all be dropped.
    pub(crate) fn drops_cqes(&self, cqn: u32) -> bool {
        self.cqs.get(cqn).is_none_or(|cq| cq.ring.overrun)
    }

    /// Writes `cqe` (the 64-byte CQE; placed in the second half of a 128-byte entry when the
    /// CQ has 128-byte CQEs) into CQ `cqn`, then raises the completion event if the CQ was
    /// armed for it, or the CQ error event on overrun. Returns false if the CQE could not be
    /// written (no such CQ, overrun, DMA fault).
    pub(crate) fn post_cqe(
        &mut self,
        io: &mut Io<'_>,
        cqn: u32,
        cqe: &[u8; 64],
        solicited_or_error: bool,
    ) -> bool {
        let Some(cq) = self.cqs.get_mut(cqn) else {
            return false;
        };
        let mut entry = [0u8; 128];
        let size = cq.ring.cqe_size() as usize;
        entry[size - 64..size].copy_from_slice(cqe);
        let eqn = cq.eqn;
        let result = cq.ring.post(io.dma, &mut entry[..size], solicited_or_error);
        match result {
            Ok(CqPost::Written { notify, .. }) => {
                let at = io.now;
                io.trace.record(|| TraceEvent::Cqe {
                    at,
                    cqn,
                    bytes: entry[..size].to_vec(),
                });
                if notify {
                    self.post_completion_event(io, eqn, cqn);
                }
                true
            }
            Ok(CqPost::Overrun) => {
                let mut e = Eqe::new_zeroed();
                let err = e.cq_err_mut();
                err.cqn.set(cqn & 0x00ff_ffff);
                err.syndrome = CQ_ERROR_SYNDROME_OVERRUN;
                self.post_event(io, EventType::CQ_ERROR, 0, &e.data);
                false
            }
            Ok(CqPost::InError) => false,
            Err(f) => {
                io.dma_fault(f);
                false
            }
        }
    }

    /// A completion event for `cqn` on EQ `eqn`.
    fn post_completion_event(&mut self, io: &mut Io<'_>, eqn: u32, cqn: u32) {
        let mut e = Eqe::new_zeroed();
        e.comp_mut().cqn.set(cqn & 0x00ff_ffff);
        self.write_eqe(io, eqn, EventType::COMPLETION, 0, &e.data);
    }

    /// Posts an asynchronous event to the (lowest-numbered) EQ that subscribed to its type.
    /// Returns false if no EQ wants it (the event is dropped, as the hardware does).
    pub(crate) fn post_event(
        &mut self,
        io: &mut Io<'_>,
        t: EventType,
        sub_type: u8,
        data: &[u8; EQE_DATA_LEN],
    ) -> bool {
        let Some(eqn) = self
            .eqs
            .iter()
            .find(|(_, eq)| eq.wants(t.0))
            .map(|(n, _)| n)
        else {
            return false;
        };
        self.write_eqe(io, eqn, t, sub_type, data)
    }

    /// Posts a QP or SRQ event (`struct mlx5_eqe_qp_srq`: queue type QP, the QP or SRQ
    /// number `qpn`) of type `t`: the affiliated asynchronous events of IBTA vol. 1 §11.6.3
    /// as mlx5 encodes them (`WQ_CATAS_ERROR`, `COMM_EST`, `SQ_DRAINED`, `LAST_WQE`,
    /// `SRQ_LIMIT`, ...; kernel `device.h`; the kernel's `srq_event_notifier` reads only
    /// `qp_srq_n`). False if no EQ subscribed to `t`.
    pub(crate) fn post_qp_event(&mut self, io: &mut Io<'_>, t: EventType, qpn: u32) -> bool {
        let mut e = Eqe::new_zeroed();
        let q = e.qp_srq_mut();
        q.queue_type = bypass_hw::eqe::MLX5_EVENT_QUEUE_TYPE_QP;
        q.qp_srq_n.set(qpn & 0x00ff_ffff);
        self.post_event(io, t, 0, &e.data)
    }

    /// True if some EQ receives events of type `t`.
    pub(crate) fn event_subscribed(&self, t: EventType) -> bool {
        self.eqs.iter().any(|(_, eq)| eq.wants(t.0))
    }

    fn write_eqe(
        &mut self,
        io: &mut Io<'_>,
        eqn: u32,
        t: EventType,
        sub_type: u8,
        data: &[u8; EQE_DATA_LEN],
    ) -> bool {
        let Some(eq) = self.eqs.get_mut(eqn) else {
            return false;
        };
        let mut eqe = Eqe::new_zeroed();
        eqe.event_type = t.0;
        eqe.sub_type = sub_type;
        eqe.data = *data;
        let mut bytes = [0u8; 64];
        bytes.copy_from_slice(zerocopy::IntoBytes::as_bytes(&eqe));
        let intr = eq.intr;
        match eq.ring.post(io.dma, &mut bytes) {
            Ok(EqPost::Written { interrupt }) => {
                let at = io.now;
                io.trace.record(|| TraceEvent::Eqe {
                    at,
                    eqn,
                    bytes: bytes.to_vec(),
                });
                if interrupt {
                    self.msix.raise(intr, io.counters, io.trace, io.now);
                }
                true
            }
            Ok(EqPost::Overrun) => false,
            Err(f) => {
                io.dma_fault(f);
                false
            }
        }
    }

    /// The CQ arm doorbell (UAR offset 0x20). Must come through the CQ's UAR page.
    pub(crate) fn cq_arm(&mut self, io: &mut Io<'_>, uar: u32, cmd_sn_ci: u32, cqn: u32) {
        let Some(cq) = self.cqs.get_mut(cqn).filter(|cq| cq.uar == uar) else {
            io.counters.doorbell_errors += 1;
            return;
        };
        if cq.ring.arm(cmd_sn_ci) {
            let eqn = cq.eqn;
            self.post_completion_event(io, eqn, cqn);
        }
    }

    /// The EQ doorbell (UAR offset 0x40 arm / 0x48 update only). Must come through the EQ's
    /// UAR page.
    pub(crate) fn eq_doorbell(&mut self, io: &mut Io<'_>, uar: u32, eqn: u32, ci: u32, arm: bool) {
        let Some(eq) = self.eqs.get_mut(eqn).filter(|eq| eq.uar == uar) else {
            io.counters.doorbell_errors += 1;
            return;
        };
        if eq.ring.update_ci(ci, arm) {
            let intr = eq.intr;
            self.msix.raise(intr, io.counters, io.trace, io.now);
        }
    }
}
