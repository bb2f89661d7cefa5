//! Capabilities: QUERY_HCA_CAP (GENERAL and ROCE pages, MAX and CUR) and SET_HCA_CAP.
//!
//! Owns: building the capability pages from the profile and the rules of what a driver may
//! set. Must not: enforce the limits themselves (each resource handler checks its own against
//! `profile.caps`).
//!
//! Sources: kernel `drivers/net/ethernet/mellanox/mlx5/core/main.c` (`handle_hca_cap`: the
//! driver copies the CUR page, edits the fields it may set, sends it back; `mlx5_core_get_caps`:
//! op_mod = type << 1 | MAX/CUR), rdma-core `mlx5_vfio.c` (`handle_hca_cap`: cmdif_checksum = 0,
//! log_uar_page_sz = PAGE_SHIFT - 12, mkey_by_name if the MAX page allows; `handle_hca_cap_roce`:
//! sw_r_roce_src_udp_port), `include/linux/mlx5/driver.h` (`mlx5_get_gid_table_len`: the GENERAL
//! page's gid_table_size is log2(entries / 8)).
//!
//! SET_HCA_CAP: the fields a driver may set (those the kernel and rdma-core set) are checked
//! against the MAX page (BAD_PARAM `CAP_ABOVE_MAX`) and applied; every other field is
//! read-only and ignored, as firmware does, because drivers send back the whole CUR page.

use bypass_hw::cmd::caps::{
    CAPABILITY_LEN, CAPABILITY_OFF, CapMode, CapType, CmdHcaCap, CmdHcaCap2, QueryHcaCapIn,
    RoceCap, SetHcaCapIn, cmdif_checksum, port_type,
};

use super::syndromes as s;
use super::{CmdError, CmdResult};
use crate::firmware::Firmware;
use crate::profile::Profile;

/// The RoCEv2 UDP port (IANA).
const ROCE_V2_PORT: u32 = 4791;
/// `MLX5_ROCE_VERSION_2_CAP` (kernel `mlx5_ifc.h`: 1 << MLX5_ROCE_VERSION_2).
const ROCE_VERSION_2_CAP: u32 = 1 << 2;
/// `MLX5_ROCE_L3_TYPE_IPV4_CAP | MLX5_ROCE_L3_TYPE_IPV6_CAP` (kernel `mlx5_ifc.h`).
const ROCE_L3_IPV4_IPV6: u32 = (1 << 1) | (1 << 2);

/// The `gid_table_size` code for `entries` GIDs: log2(entries / 8), rounded up, at most 4
/// (`mlx5_get_gid_table_len` decodes 8 << code).
pub(crate) fn gid_table_code(entries: u16) -> u32 {
    let mut code = 0u32;
    while code < 4 && (8u32 << code) < u32::from(entries) {
        code += 1;
    }
    code
}

/// The GID table length the GENERAL page announces (what QUERY_HCA_VPORT_GID ALL returns).
pub(crate) fn gid_table_len(profile: &Profile) -> usize {
    8usize << gid_table_code(profile.caps.gid_table_size)
}

/// The GENERAL page: (CUR, MAX).
pub(crate) fn general_pages(p: &Profile) -> (Vec<u8>, Vec<u8>) {
    let c = &p.caps;
    let mut max = vec![0u8; CAPABILITY_LEN];
    let mut m = CmdHcaCap::wrap_unchecked(&mut max[..]);
    // Every value fits its field (the profile's types are narrower or clamped): the setters'
    // overflow errors cannot happen, and a profile that overflows one just leaves it 0.
    let _ = m.set_log_max_qp_sz(c.log_max_qp_sz.into());
    let _ = m.set_log_max_qp(c.log_max_qp.into());
    let _ = m.set_log_max_cq_sz(c.log_max_cq_sz.into());
    let _ = m.set_log_max_cq(c.log_max_cq.into());
    let _ = m.set_log_max_eq_sz(c.log_max_eq_sz.into());
    let _ = m.set_log_max_eq(c.log_max_eq.into());
    let _ = m.set_log_max_mkey(c.log_max_mkey.into());
    let _ = m.set_hca_cap_2(1);
    let _ = m.set_log_max_pd(c.log_max_pd.into());
    let _ = m.set_log_max_msg(c.log_max_msg.into());
    let _ = m.set_log_max_ra_req_qp(c.log_max_ra_req_qp.into());
    let _ = m.set_log_max_ra_res_qp(c.log_max_ra_res_qp.into());
    let _ = m.set_max_wqe_sz_sq(c.max_wqe_sz_sq.into());
    let _ = m.set_max_wqe_sz_rq(c.max_wqe_sz_rq.into());
    let _ = m.set_log_max_srq_sz(c.log_max_srq_sz.into());
    let _ = m.set_log_max_srq(c.log_max_srq.into());
    let _ = m.set_log_bf_reg_size(c.log_bf_reg_size.into());
    let _ = m.set_bf(1);
    let _ = m.set_atomic(c.atomic.into());
    let _ = m.set_roce(c.roce.into());
    let _ = m.set_ud(c.ud.into());
    let _ = m.set_uc(c.uc.into());
    let _ = m.set_rc(1);
    let _ = m.set_cqe_version(c.cqe_version.into());
    let _ = m.set_fast_teardown(c.fast_teardown.into());
    let _ = m.set_force_teardown(1);
    let _ = m.set_gid_table_size(gid_table_code(c.gid_table_size));
    let _ = m.set_pkey_table_size(0);
    let _ = m.set_port_type(port_type::ETH);
    let _ = m.set_num_ports(p.ports.len().min(255) as u32);
    let _ = m.set_num_vhca_ports(p.ports.len().min(255) as u32);
    let _ = m.set_uar_4k(1);
    let _ = m.set_num_of_uars_per_page(1);
    let _ = m.set_log_pg_sz(12);
    let _ = m.set_driver_version(1);
    // rdma-core's mlx5_vfio refuses a device without it; the sim never needs a UMEM for it.
    let _ = m.set_umem_uid_0(1);
    let _ = m.set_event_cap(1);
    // The congestion commands (`firmware::cong`); a profile may leave them out.
    let _ = m.set_cc_query_allowed(c.cong_control.into());
    let _ = m.set_cc_modify_allowed(c.cong_control.into());
    let _ = m.set_cq_oi(1);
    let _ = m.set_cq_moderation(1);
    let _ = m.set_cmdif_checksum(cmdif_checksum::INITIAL_STATE);
    let _ = m.set_local_ca_ack_delay(16);
    let _ = m.set_log_max_mrw_sz(64);
    // Device time is in nanoseconds: a 1 GHz clock.
    let _ = m.set_device_frequency_khz(1_000_000);
    let _ = m.set_device_frequency_mhz(1_000);
    let cur = max.clone();
    (cur, max)
}

/// The ROCE page: (CUR, MAX).
pub(crate) fn roce_pages(p: &Profile) -> (Vec<u8>, Vec<u8>) {
    let mut max = vec![0u8; CAPABILITY_LEN];
    let mut r = RoceCap::wrap_unchecked(&mut max[..]);
    let _ = r.set_sw_r_roce_src_udp_port(1);
    let _ = r.set_l3_type(ROCE_L3_IPV4_IPV6);
    let _ = r.set_roce_version(ROCE_VERSION_2_CAP);
    let _ = r.set_r_roce_dest_udp_port(ROCE_V2_PORT);
    let _ = r.set_r_roce_min_src_udp_port(0xc000);
    let _ = r.set_r_roce_max_src_udp_port(0xffff);
    let _ = r.set_roce_address_table_size(p.caps.gid_table_size.into());
    let mut cur = max.clone();
    // Chosen by the driver (rdma-core sets it when the MAX page has it).
    let _ = RoceCap::wrap_unchecked(&mut cur[..]).set_sw_r_roce_src_udp_port(0);
    (cur, max)
}

/// The GENERAL_2 page (read-only: CUR = MAX): the mkey page-size bounds.
pub(crate) fn general_2_page(p: &Profile) -> Vec<u8> {
    let mut page = vec![0u8; CAPABILITY_LEN];
    let mut m = CmdHcaCap2::wrap_unchecked(&mut page[..]);
    let _ = m.set_max_mkey_log_entity_size_mtt(p.caps.max_mkey_page_shift.into());
    page
}

fn cap_type(op_mod: u32, roce: bool) -> Result<CapType, CmdError> {
    match CapType((op_mod >> 1) as u16) {
        CapType::GENERAL => Ok(CapType::GENERAL),
        CapType::GENERAL_2 => Ok(CapType::GENERAL_2),
        CapType::ROCE if roce => Ok(CapType::ROCE),
        _ => Err(CmdError::param(s::UNSUPPORTED_CAP_TYPE)),
    }
}

/// QUERY_HCA_CAP.
pub(crate) fn query_hca_cap(
    fw: &Firmware,
    profile: &Profile,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let i = QueryHcaCapIn::wrap_unchecked(input);
    if i.other_function() != 0 || i.function_id() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    let max = CapMode((i.op_mod() & 1) as u16) == CapMode::MAX;
    let general_2;
    let page = match (cap_type(i.op_mod(), profile.caps.roce)?, max) {
        (CapType::GENERAL_2, _) => {
            general_2 = general_2_page(profile);
            &general_2
        }
        (CapType::GENERAL, true) => &fw.cap_max,
        (CapType::GENERAL, false) => &fw.cap_cur,
        (_, true) => &fw.roce_max,
        (_, false) => &fw.roce_cur,
    };
    if let Some(dst) = out.get_mut(CAPABILITY_OFF..CAPABILITY_OFF + CAPABILITY_LEN) {
        dst.copy_from_slice(page);
    }
    Ok(())
}

/// Checks `new.$f <= max.$f` for each listed field, then copies them into `cur`.
macro_rules! settable {
    ($new:ident, $max:ident, $cur:ident; $($get:ident / $set:ident),* $(,)?) => {{
        $( if $new.$get() > $max.$get() {
            return Err(CmdError::param(s::CAP_ABOVE_MAX));
        } )*
        $( let _ = $cur.$set($new.$get()); )*
    }};
}

/// SET_HCA_CAP.
pub(crate) fn set_hca_cap(
    fw: &mut Firmware,
    profile: &Profile,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let i = SetHcaCapIn::wrap_unchecked(input);
    if i.other_function() != 0 || i.function_id() != 0 {
        return Err(CmdError::param(s::OTHER_FUNCTION));
    }
    let ty = cap_type(i.op_mod(), profile.caps.roce)?;
    if ty == CapType::GENERAL {
        let new = i.capability();
        if new.cmdif_checksum() == cmdif_checksum::ENABLED {
            return Err(CmdError::param(s::CAP_CHECKSUM_UNSUPPORTED));
        }
        let max = CmdHcaCap::wrap_unchecked(&fw.cap_max[..]);
        let mut cur = CmdHcaCap::wrap_unchecked(&mut fw.cap_cur[..]);
        settable!(new, max, cur;
            cmdif_checksum / set_cmdif_checksum,
            log_uar_page_sz / set_log_uar_page_sz,
            uar_4k / set_uar_4k,
            log_max_qp / set_log_max_qp,
            cache_line_128byte / set_cache_line_128byte,
            mkey_by_name / set_mkey_by_name,
            release_all_pages / set_release_all_pages,
            num_vhca_ports / set_num_vhca_ports,
            dct / set_dct,
            disable_link_up / set_disable_link_up,
        );
    } else if ty == CapType::GENERAL_2 {
        // Nothing on this page is settable: firmware ignores it, as read-only GENERAL fields.
    } else {
        let new = i.roce_cap();
        let max = RoceCap::wrap_unchecked(&fw.roce_max[..]);
        let mut cur = RoceCap::wrap_unchecked(&mut fw.roce_cur[..]);
        settable!(new, max, cur; sw_r_roce_src_udp_port / set_sw_r_roce_src_udp_port);
    }
    Ok(())
}
