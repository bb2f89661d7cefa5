//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, and the AH of a received UD message
//! (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).
//!
//! Owns: [`Ah`] (an `ibv_ah` first, then the attributes a UD send builds its address vector
//! from, `Ah::dest`).
//! Must not: issue commands (an mlx5 AH is user-space only: `mlx5_create_ah` builds the
//! address vector without the firmware).
//!
//! Sources: rdma-core `providers/mlx5/verbs.c` (`mlx5_create_ah`: RoCE needs a GRH),
//! `libibverbs/verbs.c` (`ibv_init_ah_from_wc`: for RoCE v2 over IPv4 the 40 bytes before
//! the data hold 20 unused bytes then the IPv4 header, whose source becomes the reply's
//! destination GID `::ffff:a.b.c.d`; otherwise the GRH's source GID; hop limit 0xff).

use std::ffi::c_int;

use bypass_driver::post::UdDest;

use crate::abi::{self, ibv_ah, ibv_ah_attr, ibv_context, ibv_grh, ibv_pd, ibv_wc};
use crate::context::Context;
use crate::ffi::{guard, set_errno};
use crate::pd_mr::Pd;

/// An address handle: `ibv` first.
#[repr(C)]
pub(crate) struct Ah {
    ibv: ibv_ah,
    attr: ibv_ah_attr,
}

impl Ah {
    /// The AH behind a program's pointer.
    ///
    /// # Safety
    /// `ah` from `ibv_create_ah*`, not destroyed.
    pub(crate) unsafe fn from_ibv<'a>(ah: *mut ibv_ah) -> &'a Ah {
        // SAFETY: `ibv` is the first field of the boxed `#[repr(C)]` AH.
        unsafe { &*ah.cast::<Ah>() }
    }

    /// The UD destination of a send through this AH to `dqpn` with `qkey`.
    pub(crate) fn dest(&self, dqpn: u32, qkey: u32) -> UdDest {
        let g = &self.attr.grh;
        // SAFETY: `raw` covers the whole 16-byte union.
        let rgid = unsafe { g.dgid.raw };
        let hop = if g.hop_limit == 0 { 64 } else { g.hop_limit };
        UdDest::roce(dqpn, qkey, rgid, [0; 6], g.sgid_index, hop)
    }
}

/// `ibv_create_ah`: NULL with errno (EINVAL without a GRH: RoCE addresses by GID).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; `attr` readable.
#[unsafe(export_name = "__bypass_ibv_create_ah")]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        if pd.is_null() || attr.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let (p, a) = unsafe { (Pd::from_ibv(pd), *attr) };
        if a.is_global == 0 {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let ibv = ibv_ah {
            context: p.ibv.context,
            pd,
            handle: 0,
        };
        Box::into_raw(Box::new(Ah { ibv, attr: a })).cast()
    })
}

/// `ibv_destroy_ah`: 0.
///
/// # Safety
/// `ah` from `ibv_create_ah*`, not used again.
#[unsafe(export_name = "__bypass_ibv_destroy_ah")]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard(libc::EIO, || {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: leaked from a `Box<Ah>` at creation; given back now.
        drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
        0
    })
}

/// The index of `gid` in port `port`'s table (0 when absent).
fn sgid_index(c: &Context, port: u8, gid: &[u8; 16]) -> u8 {
    c.open
        .hca
        .port(port)
        .and_then(|p| p.gids.iter().position(|g| g == gid))
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(0)
}

fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// `ibv_init_ah_from_wc`: the attributes of a reply to the UD message `wc` whose first 40
/// bytes were `grh`. 0, or -1 with errno.
///
/// # Safety
/// `ctx` from `ibv_open_device`; `wc` and `grh` readable; `ah_attr` writable.
#[unsafe(export_name = "__bypass_ibv_init_ah_from_wc")]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || wc.is_null() || grh.is_null() || ah_attr.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's contract.
        let (c, w) = unsafe { (Context::from_ibv(ctx), &*wc) };
        if w.wc_flags & abi::IBV_WC_GRH == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `grh` points at the 40 bytes the device wrote before the data.
        let bytes: [u8; 40] = unsafe { grh.cast::<[u8; 40]>().read_unaligned() };
        let ip4 = bytes[20] >> 4 == 4;
        let (src, dst, tclass, flow) = if ip4 {
            let s: [u8; 4] = bytes[32..36].try_into().unwrap_or_default();
            let d: [u8; 4] = bytes[36..40].try_into().unwrap_or_default();
            (v4_mapped(s), v4_mapped(d), bytes[21] >> 2, 0)
        } else {
            let s: [u8; 16] = bytes[8..24].try_into().unwrap_or_default();
            let d: [u8; 16] = bytes[24..40].try_into().unwrap_or_default();
            let vtf = u32::from_be_bytes(bytes[0..4].try_into().unwrap_or_default());
            (
                s,
                d,
                u8::try_from((vtf >> 20) & 0xff).unwrap_or(0),
                vtf & 0xfffff,
            )
        };
        // SAFETY: all-zero is a valid `ibv_ah_attr` (C data).
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.is_global = 1;
        a.port_num = port_num;
        a.sl = w.sl;
        a.grh.dgid.raw = src;
        a.grh.sgid_index = sgid_index(c, port_num, &dst);
        a.grh.hop_limit = 0xff;
        a.grh.traffic_class = tclass;
        a.grh.flow_label = flow;
        // SAFETY: writable (the caller's contract).
        unsafe { ah_attr.write(a) };
        0
    })
}

/// `ibv_create_ah_from_wc`: `ibv_init_ah_from_wc` then `ibv_create_ah`.
///
/// # Safety
/// As both.
#[unsafe(export_name = "__bypass_ibv_create_ah_from_wc")]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        if pd.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let ctx = unsafe { Pd::from_ibv(pd) }.ibv.context;
        // SAFETY: all-zero is a valid `ibv_ah_attr`.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's contract.
        if unsafe { ibv_init_ah_from_wc(ctx, port_num, wc, grh, &mut a) } != 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { ibv_create_ah(pd, &mut a) }
    })
}
