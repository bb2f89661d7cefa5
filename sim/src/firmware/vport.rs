//! Ports as the firmware reports them: QUERY_HCA_VPORT_CONTEXT, QUERY_HCA_VPORT_GID,
//! QUERY / MODIFY_NIC_VPORT_CONTEXT, and ACCESS_REG (HOST_ENDIANNESS, PAOS).
//!
//! Owns: the vport and register state in [`super::Firmware`] (`roce_en`, `nic_mtu`,
//! `host_endianness`, `port_admin`). Must not: change the data path (the port's GIDs and MAC
//! come from the profile; the transport reads them there).
//!
//! Sources: kernel `drivers/net/ethernet/mellanox/mlx5/core/vport.c`
//! (`mlx5_query_hca_vport_context`, `mlx5_query_hca_vport_gid`: gid_index 0xffff = the whole
//! table of `mlx5_get_gid_table_len` entries; `mlx5_modify_nic_vport_context`,
//! `mlx5_nic_vport_update_roce_state`), `core/port.c` (`mlx5_set_port_admin_status`: PAOS with
//! `ase`), `core/fw.c` / `main.c` (`set_hca_ctrl`: HOST_ENDIANNESS), rdma-core `mlx5_vfio.c`
//! (`mlx5_vfio_nic_vport_update_roce_state`), `core/events.c` (`port_change`: PORT_CHANGE with
//! sub-type DOWN 1 / ACTIVE 4 and the port in bits 7:4 of `struct mlx5_eqe_port_state`, turned
//! into `IB_EVENT_PORT_ERR` / `IB_EVENT_PORT_ACTIVE` by `mlx5_ib`). Only this function's own vport exists: any
//! `other_vport` request is BAD_PARAM (the sim's function is not an e-switch manager).

use bypass_hw::cmd::hca::{
    AccessRegOpMod, AccessRegisterIn, AccessRegisterOut, PaosReg, RegisterHostEndianness,
    RegisterId, port_status,
};
use bypass_hw::cmd::vport::{
    ALL_GIDS, GID_LEN, ModifyNicVportContextIn, NicVportContext, QueryHcaVportContextIn,
    QueryHcaVportContextOut, QueryHcaVportGidIn, QueryHcaVportGidOut, QueryNicVportContextIn,
    QueryNicVportContextOut, port_state, query_hca_vport_gid_out_len,
};
use bypass_hw::syndrome::CmdStatus;

use super::syndromes as s;
use super::{CmdError, CmdResult};
use crate::firmware::Firmware;
use crate::profile::Profile;

/// The NIC vport MTU after reset: a 9000-byte Ethernet MTU plus the 22 bytes of L2 header,
/// VLAN tag and FCS the kernel adds (`MLX5E_SW2HW_MTU`), enough for a 4096-byte RoCE path MTU.
pub const DEFAULT_NIC_MTU: u16 = 9022;
/// Smallest Ethernet MTU a driver may set (IPv4 minimum).
const MIN_NIC_MTU: u32 = 68;
/// Bytes the vport MTU counts beyond the Ethernet MTU: L2 header 14, VLAN tag 4, FCS 4
/// (kernel `en.h` `MLX5E_SW2HW_MTU` / `MLX5E_HW2SW_MTU`).
pub(crate) const NIC_MTU_L2_BYTES: u32 = 22;

/// The NIC vport MTU (what `nic_vport_context.mtu` carries) of an Ethernet MTU, clamped to
/// what the field's 16 bits and the port allow.
pub(crate) fn nic_mtu_of(eth_mtu: u32) -> u16 {
    let hw = eth_mtu.saturating_add(NIC_MTU_L2_BYTES);
    u16::try_from(hw.clamp(MIN_NIC_MTU, u32::from(DEFAULT_NIC_MTU))).unwrap_or(DEFAULT_NIC_MTU)
}

/// The Ethernet MTU of a NIC vport MTU (kernel `MLX5E_HW2SW_MTU`).
pub(crate) fn eth_mtu_of(nic_mtu: u16) -> u32 {
    u32::from(nic_mtu).saturating_sub(NIC_MTU_L2_BYTES)
}
/// Bytes of a register (HOST_ENDIANNESS and PAOS are both 16).
const REG_LEN: usize = 16;
/// IBTA PortPhysicalState LinkUp.
const PHYS_LINK_UP: u32 = 5;
/// IBTA PortPhysicalState Disabled.
const PHYS_DISABLED: u32 = 3;

/// EUI-64 GUID from a MAC (insert ff:fe, flip the U/L bit), as mlx5 firmware derives the node
/// and port GUIDs of an Ethernet port.
fn guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// Port `n` (1-based; 0 = the function's port) as an index into the profile's ports.
fn port_index(profile: &Profile, n: u32) -> Result<usize, CmdError> {
    let n = if n == 0 { 1 } else { n };
    let i = (n as usize).wrapping_sub(1);
    if i < profile.ports.len() {
        Ok(i)
    } else {
        Err(CmdError::param(s::BAD_PORT))
    }
}

/// The link of port `port` (1-based) goes down or comes up, as when a cable is pulled or the
/// peer goes away: the port's state follows (QUERY_HCA_VPORT_CONTEXT reports it) and a
/// PORT_CHANGE event (DOWN or ACTIVE) goes to the EQ that subscribed to it. Returns false (and
/// changes nothing) for a port the device does not have or a state it is already in.
pub(crate) fn set_link(
    fw: &mut Firmware,
    comp: &mut crate::events::Completions,
    io: &mut crate::io::Io<'_>,
    port: u8,
    up: bool,
) -> bool {
    let want = if up {
        port_status::UP
    } else {
        port_status::DOWN
    };
    let Some(slot) = usize::from(port)
        .checked_sub(1)
        .and_then(|p| fw.port_admin.get_mut(p))
    else {
        return false;
    };
    if *slot == want {
        return false;
    }
    *slot = want;
    let mut e = <bypass_hw::eqe::Eqe as zerocopy::FromZeros>::new_zeroed();
    e.port_state_mut().set_port(port);
    let sub = if up {
        bypass_hw::eqe::MLX5_PORT_CHANGE_SUBTYPE_ACTIVE
    } else {
        bypass_hw::eqe::MLX5_PORT_CHANGE_SUBTYPE_DOWN
    };
    comp.post_event(io, bypass_hw::eqe::EventType::PORT_CHANGE, sub, &e.data);
    true
}

/// QUERY_HCA_VPORT_CONTEXT.
pub(crate) fn query_hca_vport_context(
    fw: &Firmware,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let i = QueryHcaVportContextIn::wrap_unchecked(input);
    if i.other_vport() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    let p = port_index(profile, i.port_num())?;
    let up = fw.port_admin.get(p).copied() == Some(port_status::UP);
    let mac = profile.ports.get(p).map_or([0; 6], |pt| pt.mac);
    let mut o = QueryHcaVportContextOut::wrap_unchecked(out);
    let mut c = o.hca_vport_context_mut();
    let _ = c.set_grh_required(1);
    let _ = c.set_port_physical_state(if up { PHYS_LINK_UP } else { PHYS_DISABLED });
    let _ = c.set_port_state(if up {
        port_state::ACTIVE
    } else {
        port_state::DOWN
    });
    let _ = c.set_vport_state(if up {
        port_state::ACTIVE
    } else {
        port_state::DOWN
    });
    let _ = c.set_port_guid(guid(mac));
    let _ = c.set_node_guid(guid(mac));
    let _ = c.set_system_image_guid(guid(mac));
    Ok(())
}

/// The QUERY_HCA_VPORT_GID output length: one GID, or the whole table for `ALL_GIDS`.
pub(crate) fn gid_output_len(profile: &Profile, input: &[u8]) -> usize {
    let i = QueryHcaVportGidIn::wrap_unchecked(input);
    let n = if i.gid_index() == ALL_GIDS {
        super::caps::gid_table_len(profile)
    } else {
        1
    };
    query_hca_vport_gid_out_len(n)
}

/// QUERY_HCA_VPORT_GID: the port's GID table (entries the profile does not fill are zero).
pub(crate) fn query_hca_vport_gid(profile: &Profile, input: &[u8], out: &mut [u8]) -> CmdResult {
    let i = QueryHcaVportGidIn::wrap_unchecked(input);
    if i.other_vport() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    let p = port_index(profile, i.port_num())?;
    let len = super::caps::gid_table_len(profile);
    let gids = profile
        .ports
        .get(p)
        .map(|pt| pt.gids.clone())
        .unwrap_or_default();
    let index = i.gid_index();
    let (first, n) = if index == ALL_GIDS {
        (0usize, len)
    } else if (index as usize) < len {
        (index as usize, 1)
    } else {
        return Err(CmdError::new(CmdStatus::IX_ERR, s::GID_INDEX));
    };
    let mut o = QueryHcaVportGidOut::wrap_unchecked(out);
    let _ = o.set_gids_num(n as u32);
    for k in 0..n {
        let g = gids.get(first + k).copied().unwrap_or([0u8; GID_LEN]);
        let _ = o.set_gid(k, &g);
    }
    Ok(())
}

fn fill_nic_vport(fw: &Firmware, profile: &Profile, c: &mut NicVportContext<&mut [u8]>) {
    let mac = profile.ports.first().map_or([0; 6], |p| p.mac);
    let _ = c.set_roce_en(fw.roce_en.into());
    let _ = c.set_mtu(fw.nic_mtu.into());
    let _ = c.set_port_guid(guid(mac));
    let _ = c.set_node_guid(guid(mac));
    let _ = c.set_system_image_guid(guid(mac));
    let _ = c.permanent_address_mut().set_mac(mac);
}

/// QUERY_NIC_VPORT_CONTEXT.
pub(crate) fn query_nic_vport_context(
    fw: &Firmware,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    if QueryNicVportContextIn::wrap_unchecked(input).other_vport() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    let mut o = QueryNicVportContextOut::wrap_unchecked(out);
    fill_nic_vport(fw, profile, &mut o.nic_vport_context_mut());
    Ok(())
}

/// MODIFY_NIC_VPORT_CONTEXT: `roce_en`, `mtu`, and the loopback/promiscuous/event fields
/// (accepted, not modelled); the addresses, GUIDs and affiliation only an e-switch manager may
/// change (BAD_PARAM `VPORT_FIELD_NOT_SETTABLE`).
pub(crate) fn modify_nic_vport_context(
    fw: &mut Firmware,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let i = ModifyNicVportContextIn::wrap_unchecked(input);
    if i.other_vport() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    let fs = i.field_select();
    let c = i.nic_vport_context();
    if fs.permanent_address() != 0
        || fs.node_guid() != 0
        || fs.port_guid() != 0
        || fs.affiliation() != 0
        || fs.addresses_list() != 0
    {
        return Err(CmdError::param(s::VPORT_FIELD_NOT_SETTABLE));
    }
    if fs.mtu() != 0 {
        let mtu = c.mtu();
        if !(MIN_NIC_MTU..=u32::from(DEFAULT_NIC_MTU)).contains(&mtu) {
            return Err(CmdError::param(s::VPORT_BAD_MTU));
        }
    }
    if fs.mtu() != 0 {
        fw.nic_mtu = c.mtu() as u16;
    }
    if fs.roce_en() != 0 {
        fw.roce_en = c.roce_en() != 0;
    }
    Ok(())
}

/// The register size for `register_id`, if the device implements it.
fn reg_len(id: RegisterId) -> Option<usize> {
    match id {
        RegisterId::HOST_ENDIANNESS | RegisterId::PAOS => Some(REG_LEN),
        _ => None,
    }
}

/// The ACCESS_REG output length: the header and the register.
pub(crate) fn access_reg_output_len(input: &[u8]) -> usize {
    let id = RegisterId(AccessRegisterIn::wrap_unchecked(input).register_id() as u16);
    AccessRegisterOut::LEN + reg_len(id).unwrap_or(0)
}

/// ACCESS_REG: write (op_mod 0) or read (op_mod 1) HOST_ENDIANNESS or PAOS.
pub(crate) fn access_reg(
    fw: &mut Firmware,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let i = AccessRegisterIn::wrap_unchecked(input);
    let id = RegisterId(i.register_id() as u16);
    let Some(len) = reg_len(id) else {
        return Err(CmdError::param(s::UNKNOWN_REGISTER));
    };
    let write = match AccessRegOpMod(i.op_mod() as u16) {
        AccessRegOpMod::WRITE => true,
        AccessRegOpMod::READ => false,
        _ => return Err(CmdError::param(s::BAD_OP_MOD)),
    };
    let data = i.register_data();
    if data.len() < len {
        return Err(CmdError::inlen(s::LIST_TRUNCATED));
    }
    let mut o = AccessRegisterOut::wrap_unchecked(out);
    let reg_out = o.register_data_mut();
    match id {
        RegisterId::HOST_ENDIANNESS => {
            if write {
                fw.host_endianness = RegisterHostEndianness::wrap_unchecked(data).he();
            }
            let _ = RegisterHostEndianness::wrap_unchecked(reg_out).set_he(fw.host_endianness);
        }
        _ => {
            let r = PaosReg::wrap_unchecked(data);
            let p = port_index(profile, r.local_port())?;
            if write && r.ase() != 0 {
                let a = r.admin_status();
                if a != port_status::UP && a != port_status::DOWN {
                    return Err(CmdError::param(s::BAD_ADMIN_STATUS));
                }
                if let Some(slot) = fw.port_admin.get_mut(p) {
                    *slot = a;
                }
            }
            let admin = fw.port_admin.get(p).copied().unwrap_or(port_status::UP);
            let mut ro = PaosReg::wrap_unchecked(reg_out);
            let _ = ro.set_local_port(r.local_port());
            let _ = ro.set_admin_status(admin);
            // The simulated link follows the admin state at once.
            let _ = ro.set_oper_status(admin);
        }
    }
    Ok(())
}
