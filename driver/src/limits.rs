//! Resource limits: which device object ran out, the capability that bounds it, and the knob
//! that raises it.
//!
//! Owns: [`Resource`] (QP, CQ, MR, PD, UAR, EQ, SRQ, firmware pages), its capability name and
//! knob, and [`refused`], the one place a firmware refusal of a create command becomes
//! [`DriverError::ResourceLimit`]. Must not: count objects or decide policy; the create paths
//! call [`refused`] on their command's error, and the firmware-page budget lives in the page
//! pool (`pages.rs`).
//!
//! How a limit is reached: the firmware refuses the create command with status LIM_ERR
//! ("exceeds limit") or NO_RES_ERR ("no resources"), the two the kernel's `mlx5_cmd_check`
//! maps to ENOMEM and EAGAIN (`drivers/net/ethernet/mellanox/mlx5/core/cmd.c`,
//! `cmd_status_to_err`). Sizes the firmware would also refuse with LIM_ERR (a CQ above
//! `log_max_cq_sz`, QP caps above the WQ limits) are checked by the driver before a command is
//! sent (`CqTooLarge`, `QpCapTooLarge`), so a LIM_ERR on a create command is the object count.
//! Capability names follow `mlx5_ifc.h` (`cmd_hca_cap`).

use bypass_hw::cmd::caps::CmdHcaCap;
use bypass_hw::syndrome::CmdStatus;

use crate::error::DriverError;
use crate::hca::Caps;

/// A device resource whose number is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resource {
    /// Queue pairs (CREATE_QP).
    Qp,
    /// Completion queues (CREATE_CQ).
    Cq,
    /// Memory regions: memory keys (CREATE_MKEY).
    Mr,
    /// Protection domains (ALLOC_PD).
    Pd,
    /// UAR pages of BAR0 (ALLOC_UAR).
    Uar,
    /// Event queues (CREATE_EQ).
    Eq,
    /// Shared receive queues (CREATE_RMP).
    Srq,
    /// Pages lent to the firmware (MANAGE_PAGES GIVE).
    FirmwarePages,
}

impl Resource {
    /// Every resource, for reports and tests.
    pub const ALL: [Resource; 8] = [
        Self::Qp,
        Self::Cq,
        Self::Mr,
        Self::Pd,
        Self::Uar,
        Self::Eq,
        Self::Srq,
        Self::FirmwarePages,
    ];

    /// What the objects are called in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Qp => "QP",
            Self::Cq => "CQ",
            Self::Mr => "MR (memory key)",
            Self::Pd => "PD",
            Self::Uar => "UAR page",
            Self::Eq => "EQ",
            Self::Srq => "SRQ",
            Self::FirmwarePages => "firmware page",
        }
    }

    /// The capability (or configuration field) that bounds the count.
    pub fn cap(self) -> &'static str {
        match self {
            Self::Qp => "log_max_qp",
            Self::Cq => "log_max_cq",
            Self::Mr => "log_max_mkey",
            Self::Pd => "log_max_pd",
            Self::Uar => "the UAR pages of BAR0",
            Self::Eq => "log_max_eq",
            Self::Srq => "log_max_srq",
            Self::FirmwarePages => "HcaConfig::max_firmware_pages",
        }
    }

    /// What raises the limit, or what to do when it cannot be raised.
    pub fn knob(self) -> &'static str {
        match self {
            Self::Qp => {
                "destroy QPs no longer used (on hardware the firmware fixes log_max_qp; on the sim raise Caps::log_max_qp in its Profile)"
            }
            Self::Cq => {
                "destroy CQs no longer used, or share a CQ between QPs (on the sim raise Caps::log_max_cq)"
            }
            Self::Mr => {
                "deregister MRs no longer used, or register fewer, larger regions (on the sim raise Caps::log_max_mkey)"
            }
            Self::Pd => {
                "deallocate PDs no longer used; one PD can hold every QP and MR of an application (on the sim raise Caps::log_max_pd)"
            }
            Self::Uar => {
                "QPs fall back to shared doorbell registers when no UAR page is left; close contexts no longer used (on the sim raise Profile::uar_pages)"
            }
            Self::Eq => {
                "lower HcaConfig::max_comp_vectors so fewer completion EQs are made (on the sim raise Caps::log_max_eq)"
            }
            Self::Srq => {
                "destroy SRQs no longer used; one SRQ can serve many QPs (on the sim raise Caps::log_max_srq)"
            }
            Self::FirmwarePages => {
                "raise HcaConfig::max_firmware_pages (each page is 4 KiB of pinned host memory), or create fewer objects"
            }
        }
    }

    /// The most objects the device's capabilities allow, where they say (`2^log_max_*`).
    pub fn limit(self, caps: &Caps) -> Option<u64> {
        let log = match self {
            Self::Qp => caps.log_max_qp,
            Self::Cq => caps.log_max_cq,
            Self::Mr => caps.log_max_mkey,
            Self::Pd => caps.log_max_pd,
            Self::Eq => caps.log_max_eq,
            Self::Srq => {
                if caps.general_page.is_empty() {
                    return None;
                }
                let log = CmdHcaCap::wrap_unchecked(&caps.general_page[..]).log_max_srq();
                u8::try_from(log).unwrap_or(u8::MAX)
            }
            Self::Uar | Self::FirmwarePages => return None,
        };
        1u64.checked_shl(u32::from(log))
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.noun())
    }
}

/// True when a command failed because the device has no more of something (LIM_ERR or
/// NO_RES_ERR).
pub fn is_exhaustion(e: &DriverError) -> bool {
    matches!(
        e.cmd_status(),
        Some(CmdStatus::LIM_ERR | CmdStatus::NO_RES_ERR)
    )
}

/// Maps the error of the command that creates a `resource` object: an exhaustion status
/// becomes [`DriverError::ResourceLimit`] (naming the limit from `caps` and the knob); any
/// other error is returned as it was.
pub fn refused(e: DriverError, resource: Resource, caps: &Caps) -> DriverError {
    if !is_exhaustion(&e) {
        return e;
    }
    let (op, syndrome) = match &e {
        DriverError::CmdFailed { op, syndrome, .. } => (*op, *syndrome),
        _ => return e,
    };
    DriverError::ResourceLimit {
        resource,
        op,
        limit: resource.limit(caps),
        cap: resource.cap(),
        knob: resource.knob(),
        syndrome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::cmd::Opcode;

    fn failed(status: CmdStatus) -> DriverError {
        DriverError::CmdFailed {
            op: Opcode::CREATE_QP,
            op_mod: 0,
            status,
            syndrome: 0x1234,
            syndrome_name: None,
        }
    }

    #[test]
    fn exhaustion_statuses_become_resource_limits_naming_cap_and_knob() {
        let caps = Caps {
            log_max_qp: 3,
            ..Caps::default()
        };
        for st in [CmdStatus::LIM_ERR, CmdStatus::NO_RES_ERR] {
            let e = refused(failed(st), Resource::Qp, &caps);
            assert!(
                matches!(
                    e,
                    DriverError::ResourceLimit {
                        resource: Resource::Qp,
                        limit: Some(8),
                        syndrome: 0x1234,
                        ..
                    }
                ),
                "{e}"
            );
            let text = e.to_string();
            assert!(text.contains("log_max_qp") && text.contains('8'), "{text}");
            assert!(text.contains("Caps::log_max_qp"), "{text}");
        }
    }

    #[test]
    fn other_failures_pass_through() {
        let e = refused(
            failed(CmdStatus::BAD_PARAM_ERR),
            Resource::Qp,
            &Caps::default(),
        );
        assert!(matches!(e, DriverError::CmdFailed { .. }), "{e}");
        let e = refused(
            DriverError::CmdTooShort { len: 1 },
            Resource::Cq,
            &Caps::default(),
        );
        assert!(matches!(e, DriverError::CmdTooShort { .. }), "{e}");
    }

    #[test]
    fn every_resource_names_a_cap_and_a_knob() {
        for r in Resource::ALL {
            assert!(!r.cap().is_empty() && !r.knob().is_empty(), "{r:?}");
        }
        assert_eq!(Resource::Uar.limit(&Caps::default()), None);
    }
}
