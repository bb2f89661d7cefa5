//! The device as the host sees it: BAR0 as MMIO callbacks, like a QEMU device model.
//!
//! Owns: [`Device`], the register file of the init segment (its semantics: `initializing` set
//! until the driver writes the command queue address, the NIC interface state, the health
//! counter ticking with time), the decoding of UAR pages (CQ arm at 0x20, EQ doorbells at
//! 0x40/0x48, BlueFlame registers from 0x800, double-buffered) and the latching of doorbells.
//! Work a doorbell asks for happens in [`Device::step`], never inside the MMIO write, as on
//! hardware: the write only reaches the device.
//! Must not: execute commands or WQEs itself (that is `firmware` and `engine`).
//!
//! MMIO data is given as the bytes on the bus (BAR offset order): a driver's
//! `write_volatile::<u32>(reg, v.to_be())` on a little-endian host reaches the device as
//! `v.to_be_bytes()`. Each register accepts only its width; any other access is rejected,
//! counted and traced, and changes nothing.
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.{c,h}` (`struct mlx5_init_seg`, the bring-up
//! polling of `initializing`, `cmd_dbell`), the kernel's `include/linux/mlx5/device.h`
//! (`mlx5_init_seg`, `health_buffer`), rdma-core `providers/mlx5/{cq.c,qp.c,mlx5.c}` (UAR layout,
//! BlueFlame double buffering).

use std::collections::VecDeque;

use bypass_hw::init_seg::{self as iseg, InitSeg, NicInterface};
use bypass_hw::uar;

use crate::counters::Counters;
use crate::firmware::Firmware;
use crate::frame::Frame;
use crate::iommu::Iommu;
use crate::objects::Objects;
use crate::profile::Profile;
use crate::trace::{Trace, TraceEvent};

/// Why an MMIO access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MmioError {
    /// The offset is outside BAR0.
    #[error("BAR0 offset {offset:#x} is outside the {bar_len:#x}-byte BAR")]
    OutOfRange {
        /// Offset accessed.
        offset: u64,
        /// BAR0 size.
        bar_len: u64,
    },
    /// The register does not accept an access of this width.
    #[error(
        "BAR0 offset {offset:#x}: a {width}-byte access is not valid here (this register takes {expected} bytes)"
    )]
    Width {
        /// Offset accessed.
        offset: u64,
        /// Width used.
        width: usize,
        /// Width the register takes.
        expected: usize,
    },
    /// A doorbell on a UAR page the firmware has not allocated.
    #[error(
        "BAR0 offset {offset:#x} is on UAR page {page}, which is not allocated (ALLOC_UAR it first)"
    )]
    UarNotAllocated {
        /// Offset accessed.
        offset: u64,
        /// UAR page index.
        page: u32,
    },
    /// The offset is inside a UAR page but not a doorbell register.
    #[error("BAR0 offset {offset:#x} is not a doorbell register of its UAR page")]
    NotARegister {
        /// Offset accessed.
        offset: u64,
    },
}

/// A doorbell the device has received and not yet acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doorbell {
    /// `cmd_dbell`: a bitmask of command queue slots.
    Command(u32),
    /// An 8-byte send doorbell on a BlueFlame register: the first 8 bytes of the ctrl segment.
    Send {
        /// UAR page it came through.
        uar: u32,
        /// `opmod_idx_opcode`, `qpn_ds` (big-endian, as written).
        ctrl: [u8; 8],
    },
    /// A whole WQE written by BlueFlame.
    BlueFlame {
        /// UAR page it came through.
        uar: u32,
        /// The WQE, a multiple of 64 bytes.
        wqe: Vec<u8>,
    },
    /// The CQ arm doorbell: `sn << 28 | cmd << 24 | ci` and the CQN.
    CqArm {
        /// UAR page it came through.
        uar: u32,
        /// Upper dword.
        cmd_sn_ci: u32,
        /// CQ number.
        cqn: u32,
    },
    /// An EQ consumer-index update, arming (offset 0x40) or not (0x48).
    Eq {
        /// UAR page it came through.
        uar: u32,
        /// EQ number.
        eqn: u32,
        /// New consumer index.
        ci: u32,
        /// Arm.
        arm: bool,
    },
}

/// The most burst boxes a device keeps for reuse (`Device::recycle_burst`).
const BURST_SPARES: usize = 8;

/// Log2 of the number of command queue slots the device offers (32 slots).
pub const CMDQ_LOG_SIZE: u8 = 5;
/// Log2 of the command entry stride (64 bytes).
pub const CMDQ_LOG_STRIDE: u8 = 6;

/// A BlueFlame WQE being written in 64-byte bursts to one register half.
#[derive(Debug, Clone)]
struct BfPartial {
    /// BAR offset of the register half (each half of each bfreg is its own buffer).
    half: u64,
    offset: u64,
    bytes: Vec<u8>,
    need: usize,
}

/// A simulated mlx5 device.
pub struct Device {
    pub(crate) profile: Profile,
    pub(crate) iommu: Iommu,
    /// The init segment as the host reads it (BAR0 0x0000..INIT_SEG_LEN).
    pub(crate) iseg: InitSeg<[u8; iseg::INIT_SEG_LEN]>,
    pub(crate) doorbells: VecDeque<Doorbell>,
    /// BlueFlame WQEs being assembled, at most one per register half: bursts to different
    /// registers (QPs of different threads) may interleave, as on hardware where each half of
    /// each bfreg is a separate write-combining buffer.
    bf_partial: Vec<BfPartial>,
    /// The buffer of the last BlueFlame WQE the engine finished with, reused by the next
    /// (no allocation per BlueFlame post).
    pub(crate) bf_spare: Vec<u8>,
    /// Firmware state: bring-up stage, pages.
    pub(crate) fw: Firmware,
    /// Object tables.
    pub(crate) objs: Objects,
    /// Packets that arrived from the wire, not yet processed.
    pub(crate) rx: VecDeque<Frame>,
    /// Packets the device has sent, for the wire to take.
    pub(crate) tx: VecDeque<Frame>,
    /// The link takes bursts (`crate::frame`): in-process, and nothing needs the bytes.
    pub(crate) fast_tx: bool,
    /// How the link groups the packets it sends (`Device::set_tx_trains`); `None`: no
    /// grouping to align bursts to.
    pub(crate) tx_trains: Option<crate::frame::TxTrains>,
    /// The last timer/resume scan did something (so the next step scans again).
    scan_progressed: bool,
    /// Boxes of bursts this device received, for the bursts it sends (`recycle_burst`): a
    /// ping-pong allocates none. At most [`BURST_SPARES`]. The boxes themselves are what is
    /// reused (`Frame::Burst` carries a box), hence a vector of boxes.
    #[allow(clippy::vec_box)]
    pub(crate) burst_spare: Vec<Box<crate::frame::Burst>>,
    /// The destination runs of a received burst (`responder::burst`), reused; always empty
    /// between uses.
    pub(crate) runs_spare: Vec<crate::iommu::HostRun>,
    /// QPs whose error CQEs and SQ flush wait for their bursts still in flight
    /// (`engine::post_err_when_read`): the steps retry them
    /// (`engine::retry_deferred_flushes`) until none is left.
    pub(crate) deferred_flushes: Vec<u32>,
    /// Commands (slot, QPN) whose 2RST_QP / DESTROY_QP waits for the QP's bursts in flight
    /// (`firmware::cmdq::waits_for`); the steps retry them.
    pub(crate) waiting_cmds: Vec<(u8, u32)>,
    /// The last destination GID found to be one of ours (`Device::owns_gid`).
    own_gid: Option<[u8; 16]>,
    /// Wire lengths of the last packets sized on the fast path (`crate::frame::LenMemo`).
    pub(crate) len_memo: crate::frame::LenMemo,
    /// Packet headers of the last route used (`transport::headers`).
    pub(crate) headers_cache: Option<crate::transport::HeadersCache>,
    /// Device time in nanoseconds (virtual in stepped mode).
    pub(crate) now: u64,
    irq: Option<Box<dyn FnMut(u16) + Send>>,
    /// Interrupts raised per vector (also reported to the handler, if any).
    pub(crate) irq_count: Vec<u64>,
    /// Device-wide counters.
    pub counters: Counters,
    /// The optional trace.
    pub trace: Trace,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("now", &self.now)
            .field("iommu", &self.iommu)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// A device fresh from reset: firmware initializing, no command queue, nothing allocated.
    pub fn new(profile: Profile) -> Self {
        let vectors = usize::from(profile.msix_vectors);
        let mut img = InitSeg::zeroed();
        let (maj, min, sub) = profile.fw_rev;
        img.set_fw_rev(maj, min)
            .set_cmdif_rev_fw_sub(iseg::CMDIF_REV, sub)
            .set_initializing(true)
            // Health buffer fw_ver: the kernel treats it as opaque (`print_health_info` logs
            // "raw fw_ver 0x%08x") and only tests it for 0xffffffff, which means the PCI link
            // is down (`health.c` `sensor_pci_not_working`). Any other value is healthy; this
            // packing of the version is the sim's own choice.
            .set_health_fw_ver(
                (u32::from(maj) << 24) | (u32::from(min & 0xff) << 16) | u32::from(sub),
            )
            .set_health_hw_id(u32::from(profile.device_id));
        // The geometry is fixed by the device; the driver reads it from cmdq_addr_l_sz.
        img.write_u32(
            iseg::CMDQ_ADDR_L_SZ,
            (u32::from(CMDQ_LOG_SIZE) << 4) | u32::from(CMDQ_LOG_STRIDE),
        );
        Self {
            fw: Firmware::new(&profile),
            objs: Objects::new(&profile.caps, profile.first_uar, profile.uar_pages),
            profile,
            iommu: Iommu::new(),
            iseg: img,
            doorbells: VecDeque::new(),
            bf_partial: Vec::new(),
            bf_spare: Vec::new(),
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            fast_tx: false,
            tx_trains: None,
            scan_progressed: false,
            burst_spare: Vec::new(),
            len_memo: crate::frame::LenMemo::default(),
            own_gid: None,
            runs_spare: Vec::new(),
            deferred_flushes: Vec::new(),
            waiting_cmds: Vec::new(),
            headers_cache: None,
            now: 0,
            irq: None,
            irq_count: vec![0; vectors],
            counters: Counters::default(),
            trace: Trace::default(),
        }
    }

    /// The device's profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The IOMMU in front of the device: the host maps its DMA memory here.
    pub fn iommu(&mut self) -> &mut Iommu {
        &mut self.iommu
    }

    /// BAR0's size.
    pub fn bar0_len(&self) -> u64 {
        self.profile.bar0_len()
    }

    /// Installs the interrupt handler: called with the MSI-X vector each time the device
    /// raises an interrupt (the VFIO backend's eventfd write, or a test's recorder).
    pub fn set_interrupt_handler(&mut self, handler: impl FnMut(u16) + Send + 'static) {
        self.irq = Some(Box::new(handler));
    }

    /// Interrupts raised so far on `vector`.
    pub fn interrupts(&self, vector: u16) -> u64 {
        self.irq_count
            .get(usize::from(vector))
            .copied()
            .unwrap_or(0)
    }

    /// Raises MSI-X `vector`.
    pub(crate) fn raise_interrupt(&mut self, vector: u16) {
        if let Some(c) = self.irq_count.get_mut(usize::from(vector)) {
            *c += 1;
        }
        self.counters.interrupts += 1;
        let at = self.now;
        self.trace.record(|| TraceEvent::Interrupt { at, vector });
        if let Some(h) = self.irq.as_mut() {
            h(vector);
        }
    }

    /// Device time (ns).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Sets device time, ticking the health counter once per millisecond of it (the driver's
    /// health poll expects it to advance at least once a second).
    pub fn set_time(&mut self, now: u64) {
        if now > self.now {
            let ticks = (now / 1_000_000 - self.now / 1_000_000) as u32;
            let hc = self.iseg.health_counter().wrapping_add(ticks) & 0x00ff_ffff;
            let _ = self.iseg.set_health_counter(hc);
            self.now = now;
        }
    }

    /// The command queue's IOVA, as the driver wrote it.
    pub(crate) fn cmdq_addr(&self) -> u64 {
        self.iseg.cmdq_addr()
    }

    /// The NIC interface state (bits 10:8 of `cmdq_addr_l_sz`).
    pub fn nic_interface(&self) -> NicInterface {
        self.iseg.nic_interface()
    }

    /// Reports a fatal firmware error through the health buffer (as a dying device does):
    /// `rfr` set and the syndrome (kernel `MLX5_HEALTH_SYNDR_*`).
    pub fn inject_health_error(&mut self, synd: iseg::HealthSyndrome) {
        self.iseg
            .set_health_rfr_severity(0x80)
            .set_health_synd(synd);
    }

    /// True if `gid` is one of the GIDs of one of our ports. The last GID found is
    /// remembered (the profile, and so the GID table, never changes).
    pub(crate) fn owns_gid(&mut self, gid: &[u8; 16]) -> bool {
        if self.own_gid.as_ref() == Some(gid) {
            return true;
        }
        let ours = self.profile.owns_gid(gid);
        if ours {
            self.own_gid = Some(*gid);
        }
        ours
    }

    /// Doorbells received and not yet acted on.
    pub fn pending_doorbells(&self) -> usize {
        self.doorbells.len()
    }

    fn reject(&mut self, offset: u64, width: usize, e: MmioError) -> MmioError {
        self.counters.doorbell_errors += 1;
        let at = self.now;
        let why = match e {
            MmioError::OutOfRange { .. } => "outside BAR0",
            MmioError::Width { .. } => "bad access width",
            MmioError::UarNotAllocated { .. } => "UAR page not allocated",
            MmioError::NotARegister { .. } => "not a register",
        };
        self.trace.record(|| TraceEvent::MmioRejected {
            at,
            offset,
            width,
            why,
        });
        e
    }

    fn check_range(&mut self, offset: u64, width: usize) -> Result<(), MmioError> {
        let bar_len = self.bar0_len();
        if offset
            .checked_add(width as u64)
            .is_none_or(|end| end > bar_len)
        {
            return Err(self.reject(offset, width, MmioError::OutOfRange { offset, bar_len }));
        }
        Ok(())
    }

    /// Reads `data.len()` bytes of BAR0 at `offset` (bus byte order). Init segment registers
    /// take 4-byte reads; UAR pages are write-only and read as zero.
    pub fn mmio_read(&mut self, offset: u64, data: &mut [u8]) -> Result<(), MmioError> {
        self.check_range(offset, data.len())?;
        data.fill(0);
        let off = offset as usize; // < bar0_len, checked above
        if off >= iseg::INIT_SEG_LEN {
            return Ok(());
        }
        if data.len() != 4 || off % 4 != 0 {
            return Err(self.reject(
                offset,
                data.len(),
                MmioError::Width {
                    offset,
                    width: data.len(),
                    expected: 4,
                },
            ));
        }
        // Live registers: the free-running timer and the clocks follow device time.
        let t = self.now;
        self.iseg
            .set_internal_timer(t)
            .set_real_time(t)
            .set_ieee1588_clk(t);
        data.copy_from_slice(&self.iseg.read_u32(off).to_be_bytes());
        Ok(())
    }

    /// Writes `data` to BAR0 at `offset` (bus byte order). Doorbells are latched for
    /// [`Device::step`]; register writes take effect at once.
    pub fn mmio_write(&mut self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        self.check_range(offset, data.len())?;
        let at = self.now;
        self.trace.record(|| TraceEvent::MmioWrite {
            at,
            offset,
            data: data.to_vec(),
        });
        let page = (offset / uar::ADAPTER_PAGE_SIZE as u64) as u32;
        if page >= self.profile.first_uar || offset as usize >= iseg::INIT_SEG_LEN {
            return self.uar_write(page, offset, data);
        }
        let value = match <[u8; 4]>::try_from(data) {
            Ok(b) if offset % 4 == 0 => u32::from_be_bytes(b),
            _ => {
                return Err(self.reject(
                    offset,
                    data.len(),
                    MmioError::Width {
                        offset,
                        width: data.len(),
                        expected: 4,
                    },
                ));
            }
        };
        match offset as usize {
            iseg::CMDQ_ADDR_H => {
                self.iseg.set_cmdq_addr_h(value);
            }
            iseg::CMDQ_ADDR_L_SZ => {
                // Bits 31:12: the address; bits 10:8: the NIC interface the driver asks for;
                // bits 7:0 (log size/stride) are read-only.
                let keep = self.iseg.cmdq_addr_l_sz() & 0xff;
                self.iseg.set_cmdq_addr_l_sz((value & 0xffff_f700) | keep);
                // The firmware finishes initializing once it knows where its command queue is.
                self.iseg.set_initializing(false);
                if self.iseg.nic_interface() == NicInterface::DISABLED {
                    crate::firmware::nic_disabled(self);
                }
            }
            iseg::CMD_DBELL => self.doorbells.push_back(Doorbell::Command(value)),
            // Read-only or reserved: ignored, as on hardware.
            _ => {}
        }
        Ok(())
    }

    fn uar_write(&mut self, page: u32, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        if !self.objs.uars.contains(page) {
            return Err(self.reject(
                offset,
                data.len(),
                MmioError::UarNotAllocated { offset, page },
            ));
        }
        let in_page = (offset % uar::ADAPTER_PAGE_SIZE as u64) as usize;
        let bf_reg = 1usize << self.profile.caps.log_bf_reg_size;
        let width_err = |expected| MmioError::Width {
            offset,
            width: data.len(),
            expected,
        };
        match in_page {
            uar::MLX5_CQ_DOORBELL => {
                let Ok(b) = <[u8; 8]>::try_from(data) else {
                    return Err(self.reject(offset, data.len(), width_err(8)));
                };
                let cmd_sn_ci = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                let cqn = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) & 0x00ff_ffff;
                self.doorbells.push_back(Doorbell::CqArm {
                    uar: page,
                    cmd_sn_ci,
                    cqn,
                });
            }
            uar::EQ_DOORBELL_ARM | uar::EQ_DOORBELL_NO_ARM => {
                let Ok(b) = <[u8; 4]>::try_from(data) else {
                    return Err(self.reject(offset, data.len(), width_err(4)));
                };
                let v = u32::from_be_bytes(b);
                let arm = in_page == uar::EQ_DOORBELL_ARM;
                self.doorbells.push_back(Doorbell::Eq {
                    uar: page,
                    eqn: v >> 24,
                    ci: v & 0x00ff_ffff,
                    arm,
                });
            }
            o if (uar::BF_OFFSET..uar::BF_OFFSET + uar::NUM_BFREGS_PER_UAR * bf_reg)
                .contains(&o) =>
            {
                let within = ((o - uar::BF_OFFSET) % (bf_reg / 2)) as u64;
                self.bf_write(page, offset, within, data, bf_reg / 2)?;
            }
            _ => return Err(self.reject(offset, data.len(), MmioError::NotARegister { offset })),
        }
        Ok(())
    }

    /// A write to a BlueFlame register half. An 8-byte write at its start is a plain doorbell;
    /// 64-byte bursts (rdma-core `mlx5_bf_copy`, `mmio_memcpy_x64`) carry a whole WQE, whose
    /// length the ctrl segment's DS count gives.
    fn bf_write(
        &mut self,
        page: u32,
        offset: u64,
        within: u64,
        data: &[u8],
        half: usize,
    ) -> Result<(), MmioError> {
        let base = offset - within;
        match (within, data.len()) {
            (0, 8) => {
                self.bf_partial.retain(|p| p.half != base);
                let mut ctrl = [0u8; 8];
                ctrl.copy_from_slice(data);
                self.doorbells.push_back(Doorbell::Send { uar: page, ctrl });
            }
            (0, 64) => {
                let ds = usize::from(data[7] & 0x3f);
                let need = (ds * 16).div_ceil(64).max(1) * 64;
                if !self.bf_partial.is_empty() {
                    self.bf_partial.retain(|p| p.half != base);
                }
                if need > half {
                    // A WQE larger than the BlueFlame buffer cannot have been sent by BlueFlame.
                    return Err(self.reject(
                        offset,
                        data.len(),
                        MmioError::NotARegister { offset },
                    ));
                }
                let mut bytes = std::mem::take(&mut self.bf_spare);
                bytes.clear();
                bytes.extend_from_slice(data);
                if need == data.len() {
                    // The whole WQE in one burst (a one-WQEBB WQE): latched at once, with
                    // nothing to assemble.
                    self.doorbells.push_back(Doorbell::BlueFlame {
                        uar: page,
                        wqe: bytes,
                    });
                    return Ok(());
                }
                self.bf_partial.push(BfPartial {
                    half: base,
                    offset,
                    bytes,
                    need,
                });
                self.finish_bf(page, base);
            }
            (w, 64) if w % 64 == 0 => {
                let at = self
                    .bf_partial
                    .iter()
                    .position(|p| p.half == base && p.offset + p.bytes.len() as u64 == offset);
                match at.and_then(|i| self.bf_partial.get_mut(i)) {
                    Some(p) => {
                        p.bytes.extend_from_slice(data);
                        self.finish_bf(page, base);
                    }
                    None => {
                        self.bf_partial.retain(|p| p.half != base);
                        return Err(self.reject(
                            offset,
                            data.len(),
                            MmioError::NotARegister { offset },
                        ));
                    }
                }
            }
            _ => {
                return Err(self.reject(
                    offset,
                    data.len(),
                    MmioError::Width {
                        offset,
                        width: data.len(),
                        expected: 64,
                    },
                ));
            }
        }
        Ok(())
    }

    /// Latches the BlueFlame WQE of register half `base` once all its bursts arrived.
    fn finish_bf(&mut self, page: u32, base: u64) {
        if let Some(i) = self
            .bf_partial
            .iter()
            .position(|p| p.half == base && p.bytes.len() >= p.need)
        {
            let p = self.bf_partial.swap_remove(i);
            self.doorbells.push_back(Doorbell::BlueFlame {
                uar: page,
                wqe: p.bytes,
            });
        }
    }
}

impl Device {
    /// Does the work that is due: latched doorbells in arrival order, then received packets,
    /// then expired transport timers. Returns true if anything happened (a stepped world calls
    /// it until every device returns false).
    pub fn step(&mut self) -> bool {
        if self.doorbells.is_empty() && self.rx.is_empty() && self.waiting_cmds.is_empty() {
            // Only the scan can do something: run it without the rest of the step.
            let scanned = crate::transport::scan(self);
            self.scan_progressed = scanned;
            return scanned;
        }
        self.step_inner(true)
    }

    /// [`Device::step`] for the later rounds of a run to idle: the scans of every QP for
    /// expired timers and held-back work (`transport::scan`) run
    /// only if this step took a doorbell or a packet, or the last scan did something. A scan
    /// runs its QPs to a fixpoint, so repeating it with no new input, at the same time, changes
    /// nothing: skipping it keeps an exchange of a few packets from rescanning every QP of
    /// every device at each round.
    #[inline]
    pub(crate) fn step_again(&mut self) -> bool {
        // Nothing latched, nothing received, the last scan idle: this step would do nothing.
        if !self.has_pending() {
            return false;
        }
        self.step_inner(false)
    }

    /// True if [`Device::step_again`] may do something: a doorbell latched, a frame received,
    /// or the last scan did something (so the next scans again). False means the step would
    /// return false having changed nothing.
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        !self.doorbells.is_empty()
            || !self.rx.is_empty()
            || self.scan_progressed
            || !self.deferred_flushes.is_empty()
            || !self.waiting_cmds.is_empty()
    }

    fn step_inner(&mut self, force_scan: bool) -> bool {
        let mut progress = !self.waiting_cmds.is_empty() && crate::firmware::retry_waiting(self);
        while let Some(db) = self.doorbells.pop_front() {
            progress = true;
            self.ring(db);
        }
        while let Some(frame) = self.rx.pop_front() {
            progress = true;
            match frame {
                Frame::Wire(pkt) => crate::transport::receive(self, &pkt, false),
                Frame::WireChecked(pkt) => crate::transport::receive(self, &pkt, true),
                Frame::Burst(b) => {
                    crate::transport::receive_burst(self, &b);
                    self.recycle_burst(b);
                }
                Frame::Ack(a) => crate::transport::receive_ack(self, &a),
            }
        }
        if force_scan || progress || self.scan_progressed || !self.deferred_flushes.is_empty() {
            let scanned = crate::transport::scan(self);
            self.scan_progressed = scanned;
            progress |= scanned;
        }
        progress
    }

    /// Keeps the box of a burst it received for one it sends, its payload let go (no buffer
    /// is kept alive by a spare).
    pub(crate) fn recycle_burst(&mut self, mut b: Box<crate::frame::Burst>) {
        // Read: its sender's flush may go ahead (`frame::BurstReads`). A box not kept drops,
        // which lets go of the same.
        if self.burst_spare.len() < BURST_SPARES {
            b.let_go();
            self.burst_spare.push(b);
        }
    }

    /// True if a QP's error CQEs wait for its bursts still in flight
    /// (`engine::post_err_when_read`): the device has work once they are read.
    pub(crate) fn flush_waiting(&self) -> bool {
        !self.deferred_flushes.is_empty() || !self.waiting_cmds.is_empty()
    }

    /// The earliest device time at which a timer (retransmit, RNR retry) needs the device;
    /// now, if a command that waited for a QP's bursts can run.
    pub fn next_deadline(&self) -> Option<u64> {
        let timer = crate::transport::next_deadline(self);
        if !self.waiting_cmds.is_empty() && crate::firmware::waiting_ready(self) {
            return Some(timer.map_or(self.now, |t| t.min(self.now)));
        }
        timer
    }

    /// Hands a packet from the wire to the device (IP header through ICRC). It is processed by
    /// the next [`Device::step`].
    pub fn receive(&mut self, packet: Vec<u8>) {
        self.rx.push_back(Frame::Wire(packet));
    }

    /// As [`Device::receive`], for a packet whose ICRC the link has already checked and found
    /// right (the UDP link computes it to recover the IPv4 ID): every other receive check is
    /// made, the ICRC is not computed again. A link must hand a packet whose ICRC it did not
    /// check, or found wrong, to [`Device::receive`].
    pub fn receive_icrc_checked(&mut self, packet: Vec<u8>) {
        self.rx.push_back(Frame::WireChecked(packet));
    }

    /// As [`Device::receive`] (or [`Device::receive_icrc_checked`] when `icrc_checked`), for a
    /// link that reads packets into its own buffers: the packet is processed now, from
    /// `packet`, with no copy (what the next [`Device::step`] would do with it). When
    /// doorbells or earlier packets are still waiting for a step, it is queued behind them
    /// instead (a copy), so that the device takes everything in the order it arrived.
    pub fn receive_in_place(&mut self, packet: &[u8], icrc_checked: bool) {
        if !self.rx.is_empty() || !self.doorbells.is_empty() {
            let bytes = packet.to_vec();
            self.rx.push_back(if icrc_checked {
                Frame::WireChecked(bytes)
            } else {
                Frame::Wire(bytes)
            });
            return;
        }
        crate::transport::receive(self, packet, icrc_checked);
    }

    /// As [`Device::receive_in_place`], for a packet whose IP and UDP headers (the first
    /// `ip.header_len()` + 8 bytes) the link wrote itself from what its socket reported, `ip`
    /// and `ports`: the device takes them as given instead of parsing them again, and does not
    /// verify the IPv4 header checksum (the kernel verified the one on the wire; the link's
    /// is right by construction). Every other receive check is made. Queued behind waiting
    /// doorbells or packets as [`Device::receive_in_place`] queues (then parsed as any packet).
    pub fn receive_udp_in_place(
        &mut self,
        packet: &[u8],
        ip: &bypass_hw::roce::IpSpec,
        ports: bypass_hw::roce::UdpPorts,
        icrc_checked: bool,
    ) {
        if !self.rx.is_empty() || !self.doorbells.is_empty() {
            self.receive_in_place(packet, icrc_checked);
            return;
        }
        crate::transport::receive_udp(self, packet, ip, ports, icrc_checked);
    }

    /// Takes the next packet the device sent, if any (IP header through ICRC). A burst the
    /// device queued for an in-process link is segmented into its wire packets first.
    pub fn take_tx(&mut self) -> Option<Vec<u8>> {
        match self.tx.pop_front()? {
            Frame::Wire(bytes) | Frame::WireChecked(bytes) => Some(bytes),
            Frame::Ack(a) => a.to_wire(),
            Frame::Burst(b) => {
                let mut pkts = b.segment().into_iter();
                let first = pkts.next();
                for p in pkts.rev() {
                    self.tx.push_front(Frame::Wire(p));
                }
                first
            }
        }
    }

    /// Takes the next frame the device sent (a packet, or a burst if the link said it takes
    /// them: [`Device::set_fast_tx`]).
    pub fn take_frame(&mut self) -> Option<Frame> {
        self.tx.pop_front()
    }

    /// Hands a frame from an in-process link to the device; processed by the next
    /// [`Device::step`] as the packets it stands for.
    pub fn receive_frame(&mut self, frame: Frame) {
        self.rx.push_back(frame);
    }

    /// Says whether the link this device sends on takes bursts: in-process, in order, and
    /// nobody needs the bytes (no trace, no faults, no jitter). Off by default: a device
    /// outside a [`crate::World`] sends only wire packets.
    pub fn set_fast_tx(&mut self, on: bool) {
        self.fast_tx = on;
    }

    /// Says how the link this device sends on groups packets into one send (`None`, the
    /// default: it does not). The requester then ends a WRITE burst that its window cuts
    /// short where such a send ends, when an ACK is sure to come for what is in flight (see
    /// `transport::requester`); what is sent, and in which order, does not change.
    pub(crate) fn set_tx_trains(&mut self, trains: Option<crate::frame::TxTrains>) {
        self.tx_trains = trains;
    }

    /// Packets queued for the wire and not yet taken.
    pub(crate) fn tx_queued(&self) -> u64 {
        self.tx.iter().map(Frame::packets).sum()
    }

    fn ring(&mut self, db: Doorbell) {
        match db {
            Doorbell::Command(slots) => crate::firmware::process(self, slots),
            Doorbell::Send { uar, ctrl } => crate::engine::send_doorbell(self, uar, ctrl, None),
            Doorbell::BlueFlame { uar, wqe } => {
                let mut ctrl = [0u8; 8];
                ctrl.copy_from_slice(&wqe[..8]);
                crate::engine::send_doorbell(self, uar, ctrl, Some(wqe));
            }
            Doorbell::CqArm {
                uar,
                cmd_sn_ci,
                cqn,
            } => self.cq_arm(uar, cmd_sn_ci, cqn),
            Doorbell::Eq { uar, eqn, ci, arm } => self.eq_doorbell(uar, eqn, ci, arm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(v: u32) -> [u8; 4] {
        v.to_be_bytes()
    }

    /// Allocates a UAR page, as `ALLOC_UAR` does, and returns its index.
    fn alloc_uar(d: &mut Device) -> u32 {
        d.objs
            .uars
            .insert_with(|_| crate::objects::Uar::default())
            .unwrap()
    }

    fn read32(d: &mut Device, off: u64) -> u32 {
        let mut b = [0u8; 4];
        d.mmio_read(off, &mut b).unwrap();
        u32::from_be_bytes(b)
    }

    /// A RoCEv2 SEND to QP `qpn` from 10.0.0.9 to `dst`, and its IP fields and ports.
    fn send_packet(
        dst: [u8; 4],
        qpn: u32,
    ) -> (Vec<u8>, bypass_hw::roce::IpSpec, bypass_hw::roce::UdpPorts) {
        use bypass_hw::roce::{BthFields, BthOpcode, ExtFields, IpSpec, PacketSpec, UdpPorts};
        let ip =
            IpSpec::from_gids(&Profile::ipv4_gid([10, 0, 0, 9]), &Profile::ipv4_gid(dst)).unwrap();
        let ports = UdpPorts {
            src: 0xc001,
            dst: bypass_hw::roce::ROCE_V2_UDP_DPORT,
        };
        let spec = PacketSpec {
            ip,
            ports,
            bth: BthFields {
                opcode: BthOpcode::RC_SEND_ONLY,
                dest_qp: qpn,
                psn: 3,
                ..Default::default()
            },
            ext: ExtFields::default(),
            payload: b"payload",
        };
        let mut buf = vec![0u8; spec.packet_len().unwrap()];
        bypass_hw::roce::emit(&spec, &mut buf).unwrap();
        (buf, ip, ports)
    }

    #[test]
    fn a_packet_with_its_header_given_meets_every_check_a_parsed_one_meets() {
        // Each case: destination, ICRC corrupted, ICRC vouched for by the link, a doorbell
        // waiting (the packet is queued behind it, a copy, and taken by the next step), and
        // the counters (packets, ICRC errors, discards) both entry points must leave.
        struct Case {
            dst: [u8; 4],
            corrupt: bool,
            checked: bool,
            queued: bool,
            counts: (u64, u64, u64),
        }
        let case = |dst, corrupt, checked, queued, counts| Case {
            dst,
            corrupt,
            checked,
            queued,
            counts,
        };
        let (us, other) = ([10, 0, 0, 1], [10, 0, 0, 7]);
        let cases = [
            // Ours, but no QP 0x42: discarded (`receive_packet`'s QP lookup).
            case(us, false, false, false, (1, 0, 1)),
            // Another device's address: discarded.
            case(other, false, false, false, (1, 0, 1)),
            // A bad ICRC, not checked by the link: an ICRC error, nothing else looked at.
            case(us, true, false, false, (1, 1, 0)),
            // A bad ICRC the link vouched for: not computed again, so it passes, and the
            // unknown QP discards the packet.
            case(us, true, true, false, (1, 0, 1)),
            // Behind a waiting doorbell: queued, then counted as case 0 by the step.
            case(us, false, false, true, (1, 0, 1)),
        ];
        let ours = Profile::with_id(1);
        let counts = |d: &Device| {
            (
                d.counters.port_rcv_packets,
                d.counters.rx_icrc_errors,
                d.counters.rx_discards,
            )
        };
        for (i, c) in cases.into_iter().enumerate() {
            let (mut bytes, ip, ports) = send_packet(c.dst, 0x42);
            if c.corrupt {
                let n = bytes.len();
                bytes[n - 6] ^= 1;
            }
            let mut parsed = Device::new(ours.clone());
            let mut given = Device::new(ours.clone());
            if c.queued {
                // An empty `cmd_dbell` write: latched, and a no-op when rung.
                for d in [&mut parsed, &mut given] {
                    d.mmio_write(iseg::CMD_DBELL as u64, &be(0)).unwrap();
                }
            }
            parsed.receive_in_place(&bytes, c.checked);
            given.receive_udp_in_place(&bytes, &ip, ports, c.checked);
            if c.queued {
                for d in [&mut parsed, &mut given] {
                    assert_eq!(counts(d), (0, 0, 0), "case {i}: queued, not taken yet");
                    assert_eq!(d.rx.len(), 1, "case {i}: queued");
                    assert!(d.step(), "case {i}");
                }
            }
            assert_eq!(counts(&given), c.counts, "case {i}: header given");
            assert_eq!(counts(&parsed), c.counts, "case {i}: parsed");
            assert_eq!(given.counters.port_rcv_data, bytes.len() as u64, "case {i}");
            assert_eq!(
                parsed.counters.port_rcv_data,
                bytes.len() as u64,
                "case {i}"
            );
        }
    }

    #[test]
    fn init_segment_reports_revisions_and_initializing_until_cmdq_is_set() {
        let mut d = Device::new(Profile::default());
        assert_eq!(read32(&mut d, iseg::CMDIF_REV_FW_SUB as u64) >> 16, 5);
        assert_eq!(read32(&mut d, iseg::FW_REV as u64), (35 << 16) | 16);
        assert_eq!(read32(&mut d, iseg::INITIALIZING as u64) >> 31, 1);
        assert_eq!(read32(&mut d, iseg::CMDQ_ADDR_L_SZ as u64) & 0xff, 0x56);
        d.mmio_write(iseg::CMDQ_ADDR_H as u64, &be(0x1)).unwrap();
        d.mmio_write(iseg::CMDQ_ADDR_L_SZ as u64, &be(0x2345_6000))
            .unwrap();
        assert_eq!(read32(&mut d, iseg::INITIALIZING as u64) >> 31, 0);
        assert_eq!(d.cmdq_addr(), 0x1_2345_6000);
        assert_eq!(
            read32(&mut d, iseg::CMDQ_ADDR_L_SZ as u64),
            0x2345_6056,
            "log size/stride are read-only"
        );
    }

    #[test]
    fn registers_take_only_their_width_and_bar_bounds_hold() {
        let mut d = Device::new(Profile::default());
        let mut b8 = [0u8; 8];
        assert!(matches!(
            d.mmio_read(iseg::FW_REV as u64, &mut b8),
            Err(MmioError::Width { expected: 4, .. })
        ));
        assert!(matches!(
            d.mmio_write(iseg::CMD_DBELL as u64, &[1, 0]),
            Err(MmioError::Width { .. })
        ));
        assert!(matches!(
            d.mmio_read(d.bar0_len(), &mut [0; 4]),
            Err(MmioError::OutOfRange { .. })
        ));
        assert!(matches!(
            d.mmio_write(u64::MAX - 1, &[0; 4]),
            Err(MmioError::OutOfRange { .. })
        ));
        assert_eq!(d.pending_doorbells(), 0);
        assert_eq!(d.counters.doorbell_errors, 4);
    }

    #[test]
    fn health_counter_ticks_with_time() {
        let mut d = Device::new(Profile::default());
        let h0 = read32(&mut d, iseg::HEALTH_COUNTER as u64);
        d.set_time(3_500_000);
        assert_eq!(read32(&mut d, iseg::HEALTH_COUNTER as u64), h0 + 3);
        assert_eq!(read32(&mut d, iseg::INTERNAL_TIMER_L as u64), 3_500_000);
    }

    #[test]
    fn doorbells_on_unallocated_uar_pages_are_refused() {
        let mut d = Device::new(Profile::default());
        let off = u64::from(d.profile.first_uar) * 4096 + 0x800;
        assert!(matches!(
            d.mmio_write(off, &[0; 8]),
            Err(MmioError::UarNotAllocated { .. })
        ));
        assert_eq!(d.pending_doorbells(), 0);
    }

    #[test]
    fn uar_doorbells_latch_with_exact_widths_and_blueflame_bursts_assemble() {
        let mut d = Device::new(Profile::default());
        let uar = alloc_uar(&mut d);
        let base = u64::from(uar) * 4096;
        d.mmio_write(base + 0x20, &[0x10, 0, 0, 5, 0, 0, 0, 9])
            .unwrap();
        d.mmio_write(base + 0x40, &be((3 << 24) | 7)).unwrap();
        d.mmio_write(base + 0x48, &be((3 << 24) | 8)).unwrap();
        assert!(d.mmio_write(base + 0x40, &[0; 8]).is_err());
        // Plain 8-byte doorbell on bfreg 1, first half.
        d.mmio_write(base + 0x800 + 512, &[0, 0, 1, 0x0a, 0, 0, 0x12, 0x02])
            .unwrap();
        // A 2-WQEBB BlueFlame WQE (ds = 5) on bfreg 1, second half, in two bursts.
        let mut chunk = [0u8; 64];
        chunk[7] = 5;
        d.mmio_write(base + 0x800 + 512 + 256, &chunk).unwrap();
        assert_eq!(
            d.pending_doorbells(),
            4,
            "the WQE is not complete after its first burst"
        );
        d.mmio_write(base + 0x800 + 512 + 256 + 64, &[0xee; 64])
            .unwrap();
        let dbs: Vec<_> = d.doorbells.iter().cloned().collect();
        assert_eq!(
            dbs[0],
            Doorbell::CqArm {
                uar,
                cmd_sn_ci: 0x1000_0005,
                cqn: 9
            }
        );
        assert_eq!(
            dbs[1],
            Doorbell::Eq {
                uar,
                eqn: 3,
                ci: 7,
                arm: true
            }
        );
        assert_eq!(
            dbs[2],
            Doorbell::Eq {
                uar,
                eqn: 3,
                ci: 8,
                arm: false
            }
        );
        assert_eq!(
            dbs[3],
            Doorbell::Send {
                uar,
                ctrl: [0, 0, 1, 0x0a, 0, 0, 0x12, 0x02]
            }
        );
        match &dbs[4] {
            Doorbell::BlueFlame { uar: u, wqe } => {
                assert_eq!(*u, uar);
                assert_eq!(wqe.len(), 128);
                assert_eq!(wqe[64], 0xee);
            }
            other => panic!("expected BlueFlame, got {other:?}"),
        }
    }

    #[test]
    fn a_one_burst_blueflame_wqe_latches_at_once_and_drops_a_partial_one_on_its_register() {
        let mut d = Device::new(Profile::default());
        let uar = alloc_uar(&mut d);
        let reg = u64::from(uar) * 4096 + 0x800 + 512;
        // The first burst of a 2-WQEBB WQE (ds = 5), then a 1-WQEBB WQE (ds = 3) on the same
        // register half: the new WQE replaces the unfinished one, as the old path did.
        let mut two = [0xa0u8; 64];
        two[7] = 5;
        d.mmio_write(reg, &two).unwrap();
        assert_eq!(d.pending_doorbells(), 0);
        let mut one = [0xb0u8; 64];
        one[7] = 3;
        d.mmio_write(reg, &one).unwrap();
        assert_eq!(d.pending_doorbells(), 1, "latched by its only burst");
        // The rest of the dropped WQE is no longer a continuation of anything.
        assert!(d.mmio_write(reg + 64, &[0xa1; 64]).is_err());
        match d.doorbells.front() {
            Some(Doorbell::BlueFlame { uar: u, wqe }) => {
                assert_eq!(*u, uar);
                assert_eq!(&wqe[..], &one[..]);
            }
            other => panic!("expected the one-burst WQE, got {other:?}"),
        }
        assert_eq!(d.pending_doorbells(), 1);
    }

    #[test]
    fn blueflame_bursts_to_different_registers_interleave_without_losing_either_wqe() {
        let mut d = Device::new(Profile::default());
        let (a, b) = (alloc_uar(&mut d), alloc_uar(&mut d));
        let (ra, rb) = (
            u64::from(a) * 4096 + 0x800 + 512,
            u64::from(b) * 4096 + 0x800 + 512 + 256,
        );
        // Two threads, each posting a 2-WQEBB WQE (ds = 5) by BlueFlame on its own UAR page;
        // their bursts reach the device interleaved, with an 8-byte doorbell on a third
        // register (bfreg 2 of page a) in between.
        let burst = |tag: u8, ds: u8| {
            let mut c = [tag; 64];
            c[7] = ds;
            c
        };
        d.mmio_write(ra, &burst(0xa0, 5)).unwrap();
        d.mmio_write(rb, &burst(0xb0, 5)).unwrap();
        d.mmio_write(
            u64::from(a) * 4096 + 0x800 + 1024,
            &[0, 0, 0, 0x0a, 0, 0, 0x13, 0x01],
        )
        .unwrap();
        d.mmio_write(rb + 64, &[0xb1; 64]).unwrap();
        d.mmio_write(ra + 64, &[0xa1; 64]).unwrap();
        let bf: Vec<_> = d
            .doorbells
            .iter()
            .filter_map(|db| match db {
                Doorbell::BlueFlame { uar, wqe } => Some((*uar, wqe[0], wqe[64], wqe.len())),
                _ => None,
            })
            .collect();
        assert_eq!(bf, [(b, 0xb0, 0xb1, 128), (a, 0xa0, 0xa1, 128)]);
        assert_eq!(d.pending_doorbells(), 3);
    }
}
