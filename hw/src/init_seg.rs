//! The initialization segment: the registers at the start of BAR0 through which a driver finds
//! the firmware version, hands over the command queue, rings command doorbells, waits for the
//! firmware to finish initializing, and watches the device's health. All registers are
//! big-endian 32-bit.
//!
//! Sources: Linux `include/linux/mlx5/device.h` `struct mlx5_init_seg` and
//! `struct health_buffer` (byte offsets), `include/linux/mlx5/mlx5_ifc.h`
//! `mlx5_ifc_initial_seg_bits` / `mlx5_ifc_health_buffer_bits` (bit fields; checked against the
//! constants here in `tests/ifc_layout_bringup.rs`) and `MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`;
//! kernel `drivers/net/ethernet/mellanox/mlx5/core/health.c` (`hsynd_str`, `sensor_*`) and
//! `mlx5_core.h` (`MLX5_NIC_IFC_*`); rdma-core `mlx5_vfio.c` (`mlx5_vfio_wait_fw_init`,
//! `mlx5_vfio_init_cmd_interface`, `mlx5_health_check_fatal_sensors`).
//!
//! Owns: the register map and a length-checked view over a copy or mapping of it.
//! Must not: do MMIO (the driver's backend reads the registers with volatile accesses of the
//! exact width; this view is for decoded values, the sim's BAR model, and tests).

use core::fmt;

use crate::error::{Error, Result};

/// `fw_rev`: firmware minor (bits 31..16) and major (15..0) version.
pub const FW_REV: usize = 0x0;
/// `cmdif_rev_fw_sub`: command interface revision (31..16), firmware subminor (15..0).
pub const CMDIF_REV_FW_SUB: usize = 0x4;
/// `cmdq_addr_h`: the command queue's DMA address, bits 63..32.
pub const CMDQ_ADDR_H: usize = 0x10;
/// `cmdq_addr_l_sz`: the command queue's DMA address bits 31..12 on write; on read also the
/// queue's log size (7..4), log stride (3..0) and NIC interface state (10..8).
pub const CMDQ_ADDR_L_SZ: usize = 0x14;
/// `cmd_dbell`: write `1 << slot` to hand command slot `slot` to the device.
pub const CMD_DBELL: usize = 0x18;
/// `initializing`: bit 31 set while the firmware is still initializing.
pub const INITIALIZING: usize = 0x1fc;
/// The 64-byte health buffer.
pub const HEALTH: usize = 0x200;
/// Size of the health buffer.
pub const HEALTH_LEN: usize = 0x40;
/// `assert_var[0..6]`: firmware assert variables, at `HEALTH + 4 * i`.
pub const HEALTH_ASSERT_VAR: usize = HEALTH;
/// `assert_exit_ptr`.
pub const HEALTH_ASSERT_EXIT_PTR: usize = HEALTH + 0x20;
/// `assert_callra`.
pub const HEALTH_ASSERT_CALLRA: usize = HEALTH + 0x24;
/// `time`: firmware time stamp of the last health event.
pub const HEALTH_TIME: usize = HEALTH + 0x2c;
/// `fw_ver`: reads 0xffffffff when the device has fallen off the PCI bus.
pub const HEALTH_FW_VER: usize = HEALTH + 0x30;
/// `hw_id`.
pub const HEALTH_HW_ID: usize = HEALTH + 0x34;
/// `rfr_severity`: bit 7 = reset-flow required (rfr), bit 3 = valid, bits 2..0 = severity.
pub const HEALTH_RFR_SEVERITY: usize = HEALTH + 0x38;
/// `irisc_index`: which internal RISC reported.
pub const HEALTH_IRISC_INDEX: usize = HEALTH + 0x3c;
/// `synd`: health syndrome ([`HealthSyndrome`]).
pub const HEALTH_SYND: usize = HEALTH + 0x3d;
/// `ext_synd`: extended syndrome (BE16).
pub const HEALTH_EXT_SYND: usize = HEALTH + 0x3e;
/// `cmd_exec_to`: command execution timeout hint.
pub const CMD_EXEC_TO: usize = 0xff8;
/// `cmd_q_init_to`: command queue init timeout hint.
pub const CMD_Q_INIT_TO: usize = 0xffc;
/// `internal_timer_h`: free-running device timer, high half.
pub const INTERNAL_TIMER_H: usize = 0x1000;
/// `internal_timer_l`: free-running device timer, low half.
pub const INTERNAL_TIMER_L: usize = 0x1004;
/// `health_counter`: bits 23..0 advance while the firmware is alive; bits 31..24 are the
/// `health_syndrome` of `mlx5_ifc_initial_seg_bits`.
pub const HEALTH_COUNTER: usize = 0x1010;
/// `real_time_h`: real-time clock, high half.
pub const REAL_TIME_H: usize = 0x1040;
/// `real_time_l`: real-time clock, low half.
pub const REAL_TIME_L: usize = 0x1044;
/// `ieee1588_clk` (BE64).
pub const IEEE1588_CLK: usize = 0x2000;
/// `ieee1588_clk_type`.
pub const IEEE1588_CLK_TYPE: usize = 0x2008;
/// `clr_intx`: write to clear a legacy INTx interrupt.
pub const CLR_INTX: usize = 0x200c;
/// Size of `struct mlx5_init_seg`: the view needs this many bytes.
pub const INIT_SEG_LEN: usize = 0x2010;

/// The only command interface revision bypass (like the kernel's `CMD_IF_REV` and rdma-core)
/// speaks.
pub const CMDIF_REV: u16 = 5;
/// Bit of `initializing` that is set while the firmware initializes.
pub const INITIALIZING_BIT: u32 = 1 << 31;
/// Bit of `initializing` saying the firmware supports a reset request (kernel
/// `MLX5_FW_RESET_SUPPORTED_OFFSET`).
pub const FW_RESET_SUPPORTED_BIT: u32 = 1 << 30;
/// Shift of the NIC interface state in `cmdq_addr_l_sz` (kernel `MLX5_NIC_IFC_OFFSET`).
pub const NIC_IFC_OFFSET: u32 = 8;
/// Largest command queue (log2 of entries) a driver accepts: 32 slots.
pub const MAX_LOG_CMDQ_SIZE: u8 = 5;
/// `log_sz + log_stride` may not exceed this: the queue fits in one 4 KiB page.
pub const MAX_LOG_CMDQ_BYTES: u8 = 12;

/// NIC interface state, bits 10..8 of `cmdq_addr_l_sz` (kernel `mlx5_core.h` `MLX5_NIC_IFC_*`;
/// `mlx5_ifc.h` `MLX5_INITIAL_SEG_NIC_INTERFACE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NicInterface(pub u8);

impl NicInterface {
    /// Normal operation with a driver.
    pub const FULL_DRIVER: Self = Self(0);
    /// Disabled: after fast teardown, or a fatal error (a health sensor).
    pub const DISABLED: Self = Self(1);
    /// No-DRAM NIC mode.
    pub const NO_DRAM_NIC: Self = Self(2);
    /// Software reset in progress (a health sensor).
    pub const SW_RESET: Self = Self(7);

    /// The state's kernel name, or `None`.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("FULL_DRIVER"),
            1 => Some("DISABLED"),
            2 => Some("NO_DRAM_NIC"),
            7 => Some("SW_RESET"),
            _ => None,
        }
    }
}

/// A read-only or writable view over an init segment image (smoltcp style): length checked
/// once in [`InitSeg::new_checked`], then every getter and setter is infallible for whole
/// registers. Multi-byte registers are big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitSeg<T> {
    buf: T,
}

impl InitSeg<[u8; INIT_SEG_LEN]> {
    /// A zeroed init segment image that owns its bytes (what a device model keeps as its
    /// register file); cannot fail, the array is exactly [`INIT_SEG_LEN`] bytes.
    pub const fn zeroed() -> Self {
        Self {
            buf: [0; INIT_SEG_LEN],
        }
    }
}

impl<T: AsRef<[u8]>> InitSeg<T> {
    /// Wraps `buf`, which must hold at least [`INIT_SEG_LEN`] bytes.
    pub fn new_checked(buf: T) -> Result<Self> {
        crate::prm::check_len("mlx5_init_seg", buf.as_ref(), INIT_SEG_LEN)?;
        Ok(Self { buf })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Reads the big-endian 32-bit register at byte `off` (0 if outside the buffer, which
    /// `new_checked` rules out for every named register).
    pub fn read_u32(&self, off: usize) -> u32 {
        self.buf
            .as_ref()
            .get(off..off.saturating_add(4))
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_be_bytes)
    }

    fn read_u8(&self, off: usize) -> u8 {
        self.buf.as_ref().get(off).copied().unwrap_or(0)
    }

    /// `fw_rev` (raw).
    pub fn fw_rev(&self) -> u32 {
        self.read_u32(FW_REV)
    }
    /// Firmware major version (`fw_rev` bits 15..0; kernel `fw_rev_maj`).
    pub fn fw_rev_major(&self) -> u16 {
        self.fw_rev() as u16
    }
    /// Firmware minor version (`fw_rev` bits 31..16; kernel `fw_rev_min`).
    pub fn fw_rev_minor(&self) -> u16 {
        (self.fw_rev() >> 16) as u16
    }
    /// `cmdif_rev_fw_sub` (raw).
    pub fn cmdif_rev_fw_sub(&self) -> u32 {
        self.read_u32(CMDIF_REV_FW_SUB)
    }
    /// Firmware subminor version (bits 15..0; kernel `fw_rev_sub`).
    pub fn fw_rev_subminor(&self) -> u16 {
        self.cmdif_rev_fw_sub() as u16
    }
    /// Command interface revision (bits 31..16); must be [`CMDIF_REV`].
    pub fn cmdif_rev(&self) -> u16 {
        (self.cmdif_rev_fw_sub() >> 16) as u16
    }
    /// `cmdq_addr_h`.
    pub fn cmdq_addr_h(&self) -> u32 {
        self.read_u32(CMDQ_ADDR_H)
    }
    /// `cmdq_addr_l_sz` (raw).
    pub fn cmdq_addr_l_sz(&self) -> u32 {
        self.read_u32(CMDQ_ADDR_L_SZ)
    }
    /// The command queue's DMA address as programmed (low 12 bits dropped).
    pub fn cmdq_addr(&self) -> u64 {
        (u64::from(self.cmdq_addr_h()) << 32) | u64::from(self.cmdq_addr_l_sz() & !0xfff)
    }
    /// log2 of the number of command slots (bits 7..4 of `cmdq_addr_l_sz`).
    pub fn log_cmdq_size(&self) -> u8 {
        ((self.cmdq_addr_l_sz() >> 4) & 0xf) as u8
    }
    /// log2 of the distance between command slots in bytes (bits 3..0).
    pub fn log_cmdq_stride(&self) -> u8 {
        (self.cmdq_addr_l_sz() & 0xf) as u8
    }
    /// The NIC interface state (bits 10..8).
    pub fn nic_interface(&self) -> NicInterface {
        NicInterface(((self.cmdq_addr_l_sz() >> NIC_IFC_OFFSET) & 0x7) as u8)
    }
    /// Whether the command queue geometry is one a driver may use: at most 32 slots, all in
    /// one 4 KiB page (rdma-core `mlx5_vfio_init_cmd_interface`, kernel `mlx5_cmd_init`).
    pub fn cmdq_geometry_ok(&self) -> bool {
        let (sz, st) = (self.log_cmdq_size(), self.log_cmdq_stride());
        sz <= MAX_LOG_CMDQ_SIZE && sz + st <= MAX_LOG_CMDQ_BYTES
    }
    /// `cmd_dbell`.
    pub fn cmd_dbell(&self) -> u32 {
        self.read_u32(CMD_DBELL)
    }
    /// `initializing` (raw).
    pub fn initializing_reg(&self) -> u32 {
        self.read_u32(INITIALIZING)
    }
    /// True while the firmware is still initializing (bit 31).
    pub fn initializing(&self) -> bool {
        self.initializing_reg() & INITIALIZING_BIT != 0
    }
    /// `assert_var[i]` for `i` < 6.
    ///
    /// Errors: [`Error::IndexOutOfRange`] for `i` ≥ 6.
    pub fn health_assert_var(&self, i: usize) -> Result<u32> {
        if i >= 6 {
            return Err(Error::IndexOutOfRange {
                what: "health_buffer.assert_var",
                index: i,
                len: 6,
            });
        }
        Ok(self.read_u32(HEALTH_ASSERT_VAR + 4 * i))
    }
    /// `assert_exit_ptr`.
    pub fn health_assert_exit_ptr(&self) -> u32 {
        self.read_u32(HEALTH_ASSERT_EXIT_PTR)
    }
    /// `assert_callra`.
    pub fn health_assert_callra(&self) -> u32 {
        self.read_u32(HEALTH_ASSERT_CALLRA)
    }
    /// Health `time`.
    pub fn health_time(&self) -> u32 {
        self.read_u32(HEALTH_TIME)
    }
    /// Health `fw_ver`; 0xffffffff means the device is unreachable (a fatal sensor).
    pub fn health_fw_ver(&self) -> u32 {
        self.read_u32(HEALTH_FW_VER)
    }
    /// Health `hw_id`.
    pub fn health_hw_id(&self) -> u32 {
        self.read_u32(HEALTH_HW_ID)
    }
    /// `rfr_severity` byte (raw).
    pub fn health_rfr_severity(&self) -> u8 {
        self.read_u8(HEALTH_RFR_SEVERITY)
    }
    /// Reset-flow required (bit 7 of `rfr_severity`; kernel `MLX5_RFR_BIT_OFFSET`).
    pub fn health_rfr(&self) -> bool {
        self.health_rfr_severity() & 0x80 != 0
    }
    /// The severity is valid (bit 3).
    pub fn health_valid(&self) -> bool {
        self.health_rfr_severity() & 0x08 != 0
    }
    /// Severity (bits 2..0; syslog levels as the kernel prints them).
    pub fn health_severity(&self) -> u8 {
        self.health_rfr_severity() & 0x7
    }
    /// `irisc_index`.
    pub fn health_irisc_index(&self) -> u8 {
        self.read_u8(HEALTH_IRISC_INDEX)
    }
    /// The health syndrome (0 = healthy).
    pub fn health_synd(&self) -> HealthSyndrome {
        HealthSyndrome(self.read_u8(HEALTH_SYND))
    }
    /// The extended syndrome.
    pub fn health_ext_synd(&self) -> u16 {
        u16::from_be_bytes([
            self.read_u8(HEALTH_EXT_SYND),
            self.read_u8(HEALTH_EXT_SYND + 1),
        ])
    }
    /// `internal_timer_h:l` as one 64-bit value.
    pub fn internal_timer(&self) -> u64 {
        (u64::from(self.read_u32(INTERNAL_TIMER_H)) << 32)
            | u64::from(self.read_u32(INTERNAL_TIMER_L))
    }
    /// `health_counter` (raw).
    pub fn health_counter_reg(&self) -> u32 {
        self.read_u32(HEALTH_COUNTER)
    }
    /// The liveness counter: the low 24 bits of `health_counter`, which the firmware advances;
    /// three unchanged reads one second apart mean it is dead (kernel `poll_health`).
    pub fn health_counter(&self) -> u32 {
        self.health_counter_reg() & 0x00ff_ffff
    }
    /// `real_time_h:l` as one 64-bit value.
    pub fn real_time(&self) -> u64 {
        (u64::from(self.read_u32(REAL_TIME_H)) << 32) | u64::from(self.read_u32(REAL_TIME_L))
    }
    /// `ieee1588_clk` (BE64).
    pub fn ieee1588_clk(&self) -> u64 {
        (u64::from(self.read_u32(IEEE1588_CLK)) << 32) | u64::from(self.read_u32(IEEE1588_CLK + 4))
    }
    /// `ieee1588_clk_type`.
    pub fn ieee1588_clk_type(&self) -> u32 {
        self.read_u32(IEEE1588_CLK_TYPE)
    }
    /// Whether a fatal health sensor fires (rdma-core `mlx5_health_check_fatal_sensors`,
    /// kernel `check_fatal_sensors`): the device is off the bus, the NIC interface is
    /// DISABLED or SW_RESET, or reset-flow is required with a nonzero syndrome.
    pub fn fatal_sensor(&self) -> bool {
        self.health_fw_ver() == 0xffff_ffff
            || matches!(
                self.nic_interface(),
                NicInterface::DISABLED | NicInterface::SW_RESET
            )
            || (self.health_rfr() && self.health_synd().0 != 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InitSeg<T> {
    /// Writes the big-endian 32-bit register at byte `off` (a no-op outside the buffer, which
    /// `new_checked` rules out for every named register).
    pub fn write_u32(&mut self, off: usize, v: u32) -> &mut Self {
        if let Some(b) = self.buf.as_mut().get_mut(off..off.saturating_add(4)) {
            b.copy_from_slice(&v.to_be_bytes());
        }
        self
    }

    fn write_u8(&mut self, off: usize, v: u8) -> &mut Self {
        if let Some(b) = self.buf.as_mut().get_mut(off) {
            *b = v;
        }
        self
    }

    /// Sets `fw_rev` from major and minor.
    pub fn set_fw_rev(&mut self, major: u16, minor: u16) -> &mut Self {
        self.write_u32(FW_REV, (u32::from(minor) << 16) | u32::from(major))
    }
    /// Sets `cmdif_rev_fw_sub` from the command interface revision and firmware subminor.
    pub fn set_cmdif_rev_fw_sub(&mut self, cmdif_rev: u16, subminor: u16) -> &mut Self {
        self.write_u32(
            CMDIF_REV_FW_SUB,
            (u32::from(cmdif_rev) << 16) | u32::from(subminor),
        )
    }
    /// Sets `cmdq_addr_h`.
    pub fn set_cmdq_addr_h(&mut self, v: u32) -> &mut Self {
        self.write_u32(CMDQ_ADDR_H, v)
    }
    /// Sets `cmdq_addr_l_sz` (raw).
    pub fn set_cmdq_addr_l_sz(&mut self, v: u32) -> &mut Self {
        self.write_u32(CMDQ_ADDR_L_SZ, v)
    }
    /// Programs the command queue address as a driver does: `cmdq_addr_h` = high half,
    /// `cmdq_addr_l_sz` = low half (the low 12 bits are the device's to report).
    ///
    /// Errors: [`Error::Malformed`] if `addr` is not 4 KiB aligned.
    pub fn set_cmdq_addr(&mut self, addr: u64) -> Result<&mut Self> {
        if addr & 0xfff != 0 {
            return Err(Error::Malformed {
                what: "mlx5_init_seg.cmdq_addr",
                reason: "the command queue must be 4 KiB aligned",
            });
        }
        self.set_cmdq_addr_h((addr >> 32) as u32);
        let low = self.cmdq_addr_l_sz() & 0xfff;
        Ok(self.set_cmdq_addr_l_sz((addr as u32) | low))
    }
    /// Sets the command queue geometry the device reports (a device model).
    ///
    /// Errors: [`Error::FieldOverflow`] if either value does not fit in 4 bits.
    pub fn set_cmdq_geometry(&mut self, log_size: u8, log_stride: u8) -> Result<&mut Self> {
        for (what, v) in [
            ("cmdq_addr_l_sz.log_cmdq_size", log_size),
            ("cmdq_addr_l_sz.log_cmdq_stride", log_stride),
        ] {
            if v > 0xf {
                return Err(Error::FieldOverflow {
                    what,
                    value: u64::from(v),
                    bits: 4,
                });
            }
        }
        let v =
            (self.cmdq_addr_l_sz() & !0xff) | (u32::from(log_size) << 4) | u32::from(log_stride);
        Ok(self.set_cmdq_addr_l_sz(v))
    }
    /// Sets the NIC interface state (bits 10..8), as rdma-core's fast teardown writes DISABLED.
    ///
    /// Errors: [`Error::FieldOverflow`] if the state does not fit in 3 bits.
    pub fn set_nic_interface(&mut self, state: NicInterface) -> Result<&mut Self> {
        if state.0 > 7 {
            return Err(Error::FieldOverflow {
                what: "cmdq_addr_l_sz.nic_interface",
                value: u64::from(state.0),
                bits: 3,
            });
        }
        let v = (self.cmdq_addr_l_sz() & !(0x7 << NIC_IFC_OFFSET))
            | (u32::from(state.0) << NIC_IFC_OFFSET);
        Ok(self.set_cmdq_addr_l_sz(v))
    }
    /// Sets `cmd_dbell`.
    pub fn set_cmd_dbell(&mut self, v: u32) -> &mut Self {
        self.write_u32(CMD_DBELL, v)
    }
    /// Sets or clears the `initializing` bit, keeping the other bits.
    pub fn set_initializing(&mut self, on: bool) -> &mut Self {
        let v = self.initializing_reg() & !INITIALIZING_BIT;
        self.write_u32(INITIALIZING, if on { v | INITIALIZING_BIT } else { v })
    }
    /// Sets health `fw_ver`.
    pub fn set_health_fw_ver(&mut self, v: u32) -> &mut Self {
        self.write_u32(HEALTH_FW_VER, v)
    }
    /// Sets health `hw_id`.
    pub fn set_health_hw_id(&mut self, v: u32) -> &mut Self {
        self.write_u32(HEALTH_HW_ID, v)
    }
    /// Sets the `rfr_severity` byte (raw).
    pub fn set_health_rfr_severity(&mut self, v: u8) -> &mut Self {
        self.write_u8(HEALTH_RFR_SEVERITY, v)
    }
    /// Sets the health syndrome.
    pub fn set_health_synd(&mut self, s: HealthSyndrome) -> &mut Self {
        self.write_u8(HEALTH_SYND, s.0)
    }
    /// Sets the extended syndrome.
    pub fn set_health_ext_synd(&mut self, v: u16) -> &mut Self {
        let [a, b] = v.to_be_bytes();
        self.write_u8(HEALTH_EXT_SYND, a)
            .write_u8(HEALTH_EXT_SYND + 1, b)
    }
    /// Sets `internal_timer_h:l`.
    pub fn set_internal_timer(&mut self, v: u64) -> &mut Self {
        self.write_u32(INTERNAL_TIMER_H, (v >> 32) as u32)
            .write_u32(INTERNAL_TIMER_L, v as u32)
    }
    /// Sets the liveness counter (low 24 bits of `health_counter`), keeping the top byte.
    ///
    /// Errors: [`Error::FieldOverflow`] if `v` does not fit in 24 bits.
    pub fn set_health_counter(&mut self, v: u32) -> Result<&mut Self> {
        if v > 0x00ff_ffff {
            return Err(Error::FieldOverflow {
                what: "mlx5_init_seg.health_counter",
                value: u64::from(v),
                bits: 24,
            });
        }
        let top = self.health_counter_reg() & 0xff00_0000;
        Ok(self.write_u32(HEALTH_COUNTER, top | v))
    }
    /// Sets `real_time_h:l`.
    pub fn set_real_time(&mut self, v: u64) -> &mut Self {
        self.write_u32(REAL_TIME_H, (v >> 32) as u32)
            .write_u32(REAL_TIME_L, v as u32)
    }
    /// Sets `ieee1588_clk`.
    pub fn set_ieee1588_clk(&mut self, v: u64) -> &mut Self {
        self.write_u32(IEEE1588_CLK, (v >> 32) as u32)
            .write_u32(IEEE1588_CLK + 4, v as u32)
    }
}

crate::syndrome::explained_codes! {
    /// A health syndrome (`health.synd`), named after the kernel's
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_*` (`mlx5_ifc.h`), explained after its `hsynd_str`
    /// (`health.c`).
    pub struct HealthSyndrome(u8) {
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR`.
    FW_INTERNAL_ERR = 0x1 => "firmware internal error: collect the health buffer (assert_var, ext_synd), reset the device, update firmware if it recurs",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_DEAD_IRISC`.
    DEAD_IRISC = 0x7 => "an internal processor stopped responding: reset the device (PCI reset or power cycle)",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_HW_FATAL_ERR`.
    HW_FATAL_ERR = 0x8 => "unrecoverable hardware error: reset the device; replace the card if it recurs",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_CRC_ERR`.
    FW_CRC_ERR = 0x9 => "firmware image CRC error: reflash the firmware (mlxfwmanager / flint)",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_FETCH_PCI_ERR`.
    ICM_FETCH_PCI_ERR = 0xa => "PCI error while fetching ICM (firmware pages): check the IOMMU mappings of the pages given by MANAGE_PAGES",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_PAGE_ERR`.
    ICM_PAGE_ERR = 0xb => "bad ICM page: a page given to the firmware was freed or unmapped while in use",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ASYNCHRONOUS_EQ_BUF_OVERRUN`.
    ASYNCHRONOUS_EQ_BUF_OVERRUN = 0xc => "an async EQ overflowed: update the EQ consumer index at least every MLX5_NUM_SPARE_EQE entries",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_IN_ERR`.
    EQ_IN_ERR = 0xd => "EQ in error state: check the EQ buffer mapping and size",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_INV`.
    EQ_INV = 0xe => "an invalid EQ was referenced: a CQ/QP names an EQ that does not exist",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_FFSER_ERR`.
    FFSER_ERR = 0xf => "FFSER error (firmware fatal service error): reset the device",
    /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_HIGH_TEMP_ERR`.
    HIGH_TEMP_ERR = 0x10 => "high temperature: check cooling and airflow; the device shut down to protect itself",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_registers_big_endian() {
        let mut buf = vec![0u8; INIT_SEG_LEN];
        buf[4..8].copy_from_slice(&[0x00, 0x05, 0x03, 0xe8]);
        buf[0x14..0x18].copy_from_slice(&[0x12, 0x34, 0x51, 0x58]);
        buf[0x1fc] = 0x80;
        let s = InitSeg::new_checked(&buf[..]).unwrap();
        assert_eq!(s.cmdif_rev(), CMDIF_REV);
        assert_eq!(s.fw_rev_subminor(), 1000);
        assert_eq!(s.log_cmdq_size(), 5);
        assert_eq!(s.log_cmdq_stride(), 8);
        assert_eq!(s.nic_interface(), NicInterface::DISABLED);
        assert!(s.initializing());
        assert!(s.fatal_sensor());
        assert!(!s.cmdq_geometry_ok());
        assert!(InitSeg::new_checked(&buf[..INIT_SEG_LEN - 1]).is_err());
    }

    #[test]
    fn syndromes_are_named() {
        assert_eq!(HealthSyndrome(0x10).name(), Some("HIGH_TEMP_ERR"));
        assert_eq!(HealthSyndrome(0x2).name(), None);
        assert!(
            HealthSyndrome::ALL
                .iter()
                .all(|s| !s.cause_and_fix().is_empty())
        );
    }
}
