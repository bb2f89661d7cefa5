//! An open mlx5 function: bring-up on [`Hca::open`], teardown on drop, and what later layers
//! need from it (commands, DMA memory, capabilities, ports, the UAR page, the completion EQ).
//!
//! Owns: [`Hca`] (the bring-up sequence and its reverse), [`Caps`], [`Port`], [`DeviceInfo`],
//! [`HcaConfig`]. Must not: create PDs, MRs, CQs or QPs (the resource modules build on the
//! crate's command queue and [`Hca::alloc_dma`]); nor hand the raw command queue or the
//! device seam to safe code ([`Hca::cmd`] and [`Hca::backend`] are `unsafe`, their contract
//! written on them).
//!
//! Order (rdma-core `providers/mlx5/mlx5_vfio.c` `mlx5_vfio_alloc_context` →
//! `mlx5_vfio_init_cmd_interface`, `mlx5_vfio_setup_function`, `create_async_eqs`): command
//! queue and `initializing`, ENABLE_HCA, ISSI, boot pages, HOST_ENDIANNESS, general and RoCE
//! caps, init pages, INIT_HCA, RoCE enable on the NIC vport, ALLOC_UAR, the async EQ (CMD,
//! PAGE_REQUEST, CQ/QP errors, port change, COMM_EST ...) on vector 0, armed; then commands
//! complete by event. bypass adds one completion EQ per further MSI-X vector (vectors 1..=n,
//! `num_comp_vectors`), as the kernel's `mlx5_core` `eq.c` sizes them (`get_num_eqs`: the
//! completion vectors the IRQ table offers, at most the device's EQs less the async ones;
//! `create_comp_eqs`: one EQ per vector), capped by [`HcaConfig::max_comp_vectors`]. Teardown runs the
//! reverse (`mlx5_vfio_free_context`): the EQs, DEALLOC_UAR, TEARDOWN_HCA (graceful), every
//! page taken back until QUERY_PAGES reports none, DISABLE_HCA, then every DMA region
//! unmapped. Teardown errors are logged, never panicked.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bypass_hw::cmd::caps::{CmdHcaCap, RoceCap, port_type};
use bypass_hw::cmd::hca::TeardownProfile;
use bypass_hw::cmd::pages::QueryPagesOpMod;
use bypass_hw::eqe::EventType;
use bypass_hw::init_seg as iseg;

use crate::backend::{Backend, Progress};
use crate::bringup;
use crate::cmdq::{CmdQueue, CmdStats, CompletionMode, DEFAULT_CMD_TIMEOUT};
use crate::cq_events::{self, CqRouter};
use crate::dma::{DmaBuf, DmaMapper};
use crate::eq::{AsyncEvent, CompletionEq, EventQueue};
use crate::error::Result;
use crate::limits::{Resource, refused};
use crate::pages::{self, PagePool};
use crate::qp_attr::{QpType, SendLimits};

/// Events the async EQ subscribes to (rdma-core subscribes CMD and PAGE_REQUEST; bypass adds
/// the asynchronous errors and state events a verbs user must see).
const ASYNC_EVENTS: [EventType; 14] = [
    EventType::CMD,
    EventType::PAGE_REQUEST,
    EventType::CQ_ERROR,
    EventType::PORT_CHANGE,
    EventType::INTERNAL_ERROR,
    EventType::WQ_CATAS_ERROR,
    EventType::WQ_INVAL_REQ_ERROR,
    EventType::WQ_ACCESS_ERROR,
    EventType::PATH_MIG,
    EventType::PATH_MIG_FAILED,
    EventType::COMM_EST,
    EventType::SQ_DRAINED,
    // SRQs (`mlx5_ib` `srq_cmd.c` `srq_event_notifier`, `qp.c` `mlx5_ib_qp_event`).
    EventType::SRQ_LIMIT,
    EventType::LAST_WQE,
];

/// Knobs for [`Hca::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcaConfig {
    /// How long one command may take.
    pub cmd_timeout: Duration,
    /// log2 of the async EQ's entries (rdma-core: roundup_pow2(32 + 0x80) = 256).
    pub async_eq_log_size: u8,
    /// log2 of the completion EQ's entries.
    pub completion_eq_log_size: u8,
    /// Create the completion EQs (needs a second MSI-X vector).
    pub completion_eq: bool,
    /// The most completion EQs (one per MSI-X vector beyond vector 0) to create. The kernel
    /// creates one per online CPU the IRQ table covers; a user-space driver's threads are
    /// fewer, and each EQ pins its ring.
    pub max_comp_vectors: u16,
    /// The most 4 KiB pages the driver lends the firmware (MANAGE_PAGES GIVE), at bring-up
    /// and at run time together: a request beyond it is refused with
    /// [`DriverError::FirmwarePagesLimit`] and nothing of it is given. The kernel lends what
    /// the firmware asks for; a bound keeps a firmware that keeps asking from pinning all of
    /// host memory.
    pub max_firmware_pages: usize,
}

/// Default [`HcaConfig::max_firmware_pages`]: 2^20 pages, 4 GiB (a ConnectX-6 asks for tens
/// of MiB at bring-up).
pub const DEFAULT_MAX_FIRMWARE_PAGES: usize = 1 << 20;

impl Default for HcaConfig {
    fn default() -> Self {
        Self {
            cmd_timeout: DEFAULT_CMD_TIMEOUT,
            async_eq_log_size: 8,
            completion_eq_log_size: 9,
            completion_eq: true,
            max_comp_vectors: 8,
            max_firmware_pages: DEFAULT_MAX_FIRMWARE_PAGES,
        }
    }
}

/// The largest CQ the driver creates, log2 of CQEs, whatever `log_max_cq_sz` says: 2^24
/// CQEs of 64 bytes are 1 GiB of ring.
pub const MAX_LOG_CQ_SIZE: u8 = 24;

/// The capabilities later layers size things by (`cmd_hca_cap` and `roce_cap` fields, named
/// as in `mlx5_ifc.h`), plus the raw pages for anything else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    /// log2 of the largest WQ (WQEBBs / RQ WQEs).
    pub log_max_qp_sz: u8,
    /// log2 of the number of QPs.
    pub log_max_qp: u8,
    /// log2 of the largest CQ.
    pub log_max_cq_sz: u8,
    /// log2 of the number of CQs.
    pub log_max_cq: u8,
    /// log2 of the largest EQ.
    pub log_max_eq_sz: u8,
    /// log2 of the number of EQs.
    pub log_max_eq: u8,
    /// log2 of the number of mkeys.
    pub log_max_mkey: u8,
    /// log2 of the number of PDs.
    pub log_max_pd: u8,
    /// log2 of the largest message.
    pub log_max_msg: u8,
    /// log2 of outstanding RDMA READ/atomic requests as requester.
    pub log_max_ra_req_qp: u8,
    /// log2 of outstanding RDMA READ/atomic requests as responder.
    pub log_max_ra_res_qp: u8,
    /// log2 of the BlueFlame register size in bytes.
    pub log_bf_reg_size: u8,
    /// BlueFlame supported.
    pub bf: bool,
    /// Largest send WQE in bytes.
    pub max_wqe_sz_sq: u16,
    /// Largest receive WQE in bytes.
    pub max_wqe_sz_rq: u16,
    /// Atomic operations.
    pub atomic: bool,
    /// RoCE.
    pub roce: bool,
    /// RC QPs.
    pub rc: bool,
    /// UD QPs.
    pub ud: bool,
    /// UC QPs.
    pub uc: bool,
    /// CQE version (1: CQEs carry the user index).
    pub cqe_version: u8,
    /// Fast teardown.
    pub fast_teardown: bool,
    /// Port type (`port_type::ETH` = 1, IB = 0).
    pub port_type: u8,
    /// Physical ports.
    pub num_ports: u8,
    /// GID table entries per port (decoded: `8 << gid_table_size`).
    pub gid_table_len: usize,
    /// Local CA ACK delay (for the QP's timeout).
    pub local_ca_ack_delay: u8,
    /// Device clock in kHz (CQE timestamps).
    pub device_frequency_khz: u32,
    /// RoCE: software may pick the UDP source port.
    pub sw_r_roce_src_udp_port: bool,
    /// RoCE: supported version mask (bit 2 = v2).
    pub roce_version: u8,
    /// The general capability page in force (4 KiB, `cmd_hca_cap`).
    pub general_page: Vec<u8>,
    /// The RoCE capability page in force, if the device has RoCE.
    pub roce_page: Option<Vec<u8>>,
    /// `cmd_hca_cap_2.max_mkey_log_entity_size_mtt` (0: not reported, or no GENERAL_2
    /// page); read it through [`Caps::mkey_max_page_shift`].
    pub max_mkey_log_entity_size_mtt: u8,
    /// The congestion queries (QUERY_CONG_STATUS/PARAMS/STATISTICS) are allowed.
    pub cc_query_allowed: bool,
    /// MODIFY_CONG_STATUS / MODIFY_CONG_PARAMS are allowed.
    pub cc_modify_allowed: bool,
}

impl Caps {
    /// Parses the capability pages (missing bytes read as zero: never fails).
    pub fn parse(general: &[u8], roce: Option<&[u8]>) -> Self {
        let g = CmdHcaCap::wrap_unchecked(general);
        let r = roce.map(RoceCap::wrap_unchecked);
        let b = |v: u32| v != 0;
        let u8v = |v: u32| u8::try_from(v).unwrap_or(u8::MAX);
        let gid_code = g.gid_table_size();
        Self {
            log_max_qp_sz: u8v(g.log_max_qp_sz()),
            log_max_qp: u8v(g.log_max_qp()),
            log_max_cq_sz: u8v(g.log_max_cq_sz()),
            log_max_cq: u8v(g.log_max_cq()),
            log_max_eq_sz: u8v(g.log_max_eq_sz()),
            log_max_eq: u8v(g.log_max_eq()),
            log_max_mkey: u8v(g.log_max_mkey()),
            log_max_pd: u8v(g.log_max_pd()),
            log_max_msg: u8v(g.log_max_msg()),
            log_max_ra_req_qp: u8v(g.log_max_ra_req_qp()),
            log_max_ra_res_qp: u8v(g.log_max_ra_res_qp()),
            log_bf_reg_size: u8v(g.log_bf_reg_size()),
            bf: b(g.bf()),
            max_wqe_sz_sq: u16::try_from(g.max_wqe_sz_sq()).unwrap_or(u16::MAX),
            max_wqe_sz_rq: u16::try_from(g.max_wqe_sz_rq()).unwrap_or(u16::MAX),
            atomic: b(g.atomic()),
            roce: b(g.roce()),
            rc: b(g.rc()),
            ud: b(g.ud()),
            uc: b(g.uc()),
            cqe_version: u8v(g.cqe_version()),
            fast_teardown: b(g.fast_teardown()),
            port_type: u8v(g.port_type()),
            num_ports: u8v(g.num_ports()),
            // Kernel `mlx5_get_gid_table_len`: 8 << code for codes 0..=4, else none.
            gid_table_len: if gid_code <= 4 { 8 << gid_code } else { 0 },
            local_ca_ack_delay: u8v(g.local_ca_ack_delay()),
            device_frequency_khz: g.device_frequency_khz(),
            sw_r_roce_src_udp_port: r.as_ref().is_some_and(|r| b(r.sw_r_roce_src_udp_port())),
            roce_version: r.as_ref().map_or(0, |r| u8v(r.roce_version())),
            general_page: general.to_vec(),
            roce_page: roce.map(<[u8]>::to_vec),
            max_mkey_log_entity_size_mtt: 0,
            cc_query_allowed: b(g.cc_query_allowed()),
            cc_modify_allowed: b(g.cc_modify_allowed()),
        }
    }

    /// The largest MTT page shift memory keys may use: the device's
    /// `max_mkey_log_entity_size_mtt`, or 31 where it reports none or more than
    /// `mkc.log_page_size` carries (kernel `mlx5_ib.h` `get_max_log_entity_size_cap`; this
    /// driver does not read `umr_log_entity_size_5`), never below 4 KiB.
    pub fn mkey_max_page_shift(&self) -> u32 {
        match u32::from(self.max_mkey_log_entity_size_mtt) {
            0 => crate::mtt_pages::MAX_PAGE_SHIFT,
            n => n.clamp(
                crate::mtt_pages::MIN_PAGE_SHIFT,
                crate::mtt_pages::MAX_PAGE_SHIFT,
            ),
        }
    }

    /// The most CQEs one CQ holds: `2^log_max_cq_sz`, within the driver's
    /// [`MAX_LOG_CQ_SIZE`].
    pub fn max_cqe(&self) -> u32 {
        1u32 << self.log_max_cq_sz.min(MAX_LOG_CQ_SIZE)
    }

    /// The most inline data an RC send can carry: what [`SendLimits`] leaves in the largest
    /// send WQE (`max_wqe_sz_sq`, and at most the 63 segments a ctrl segment counts) after
    /// the ctrl, remote-address and atomic segments and the 4-byte inline header; the
    /// value `QpGeometry::new` accepts for an RC QP. UD and UC QPs take what
    /// [`Caps::send_limits`] gives for them.
    pub fn max_inline_data(&self) -> usize {
        self.send_limits(QpType::Rc).max_inline_data as usize
    }

    /// The most SGEs and inline bytes one send WQE of `qp_type` holds on this device.
    pub fn send_limits(&self, qp_type: QpType) -> SendLimits {
        SendLimits::new(qp_type, usize::from(self.max_wqe_sz_sq))
    }

    /// The BlueFlame register size in bytes (`1 << log_bf_reg_size`), 0 without BlueFlame.
    pub fn bf_reg_size(&self) -> usize {
        if self.bf {
            1usize
                .checked_shl(u32::from(self.log_bf_reg_size))
                .unwrap_or(0)
        } else {
            0
        }
    }
}

/// One port as the queries at bring-up saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Port number (1-based).
    pub num: u8,
    /// `hca_vport_context.port_state` (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).
    pub state: u32,
    /// Permanent MAC address.
    pub mac: [u8; 6],
    /// NIC (Ethernet) MTU in bytes.
    pub nic_mtu: u32,
    /// GID table (index = GID index); all-zero entries are unused.
    pub gids: Vec<[u8; 16]>,
}

impl Port {
    /// The port state's name (`ibv_port_state` style).
    pub fn state_name(&self) -> &'static str {
        match self.state {
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            _ => "UNKNOWN",
        }
    }

    /// The Ethernet (netdev) MTU: the NIC vport MTU less the 22 bytes of L2 header, VLAN tag
    /// and FCS it counts (kernel `en.h` `MLX5E_HW2SW_MTU`).
    pub fn eth_mtu(&self) -> u32 {
        self.nic_mtu.saturating_sub(22)
    }

    /// The largest IB MTU (256..4096) whose packets fit the Ethernet MTU with RoCEv2 headers
    /// (kernel `iboe_get_mtu` on the netdev MTU: GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH
    /// 28 + ICRC 4 = 96 bytes), 0 when not even 256 fits.
    pub fn active_mtu(&self) -> u32 {
        bypass_hw::roce::mtu::active_mtu(self.eth_mtu()).unwrap_or(0)
    }

    /// The GIDs in use, with their index.
    pub fn valid_gids(&self) -> impl Iterator<Item = (usize, &[u8; 16])> {
        self.gids.iter().enumerate().filter(|(_, g)| **g != [0; 16])
    }
}

/// A summary of the device for `bypass devinfo` (like `ibv_devinfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend's name.
    pub name: String,
    /// Firmware version `major.minor.subminor`.
    pub fw_version: String,
    /// Hardware id from the health buffer (PCI device id).
    pub hw_id: u32,
    /// The UAR page the driver uses.
    pub uar: u32,
    /// Capabilities.
    pub caps: Caps,
    /// Ports.
    pub ports: Vec<Port>,
}

fn fmt_gid(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| {
            format!(
                "{:02x}{:02x}",
                c.first().copied().unwrap_or(0),
                c.get(1).copied().unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join(":")
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.caps;
        writeln!(f, "hca_id:\t{}", self.name)?;
        writeln!(
            f,
            "\ttransport:\t\t{}",
            if c.port_type == port_type::ETH as u8 {
                "Ethernet (RoCE)"
            } else {
                "InfiniBand"
            }
        )?;
        writeln!(f, "\tfw_ver:\t\t\t{}", self.fw_version)?;
        // `ibv_devinfo`'s names: the part id is the PCI device id (`vendor_part_id`), and
        // `hw_ver` the revision, which mlx5 functions report as 0.
        writeln!(f, "\tvendor_part_id:\t\t{}", self.hw_id)?;
        writeln!(f, "\thw_ver:\t\t\t0x0")?;
        writeln!(f, "\tphys_port_cnt:\t\t{}", c.num_ports)?;
        writeln!(f, "\tmax_qp:\t\t\t{}", 1u64 << c.log_max_qp.min(63))?;
        writeln!(f, "\tmax_qp_wr:\t\t{}", 1u64 << c.log_max_qp_sz.min(63))?;
        writeln!(f, "\tmax_cq:\t\t\t{}", 1u64 << c.log_max_cq.min(63))?;
        writeln!(f, "\tmax_cqe:\t\t{}", c.max_cqe())?;
        writeln!(f, "\tmax_mr:\t\t\t{}", 1u64 << c.log_max_mkey.min(63))?;
        writeln!(f, "\tmax_pd:\t\t\t{}", 1u64 << c.log_max_pd.min(63))?;
        writeln!(f, "\tmax_msg_sz:\t\t{:#x}", 1u64 << c.log_max_msg.min(63))?;
        writeln!(f, "\tmax_inline_data:\t{}", c.max_inline_data())?;
        writeln!(
            f,
            "\tatomic_cap:\t\t{}",
            if c.atomic {
                "ATOMIC_HCA"
            } else {
                "ATOMIC_NONE"
            }
        )?;
        for p in &self.ports {
            writeln!(f, "\t\tport:\t{}", p.num)?;
            writeln!(f, "\t\t\tstate:\t\t\t{} ({})", p.state_name(), p.state)?;
            writeln!(f, "\t\t\tactive_mtu:\t\t{}", p.active_mtu())?;
            let m = p.mac;
            writeln!(
                f,
                "\t\t\tmac:\t\t\t{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            )?;
            for (i, g) in p.valid_gids() {
                writeln!(f, "\t\t\tGID[{i:3}]:\t\t{}", fmt_gid(g))?;
            }
        }
        Ok(())
    }
}

/// How far bring-up got (what teardown must undo).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Stage {
    enabled: bool,
    initialized: bool,
}

/// An open mlx5 function. `Send + Sync`: commands serialise on the command queue's mutex.
pub struct Hca {
    backend: Arc<dyn Backend>,
    dma: Arc<DmaMapper>,
    cmd: CmdQueue,
    pages: Mutex<PagePool>,
    comp_eqs: Vec<CompletionEq>,
    cq_router: CqRouter,
    async_core: std::sync::OnceLock<Arc<crate::async_events::AsyncCore>>,
    uar: Option<u32>,
    caps: Caps,
    ports: Vec<Port>,
    fw_version: (u16, u16, u16),
    hw_id: u32,
    stage: Stage,
    bfregs: crate::bfregs::BfregPool,
    dbrecs: crate::dbrec::DbrecPool,
}

impl fmt::Debug for Hca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hca")
            .field("backend", &self.backend.name())
            .field("uar", &self.uar)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl Hca {
    /// Brings the function up with the default [`HcaConfig`].
    pub fn open(backend: Arc<dyn Backend>) -> Result<Self> {
        Self::open_with(backend, HcaConfig::default())
    }

    /// Brings the function up (see the module doc for the order). On failure everything done
    /// so far is undone before the error returns.
    pub fn open_with(backend: Arc<dyn Backend>, config: HcaConfig) -> Result<Self> {
        let span = tracing::info_span!("hca_open", device = %backend.name());
        let _g = span.enter();
        let dma = DmaMapper::new(backend.clone());
        let cmd = CmdQueue::new(backend.clone(), dma.clone(), config.cmd_timeout)?;
        let fw = u32::from_be(backend.read32(iseg::FW_REV as u64));
        let sub = u32::from_be(backend.read32(iseg::CMDIF_REV_FW_SUB as u64)) & 0xffff;
        let hw_id = u32::from_be(backend.read32(iseg::HEALTH_HW_ID as u64));
        let mut hca = Self {
            pages: Mutex::new(PagePool::with_budget(
                dma.clone(),
                config.max_firmware_pages,
            )),
            backend,
            dma,
            cmd,
            comp_eqs: Vec::new(),
            cq_router: CqRouter::default(),
            async_core: std::sync::OnceLock::new(),
            uar: None,
            caps: Caps::default(),
            ports: Vec::new(),
            fw_version: ((fw & 0xffff) as u16, (fw >> 16) as u16, sub as u16),
            hw_id,
            stage: Stage::default(),
            bfregs: crate::bfregs::BfregPool::default(),
            dbrecs: crate::dbrec::DbrecPool::default(),
        };
        hca.bring_up(&config)?;
        tracing::info!(fw = %hca.fw_version_string(), uar = ?hca.uar, "HCA up");
        Ok(hca)
    }

    fn bring_up(&mut self, config: &HcaConfig) -> Result<()> {
        let cmd = &self.cmd;
        bringup::enable_hca(cmd)?;
        self.stage.enabled = true;
        bringup::set_issi(cmd)?;
        {
            let mut pool = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
            pages::satisfy(cmd, &mut pool, QueryPagesOpMod::BOOT)?;
        }
        bringup::set_host_endianness(cmd)?;
        let (general, roce) = bringup::configure_caps(cmd)?;
        self.caps = Caps::parse(&general, roce.as_deref());
        self.caps.max_mkey_log_entity_size_mtt = bringup::mkey_max_page_shift(cmd, &general)?;
        {
            let mut pool = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
            pages::satisfy(cmd, &mut pool, QueryPagesOpMod::INIT)?;
        }
        bringup::init_hca(cmd)?;
        self.stage.initialized = true;
        if u32::from(self.caps.port_type) == port_type::ETH {
            bringup::enable_roce(cmd)?;
        }
        let caps = &self.caps;
        let uar = bringup::alloc_uar(cmd).map_err(|e| refused(e, Resource::Uar, caps))?;
        self.uar = Some(uar);
        let mut eq = EventQueue::create(
            cmd,
            &self.dma,
            uar,
            config.async_eq_log_size,
            0,
            &ASYNC_EVENTS,
        )
        .map_err(|e| refused(e, Resource::Eq, caps))?;
        eq.update_ci(&*self.backend, true);
        cmd.attach_eq(eq);
        if config.completion_eq {
            let eqs = 1u32
                .checked_shl(u32::from(self.caps.log_max_eq))
                .unwrap_or(u32::MAX);
            // Vector 0 and one EQ belong to the async EQ (kernel `get_num_eqs`).
            let n = u32::from(self.backend.irq_vectors().saturating_sub(1))
                .min(eqs.saturating_sub(1))
                .min(u32::from(config.max_comp_vectors));
            for v in 1..=n as u16 {
                let eq =
                    EventQueue::create(cmd, &self.dma, uar, config.completion_eq_log_size, v, &[])
                        .map_err(|e| refused(e, Resource::Eq, caps))?;
                let ceq = CompletionEq::new(eq, self.backend.clone());
                ceq.arm();
                self.comp_eqs.push(ceq);
            }
        }
        self.ports = self.query_ports()?;
        Ok(())
    }

    fn query_ports(&self) -> Result<Vec<Port>> {
        let (mac, nic_mtu) = bringup::query_nic_vport(&self.cmd)?;
        (1..=self.caps.num_ports.max(1))
            .map(|num| {
                let q = bringup::query_port(&self.cmd, num, self.caps.gid_table_len)?;
                Ok(Port {
                    num,
                    state: q.state,
                    mac,
                    nic_mtu,
                    gids: q.gids,
                })
            })
            .collect()
    }

    /// The command queue: `hca.cmd().exec(input, out_len)` runs any command.
    ///
    /// An escape hatch for research and driver-level tests: a raw command names physical
    /// addresses (IOVAs), queue numbers and keys that nothing checks against what this
    /// process owns.
    ///
    /// # Safety
    /// Every command the caller runs through the returned queue must name only IOVAs the
    /// caller's own DMA buffers map (it must not make the device read or write memory that a
    /// Rust reference covers, nor memory a live driver object owns: rings, doorbell records,
    /// another object's buffers), and must not modify or destroy an object (QP, CQ, SRQ, MR,
    /// PD, UAR, EQ) that a live driver object owns. Commands that only query are always
    /// fine. For the counters and the completion mode use [`Hca::cmd_stats`] and
    /// [`Hca::cmd_mode`], which are safe.
    ///
    /// Safe code cannot reach it:
    /// ```compile_fail,E0133
    /// fn raw(hca: &bypass_driver::Hca) {
    ///     let _ = hca.cmd();
    /// }
    /// ```
    pub unsafe fn cmd(&self) -> &CmdQueue {
        &self.cmd
    }

    /// The command queue for the driver's own resource modules, which build every command
    /// from typed, checked parts.
    pub(crate) fn cmdq(&self) -> &CmdQueue {
        &self.cmd
    }

    /// Runs `input`, a command that creates a `resource` object (`out_len` bytes out): an
    /// exhaustion status becomes [`crate::DriverError::ResourceLimit`], naming the limit in
    /// force and its knob ([`crate::limits::refused`]); other errors are returned as they are.
    pub(crate) fn exec_create(
        &self,
        input: &[u8],
        out_len: usize,
        resource: crate::limits::Resource,
    ) -> Result<Vec<u8>> {
        self.cmd
            .exec(input, out_len)
            .map_err(|e| crate::limits::refused(e, resource, &self.caps))
    }

    /// The command interface's counters (commands run, completed by polling or by event,
    /// failed).
    pub fn cmd_stats(&self) -> CmdStats {
        self.cmd.stats()
    }

    /// How commands complete now: by polling until the async EQ is up, by event after.
    pub fn cmd_mode(&self) -> CompletionMode {
        self.cmd.mode()
    }

    /// `len` bytes of zeroed, pinned DMA memory, mapped for the device.
    pub fn alloc_dma(&self, len: usize) -> Result<DmaBuf> {
        self.dma.alloc(len)
    }

    /// The QPs' BlueFlame registers and their UAR pages (`bfregs.rs`).
    pub fn bfregs(&self) -> &crate::bfregs::BfregPool {
        &self.bfregs
    }

    /// The doorbell records' pages (`dbrec.rs`).
    pub fn dbrecs(&self) -> &crate::dbrec::DbrecPool {
        &self.dbrecs
    }

    /// The DMA allocator (for buffers that outlive a borrow of the `Hca`).
    pub fn dma(&self) -> &Arc<DmaMapper> {
        &self.dma
    }

    /// The device seam: MMIO for doorbells, DMA mappings, interrupts.
    ///
    /// An escape hatch: the seam writes any BAR0 offset (doorbells, the command queue's
    /// doorbell, UAR pages) and maps or unmaps any IOVA.
    ///
    /// # Safety
    /// The caller must not, through the returned backend, unmap or remap an IOVA that a live
    /// driver object maps, nor write a doorbell or BlueFlame register (it would make the device
    /// execute a WQE or command the driver did not post, reading or writing memory Rust
    /// code owns). Reading registers, counters and [`Backend::progress`] is fine; the safe
    /// ways to those are [`Hca::progress`] and [`Hca::is_stepped`].
    ///
    /// Safe code cannot reach it:
    /// ```compile_fail,E0133
    /// fn raw(hca: &bypass_driver::Hca) {
    ///     let _ = hca.backend();
    /// }
    /// ```
    pub unsafe fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The device seam for the driver's own modules (doorbells of the rings they own, their
    /// interrupt vectors).
    pub(crate) fn dev(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Lets the device move: a stepped sim runs its world until idle; hardware and threaded
    /// sims ignore it ([`Backend::progress`]).
    pub fn progress(&self) -> Progress {
        self.backend.progress()
    }

    /// True when the device only moves inside [`Hca::progress`] (a stepped sim): a waiter
    /// must call it rather than sleep ([`Backend::is_stepped`]).
    pub fn is_stepped(&self) -> bool {
        self.backend.is_stepped()
    }

    /// Capabilities in force.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Ports (index 0 = port 1).
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// Port `num` (1-based).
    pub fn port(&self, num: u8) -> Option<&Port> {
        self.ports.iter().find(|p| p.num == num)
    }

    /// The UAR page the driver uses (its BAR0 offset is `uar_index * 4096`); later layers
    /// pick BlueFlame registers in it. 0 only if bring-up never allocated one (impossible for
    /// an open `Hca`).
    pub fn uar_index(&self) -> u32 {
        self.uar.unwrap_or(0)
    }

    /// The EQ of completion vector 0 (MSI-X vector 1), if the device has a second vector and
    /// [`HcaConfig::completion_eq`] was set.
    pub fn completion_eq(&self) -> Option<&CompletionEq> {
        self.comp_eqs.first()
    }

    /// The completion EQs, index = completion vector (`ibv_create_cq`'s `comp_vector`); EQ
    /// `k` raises MSI-X vector `k + 1`.
    pub fn completion_eqs(&self) -> &[CompletionEq] {
        &self.comp_eqs
    }

    /// Completion vectors (`ibv_context.num_comp_vectors`).
    pub fn num_comp_vectors(&self) -> u32 {
        self.comp_eqs.len() as u32
    }

    /// Services the completion EQs: each completion event goes to its own CQ's channel (see
    /// `cq_events.rs`). Channels and `Cq::wait` call it; returns the events taken.
    pub fn service_completions(&self) -> usize {
        cq_events::service(&*self.backend, &self.comp_eqs, &self.cq_router)
    }

    pub(crate) fn cq_router(&self) -> &CqRouter {
        &self.cq_router
    }

    pub(crate) fn async_core(
        &self,
        make: impl FnOnce() -> Result<Arc<crate::async_events::AsyncCore>>,
    ) -> Result<Arc<crate::async_events::AsyncCore>> {
        if let Some(c) = self.async_core.get() {
            return Ok(c.clone());
        }
        let c = make()?;
        // Another thread may have won the race; its core is the one in use.
        Ok(self.async_core.get_or_init(|| c).clone())
    }

    /// Firmware version (major, minor, subminor).
    pub fn fw_version(&self) -> (u16, u16, u16) {
        self.fw_version
    }

    /// Firmware version as `major.minor.subminor`.
    pub fn fw_version_string(&self) -> String {
        let (a, b, c) = self.fw_version;
        format!("{a}.{b}.{c}")
    }

    /// Pages lent to the firmware now.
    pub fn firmware_pages(&self) -> usize {
        self.pages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pages_in_use()
    }

    /// A summary for `bypass devinfo`.
    pub fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.backend.name(),
            fw_version: self.fw_version_string(),
            hw_id: self.hw_id,
            uar: self.uar_index(),
            caps: self.caps.clone(),
            ports: self.ports.clone(),
        }
    }

    /// Processes the async EQ: answers page requests (give or take, MANAGE_PAGES) and
    /// returns the other events (CQ errors, port changes, QP events ...), oldest first. Call
    /// it when `backend().irq_fd(0)` is readable, or periodically.
    pub fn process_events(&self) -> Result<Vec<AsyncEvent>> {
        // Consume the vector's pending interrupt (a stepped sim also runs here).
        let _ = self.backend.wait_irq(0, Duration::ZERO)?;
        let (pages, events) = self.cmd.take_events();
        if pages != 0 {
            let mut pool = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
            pages::answer_request(&self.cmd, &mut pool, pages)?;
        }
        Ok(events)
    }

    /// Tears the function down (the reverse of bring-up), logging failures.
    fn shutdown(&mut self) {
        let span = tracing::info_span!("hca_close", device = %self.backend.name());
        let _g = span.enter();
        let log = |what: &str, r: Result<()>| {
            if let Err(e) = r {
                tracing::error!(error = %e, "teardown: {what} failed");
            }
        };
        for ceq in std::mem::take(&mut self.comp_eqs) {
            log(
                "DESTROY_EQ (completion)",
                ceq.into_inner().destroy(&self.cmd),
            );
        }
        // The async EQ carries command completions: go back to polling before destroying it.
        if let Some(eq) = self.cmd.detach_eq() {
            log("DESTROY_EQ (async)", eq.destroy(&self.cmd));
        }
        if let Some(uar) = self.uar.take() {
            log("DEALLOC_UAR", bringup::dealloc_uar(&self.cmd, uar));
        }
        if self.stage.initialized {
            log(
                "TEARDOWN_HCA",
                bringup::teardown_hca(&self.cmd, TeardownProfile::GRACEFUL_CLOSE),
            );
            self.stage.initialized = false;
        }
        let mut pool = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
        if self.stage.enabled {
            log("reclaiming pages", pages::reclaim_all(&self.cmd, &mut pool));
            log("DISABLE_HCA", bringup::disable_hca(&self.cmd));
            self.stage.enabled = false;
        }
        let left = pool.pages_in_use();
        if left > 0 {
            tracing::warn!(
                pages = left,
                "pages still lent to the firmware at teardown; freeing them after DISABLE_HCA"
            );
        }
        // Unmaps and frees every page block (the function is disabled: nothing uses them).
        *pool = PagePool::with_budget(self.dma.clone(), pool.budget());
    }
}

impl Drop for Hca {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `Hca` is shared across threads (`Arc<Hca>`): the control path serialises inside.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Hca>();
    assert_send_sync::<crate::dma::DmaBuf>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mkey_page_bound_follows_the_kernels_fallbacks() {
        let with = |n| Caps {
            max_mkey_log_entity_size_mtt: n,
            ..Caps::default()
        };
        assert_eq!(with(0).mkey_max_page_shift(), 31, "not reported");
        assert_eq!(with(21).mkey_max_page_shift(), 21);
        assert_eq!(with(40).mkey_max_page_shift(), 31, "beyond log_page_size");
        assert_eq!(with(5).mkey_max_page_shift(), 12, "never below 4 KiB");
    }
}
