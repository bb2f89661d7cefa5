//! QP ring sizing: the send WQE a [`QpCaps`] needs, the SQ and RQ it makes, and the limits a
//! QP type can be created with ([`SendLimits`], [`QpGeometry::max_send_wr`]).
//!
//! Owns: [`QpGeometry`], [`SendLimits`] and the checks CREATE_QP's sizes pass before any
//! arithmetic on them (every cap is a caller's `u32`, so each is bounded first, then sized
//! in `u64`). The same functions give the limits `devinfo` prints and the ones the errors
//! name, so that what is shown is what a QP accepts. Must not: build command inputs
//! (`qp_attr.rs`) or own device objects (`qp.rs`).
//!
//! Sources: rdma-core `providers/mlx5/verbs.c` (`sq_overhead`, `mlx5_calc_send_wqe`,
//! `mlx5_calc_sq_size`, `mlx5_calc_rq_size`: the WQE is ctrl + the type's segments + the
//! larger of the data segments and the inline segment, rounded to a 64-byte WQEBB; the
//! inline a QP reports is what that WQE leaves); the kernel's
//! `drivers/infiniband/hw/mlx5/qp.c` (`calc_send_wqe`, `calc_sq_size`, `set_rq_size`); PRM
//! `wqe_ctrl_seg.ds` (6 bits: at most 63 16-byte segments per WQE).

use crate::error::{DriverError, Result};
use crate::qp_attr::{QpCaps, QpType};

/// The largest send WQE in bytes: the ctrl segment's 6-bit DS count allows 63 16-byte
/// segments (1008 bytes), and a WQE is a whole number of 64-byte WQEBBs.
pub const MAX_SEND_WQE_BYTES: usize = (63 * 16) / 64 * 64;

/// The deepest SQ in WQEBBs is `2^min(log_max_qp_sz, SQ_LOG_CAP)` (the kernel's
/// `calc_sq_size` refuses larger `log_sq_size` for user QPs the same way).
const SQ_LOG_CAP: u8 = 15;

/// The largest receive stride: `qpc.log_rq_stride` is 3 bits of 16-byte units beyond 16.
const MAX_LOG_RQ_STRIDE: u8 = 7;

/// ctrl + (UD: datagram 48 | RC: raddr 16 + atomic 16 | UC: raddr 16) (rdma-core
/// `sq_overhead`).
const fn overhead(qp_type: QpType) -> usize {
    16 + match qp_type {
        QpType::Ud => 48,
        QpType::Rc => 32,
        QpType::Uc => 16,
    }
}

/// The most SGEs and inline bytes one send WQE of a QP type holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendLimits {
    /// The largest `max_send_sge`.
    pub max_send_sge: u32,
    /// The largest `max_inline_data` (data + the 4-byte inline header fill the WQE).
    pub max_inline_data: u32,
}

impl SendLimits {
    /// The limits of a `qp_type` send WQE of at most `wqe_bytes` bytes (rounded down to
    /// WQEBBs and to [`MAX_SEND_WQE_BYTES`]).
    pub const fn new(qp_type: QpType, wqe_bytes: usize) -> Self {
        let cap = if wqe_bytes < MAX_SEND_WQE_BYTES {
            wqe_bytes / 64 * 64
        } else {
            MAX_SEND_WQE_BYTES
        };
        let data = cap.saturating_sub(overhead(qp_type));
        Self {
            max_send_sge: (data / 16) as u32,
            max_inline_data: data.saturating_sub(4) as u32,
        }
    }

    /// The limits [`QpGeometry::new`] enforces for `qp_type`.
    pub const fn of(qp_type: QpType) -> Self {
        Self::new(qp_type, MAX_SEND_WQE_BYTES)
    }
}

/// The ring geometry [`QpCaps`] ask for, as rdma-core `mlx5_calc_sq_size` /
/// `mlx5_calc_rq_size` (`providers/mlx5/verbs.c`) computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpGeometry {
    /// log2 of the SQ's WQEBBs.
    pub log_sq_size: u8,
    /// log2 of the RQ's WQEs.
    pub log_rq_size: u8,
    /// log2 of the RQ stride in 16-byte units (`qpc.log_rq_stride`).
    pub log_rq_stride: u8,
    /// Largest send WQE in bytes.
    pub max_wqe_bytes: usize,
    /// SGEs a receive WQE holds.
    pub recv_sge: usize,
    /// Inline bytes a send may carry.
    pub max_inline: usize,
}

fn too_large(qp_type: QpType, cap: &'static str, asked: u32, max: u64) -> DriverError {
    DriverError::QpCapTooLarge {
        qp_type: match qp_type {
            QpType::Rc => "RC",
            QpType::Ud => "UD",
            QpType::Uc => "UC",
        },
        cap,
        asked,
        max,
    }
}

impl QpGeometry {
    /// The largest send WQE `caps` need on a `qp_type` QP, in bytes (unbounded).
    fn send_wqe_bytes(qp_type: QpType, caps: &QpCaps) -> u64 {
        let sges = u64::from(caps.max_send_sge) * 16;
        let inline = (u64::from(caps.max_inline_data) + 4).next_multiple_of(16);
        (overhead(qp_type) as u64 + sges.max(inline)).next_multiple_of(64)
    }

    /// The most send WRs of `caps`' WQE size an SQ holds within `log_max_qp_sz` (0 when
    /// the WQE itself is too large).
    pub fn max_send_wr(qp_type: QpType, caps: &QpCaps, log_max_qp_sz: u8) -> u32 {
        let wqe = Self::send_wqe_bytes(qp_type, caps);
        if wqe > MAX_SEND_WQE_BYTES as u64 {
            return 0;
        }
        let sq_bytes = 64u64 << log_max_qp_sz.min(SQ_LOG_CAP);
        u32::try_from(sq_bytes / wqe).unwrap_or(u32::MAX)
    }

    /// Sizes the rings for `caps` on a QP of type `qp_type`, within the device's
    /// `log_max_qp_sz` and the largest send WQE ([`MAX_SEND_WQE_BYTES`]).
    ///
    /// Errors: [`DriverError::QpCapTooLarge`] naming the first cap beyond what the QP may
    /// hold and its largest value; nothing is allocated.
    pub fn new(qp_type: QpType, caps: &QpCaps, log_max_qp_sz: u8) -> Result<Self> {
        let lim = SendLimits::of(qp_type);
        if caps.max_send_sge > lim.max_send_sge {
            let max = lim.max_send_sge.into();
            return Err(too_large(qp_type, "max_send_sge", caps.max_send_sge, max));
        }
        if caps.max_inline_data > lim.max_inline_data {
            let max = lim.max_inline_data.into();
            return Err(too_large(
                qp_type,
                "max_inline_data",
                caps.max_inline_data,
                max,
            ));
        }
        let max_wr = Self::max_send_wr(qp_type, caps, log_max_qp_sz);
        if caps.max_send_wr > max_wr {
            return Err(too_large(
                qp_type,
                "max_send_wr",
                caps.max_send_wr,
                max_wr.into(),
            ));
        }
        let max_rq = 1u64 << log_max_qp_sz.min(31);
        if u64::from(caps.max_recv_wr) > max_rq {
            return Err(too_large(qp_type, "max_recv_wr", caps.max_recv_wr, max_rq));
        }
        let max_rsge = 1u64 << MAX_LOG_RQ_STRIDE;
        if u64::from(caps.max_recv_sge) > max_rsge {
            return Err(too_large(
                qp_type,
                "max_recv_sge",
                caps.max_recv_sge,
                max_rsge,
            ));
        }
        // Every value below is bounded by the checks above: no step can overflow.
        let max_wqe_bytes = Self::send_wqe_bytes(qp_type, caps) as usize;
        let sq_bytes =
            (max_wqe_bytes as u64 * u64::from(caps.max_send_wr.max(1))).next_power_of_two();
        let log_sq_size = (sq_bytes / 64).trailing_zeros() as u8;
        let recv_sge = u64::from(caps.max_recv_sge.max(1)).next_power_of_two();
        let log_rq_stride = recv_sge.trailing_zeros() as u8;
        let log_rq_size = u64::from(caps.max_recv_wr.max(1))
            .next_power_of_two()
            .trailing_zeros() as u8;
        Ok(Self {
            log_sq_size,
            log_rq_size,
            log_rq_stride,
            max_wqe_bytes,
            recv_sge: recv_sge as usize,
            max_inline: caps.max_inline_data as usize,
        })
    }

    /// Bytes of the RQ (it comes first in the WQ buffer).
    pub fn rq_bytes(&self) -> usize {
        (1usize << self.log_rq_size) << (self.log_rq_stride + 4)
    }

    /// Bytes of the SQ.
    pub fn sq_bytes(&self) -> usize {
        64usize << self.log_sq_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_follows_the_caps() {
        let g = QpGeometry::new(QpType::Rc, &QpCaps::default(), 15).unwrap();
        // ctrl + raddr + atomic (48) + max(4 SGEs, 64 inline + 4 -> 80) = 128 bytes per WQE.
        assert_eq!(g.max_wqe_bytes, 128);
        assert_eq!(g.sq_bytes(), 128 * 64);
        assert_eq!((g.log_rq_size, g.log_rq_stride, g.recv_sge), (6, 2, 4));
        assert_eq!(g.rq_bytes(), 64 * 64);
        let huge = QpCaps {
            max_send_sge: 100,
            ..QpCaps::default()
        };
        assert!(QpGeometry::new(QpType::Rc, &huge, 15).is_err());
        let deep = QpCaps {
            max_send_wr: 1 << 20,
            ..QpCaps::default()
        };
        assert!(QpGeometry::new(QpType::Rc, &deep, 15).is_err());
    }

    #[test]
    fn limits_differ_by_type_and_are_exactly_what_is_accepted() {
        // RC: 960 - 48 = 912 data bytes; UD: 960 - 64 = 896; UC: 960 - 32 = 928.
        let want = [
            (QpType::Rc, 57, 908),
            (QpType::Ud, 56, 892),
            (QpType::Uc, 58, 924),
        ];
        for (t, sge, inline) in want {
            let lim = SendLimits::of(t);
            assert_eq!((lim.max_send_sge, lim.max_inline_data), (sge, inline));
            let at = |max_send_sge, max_inline_data| QpCaps {
                max_send_sge,
                max_inline_data,
                ..QpCaps::default()
            };
            assert!(QpGeometry::new(t, &at(sge, 0), 15).is_ok());
            assert!(QpGeometry::new(t, &at(0, inline), 15).is_ok());
            let e = QpGeometry::new(t, &at(sge + 1, 0), 15).unwrap_err();
            assert!(e.to_string().contains(&format!("at most {sge}")), "{e}");
            let e = QpGeometry::new(t, &at(0, inline + 1), 15).unwrap_err();
            assert!(e.to_string().contains(&format!("at most {inline}")), "{e}");
        }
    }

    #[test]
    fn caps_at_u32_max_are_refused_by_name_not_overflowed() {
        let caps = |f: fn(&mut QpCaps)| {
            let mut c = QpCaps::default();
            f(&mut c);
            c
        };
        type Set = fn(&mut QpCaps);
        let cases: [(Set, &str); 5] = [
            (|c| c.max_recv_wr = u32::MAX, "max_recv_wr"),
            (|c| c.max_send_wr = u32::MAX, "max_send_wr"),
            (|c| c.max_send_sge = u32::MAX, "max_send_sge"),
            (|c| c.max_recv_sge = u32::MAX, "max_recv_sge"),
            (|c| c.max_inline_data = u32::MAX, "max_inline_data"),
        ];
        for (set, name) in cases {
            let e = QpGeometry::new(QpType::Rc, &caps(set), 15).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(name) && text.contains("4294967295"), "{text}");
        }
    }

    #[test]
    fn max_send_wr_is_the_deepest_sq_accepted() {
        let c = QpCaps::default();
        let max = QpGeometry::max_send_wr(QpType::Rc, &c, 15);
        // 2^15 WQEBBs of 64 bytes over 128-byte WQEs.
        assert_eq!(max, 16384);
        let at = |max_send_wr| QpCaps { max_send_wr, ..c };
        assert!(QpGeometry::new(QpType::Rc, &at(max), 15).is_ok());
        let e = QpGeometry::new(QpType::Rc, &at(max + 1), 15).unwrap_err();
        assert!(e.to_string().contains("at most 16384"), "{e}");
    }
}
