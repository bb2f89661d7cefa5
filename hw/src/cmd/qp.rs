//! Queue pair commands: the QP context (`qpc`) and address path (`ads`), CREATE_QP / QUERY_QP /
//! DESTROY_QP, the modify family (RST2INIT … 2RST), QP states, service types, path MTU, the
//! optional-parameter mask, the state-transition table and WQ buffer sizes.
//!
//! Sources:
//! - layouts: Linux `include/linux/mlx5/mlx5_ifc.h` (`mlx5_ifc_qpc_bits`, `mlx5_ifc_ads_bits`,
//!   `mlx5_ifc_create_qp_in_bits`, `mlx5_ifc_rst2init_qp_in_bits`, …; version pinned by
//!   `tests/data/mlx5_ifc_fields.tsv`) and its `MLX5_QPC_*` enums;
//! - states, service types, opt_param_mask bits: Linux `include/linux/mlx5/qp.h`
//!   (`enum mlx5_qp_state`, `MLX5_QP_ST_*`, `enum mlx5_qp_optpar`);
//! - transitions: Linux `drivers/infiniband/hw/mlx5/qp.c` (`__mlx5_ib_modify_qp`, `optab`);
//! - the fields a minimal RC QP sets: rdma-core `tests/mlx5_base.py` (`Mlx5DevxRcResources`).
//!
//! Owns: the QP command layouts and the pure functions over QP states. Must not: keep QP state
//! (the driver's `qp` and the sim's firmware do, both through [`transition`]).

use core::fmt;

use crate::cmd::Opcode;
use crate::cmd::list::{be64_list, bytes_get, bytes_set, with_be64_list};
use crate::error::{Error, Result};

// ---------------------------------------------------------------------------------------------
// States, service types, MTU, PM state
// ---------------------------------------------------------------------------------------------

/// A QP state as `qpc.state` encodes it (Linux `include/linux/mlx5/qp.h` `enum mlx5_qp_state`).
///
/// Note: `mlx5_ifc.h`'s own `MLX5_QPC_STATE_*` enum lists SQD as 0x7 (the value `qp.h` calls
/// `SQ_DRAINING`); `mlx5_ib`'s `to_ib_qp_state` maps both 5 and 7 to `IB_QPS_SQD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum QpState {
    /// `MLX5_QP_STATE_RST`: reset.
    Rst = 0,
    /// `MLX5_QP_STATE_INIT`.
    Init = 1,
    /// `MLX5_QP_STATE_RTR`: ready to receive.
    Rtr = 2,
    /// `MLX5_QP_STATE_RTS`: ready to send.
    Rts = 3,
    /// `MLX5_QP_STATE_SQER`: send queue error (UD/UC; recover with SQERR2RTS).
    Sqer = 4,
    /// `MLX5_QP_STATE_SQD`: send queue drained.
    Sqd = 5,
    /// `MLX5_QP_STATE_ERR`: error; only 2RST / 2ERR leave it.
    Err = 6,
    /// `MLX5_QP_STATE_SQ_DRAINING`: draining towards SQD.
    SqDraining = 7,
    /// `MLX5_QP_STATE_SUSPENDED`.
    Suspended = 9,
}

impl QpState {
    /// Every state, in numeric order.
    pub const ALL: [Self; 9] = [
        Self::Rst,
        Self::Init,
        Self::Rtr,
        Self::Rts,
        Self::Sqer,
        Self::Sqd,
        Self::Err,
        Self::SqDraining,
        Self::Suspended,
    ];

    /// The states the kernel's modify table (`optab`) has rows for: 2ERR and 2RST are allowed
    /// from each of them.
    pub const MODIFIABLE: [Self; 7] = [
        Self::Rst,
        Self::Init,
        Self::Rtr,
        Self::Rts,
        Self::Sqd,
        Self::Sqer,
        Self::Err,
    ];

    /// The name without the `MLX5_QP_STATE_` prefix.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rst => "RST",
            Self::Init => "INIT",
            Self::Rtr => "RTR",
            Self::Rts => "RTS",
            Self::Sqer => "SQER",
            Self::Sqd => "SQD",
            Self::Err => "ERR",
            Self::SqDraining => "SQ_DRAINING",
            Self::Suspended => "SUSPENDED",
        }
    }
}

impl TryFrom<u8> for QpState {
    type Error = Error;

    fn try_from(v: u8) -> Result<Self> {
        Ok(match v {
            0 => Self::Rst,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqer,
            5 => Self::Sqd,
            6 => Self::Err,
            7 => Self::SqDraining,
            9 => Self::Suspended,
            _ => {
                return Err(Error::Malformed {
                    what: "qpc.state",
                    reason: "not a QP state (0..=7 or 9)",
                });
            }
        })
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QP service types, the value of `qpc.st` (Linux `include/linux/mlx5/qp.h` `MLX5_QP_ST_*`).
pub mod service_type {
    /// `MLX5_QP_ST_RC`: reliable connected.
    pub const RC: u8 = 0x0;
    /// `MLX5_QP_ST_UC`: unreliable connected.
    pub const UC: u8 = 0x1;
    /// `MLX5_QP_ST_UD`: unreliable datagram.
    pub const UD: u8 = 0x2;
    /// `MLX5_QP_ST_XRC`: extended reliable connected.
    pub const XRC: u8 = 0x3;
    /// `MLX5_QP_ST_MLX`.
    pub const MLX: u8 = 0x4;
    /// `MLX5_QP_ST_DCI`: dynamically connected initiator.
    pub const DCI: u8 = 0x5;
    /// `MLX5_QP_ST_DCT`: dynamically connected target.
    pub const DCT: u8 = 0x6;
    /// `MLX5_QP_ST_QP0`: subnet management QP.
    pub const QP0: u8 = 0x7;
    /// `MLX5_QP_ST_QP1`: general services QP.
    pub const QP1: u8 = 0x8;
    /// `MLX5_QP_ST_RAW_ETHERTYPE`.
    pub const RAW_ETHERTYPE: u8 = 0x9;
    /// `MLX5_QP_ST_RAW_IPV6`.
    pub const RAW_IPV6: u8 = 0xa;
    /// `MLX5_QP_ST_SNIFFER`.
    pub const SNIFFER: u8 = 0xb;
    /// `MLX5_QP_ST_REG_UMR`.
    pub const REG_UMR: u8 = 0xc;
    /// `MLX5_QP_ST_PTP_1588`.
    pub const PTP_1588: u8 = 0xd;
    /// `MLX5_QP_ST_SYNC_UMR`.
    pub const SYNC_UMR: u8 = 0xe;
}

/// `qpc.pm_state` (path migration state) values (mlx5_ifc.h `MLX5_QPC_PM_STATE_*`).
pub mod pm_state {
    /// `MLX5_QPC_PM_STATE_ARMED`.
    pub const ARMED: u8 = 0x0;
    /// `MLX5_QPC_PM_STATE_REARM`.
    pub const REARM: u8 = 0x1;
    /// `MLX5_QPC_PM_STATE_RESERVED`.
    pub const RESERVED: u8 = 0x2;
    /// `MLX5_QPC_PM_STATE_MIGRATED`: no alternate path (what rdma-core's tests set).
    pub const MIGRATED: u8 = 0x3;
}

/// `qpc.atomic_mode` values (mlx5_ifc.h `MLX5_QPC_ATOMIC_MODE_*`).
pub mod atomic_mode {
    /// `MLX5_QPC_ATOMIC_MODE_IB_SPEC`.
    pub const IB_SPEC: u8 = 0x1;
    /// `MLX5_QPC_ATOMIC_MODE_ONLY_8B`.
    pub const ONLY_8B: u8 = 0x2;
    /// `MLX5_QPC_ATOMIC_MODE_UP_TO_8B`.
    pub const UP_TO_8B: u8 = 0x3;
    /// `MLX5_QPC_ATOMIC_MODE_UP_TO_16B`.
    pub const UP_TO_16B: u8 = 0x4;
}

/// `qpc.ts_format` values (mlx5_ifc.h `MLX5_TIMESTAMP_FORMAT_*`).
pub mod ts_format {
    /// `MLX5_TIMESTAMP_FORMAT_FREE_RUNNING`.
    pub const FREE_RUNNING: u8 = 0x0;
    /// `MLX5_TIMESTAMP_FORMAT_DEFAULT` (rdma-core's tests set this).
    pub const DEFAULT: u8 = 0x1;
    /// `MLX5_TIMESTAMP_FORMAT_REAL_TIME`.
    pub const REAL_TIME: u8 = 0x2;
}

/// The path MTU, as `qpc.mtu` encodes it (mlx5_ifc.h `MLX5_QPC_MTU_*`, = IBTA `enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PathMtu {
    /// `MLX5_QPC_MTU_256_BYTES`.
    Mtu256 = 1,
    /// `MLX5_QPC_MTU_512_BYTES`.
    Mtu512 = 2,
    /// `MLX5_QPC_MTU_1K_BYTES`.
    Mtu1024 = 3,
    /// `MLX5_QPC_MTU_2K_BYTES`.
    Mtu2048 = 4,
    /// `MLX5_QPC_MTU_4K_BYTES`.
    Mtu4096 = 5,
}

impl PathMtu {
    /// The MTU in bytes (256 << (code - 1)).
    pub const fn bytes(self) -> u32 {
        256 << (self as u8 - 1)
    }

    /// The MTU for a size in bytes (exactly 256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Self::Mtu256),
            512 => Some(Self::Mtu512),
            1024 => Some(Self::Mtu1024),
            2048 => Some(Self::Mtu2048),
            4096 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// The `qpc.mtu` code.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

impl TryFrom<u8> for PathMtu {
    type Error = Error;

    fn try_from(v: u8) -> Result<Self> {
        Ok(match v {
            1 => Self::Mtu256,
            2 => Self::Mtu512,
            3 => Self::Mtu1024,
            4 => Self::Mtu2048,
            5 => Self::Mtu4096,
            _ => {
                return Err(Error::Malformed {
                    what: "qpc.mtu",
                    reason: "not a path MTU code (1..=5)",
                });
            }
        })
    }
}

bitflags::bitflags! {
    /// `opt_param_mask` of the modify commands: which optional `qpc` fields the firmware should
    /// take (Linux `include/linux/mlx5/qp.h` `enum mlx5_qp_optpar`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OptParamMask: u32 {
        /// `MLX5_QP_OPTPAR_ALT_ADDR_PATH`.
        const ALT_ADDR_PATH = 1 << 0;
        /// `MLX5_QP_OPTPAR_RRE`: remote read enable.
        const RRE = 1 << 1;
        /// `MLX5_QP_OPTPAR_RAE`: remote atomic enable.
        const RAE = 1 << 2;
        /// `MLX5_QP_OPTPAR_RWE`: remote write enable.
        const RWE = 1 << 3;
        /// `MLX5_QP_OPTPAR_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `MLX5_QP_OPTPAR_Q_KEY`.
        const Q_KEY = 1 << 5;
        /// `MLX5_QP_OPTPAR_RNR_TIMEOUT` (`min_rnr_nak`).
        const RNR_TIMEOUT = 1 << 6;
        /// `MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH`.
        const PRIMARY_ADDR_PATH = 1 << 7;
        /// `MLX5_QP_OPTPAR_SRA_MAX`.
        const SRA_MAX = 1 << 8;
        /// `MLX5_QP_OPTPAR_RRA_MAX`.
        const RRA_MAX = 1 << 9;
        /// `MLX5_QP_OPTPAR_PM_STATE`.
        const PM_STATE = 1 << 10;
        /// `MLX5_QP_OPTPAR_RETRY_COUNT`.
        const RETRY_COUNT = 1 << 12;
        /// `MLX5_QP_OPTPAR_RNR_RETRY`.
        const RNR_RETRY = 1 << 13;
        /// `MLX5_QP_OPTPAR_ACK_TIMEOUT`.
        const ACK_TIMEOUT = 1 << 14;
        /// `MLX5_QP_OPTPAR_LAG_TX_AFF`.
        const LAG_TX_AFF = 1 << 15;
        /// `MLX5_QP_OPTPAR_PRI_PORT`.
        const PRI_PORT = 1 << 16;
        /// `MLX5_QP_OPTPAR_SRQN`.
        const SRQN = 1 << 18;
        /// `MLX5_QP_OPTPAR_CQN_RCV`.
        const CQN_RCV = 1 << 19;
        /// `MLX5_QP_OPTPAR_DC_HS`.
        const DC_HS = 1 << 20;
        /// `MLX5_QP_OPTPAR_DC_KEY`.
        const DC_KEY = 1 << 21;
        /// `MLX5_QP_OPTPAR_COUNTER_SET_ID`.
        const COUNTER_SET_ID = 1 << 25;
    }
}

// ---------------------------------------------------------------------------------------------
// Transitions
// ---------------------------------------------------------------------------------------------

const FROM_RST: &[QpState] = &[QpState::Rst];
const FROM_INIT: &[QpState] = &[QpState::Init];
const FROM_RTR: &[QpState] = &[QpState::Rtr];
const FROM_RTS: &[QpState] = &[QpState::Rts];
const FROM_SQER: &[QpState] = &[QpState::Sqer];
const FROM_SQD: &[QpState] = &[QpState::Sqd];
/// SQD→RTS may also cancel a drain still in progress (IBTA vol. 1 §10.3.1: the SQ Drain state
/// has the two sub-states draining and drained, and the RTS transition is allowed from both).
const FROM_SQD_ANY: &[QpState] = &[QpState::Sqd, QpState::SqDraining];
const FROM_ANY: &[QpState] = &QpState::MODIFIABLE;

/// What a modify opcode does to a QP: the states it may be applied in, and the state it leaves
/// the QP in. `None` for an opcode that is not a QP state transition.
///
/// The table is the kernel's `optab` in `drivers/infiniband/hw/mlx5/qp.c`
/// (`__mlx5_ib_modify_qp`), read by opcode: RST2INIT RST→INIT, INIT2INIT INIT→INIT,
/// INIT2RTR INIT→RTR, RTR2RTS RTR→RTS, RTS2RTS RTS→RTS, SQERR2RTS SQER→RTS, SQD_RTS SQD→RTS,
/// and 2ERR / 2RST from every state of the table (RST, INIT, RTR, RTS, SQD, SQER, ERR); plus
/// the first mlx5 driver's RTS2SQD RTS→SQD and SQD2SQD SQD→SQD (Linux 3.11
/// `mlx5_core_qp_modify`; see [`Opcode`]). RTS2SQD leaves the QP in SQ_DRAINING while the SQ
/// still has messages in progress (the device moves it on to SQD); SQD2SQD needs the drain
/// done, SQD_RTS does not.
pub const fn transition(op: Opcode) -> Option<(&'static [QpState], QpState)> {
    Some(match op {
        Opcode::RST2INIT_QP => (FROM_RST, QpState::Init),
        Opcode::INIT2INIT_QP => (FROM_INIT, QpState::Init),
        Opcode::INIT2RTR_QP => (FROM_INIT, QpState::Rtr),
        Opcode::RTR2RTS_QP => (FROM_RTR, QpState::Rts),
        Opcode::RTS2RTS_QP => (FROM_RTS, QpState::Rts),
        Opcode::SQERR2RTS_QP => (FROM_SQER, QpState::Rts),
        Opcode::SQD_RTS_QP => (FROM_SQD_ANY, QpState::Rts),
        Opcode::RTS2SQD_QP => (FROM_RTS, QpState::Sqd),
        Opcode::SQD2SQD_QP => (FROM_SQD, QpState::Sqd),
        Opcode::QP_2ERR => (FROM_ANY, QpState::Err),
        Opcode::QP_2RST => (FROM_ANY, QpState::Rst),
        _ => return None,
    })
}

/// The state `op` leaves a QP in if applied in state `from`, or `None` if the kernel table does
/// not allow it (the firmware answers such a command with BAD_QP_STATE).
pub fn apply(op: Opcode, from: QpState) -> Option<QpState> {
    let (froms, to) = transition(op)?;
    froms.contains(&from).then_some(to)
}

/// The modify opcode that takes a QP from `from` to `to` (the kernel's `optab[from][to]`), or
/// `None` if there is none.
pub fn modify_opcode(from: QpState, to: QpState) -> Option<Opcode> {
    MODIFY_OPCODES
        .iter()
        .copied()
        .find(|&op| apply(op, from) == Some(to))
}

/// Every QP modify opcode, in the order [`modify_opcode`] prefers them.
pub const MODIFY_OPCODES: [Opcode; 11] = [
    Opcode::RST2INIT_QP,
    Opcode::INIT2INIT_QP,
    Opcode::INIT2RTR_QP,
    Opcode::RTR2RTS_QP,
    Opcode::RTS2RTS_QP,
    Opcode::SQERR2RTS_QP,
    Opcode::SQD_RTS_QP,
    Opcode::RTS2SQD_QP,
    Opcode::SQD2SQD_QP,
    Opcode::QP_2ERR,
    Opcode::QP_2RST,
];

/// The input length of a modify opcode: 0x110 for those that carry a `qpc`, 0x10 for 2ERR and
/// 2RST, `None` for anything else. Every modify output is 0x10 bytes.
pub const fn modify_qp_in_len(op: Opcode) -> Option<usize> {
    match op {
        Opcode::QP_2ERR | Opcode::QP_2RST => Some(0x10),
        _ => match transition(op) {
            Some(_) => Some(0x110),
            None => None,
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Buffer sizes
// ---------------------------------------------------------------------------------------------

/// Bytes of one send WQE basic block (`MLX5_SEND_WQE_BB`, rdma-core `mlx5dv.h`).
pub const SQ_WQEBB_BYTES: u64 = 64;

/// The RQ stride in bytes: `16 << log_rq_stride` (qpc.log_rq_stride).
pub const fn rq_stride_bytes(log_rq_stride: u8) -> u64 {
    16u64 << (log_rq_stride & 0x7)
}

/// The RQ size in bytes: `(1 << log_rq_size) * (16 << log_rq_stride)`; `None` on overflow.
pub fn rq_buf_bytes(log_rq_size: u8, log_rq_stride: u8) -> Option<u64> {
    let n = 1u64.checked_shl(u32::from(log_rq_size))?;
    n.checked_mul(16u64.checked_shl(u32::from(log_rq_stride))?)
}

/// The SQ size in bytes: `(1 << log_sq_size) * 64`; `None` on overflow.
pub fn sq_buf_bytes(log_sq_size: u8) -> Option<u64> {
    1u64.checked_shl(u32::from(log_sq_size))?
        .checked_mul(SQ_WQEBB_BYTES)
}

/// The whole WQ buffer: the RQ at offset 0, the SQ right after it (rdma-core's tests:
/// `sq.offset = rq.wq_size`). Returns `(sq_offset, total)`; with `no_sq` pass `log_sq_size =
/// None`.
pub fn wq_buf_layout(
    log_rq_size: u8,
    log_rq_stride: u8,
    log_sq_size: Option<u8>,
) -> Option<(u64, u64)> {
    let rq = rq_buf_bytes(log_rq_size, log_rq_stride)?;
    let sq = match log_sq_size {
        Some(l) => sq_buf_bytes(l)?,
        None => 0,
    };
    Some((rq, rq.checked_add(sq)?))
}

// ---------------------------------------------------------------------------------------------
// ads
// ---------------------------------------------------------------------------------------------

/// Byte offset of `ads.rgid_rip` (bit 0x80, 16 bytes).
pub const ADS_RGID_RIP_OFFSET: usize = 0x10;

crate::prm_layout! {
    /// An address path (`mlx5_ifc_ads_bits`, 44 bytes): where the QP sends (primary and
    /// alternate path in the `qpc`). The 128-bit `rgid_rip` has byte accessors
    /// ([`Ads::rgid_rip`]); so has the MAC split over `rmac_47_32`/`rmac_31_0` ([`Ads::rmac`]).
    pub struct Ads("ads", 0x2c) {
        /// Force loopback.
        fl, set_fl: 0x0, 1;
        /// Free adaptive routing.
        free_ar, set_free_ar: 0x1, 1;
        /// P_Key index.
        pkey_index, set_pkey_index: 0x10, 16;
        /// A GRH is present (always for RoCE).
        grh, set_grh: 0x28, 1;
        /// Source LID path bits (IB).
        mlid, set_mlid: 0x29, 7;
        /// Remote LID (IB).
        rlid, set_rlid: 0x30, 16;
        /// Local ACK timeout: 4.096 µs × 2^ack_timeout (RTR2RTS; rdma-core's tests use 14).
        ack_timeout, set_ack_timeout: 0x40, 5;
        /// Source GID index (RoCE).
        src_addr_index, set_src_addr_index: 0x48, 8;
        /// Static rate (`MLX5_ADS_STAT_RATE_*`; 0 = no limit).
        stat_rate, set_stat_rate: 0x54, 4;
        /// GRH hop limit / IP TTL.
        hop_limit, set_hop_limit: 0x58, 8;
        /// GRH traffic class.
        tclass, set_tclass: 0x64, 8;
        /// GRH flow label.
        flow_label, set_flow_label: 0x6c, 20;
        /// Force `dscp` from this path.
        f_dscp, set_f_dscp: 0x104, 1;
        /// Force `ecn` from this path.
        f_ecn, set_f_ecn: 0x105, 1;
        /// Force `eth_prio` from this path.
        f_eth_prio, set_f_eth_prio: 0x107, 1;
        /// IP ECN.
        ecn, set_ecn: 0x108, 2;
        /// IP DSCP.
        dscp, set_dscp: 0x10a, 6;
        /// RoCEv2 UDP source port.
        udp_sport, set_udp_sport: 0x110, 16;
        /// VLAN DEI/CFI.
        dei_cfi, set_dei_cfi: 0x120, 1;
        /// Ethernet priority (PCP).
        eth_prio, set_eth_prio: 0x121, 3;
        /// Service level.
        sl, set_sl: 0x124, 4;
        /// Port number (1-based).
        vhca_port_num, set_vhca_port_num: 0x128, 8;
        /// Remote MAC bits 47..32.
        rmac_47_32, set_rmac_47_32: 0x130, 16;
        /// Remote MAC bits 31..0.
        rmac_31_0, set_rmac_31_0: 0x140, 32;
    }
}

impl<T: AsRef<[u8]>> Ads<T> {
    /// `rgid_rip[16][0x8]`: the remote GID (IB) or IPv6 / IPv4-mapped address (RoCE), in wire
    /// order. A hand-written accessor because the field is wider than 64 bits.
    pub fn rgid_rip(&self) -> [u8; 16] {
        bytes_get(self.buf.as_ref(), ADS_RGID_RIP_OFFSET)
    }

    /// The remote MAC, `rmac_47_32 : rmac_31_0`, in wire order.
    pub fn rmac(&self) -> [u8; 6] {
        let hi = self.rmac_47_32().to_be_bytes();
        let lo = self.rmac_31_0().to_be_bytes();
        [hi[2], hi[3], lo[0], lo[1], lo[2], lo[3]]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ads<T> {
    /// Sets `rgid_rip` (16 bytes at byte 0x10).
    ///
    /// Errors: [`Error::Truncated`] if the buffer ends before the field.
    pub fn set_rgid_rip(&mut self, gid: &[u8; 16]) -> Result<&mut Self> {
        bytes_set("ads.rgid_rip", self.buf.as_mut(), ADS_RGID_RIP_OFFSET, gid)?;
        Ok(self)
    }

    /// Sets the remote MAC (`rmac_47_32`, `rmac_31_0`).
    pub fn set_rmac(&mut self, mac: [u8; 6]) -> Result<&mut Self> {
        self.set_rmac_47_32(u32::from_be_bytes([0, 0, mac[0], mac[1]]))?
            .set_rmac_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
    }
}

// ---------------------------------------------------------------------------------------------
// qpc
// ---------------------------------------------------------------------------------------------

crate::prm_layout! {
    /// The QP context (`mlx5_ifc_qpc_bits`, 232 bytes).
    pub struct Qpc("qpc", 0xe8) {
        /// Current state ([`QpState`]; QUERY_QP).
        state, set_state: 0x0, 4;
        /// LAG port affinity.
        lag_tx_port_affinity, set_lag_tx_port_affinity: 0x4, 4;
        /// Service type ([`service_type`]).
        st, set_st: 0x8, 8;
        /// Isolate VL/TC.
        isolate_vl_tc, set_isolate_vl_tc: 0x12, 1;
        /// Path migration state ([`pm_state`]).
        pm_state, set_pm_state: 0x13, 2;
        /// Requester end-to-end credit mode.
        req_e2e_credit_mode, set_req_e2e_credit_mode: 0x16, 2;
        /// Offload type (`MLX5_QPC_OFFLOAD_TYPE_*`).
        offload_type, set_offload_type: 0x18, 4;
        /// End padding mode (`MLX5_QPC_END_PADDING_MODE_*`).
        end_padding_mode, set_end_padding_mode: 0x1c, 2;
        /// WQE signature checking.
        wq_signature, set_wq_signature: 0x20, 1;
        /// Block multicast loopback.
        block_lb_mc, set_block_lb_mc: 0x21, 1;
        /// Atomic-like write enable.
        atomic_like_write_en, set_atomic_like_write_en: 0x22, 1;
        /// Latency sensitive.
        latency_sensitive, set_latency_sensitive: 0x23, 1;
        /// Drain on signature error.
        drain_sigerr, set_drain_sigerr: 0x25, 1;
        /// Protection domain.
        pd, set_pd: 0x28, 24;
        /// Path MTU ([`PathMtu`]; INIT2RTR).
        mtu, set_mtu: 0x40, 3;
        /// log2 of the largest message (rdma-core's tests: 20).
        log_msg_max, set_log_msg_max: 0x43, 5;
        /// log2 of the number of RQ WQEs.
        log_rq_size, set_log_rq_size: 0x49, 4;
        /// RQ stride: `16 << log_rq_stride` bytes ([`rq_stride_bytes`]).
        log_rq_stride, set_log_rq_stride: 0x4d, 3;
        /// The QP has no send queue.
        no_sq, set_no_sq: 0x50, 1;
        /// log2 of the number of SQ WQE basic blocks (64 B each).
        log_sq_size, set_log_sq_size: 0x51, 4;
        /// Timestamp format ([`ts_format`]).
        ts_format, set_ts_format: 0x58, 2;
        /// Reserved lkey enable.
        rlky, set_rlky: 0x5b, 1;
        /// ULP stateless offload mode.
        ulp_stateless_offload_mode, set_ulp_stateless_offload_mode: 0x5c, 4;
        /// Q counter set.
        counter_set_id, set_counter_set_id: 0x60, 8;
        /// UAR page of the QP's doorbells.
        uar_page, set_uar_page: 0x68, 24;
        /// User index reported in CQEs (cqe_version 1).
        user_index, set_user_index: 0x88, 24;
        /// log2 of the WQ buffer's page size, relative to 4 KiB.
        log_page_size, set_log_page_size: 0xa3, 5;
        /// Remote QP number (INIT2RTR).
        remote_qpn, set_remote_qpn: 0xa8, 24;
        /// log2 of the ACK request frequency.
        log_ack_req_freq, set_log_ack_req_freq: 0x380, 4;
        /// log2 of the outstanding RDMA reads/atomics as requester (RTR2RTS; 3 bits).
        log_sra_max, set_log_sra_max: 0x388, 3;
        /// Transport retry count (RTR2RTS).
        retry_count, set_retry_count: 0x38d, 3;
        /// RNR retry count (RTR2RTS; 7 = infinite).
        rnr_retry, set_rnr_retry: 0x390, 3;
        /// Fast registration enable.
        fre, set_fre: 0x394, 1;
        /// Remaining RNR retries (QUERY_QP).
        cur_rnr_retry, set_cur_rnr_retry: 0x395, 3;
        /// Remaining transport retries (QUERY_QP).
        cur_retry_count, set_cur_retry_count: 0x398, 3;
        /// Next send PSN (RTR2RTS).
        next_send_psn, set_next_send_psn: 0x3c8, 24;
        /// log2 of DCI stream channels.
        log_num_dci_stream_channels, set_log_num_dci_stream_channels: 0x3e3, 5;
        /// CQ for send completions.
        cqn_snd, set_cqn_snd: 0x3e8, 24;
        /// log2 of DCI errored streams.
        log_num_dci_errored_streams, set_log_num_dci_errored_streams: 0x403, 5;
        /// Source QPN in the DETH (UD on QP1).
        deth_sqpn, set_deth_sqpn: 0x408, 24;
        /// Last acknowledged PSN (QUERY_QP).
        last_acked_psn, set_last_acked_psn: 0x448, 24;
        /// Send sequence number (QUERY_QP).
        ssn, set_ssn: 0x468, 24;
        /// log2 of the outstanding RDMA reads/atomics as responder (INIT2RTR).
        log_rra_max, set_log_rra_max: 0x488, 3;
        /// Atomic mode ([`atomic_mode`]).
        atomic_mode, set_atomic_mode: 0x48c, 4;
        /// Remote read enable.
        rre, set_rre: 0x490, 1;
        /// Remote write enable.
        rwe, set_rwe: 0x491, 1;
        /// Remote atomic enable.
        rae, set_rae: 0x492, 1;
        /// Offset of the WQ inside its first page, in 64-byte units.
        page_offset, set_page_offset: 0x494, 6;
        /// Cross-channel: slave receive.
        cd_slave_receive, set_cd_slave_receive: 0x49d, 1;
        /// Cross-channel: slave send.
        cd_slave_send, set_cd_slave_send: 0x49e, 1;
        /// Cross-channel: master.
        cd_master, set_cd_master: 0x49f, 1;
        /// Minimum RNR NAK timer code (INIT2RTR; rdma-core's tests: 12).
        min_rnr_nak, set_min_rnr_nak: 0x4a3, 5;
        /// Next expected receive PSN (INIT2RTR).
        next_rcv_psn, set_next_rcv_psn: 0x4a8, 24;
        /// XRC domain.
        xrcd, set_xrcd: 0x4c8, 24;
        /// CQ for receive completions.
        cqn_rcv, set_cqn_rcv: 0x4e8, 24;
        /// IOVA of the QP doorbell record (RQ counter, then SQ counter, BE32 each).
        dbr_addr, set_dbr_addr: 0x500, 64;
        /// Q_Key (UD).
        q_key, set_q_key: 0x540, 32;
        /// RQ type (`MLX5_..._RQ_TYPE`: regular, SRQ, RMP, zero-size).
        rq_type, set_rq_type: 0x565, 3;
        /// SRQ / RMP / XRQ number when `rq_type` says so.
        srqn_rmpn_xrqn, set_srqn_rmpn_xrqn: 0x568, 24;
        /// Receive message sequence number (QUERY_QP).
        rmsn, set_rmsn: 0x588, 24;
        /// Hardware SQ WQEBB counter (QUERY_QP).
        hw_sq_wqebb_counter, set_hw_sq_wqebb_counter: 0x5a0, 16;
        /// Software SQ WQEBB counter (QUERY_QP).
        sw_sq_wqebb_counter, set_sw_sq_wqebb_counter: 0x5b0, 16;
        /// Hardware RQ counter (QUERY_QP).
        hw_rq_counter, set_hw_rq_counter: 0x5c0, 32;
        /// Software RQ counter (QUERY_QP).
        sw_rq_counter, set_sw_rq_counter: 0x5e0, 32;
        /// Congestion signalling.
        cgs, set_cgs: 0x62f, 1;
        /// Scatter requester data to CQE (`MLX5_QPC_CS_REQ_*`).
        cs_req, set_cs_req: 0x630, 8;
        /// Scatter responder data to CQE (`MLX5_QPC_CS_RES_*`).
        cs_res, set_cs_res: 0x638, 8;
        /// DC access key.
        dc_access_key, set_dc_access_key: 0x640, 64;
        /// The doorbell record is a DEVX umem instead of `dbr_addr`.
        dbr_umem_valid, set_dbr_umem_valid: 0x683, 1;
        sub {
            /// The primary address path.
            primary_address_path, primary_address_path_mut: Ads @ 0x18;
            /// The alternate address path.
            secondary_address_path, secondary_address_path_mut: Ads @ 0x44;
        }
    }
}

impl<T: AsRef<[u8]>> Qpc<T> {
    /// `state` as a [`QpState`]. Errors: [`Error::Malformed`] for an undefined value.
    pub fn qp_state(&self) -> Result<QpState> {
        QpState::try_from(self.state() as u8)
    }
}

// ---------------------------------------------------------------------------------------------
// CREATE / QUERY / DESTROY
// ---------------------------------------------------------------------------------------------

/// Byte offset of `pas[]` in CREATE_QP and QUERY_QP (bit 0x880).
pub const QP_PAS_OFFSET: usize = 0x110;

crate::prm_layout! {
    /// CREATE_QP input (`mlx5_ifc_create_qp_in_bits`): 0x110 bytes, then `pas[]` (one BE64 per
    /// page of the WQ buffer: RQ first, then SQ).
    pub struct CreateQpIn("create_qp_in", 0x110) {
        /// [`crate::cmd::Opcode::CREATE_QP`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// Requested QP number (needs the `qp_by_name`-style capability; 0 = any).
        input_qpn, set_input_qpn: 0x48, 24;
        /// Optional parameters ([`OptParamMask`]; 0 for CREATE).
        opt_param_mask, set_opt_param_mask: 0x80, 32;
        /// Enhanced connection establishment options.
        ece, set_ece: 0xa0, 32;
        /// The WQ buffer is a DEVX umem instead of `pas[]`.
        wq_umem_valid, set_wq_umem_valid: 0x860, 1;
        sub {
            /// The QP context.
            qpc, qpc_mut: Qpc @ 0x18;
        }
    }
}

crate::prm_layout! {
    /// CREATE_QP output (`mlx5_ifc_create_qp_out_bits`).
    pub struct CreateQpOut("create_qp_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// The new QP number.
        qpn, set_qpn: 0x48, 24;
        /// ECE options the firmware accepted.
        ece, set_ece: 0x60, 32;
    }
}

crate::prm_layout! {
    /// QUERY_QP input (`mlx5_ifc_query_qp_in_bits`).
    pub struct QueryQpIn("query_qp_in", 0x10) {
        /// [`crate::cmd::Opcode::QUERY_QP`].
        opcode, set_opcode: 0x0, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The QP to query.
        qpn, set_qpn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// QUERY_QP output (`mlx5_ifc_query_qp_out_bits`): 0x110 bytes, then `pas[]`.
    pub struct QueryQpOut("query_qp_out", 0x110) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
        /// Optional-parameter mask.
        opt_param_mask, set_opt_param_mask: 0x80, 32;
        /// ECE options.
        ece, set_ece: 0xa0, 32;
        sub {
            /// The QP context.
            qpc, qpc_mut: Qpc @ 0x18;
        }
    }
}

be64_list!(
    CreateQpIn,
    "create_qp_in.pas",
    QP_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);
be64_list!(
    QueryQpOut,
    "query_qp_out.pas",
    QP_PAS_OFFSET,
    pas,
    set_pas,
    pas_capacity
);

/// Bytes of a CREATE_QP input with `n_pas` page addresses.
pub const fn create_qp_in_len(n_pas: usize) -> usize {
    with_be64_list(CreateQpIn::LEN, n_pas)
}

crate::prm_layout! {
    /// DESTROY_QP input (`mlx5_ifc_destroy_qp_in_bits`).
    pub struct DestroyQpIn("destroy_qp_in", 0x10) {
        /// [`crate::cmd::Opcode::DESTROY_QP`].
        opcode, set_opcode: 0x0, 16;
        /// User context id.
        uid, set_uid: 0x10, 16;
        /// Opcode modifier (0).
        op_mod, set_op_mod: 0x30, 16;
        /// The QP to destroy.
        qpn, set_qpn: 0x48, 24;
    }
}

crate::prm_layout! {
    /// DESTROY_QP output (`mlx5_ifc_destroy_qp_out_bits`).
    pub struct DestroyQpOut("destroy_qp_out", 0x10) {
        /// Command status.
        status, set_status: 0x0, 8;
        /// Syndrome.
        syndrome, set_syndrome: 0x20, 32;
    }
}

// ---------------------------------------------------------------------------------------------
// The modify family
// ---------------------------------------------------------------------------------------------

/// One modify-QP input that carries a `qpc` (0x110 bytes): `qpn`, `opt_param_mask`, optionally
/// `ece`, and the `qpc` at byte 0x18. Each gets its own type and kernel name.
macro_rules! modify_qp_in {
    ($(#[$m:meta])* $name:ident, $ifc:literal, $op:ident $(, ece: $ece:tt)?) => {
        crate::prm_layout! {
            $(#[$m])*
            pub struct $name($ifc, 0x110) {
                #[doc = concat!("[`crate::cmd::Opcode::", stringify!($op), "`].")]
                opcode, set_opcode: 0x0, 16;
                /// User context id.
                uid, set_uid: 0x10, 16;
                /// Opcode modifier (0).
                op_mod, set_op_mod: 0x30, 16;
                /// The QP to modify.
                qpn, set_qpn: 0x48, 24;
                /// Which optional `qpc` fields to apply ([`OptParamMask`]).
                opt_param_mask, set_opt_param_mask: 0x80, 32;
                $(
                    #[doc = concat!("Enhanced connection establishment options", $ece)]
                    ece, set_ece: 0xa0, 32;
                )?
                sub {
                    /// The QP context carrying the fields this transition sets.
                    qpc, qpc_mut: Qpc @ 0x18;
                }
            }
        }

        impl $name<()> {
            /// The opcode this input is for.
            pub const OPCODE: Opcode = Opcode::$op;
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// `opt_param_mask` as [`OptParamMask`] (unknown bits kept).
            pub fn opt_params(&self) -> OptParamMask {
                OptParamMask::from_bits_retain(self.opt_param_mask())
            }
        }
    };
}

/// One modify-QP output (0x10 bytes), with `ece` where the kernel has it.
macro_rules! modify_qp_out {
    ($(#[$m:meta])* $name:ident, $ifc:literal $(, ece: $ece:tt)?) => {
        crate::prm_layout! {
            $(#[$m])*
            pub struct $name($ifc, 0x10) {
                /// Command status.
                status, set_status: 0x0, 8;
                /// Syndrome.
                syndrome, set_syndrome: 0x20, 32;
                $(
                    #[doc = concat!("ECE options the firmware accepted", $ece)]
                    ece, set_ece: 0x60, 32;
                )?
            }
        }
    };
}

/// A modify-QP input without a `qpc` (2ERR, 2RST: 0x10 bytes).
macro_rules! modify_qp_short_in {
    ($(#[$m:meta])* $name:ident, $ifc:literal, $op:ident) => {
        crate::prm_layout! {
            $(#[$m])*
            pub struct $name($ifc, 0x10) {
                #[doc = concat!("[`crate::cmd::Opcode::", stringify!($op), "`].")]
                opcode, set_opcode: 0x0, 16;
                /// User context id.
                uid, set_uid: 0x10, 16;
                /// Opcode modifier (0).
                op_mod, set_op_mod: 0x30, 16;
                /// The QP to modify.
                qpn, set_qpn: 0x48, 24;
            }
        }

        impl $name<()> {
            /// The opcode this input is for.
            pub const OPCODE: Opcode = Opcode::$op;
        }
    };
}

modify_qp_in!(
    /// RST2INIT_QP input (`mlx5_ifc_rst2init_qp_in_bits`): sets `pd`-side access (`rre`, `rwe`,
    /// `rae`), `primary_address_path.vhca_port_num`, `pkey_index`, `q_key` (UD).
    Rst2InitQpIn, "rst2init_qp_in", RST2INIT_QP, ece: "."
);
modify_qp_out!(
    /// RST2INIT_QP output (`mlx5_ifc_rst2init_qp_out_bits`).
    Rst2InitQpOut, "rst2init_qp_out", ece: "."
);
modify_qp_in!(
    /// INIT2INIT_QP input (`mlx5_ifc_init2init_qp_in_bits`).
    Init2InitQpIn, "init2init_qp_in", INIT2INIT_QP, ece: "."
);
modify_qp_out!(
    /// INIT2INIT_QP output (`mlx5_ifc_init2init_qp_out_bits`).
    Init2InitQpOut, "init2init_qp_out", ece: "."
);
modify_qp_in!(
    /// INIT2RTR_QP input (`mlx5_ifc_init2rtr_qp_in_bits`): `mtu`, `log_msg_max`, `remote_qpn`,
    /// `next_rcv_psn`, `min_rnr_nak`, `log_rra_max`, and the primary address path.
    Init2RtrQpIn, "init2rtr_qp_in", INIT2RTR_QP, ece: "."
);
modify_qp_out!(
    /// INIT2RTR_QP output (`mlx5_ifc_init2rtr_qp_out_bits`).
    Init2RtrQpOut, "init2rtr_qp_out", ece: "."
);
modify_qp_in!(
    /// RTR2RTS_QP input (`mlx5_ifc_rtr2rts_qp_in_bits`): `next_send_psn`, `retry_count`,
    /// `rnr_retry`, `log_sra_max`, `primary_address_path.ack_timeout`.
    Rtr2RtsQpIn, "rtr2rts_qp_in", RTR2RTS_QP, ece: "."
);
modify_qp_out!(
    /// RTR2RTS_QP output (`mlx5_ifc_rtr2rts_qp_out_bits`).
    Rtr2RtsQpOut, "rtr2rts_qp_out", ece: "."
);
modify_qp_in!(
    /// RTS2RTS_QP input (`mlx5_ifc_rts2rts_qp_in_bits`).
    Rts2RtsQpIn, "rts2rts_qp_in", RTS2RTS_QP, ece: "."
);
modify_qp_out!(
    /// RTS2RTS_QP output (`mlx5_ifc_rts2rts_qp_out_bits`).
    Rts2RtsQpOut, "rts2rts_qp_out", ece: "."
);
modify_qp_in!(
    /// SQERR2RTS_QP input (`mlx5_ifc_sqerr2rts_qp_in_bits`; no `ece` in this kernel version).
    Sqerr2RtsQpIn, "sqerr2rts_qp_in", SQERR2RTS_QP
);
modify_qp_out!(
    /// SQERR2RTS_QP output (`mlx5_ifc_sqerr2rts_qp_out_bits`).
    Sqerr2RtsQpOut, "sqerr2rts_qp_out"
);
modify_qp_in!(
    /// SQD_RTS_QP input (`mlx5_ifc_sqd2rts_qp_in_bits`).
    Sqd2RtsQpIn, "sqd2rts_qp_in", SQD_RTS_QP
);
modify_qp_out!(
    /// SQD_RTS_QP output (`mlx5_ifc_sqd2rts_qp_out_bits`).
    Sqd2RtsQpOut, "sqd2rts_qp_out"
);
modify_qp_in!(
    /// RTS2SQD_QP input: the first mlx5 driver's `mlx5_modify_qp_mbox_in` (Linux 3.11
    /// `include/linux/mlx5/qp.h`), the one input every modify command shared there, laid out
    /// as today's modify inputs are (`qpn` at 0x48, `opt_param_mask` at 0x80, `qpc` at 0xc0;
    /// `tests/ifc_layout_objects.rs` checks it against `sqd2rts_qp_in`). No `qpc` field is
    /// read: the drain takes no attributes (`en_sqd_async_notify` never reached the device:
    /// 3.11's `mlx5_core_qp_modify` took `sqd_event` and did not encode it, so SQ_DRAINED is
    /// always raised).
    Rts2SqdQpIn, "rts2sqd_qp_in", RTS2SQD_QP
);
modify_qp_out!(
    /// RTS2SQD_QP output (`mlx5_modify_qp_mbox_out`: status, syndrome).
    Rts2SqdQpOut, "rts2sqd_qp_out"
);
modify_qp_in!(
    /// SQD2SQD_QP input (the same `mlx5_modify_qp_mbox_in`): optional parameters only, once
    /// the SQ is drained.
    Sqd2SqdQpIn, "sqd2sqd_qp_in", SQD2SQD_QP
);
modify_qp_out!(
    /// SQD2SQD_QP output.
    Sqd2SqdQpOut, "sqd2sqd_qp_out"
);
modify_qp_short_in!(
    /// 2ERR_QP input (`mlx5_ifc_qp_2err_in_bits`): move to ERR from any state (flushes WQEs).
    Qp2ErrIn, "qp_2err_in", QP_2ERR
);
modify_qp_out!(
    /// 2ERR_QP output (`mlx5_ifc_qp_2err_out_bits`).
    Qp2ErrOut, "qp_2err_out"
);
modify_qp_short_in!(
    /// 2RST_QP input (`mlx5_ifc_qp_2rst_in_bits`): back to RST from any state.
    Qp2RstIn, "qp_2rst_in", QP_2RST
);
modify_qp_out!(
    /// 2RST_QP output (`mlx5_ifc_qp_2rst_out_bits`).
    Qp2RstOut, "qp_2rst_out"
);

#[cfg(test)]
mod tests;
