//! The device side of completion and event rings: where the next entry goes, its owner bit,
//! overrun detection, and the arm/notify protocol.
//!
//! Owns: [`CqRing`] and [`EqRing`]. Must not: build entry contents (the engine and firmware
//! build CQEs/EQEs with `bypass-hw`), or decide which EQ an event goes to.
//!
//! Sources: rdma-core `providers/mlx5/cq.c` (`get_sw_cqe`: an entry is software-owned when
//! `(op_own & 1) == !!(ci & nent)`, so the device writes owner = `!!(pi & nent)`;
//! `mlx5_arm_cq`: the arm doorbell carries `sn`, the solicited-only command and the CI),
//! rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_eq_get_eqe`, the same rule for EQEs;
//! `eq_update_ci`: UAR+0x40 updates the CI and arms, +0x48 only updates the CI), and the kernel's
//! `drivers/net/ethernet/mellanox/mlx5/core/eq.c` (a CQ overrun raises a CQ error event).
//!
//! Arm sequence numbers: rdma-core `mlx5_arm_cq` puts `cq->arm_sn & 3` in bits 29:28 of the
//! arm word (`cmd_sn`) and `mlx5_cq_event` (run by `ibv_get_cq_event`) increments it once per
//! event taken. The device treats an arm carrying the sequence number of the request it last
//! answered with an event as a repeat of that request, not a new one: it raises nothing (the
//! PRM's reason for the field; the kernel's `mlx5_ib_arm_cq` relies on it the same way). So an
//! armed CQ raises exactly one event, and re-arming before the event was taken never wakes
//! twice.

use crate::buffer::PageList;
use crate::iommu::{DmaFault, Iommu};

/// What the arm doorbell asked for (`MLX5_CQ_DB_REQ_NOT` / `MLX5_CQ_DB_REQ_NOT_SOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmKind {
    /// Notify on the next completion.
    Any,
    /// Notify on the next solicited or error completion.
    SolicitedOnly,
}

/// The outcome of writing a CQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqPost {
    /// Written; `notify` says whether the CQ was armed for it (the caller posts a completion
    /// EQE to the CQ's EQ).
    Written {
        /// The index the CQE was written at.
        index: u32,
        /// A completion event is due.
        notify: bool,
    },
    /// The ring was full: the CQE was dropped and the CQ is now in overrun (the caller raises a
    /// CQ error event). Only reported once; later CQEs are dropped silently.
    Overrun,
    /// The CQ is already in overrun/error: nothing was written.
    InError,
}

/// The device side of a completion queue ring.
#[derive(Debug, Clone)]
pub struct CqRing {
    buf: PageList,
    log_size: u32,
    /// Bytes per entry: 64, or 128 (then the 64-byte CQE is the second half).
    cqe_size: u32,
    /// Doorbell record IOVA: dword 0 = consumer index (24 bits), dword 1 = arm word.
    dbr: u64,
    /// Overrun ignore (`cqc.oi`): never report overrun.
    oi: bool,
    /// Producer counter: CQEs written so far.
    pub pi: u32,
    /// The arm request, if any: its kind, the CI it was armed at and its sequence number.
    armed: Option<(ArmKind, u32, u8)>,
    /// The sequence number of the arm request that last raised an event (`None` before the
    /// first): an arm repeating it is ignored (module docs).
    fired_sn: Option<u8>,
    /// The CQ is in overrun (cqc.status = CQ_OVERFLOW).
    pub overrun: bool,
    /// The consumer index the doorbell record held when last read. The driver's CI only
    /// moves forward, towards `pi`, so `pi - ci_seen` is never less than the entries in use:
    /// while it is below `nent` the ring cannot be full and the record need not be read.
    ci_seen: u32,
}

impl CqRing {
    /// A ring of `1 << log_size` entries of `cqe_size` bytes in `buf`.
    pub fn new(buf: PageList, log_size: u32, cqe_size: u32, dbr: u64, oi: bool) -> Self {
        Self {
            buf,
            log_size,
            cqe_size,
            dbr,
            oi,
            pi: 0,
            armed: None,
            fired_sn: None,
            overrun: false,
            ci_seen: 0,
        }
    }

    /// Entries in the ring.
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }

    /// Bytes per entry (64 or 128).
    pub fn cqe_size(&self) -> u32 {
        self.cqe_size
    }

    /// Reads the consumer index the driver last wrote to the doorbell record.
    pub fn consumer_index(&self, iommu: &mut Iommu) -> Result<u32, DmaFault> {
        Ok(iommu.read_be32(self.dbr)? & 0x00ff_ffff)
    }

    /// The arm request, if one is pending.
    pub fn armed(&self) -> Option<ArmKind> {
        self.armed.map(|(k, _, _)| k)
    }

    /// Handles the arm doorbell (UAR offset 0x20): `cmd_sn_ci` is the upper dword
    /// (`sn << 28 | cmd << 24 | ci`). Returns true if a completion is already due (CQEs were
    /// written at or past the armed CI), in which case the CQ is disarmed and the caller posts
    /// a completion event at once. An arm with the sequence number of the request that last
    /// fired is a repeat and does nothing (module docs).
    pub fn arm(&mut self, cmd_sn_ci: u32) -> bool {
        let sn = ((cmd_sn_ci >> 28) & 0x3) as u8;
        if self.fired_sn == Some(sn) {
            return false;
        }
        let kind = if (cmd_sn_ci >> 24) & 0x7 == 1 {
            ArmKind::SolicitedOnly
        } else {
            ArmKind::Any
        };
        let ci = cmd_sn_ci & 0x00ff_ffff;
        // Entries past the armed CI already exist: notify now (as hardware does for a CQ armed
        // late). A solicited-only arm waits for a solicited one, which we do not track
        // retroactively; the next solicited CQE fires it.
        if kind == ArmKind::Any && (self.pi & 0x00ff_ffff) != ci {
            self.armed = None;
            self.fired_sn = Some(sn);
            return true;
        }
        self.armed = Some((kind, ci, sn));
        false
    }

    /// Writes one CQE (`cqe_size` bytes, `entry.len()` must equal it). Stamps the owner bit
    /// into the last byte (`op_own`) for this lap, checks overrun against the doorbell
    /// record's CI, and reports whether an armed notification is due.
    pub fn post(
        &mut self,
        iommu: &mut Iommu,
        entry: &mut [u8],
        solicited_or_error: bool,
    ) -> Result<CqPost, DmaFault> {
        if self.overrun {
            return Ok(CqPost::InError);
        }
        // The doorbell record is read for the first CQE (a record that was never mapped
        // faults at once) and whenever the ring might be full: the CQEs written since the
        // last read would fill it. Overrun detection stays exact: the driver's CI only moves
        // forward, towards `pi` (rdma-core `providers/mlx5/cq.c` `update_cons_index` writes
        // the running `cons_index`), so the entries in use are at most `pi - ci_seen`; a ring
        // this estimate calls not full is not full, and one it calls full is judged on a
        // fresh read by the same rule as before. A fault on the record is reported whenever
        // it is read. Only a driver whose CI runs past the CQEs written (no real consumer
        // does) is judged later than before: at the read, not at the next CQE.
        let estimate = (self.pi & 0x00ff_ffff).wrapping_sub(self.ci_seen) & 0x00ff_ffff;
        if self.pi == 0 || estimate >= self.nent() {
            let ci = self.consumer_index(iommu)?;
            self.ci_seen = ci;
            let used = (self.pi & 0x00ff_ffff).wrapping_sub(ci) & 0x00ff_ffff;
            if used >= self.nent() && !self.oi {
                self.overrun = true;
                return Ok(CqPost::Overrun);
            }
        }
        let index = self.pi & (self.nent() - 1);
        if let Some(last) = entry.last_mut() {
            let owner = u8::from(self.pi & self.nent() != 0);
            *last = (*last & !1) | owner;
        }
        let off = u64::from(index) * u64::from(self.cqe_size);
        self.buf.write(iommu, off, entry)?;
        self.pi = self.pi.wrapping_add(1);
        let notify = match self.armed {
            Some((ArmKind::Any, _, _)) => true,
            Some((ArmKind::SolicitedOnly, _, _)) => solicited_or_error,
            None => false,
        };
        if notify {
            self.fired_sn = self.armed.take().map(|(_, _, sn)| sn);
        }
        Ok(CqPost::Written { index, notify })
    }
}

/// The outcome of writing an EQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EqPost {
    /// Written; `interrupt` says the EQ was armed, so the caller fires its MSI-X vector.
    Written {
        /// Fire the EQ's interrupt vector.
        interrupt: bool,
    },
    /// The EQ is full (the driver stopped updating its CI): the event is lost and counted.
    Overrun,
}

/// The device side of an event queue ring.
#[derive(Debug, Clone)]
pub struct EqRing {
    buf: PageList,
    log_size: u32,
    /// Producer counter.
    pub pi: u32,
    /// Consumer index as last written by the driver through the EQ doorbell.
    pub ci: u32,
    /// Armed: the next event interrupts.
    pub armed: bool,
    /// Events lost to overrun.
    pub overruns: u64,
}

/// Size of an EQE (`struct mlx5_eqe`).
pub const EQE_SIZE: u64 = 64;

impl EqRing {
    /// A ring of `1 << log_size` EQEs in `buf`, not armed.
    pub fn new(buf: PageList, log_size: u32) -> Self {
        Self {
            buf,
            log_size,
            pi: 0,
            ci: 0,
            armed: false,
            overruns: 0,
        }
    }

    /// Entries in the ring.
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }

    /// Handles the EQ doorbell word `(ci & 0xffffff) | eqn << 24` at UAR+0x40 (`arm`) or +0x48.
    /// Returns true if events are already pending past the new CI and the EQ was armed, so the
    /// caller fires the interrupt now.
    pub fn update_ci(&mut self, ci: u32, arm: bool) -> bool {
        self.ci = ci & 0x00ff_ffff;
        if !arm {
            return false;
        }
        if (self.pi & 0x00ff_ffff) != self.ci {
            self.armed = false;
            return true;
        }
        self.armed = true;
        false
    }

    /// Writes one 64-byte EQE, stamping the owner bit (byte 0x3f) for this lap.
    pub fn post(&mut self, iommu: &mut Iommu, entry: &mut [u8; 64]) -> Result<EqPost, DmaFault> {
        let used = (self.pi & 0x00ff_ffff).wrapping_sub(self.ci) & 0x00ff_ffff;
        if used >= self.nent() {
            self.overruns += 1;
            return Ok(EqPost::Overrun);
        }
        let index = self.pi & (self.nent() - 1);
        entry[63] = (entry[63] & !1) | u8::from(self.pi & self.nent() != 0);
        self.buf.write(iommu, u64::from(index) * EQE_SIZE, entry)?;
        self.pi = self.pi.wrapping_add(1);
        let interrupt = self.armed;
        self.armed = false;
        Ok(EqPost::Written { interrupt })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iommu::Perm;
    use crate::memory::{HostMemory, PAGE_SIZE, SimMemory};
    use std::sync::Arc;

    fn setup() -> (Arc<SimMemory>, Iommu, CqRing) {
        let mem = Arc::new(SimMemory::new(2 * PAGE_SIZE).unwrap());
        let mut io = Iommu::new();
        io.map(0x10000, mem.clone(), 0, 2 * PAGE_SIZE, Perm::RW)
            .unwrap();
        // 4 CQEs of 64 B at 0x10000, DBR at 0x11000.
        let pl = PageList::new(vec![0x10000], 0, 0, 256).unwrap();
        (mem, io, CqRing::new(pl, 2, 64, 0x11000, false))
    }

    fn set_ci(mem: &SimMemory, ci: u32) {
        mem.write_at(PAGE_SIZE, &ci.to_be_bytes());
    }

    /// Posts CQE `e` once for each index in `indices` on an unarmed CQ, checking that each
    /// is written at that index without a notification.
    fn post_unarmed(
        cq: &mut CqRing,
        io: &mut Iommu,
        e: &mut [u8; 64],
        indices: std::ops::Range<u32>,
    ) {
        for i in indices {
            assert_eq!(
                cq.post(io, e, false).unwrap(),
                CqPost::Written {
                    index: i,
                    notify: false
                }
            );
        }
    }

    #[test]
    fn owner_bit_flips_each_lap_and_overrun_is_detected() {
        let (mem, mut io, mut cq) = setup();
        let mut e = [0xf0u8; 64];
        post_unarmed(&mut cq, &mut io, &mut e, 0..4);
        assert_eq!(
            mem.to_vec(63, 1).unwrap(),
            vec![0xf0],
            "lap 0 owner bit is 0"
        );
        assert_eq!(cq.post(&mut io, &mut e, false).unwrap(), CqPost::Overrun);
        assert_eq!(cq.post(&mut io, &mut e, false).unwrap(), CqPost::InError);
        // A fresh ring whose consumer keeps up wraps with owner 1 on lap 1.
        let (mem, mut io, mut cq) = setup();
        for i in 0..6u32 {
            set_ci(&mem, i);
            cq.post(&mut io, &mut e, false).unwrap();
        }
        assert_eq!(mem.to_vec(63, 1).unwrap(), vec![0xf1]);
        assert_eq!(mem.to_vec(64 + 63, 1).unwrap(), vec![0xf1]);
        assert_eq!(mem.to_vec(2 * 64 + 63, 1).unwrap(), vec![0xf0]);
    }

    #[test]
    fn arm_notifies_once_and_solicited_only_waits_for_solicited() {
        let (_mem, mut io, mut cq) = setup();
        let mut e = [0u8; 64];
        assert!(!cq.arm(0));
        assert_eq!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written {
                index: 0,
                notify: true
            }
        );
        assert!(matches!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written { notify: false, .. }
        ));
        // The same sequence number again is a repeat of the request already answered.
        assert!(!cq.arm(1));
        // Armed late (next sequence number), with CQEs already past the CI: due at once.
        assert!(cq.arm((1 << 28) | 1));
        assert!(!cq.arm((2 << 28) | (1 << 24) | 2));
        assert!(matches!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written { notify: false, .. }
        ));
        assert!(matches!(
            cq.post(&mut io, &mut e, true).unwrap(),
            CqPost::Written { notify: true, .. }
        ));
    }

    #[test]
    fn a_repeated_arm_sequence_number_never_fires_twice() {
        let (mem, mut io, mut cq) = setup();
        let mut e = [0u8; 64];
        // Armed twice before any CQE: one request, one event.
        assert!(!cq.arm(0));
        assert!(!cq.arm(0));
        assert!(matches!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written { notify: true, .. }
        ));
        // The same sn again, CQE unconsumed and a new one written: no second event.
        assert!(!cq.arm(0));
        assert!(matches!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written { notify: false, .. }
        ));
        // The next sn (the driver took the event) with CQEs past the CI: due at once, once.
        set_ci(&mem, 1);
        assert!(cq.arm((1 << 28) | 1));
        assert!(!cq.arm((1 << 28) | 1));
        // Solicited-only with sn 2: a plain CQE does not fire it, a solicited one does.
        set_ci(&mem, 2);
        assert!(!cq.arm((2 << 28) | (1 << 24) | 2));
        assert!(matches!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written { notify: false, .. }
        ));
        assert!(matches!(
            cq.post(&mut io, &mut e, true).unwrap(),
            CqPost::Written { notify: true, .. }
        ));
        assert_eq!(cq.armed(), None);
    }

    #[test]
    fn eq_arm_interrupts_once_and_overrun_counts() {
        let mem = Arc::new(SimMemory::new(PAGE_SIZE).unwrap());
        let mut io = Iommu::new();
        io.map(0x10000, mem.clone(), 0, PAGE_SIZE, Perm::RW)
            .unwrap();
        let mut eq = EqRing::new(PageList::new(vec![0x10000], 0, 0, 128).unwrap(), 1);
        let mut e = [1u8; 64];
        assert!(!eq.update_ci(0, true));
        assert_eq!(
            eq.post(&mut io, &mut e).unwrap(),
            EqPost::Written { interrupt: true }
        );
        assert_eq!(mem.to_vec(63, 1).unwrap(), vec![0]);
        assert_eq!(
            eq.post(&mut io, &mut e).unwrap(),
            EqPost::Written { interrupt: false }
        );
        assert_eq!(eq.post(&mut io, &mut e).unwrap(), EqPost::Overrun);
        assert!(
            eq.update_ci(1, true),
            "an event past the new CI interrupts at once"
        );
        assert!(!eq.update_ci(2, true));
        assert_eq!(
            eq.post(&mut io, &mut e).unwrap(),
            EqPost::Written { interrupt: true }
        );
        assert_eq!(mem.to_vec(63, 1).unwrap(), vec![1], "lap 1 owner bit is 1");
    }

    #[test]
    fn doorbell_record_is_read_at_the_first_cqe_and_when_the_ring_might_be_full() {
        // CQ buffer and doorbell record in separate mappings, so the record can go away alone.
        let mem = Arc::new(SimMemory::new(2 * PAGE_SIZE).unwrap());
        let mut io = Iommu::new();
        io.map(0x10000, mem.clone(), 0, PAGE_SIZE, Perm::RW)
            .unwrap();
        io.map(0x11000, mem.clone(), PAGE_SIZE, PAGE_SIZE, Perm::RW)
            .unwrap();
        let mut cq = CqRing::new(
            PageList::new(vec![0x10000], 0, 0, 256).unwrap(),
            2,
            64,
            0x11000,
            false,
        );
        let mut e = [0u8; 64];
        cq.post(&mut io, &mut e, false).unwrap();
        let faults = io.faults();
        io.unmap(0x11000, PAGE_SIZE).unwrap();
        // Three more fit whatever the CI says: the record is not read for them.
        post_unarmed(&mut cq, &mut io, &mut e, 1..4);
        assert_eq!(
            io.faults(),
            faults,
            "no read of the record while room is certain"
        );
        // The fifth might not fit: the record is read, and its fault reported.
        assert!(cq.post(&mut io, &mut e, false).is_err());
        assert_eq!(cq.pi, 4);
        assert!(!cq.overrun);
        // Mapped again with the consumer caught up: the CQE goes in at the next lap.
        io.map(0x11000, mem.clone(), PAGE_SIZE, PAGE_SIZE, Perm::RW)
            .unwrap();
        set_ci(&mem, 3);
        assert_eq!(
            cq.post(&mut io, &mut e, false).unwrap(),
            CqPost::Written {
                index: 0,
                notify: false
            }
        );
        // In use: 5 - 3 = 2; the estimate (5 - 3) says room for two more without a read,
        // and the consumer standing still fills the ring at the next read: overrun, exactly
        // at the entry that does not fit.
        cq.post(&mut io, &mut e, false).unwrap();
        cq.post(&mut io, &mut e, false).unwrap();
        assert_eq!(cq.post(&mut io, &mut e, false).unwrap(), CqPost::Overrun);
    }

    #[test]
    fn unmapped_doorbell_record_is_a_fault_not_a_crash() {
        let mem = Arc::new(SimMemory::new(PAGE_SIZE).unwrap());
        let mut io = Iommu::new();
        io.map(0x10000, mem, 0, PAGE_SIZE, Perm::RW).unwrap();
        let mut cq = CqRing::new(
            PageList::new(vec![0x10000], 0, 0, 256).unwrap(),
            2,
            64,
            0x90000,
            false,
        );
        assert!(cq.post(&mut io, &mut [0u8; 64], false).is_err());
        assert_eq!(cq.pi, 0);
    }
}
