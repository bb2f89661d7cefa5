//! BAR0 as the host sees it: the register file of the init segment and the decoding of UAR
//! pages, like a QEMU device model's MMIO callbacks.
//!
//! Owns: [`Bar0`]: the init segment (`initializing` set until the driver writes the command
//! queue address, the NIC interface state, the health counter ticking with time), the UAR
//! decode (CQ arm at 0x20, EQ doorbells at 0x40/0x48, BlueFlame registers from 0x800, each
//! half of each bfreg its own buffer), and the doorbells latched for the device's step. MMIO
//! data is the bytes on the bus (a driver's `write_volatile::<u32>(reg, v.to_be())` reaches
//! the device as `v.to_be_bytes()`); each register accepts only its width. Must not: act on
//! a doorbell (the step does, never the MMIO write, as on hardware), count or trace (the
//! device does, for every access this part refuses).
//!
//! Sources: rdma-core `providers/mlx5/mlx5_vfio.{c,h}` (`struct mlx5_init_seg`, `cmd_dbell`),
//! the kernel's `include/linux/mlx5/device.h` (`mlx5_init_seg`, `health_buffer`), rdma-core
//! `providers/mlx5/{cq.c,qp.c,mlx5.c}` (UAR layout, BlueFlame double buffering, `mlx5_bf_copy`).

use std::collections::VecDeque;

use bypass_hw::init_seg::{self as iseg, InitSeg, NicInterface};
use bypass_hw::uar;

use crate::objects::Uar;
use crate::profile::Profile;
use crate::table::Table;

/// Log2 of the number of command queue slots the device offers (32 slots).
pub const CMDQ_LOG_SIZE: u8 = 5;
/// Log2 of the command entry stride (64 bytes).
pub const CMDQ_LOG_STRIDE: u8 = 6;

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

impl MmioError {
    /// A short reason, for the trace.
    pub(crate) fn why(&self) -> &'static str {
        match self {
            Self::OutOfRange { .. } => "outside BAR0",
            Self::Width { .. } => "bad access width",
            Self::UarNotAllocated { .. } => "UAR page not allocated",
            Self::NotARegister { .. } => "not a register",
        }
    }
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

/// What a register write asks of the rest of the device, beyond latching a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Nothing more.
    Done,
    /// The driver set the NIC interface to DISABLED (the last step of a fast teardown).
    NicDisabled,
}

/// A BlueFlame WQE being written in 64-byte bursts to one register half.
#[derive(Debug, Clone)]
struct BfPartial {
    /// BAR offset of the register half (each half of each bfreg is its own buffer).
    half: u64,
    offset: u64,
    bytes: Vec<u8>,
    need: usize,
}

/// BAR0: the init segment's registers, the UAR pages' decode and the latched doorbells.
#[derive(Debug, Clone)]
pub(crate) struct Bar0 {
    /// The init segment as the host reads it (BAR0 0x0000..INIT_SEG_LEN).
    iseg: InitSeg<[u8; iseg::INIT_SEG_LEN]>,
    /// Doorbells latched for the step, in arrival order.
    doorbells: VecDeque<Doorbell>,
    /// BlueFlame WQEs being assembled, at most one per register half: bursts to different
    /// registers (QPs of different threads) may interleave, as on hardware where each half of
    /// each bfreg is a separate write-combining buffer.
    bf_partial: Vec<BfPartial>,
}

impl Bar0 {
    /// The registers of a device fresh from reset: firmware initializing, no command queue.
    pub(crate) fn new(profile: &Profile) -> Self {
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
            iseg: img,
            doorbells: VecDeque::new(),
            bf_partial: Vec::new(),
        }
    }

    /// Ticks the health counter once per millisecond of device time from `then` to `now`
    /// (the driver's health poll expects it to advance at least once a second).
    pub(crate) fn tick(&mut self, then: u64, now: u64) {
        let ticks = (now / 1_000_000 - then / 1_000_000) as u32;
        let hc = self.iseg.health_counter().wrapping_add(ticks) & 0x00ff_ffff;
        let _ = self.iseg.set_health_counter(hc);
    }

    /// The command queue's IOVA, as the driver wrote it.
    pub(crate) fn cmdq_addr(&self) -> u64 {
        self.iseg.cmdq_addr()
    }

    /// The NIC interface state (bits 10:8 of `cmdq_addr_l_sz`).
    pub(crate) fn nic_interface(&self) -> NicInterface {
        self.iseg.nic_interface()
    }

    /// Reports a fatal firmware error through the health buffer: `rfr` set and the syndrome.
    pub(crate) fn health_error(&mut self, synd: iseg::HealthSyndrome) {
        self.iseg
            .set_health_rfr_severity(0x80)
            .set_health_synd(synd);
    }

    /// Doorbells latched and not yet taken.
    #[inline]
    pub(crate) fn pending(&self) -> usize {
        self.doorbells.len()
    }

    /// True if no doorbell is latched.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.doorbells.is_empty()
    }

    /// The oldest latched doorbell.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<Doorbell> {
        self.doorbells.pop_front()
    }

    /// The latched doorbells, oldest first.
    #[cfg(test)]
    pub(crate) fn latched(&self) -> impl Iterator<Item = &Doorbell> {
        self.doorbells.iter()
    }

    /// Refuses an access of `width` bytes at `offset` that does not lie inside BAR0.
    pub(crate) fn check_range(
        profile: &Profile,
        offset: u64,
        width: usize,
    ) -> Result<(), MmioError> {
        let bar_len = profile.bar0_len();
        if offset
            .checked_add(width as u64)
            .is_none_or(|end| end > bar_len)
        {
            return Err(MmioError::OutOfRange { offset, bar_len });
        }
        Ok(())
    }

    /// Reads `data.len()` bytes at `offset`, inside BAR0 ([`Bar0::check_range`]), at device
    /// time `now`. Init segment registers take 4-byte reads; UAR pages are write-only and read
    /// as zero.
    pub(crate) fn read(&mut self, now: u64, offset: u64, data: &mut [u8]) -> Result<(), MmioError> {
        data.fill(0);
        let off = offset as usize; // < bar0_len, checked by the caller
        if off >= iseg::INIT_SEG_LEN {
            return Ok(());
        }
        if data.len() != 4 || !off.is_multiple_of(4) {
            return Err(MmioError::Width {
                offset,
                width: data.len(),
                expected: 4,
            });
        }
        // Live registers: the free-running timer and the clocks follow device time.
        self.iseg
            .set_internal_timer(now)
            .set_real_time(now)
            .set_ieee1588_clk(now);
        data.copy_from_slice(&self.iseg.read_u32(off).to_be_bytes());
        Ok(())
    }

    /// Writes `data` at `offset`, inside BAR0 ([`Bar0::check_range`]). Doorbells are latched;
    /// register writes take effect at once. `uars`: the pages the firmware allocated; `spare`:
    /// the buffer the next BlueFlame WQE is written into (the send queue gives back the last).
    #[inline(always)]
    pub(crate) fn write(
        &mut self,
        profile: &Profile,
        uars: &Table<Uar>,
        spare: &mut Vec<u8>,
        offset: u64,
        data: &[u8],
    ) -> Result<Written, MmioError> {
        let page = (offset / uar::ADAPTER_PAGE_SIZE as u64) as u32;
        if page >= profile.first_uar || offset as usize >= iseg::INIT_SEG_LEN {
            return self
                .uar_write(profile, uars, spare, page, offset, data)
                .map(|()| Written::Done);
        }
        let value = match <[u8; 4]>::try_from(data) {
            Ok(b) if offset.is_multiple_of(4) => u32::from_be_bytes(b),
            _ => {
                return Err(MmioError::Width {
                    offset,
                    width: data.len(),
                    expected: 4,
                });
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
                    return Ok(Written::NicDisabled);
                }
            }
            iseg::CMD_DBELL => self.doorbells.push_back(Doorbell::Command(value)),
            // Read-only or reserved: ignored, as on hardware.
            _ => {}
        }
        Ok(Written::Done)
    }

    #[inline(always)]
    fn uar_write(
        &mut self,
        profile: &Profile,
        uars: &Table<Uar>,
        spare: &mut Vec<u8>,
        page: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), MmioError> {
        if !uars.contains(page) {
            return Err(MmioError::UarNotAllocated { offset, page });
        }
        let in_page = (offset % uar::ADAPTER_PAGE_SIZE as u64) as usize;
        let bf_reg = 1usize << profile.caps.log_bf_reg_size;
        let width_err = |expected| MmioError::Width {
            offset,
            width: data.len(),
            expected,
        };
        match in_page {
            uar::MLX5_CQ_DOORBELL => {
                let Ok(b) = <[u8; 8]>::try_from(data) else {
                    return Err(width_err(8));
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
                    return Err(width_err(4));
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
                self.bf_write(spare, page, offset, within, data, bf_reg / 2)?;
            }
            _ => return Err(MmioError::NotARegister { offset }),
        }
        Ok(())
    }

    /// A write to a BlueFlame register half. An 8-byte write at its start is a plain doorbell;
    /// 64-byte bursts (rdma-core `mlx5_bf_copy`, `mmio_memcpy_x64`) carry a whole WQE, whose
    /// length the ctrl segment's DS count gives.
    #[inline(always)]
    fn bf_write(
        &mut self,
        spare: &mut Vec<u8>,
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
                    return Err(MmioError::NotARegister { offset });
                }
                let mut bytes = std::mem::take(spare);
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
                        return Err(MmioError::NotARegister { offset });
                    }
                }
            }
            _ => {
                return Err(MmioError::Width {
                    offset,
                    width: data.len(),
                    expected: 64,
                });
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
