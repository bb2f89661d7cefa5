//! Vport commands: QUERY_HCA_VPORT_CONTEXT (port state, LID, GUIDs), QUERY_HCA_VPORT_GID (the
//! GID table), QUERY_NIC_VPORT_CONTEXT / MODIFY_NIC_VPORT_CONTEXT (RoCE enable, MTU, MAC).
//!
//! Sources: Linux `include/linux/mlx5/mlx5_ifc.h`
//! (`mlx5_ifc_query_hca_vport_context_{in,out}_bits`, `mlx5_ifc_hca_vport_context_bits`,
//! `mlx5_ifc_query_hca_vport_gid_{in,out}_bits`,
//! `mlx5_ifc_{query,modify}_nic_vport_context_{in,out}_bits`, `mlx5_ifc_nic_vport_context_bits`,
//! `mlx5_ifc_modify_nic_vport_field_select_bits`, `mlx5_ifc_mac_address_layout_bits`); use: kernel
//! `drivers/net/ethernet/mellanox/mlx5/core/vport.c`, rdma-core `mlx5_vfio.c`
//! (`mlx5_vfio_nic_vport_update_roce_state`).
//!
//! Owns: formats. Must not: decide port policy (the driver).

use crate::error::{Error, Result};

crate::prm_layout! {
    /// QUERY_HCA_VPORT_CONTEXT input (`mlx5_ifc_query_hca_vport_context_in_bits`).
    pub struct QueryHcaVportContextIn("query_hca_vport_context_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT` (0x762).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Query another vport (e-switch manager only); 0.
        other_vport, set_other_vport: 0x40, 1;
        /// Port number (1-based; 0 is accepted as "the function's port" on single-port devices).
        port_num, set_port_num: 0x4c, 4;
        /// Vport number when `other_vport`.
        vport_number, set_vport_number: 0x50, 16;
    }
}

crate::prm_layout! {
    /// QUERY_HCA_VPORT_CONTEXT output (`mlx5_ifc_query_hca_vport_context_out_bits`,
    /// 0x210 bytes): the context at byte 0x10.
    pub struct QueryHcaVportContextOut("query_hca_vport_context_out", 0x210) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The vport's context.
            hca_vport_context, hca_vport_context_mut: HcaVportContext @ 0x10;
        }
    }
}

crate::prm_layout! {
    /// The HCA vport context (`mlx5_ifc_hca_vport_context_bits`, 0x200 bytes).
    pub struct HcaVportContext("hca_vport_context", 0x200) {
        /// Which fields a MODIFY_HCA_VPORT_CONTEXT changes.
        field_select, set_field_select: 0x0, 32;
        /// The subnet manager is virtualization-aware.
        sm_virt_aware, set_sm_virt_aware: 0x100, 1;
        /// The port has an SMI.
        has_smi, set_has_smi: 0x101, 1;
        /// The port has a raw QP.
        has_raw, set_has_raw: 0x102, 1;
        /// A GRH is required on this port (RoCE: always).
        grh_required, set_grh_required: 0x103, 1;
        /// Physical port state (IBTA PortPhysicalState: 5 = LinkUp).
        port_physical_state, set_port_physical_state: 0x110, 4;
        /// Vport state policy.
        vport_state_policy, set_vport_state_policy: 0x114, 4;
        /// Logical port state (IBTA PortState: 1 Down, 2 Init, 3 Armed, 4 Active).
        port_state, set_port_state: 0x118, 4;
        /// Vport state.
        vport_state, set_vport_state: 0x11c, 4;
        /// System image GUID.
        system_image_guid, set_system_image_guid: 0x140, 64;
        /// Port GUID.
        port_guid, set_port_guid: 0x180, 64;
        /// Node GUID.
        node_guid, set_node_guid: 0x1c0, 64;
        /// IBTA CapabilityMask.
        cap_mask1, set_cap_mask1: 0x200, 32;
        /// Which `cap_mask1` bits a modify changes.
        cap_mask1_field_select, set_cap_mask1_field_select: 0x220, 32;
        /// IBTA CapabilityMask2.
        cap_mask2, set_cap_mask2: 0x240, 32;
        /// Which `cap_mask2` bits a modify changes.
        cap_mask2_field_select, set_cap_mask2_field_select: 0x260, 32;
        /// The port's LID (InfiniBand; 0 on Ethernet).
        lid, set_lid: 0x300, 16;
        /// InitTypeReply.
        init_type_reply, set_init_type_reply: 0x314, 4;
        /// LID mask count.
        lmc, set_lmc: 0x318, 3;
        /// Subnet timeout.
        subnet_timeout, set_subnet_timeout: 0x31b, 5;
        /// The subnet manager's LID.
        sm_lid, set_sm_lid: 0x320, 16;
        /// The subnet manager's SL.
        sm_sl, set_sm_sl: 0x330, 4;
        /// Q_Key violations seen.
        qkey_violation_counter, set_qkey_violation_counter: 0x340, 16;
        /// P_Key violations seen.
        pkey_violation_counter, set_pkey_violation_counter: 0x350, 16;
    }
}

/// `port_state` values (IBTA PortState, as the kernel's `enum ib_port_state`).
pub mod port_state {
    /// Down.
    pub const DOWN: u32 = 1;
    /// Initialized.
    pub const INIT: u32 = 2;
    /// Armed.
    pub const ARMED: u32 = 3;
    /// Active: traffic can flow.
    pub const ACTIVE: u32 = 4;
}

crate::prm_layout! {
    /// QUERY_HCA_VPORT_GID input (`mlx5_ifc_query_hca_vport_gid_in_bits`).
    pub struct QueryHcaVportGidIn("query_hca_vport_gid_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_HCA_VPORT_GID` (0x764).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Query another vport; 0.
        other_vport, set_other_vport: 0x40, 1;
        /// Port number.
        port_num, set_port_num: 0x4c, 4;
        /// Vport number when `other_vport`.
        vport_number, set_vport_number: 0x50, 16;
        /// GID index to read, or [`ALL_GIDS`] for the whole table.
        gid_index, set_gid_index: 0x70, 16;
    }
}

/// `gid_index` asking for the whole table (kernel `mlx5_query_hca_vport_gid`: index 0xffff
/// means `gid_table_size` entries).
pub const ALL_GIDS: u32 = 0xffff;

crate::prm_layout! {
    /// QUERY_HCA_VPORT_GID output header (`mlx5_ifc_query_hca_vport_gid_out_bits`); the
    /// `gids_num` 16-byte GIDs follow at byte 0x10 (see [`QueryHcaVportGidOut::gid`]).
    pub struct QueryHcaVportGidOut("query_hca_vport_gid_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// Number of GIDs returned.
        gids_num, set_gids_num: 0x60, 16;
    }
}

/// Byte offset of the GID list in QUERY_HCA_VPORT_GID output.
pub const GID_LIST_OFF: usize = 0x10;
/// Bytes per GID.
pub const GID_LEN: usize = 16;

/// QUERY_HCA_VPORT_GID output length for `n` GIDs, saturating.
pub const fn query_hca_vport_gid_out_len(n: usize) -> usize {
    GID_LIST_OFF.saturating_add(n.saturating_mul(GID_LEN))
}

// The view's buffer field is private to this module, where `prm_layout!` defined it.
impl<T: AsRef<[u8]>> QueryHcaVportGidOut<T> {
    /// How many GIDs the buffer holds past the header.
    pub fn gid_capacity(&self) -> usize {
        self.buf.as_ref().len().saturating_sub(GID_LIST_OFF) / GID_LEN
    }

    /// GID `i` (16 bytes, network order).
    ///
    /// Errors: [`Error::IndexOutOfRange`] if the buffer does not hold entry `i`.
    pub fn gid(&self, i: usize) -> Result<[u8; GID_LEN]> {
        let len = self.gid_capacity();
        gid_range(i)
            .and_then(|r| self.buf.as_ref().get(r))
            .and_then(|b| <[u8; GID_LEN]>::try_from(b).ok())
            .ok_or(Error::IndexOutOfRange {
                what: "query_hca_vport_gid_out.gid",
                index: i,
                len,
            })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryHcaVportGidOut<T> {
    /// Sets GID `i` (for a device model).
    ///
    /// Errors: [`Error::IndexOutOfRange`] if the buffer does not hold entry `i`.
    pub fn set_gid(&mut self, i: usize, gid: &[u8; GID_LEN]) -> Result<&mut Self> {
        let len = self.gid_capacity();
        let dst = gid_range(i)
            .and_then(|r| self.buf.as_mut().get_mut(r))
            .ok_or(Error::IndexOutOfRange {
                what: "query_hca_vport_gid_out.gid",
                index: i,
                len,
            })?;
        dst.copy_from_slice(gid);
        Ok(self)
    }
}

fn gid_range(i: usize) -> Option<core::ops::Range<usize>> {
    let start = i.checked_mul(GID_LEN)?.checked_add(GID_LIST_OFF)?;
    Some(start..start.checked_add(GID_LEN)?)
}

crate::prm_layout! {
    /// MAC address layout (`mlx5_ifc_mac_address_layout_bits`, 8 bytes: 2 reserved, then the
    /// 6-byte MAC).
    pub struct MacAddressLayout("mac_address_layout", 0x8) {
        /// MAC bits 47..32.
        mac_addr_47_32, set_mac_addr_47_32: 0x10, 16;
        /// MAC bits 31..0.
        mac_addr_31_0, set_mac_addr_31_0: 0x20, 32;
    }
}

impl<T: AsRef<[u8]>> MacAddressLayout<T> {
    /// The MAC address, first byte first.
    pub fn mac(&self) -> [u8; 6] {
        let v = (u64::from(self.mac_addr_47_32()) << 32) | u64::from(self.mac_addr_31_0());
        let b = v.to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MacAddressLayout<T> {
    /// Sets the MAC address.
    pub fn set_mac(&mut self, mac: [u8; 6]) -> Result<&mut Self> {
        self.set_mac_addr_47_32(u32::from(u16::from_be_bytes([mac[0], mac[1]])))?;
        self.set_mac_addr_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
    }
}

crate::prm_layout! {
    /// The NIC vport context (`mlx5_ifc_nic_vport_context_bits`, 0x100 bytes; the address
    /// lists that follow it are not modelled).
    pub struct NicVportContext("nic_vport_context", 0x100) {
        /// Minimum inline mode for Ethernet WQEs.
        min_wqe_inline_mode, set_min_wqe_inline_mode: 0x5, 3;
        /// Disable multicast loopback.
        disable_mc_local_lb, set_disable_mc_local_lb: 0x1d, 1;
        /// Disable unicast loopback.
        disable_uc_local_lb, set_disable_uc_local_lb: 0x1e, 1;
        /// RoCE enabled on this vport (set by bring-up on Ethernet ports).
        roce_en, set_roce_en: 0x1f, 1;
        /// Arm a change event.
        arm_change_event, set_arm_change_event: 0x20, 1;
        /// Event on MTU change.
        event_on_mtu, set_event_on_mtu: 0x3b, 1;
        /// MTU of the vport, in bytes (Ethernet MTU incl. L2 header as the kernel sets it).
        mtu, set_mtu: 0x130, 16;
        /// System image GUID.
        system_image_guid, set_system_image_guid: 0x140, 64;
        /// Port GUID.
        port_guid, set_port_guid: 0x180, 64;
        /// Node GUID.
        node_guid, set_node_guid: 0x1c0, 64;
        /// Q_Key violations.
        qkey_violation_counter, set_qkey_violation_counter: 0x340, 16;
        /// Promiscuous unicast.
        promisc_uc, set_promisc_uc: 0x780, 1;
        /// Promiscuous multicast.
        promisc_mc, set_promisc_mc: 0x781, 1;
        /// Promiscuous all.
        promisc_all, set_promisc_all: 0x782, 1;
        /// Type of the address list that follows (0 UC, 1 MC, 2 VLAN).
        allowed_list_type, set_allowed_list_type: 0x785, 3;
        /// Entries in that list.
        allowed_list_size, set_allowed_list_size: 0x794, 12;
        sub {
            /// The port's burned-in MAC address.
            permanent_address, permanent_address_mut: MacAddressLayout @ 0xf4;
        }
    }
}

crate::prm_layout! {
    /// Which fields MODIFY_NIC_VPORT_CONTEXT changes
    /// (`mlx5_ifc_modify_nic_vport_field_select_bits`).
    pub struct ModifyNicVportFieldSelect("modify_nic_vport_field_select", 0x4) {
        /// Change the affiliation.
        affiliation, set_affiliation: 0x12, 1;
        /// Change `disable_uc_local_lb`.
        disable_uc_local_lb, set_disable_uc_local_lb: 0x14, 1;
        /// Change `disable_mc_local_lb`.
        disable_mc_local_lb, set_disable_mc_local_lb: 0x15, 1;
        /// Change the node GUID.
        node_guid, set_node_guid: 0x16, 1;
        /// Change the port GUID.
        port_guid, set_port_guid: 0x17, 1;
        /// Change the minimum inline mode.
        min_inline, set_min_inline: 0x18, 1;
        /// Change the MTU.
        mtu, set_mtu: 0x19, 1;
        /// Change event arming.
        change_event, set_change_event: 0x1a, 1;
        /// Change promiscuous modes.
        promisc, set_promisc: 0x1b, 1;
        /// Change the permanent address.
        permanent_address, set_permanent_address: 0x1c, 1;
        /// Change the address lists.
        addresses_list, set_addresses_list: 0x1d, 1;
        /// Change `roce_en` (bring-up sets it with `roce_en` = 1 on Ethernet ports).
        roce_en, set_roce_en: 0x1e, 1;
    }
}

crate::prm_layout! {
    /// MODIFY_NIC_VPORT_CONTEXT input (`mlx5_ifc_modify_nic_vport_context_in_bits`, 0x200 bytes).
    pub struct ModifyNicVportContextIn("modify_nic_vport_context_in", 0x200) {
        /// `MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT` (0x755).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Modify another vport; 0.
        other_vport, set_other_vport: 0x40, 1;
        /// Vport number when `other_vport`.
        vport_number, set_vport_number: 0x50, 16;
        sub {
            /// Which fields to change (byte 0x0c).
            field_select, field_select_mut: ModifyNicVportFieldSelect @ 0xc;
            /// The new values (byte 0x100).
            nic_vport_context, nic_vport_context_mut: NicVportContext @ 0x100;
        }
    }
}

crate::prm_layout! {
    /// MODIFY_NIC_VPORT_CONTEXT output (`mlx5_ifc_modify_nic_vport_context_out_bits`).
    pub struct ModifyNicVportContextOut("modify_nic_vport_context_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

crate::prm_layout! {
    /// QUERY_NIC_VPORT_CONTEXT input (`mlx5_ifc_query_nic_vport_context_in_bits`).
    pub struct QueryNicVportContextIn("query_nic_vport_context_in", 0x10) {
        /// `MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT` (0x754).
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Query another vport; 0.
        other_vport, set_other_vport: 0x40, 1;
        /// Vport number when `other_vport`.
        vport_number, set_vport_number: 0x50, 16;
        /// Which address list to return.
        allowed_list_type, set_allowed_list_type: 0x65, 3;
    }
}

crate::prm_layout! {
    /// QUERY_NIC_VPORT_CONTEXT output (`mlx5_ifc_query_nic_vport_context_out_bits`, 0x110 bytes).
    pub struct QueryNicVportContextOut("query_nic_vport_context_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        sub {
            /// The vport's context (byte 0x10).
            nic_vport_context, nic_vport_context_mut: NicVportContext @ 0x10;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_enable_request_bytes() {
        let mut buf = [0u8; 0x200];
        let mut m = ModifyNicVportContextIn::new_checked(&mut buf[..]).unwrap();
        m.set_opcode(0x755).unwrap();
        m.field_select_mut().set_roce_en(1).unwrap();
        m.nic_vport_context_mut().set_roce_en(1).unwrap();
        assert_eq!(&buf[0..2], &[0x07, 0x55]);
        assert_eq!(buf[0xf], 0x02); // field_select bit 30 of the dword at 0x0c
        assert_eq!(buf[0x103], 0x01); // roce_en bit 31 of the dword at 0x100
    }

    #[test]
    fn mac_and_gids() {
        let mut buf = [0u8; 0x100];
        let mut c = NicVportContext::new_checked(&mut buf[..]).unwrap();
        c.permanent_address_mut()
            .set_mac([1, 2, 3, 4, 5, 6])
            .unwrap();
        assert_eq!(c.permanent_address().mac(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(&buf[0xf6..0xfc], &[1, 2, 3, 4, 5, 6]);

        let mut g = [0u8; 0x30];
        let mut out = QueryHcaVportGidOut::new_checked(&mut g[..]).unwrap();
        assert_eq!(out.gid_capacity(), 2);
        out.set_gid(1, &[0xfe; 16]).unwrap();
        assert_eq!(out.gid(1).unwrap(), [0xfe; 16]);
        assert!(matches!(
            out.gid(2),
            Err(Error::IndexOutOfRange {
                index: 2,
                len: 2,
                ..
            })
        ));
        assert!(out.gid(usize::MAX).is_err());
        assert_eq!(&g[0x20..0x30], &[0xfe; 16]);
    }
}
