//! QP attributes and the firmware command inputs built from them: CREATE_QP's `qpc`, each
//! modify transition (RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS, 2ERR, 2RST) with its typed
//! attribute struct and `opt_param_mask`, QUERY_QP and DESTROY_QP.
//!
//! Field choices follow rdma-core `tests/mlx5_base.py` (`Mlx5DevxRcResources`: the qpc fields
//! each transition sets) and the kernel's `drivers/infiniband/hw/mlx5/qp.c`
//! (`__mlx5_ib_modify_qp`: `ib_mask_to_mlx5_opt`, the `opt_mask` table, `mlx5_set_path`); the
//! optional parameters each transition accepts are the kernel's `opt_mask[cur][new][st]`.
//!
//! Owns: [`QpType`], [`QpCaps`] (their ring sizing is `qp_geometry`), [`AddressPath`], [`Rst2Init`], [`Init2Rtr`], [`Rtr2Rts`],
//! [`Rts2Rts`], [`QpAccess`], [`QpInfo`] and the `*_input` builders. Must not: execute
//! commands or own device objects (that is `qp.rs`).

use bypass_hw::cmd::qp::{
    CreateQpIn, DestroyQpIn, Init2RtrQpIn, OptParamMask, PathMtu, Qp2ErrIn, Qp2RstIn, QpState, Qpc,
    QueryQpIn, QueryQpOut, Rst2InitQpIn, Rtr2RtsQpIn, Rts2RtsQpIn, create_qp_in_len, pm_state,
    service_type,
};
use bypass_hw::cmd::{MboxIn, Opcode};

use crate::error::{DriverError, Result};

/// The QP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
    /// Unreliable connected: SEND, SEND with immediate, RDMA WRITE and WRITE with immediate,
    /// no ACKs (IBTA vol. 1 §9.8; no READ or atomics).
    Uc,
}

impl QpType {
    /// The PRM service type (`qpc.st`).
    pub const fn service_type(self) -> u8 {
        match self {
            Self::Rc => service_type::RC,
            Self::Ud => service_type::UD,
            Self::Uc => service_type::UC,
        }
    }
}

/// What a QP is sized for (ibverbs `ibv_qp_cap`, plus `sq_sig_all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send WQEs of the largest size the QP must hold at once.
    pub max_send_wr: u32,
    /// Receive WQEs.
    pub max_recv_wr: u32,
    /// SGEs per send.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Inline bytes per send.
    pub max_inline_data: u32,
    /// Every send generates a completion.
    pub sq_sig_all: bool,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
            sq_sig_all: false,
        }
    }
}

pub use crate::qp_geometry::{QpGeometry, SendLimits};

bitflags::bitflags! {
    /// Remote access a QP grants (qpc `rre`, `rwe`, `rae`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAccess: u8 {
        /// Remote reads.
        const REMOTE_READ = 1 << 0;
        /// Remote writes.
        const REMOTE_WRITE = 1 << 1;
        /// Remote atomics.
        const REMOTE_ATOMIC = 1 << 2;
    }
}

/// Where an RC QP sends (the primary address path, `mlx5_ifc_ads_bits`; kernel
/// `mlx5_set_path` for RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressPath {
    /// Remote GID (IPv6 or IPv4-mapped).
    pub rgid: [u8; 16],
    /// Remote MAC (None: leave 0; the sim resolves by GID).
    pub rmac: Option<[u8; 6]>,
    /// Local GID index.
    pub sgid_index: u8,
    /// Hop limit (IP TTL).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
    /// Service level / priority.
    pub sl: u8,
    /// RoCE v2 UDP source port (0: the device's choice).
    pub udp_sport: u16,
}

impl AddressPath {
    /// A path to `rgid` with hop limit 64 and everything else default.
    pub fn to_gid(rgid: [u8; 16]) -> Self {
        Self {
            rgid,
            rmac: None,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            udp_sport: 0,
        }
    }
}

/// RST → INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rst2Init {
    /// Port (1-based).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Remote access (RC).
    pub access: QpAccess,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for Rst2Init {
    fn default() -> Self {
        Self {
            port: 1,
            pkey_index: 0,
            access: QpAccess::all(),
            qkey: 0,
        }
    }
}

/// INIT → RTR. For UD only `qkey_update` matters; the rest is RC's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Init2Rtr {
    /// Path MTU.
    pub mtu: PathMtu,
    /// The remote QPN.
    pub dest_qpn: u32,
    /// The first PSN expected from the peer.
    pub rq_psn: u32,
    /// log2 of incoming RDMA READs/atomics outstanding (`log_rra_max`).
    pub log_max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer code (`min_rnr_nak`, IBTA table: 12 = 0.64 ms, 1 = 0.01 ms).
    pub min_rnr_timer: u8,
    /// log2 of the largest message.
    pub log_msg_max: u8,
    /// Where to send.
    pub path: AddressPath,
    /// Optional: change the access flags (`RRE | RWE | RAE` opt bits).
    pub access: Option<QpAccess>,
    /// Optional (UD): change the Q_Key.
    pub qkey: Option<u32>,
}

impl Init2Rtr {
    /// An RC INIT2RTR toward `dest_qpn` at `rgid`, expecting `rq_psn`, MTU 1024.
    pub fn rc(dest_qpn: u32, rq_psn: u32, rgid: [u8; 16]) -> Self {
        Self {
            mtu: PathMtu::Mtu1024,
            dest_qpn,
            rq_psn,
            log_max_dest_rd_atomic: 3,
            min_rnr_timer: 1,
            log_msg_max: 30,
            path: AddressPath::to_gid(rgid),
            access: None,
            qkey: None,
        }
    }

    /// A UD INIT2RTR (nothing to set).
    pub fn ud() -> Self {
        Self {
            qkey: None,
            ..Self::rc(0, 0, [0; 16])
        }
    }
}

/// RTR → RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtr2Rts {
    /// First PSN sent.
    pub sq_psn: u32,
    /// Local ACK timeout code (4.096 µs × 2^timeout; 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// log2 of outgoing RDMA READs/atomics outstanding (`log_sra_max`).
    pub log_max_rd_atomic: u8,
    /// Optional: a new RNR timer (`RNR_TIMEOUT` opt bit).
    pub min_rnr_timer: Option<u8>,
    /// Optional: new access flags.
    pub access: Option<QpAccess>,
}

impl Rtr2Rts {
    /// RTR2RTS sending from `sq_psn` with rdma-core test defaults (timeout 14, retry 7, RNR
    /// retry 7, 8 outstanding reads).
    pub fn new(sq_psn: u32) -> Self {
        Self {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            log_max_rd_atomic: 3,
            min_rnr_timer: None,
            access: None,
        }
    }
}

/// RTS → RTS: only optional parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rts2Rts {
    /// New RNR timer.
    pub min_rnr_timer: Option<u8>,
    /// New access flags.
    pub access: Option<QpAccess>,
    /// New Q_Key (UD).
    pub qkey: Option<u32>,
}

/// What QUERY_QP says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpInfo {
    /// The state.
    pub state: QpState,
    /// Next PSN to send.
    pub sq_psn: u32,
    /// Next PSN expected.
    pub rq_psn: u32,
    /// Last PSN acknowledged by the peer.
    pub last_acked_psn: u32,
    /// The raw `query_qp_out` bytes (the qpc at 0x18; research access).
    pub raw: Vec<u8>,
}

impl QpInfo {
    /// Parses a QUERY_QP output.
    pub fn parse(out: Vec<u8>) -> Result<Self> {
        let bad = |source| DriverError::BadOutput {
            op: Opcode::QUERY_QP,
            source,
        };
        let o = QueryQpOut::new_checked(&out[..]).map_err(bad)?;
        let q = o.qpc();
        let state = q.qp_state().map_err(bad)?;
        let (sq_psn, rq_psn, last_acked_psn) =
            (q.next_send_psn(), q.next_rcv_psn(), q.last_acked_psn());
        Ok(Self {
            state,
            sq_psn,
            rq_psn,
            last_acked_psn,
            raw: out,
        })
    }

    /// The raw qpc (`query_qp_out` bytes 0x18..0x100).
    pub fn qpc_bytes(&self) -> &[u8] {
        self.raw.get(0x18..0x100).unwrap_or(&[])
    }
}

pub(crate) fn header(op: Opcode, len: usize) -> Vec<u8> {
    let mut i = vec![0u8; len.max(MboxIn::LEN)];
    if let Ok(mut h) = MboxIn::new_checked(&mut i[..]) {
        let _ = h.set_opcode(op.0.into());
    }
    i
}

pub(crate) fn build(what: &'static str) -> impl Fn(bypass_hw::Error) -> DriverError {
    move |source| DriverError::BuildInput { what, source }
}

/// What CREATE_QP needs besides the geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateQpParams {
    /// RC or UD.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: u32,
    /// Send CQ.
    pub send_cqn: u32,
    /// Receive CQ.
    pub recv_cqn: u32,
    /// UAR page of the QP's doorbells.
    pub uar_page: u32,
    /// IOVA of the doorbell record.
    pub dbr_iova: u64,
    /// User index reported in CQEs (cqe_version 1).
    pub user_index: u32,
}

/// The CREATE_QP input: `qpc` (st, pm_state MIGRATED, pd, RQ/SQ sizes, uar, CQs, dbr) and one
/// `pas` entry per 4 KiB page of the WQ buffer (RQ first, then SQ), as rdma-core's
/// `tests/mlx5_base.py` `create_qp` fills it.
pub fn create_qp_input(p: &CreateQpParams, g: &QpGeometry, pages: &[u64]) -> Result<Vec<u8>> {
    let e = build("CREATE_QP");
    let mut i = header(Opcode::CREATE_QP, create_qp_in_len(pages.len()));
    let mut c = CreateQpIn::new_checked(&mut i[..]).map_err(&e)?;
    for (k, &pa) in pages.iter().enumerate() {
        c.set_pas(k, pa).map_err(&e)?;
    }
    let mut q = c.qpc_mut();
    q.set_st(p.qp_type.service_type().into()).map_err(&e)?;
    q.set_pm_state(pm_state::MIGRATED.into()).map_err(&e)?;
    q.set_pd(p.pd).map_err(&e)?;
    q.set_log_rq_size(g.log_rq_size.into()).map_err(&e)?;
    q.set_log_rq_stride(g.log_rq_stride.into()).map_err(&e)?;
    q.set_log_sq_size(g.log_sq_size.into()).map_err(&e)?;
    q.set_uar_page(p.uar_page).map_err(&e)?;
    q.set_cqn_snd(p.send_cqn).map_err(&e)?;
    q.set_cqn_rcv(p.recv_cqn).map_err(&e)?;
    q.set_user_index(p.user_index & 0x00ff_ffff).map_err(&e)?;
    q.set_log_page_size(0).map_err(&e)?;
    q.set_dbr_addr(p.dbr_iova).map_err(&e)?;
    Ok(i)
}

fn set_access<T: AsRef<[u8]> + AsMut<[u8]>>(
    q: &mut Qpc<T>,
    a: QpAccess,
    e: &impl Fn(bypass_hw::Error) -> DriverError,
) -> Result<()> {
    q.set_rre(a.contains(QpAccess::REMOTE_READ).into())
        .map_err(e)?;
    q.set_rwe(a.contains(QpAccess::REMOTE_WRITE).into())
        .map_err(e)?;
    q.set_rae(a.contains(QpAccess::REMOTE_ATOMIC).into())
        .map_err(e)?;
    Ok(())
}

/// Writes new access flags `a` (if any) into `q` for a QP of type `t`: the bits and the
/// `opt_param_mask` bits of them (RC: RRE, RWE, RAE; UC: RWE alone, the kernel's UC rows of
/// `opt_mask`; UD: none).
pub(crate) fn access_opt<T: AsRef<[u8]> + AsMut<[u8]>>(
    q: &mut Qpc<T>,
    t: QpType,
    a: Option<QpAccess>,
    e: &impl Fn(bypass_hw::Error) -> DriverError,
) -> Result<OptParamMask> {
    let Some(a) = a else {
        return Ok(OptParamMask::empty());
    };
    Ok(match t {
        QpType::Rc => {
            set_access(q, a, e)?;
            OptParamMask::RRE | OptParamMask::RWE | OptParamMask::RAE
        }
        QpType::Uc => {
            q.set_rwe(a.contains(QpAccess::REMOTE_WRITE).into())
                .map_err(e)?;
            OptParamMask::RWE
        }
        QpType::Ud => OptParamMask::empty(),
    })
}

/// The RST2INIT input: port, P_Key index, access (RC) or Q_Key (UD). No optional parameters
/// (the kernel's table has no RST2INIT row).
pub fn rst2init_input(qpn: u32, t: QpType, a: &Rst2Init) -> Result<Vec<u8>> {
    let e = build("RST2INIT_QP");
    let mut i = header(Opcode::RST2INIT_QP, Rst2InitQpIn::LEN);
    let mut m = Rst2InitQpIn::new_checked(&mut i[..]).map_err(&e)?;
    m.set_qpn(qpn).map_err(&e)?;
    let mut q = m.qpc_mut();
    match t {
        QpType::Rc => set_access(&mut q, a.access, &e)?,
        // UC is written to, never read from or atomically updated: only RWE means anything.
        QpType::Uc => set_access(&mut q, a.access & QpAccess::REMOTE_WRITE, &e)?,
        QpType::Ud => {
            q.set_q_key(a.qkey).map_err(&e)?;
        }
    }
    let mut p = q.primary_address_path_mut();
    p.set_vhca_port_num(a.port.into()).map_err(&e)?;
    p.set_pkey_index(a.pkey_index.into()).map_err(&e)?;
    Ok(i)
}

/// The INIT2RTR input. RC: MTU, max message, remote QPN, expected PSN, RNR timer, responder
/// resources, the primary path (rgid, rmac, source GID index, hop limit, traffic class, flow
/// label, SL, UDP source port, port 1). Optional: access (RC), Q_Key (UD).
pub fn init2rtr_input(qpn: u32, t: QpType, a: &Init2Rtr) -> Result<Vec<u8>> {
    let e = build("INIT2RTR_QP");
    let mut i = header(Opcode::INIT2RTR_QP, Init2RtrQpIn::LEN);
    let mut m = Init2RtrQpIn::new_checked(&mut i[..]).map_err(&e)?;
    m.set_qpn(qpn).map_err(&e)?;
    let mut opt = OptParamMask::empty();
    {
        let mut q = m.qpc_mut();
        if t != QpType::Ud {
            q.set_mtu(a.mtu.code().into()).map_err(&e)?;
            q.set_log_msg_max(a.log_msg_max.into()).map_err(&e)?;
            q.set_remote_qpn(a.dest_qpn).map_err(&e)?;
            q.set_next_rcv_psn(a.rq_psn & 0x00ff_ffff).map_err(&e)?;
            // UC has no RNR NAKs and no responder resources (`ib_modify_qp_is_ok`: INIT→RTR
            // of a UC QP takes neither IB_QP_MIN_RNR_TIMER nor IB_QP_MAX_DEST_RD_ATOMIC).
            if t == QpType::Rc {
                q.set_min_rnr_nak(a.min_rnr_timer.into()).map_err(&e)?;
                q.set_log_rra_max(a.log_max_dest_rd_atomic.into())
                    .map_err(&e)?;
            }
            opt |= access_opt(&mut q, t, a.access, &e)?;
            let mut p = q.primary_address_path_mut();
            p.set_rgid_rip(&a.path.rgid).map_err(&e)?;
            if let Some(mac) = a.path.rmac {
                p.set_rmac(mac).map_err(&e)?;
            }
            p.set_grh(1).map_err(&e)?;
            p.set_src_addr_index(a.path.sgid_index.into()).map_err(&e)?;
            p.set_hop_limit(a.path.hop_limit.into()).map_err(&e)?;
            p.set_tclass(a.path.traffic_class.into()).map_err(&e)?;
            p.set_flow_label(a.path.flow_label).map_err(&e)?;
            p.set_sl(a.path.sl.into()).map_err(&e)?;
            p.set_udp_sport(a.path.udp_sport.into()).map_err(&e)?;
            p.set_vhca_port_num(1).map_err(&e)?;
        } else if let Some(qkey) = a.qkey {
            q.set_q_key(qkey).map_err(&e)?;
            opt |= OptParamMask::Q_KEY;
        }
    }
    m.set_opt_param_mask(opt.bits()).map_err(&e)?;
    Ok(i)
}

/// The RTR2RTS input: send PSN; RC: retry counts, `log_sra_max`, ACK timeout. Optional: RNR
/// timer and access (RC).
pub fn rtr2rts_input(qpn: u32, t: QpType, a: &Rtr2Rts) -> Result<Vec<u8>> {
    let e = build("RTR2RTS_QP");
    let mut i = header(Opcode::RTR2RTS_QP, Rtr2RtsQpIn::LEN);
    let mut m = Rtr2RtsQpIn::new_checked(&mut i[..]).map_err(&e)?;
    m.set_qpn(qpn).map_err(&e)?;
    let mut opt = OptParamMask::empty();
    {
        let mut q = m.qpc_mut();
        q.set_next_send_psn(a.sq_psn & 0x00ff_ffff).map_err(&e)?;
        if t == QpType::Rc {
            q.set_retry_count(a.retry_cnt.into()).map_err(&e)?;
            q.set_rnr_retry(a.rnr_retry.into()).map_err(&e)?;
            q.set_log_sra_max(a.log_max_rd_atomic.into()).map_err(&e)?;
            if let Some(r) = a.min_rnr_timer {
                q.set_min_rnr_nak(r.into()).map_err(&e)?;
                opt |= OptParamMask::RNR_TIMEOUT;
            }
            opt |= access_opt(&mut q, t, a.access, &e)?;
            q.primary_address_path_mut()
                .set_ack_timeout(a.timeout.into())
                .map_err(&e)?;
        } else if t == QpType::Uc {
            opt |= access_opt(&mut q, t, a.access, &e)?;
        }
    }
    m.set_opt_param_mask(opt.bits()).map_err(&e)?;
    Ok(i)
}

/// The RTS2RTS input: only the optional parameters given (RC: RNR timer, access; UD: Q_Key).
pub fn rts2rts_input(qpn: u32, t: QpType, a: &Rts2Rts) -> Result<Vec<u8>> {
    let e = build("RTS2RTS_QP");
    let mut i = header(Opcode::RTS2RTS_QP, Rts2RtsQpIn::LEN);
    let mut m = Rts2RtsQpIn::new_checked(&mut i[..]).map_err(&e)?;
    m.set_qpn(qpn).map_err(&e)?;
    let mut opt = OptParamMask::empty();
    {
        let mut q = m.qpc_mut();
        match t {
            QpType::Rc => {
                if let Some(r) = a.min_rnr_timer {
                    q.set_min_rnr_nak(r.into()).map_err(&e)?;
                    opt |= OptParamMask::RNR_TIMEOUT;
                }
                if let Some(acc) = a.access {
                    set_access(&mut q, acc, &e)?;
                    opt |= OptParamMask::RRE | OptParamMask::RWE | OptParamMask::RAE;
                }
            }
            QpType::Uc => opt |= access_opt(&mut q, t, a.access, &e)?,
            QpType::Ud => {
                if let Some(k) = a.qkey {
                    q.set_q_key(k).map_err(&e)?;
                    opt |= OptParamMask::Q_KEY;
                }
            }
        }
    }
    m.set_opt_param_mask(opt.bits()).map_err(&e)?;
    Ok(i)
}

/// Defines the builder of a command whose input carries only the QPN (each layout has its
/// own `qpn` field, so each gets its own typed view).
macro_rules! qpn_only_input {
    ($(#[$doc:meta])* $name:ident, $op:ident, $layout:ident) => {
        $(#[$doc])*
        pub fn $name(qpn: u32) -> Result<Vec<u8>> {
            let mut i = header(Opcode::$op, $layout::LEN);
            $layout::new_checked(&mut i[..])
                .and_then(|mut m| m.set_qpn(qpn).map(|_| ()))
                .map_err(build(stringify!($op)))?;
            Ok(i)
        }
    };
}

qpn_only_input!(
    /// The 2ERR input.
    to_err_input, QP_2ERR, Qp2ErrIn
);
qpn_only_input!(
    /// The 2RST input.
    to_rst_input, QP_2RST, Qp2RstIn
);
qpn_only_input!(
    /// The QUERY_QP input.
    query_qp_input, QUERY_QP, QueryQpIn
);
qpn_only_input!(
    /// The DESTROY_QP input.
    destroy_qp_input, DESTROY_QP, DestroyQpIn
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_set_their_fields_and_only_the_optional_bits_asked() {
        let i = init2rtr_input(0x42, QpType::Rc, &Init2Rtr::rc(0x99, 0x200, [7; 16])).unwrap();
        let m = Init2RtrQpIn::new_checked(&i[..]).unwrap();
        assert_eq!(m.opt_params(), OptParamMask::empty());
        assert_eq!(
            (m.qpn(), m.qpc().remote_qpn(), m.qpc().next_rcv_psn()),
            (0x42, 0x99, 0x200)
        );
        assert_eq!(m.qpc().primary_address_path().rgid_rip(), [7; 16]);
        let r = Rtr2Rts {
            min_rnr_timer: Some(12),
            ..Rtr2Rts::new(0x100)
        };
        let i = rtr2rts_input(0x42, QpType::Rc, &r).unwrap();
        let m = Rtr2RtsQpIn::new_checked(&i[..]).unwrap();
        assert_eq!(m.opt_params(), OptParamMask::RNR_TIMEOUT);
        assert_eq!(m.qpc().next_send_psn(), 0x100);
        let i = rts2rts_input(
            0x42,
            QpType::Ud,
            &Rts2Rts {
                qkey: Some(5),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            Rts2RtsQpIn::new_checked(&i[..]).unwrap().opt_params(),
            OptParamMask::Q_KEY
        );
        assert_eq!(to_err_input(0x42).unwrap().len(), 16);
    }
}
