//! The bring-up and teardown commands, one function each, in rdma-core's order.
//!
//! Owns: building the inputs and parsing the outputs of ENABLE_HCA, QUERY/SET_ISSI,
//! ACCESS_REG HOST_ENDIANNESS, QUERY/SET_HCA_CAP, INIT_HCA, MODIFY_NIC_VPORT_CONTEXT,
//! ALLOC/DEALLOC_UAR, the port queries, TEARDOWN_HCA and DISABLE_HCA. Must not: hold state
//! (the sequence and its state are [`crate::hca`]'s).
//!
//! Source of the order and the field choices: rdma-core `providers/mlx5/mlx5_vfio.c`
//! `mlx5_vfio_setup_function` (ENABLE_HCA, `mlx5_vfio_set_issi`, boot pages,
//! `mlx5_vfio_set_hca_ctrl`, `handle_hca_cap`, `handle_hca_cap_roce`, init pages,
//! `mlx5_vfio_init_hca`, `mlx5_vfio_nic_vport_update_roce_state`), `mlx5_vfio_free_context`
//! (`mlx5_vfio_teardown_hca`); kernel `core/main.c` `mlx5_core_set_issi`, `handle_hca_cap`,
//! `core/vport.c` `mlx5_query_hca_vport_gid`.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::caps::{
    CAPABILITY_LEN, CAPABILITY_OFF, CapMode, CapType, CmdHcaCap, CmdHcaCap2, QueryHcaCapIn,
    QueryHcaCapOut, RoceCap, SetHcaCapIn, cmdif_checksum, query_cap_op_mod, set_cap_op_mod,
};
use bypass_hw::cmd::hca::{
    AccessRegOpMod, AccessRegisterIn, DisableHcaIn, EnableHcaIn, ISSI_1, InitHcaIn, QueryIssiIn,
    QueryIssiOut, RegisterHostEndianness, RegisterId, SetIssiIn, TeardownHcaIn, TeardownProfile,
    access_register_in_len,
};
use bypass_hw::cmd::pd_uar::{AllocUarIn, AllocUarOut, DeallocUarIn};
use bypass_hw::cmd::vport::{
    ALL_GIDS, ModifyNicVportContextIn, QueryHcaVportContextIn, QueryHcaVportContextOut,
    QueryHcaVportGidIn, QueryHcaVportGidOut, QueryNicVportContextIn, QueryNicVportContextOut,
    query_hca_vport_gid_out_len,
};

use crate::cmdq::{CmdQueue, input};
use crate::error::{DriverError, Result};

fn build(what: &'static str) -> impl Fn(bypass_hw::Error) -> DriverError {
    move |source| DriverError::BuildInput { what, source }
}

fn bad(op: Opcode) -> impl Fn(bypass_hw::Error) -> DriverError {
    move |source| DriverError::BadOutput { op, source }
}

/// ENABLE_HCA (function 0).
pub(crate) fn enable_hca(cmd: &CmdQueue) -> Result<()> {
    cmd.exec(&input(Opcode::ENABLE_HCA, 0, EnableHcaIn::LEN), 16)
        .map(|_| ())
}

/// QUERY_ISSI, then SET_ISSI 1 (rdma-core `mlx5_vfio_set_issi`: ISSI 1 is required).
pub(crate) fn set_issi(cmd: &CmdQueue) -> Result<()> {
    let o = cmd.exec(
        &input(Opcode::QUERY_ISSI, 0, QueryIssiIn::LEN),
        QueryIssiOut::LEN,
    )?;
    let q = QueryIssiOut::new_checked(&o[..]).map_err(bad(Opcode::QUERY_ISSI))?;
    if !q.supports_issi(u32::from(ISSI_1)) {
        return Err(DriverError::Unsupported {
            what: "ISSI 1 (QUERY_ISSI supported_issi_dw0 bit 1)",
            fix: "update the NIC firmware",
        });
    }
    let mut i = input(Opcode::SET_ISSI, 0, SetIssiIn::LEN);
    SetIssiIn::new_checked(&mut i[..])
        .and_then(|mut s| s.set_current_issi(ISSI_1.into()).map(|_| ()))
        .map_err(build("SET_ISSI"))?;
    cmd.exec(&i, 16).map(|_| ())
}

/// ACCESS_REG write of HOST_ENDIANNESS (rdma-core `mlx5_vfio_set_hca_ctrl`): `he` = 0 on a
/// little-endian host, 1 on a big-endian one.
pub(crate) fn set_host_endianness(cmd: &CmdQueue) -> Result<()> {
    let reg_len = RegisterHostEndianness::LEN;
    let mut i = input(
        Opcode::ACCESS_REG,
        AccessRegOpMod::WRITE.0,
        access_register_in_len(reg_len),
    );
    {
        let mut a = AccessRegisterIn::new_checked(&mut i[..]).map_err(build("ACCESS_REG"))?;
        a.set_register_id(RegisterId::HOST_ENDIANNESS.0.into())
            .map_err(build("ACCESS_REG"))?;
        let he = u32::from(cfg!(target_endian = "big"));
        RegisterHostEndianness::new_checked(a.register_data_mut())
            .and_then(|mut r| r.set_he(he).map(|_| ()))
            .map_err(build("ACCESS_REG"))?;
    }
    cmd.exec(&i, access_register_in_len(reg_len)).map(|_| ())
}

/// QUERY_HCA_CAP of `cap`/`mode`: the 4 KiB capability page.
pub(crate) fn query_cap(cmd: &CmdQueue, cap: CapType, mode: CapMode) -> Result<Vec<u8>> {
    let i = input(
        Opcode::QUERY_HCA_CAP,
        query_cap_op_mod(cap, mode),
        QueryHcaCapIn::LEN,
    );
    let o = cmd.exec(&i, QueryHcaCapOut::LEN)?;
    o.get(CAPABILITY_OFF..CAPABILITY_OFF + CAPABILITY_LEN)
        .map(<[u8]>::to_vec)
        .ok_or(DriverError::BadOutput {
            op: Opcode::QUERY_HCA_CAP,
            source: bypass_hw::Error::Truncated {
                what: "query_hca_cap_out",
                need: QueryHcaCapOut::LEN,
                got: o.len(),
            },
        })
}

/// SET_HCA_CAP of `cap` with `page`.
pub(crate) fn set_cap(cmd: &CmdQueue, cap: CapType, page: &[u8]) -> Result<()> {
    let mut i = input(Opcode::SET_HCA_CAP, set_cap_op_mod(cap), SetHcaCapIn::LEN);
    if let (Some(dst), Some(src)) = (
        i.get_mut(CAPABILITY_OFF..CAPABILITY_OFF + CAPABILITY_LEN),
        page.get(..CAPABILITY_LEN),
    ) {
        dst.copy_from_slice(src);
    }
    cmd.exec(&i, 16).map(|_| ())
}

/// The general caps as rdma-core's `handle_hca_cap` sets them (current caps, checksums off,
/// 4 KiB UAR pages, `mkey_by_name` where the maximum allows), then the RoCE caps
/// (`handle_hca_cap_roce`: software-chosen UDP source port). Returns the general and RoCE
/// capability pages in force afterwards.
pub(crate) fn configure_caps(cmd: &CmdQueue) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    let mut cur = query_cap(cmd, CapType::GENERAL, CapMode::CUR)?;
    let max = query_cap(cmd, CapType::GENERAL, CapMode::MAX)?;
    {
        let b = build("SET_HCA_CAP");
        let m = CmdHcaCap::new_checked(&max[..]).map_err(&b)?;
        let mut c = CmdHcaCap::new_checked(&mut cur[..]).map_err(&b)?;
        c.set_cmdif_checksum(cmdif_checksum::DISABLED).map_err(&b)?;
        // log_uar_page_sz = PAGE_SHIFT - 12: 4 KiB pages.
        c.set_log_uar_page_sz(0).map_err(&b)?;
        if m.mkey_by_name() != 0 {
            c.set_mkey_by_name(1).map_err(&b)?;
        }
    }
    set_cap(cmd, CapType::GENERAL, &cur)?;
    let general = query_cap(cmd, CapType::GENERAL, CapMode::CUR)?;
    let has_roce = CmdHcaCap::new_checked(&general[..])
        .map_err(bad(Opcode::QUERY_HCA_CAP))?
        .roce()
        != 0;
    if !has_roce {
        return Ok((general, None));
    }
    let mut roce = query_cap(cmd, CapType::ROCE, CapMode::CUR)?;
    let roce_max = query_cap(cmd, CapType::ROCE, CapMode::MAX)?;
    let sw_port = RoceCap::new_checked(&roce_max[..])
        .map_err(bad(Opcode::QUERY_HCA_CAP))?
        .sw_r_roce_src_udp_port();
    if sw_port != 0 {
        RoceCap::new_checked(&mut roce[..])
            .and_then(|mut r| r.set_sw_r_roce_src_udp_port(1).map(|_| ()))
            .map_err(build("SET_HCA_CAP roce"))?;
        set_cap(cmd, CapType::ROCE, &roce)?;
        roce = query_cap(cmd, CapType::ROCE, CapMode::CUR)?;
    }
    Ok((general, Some(roce)))
}

/// `cmd_hca_cap_2.max_mkey_log_entity_size_mtt` (CUR), or 0 where the general page says
/// there is no GENERAL_2 page (`hca_cap_2`), as the kernel's `mlx5_core_get_caps` skips it.
pub(crate) fn mkey_max_page_shift(cmd: &CmdQueue, general: &[u8]) -> Result<u8> {
    let g = CmdHcaCap::new_checked(general).map_err(bad(Opcode::QUERY_HCA_CAP))?;
    if g.hca_cap_2() == 0 {
        return Ok(0);
    }
    let page = query_cap(cmd, CapType::GENERAL_2, CapMode::CUR)?;
    let c = CmdHcaCap2::new_checked(&page[..]).map_err(bad(Opcode::QUERY_HCA_CAP))?;
    Ok(u8::try_from(c.max_mkey_log_entity_size_mtt()).unwrap_or(0))
}

/// INIT_HCA.
pub(crate) fn init_hca(cmd: &CmdQueue) -> Result<()> {
    cmd.exec(&input(Opcode::INIT_HCA, 0, InitHcaIn::LEN), 16)
        .map(|_| ())
}

/// MODIFY_NIC_VPORT_CONTEXT roce_en = 1 (rdma-core `mlx5_vfio_nic_vport_update_roce_state`,
/// done when the port type is Ethernet).
pub(crate) fn enable_roce(cmd: &CmdQueue) -> Result<()> {
    let mut i = input(
        Opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        ModifyNicVportContextIn::LEN,
    );
    {
        let b = build("MODIFY_NIC_VPORT_CONTEXT");
        let mut m = ModifyNicVportContextIn::new_checked(&mut i[..]).map_err(&b)?;
        m.field_select_mut().set_roce_en(1).map_err(&b)?;
        m.nic_vport_context_mut().set_roce_en(1).map_err(&b)?;
    }
    cmd.exec(&i, 16).map(|_| ())
}

/// ALLOC_UAR: the UAR page index.
pub(crate) fn alloc_uar(cmd: &CmdQueue) -> Result<u32> {
    let o = cmd.exec(
        &input(Opcode::ALLOC_UAR, 0, AllocUarIn::LEN),
        AllocUarOut::LEN,
    )?;
    Ok(AllocUarOut::new_checked(&o[..])
        .map_err(bad(Opcode::ALLOC_UAR))?
        .uar())
}

/// DEALLOC_UAR of `uar`.
pub(crate) fn dealloc_uar(cmd: &CmdQueue, uar: u32) -> Result<()> {
    let mut i = input(Opcode::DEALLOC_UAR, 0, DeallocUarIn::LEN);
    DeallocUarIn::new_checked(&mut i[..])
        .and_then(|mut d| d.set_uar(uar).map(|_| ()))
        .map_err(build("DEALLOC_UAR"))?;
    cmd.exec(&i, 16).map(|_| ())
}

/// TEARDOWN_HCA with `profile`.
pub(crate) fn teardown_hca(cmd: &CmdQueue, profile: TeardownProfile) -> Result<()> {
    let mut i = input(Opcode::TEARDOWN_HCA, 0, TeardownHcaIn::LEN);
    TeardownHcaIn::new_checked(&mut i[..])
        .and_then(|mut t| t.set_profile(profile.0.into()).map(|_| ()))
        .map_err(build("TEARDOWN_HCA"))?;
    cmd.exec(&i, 16).map(|_| ())
}

/// DISABLE_HCA (function 0).
pub(crate) fn disable_hca(cmd: &CmdQueue) -> Result<()> {
    cmd.exec(&input(Opcode::DISABLE_HCA, 0, DisableHcaIn::LEN), 16)
        .map(|_| ())
}

/// What the port queries return for one port.
pub(crate) struct PortQuery {
    pub state: u32,
    pub gids: Vec<[u8; 16]>,
}

/// QUERY_HCA_VPORT_CONTEXT (state) and QUERY_HCA_VPORT_GID (the whole table) of `port`.
pub(crate) fn query_port(cmd: &CmdQueue, port: u8, gid_table_size: usize) -> Result<PortQuery> {
    let mut i = input(
        Opcode::QUERY_HCA_VPORT_CONTEXT,
        0,
        QueryHcaVportContextIn::LEN,
    );
    QueryHcaVportContextIn::new_checked(&mut i[..])
        .and_then(|mut q| q.set_port_num(port.into()).map(|_| ()))
        .map_err(build("QUERY_HCA_VPORT_CONTEXT"))?;
    let o = cmd.exec(&i, QueryHcaVportContextOut::LEN)?;
    let state = QueryHcaVportContextOut::new_checked(&o[..])
        .map_err(bad(Opcode::QUERY_HCA_VPORT_CONTEXT))?
        .hca_vport_context()
        .port_state();

    let mut gids = Vec::new();
    if gid_table_size > 0 {
        let mut i = input(Opcode::QUERY_HCA_VPORT_GID, 0, QueryHcaVportGidIn::LEN);
        QueryHcaVportGidIn::new_checked(&mut i[..])
            .and_then(|mut q| {
                q.set_port_num(port.into())?;
                q.set_gid_index(ALL_GIDS).map(|_| ())
            })
            .map_err(build("QUERY_HCA_VPORT_GID"))?;
        let o = cmd.exec(&i, query_hca_vport_gid_out_len(gid_table_size))?;
        let g =
            QueryHcaVportGidOut::new_checked(&o[..]).map_err(bad(Opcode::QUERY_HCA_VPORT_GID))?;
        let n = (g.gids_num() as usize).min(g.gid_capacity());
        for k in 0..n {
            gids.push(g.gid(k).map_err(bad(Opcode::QUERY_HCA_VPORT_GID))?);
        }
    }
    Ok(PortQuery { state, gids })
}

/// QUERY_NIC_VPORT_CONTEXT: (permanent MAC, NIC MTU in bytes).
pub(crate) fn query_nic_vport(cmd: &CmdQueue) -> Result<([u8; 6], u32)> {
    let o = cmd.exec(
        &input(
            Opcode::QUERY_NIC_VPORT_CONTEXT,
            0,
            QueryNicVportContextIn::LEN,
        ),
        QueryNicVportContextOut::LEN,
    )?;
    let q = QueryNicVportContextOut::new_checked(&o[..])
        .map_err(bad(Opcode::QUERY_NIC_VPORT_CONTEXT))?;
    let c = q.nic_vport_context();
    Ok((c.permanent_address().mac(), c.mtu()))
}
