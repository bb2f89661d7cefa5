//! Bring-up and teardown: ENABLE_HCA, QUERY_ISSI / SET_ISSI, INIT_HCA, TEARDOWN_HCA (graceful,
//! forced, fast), DISABLE_HCA, and the rule of which command each stage accepts ([`gate`]).
//!
//! Owns: [`gate`] and the stage changes. Must not: touch pages or capabilities beyond what a
//! stage change implies (see [`super::pages`], [`super::caps`]).
//!
//! Sources: the order the kernel (`drivers/net/ethernet/mellanox/mlx5/core/main.c`
//! `mlx5_function_enable` / `mlx5_function_open`: `mlx5_core_enable_hca`, `mlx5_core_set_issi`,
//! `mlx5_satisfy_startup_pages(dev, 1)`, `set_hca_ctrl`, `set_hca_cap`,
//! `mlx5_satisfy_startup_pages(dev, 0)`, `mlx5_cmd_init_hca`) and rdma-core
//! (`providers/mlx5/mlx5_vfio.c` `mlx5_vfio_setup_function`, `mlx5_vfio_teardown_hca_fast`)
//! both follow; kernel `mlx5_cmd_fast_teardown_hca`.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::hca::{
    DisableHcaIn, EnableHcaIn, QueryIssiOut, SetIssiIn, TeardownHcaIn, TeardownHcaOut,
    TeardownProfile,
};
use bypass_hw::syndrome::CmdStatus;

use super::syndromes as s;
use super::{CmdError, CmdResult, Firmware, Hca, QpControl, Stage};
use crate::events::Completions;
use crate::objects::Objects;
use crate::profile::Profile;

/// ISSIs the device supports: 0 and 1 (`supported_issi_dw0` bits 0 and 1).
pub const SUPPORTED_ISSI: u32 = 0b11;

/// Whether `op` is allowed in the firmware's current stage (BAD_SYS_STATE otherwise):
///
/// - Before ENABLE_HCA only ENABLE_HCA is accepted: both drivers send it first, right after the
///   `initializing` bit clears, and nothing they send earlier exists (not even QUERY_ISSI,
///   which `mlx5_core_set_issi` runs after enabling). Anything else: BAD_SYS_STATE
///   `NEED_ENABLE_HCA`.
/// - After ENABLE_HCA: ISSI, pages, ACCESS_REG, SET_DRIVER_VERSION, NOP; the capability
///   commands once the boot pages are given (`NEED_BOOT_PAGES`); INIT_HCA once SET_ISSI ran
///   (`NEED_SET_ISSI`) and the boot and init pages are given (NO_RES `NEED_INIT_PAGES`: the
///   firmware lacks memory, the status the PRM uses for missing pages). ACCESS_REG
///   HOST_ENDIANNESS is not required (the kernel skips it on some functions).
/// - After INIT_HCA: every resource command; not SET_ISSI / SET_HCA_CAP (`TOO_LATE_AFTER_INIT`),
///   INIT_HCA (`ALREADY_INITIALIZED`) or DISABLE_HCA (`NEED_TEARDOWN`).
/// - After a graceful or forced TEARDOWN_HCA: every object is gone and the firmware's pages
///   are reclaimable (QUERY_PAGES reports the negative count, MANAGE_PAGES TAKE returns them);
///   then DISABLE_HCA. Fast teardown (PREPARE_FAST_TEARDOWN, then the driver writes NIC
///   interface DISABLED: rdma-core `mlx5_vfio_teardown_hca_fast`, kernel
///   `mlx5_cmd_fast_teardown_hca`) resets the function at once: the pages are simply the
///   driver's again, as after a reset.
pub(crate) fn gate(fw: &Firmware, op: Opcode) -> CmdResult {
    let st = |synd| Err(CmdError::state(synd));
    let always = matches!(
        op,
        Opcode::NOP
            | Opcode::QUERY_ISSI
            | Opcode::QUERY_PAGES
            | Opcode::MANAGE_PAGES
            | Opcode::ACCESS_REG
            | Opcode::SET_DRIVER_VERSION
    );
    match fw.stage {
        Stage::Disabled if op == Opcode::ENABLE_HCA => Ok(()),
        Stage::Disabled => st(s::NEED_ENABLE_HCA),
        _ if op == Opcode::ENABLE_HCA => st(s::ALREADY_ENABLED),
        _ if always => Ok(()),
        Stage::Enabled => match op {
            Opcode::SET_ISSI | Opcode::DISABLE_HCA | Opcode::INIT_HCA => Ok(()),
            Opcode::QUERY_HCA_CAP | Opcode::SET_HCA_CAP => {
                if super::pages::boot_pages_given(fw) {
                    Ok(())
                } else {
                    st(s::NEED_BOOT_PAGES)
                }
            }
            _ => st(s::NEED_INIT_HCA),
        },
        Stage::Initialized => match op {
            Opcode::SET_ISSI | Opcode::SET_HCA_CAP => st(s::TOO_LATE_AFTER_INIT),
            Opcode::INIT_HCA => st(s::ALREADY_INITIALIZED),
            Opcode::DISABLE_HCA => st(s::NEED_TEARDOWN),
            _ => Ok(()),
        },
        Stage::TornDown => match op {
            Opcode::DISABLE_HCA | Opcode::QUERY_HCA_CAP => Ok(()),
            Opcode::INIT_HCA => st(s::ALREADY_INITIALIZED),
            Opcode::SET_ISSI | Opcode::SET_HCA_CAP => st(s::TOO_LATE_AFTER_INIT),
            _ => st(s::NEED_INIT_HCA),
        },
    }
}

/// ENABLE_HCA: only this function (function_id 0, not the embedded CPU's).
pub(crate) fn enable_hca(
    fw: &mut Firmware,
    profile: &Profile,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let i = EnableHcaIn::wrap_unchecked(input);
    if i.function_id() != 0 || i.embedded_cpu_function() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    fw.stage = Stage::Enabled;
    fw.issi = 0;
    fw.issi_set = false;
    fw.page_target = u64::from(profile.boot_pages) + u64::from(profile.init_pages);
    Ok(())
}

/// DISABLE_HCA: back to the state after reset. Pages still held are the driver's again (the
/// kernel reclaims them before, rdma-core frees them after; neither expects them back here).
pub(crate) fn disable_hca(
    fw: &mut Firmware,
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    dp: &mut dyn QpControl,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let i = DisableHcaIn::wrap_unchecked(input);
    if i.function_id() != 0 || i.embedded_cpu_function() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    reset(fw, objs, comp, profile, dp);
    Ok(())
}

/// QUERY_ISSI: the ISSI in force and the supported set (kernel `mlx5_core_set_issi`).
pub(crate) fn query_issi(fw: &Firmware, _input: &[u8], out: &mut [u8]) -> CmdResult {
    let mut o = QueryIssiOut::wrap_unchecked(out);
    let _ = o.set_current_issi(u32::from(fw.issi));
    let _ = o.set_supported_issi_dw0(SUPPORTED_ISSI);
    Ok(())
}

/// SET_ISSI: 0 or 1; anything else BAD_PARAM.
pub(crate) fn set_issi(fw: &mut Firmware, input: &[u8], _out: &mut [u8]) -> CmdResult {
    let v = SetIssiIn::wrap_unchecked(input).current_issi();
    if v >= 32 || SUPPORTED_ISSI & (1 << v) == 0 {
        return Err(CmdError::param(s::UNSUPPORTED_ISSI));
    }
    fw.issi = v as u16;
    fw.issi_set = true;
    Ok(())
}

/// INIT_HCA: needs SET_ISSI and the boot and init pages.
pub(crate) fn init_hca(
    fw: &mut Firmware,
    profile: &Profile,
    _input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    if !fw.issi_set {
        return Err(CmdError::state(s::NEED_SET_ISSI));
    }
    if !super::pages::boot_pages_given(fw) {
        return Err(CmdError::state(s::NEED_BOOT_PAGES));
    }
    let need = u64::from(profile.boot_pages) + u64::from(profile.init_pages);
    if (fw.pages.len() as u64) < need {
        return Err(CmdError::new(CmdStatus::NO_RES_ERR, s::NEED_INIT_PAGES));
    }
    fw.stage = Stage::Initialized;
    Ok(())
}

/// TEARDOWN_HCA with its three profiles (kernel `mlx5_cmd_teardown_hca`,
/// `mlx5_cmd_force_teardown_hca`, `mlx5_cmd_fast_teardown_hca`).
pub(crate) fn teardown_hca(
    fw: &mut Firmware,
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    dp: &mut dyn QpControl,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let how = TeardownProfile(TeardownHcaIn::wrap_unchecked(input).profile() as u16);
    let caps = &profile.caps;
    match how {
        TeardownProfile::GRACEFUL_CLOSE | TeardownProfile::FORCE_CLOSE => {
            destroy_all(objs, comp, dp);
            fw.stage = Stage::TornDown;
            fw.page_target = 0;
            fw.fast_teardown_armed = false;
        }
        TeardownProfile::PREPARE_FAST_TEARDOWN if caps.fast_teardown => {
            fw.fast_teardown_armed = true;
        }
        _ => return Err(CmdError::param(s::BAD_TEARDOWN_PROFILE)),
    }
    // state = FORCE_STATE_SUCCESS (0): the output is already zeroed.
    let _ = TeardownHcaOut::wrap_unchecked(out).set_state(0);
    Ok(())
}

/// The driver wrote NIC interface DISABLED. After PREPARE_FAST_TEARDOWN this completes the
/// fast teardown: the function resets (objects and pages gone, as after a reset). Without the
/// prepare step the write changes nothing here: the kernel and rdma-core only write it after
/// preparing, and the init segment keeps the value the driver wrote either way.
pub(crate) fn nic_disabled(c: &mut Hca<'_>) {
    if c.fw.fast_teardown_armed {
        reset(c.fw, c.objs, c.comp, c.profile, c.dp);
    }
}

/// Back to the state after reset: every object gone, the firmware's state new.
fn reset(
    fw: &mut Firmware,
    objs: &mut Objects,
    comp: &mut Completions,
    profile: &Profile,
    dp: &mut dyn QpControl,
) {
    destroy_all(objs, comp, dp);
    *fw = Firmware::new(profile);
}

/// Every object gone: the tables, the CQs and EQs, and what the data path keeps per QP.
fn destroy_all(objs: &mut Objects, comp: &mut Completions, dp: &mut dyn QpControl) {
    objs.clear();
    comp.clear();
    dp.forget_all();
}
