//! The firmware: the command queue and every command handler, bring-up state, pages.
//!
//! (Being written: the firmware-core work item owns this file; QP commands are in [`qp`].)

pub(crate) mod qp;

use bypass_hw::syndrome::CmdStatus;

use crate::device::Device;
use crate::profile::Profile;

/// Firmware state.
#[derive(Debug, Clone, Default)]
pub struct Firmware {}

impl Firmware {
    /// Firmware state of a device fresh from reset.
    pub fn new(_profile: &Profile) -> Self {
        Self {}
    }
}

/// Why a command failed: the status and syndrome its output header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmdError {
    /// `mbox_out.status`.
    pub status: CmdStatus,
    /// `mbox_out.syndrome`.
    pub syndrome: u32,
}

/// A command handler's result. Handlers get the whole input (header included) and an output
/// buffer already sized to the opcode's output layout and zeroed; they fill the fields after
/// the header, and the dispatcher writes status and syndrome.
pub(crate) type CmdResult = Result<(), CmdError>;

/// Processes the command queue slots in `slots` (the `cmd_dbell` bitmask).
pub(crate) fn process(_dev: &mut Device, _slots: u32) {}

/// The driver wrote NIC interface DISABLED into `cmdq_addr_l_sz` (fast teardown).
pub(crate) fn nic_disabled(_dev: &mut Device) {}
