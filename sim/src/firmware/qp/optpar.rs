//! Which optional parameters (`opt_param_mask` bits) each modify transition accepts.
//!
//! Owns: [`allowed`], the table. Must not: apply the parameters (that is [`super::modify`]).
//!
//! Source: the kernel's `opt_mask[cur][new][st]` in `drivers/infiniband/hw/mlx5/qp.c`, the
//! table `__mlx5_ib_modify_qp` masks every optional-parameter mask with before sending a modify
//! command ("IB/mlx5: Fix opt param mask according to firmware spec", a4774e9095de), read for
//! the service types this device models (RC, UC and UD). Additions, each from the same file:
//! - RTS2RTS also takes `COUNTER_SET_ID` (`__mlx5_ib_qp_set_counter` sends exactly that mask
//!   to move a QP to another counter set).
//! - RST2INIT has no row: the kernel never sends optional parameters with it, everything it
//!   carries is required.
//! - SQD_RTS has no row (the kernel never issues it, `optab` has no SQD→RTS entry); the IBTA
//!   lets SQD→RTS change what RTS→RTS can, so it takes the RTS2RTS set.
//! - 2ERR and 2RST carry no `opt_param_mask` at all.
//! - RTS2SQD and SQD2SQD are not in today's table (see `bypass_hw::cmd::Opcode`): RTS2SQD takes
//!   nothing, SQD2SQD what IBTA's SQD→SQD row (`ib_modify_qp_is_ok`) lets change.
//!
//! A bit outside the set is refused with BAD_PARAM: the firmware spec the kernel's table
//! follows lists per transition which optional parameters are valid.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{OptParamMask as M, service_type};

/// The optional parameters `op` accepts for a QP of service type `st` (RC, UC or UD).
pub(super) fn allowed(op: Opcode, st: u8) -> M {
    // (RC, UC, UD), each row the kernel's `opt_mask[cur][new]` for those service types.
    let (for_rc, for_uc, for_ud) = match op {
        Opcode::INIT2INIT_QP => (
            M::RRE | M::RAE | M::RWE | M::PKEY_INDEX | M::PRI_PORT,
            M::RWE | M::PKEY_INDEX | M::PRI_PORT,
            M::PKEY_INDEX | M::Q_KEY | M::PRI_PORT,
        ),
        Opcode::INIT2RTR_QP => (
            M::ALT_ADDR_PATH | M::RRE | M::RAE | M::RWE | M::PKEY_INDEX,
            M::ALT_ADDR_PATH | M::RWE | M::PKEY_INDEX,
            M::PKEY_INDEX | M::Q_KEY,
        ),
        Opcode::RTR2RTS_QP => (
            M::ALT_ADDR_PATH | M::RRE | M::RAE | M::RWE | M::PM_STATE | M::RNR_TIMEOUT,
            M::ALT_ADDR_PATH | M::RWE | M::PM_STATE,
            M::Q_KEY,
        ),
        Opcode::RTS2RTS_QP | Opcode::SQD_RTS_QP => (
            M::RRE
                | M::RAE
                | M::RWE
                | M::RNR_TIMEOUT
                | M::PM_STATE
                | M::ALT_ADDR_PATH
                | M::COUNTER_SET_ID,
            M::RWE | M::PM_STATE | M::ALT_ADDR_PATH | M::COUNTER_SET_ID,
            M::Q_KEY | M::SRQN | M::CQN_RCV | M::COUNTER_SET_ID,
        ),
        Opcode::SQERR2RTS_QP => (M::RNR_TIMEOUT | M::RWE | M::RAE | M::RRE, M::RWE, M::Q_KEY),
        // SQD→SQD: the attributes `ib_modify_qp_is_ok` lets SQD→SQD change, as far as the
        // device applies them (access, P_Key index, port, alternate path, migration state,
        // RNR timer; Q_Key for UD).
        Opcode::SQD2SQD_QP => (
            M::RRE
                | M::RAE
                | M::RWE
                | M::PKEY_INDEX
                | M::PRI_PORT
                | M::ALT_ADDR_PATH
                | M::PM_STATE
                | M::RNR_TIMEOUT,
            M::RWE | M::PKEY_INDEX | M::ALT_ADDR_PATH | M::PM_STATE,
            M::PKEY_INDEX | M::Q_KEY,
        ),
        // RTS2SQD takes none (the drain has no attributes).
        _ => (M::empty(), M::empty(), M::empty()),
    };
    match st {
        service_type::RC => for_rc,
        service_type::UC => for_uc,
        service_type::UD => for_ud,
        _ => M::empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rst2init_and_the_short_transitions_take_no_optional_parameters() {
        for op in [Opcode::RST2INIT_QP, Opcode::QP_2ERR, Opcode::QP_2RST] {
            assert_eq!(allowed(op, service_type::RC), M::empty());
            assert_eq!(allowed(op, service_type::UD), M::empty());
        }
    }

    #[test]
    fn the_kernel_never_sends_a_required_field_as_optional() {
        // INIT2RTR's address path, RTR2RTS's retry counts / SRA / ACK timeout are required
        // there, so their bits are not in the table (the kernel masks them out).
        let i2r = allowed(Opcode::INIT2RTR_QP, service_type::RC);
        assert!(!i2r.intersects(M::PRIMARY_ADDR_PATH | M::PRI_PORT | M::RRA_MAX));
        let r2r = allowed(Opcode::RTR2RTS_QP, service_type::RC);
        assert!(!r2r.intersects(M::SRA_MAX | M::RETRY_COUNT | M::RNR_RETRY | M::ACK_TIMEOUT));
        assert!(allowed(Opcode::RTS2RTS_QP, service_type::UD).contains(M::CQN_RCV));
        assert_eq!(allowed(Opcode::RTS2RTS_QP, service_type::XRC), M::empty());
        assert!(!allowed(Opcode::RTS2RTS_QP, service_type::UC).intersects(M::RRE | M::RAE));
        assert_eq!(allowed(Opcode::SQERR2RTS_QP, service_type::UC), M::RWE);
        assert_eq!(allowed(Opcode::RTS2SQD_QP, service_type::RC), M::empty());
    }
}
