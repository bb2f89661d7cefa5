//! The firmware: the command queue and every command handler, bring-up state, pages.
//!
//! Owns: [`Firmware`] (bring-up stage, ISSI, firmware pages, capability pages, vport and
//! register state) and the dispatch of a gathered command to its handler. Submodules:
//! [`cmdq`] (entries and mailbox chains, by DMA), [`bringup`] (ENABLE/DISABLE/INIT/TEARDOWN,
//! ISSI, the order rules), [`pages`], [`caps`], [`vport`] (vport contexts and ACCESS_REG),
//! [`resources`] (PD, UAR, mkey), [`cq_eq`], [`qp`] (QP commands, another work item's),
//! [`srq`] (SRQs as RMPs), [`cong`] (congestion control's status, parameters, counters),
//! [`syndromes`]. Must not: touch the data path's rings or packets (it creates the objects the
//! data path uses and nothing else).
//!
//! Dispatch order, for every command: unknown opcode → BAD_OP; `inlen` below the input layout →
//! BAD_INP_LEN; `outlen` below what the command returns → BAD_OUTP_LEN; the bring-up stage does
//! not allow it → BAD_SYS_STATE; then the handler. The kernel's `mlx5_cmd_check`
//! (`core/cmd.c`) reports these by status; the syndrome says which check failed.

pub(crate) mod bringup;
pub(crate) mod caps;
pub(crate) mod cmdq;
pub(crate) mod command;
pub(crate) mod cong;
pub(crate) mod cq_eq;
pub(crate) mod pages;
pub(crate) mod qp;
pub(crate) mod resources;
pub(crate) mod srq;
#[cfg(test)]
mod srq_tests;
pub mod syndromes;
pub(crate) mod vport;

use bypass_hw::cmd::{MboxIn, MboxOut, Opcode};
use bypass_hw::syndrome::CmdStatus;

use crate::events::Completions;
use crate::io::Io;
use crate::objects::Objects;
use crate::profile::Profile;

pub(crate) use bringup::nic_disabled;
pub(crate) use cmdq::{process, retry_waiting};
pub(crate) use command::{CmdError, CmdResult, QpControl};

/// Where the function is in its life (PRM "HCA bring-up"; kernel `mlx5_function_setup`,
/// rdma-core `mlx5_vfio_setup_function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stage {
    /// Fresh from reset, or after DISABLE_HCA: only ENABLE_HCA is accepted.
    #[default]
    Disabled,
    /// After ENABLE_HCA: ISSI, pages, registers and capabilities, then INIT_HCA.
    Enabled,
    /// After INIT_HCA: resources may be created.
    Initialized,
    /// After a graceful TEARDOWN_HCA: the firmware returns its pages, then DISABLE_HCA.
    TornDown,
}

/// Firmware state.
#[derive(Debug, Clone)]
pub struct Firmware {
    /// Bring-up stage.
    pub(crate) stage: Stage,
    /// The ISSI in force (0 after reset).
    pub(crate) issi: u16,
    /// SET_ISSI has been executed since ENABLE_HCA.
    pub(crate) issi_set: bool,
    /// Pages the driver gave, in the order given (TAKE returns the last given first).
    pub(crate) pages: Vec<u64>,
    /// The same pages, for the duplicate check.
    pub(crate) page_set: std::collections::BTreeSet<u64>,
    /// Pages the firmware wants to hold now (QUERY_PAGES REGULAR reports `target - held`;
    /// [`Device::request_pages`](crate::Device::request_pages) moves it).
    pub(crate) page_target: u64,
    /// The profile's boot pages.
    pub(crate) boot_pages: u32,
    /// HOST_ENDIANNESS `he` as last written.
    pub(crate) host_endianness: u32,
    /// The general capability page in force (4 KiB).
    pub(crate) cap_cur: Vec<u8>,
    /// The general capability page's maxima (4 KiB).
    pub(crate) cap_max: Vec<u8>,
    /// The RoCE capability page in force (4 KiB).
    pub(crate) roce_cur: Vec<u8>,
    /// The RoCE capability page's maxima (4 KiB).
    pub(crate) roce_max: Vec<u8>,
    /// TEARDOWN_HCA PREPARE_FAST_TEARDOWN was executed: NIC interface DISABLED completes it.
    pub(crate) fast_teardown_armed: bool,
    /// NIC vport `roce_en`.
    pub(crate) roce_en: bool,
    /// NIC vport MTU (Ethernet, bytes, as the kernel writes it).
    pub(crate) nic_mtu: u16,
    /// PAOS admin status per port (1 up, 2 down).
    pub(crate) port_admin: Vec<u32>,
}

impl Firmware {
    /// Firmware state of a device fresh from reset.
    pub fn new(profile: &Profile) -> Self {
        let (cap_cur, cap_max) = caps::general_pages(profile);
        let (roce_cur, roce_max) = caps::roce_pages(profile);
        Self {
            stage: Stage::Disabled,
            issi: 0,
            issi_set: false,
            pages: Vec::new(),
            page_set: Default::default(),
            page_target: 0,
            boot_pages: profile.boot_pages,
            host_endianness: 0,
            cap_cur,
            cap_max,
            roce_cur,
            roce_max,
            fast_teardown_armed: false,
            roce_en: false,
            nic_mtu: vport::nic_mtu_of(profile.ports.first().map_or(9000, |p| p.eth_mtu)),
            port_admin: vec![bypass_hw::cmd::hca::port_status::UP; profile.ports.len()],
        }
    }
}

/// The parts a command works on, lent by the device for one command doorbell: the
/// firmware's own state, the object tables, the completions, the profile, host memory, the
/// data path's interface, and the command queue's address.
pub(crate) struct Hca<'a> {
    /// Bring-up stage, pages, capabilities, vport state.
    pub(crate) fw: &'a mut Firmware,
    /// PDs, UARs, mkeys, QPs.
    pub(crate) objs: &'a mut Objects,
    /// CQs, EQs, interrupts.
    pub(crate) comp: &'a mut Completions,
    /// Congestion control's status, parameters and counters.
    pub(crate) cong: &'a mut crate::cong::Cong,
    /// The device's profile.
    pub(crate) profile: &'a Profile,
    /// DMA, counters, trace, time.
    pub(crate) io: Io<'a>,
    /// The data path, for what a QP command changes there.
    pub(crate) dp: &'a mut dyn QpControl,
    /// The command queue's IOVA, as the driver wrote it into the init segment.
    pub(crate) cmdq: u64,
}

/// What the dispatcher did with one command, for the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Executed {
    pub opcode: u16,
    pub op_mod: u16,
    pub status: u8,
    pub syndrome: u32,
}

/// The input and output layout sizes of an opcode the device implements, or `None`.
fn layout_sizes(op: Opcode) -> Option<(usize, usize)> {
    use bypass_hw::cmd::{caps as c, cq, eq, hca as h, mkey as m, pages as p, pd_uar as u};
    use bypass_hw::cmd::{cong as g, qp as q, rmp as r, vport as v};
    Some(match op {
        Opcode::ENABLE_HCA => (h::EnableHcaIn::LEN, h::EnableHcaOut::LEN),
        Opcode::DISABLE_HCA => (h::DisableHcaIn::LEN, h::DisableHcaOut::LEN),
        Opcode::QUERY_ISSI => (h::QueryIssiIn::LEN, h::QueryIssiOut::LEN),
        Opcode::SET_ISSI => (h::SetIssiIn::LEN, h::SetIssiOut::LEN),
        Opcode::INIT_HCA => (h::InitHcaIn::LEN, h::InitHcaOut::LEN),
        Opcode::TEARDOWN_HCA => (h::TeardownHcaIn::LEN, h::TeardownHcaOut::LEN),
        Opcode::SET_DRIVER_VERSION => (h::SetDriverVersionIn::LEN, h::SetDriverVersionOut::LEN),
        Opcode::ACCESS_REG => (h::AccessRegisterIn::LEN, h::AccessRegisterOut::LEN),
        Opcode::NOP => (MboxIn::LEN, MboxOut::LEN),
        Opcode::QUERY_PAGES => (p::QueryPagesIn::LEN, p::QueryPagesOut::LEN),
        Opcode::MANAGE_PAGES => (p::ManagePagesIn::LEN, p::ManagePagesOut::LEN),
        Opcode::QUERY_HCA_CAP => (c::QueryHcaCapIn::LEN, c::QueryHcaCapOut::LEN),
        Opcode::SET_HCA_CAP => (c::SetHcaCapIn::LEN, c::SetHcaCapOut::LEN),
        Opcode::QUERY_HCA_VPORT_CONTEXT => (
            v::QueryHcaVportContextIn::LEN,
            v::QueryHcaVportContextOut::LEN,
        ),
        Opcode::QUERY_HCA_VPORT_GID => (v::QueryHcaVportGidIn::LEN, v::QueryHcaVportGidOut::LEN),
        Opcode::QUERY_NIC_VPORT_CONTEXT => (
            v::QueryNicVportContextIn::LEN,
            v::QueryNicVportContextOut::LEN,
        ),
        Opcode::MODIFY_NIC_VPORT_CONTEXT => (
            v::ModifyNicVportContextIn::LEN,
            v::ModifyNicVportContextOut::LEN,
        ),
        Opcode::ALLOC_PD => (u::AllocPdIn::LEN, u::AllocPdOut::LEN),
        Opcode::DEALLOC_PD => (u::DeallocPdIn::LEN, u::DeallocPdOut::LEN),
        Opcode::ALLOC_UAR => (u::AllocUarIn::LEN, u::AllocUarOut::LEN),
        Opcode::DEALLOC_UAR => (u::DeallocUarIn::LEN, u::DeallocUarOut::LEN),
        Opcode::CREATE_MKEY => (m::CreateMkeyIn::LEN, m::CreateMkeyOut::LEN),
        Opcode::QUERY_MKEY => (m::QueryMkeyIn::LEN, m::QueryMkeyOut::LEN),
        Opcode::DESTROY_MKEY => (m::DestroyMkeyIn::LEN, m::DestroyMkeyOut::LEN),
        Opcode::CREATE_CQ => (cq::CreateCqIn::LEN, cq::CreateCqOut::LEN),
        Opcode::QUERY_CQ => (cq::QueryCqIn::LEN, cq::QueryCqOut::LEN),
        Opcode::MODIFY_CQ => (cq::ModifyCqIn::LEN, cq::ModifyCqOut::LEN),
        Opcode::DESTROY_CQ => (cq::DestroyCqIn::LEN, cq::DestroyCqOut::LEN),
        Opcode::CREATE_EQ => (eq::CreateEqIn::LEN, eq::CreateEqOut::LEN),
        Opcode::QUERY_EQ => (eq::QueryEqIn::LEN, eq::QueryEqOut::LEN),
        Opcode::DESTROY_EQ => (eq::DestroyEqIn::LEN, eq::DestroyEqOut::LEN),
        Opcode::CREATE_QP => (q::CreateQpIn::LEN, q::CreateQpOut::LEN),
        Opcode::DESTROY_QP => (q::DestroyQpIn::LEN, q::DestroyQpOut::LEN),
        Opcode::QUERY_QP => (q::QueryQpIn::LEN, q::QueryQpOut::LEN),
        Opcode::RST2INIT_QP
        | Opcode::INIT2INIT_QP
        | Opcode::INIT2RTR_QP
        | Opcode::RTR2RTS_QP
        | Opcode::RTS2RTS_QP
        | Opcode::SQERR2RTS_QP
        | Opcode::SQD_RTS_QP
        | Opcode::RTS2SQD_QP
        | Opcode::SQD2SQD_QP => (q::Rst2InitQpIn::LEN, q::Rst2InitQpOut::LEN),
        Opcode::QP_2ERR | Opcode::QP_2RST => (MboxIn::LEN, MboxOut::LEN),
        Opcode::CREATE_RMP => (r::CreateRmpIn::LEN, r::CreateRmpOut::LEN),
        Opcode::MODIFY_RMP => (r::ModifyRmpIn::LEN, r::ModifyRmpOut::LEN),
        Opcode::QUERY_RMP => (r::QueryRmpIn::LEN, r::QueryRmpOut::LEN),
        Opcode::DESTROY_RMP => (r::DestroyRmpIn::LEN, r::DestroyRmpOut::LEN),
        Opcode::QUERY_CONG_STATUS => (g::QueryCongStatusIn::LEN, g::QueryCongStatusOut::LEN),
        Opcode::MODIFY_CONG_STATUS => (g::ModifyCongStatusIn::LEN, g::ModifyCongStatusOut::LEN),
        Opcode::QUERY_CONG_PARAMS => (g::QueryCongParamsIn::LEN, g::QueryCongParamsOut::LEN),
        Opcode::MODIFY_CONG_PARAMS => (g::ModifyCongParamsIn::LEN, g::ModifyCongParamsOut::LEN),
        Opcode::QUERY_CONG_STATISTICS => (
            g::QueryCongStatisticsIn::LEN,
            g::QueryCongStatisticsOut::LEN,
        ),
        _ => return None,
    })
}

/// Output length a command needs: its layout, plus the list it returns where it has one.
fn output_len(fw: &Firmware, profile: &Profile, op: Opcode, input: &[u8], layout: usize) -> usize {
    match op {
        Opcode::MANAGE_PAGES => pages::take_output_len(fw, input).unwrap_or(layout),
        Opcode::ACCESS_REG => vport::access_reg_output_len(input),
        Opcode::QUERY_HCA_VPORT_GID => vport::gid_output_len(profile, input),
        _ => layout,
    }
}

/// Runs one gathered command and returns its output (at most `outlen` bytes are meaningful;
/// the vector may be shorter) and what happened.
pub(crate) fn execute(c: &mut Hca<'_>, input: &[u8], outlen: usize) -> (Vec<u8>, Executed) {
    let hdr = MboxIn::wrap_unchecked(input);
    let op = hdr.op();
    let op_mod = hdr.op_mod() as u16;
    let mut out = vec![0u8; MboxOut::LEN];
    let result = match layout_sizes(op) {
        None => Err(CmdError::new(
            CmdStatus::BAD_OP_ERR,
            syndromes::UNKNOWN_OPCODE,
        )),
        Some((in_len, _)) if input.len() < in_len => {
            Err(CmdError::inlen(syndromes::INLEN_TOO_SHORT))
        }
        Some((_, out_layout)) => {
            let need = output_len(c.fw, c.profile, op, input, out_layout);
            if outlen < need {
                Err(CmdError::new(
                    CmdStatus::BAD_OUTP_LEN_ERR,
                    syndromes::OUTLEN_TOO_SHORT,
                ))
            } else {
                out = vec![0u8; need.max(MboxOut::LEN)];
                bringup::gate(c.fw, op).and_then(|()| dispatch(c, op, input, &mut out))
            }
        }
    };
    let (status, syndrome) = match result {
        Ok(()) => (CmdStatus::OK, 0),
        Err(e) => {
            // A failed command returns only its header (status and syndrome).
            out.truncate(MboxOut::LEN);
            out.fill(0);
            (e.status, e.syndrome)
        }
    };
    let mut o = MboxOut::wrap_unchecked(&mut out[..]);
    // Both fit their fields (8 and 32 bits): the setters cannot fail on a 16-byte buffer.
    let _ = o.set_status(u32::from(status.0));
    let _ = o.set_syndrome(syndrome);
    (
        out,
        Executed {
            opcode: op.0,
            op_mod,
            status: status.0,
            syndrome,
        },
    )
}

fn dispatch(c: &mut Hca<'_>, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    let Hca {
        fw,
        objs,
        comp,
        cong,
        profile,
        io,
        dp,
        ..
    } = c;
    let profile: &Profile = profile;
    match op {
        Opcode::ENABLE_HCA => bringup::enable_hca(fw, profile, input, out),
        Opcode::DISABLE_HCA => bringup::disable_hca(fw, objs, comp, profile, *dp, input, out),
        Opcode::QUERY_ISSI => bringup::query_issi(fw, input, out),
        Opcode::SET_ISSI => bringup::set_issi(fw, input, out),
        Opcode::INIT_HCA => bringup::init_hca(fw, profile, input, out),
        Opcode::TEARDOWN_HCA => bringup::teardown_hca(fw, objs, comp, profile, *dp, input, out),
        Opcode::SET_DRIVER_VERSION | Opcode::NOP => Ok(()),
        Opcode::ACCESS_REG => vport::access_reg(fw, profile, input, out),
        Opcode::QUERY_PAGES => pages::query_pages(fw, profile, input, out),
        Opcode::MANAGE_PAGES => pages::manage_pages(fw, io, input, out),
        Opcode::QUERY_HCA_CAP => caps::query_hca_cap(fw, profile, input, out),
        Opcode::SET_HCA_CAP => caps::set_hca_cap(fw, profile, input, out),
        Opcode::QUERY_HCA_VPORT_CONTEXT => vport::query_hca_vport_context(fw, profile, input, out),
        Opcode::QUERY_HCA_VPORT_GID => vport::query_hca_vport_gid(profile, input, out),
        Opcode::QUERY_NIC_VPORT_CONTEXT => vport::query_nic_vport_context(fw, profile, input, out),
        Opcode::MODIFY_NIC_VPORT_CONTEXT => vport::modify_nic_vport_context(fw, input, out),
        Opcode::ALLOC_PD => resources::alloc_pd(objs, input, out),
        Opcode::DEALLOC_PD => resources::dealloc_pd(objs, input, out),
        Opcode::ALLOC_UAR => resources::alloc_uar(objs, input, out),
        Opcode::DEALLOC_UAR => resources::dealloc_uar(objs, input, out),
        Opcode::CREATE_MKEY => resources::create_mkey(objs, profile, input, out),
        Opcode::QUERY_MKEY => resources::query_mkey(objs, input, out),
        Opcode::DESTROY_MKEY => resources::destroy_mkey(objs, input, out),
        Opcode::CREATE_CQ => cq_eq::create_cq(objs, comp, profile, input, out),
        Opcode::QUERY_CQ => cq_eq::query_cq(comp, io, input, out),
        Opcode::MODIFY_CQ => cq_eq::modify_cq(comp, input, out),
        Opcode::DESTROY_CQ => cq_eq::destroy_cq(objs, comp, input, out),
        Opcode::CREATE_EQ => cq_eq::create_eq(objs, comp, profile, input, out),
        Opcode::QUERY_EQ => cq_eq::query_eq(comp, input, out),
        Opcode::DESTROY_EQ => cq_eq::destroy_eq(objs, comp, input, out),
        Opcode::CREATE_QP => qp::create_qp(objs, comp, profile, input, out),
        Opcode::DESTROY_QP => qp::destroy_qp(objs, comp, *dp, input, out),
        Opcode::QUERY_QP => qp::query_qp(objs, input, out),
        Opcode::RST2INIT_QP
        | Opcode::INIT2INIT_QP
        | Opcode::INIT2RTR_QP
        | Opcode::RTR2RTS_QP
        | Opcode::RTS2RTS_QP
        | Opcode::SQERR2RTS_QP
        | Opcode::SQD_RTS_QP
        | Opcode::RTS2SQD_QP
        | Opcode::SQD2SQD_QP
        | Opcode::QP_2ERR
        | Opcode::QP_2RST => qp::modify_qp(objs, comp, profile, io, *dp, op, input),
        Opcode::CREATE_RMP => srq::create_rmp(objs, profile, input, out),
        Opcode::MODIFY_RMP => srq::modify_rmp(objs, input, out),
        Opcode::QUERY_RMP => srq::query_rmp(objs, input, out),
        Opcode::DESTROY_RMP => srq::destroy_rmp(objs, input, out),
        Opcode::QUERY_CONG_STATUS => cong::query_cong_status(&fw.cap_cur, cong, input, out),
        Opcode::MODIFY_CONG_STATUS => cong::modify_cong_status(&fw.cap_cur, cong, input),
        Opcode::QUERY_CONG_PARAMS => cong::query_cong_params(&fw.cap_cur, cong, input, out),
        Opcode::MODIFY_CONG_PARAMS => cong::modify_cong_params(&fw.cap_cur, cong, input),
        Opcode::QUERY_CONG_STATISTICS => {
            cong::query_cong_statistics(&fw.cap_cur, cong, io.now, input, out)
        }
        _ => Err(CmdError::new(
            CmdStatus::BAD_OP_ERR,
            syndromes::UNKNOWN_OPCODE,
        )),
    }
}

/// Checks `uid` (bits 0x10..0x20 of every object command): the sim has no DEVX user contexts,
/// so only 0 is valid.
pub(crate) fn check_uid(input: &[u8]) -> CmdResult {
    if MboxIn::wrap_unchecked(input).uid() != 0 {
        return Err(CmdError::param(syndromes::BAD_UID));
    }
    Ok(())
}
