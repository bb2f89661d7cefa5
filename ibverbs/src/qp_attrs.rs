//! A QP's attributes: `ibv_modify_qp` through the state machine and `ibv_query_qp`.
//!
//! Owns: the translation of `ibv_modify_qp`'s (state, mask) into the driver's transition
//! inputs (`Rst2Init`, `Init2Rtr`, `Rtr2Rts`, `Rts2Rts`, `SqAttrs`), the attributes a program
//! set (kept in `Qp::saved` for `ibv_query_qp`), and the program-visible `state`.
//! Must not: send commands other than through the driver's transitions; post or poll.
//!
//! Sources: rdma-core `providers/mlx5/verbs.c` (`mlx5_modify_qp`, `mlx5_query_qp`), the
//! kernel's `ib_modify_qp_is_ok` (which attributes each edge takes: the driver checks it
//! again, `driver/src/qp_states.rs`) and `mlx5_set_path` (RoCE paths need a GRH; the flow
//! label is 20 bits).

use std::ffi::c_int;
use std::sync::PoisonError;

use bypass_driver::hw::cmd::qp::PathMtu;
use bypass_driver::qp::Qp as DriverQp;
use bypass_driver::qp_attr::{AddressPath, Init2Rtr, QpAccess, QpType, Rst2Init, Rtr2Rts, Rts2Rts};
use bypass_driver::qp_states::SqAttrs;

use crate::abi::{self, ibv_qp, ibv_qp_attr, ibv_qp_init_attr};
use crate::ffi::{errno_of, guard};
use crate::qp::{Qp, ibv_state};

fn log2_ceil(v: u8) -> u8 {
    let v = u32::from(v.max(1));
    u8::try_from(32 - (v - 1).leading_zeros()).unwrap_or(0)
}

fn access_of(flags: u32) -> QpAccess {
    let mut a = QpAccess::empty();
    if flags & abi::IBV_ACCESS_REMOTE_READ != 0 {
        a |= QpAccess::REMOTE_READ;
    }
    if flags & abi::IBV_ACCESS_REMOTE_WRITE != 0 {
        a |= QpAccess::REMOTE_WRITE;
    }
    if flags & abi::IBV_ACCESS_REMOTE_ATOMIC != 0 {
        a |= QpAccess::REMOTE_ATOMIC;
    }
    a
}

fn path_mtu(m: u32) -> Option<PathMtu> {
    Some(match m {
        abi::IBV_MTU_256 => PathMtu::Mtu256,
        abi::IBV_MTU_512 => PathMtu::Mtu512,
        abi::IBV_MTU_1024 => PathMtu::Mtu1024,
        abi::IBV_MTU_2048 => PathMtu::Mtu2048,
        abi::IBV_MTU_4096 => PathMtu::Mtu4096,
        _ => return None,
    })
}

fn address_path(ah: &abi::ibv_ah_attr) -> Option<AddressPath> {
    if ah.is_global == 0 {
        // RoCE needs a GRH: the kernel refuses a path without one (`ib_resolve_eth_dmac`).
        return None;
    }
    // SAFETY: `raw` covers the whole 16-byte union.
    let rgid = unsafe { ah.grh.dgid.raw };
    let mut p = AddressPath::to_gid(rgid);
    p.sgid_index = ah.grh.sgid_index;
    p.hop_limit = if ah.grh.hop_limit == 0 {
        64
    } else {
        ah.grh.hop_limit
    };
    p.traffic_class = ah.grh.traffic_class;
    // The path holds 20 bits of flow label; the kernel takes any 32-bit value (`mlx5_set_path`
    // does not check it) and rdma-core's `mlx5_create_ah` masks it to `IB_GRH_FLOWLABEL_MASK`.
    // UCX passes `~0` on RoCE (`uct_ib_iface_fill_ah_attr_from_gid_lid`): keep the low bits.
    p.flow_label = ah.grh.flow_label & abi::IB_GRH_FLOWLABEL_MASK;
    p.sl = ah.sl;
    Some(p)
}

/// One `ibv_modify_qp` against the driver: the edge from the QP's state to the target.
fn modify(q: &mut DriverQp, a: &ibv_qp_attr, mask: u32, log_msg: u8) -> Result<(), c_int> {
    let has = |bit: u32| mask & bit != 0;
    let cur = q.state();
    let target = if has(abi::IBV_QP_STATE) {
        a.qp_state
    } else {
        ibv_state(cur)
    };
    let ty = q.qp_type();
    let opt_access = has(abi::IBV_QP_ACCESS_FLAGS).then(|| access_of(a.qp_access_flags));
    let opt_rnr = has(abi::IBV_QP_MIN_RNR_TIMER).then_some(a.min_rnr_timer);
    let opt_qkey = has(abi::IBV_QP_QKEY).then_some(a.qkey);
    let r = match (ibv_state(cur), target) {
        (_, abi::IBV_QPS_RESET) => q.reset(),
        (_, abi::IBV_QPS_ERR) => q.to_error(),
        (abi::IBV_QPS_RESET, abi::IBV_QPS_INIT) => q.rst2init(&Rst2Init {
            port: if has(abi::IBV_QP_PORT) { a.port_num } else { 1 },
            pkey_index: a.pkey_index,
            access: opt_access.unwrap_or_default(),
            qkey: a.qkey,
        }),
        (abi::IBV_QPS_INIT, abi::IBV_QPS_RTR) => {
            let mut r = if ty == QpType::Ud {
                Init2Rtr::ud()
            } else {
                let Some(path) = has(abi::IBV_QP_AV)
                    .then(|| address_path(&a.ah_attr))
                    .flatten()
                else {
                    return Err(libc::EINVAL);
                };
                let Some(mtu) = path_mtu(a.path_mtu) else {
                    return Err(libc::EINVAL);
                };
                let mut r = Init2Rtr::rc(a.dest_qp_num, a.rq_psn, path.rgid);
                r.path = path;
                r.mtu = mtu;
                r.log_max_dest_rd_atomic = log2_ceil(a.max_dest_rd_atomic);
                r.min_rnr_timer = a.min_rnr_timer;
                r
            };
            r.log_msg_max = log_msg;
            r.access = opt_access;
            r.qkey = opt_qkey;
            q.init2rtr(&r)
        }
        (abi::IBV_QPS_RTR, abi::IBV_QPS_RTS) => {
            let mut r = Rtr2Rts::new(a.sq_psn);
            if ty != QpType::Ud {
                r.timeout = a.timeout;
                r.retry_cnt = a.retry_cnt;
                r.rnr_retry = a.rnr_retry;
                r.log_max_rd_atomic = log2_ceil(a.max_rd_atomic);
            }
            r.min_rnr_timer = opt_rnr;
            r.access = opt_access;
            q.rtr2rts(&r)
        }
        (abi::IBV_QPS_RTS, abi::IBV_QPS_RTS) => q.rts2rts(&Rts2Rts {
            min_rnr_timer: opt_rnr,
            access: opt_access,
            qkey: opt_qkey,
        }),
        (abi::IBV_QPS_RTS, abi::IBV_QPS_SQD) => q.rts2sqd(),
        (
            from @ (abi::IBV_QPS_SQD | abi::IBV_QPS_SQE),
            to @ (abi::IBV_QPS_SQD | abi::IBV_QPS_RTS),
        ) => {
            let sq = SqAttrs {
                access: opt_access,
                min_rnr_timer: opt_rnr,
                qkey: opt_qkey,
                pkey_index: has(abi::IBV_QP_PKEY_INDEX).then_some(a.pkey_index),
            };
            match (from, to) {
                (abi::IBV_QPS_SQD, abi::IBV_QPS_SQD) => q.sqd2sqd(&sq),
                (abi::IBV_QPS_SQD, _) => q.sqd2rts(&sq),
                (_, abi::IBV_QPS_RTS) => q.sqe2rts(&sq),
                _ => return Err(libc::EINVAL),
            }
        }
        _ => return Err(libc::EINVAL),
    };
    r.map_err(|e| errno_of(&e))
}

/// Keeps the attributes `mask` names, for `ibv_query_qp`.
fn save(s: &mut ibv_qp_attr, a: &ibv_qp_attr, mask: u32) {
    let has = |bit: u32| mask & bit != 0;
    if has(abi::IBV_QP_PKEY_INDEX) {
        s.pkey_index = a.pkey_index;
    }
    if has(abi::IBV_QP_PORT) {
        s.port_num = a.port_num;
    }
    if has(abi::IBV_QP_ACCESS_FLAGS) {
        s.qp_access_flags = a.qp_access_flags;
    }
    if has(abi::IBV_QP_QKEY) {
        s.qkey = a.qkey;
    }
    if has(abi::IBV_QP_AV) {
        s.ah_attr = a.ah_attr;
    }
    if has(abi::IBV_QP_PATH_MTU) {
        s.path_mtu = a.path_mtu;
    }
    if has(abi::IBV_QP_DEST_QPN) {
        s.dest_qp_num = a.dest_qp_num;
    }
    if has(abi::IBV_QP_RQ_PSN) {
        s.rq_psn = a.rq_psn;
    }
    if has(abi::IBV_QP_MAX_DEST_RD_ATOMIC) {
        s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(abi::IBV_QP_MIN_RNR_TIMER) {
        s.min_rnr_timer = a.min_rnr_timer;
    }
    if has(abi::IBV_QP_SQ_PSN) {
        s.sq_psn = a.sq_psn;
    }
    if has(abi::IBV_QP_TIMEOUT) {
        s.timeout = a.timeout;
    }
    if has(abi::IBV_QP_RETRY_CNT) {
        s.retry_cnt = a.retry_cnt;
    }
    if has(abi::IBV_QP_RNR_RETRY) {
        s.rnr_retry = a.rnr_retry;
    }
    if has(abi::IBV_QP_MAX_QP_RD_ATOMIC) {
        s.max_rd_atomic = a.max_rd_atomic;
    }
}

/// `ibv_modify_qp`: 0 or an errno (EINVAL for an edge or attribute the state machine
/// refuses).
///
/// # Safety
/// `qp` from `ibv_create_qp*`; `attr` readable.
#[unsafe(export_name = "__bypass_ibv_modify_qp")]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let (q, a) = unsafe { (Qp::from_ibv(qp), &*attr) };
        let mask = mask as u32;
        let log_msg = q.context().open.hca.caps().log_max_msg;
        let mut g = q.inner.lock();
        let Some(dq) = g.as_mut() else {
            return libc::EINVAL;
        };
        if let Err(e) = modify(dq, a, mask, log_msg) {
            return e;
        }
        let state = ibv_state(dq.state());
        drop(g);
        save(
            &mut q.saved.lock().unwrap_or_else(PoisonError::into_inner),
            a,
            mask,
        );
        // SAFETY: `state` is a program-visible field of this live QP, reached through its
        // cell's raw place; libibverbs writes it in `ibv_modify_qp` the same way.
        let p = unsafe { &raw mut (*q.base()).state };
        // SAFETY: as above.
        unsafe { p.write_volatile(state) };
        0
    })
}

/// `ibv_query_qp`: the attributes set so far, the current state and the caps. 0 or an
/// errno.
///
/// # Safety
/// `qp` from `ibv_create_qp*`; `attr` and `init_attr` writable.
#[unsafe(export_name = "__bypass_ibv_query_qp")]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let _ = mask;
    guard(libc::EIO, || {
        if qp.is_null() || attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract.
        let q = unsafe { Qp::from_ibv(qp) };
        let state = match q.inner.lock().as_ref() {
            Some(d) => ibv_state(d.state()),
            None => return libc::EINVAL,
        };
        let mut s = *q.saved.lock().unwrap_or_else(PoisonError::into_inner);
        s.qp_state = state;
        s.cur_qp_state = state;
        s.sq_draining = 0;
        let b = q.base();
        // SAFETY: these fields are set at creation and never written again; each is read
        // through the cell's raw place (no reference to the struct the program writes).
        let init = unsafe {
            ibv_qp_init_attr {
                qp_context: (*b).qp_context,
                send_cq: (*b).send_cq,
                recv_cq: (*b).recv_cq,
                srq: (*b).srq,
                cap: s.cap,
                qp_type: (*b).qp_type,
                sq_sig_all: 0,
            }
        };
        // SAFETY: both are writable (the caller's contract).
        unsafe {
            attr.write(s);
            init_attr.write(init);
        }
        0
    })
}
