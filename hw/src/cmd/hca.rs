//! Function-level bring-up commands: ENABLE_HCA / DISABLE_HCA, QUERY_ISSI / SET_ISSI,
//! INIT_HCA / TEARDOWN_HCA, ACCESS_REG (with the HOST_ENDIANNESS and PAOS registers) and
//! SET_DRIVER_VERSION.
//!
//! Sources (every layout): Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_<name>_bits`, named
//! in each view's `IFC_NAME`), checked field by field in `tests/ifc_layout_bringup.rs`; the
//! order of use: rdma-core `providers/mlx5/mlx5_vfio.c` `mlx5_vfio_setup_function`
//! (and the kernel's `mlx5_function_setup` in `drivers/net/ethernet/mellanox/mlx5/core/main.c`).
//!
//! Owns: formats and their constants. Must not: sequence the bring-up (the driver's `bringup`).

use crate::error::{Error, Result};

crate::prm_layout! {
    /// ENABLE_HCA input (`mlx5_ifc_enable_hca_in_bits`): the first command after the firmware
    /// is ready; it enables the function.
    pub struct EnableHcaIn("enable_hca_in", 0x10) {
        /// `MLX5_CMD_OP_ENABLE_HCA` (0x104).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Address the embedded CPU's function (SmartNIC); 0.
        embedded_cpu_function, set_embedded_cpu_function: 0x40, 1;
        /// Function to enable; 0 = this function.
        function_id, set_function_id: 0x50, 16;
    }
}

crate::prm_layout! {
    /// ENABLE_HCA output (`mlx5_ifc_enable_hca_out_bits`; 12 bytes in the kernel).
    pub struct EnableHcaOut("enable_hca_out", 0xc) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// DISABLE_HCA input (`mlx5_ifc_disable_hca_in_bits`).
    pub struct DisableHcaIn("disable_hca_in", 0x10) {
        /// `MLX5_CMD_OP_DISABLE_HCA` (0x105).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Address the embedded CPU's function; 0.
        embedded_cpu_function, set_embedded_cpu_function: 0x40, 1;
        /// Function to disable; 0 = this function.
        function_id, set_function_id: 0x50, 16;
    }
}

crate::prm_layout! {
    /// DISABLE_HCA output (`mlx5_ifc_disable_hca_out_bits`; 12 bytes).
    pub struct DisableHcaOut("disable_hca_out", 0xc) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// QUERY_ISSI input (`mlx5_ifc_query_issi_in_bits`).
    pub struct QueryIssiIn("query_issi_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_ISSI` (0x10a).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
    }
}

crate::prm_layout! {
    /// QUERY_ISSI output (`mlx5_ifc_query_issi_out_bits`, 0x70 bytes): the interface step
    /// sequence ids the firmware supports. bypass needs ISSI 1 (bit 1 of `supported_issi_dw0`).
    pub struct QueryIssiOut("query_issi_out", 0x70) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The ISSI in force.
        current_issi, set_current_issi: 0x50, 16;
        /// Bit n set = ISSI n supported (for n < 32). Byte 0x6c.
        supported_issi_dw0, set_supported_issi_dw0: 0x360, 32;
    }
}

impl<T: AsRef<[u8]>> QueryIssiOut<T> {
    /// Whether ISSI `issi` (< 32) is supported; the kernel and rdma-core test
    /// `supported_issi_dw0 & (1 << 1)` before SET_ISSI 1.
    pub fn supports_issi(&self, issi: u32) -> bool {
        issi < 32 && self.supported_issi_dw0() & (1 << issi) != 0
    }
}

crate::prm_layout! {
    /// SET_ISSI input (`mlx5_ifc_set_issi_in_bits`).
    pub struct SetIssiIn("set_issi_in", 0x10) {
        /// `MLX5_CMD_OP_SET_ISSI` (0x10b).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The ISSI to use (1).
        current_issi, set_current_issi: 0x50, 16;
    }
}

crate::prm_layout! {
    /// SET_ISSI output (`mlx5_ifc_set_issi_out_bits`).
    pub struct SetIssiOut("set_issi_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

/// The ISSI bypass speaks (kernel `mlx5_core_set_issi`, rdma-core `mlx5_vfio_set_issi`).
pub const ISSI_1: u16 = 1;

crate::prm_layout! {
    /// INIT_HCA input (`mlx5_ifc_init_hca_in_bits`, 0x20 bytes): sent once the boot and init
    /// pages are given and the capabilities set.
    pub struct InitHcaIn("init_hca_in", 0x20) {
        /// `MLX5_CMD_OP_INIT_HCA` (0x102).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Software vHCA id (only with the `sw_vhca_id` capability); 0.
        sw_vhca_id, set_sw_vhca_id: 0x62, 14;
    }
}

crate::prm_layout! {
    /// INIT_HCA output (`mlx5_ifc_init_hca_out_bits`).
    pub struct InitHcaOut("init_hca_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// TEARDOWN_HCA input (`mlx5_ifc_teardown_hca_in_bits`).
    pub struct TeardownHcaIn("teardown_hca_in", 0x10) {
        /// `MLX5_CMD_OP_TEARDOWN_HCA` (0x103).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// How to tear down ([`TeardownProfile`]).
        profile, set_profile: 0x50, 16;
    }
}

crate::prm_layout! {
    /// TEARDOWN_HCA output (`mlx5_ifc_teardown_hca_out_bits`).
    pub struct TeardownHcaOut("teardown_hca_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// FORCE_CLOSE result: 0 = success, 1 = fail (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*`).
        state, set_state: 0x7f, 1;
    }
}

/// TEARDOWN_HCA `profile` (kernel `mlx5_ifc.h` `MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TeardownProfile(pub u16);

impl TeardownProfile {
    /// Orderly close; used when the device has no `fast_teardown` capability.
    pub const GRACEFUL_CLOSE: Self = Self(0x0);
    /// Forced close (kernel `mlx5_cmd_force_teardown_hca`).
    pub const FORCE_CLOSE: Self = Self(0x1);
    /// First step of fast teardown: then write nic_interface = DISABLED in the init segment
    /// and poll it (rdma-core `mlx5_vfio_teardown_hca_fast`).
    pub const PREPARE_FAST_TEARDOWN: Self = Self(0x2);
}

/// TEARDOWN_HCA `state` values (kernel `MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*`).
pub mod teardown_state {
    /// Forced teardown succeeded.
    pub const FORCE_STATE_SUCCESS: u32 = 0x0;
    /// Forced teardown failed.
    pub const FORCE_STATE_FAIL: u32 = 0x1;
}

crate::prm_layout! {
    /// ACCESS_REG input header (`mlx5_ifc_access_register_in_bits`, 16 bytes); the register's
    /// bytes (`register_data`) follow at byte 0x10, see [`access_register_in_len`].
    pub struct AccessRegisterIn("access_register_in", 0x10) {
        /// `MLX5_CMD_OP_ACCESS_REG` (0x805).
        opcode, set_opcode: 0x0, 16;
        /// [`AccessRegOpMod`]: 0 = write, 1 = read.
        op_mod, set_op_mod: 0x30, 16;
        /// Which register ([`RegisterId`]).
        register_id, set_register_id: 0x50, 16;
        /// Register-specific argument (e.g. a port number); 0 for HOST_ENDIANNESS and PAOS.
        argument, set_argument: 0x60, 32;
    }
}

crate::prm_layout! {
    /// ACCESS_REG output header (`mlx5_ifc_access_register_out_bits`); the register's bytes
    /// follow at byte 0x10.
    pub struct AccessRegisterOut("access_register_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

/// Byte offset of `register_data` in ACCESS_REG input and output.
pub const ACCESS_REG_DATA_OFF: usize = 0x10;

/// Total ACCESS_REG input (or output) length for a register of `reg_len` bytes.
pub const fn access_register_in_len(reg_len: usize) -> usize {
    ACCESS_REG_DATA_OFF + reg_len
}

// The views' buffer field is private to this module, where `prm_layout!` defined them; the
// register data lies past the header's LEN, so it is read from the whole buffer.
impl<T: AsRef<[u8]>> AccessRegisterIn<T> {
    /// The register bytes after the header (empty if the buffer ends at the header).
    pub fn register_data(&self) -> &[u8] {
        self.buf.as_ref().get(ACCESS_REG_DATA_OFF..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AccessRegisterIn<T> {
    /// The register bytes after the header, writable.
    pub fn register_data_mut(&mut self) -> &mut [u8] {
        let b = self.buf.as_mut();
        let n = b.len();
        b.get_mut(ACCESS_REG_DATA_OFF.min(n)..).unwrap_or_default()
    }
}

impl<T: AsRef<[u8]>> AccessRegisterOut<T> {
    /// The register bytes after the header.
    pub fn register_data(&self) -> &[u8] {
        self.buf.as_ref().get(ACCESS_REG_DATA_OFF..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AccessRegisterOut<T> {
    /// The register bytes after the header, writable (for a device model).
    pub fn register_data_mut(&mut self) -> &mut [u8] {
        let b = self.buf.as_mut();
        let n = b.len();
        b.get_mut(ACCESS_REG_DATA_OFF.min(n)..).unwrap_or_default()
    }
}

/// ACCESS_REG `op_mod` (kernel `MLX5_ACCESS_REGISTER_IN_OP_MOD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccessRegOpMod(pub u16);

impl AccessRegOpMod {
    /// Write the register.
    pub const WRITE: Self = Self(0x0);
    /// Read the register.
    pub const READ: Self = Self(0x1);
}

/// ACCESS_REG `register_id` (kernel `include/linux/mlx5/driver.h` `MLX5_REG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegisterId(pub u16);

impl RegisterId {
    /// Port administrative and operational status ([`PaosReg`]).
    pub const PAOS: Self = Self(0x5006);
    /// Host endianness ([`RegisterHostEndianness`]); written once during bring-up.
    pub const HOST_ENDIANNESS: Self = Self(0x7004);
}

crate::prm_layout! {
    /// The HOST_ENDIANNESS register (`mlx5_ifc_register_host_endianness_bits`, 16 bytes).
    /// `he` is the top bit of byte 0: the kernel writes the byte `MLX5_SET_HOST_ENDIANNESS`
    /// (0 on little-endian hosts, 0x80 on big-endian), i.e. `he` = 0 or 1.
    pub struct RegisterHostEndianness("register_host_endianness", 0x10) {
        /// 1 = big-endian host.
        he, set_he: 0x0, 1;
    }
}

crate::prm_layout! {
    /// The PAOS register (`mlx5_ifc_paos_reg_bits`, 16 bytes): port admin / oper status.
    pub struct PaosReg("paos_reg", 0x10) {
        /// Switch partition id.
        swid, set_swid: 0x0, 8;
        /// Local port number (1-based).
        local_port, set_local_port: 0x8, 8;
        /// Administrative status ([`port_status`]).
        admin_status, set_admin_status: 0x14, 4;
        /// Operational status ([`port_status`]), read-only.
        oper_status, set_oper_status: 0x1c, 4;
        /// Admin state update enable: set to make the write change `admin_status`.
        ase, set_ase: 0x20, 1;
        /// Event update enable.
        ee, set_ee: 0x21, 1;
        /// Event generation on operational state change.
        e, set_e: 0x3e, 2;
    }
}

/// PAOS `admin_status` / `oper_status` values (kernel `driver.h` `enum mlx5_port_status`).
pub mod port_status {
    /// Port up.
    pub const UP: u32 = 1;
    /// Port down.
    pub const DOWN: u32 = 2;
}

crate::prm_layout! {
    /// SET_DRIVER_VERSION input (`mlx5_ifc_set_driver_version_in_bits`, 0x50 bytes): a
    /// 64-byte string at byte 0x10, see [`SetDriverVersionIn::driver_version`].
    pub struct SetDriverVersionIn("set_driver_version_in", 0x50) {
        /// `MLX5_CMD_OP_SET_DRIVER_VERSION` (0x10d).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
    }
}

crate::prm_layout! {
    /// SET_DRIVER_VERSION output (`mlx5_ifc_set_driver_version_out_bits`).
    pub struct SetDriverVersionOut("set_driver_version_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

/// Byte range of `driver_version` (64 bytes) in SET_DRIVER_VERSION input.
pub const DRIVER_VERSION_RANGE: core::ops::Range<usize> = 0x10..0x50;

impl<T: AsRef<[u8]>> SetDriverVersionIn<T> {
    /// The 64 driver-version bytes (NUL-padded ASCII).
    pub fn driver_version(&self) -> &[u8] {
        self.as_bytes().get(DRIVER_VERSION_RANGE).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SetDriverVersionIn<T> {
    /// Writes `version` NUL-padded into the 64-byte field.
    ///
    /// Errors: [`Error::FieldOverflow`] if `version` is longer than 64 bytes.
    pub fn set_driver_version(&mut self, version: &[u8]) -> Result<&mut Self> {
        let field = self
            .as_bytes_mut()
            .get_mut(DRIVER_VERSION_RANGE)
            .unwrap_or_default();
        if version.len() > field.len() {
            return Err(Error::FieldOverflow {
                what: "set_driver_version_in.driver_version",
                value: version.len() as u64,
                bits: (field.len() * 8) as u32,
            });
        }
        field.fill(0);
        if let Some(dst) = field.get_mut(..version.len()) {
            dst.copy_from_slice(version);
        }
        Ok(self)
    }
}
