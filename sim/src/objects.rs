//! The firmware's objects: what CREATE_* makes, the data path uses, and DESTROY_* removes.
//!
//! Owns: [`Objects`] (the tables, with capacities from the profile's capabilities) and the
//! object types [`Pd`], [`Uar`], [`Cq`], [`Eq`], [`Qp`] (mkeys are [`crate::mkey::Mkey`]).
//! The firmware fills them from command layouts (`firmware`), the data path reads and updates
//! their runtime state (`engine`, `transport`). Must not: parse commands or packets.
//!
//! Reference counts (`users`) implement the firmware's "object in use" rule: a CQ used by a
//! QP, an EQ used by a CQ, a PD used by an mkey or QP, or a UAR used by a queue cannot be
//! destroyed (RES_BUSY), the order the kernel's `mlx5_ib` and rdma-core tear down in.

use bypass_hw::cmd::qp::QpState;

use crate::buffer::PageList;
use crate::counters::Counters;
use crate::mkey::Mkey;
use crate::profile::Caps;
use crate::ring::{CqRing, EqRing};
use crate::srq::Srq;
use crate::table::Table;
use crate::transport::requester::state::ReqState;
use crate::transport::responder::state::RespState;

/// A protection domain.
#[derive(Debug, Clone, Default)]
pub struct Pd {
    /// Objects (mkeys, QPs) that name this PD.
    pub users: u32,
}

/// A UAR page handed out by ALLOC_UAR.
#[derive(Debug, Clone, Default)]
pub struct Uar {
    /// Queues (CQs, EQs, QPs) that ring doorbells through this page.
    pub users: u32,
}

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    /// The ring.
    pub ring: CqRing,
    /// EQ its completion events go to (`cqc.c_eqn`).
    pub eqn: u32,
    /// UAR page of its arm doorbell.
    pub uar: u32,
    /// QPs that use it as send or receive CQ.
    pub users: u32,
    /// The raw `cqc` from CREATE_CQ (QUERY_CQ returns it with live counters patched in).
    pub cqc: Vec<u8>,
}

/// An event queue.
#[derive(Debug, Clone)]
pub struct Eq {
    /// The ring.
    pub ring: EqRing,
    /// MSI-X vector (`eqc.intr`).
    pub intr: u16,
    /// UAR page of its doorbell.
    pub uar: u32,
    /// Event types it receives: bit `t` set = event type `t` (`create_eq_in.event_bitmask`).
    pub event_bitmask: [u64; 4],
    /// CQs that report to it.
    pub users: u32,
    /// The raw `eqc` from CREATE_EQ.
    pub eqc: Vec<u8>,
}

impl Eq {
    /// True if the EQ asked for events of type `t`.
    pub fn wants(&self, t: u8) -> bool {
        self.event_bitmask[usize::from(t / 64)] & (1 << (t % 64)) != 0
    }
}

/// The remote end and path of a connected QP (`qpc.primary_address_path`, `ads`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPath {
    /// Remote GID (RoCE: IPv6 or IPv4-mapped address).
    pub rgid: [u8; 16],
    /// Remote MAC.
    pub rmac: [u8; 6],
    /// Local GID index (`src_addr_index`).
    pub src_addr_index: u8,
    /// IP TTL / hop limit.
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS / IPv6 traffic class).
    pub tclass: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// RoCEv2 UDP source port (0 = derive from the QPN, as rxe does).
    pub udp_sport: u16,
    /// Port (1-based; `vhca_port_num`).
    pub port: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^ack_timeout (0 = infinite).
    pub ack_timeout: u8,
    /// P_Key index.
    pub pkey_index: u16,
}

/// Connection attributes a QP acquires through its modify commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QpAttrs {
    /// Path MTU in bytes (INIT2RTR).
    pub mtu: u32,
    /// log2 of the largest message (`log_msg_max`).
    pub log_msg_max: u8,
    /// Remote QPN (INIT2RTR, RC).
    pub remote_qpn: u32,
    /// Q_Key (UD).
    pub q_key: u32,
    /// Primary address path.
    pub path: AddressPath,
    /// Transport retries before TRANSPORT_RETRY_EXC (7 = infinite).
    pub retry_count: u8,
    /// RNR retries before RNR_RETRY_EXC (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP sends as responder (`min_rnr_nak`).
    pub min_rnr_nak: u8,
    /// log2 of outstanding READ/atomic as requester (`log_sra_max`).
    pub log_sra_max: u8,
    /// log2 of outstanding READ/atomic as responder (`log_rra_max`).
    pub log_rra_max: u8,
    /// Remote read enabled.
    pub rre: bool,
    /// Remote write enabled.
    pub rwe: bool,
    /// Remote atomic enabled.
    pub rae: bool,
    /// First PSN this QP sends (RTR2RTS `next_send_psn`).
    pub sq_psn: u32,
    /// First PSN this QP expects (INIT2RTR `next_rcv_psn`).
    pub rq_psn: u32,
}

/// Geometry of a QP's work queue buffer: the RQ at offset 0, the SQ after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WqGeometry {
    /// log2 of RQ WQEs.
    pub log_rq_size: u8,
    /// RQ WQE stride in bytes (`16 << log_rq_stride`).
    pub rq_stride: u32,
    /// log2 of SQ WQEBBs; `None` for a QP without SQ (`no_sq`).
    pub log_sq_size: Option<u8>,
}

impl WqGeometry {
    /// RQ size in bytes.
    pub fn rq_bytes(&self) -> u64 {
        (1u64 << self.log_rq_size) * u64::from(self.rq_stride)
    }

    /// SQ size in bytes.
    #[cfg(test)]
    pub fn sq_bytes(&self) -> u64 {
        self.log_sq_size.map_or(0, |l| (1u64 << l) * 64)
    }
}

/// A queue pair.
#[derive(Debug, Clone)]
pub struct Qp {
    /// Number.
    pub qpn: u32,
    /// Service type (`qpc.st`: RC 0, UC 1, UD 2; `bypass_hw::cmd::qp` constants).
    pub st: u8,
    /// Protection domain.
    pub pd: u32,
    /// State.
    pub state: QpState,
    /// UAR page its send doorbells must come through.
    pub uar: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// User index (CQE `srqn_uidx` with cqe_version 1).
    pub user_index: u32,
    /// The work queue buffer.
    pub wq: PageList,
    /// Its geometry.
    pub geom: WqGeometry,
    /// Doorbell record IOVA: dword 0 = RQ counter, dword 1 = SQ counter.
    pub dbr: u64,
    /// Connection attributes.
    pub attrs: QpAttrs,
    /// The IP header and UDP ports of the primary path (`transport::wire::qp_headers`), built on
    /// first use; cleared wherever `attrs` is replaced (the modify commands).
    pub(crate) headers: Option<(bypass_hw::roce::IpSpec, bypass_hw::roce::UdpPorts)>,
    /// SQ WQEBBs the device has consumed (`hw_sq_wqebb_counter`, 16 bits on the wire).
    pub sq_ci: u32,
    /// RQ WQEs the device has consumed (`hw_rq_counter`).
    pub rq_ci: u32,
    /// Requester (send side) transport state.
    pub req: ReqState,
    /// Responder (receive side) transport state.
    pub resp: RespState,
    /// The raw `qpc` as last created/modified (QUERY_QP returns it with live fields).
    pub qpc: Vec<u8>,
    /// Per-QP counters.
    pub counters: Counters,
    /// The SRQ its receives come from (`qpc.rq_type` SRQ, `srqn_rmpn_xrqn`); `None` for a QP
    /// with its own RQ.
    pub srqn: Option<u32>,
}

/// The object tables of a device the firmware fills and the data path reads (CQs and EQs are
/// the completions part's: `crate::events::Completions`).
#[derive(Debug, Clone)]
pub struct Objects {
    /// Protection domains.
    pub pds: Table<Pd>,
    /// UAR pages.
    pub uars: Table<Uar>,
    /// Memory keys, by index (`key >> 8`).
    pub mkeys: Table<Mkey>,
    /// Queue pairs.
    pub qps: Table<Qp>,
    /// Shared receive queues (RMPs).
    pub srqs: Table<Srq>,
}

impl Objects {
    /// Empty tables sized by `caps`; UAR indices from `first_uar` for `uar_pages` pages.
    pub fn new(caps: &Caps, first_uar: u32, uar_pages: u32) -> Self {
        let cap = |log: u8| 1u32.checked_shl(u32::from(log)).unwrap_or(u32::MAX);
        Self {
            // PD 0 is reserved by firmware (as QPN 0/1 are), so numbers start at 1.
            pds: Table::new(1, cap(caps.log_max_pd), 1 << 24),
            uars: Table::new(first_uar, uar_pages, first_uar + uar_pages),
            // mkey index 0 is never handed out, so no valid key is 0x000000xx.
            mkeys: Table::new(1, cap(caps.log_max_mkey), 1 << 24),
            // QPN 0 and 1 are the special SMI/GSI QPs.
            qps: Table::new(2, cap(caps.log_max_qp), 1 << 24),
            srqs: Table::new(1, cap(caps.log_max_srq), 1 << 24),
        }
    }

    /// Removes everything (TEARDOWN_HCA / DISABLE_HCA).
    pub fn clear(&mut self) {
        self.pds.clear();
        self.uars.clear();
        self.mkeys.clear();
        self.qps.clear();
        self.srqs.clear();
    }
}
