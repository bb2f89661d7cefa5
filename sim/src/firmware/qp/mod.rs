//! QP commands: CREATE_QP, QUERY_QP, DESTROY_QP and the modify family (RST2INIT … 2RST).
//!
//! Owns: the firmware's side of a QP's life: checking a command against the device's
//! capabilities, the objects it names and the QP state machine, then filling or updating the
//! [`Qp`](crate::objects::Qp) in the object table and the users counts of what it names.
//! Split into [`create`] (CREATE / QUERY / DESTROY), [`modify`] (the state machine),
//! [`fields`] (what each transition takes) and [`optpar`] (which optional parameters each
//! transition accepts). Must not: touch rings, packets or transport state but through
//! `QpControl`, or parse anything but through `bypass_hw::cmd::qp` views.
//!
//! Status codes follow the kernel's reading of the PRM (`core/cmd.c` `cmd_status_to_err` /
//! `cmd_status_str`): a malformed or unsupported value is BAD_PARAM (0x3); a value above a
//! capability or a full QP table is LIM_ERR (0x8); an object number that names nothing is
//! BAD_RES (0x5); a modify from a state the transition does not start from is BAD_QP_STATE
//! (0x10). The syndromes are this simulator's own (real firmware's are opaque hashes), each
//! naming the check that failed, in the 0x0500_xxxx range.

mod create;
mod fields;
mod modify;
mod optpar;
#[cfg(test)]
mod tests;

/// CREATE_QP: `qpc.st` is not a service type this device supports (RC; UD and UC if `caps.ud` / `caps.uc`).
pub const SYND_BAD_SERVICE_TYPE: u32 = 0x0500_0001;
/// CREATE_QP: `qpc.pd` names no protection domain.
pub const SYND_NO_PD: u32 = 0x0500_0002;
/// CREATE_QP: `qpc.cqn_snd` names no CQ.
pub const SYND_NO_CQ_SND: u32 = 0x0500_0003;
/// CREATE_QP (or RTS2RTS with CQN_RCV): `qpc.cqn_rcv` names no CQ.
pub const SYND_NO_CQ_RCV: u32 = 0x0500_0004;
/// CREATE_QP: `qpc.uar_page` names no allocated UAR page.
pub const SYND_NO_UAR: u32 = 0x0500_0005;
/// CREATE_QP: every QP number the device has (`1 << log_max_qp`) is in use.
pub const SYND_QP_TABLE_FULL: u32 = 0x0500_0006;
/// CREATE_QP: `log_rq_size` above `log_max_qp_sz`.
pub const SYND_RQ_SIZE: u32 = 0x0500_0007;
/// CREATE_QP: `log_sq_size` above `log_max_qp_sz`.
pub const SYND_SQ_SIZE: u32 = 0x0500_0008;
/// CREATE_QP: the RQ stride `16 << log_rq_stride` above `max_wqe_sz_rq`.
pub const SYND_RQ_STRIDE: u32 = 0x0500_0009;
/// CREATE_QP: the `pas` list is refused: a page not aligned to `4 KiB << log_page_size`, too
/// few pages for the WQ buffer (with `page_offset`), or a page size above 2 GiB.
pub const SYND_PAS: u32 = 0x0500_000a;
/// CREATE_QP: `wq_umem_valid` / `dbr_umem_valid`: DEVX umems do not exist on this device (it
/// is driven through VFIO, where buffers are given by `pas` and `dbr_addr`).
pub const SYND_UMEM: u32 = 0x0500_000b;
/// CREATE_QP: `rq_type` other than a regular RQ (SRQ, RMP and zero-length RQs are not
/// modelled).
pub const SYND_RQ_TYPE: u32 = 0x0500_000c;
/// CREATE_QP: `input_qpn` set, but the device does not let the driver choose QP numbers.
pub const SYND_INPUT_QPN: u32 = 0x0500_000d;
/// QUERY/DESTROY/modify: `qpn` names no QP.
pub const SYND_NO_QP: u32 = 0x0500_0010;
/// Modify: the QP is in a state the transition does not start from.
pub const SYND_BAD_QP_STATE: u32 = 0x0500_0011;
/// Modify: `opt_param_mask` has a bit the transition does not accept for this service type.
pub const SYND_OPT_PARAM: u32 = 0x0500_0012;
/// Modify: `primary_address_path.vhca_port_num` is not a port of the device (1..=ports).
pub const SYND_PORT: u32 = 0x0500_0013;
/// Modify: `primary_address_path.pkey_index` beyond the P_Key table.
pub const SYND_PKEY_INDEX: u32 = 0x0500_0014;
/// INIT2RTR: `mtu` is not an MTU code (1..=5).
pub const SYND_MTU: u32 = 0x0500_0015;
/// INIT2RTR: `mtu` above the port's largest MTU.
pub const SYND_MTU_ABOVE_PORT: u32 = 0x0500_0016;
/// INIT2RTR: `log_msg_max` above `log_max_msg`.
pub const SYND_LOG_MSG_MAX: u32 = 0x0500_0017;
/// INIT2RTR: `log_rra_max` above `log_max_ra_res_qp`.
pub const SYND_RRA_MAX: u32 = 0x0500_0018;
/// RTR2RTS: `log_sra_max` above `log_max_ra_req_qp`.
pub const SYND_SRA_MAX: u32 = 0x0500_0019;
/// INIT2RTR: `primary_address_path.src_addr_index` beyond the port's GID table.
pub const SYND_GID_INDEX: u32 = 0x0500_001a;
/// RST2INIT / modify with RAE: remote atomics enabled on a device without atomics.
pub const SYND_RAE_NO_ATOMIC: u32 = 0x0500_001b;
/// RTS2RTS with SRQN: SRQs are not modelled.
pub const SYND_SRQN: u32 = 0x0500_001c;
/// Any: the input is shorter than its layout (the dispatcher checks this first; kept so that
/// a handler never trusts its caller).
pub const SYND_INPUT_LEN: u32 = 0x0500_001d;
/// The output buffer is shorter than its layout (as above, for the output).
pub const SYND_OUTPUT_LEN: u32 = 0x0500_001e;
/// CREATE_QP with `rq_type` SRQ: `srqn_rmpn_xrqn` names no SRQ.
pub const SYND_NO_SRQ: u32 = 0x0500_001f;

pub(crate) use create::{create_qp, destroy_qp, query_qp};
pub(crate) use modify::modify_qp;
