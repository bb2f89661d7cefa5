//! Event queue entries: what the NIC (or the sim) writes into an EQ ring to report
//! completions on a CQ, command completions, page requests and asynchronous errors.
//!
//! Sources: the Linux kernel `include/linux/mlx5/device.h` (`struct mlx5_eqe` and the
//! `struct mlx5_eqe_*` members of `union ev_data`, `enum mlx5_event`,
//! `MLX5_EQE_OWNER_INIT_VAL`, `MLX5_PORT_CHANGE_SUBTYPE_*`, `MLX5_EVENT_QUEUE_TYPE_*`) and
//! rdma-core `providers/mlx5/mlx5_vfio.{c,h}` (`mlx5_eq_get_eqe`, the CMD and PAGE_REQUEST
//! handlers). Multi-byte fields are big-endian.
//!
//! Owns: [`Eqe`], its typed data views and [`EventType`], the EQE owner rule.
//! Must not: keep the consumer index or ring the EQ doorbell (see [`crate::doorbell`]).

use zerocopy::byteorder::big_endian::{U16, U32};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::impl_view;
use crate::wqe::named_codes;

named_codes! {
    /// The event type of an EQE (`mlx5_eqe.type`, byte 1).
    ///
    /// Values: the kernel's `include/linux/mlx5/device.h` `enum mlx5_event`
    /// (`MLX5_EVENT_TYPE_*`, without the prefix; `COMP` is spelled `COMPLETION` here). The
    /// same numbers index `create_eq_in.event_bitmask`.
    pub struct EventType(u8) {
        /// `MLX5_EVENT_TYPE_COMP`: a CQ has a new completion (data: [`EqeComp`]).
        COMPLETION = 0x00,
        /// `MLX5_EVENT_TYPE_PATH_MIG`: path migration succeeded (data: [`EqeQpSrq`]).
        PATH_MIG = 0x01,
        /// `MLX5_EVENT_TYPE_COMM_EST`: communication established on a QP (first packet in RTR).
        COMM_EST = 0x02,
        /// `MLX5_EVENT_TYPE_SQ_DRAINED`: the SQ is drained (SQD).
        SQ_DRAINED = 0x03,
        /// `MLX5_EVENT_TYPE_CQ_ERROR`: CQ overrun or access error (data: [`EqeCqErr`]).
        CQ_ERROR = 0x04,
        /// `MLX5_EVENT_TYPE_WQ_CATAS_ERROR`: catastrophic error on a QP's work queue.
        WQ_CATAS_ERROR = 0x05,
        /// `MLX5_EVENT_TYPE_PATH_MIG_FAILED`.
        PATH_MIG_FAILED = 0x07,
        /// `MLX5_EVENT_TYPE_INTERNAL_ERROR`: the device hit an internal error.
        INTERNAL_ERROR = 0x08,
        /// `MLX5_EVENT_TYPE_PORT_CHANGE`: port state changed (data: [`EqePortState`]).
        PORT_CHANGE = 0x09,
        /// `MLX5_EVENT_TYPE_CMD`: firmware command(s) completed (data: [`EqeCmd`]).
        CMD = 0x0a,
        /// `MLX5_EVENT_TYPE_PAGE_REQUEST`: firmware asks for or returns pages (data: [`EqePageReq`]).
        PAGE_REQUEST = 0x0b,
        /// `MLX5_EVENT_TYPE_PAGE_FAULT`: on-demand-paging page fault.
        PAGE_FAULT = 0x0c,
        /// `MLX5_EVENT_TYPE_NIC_VPORT_CHANGE`.
        NIC_VPORT_CHANGE = 0x0d,
        /// `MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED`.
        ESW_FUNCTIONS_CHANGED = 0x0e,
        /// `MLX5_EVENT_TYPE_VHCA_STATE_CHANGE`.
        VHCA_STATE_CHANGE = 0x0f,
        /// `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`: invalid request on a work queue.
        WQ_INVAL_REQ_ERROR = 0x10,
        /// `MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`: access error on a work queue.
        WQ_ACCESS_ERROR = 0x11,
        /// `MLX5_EVENT_TYPE_SRQ_CATAS_ERROR`.
        SRQ_CATAS_ERROR = 0x12,
        /// `MLX5_EVENT_TYPE_SRQ_LAST_WQE`: last WQE reached on a QP attached to an SRQ.
        LAST_WQE = 0x13,
        /// `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT`: the SRQ fell below its limit.
        SRQ_LIMIT = 0x14,
        /// `MLX5_EVENT_TYPE_GPIO_EVENT`.
        GPIO_EVENT = 0x15,
        /// `MLX5_EVENT_TYPE_PORT_MODULE_EVENT`: cable / module plugged, unplugged or in error.
        PORT_MODULE_EVENT = 0x16,
        /// `MLX5_EVENT_TYPE_TEMP_WARN_EVENT`.
        TEMP_WARN_EVENT = 0x17,
        /// `MLX5_EVENT_TYPE_XRQ_ERROR`.
        XRQ_ERROR = 0x18,
        /// `MLX5_EVENT_TYPE_REMOTE_CONFIG`.
        REMOTE_CONFIG = 0x19,
        /// `MLX5_EVENT_TYPE_DB_BF_CONGESTION`.
        DB_BF_CONGESTION = 0x1a,
        /// `MLX5_EVENT_TYPE_STALL_EVENT`.
        STALL_EVENT = 0x1b,
        /// `MLX5_EVENT_TYPE_DCT_DRAINED`.
        DCT_DRAINED = 0x1c,
        /// `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION`.
        DCT_KEY_VIOLATION = 0x1d,
        /// `MLX5_EVENT_TYPE_FPGA_ERROR`.
        FPGA_ERROR = 0x20,
        /// `MLX5_EVENT_TYPE_FPGA_QP_ERROR`.
        FPGA_QP_ERROR = 0x21,
        /// `MLX5_EVENT_TYPE_GENERAL_EVENT`.
        GENERAL_EVENT = 0x22,
        /// `MLX5_EVENT_TYPE_MONITOR_COUNTER`.
        MONITOR_COUNTER = 0x24,
        /// `MLX5_EVENT_TYPE_PPS_EVENT`.
        PPS_EVENT = 0x25,
        /// `MLX5_EVENT_TYPE_DEVICE_TRACER`.
        DEVICE_TRACER = 0x26,
        /// `MLX5_EVENT_TYPE_OBJECT_CHANGE`.
        OBJECT_CHANGE = 0x27,
    }
}

/// `MLX5_EQE_OWNER_INIT_VAL` (kernel `device.h`): the owner byte software writes into every EQE
/// when it creates the ring (`init_eq_buf` in the kernel's `core/eq.c`; rdma-core's mlx5_vfio
/// does the same). All other bytes are zero.
pub const EQE_OWNER_INIT_VAL: u8 = 0x1;

/// `MLX5_NUM_SPARE_EQE` (kernel `core/eq.c`, rdma-core `mlx5_vfio.h`): the consumer index must be
/// written to the EQ doorbell at least every this many entries, or the device reports overflow.
pub const MLX5_NUM_SPARE_EQE: u32 = 0x80;

/// `MLX5_EVENT_QUEUE_TYPE_QP` (kernel `device.h`): [`EqeQpSrq::queue_type`] of a QP.
pub const MLX5_EVENT_QUEUE_TYPE_QP: u8 = 0;
/// `MLX5_EVENT_QUEUE_TYPE_RQ`.
pub const MLX5_EVENT_QUEUE_TYPE_RQ: u8 = 1;
/// `MLX5_EVENT_QUEUE_TYPE_SQ`.
pub const MLX5_EVENT_QUEUE_TYPE_SQ: u8 = 2;

/// `MLX5_PORT_CHANGE_SUBTYPE_DOWN` (kernel `device.h`): `sub_type` of a PORT_CHANGE EQE.
pub const MLX5_PORT_CHANGE_SUBTYPE_DOWN: u8 = 1;
/// `MLX5_PORT_CHANGE_SUBTYPE_ACTIVE`.
pub const MLX5_PORT_CHANGE_SUBTYPE_ACTIVE: u8 = 4;
/// `MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED`.
pub const MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED: u8 = 5;
/// `MLX5_PORT_CHANGE_SUBTYPE_LID`.
pub const MLX5_PORT_CHANGE_SUBTYPE_LID: u8 = 6;
/// `MLX5_PORT_CHANGE_SUBTYPE_PKEY`.
pub const MLX5_PORT_CHANGE_SUBTYPE_PKEY: u8 = 7;
/// `MLX5_PORT_CHANGE_SUBTYPE_GUID`.
pub const MLX5_PORT_CHANGE_SUBTYPE_GUID: u8 = 8;
/// `MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG`.
pub const MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG: u8 = 9;

/// Bytes of event data in an EQE (`union ev_data`, kernel `device.h`: `__be32 raw[7]`).
pub const EQE_DATA_LEN: usize = 28;

/// `struct mlx5_eqe` (kernel `device.h`, 64 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Eqe {
    /// Reserved.
    pub rsvd0: u8,
    /// The event type ([`EventType`]).
    pub event_type: u8,
    /// Reserved.
    pub rsvd1: u8,
    /// The event sub-type (e.g. `MLX5_PORT_CHANGE_SUBTYPE_*`).
    pub sub_type: u8,
    /// Reserved (`__be32 rsvd2[7]`).
    pub rsvd2: [u8; 28],
    /// The event data (`union ev_data`), read through the typed views.
    pub data: [u8; EQE_DATA_LEN],
    /// Reserved.
    pub rsvd3: U16,
    /// Signature.
    pub signature: u8,
    /// Owner bit (bit 0).
    pub owner: u8,
}

/// The EQE owner rule: true when the EQE at consumer index `ci` of a ring of `nent` entries
/// (a power of two) belongs to software: `(owner & 1) == !!(ci & nent)`.
///
/// rdma-core `mlx5_vfio.c` `mlx5_eq_get_eqe` and the kernel's `next_eqe_sw` (`core/eq.c`):
/// the ring is initialised with owner 1 ([`EQE_OWNER_INIT_VAL`]), so no entry is software's
/// on the first lap until the device writes it with owner 0.
pub const fn eqe_sw_owns(owner: u8, consumer_index: u32, nent: u32) -> bool {
    (owner & 1 != 0) == (consumer_index & nent != 0)
}

impl Eqe {
    /// An EQE as software initialises the ring: zero, owner = [`EQE_OWNER_INIT_VAL`].
    pub fn init_value() -> Self {
        let mut e = Self::new_zeroed();
        e.owner = EQE_OWNER_INIT_VAL;
        e
    }
    /// The event type.
    pub fn event_type(&self) -> EventType {
        EventType(self.event_type)
    }
    /// The sub-type.
    pub fn sub_type(&self) -> u8 {
        self.sub_type
    }
    /// The owner bit (0 or 1).
    pub fn owner_bit(&self) -> u8 {
        self.owner & 1
    }
    /// True when software owns this EQE at consumer index `ci` ([`eqe_sw_owns`]).
    pub fn sw_owns(&self, consumer_index: u32, nent: u32) -> bool {
        eqe_sw_owns(self.owner, consumer_index, nent)
    }
    /// The data as a COMPLETION event.
    pub fn comp(&self) -> &EqeComp {
        zerocopy::transmute_ref!(&self.data)
    }
    /// The data as a COMPLETION event, writable.
    pub fn comp_mut(&mut self) -> &mut EqeComp {
        zerocopy::transmute_mut!(&mut self.data)
    }
    /// The data as a CQ_ERROR event.
    pub fn cq_err(&self) -> &EqeCqErr {
        zerocopy::transmute_ref!(&self.data)
    }
    /// The data as a CQ_ERROR event, writable.
    pub fn cq_err_mut(&mut self) -> &mut EqeCqErr {
        zerocopy::transmute_mut!(&mut self.data)
    }
    /// The data as a CMD event.
    pub fn cmd(&self) -> &EqeCmd {
        zerocopy::transmute_ref!(&self.data)
    }
    /// The data as a CMD event, writable.
    pub fn cmd_mut(&mut self) -> &mut EqeCmd {
        zerocopy::transmute_mut!(&mut self.data)
    }
    /// The data as a PAGE_REQUEST event.
    pub fn page_req(&self) -> &EqePageReq {
        zerocopy::transmute_ref!(&self.data)
    }
    /// The data as a PAGE_REQUEST event, writable.
    pub fn page_req_mut(&mut self) -> &mut EqePageReq {
        zerocopy::transmute_mut!(&mut self.data)
    }
    /// The data as a QP / SRQ / WQ event (PATH_MIG, COMM_EST, SQ_DRAINED, LAST_WQE, SRQ_LIMIT,
    /// WQ_*_ERROR, ...).
    pub fn qp_srq(&self) -> &EqeQpSrq {
        zerocopy::transmute_ref!(&self.data)
    }
    /// The data as a QP / SRQ event, writable.
    pub fn qp_srq_mut(&mut self) -> &mut EqeQpSrq {
        zerocopy::transmute_mut!(&mut self.data)
    }
    /// The data as a PORT_CHANGE event.
    pub fn port_state(&self) -> &EqePortState {
        zerocopy::transmute_ref!(&self.data)
    }
    /// The data as a PORT_CHANGE event, writable.
    pub fn port_state_mut(&mut self) -> &mut EqePortState {
        zerocopy::transmute_mut!(&mut self.data)
    }
}

/// `struct mlx5_eqe_comp` (kernel `device.h`), padded to the 28 data bytes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeComp {
    /// Reserved.
    pub reserved: [u8; 24],
    /// The CQ number (24 bits).
    pub cqn: U32,
}

impl EqeComp {
    /// The CQ number (low 24 bits, as the kernel's `mlx5_eq_comp_int` masks it).
    pub fn cqn(&self) -> u32 {
        self.cqn.get() & 0x00ff_ffff
    }
}

/// `struct mlx5_eqe_cq_err` (kernel `device.h`), padded to the 28 data bytes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeCqErr {
    /// The CQ number (24 bits).
    pub cqn: U32,
    /// Reserved.
    pub reserved1: [u8; 7],
    /// The syndrome (1 = CQ overrun, 2 = CQ access violation, per the PRM).
    pub syndrome: u8,
    /// Padding to the data size.
    pub pad: [u8; 16],
}

impl EqeCqErr {
    /// The CQ number (low 24 bits; the kernel's `cq_err_event_notifier` masks it).
    pub fn cqn(&self) -> u32 {
        self.cqn.get() & 0x00ff_ffff
    }
    /// The syndrome.
    pub fn syndrome(&self) -> u8 {
        self.syndrome
    }
}

/// `struct mlx5_eqe_cmd` (kernel `device.h`): the bitmap of completed command slots.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeCmd {
    /// Bit `i` set = command slot `i` completed.
    pub vector: U32,
    /// Reserved.
    pub rsvd: [u8; 24],
}

impl EqeCmd {
    /// The completed-slot bitmap.
    pub fn vector(&self) -> u32 {
        self.vector.get()
    }
}

/// `struct mlx5_eqe_page_req` (kernel `device.h`; rdma-core `mlx5_vfio.h` names byte 0
/// `ec_function`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqePageReq {
    /// Embedded-CPU function flag (rdma-core's name; reserved in the kernel's struct).
    pub ec_function: U16,
    /// The function the pages are for (0 = this PF).
    pub func_id: U16,
    /// Pages requested: positive = give the device this many, negative = take them back.
    pub num_pages: U32,
    /// Reserved.
    pub rsvd1: [u8; 20],
}

impl EqePageReq {
    /// The function id.
    pub fn func_id(&self) -> u16 {
        self.func_id.get()
    }
    /// The signed page count (`(s32)be32_to_cpu(num_pages)` in the kernel's
    /// `req_pages_handler`).
    pub fn num_pages(&self) -> i32 {
        self.num_pages.get() as i32
    }
    /// Sets the signed page count.
    pub fn set_num_pages(&mut self, n: i32) {
        self.num_pages.set(n as u32);
    }
}

/// `struct mlx5_eqe_qp_srq` (kernel `device.h`): the queue an async QP/SRQ/WQ event is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeQpSrq {
    /// Reserved.
    pub reserved1: [u8; 20],
    /// The queue's type (`MLX5_EVENT_QUEUE_TYPE_*`).
    pub queue_type: u8,
    /// Reserved.
    pub reserved2: [u8; 3],
    /// QP / SRQ / RQ / SQ number (24 bits).
    pub qp_srq_n: U32,
}

impl EqeQpSrq {
    /// The queue number (low 24 bits, as the kernel's `mlx5_eq_async_int` masks it).
    pub fn qp_srq_n(&self) -> u32 {
        self.qp_srq_n.get() & 0x00ff_ffff
    }
    /// The queue type.
    pub fn queue_type(&self) -> u8 {
        self.queue_type
    }
}

/// `struct mlx5_eqe_port_state` (kernel `device.h`), padded to the 28 data bytes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqePortState {
    /// Reserved.
    pub reserved0: [u8; 8],
    /// The port number in bits 7:4.
    pub port: u8,
    /// Padding to the data size.
    pub pad: [u8; 19],
}

impl EqePortState {
    /// The port number (`(port >> 4) & 0xf`, kernel `port_change` handler).
    pub fn port(&self) -> u8 {
        (self.port >> 4) & 0xf
    }
    /// Sets the port number (in bits 7:4).
    pub fn set_port(&mut self, port: u8) {
        self.port = (port & 0xf) << 4;
    }
}

impl_view! {
    Eqe => "mlx5_eqe",
    EqeComp => "mlx5_eqe_comp",
    EqeCqErr => "mlx5_eqe_cq_err",
    EqeCmd => "mlx5_eqe_cmd",
    EqePageReq => "mlx5_eqe_page_req",
    EqeQpSrq => "mlx5_eqe_qp_srq",
    EqePortState => "mlx5_eqe_port_state",
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::View;

    #[test]
    fn layout_offsets() {
        assert_eq!(Eqe::SIZE, 64);
        let mut b = [0u8; 64];
        b[1] = 0x0b;
        b[3] = 0x7;
        b[0x22] = 0x12;
        b[0x23] = 0x34;
        b[0x24..0x28].copy_from_slice(&(-5i32).to_be_bytes());
        b[0x3e] = 0x99;
        b[0x3f] = 1;
        let e = Eqe::view(&b).unwrap();
        assert_eq!(e.event_type(), EventType::PAGE_REQUEST);
        assert_eq!(e.sub_type(), 7);
        assert_eq!(e.page_req().func_id(), 0x1234);
        assert_eq!(e.page_req().num_pages(), -5);
        assert_eq!(e.signature, 0x99);
        assert_eq!(e.owner_bit(), 1);
    }

    #[test]
    fn data_views_at_kernel_offsets() {
        let mut e = Eqe::init_value();
        e.comp_mut().cqn.set(0xabcdef);
        assert_eq!(&e.as_bytes()[0x20 + 24..0x20 + 28], &[0, 0xab, 0xcd, 0xef]);
        let mut e = Eqe::new_zeroed();
        e.cq_err_mut().cqn.set(0x42);
        e.cq_err_mut().syndrome = 1;
        assert_eq!(e.as_bytes()[0x20 + 3], 0x42);
        assert_eq!(e.as_bytes()[0x20 + 11], 1);
        let mut e = Eqe::new_zeroed();
        e.qp_srq_mut().queue_type = MLX5_EVENT_QUEUE_TYPE_SQ;
        e.qp_srq_mut().qp_srq_n.set(0x123);
        assert_eq!(e.as_bytes()[0x20 + 20], 2);
        assert_eq!(&e.as_bytes()[0x20 + 24..0x20 + 28], &[0, 0, 1, 0x23]);
        let mut e = Eqe::new_zeroed();
        e.port_state_mut().set_port(2);
        assert_eq!(e.as_bytes()[0x20 + 8], 0x20);
        assert_eq!(e.port_state().port(), 2);
        e.cmd_mut().vector.set(1 << 31);
        assert_eq!(&e.as_bytes()[0x20..0x24], &[0x80, 0, 0, 0]);
    }

    #[test]
    fn owner_rule() {
        let init = Eqe::init_value();
        assert!(!init.sw_owns(0, 8));
        assert!(init.sw_owns(8, 8));
        assert!(eqe_sw_owns(0, 3, 8));
        assert!(!eqe_sw_owns(0, 11, 8));
    }

    #[test]
    fn event_names() {
        assert_eq!(EventType::PAGE_REQUEST.name(), Some("PAGE_REQUEST"));
        assert_eq!(EventType(0x06).name(), None);
        assert_eq!(EventType::LAST_WQE.0, 0x13);
        assert_eq!(EventType::SRQ_LIMIT.0, 0x14);
    }
}
