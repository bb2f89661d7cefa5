//! What a simulated device is: its identity, ports and capabilities.
//!
//! Owns: [`Profile`] and [`Caps`]. The firmware answers QUERY_HCA_CAP from `Caps` and enforces
//! its limits; nothing else in the sim hard-codes a limit. Must not: hold runtime state.
//!
//! The default profile resembles a ConnectX-5 with one RoCE port (values in the range the
//! kernel's `mlx5_core` sees on such a card), with the object counts of a ConnectX-6: as
//! published `ibv_devinfo -v` output shows them, a ConnectX-6 (vendor_part_id 4123, fw
//! 20.29.1016, device_cap_flags 0xe97e1c36) has max_qp 262144 = 2^18 (openucx/ucx issue #8229),
//! and mlx5 devices of the same device_cap_flags report max_cq, max_mr and max_pd 16777216 =
//! 2^24 (rapidsai/ucx-py issue #361; the ConnectX-5 of open-mpi/ompi pull #6137 shows the same
//! three). Nothing in the sim is sized by these counts up front (`table.rs`): an object costs
//! memory when it is created, not when the capability allows it.

/// Device capabilities, as `cmd_hca_cap` reports them (field names from `mlx5_ifc.h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// log2 of the largest WQ (in WQEBBs / RQ WQEs).
    pub log_max_qp_sz: u8,
    /// log2 of the number of QPs.
    pub log_max_qp: u8,
    /// log2 of the largest CQ (in CQEs).
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
    /// Largest send WQE in bytes (`max_wqe_sz_sq`).
    pub max_wqe_sz_sq: u16,
    /// Largest receive WQE in bytes (`max_wqe_sz_rq`).
    pub max_wqe_sz_rq: u16,
    /// log2 of the BlueFlame register size (bytes).
    pub log_bf_reg_size: u8,
    /// Atomic operations supported.
    pub atomic: bool,
    /// RoCE supported.
    pub roce: bool,
    /// UD QPs supported.
    pub ud: bool,
    /// UC QPs supported (`cmd_hca_cap.uc`; every ConnectX has them).
    pub uc: bool,
    /// CQE version (1: CQEs carry the user index).
    pub cqe_version: u8,
    /// Fast teardown supported.
    pub fast_teardown: bool,
    /// GID table entries per port.
    pub gid_table_size: u16,
    /// P_Key table entries per port.
    pub pkey_table_size: u16,
    /// log2 of the most WQEs in an SRQ (`log_max_srq_sz`).
    pub log_max_srq_sz: u8,
    /// log2 of the number of SRQs (`log_max_srq`).
    pub log_max_srq: u8,
    /// log2 of the largest MTT mkey page (`cmd_hca_cap_2.max_mkey_log_entity_size_mtt`);
    /// CREATE_MKEY refuses a larger `log_page_size`.
    pub max_mkey_page_shift: u8,
    /// The congestion commands are allowed (`cc_query_allowed` and `cc_modify_allowed`).
    pub cong_control: bool,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            log_max_qp_sz: 15,
            // ConnectX-6: max_qp 262144 (openucx/ucx #8229).
            log_max_qp: 18,
            log_max_cq_sz: 22,
            // max_cq, max_mr, max_pd 16777216 (rapidsai/ucx-py #361).
            log_max_cq: 24,
            log_max_eq_sz: 22,
            log_max_eq: 6,
            log_max_mkey: 24,
            log_max_pd: 24,
            log_max_msg: 30,
            log_max_ra_req_qp: 4,
            log_max_ra_res_qp: 4,
            max_wqe_sz_sq: 1024,
            max_wqe_sz_rq: 512,
            log_bf_reg_size: 9,
            atomic: true,
            roce: true,
            ud: true,
            uc: true,
            cqe_version: 1,
            fast_teardown: true,
            gid_table_size: 16,
            pkey_table_size: 1,
            // A ConnectX-6 Lx (vendor_part_id 4127): max_srq 8388608, max_srq_wr 32767
            // (openucx/ucx #10317).
            log_max_srq_sz: 15,
            log_max_srq: 23,
            // The most `mkc.log_page_size` carries without `umr_log_entity_size_5`.
            max_mkey_page_shift: 31,
            cong_control: true,
        }
    }
}

/// One Ethernet/RoCE port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// MAC address.
    pub mac: [u8; 6],
    /// Largest IB path MTU in bytes (256..=4096).
    pub max_mtu: u32,
    /// Ethernet (netdev) MTU in bytes at reset: the largest IP packet the port sends or
    /// takes. The firmware reports it plus the 22 L2 bytes as the NIC vport's `mtu`; the
    /// port's active RoCE MTU follows from it (kernel `iboe_get_mtu`).
    pub eth_mtu: u32,
    /// GID table (RoCE v2 GIDs: IPv6 or IPv4-mapped addresses).
    pub gids: Vec<[u8; 16]>,
}

/// A simulated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Firmware version: major, minor, subminor.
    pub fw_rev: (u16, u16, u16),
    /// PCI device id (0x1017 = ConnectX-5).
    pub device_id: u16,
    /// Ports (1 or 2).
    pub ports: Vec<Port>,
    /// Capabilities.
    pub caps: Caps,
    /// Pages the firmware asks for at boot (QUERY_PAGES op_mod BOOT).
    pub boot_pages: u32,
    /// Pages the firmware asks for before INIT_HCA (QUERY_PAGES op_mod INIT).
    pub init_pages: u32,
    /// MSI-X vectors.
    pub msix_vectors: u16,
    /// UAR pages in BAR0 the firmware can hand out (ALLOC_UAR).
    pub uar_pages: u32,
    /// Index of the first allocatable UAR page: pages below hold the init segment and other
    /// registers (BAR0 offsets 0x0000-0x2fff are the init segment, timer and clock pages).
    pub first_uar: u32,
    /// The port's line rate, Mb/s: the highest rate the reaction point lets a QP recover to
    /// (`rpg_max_rate` 0) and the rate paced QPs are released at (`cong::rp`).
    pub line_rate_mbps: u64,
}

impl Profile {
    /// An IPv4-mapped RoCE v2 GID (`::ffff:a.b.c.d`), the form rxe and mlx5 use for IPv4.
    pub fn ipv4_gid(addr: [u8; 4]) -> [u8; 16] {
        bypass_hw::roce::ip::ipv4_to_gid(addr)
    }

    /// True if `gid` is in one of this device's ports' GID tables: a packet to it is ours.
    pub fn owns_gid(&self, gid: &[u8; 16]) -> bool {
        self.ports.iter().any(|p| p.gids.contains(gid))
    }

    /// The default one-port device with MAC and GID derived from `id` (10.0.0.`id`), so two
    /// devices made with different ids can talk to each other.
    pub fn with_id(id: u8) -> Self {
        Self {
            fw_rev: (16, 35, 1012),
            device_id: 0x1017,
            ports: vec![Port {
                mac: [0x02, 0x00, 0x00, 0x00, 0x00, id],
                max_mtu: 4096,
                // Hosts set up for RoCE run jumbo frames: room for a 4096-byte path MTU.
                eth_mtu: 9000,
                gids: vec![Self::ipv4_gid([10, 0, 0, id])],
            }],
            caps: Caps::default(),
            boot_pages: 16,
            init_pages: 32,
            msix_vectors: 8,
            uar_pages: 64,
            first_uar: 8,
            line_rate_mbps: 100_000,
        }
    }

    /// Size of BAR0 in bytes: every UAR page index below `first_uar + uar_pages`.
    pub fn bar0_len(&self) -> u64 {
        u64::from(self.first_uar + self.uar_pages) * 4096
    }
}

impl Default for Profile {
    fn default() -> Self {
        Self::with_id(1)
    }
}
