//! The query verbs: device and port attributes, GIDs and P_Keys, from the capabilities and
//! port state the driver read at bring-up.
//!
//! Owns: `ibv_query_device` / `_ex`, `ibv_query_port` (the exported 48-byte compat form and
//! the `verbs_context.query_port` form sized by the caller), the GID verbs (`ibv_query_gid`,
//! `_ibv_query_gid_ex`, `_ibv_query_gid_table`, `ibv_query_gid_type`) and the P_Key verbs.
//! Must not: issue commands (everything comes from `Hca::caps` / `Hca::ports`), or write more
//! than the caller's `sizeof` of an extensible struct.
//!
//! Sources: the values follow the kernel's `mlx5_ib_query_device` / `mlx5_query_roce_port`
//! (`drivers/infiniband/hw/mlx5/main.c`) where the capabilities name them, and print what
//! `bypass devinfo` prints (the same `Caps` and the same formulas: `max_cqe` is
//! `1 << log_max_cq_sz`). RoCE ports as `mlx5_query_roce_port`: one P_Key (0xffff), LID 0,
//! Ethernet link layer, `active_mtu` the largest IB MTU the Ethernet MTU holds with RoCEv2
//! headers; GIDs are RoCE v2 (`enum ibv_gid_type_sysfs` value 1 for `ibv_query_gid_type`).

use std::ffi::c_int;

use bypass_driver::hw::cmd::caps::CmdHcaCap;
use bypass_driver::{Hca, Port};

use crate::abi::{self, ibv_context, ibv_device_attr, ibv_device_attr_ex, ibv_gid, ibv_port_attr};
use crate::context::Context;
use crate::devices::set_cstr;
use crate::ffi::{guard, set_errno};

/// Mellanox's IEEE OUI, the `vendor_id` every mlx5 function reports.
pub(crate) const VENDOR_ID_MELLANOX: u32 = 0x02c9;

fn pow2(log: u8) -> i32 {
    1i32.checked_shl(u32::from(log))
        .filter(|v| *v > 0)
        .unwrap_or(i32::MAX)
}

/// The node GUID: the port's MAC as an EUI-64 (`ff:fe` in the middle, as RoCE devices do).
pub(crate) fn node_guid(hca: &Hca) -> u64 {
    let m = hca.ports().first().map_or([0; 6], |p| p.mac);
    let b = [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]];
    u64::from_be_bytes(b).to_be()
}

/// The most SGEs a send WQE holds (kernel `mlx5_ib_query_device`: `max_sq_desc =
/// min(max_wqe_sz_sq, 512)`, less ctrl and remote-address segments, in 16-byte data
/// segments).
fn max_sq_sge(hca: &Hca) -> i32 {
    let desc = i32::from(hca.caps().max_wqe_sz_sq).min(512);
    ((desc - 16 - 16) / 16).max(0)
}

fn max_rq_sge(hca: &Hca) -> i32 {
    i32::from(hca.caps().max_wqe_sz_rq) / 16
}

/// Fills `a` for `hca` (`ibv_query_device`).
pub(crate) fn device_attr(hca: &Hca, a: &mut ibv_device_attr) {
    let c = hca.caps();
    let g = CmdHcaCap::wrap_unchecked(&c.general_page[..]);
    let info = hca.device_info();
    // SAFETY: plain C data: all-zero is valid.
    *a = unsafe { std::mem::zeroed() };
    set_cstr(&mut a.fw_ver, &info.fw_version);
    a.node_guid = node_guid(hca);
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = !0xfff;
    a.vendor_id = VENDOR_ID_MELLANOX;
    a.vendor_part_id = info.hw_id;
    a.hw_ver = 0;
    a.max_qp = pow2(c.log_max_qp);
    a.max_qp_wr = pow2(c.log_max_qp_sz);
    a.device_cap_flags = abi::IBV_DEVICE_BAD_PKEY_CNTR
        | abi::IBV_DEVICE_BAD_QKEY_CNTR
        | abi::IBV_DEVICE_SYS_IMAGE_GUID
        | abi::IBV_DEVICE_RC_RNR_NAK_GEN
        | abi::IBV_DEVICE_PORT_ACTIVE_EVENT;
    a.max_sge = max_sq_sge(hca).min(max_rq_sge(hca));
    a.max_sge_rd = a.max_sge;
    a.max_cq = pow2(c.log_max_cq);
    a.max_cqe = pow2(c.log_max_cq_sz);
    a.max_mr = pow2(c.log_max_mkey);
    a.max_pd = pow2(c.log_max_pd);
    a.max_qp_rd_atom = pow2(c.log_max_ra_res_qp);
    a.max_qp_init_rd_atom = pow2(c.log_max_ra_req_qp);
    a.max_res_rd_atom = a.max_qp_rd_atom.saturating_mul(a.max_qp);
    a.atomic_cap = if c.atomic {
        abi::IBV_ATOMIC_HCA
    } else {
        abi::IBV_ATOMIC_NONE
    };
    a.max_ah = i32::MAX;
    a.max_srq = pow2(u8::try_from(g.log_max_srq()).unwrap_or(0));
    a.max_srq_wr = pow2(u8::try_from(g.log_max_srq_sz()).unwrap_or(0)) - 1;
    a.max_srq_sge = (max_rq_sge(hca) - 1).max(0);
    a.max_pkeys = 1;
    a.local_ca_ack_delay = c.local_ca_ack_delay;
    a.phys_port_cnt = c.num_ports;
}

/// The `ibv_mtu` of `bytes` (0 when not an IB MTU).
pub(crate) fn ibv_mtu(bytes: u32) -> u32 {
    match bytes {
        256 => abi::IBV_MTU_256,
        512 => abi::IBV_MTU_512,
        1024 => abi::IBV_MTU_1024,
        2048 => abi::IBV_MTU_2048,
        4096 => abi::IBV_MTU_4096,
        _ => 0,
    }
}

/// Fills the compat prefix of `ibv_port_attr` (everything up to `link_layer`'s neighbours).
fn port_attr(hca: &Hca, p: &Port, a: &mut ibv_port_attr) {
    let c = hca.caps();
    // SAFETY: plain C data: all-zero is valid.
    *a = unsafe { std::mem::zeroed() };
    a.state = p.state;
    a.max_mtu = abi::IBV_MTU_4096;
    a.active_mtu = ibv_mtu(p.active_mtu());
    a.gid_tbl_len = i32::try_from(c.gid_table_len).unwrap_or(i32::MAX);
    a.port_cap_flags = abi::IBV_PORT_CM_SUP | abi::IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = u32::try_from(1u64 << c.log_max_msg.min(31)).unwrap_or(u32::MAX);
    a.pkey_tbl_len = 1;
    a.max_vl_num = 1;
    a.active_width = 2; // 4X
    a.active_speed = 32; // EDR (25 Gb/s per lane), as a 100 Gb/s ConnectX reports
    a.phys_state = if p.state == abi::IBV_PORT_ACTIVE {
        5
    } else {
        3
    }; // LinkUp / Disabled
    a.link_layer = abi::IBV_LINK_LAYER_ETHERNET as u8;
}

fn port_of(hca: &Hca, port_num: u8) -> Option<&Port> {
    hca.port(port_num)
}

/// `ibv_query_device`: 0 or an errno.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `attr` writable for `sizeof(struct ibv_device_attr)`.
#[unsafe(export_name = "__bypass_ibv_query_device")]
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    guard(libc::EIO, || {
        if ctx.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        // SAFETY: the caller's contract: `attr` is writable for the struct.
        device_attr(&c.open.hca, unsafe { &mut *attr });
        0
    })
}

/// The ops slot `_compat_query_device` (old binaries call through it).
pub(crate) unsafe extern "C" fn compat_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: the same contract as `ibv_query_device`.
    unsafe { ibv_query_device(ctx, attr) }
}

/// `verbs_context.query_device_ex`: fills at most `attr_size` bytes of `attr`.
pub(crate) unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const abi::ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let _ = input;
    guard(libc::EIO, || {
        if ctx.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        let base = std::mem::offset_of!(ibv_device_attr_ex, orig_attr)
            + std::mem::size_of::<ibv_device_attr>();
        if attr_size < base {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        let hca = &c.open.hca;
        // SAFETY: plain C data: all-zero is valid.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        device_attr(hca, &mut ex.orig_attr);
        ex.completion_timestamp_mask = 0;
        ex.hca_core_clock = u64::from(hca.caps().device_frequency_khz);
        ex.max_dm_size = 0;
        // The kernel reports every capability flag in the 64-bit field, the legacy 32-bit
        // one being its low half, and the port count in `phys_port_cnt_ex` too
        // (`ibv_cmd_query_device_any`).
        ex.device_cap_flags_ex = u64::from(ex.orig_attr.device_cap_flags);
        ex.phys_port_cnt_ex = u32::from(ex.orig_attr.phys_port_cnt);
        let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: `attr` is writable for `attr_size` bytes (the caller's contract) and `n`
        // is at most that; `ex` is a whole struct of at least `n` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&ex).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        0
    })
}

/// `verbs_context.query_port`: the port's attributes, at most `len` bytes of them.
pub(crate) unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    guard(libc::EIO, || {
        if ctx.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        let Some(p) = port_of(&c.open.hca, port_num) else {
            return libc::EINVAL;
        };
        // SAFETY: plain C data: all-zero is valid.
        let mut full: ibv_port_attr = unsafe { std::mem::zeroed() };
        port_attr(&c.open.hca, p, &mut full);
        let n = len.min(std::mem::size_of::<ibv_port_attr>());
        // SAFETY: `attr` is writable for `len` bytes (the caller's contract), `n <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&full).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        0
    })
}

/// `ibv_query_port` (exported): the 48-byte compat layout programs built before the struct
/// grew pass (`struct _compat_ibv_port_attr`).
///
/// # Safety
/// `ctx` from `ibv_open_device`; `attr` writable for `sizeof(struct _compat_ibv_port_attr)`.
#[unsafe(export_name = "__bypass_ibv_query_port")]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut abi::_compat_ibv_port_attr,
) -> c_int {
    let len = std::mem::size_of::<abi::_compat_ibv_port_attr>();
    // SAFETY: the same contract, with the compat size.
    unsafe { query_port_ex(ctx, port_num, attr.cast(), len) }
}

/// The ops slot `_compat_query_port`.
pub(crate) unsafe extern "C" fn compat_query_port(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut abi::_compat_ibv_port_attr,
) -> c_int {
    // SAFETY: the same contract as `ibv_query_port`.
    unsafe { ibv_query_port(ctx, port_num, attr) }
}

fn gid_at(c: &Context, port_num: u8, index: i64) -> Option<[u8; 16]> {
    let p = port_of(&c.open.hca, port_num)?;
    let i = usize::try_from(index).ok()?;
    if i >= c.open.hca.caps().gid_table_len {
        return None;
    }
    Some(p.gids.get(i).copied().unwrap_or([0; 16]))
}

/// `ibv_query_gid`: 0, or -1 with errno (as libibverbs).
///
/// # Safety
/// `ctx` from `ibv_open_device`; `gid` writable.
#[unsafe(export_name = "__bypass_ibv_query_gid")]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || gid.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        match gid_at(c, port_num, i64::from(index)) {
            Some(g) => {
                // SAFETY: `gid` is writable (the caller's contract).
                unsafe { (*gid).raw = g };
                0
            }
            None => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    })
}

fn gid_entry(c: &Context, port_num: u8, index: u32) -> Option<abi::ibv_gid_entry> {
    let g = gid_at(c, port_num, i64::from(index))?;
    if g == [0; 16] {
        return None;
    }
    Some(abi::ibv_gid_entry {
        gid: ibv_gid { raw: g },
        gid_index: index,
        port_num: u32::from(port_num),
        gid_type: abi::IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    })
}

/// `_ibv_query_gid_ex` (behind `ibv_query_gid_ex`): 0 or an errno; ENODATA for an empty
/// entry, as the kernel answers.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `entry` writable for `entry_size` bytes.
#[unsafe(export_name = "__bypass__ibv_query_gid_ex")]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut abi::ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        if ctx.is_null() || entry.is_null() || flags != 0 {
            return libc::EINVAL;
        }
        if entry_size < std::mem::size_of::<abi::ibv_gid_entry>() {
            return libc::EINVAL;
        }
        let Ok(port) = u8::try_from(port_num) else {
            return libc::EINVAL;
        };
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        if port_of(&c.open.hca, port).is_none() {
            return libc::EINVAL;
        }
        match gid_entry(c, port, gid_index) {
            Some(e) => {
                // SAFETY: `entry` is writable for at least one entry (checked above).
                unsafe { entry.write(e) };
                0
            }
            None => libc::ENODATA,
        }
    })
}

/// `_ibv_query_gid_table`: the valid GIDs of every port, at most `max_entries`; their
/// number, or a negative errno.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `entries` writable for `max_entries * entry_size` bytes.
#[unsafe(export_name = "__bypass__ibv_query_gid_table")]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut abi::ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        if ctx.is_null() || flags != 0 || entry_size < std::mem::size_of::<abi::ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        let mut n = 0usize;
        for p in c.open.hca.ports() {
            for i in 0..c.open.hca.caps().gid_table_len {
                let Ok(i) = u32::try_from(i) else { break };
                let Some(e) = gid_entry(c, p.num, i) else {
                    continue;
                };
                if n == max_entries {
                    return -(libc::EINVAL as isize);
                }
                // SAFETY: entry `n < max_entries` lies in the caller's array, whose stride
                // is `entry_size` bytes (at least one entry each, checked above).
                unsafe { entries.byte_add(n * entry_size).write_unaligned(e) };
                n += 1;
            }
        }
        isize::try_from(n).unwrap_or(isize::MAX)
    })
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE): 0 and the sysfs GID type (1: RoCE v2), or -1.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `ty` writable.
#[unsafe(export_name = "__bypass_ibv_query_gid_type")]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port_num: u8,
    index: u32,
    ty: *mut u32,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || ty.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        if gid_at(c, port_num, i64::from(index)).is_none() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `ty` is writable (the caller's contract).
        unsafe { *ty = 1 };
        0
    })
}

/// `ibv_query_pkey`: the one P_Key of a RoCE port, 0xffff (big-endian, as libibverbs
/// returns it). 0, or -1 with errno.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `pkey` writable.
#[unsafe(export_name = "__bypass_ibv_query_pkey")]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || pkey.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        if port_of(&c.open.hca, port_num).is_none() || index != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `pkey` is writable (the caller's contract).
        unsafe { *pkey = 0xffffu16.to_be() };
        0
    })
}

/// `ibv_get_pkey_index`: the index of `pkey` (big-endian) in the port's table, or -1.
///
/// # Safety
/// `ctx` from `ibv_open_device`.
#[unsafe(export_name = "__bypass_ibv_get_pkey_index")]
pub unsafe extern "C" fn ibv_get_pkey_index(
    ctx: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() {
            return -1;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { Context::from_ibv(ctx) };
        if port_of(&c.open.hca, port_num).is_some() && u16::from_be(pkey) | 0x8000 == 0xffff {
            0
        } else {
            set_errno(libc::ENOENT);
            -1
        }
    })
}
