//! Which optional parameters (`opt_param_mask` bits) each modify transition accepts.
//!
//! Owns: [`allowed`], the table. Must not: apply the parameters (that is [`super::modify`]).
//!
//! Source: the kernel's `opt_mask[cur][new][st]` in `drivers/infiniband/hw/mlx5/qp.c`, the
//! table `__mlx5_ib_modify_qp` masks every optional-parameter mask with before sending a modify
//! command ("IB/mlx5: Fix opt param mask according to firmware spec", a4774e9095de), read for
//! the service types this device models (RC and UD). Additions, each from the same file:
//! - RTS2RTS also takes `COUNTER_SET_ID` (`__mlx5_ib_qp_set_counter` sends exactly that mask
//!   to move a QP to another counter set).
//! - RST2INIT has no row: the kernel never sends optional parameters with it, everything it
//!   carries is required.
//! - SQD_RTS has no row (the kernel never issues it, `optab` has no SQD→RTS entry); the IBTA
//!   lets SQD→RTS change what RTS→RTS can, so it takes the RTS2RTS set.
//! - 2ERR and 2RST carry no `opt_param_mask` at all.
//!
//! A bit outside the set is refused with BAD_PARAM: the firmware spec the kernel's table
//! follows lists per transition which optional parameters are valid.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{OptParamMask as M, service_type};

/// The optional parameters `op` accepts for a QP of service type `st` (RC or UD).
pub(super) fn allowed(op: Opcode, st: u8) -> M {
    let rc = st == service_type::RC;
    let ud = st == service_type::UD;
    let (for_rc, for_ud) = match op {
        Opcode::INIT2INIT_QP => (
            M::RRE | M::RAE | M::RWE | M::PKEY_INDEX | M::PRI_PORT,
            M::PKEY_INDEX | M::Q_KEY | M::PRI_PORT,
        ),
        Opcode::INIT2RTR_QP => (
            M::ALT_ADDR_PATH | M::RRE | M::RAE | M::RWE | M::PKEY_INDEX,
            M::PKEY_INDEX | M::Q_KEY,
        ),
        Opcode::RTR2RTS_QP => (
            M::ALT_ADDR_PATH | M::RRE | M::RAE | M::RWE | M::PM_STATE | M::RNR_TIMEOUT,
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
            M::Q_KEY | M::SRQN | M::CQN_RCV | M::COUNTER_SET_ID,
        ),
        Opcode::SQERR2RTS_QP => (M::RNR_TIMEOUT | M::RWE | M::RAE | M::RRE, M::Q_KEY),
        _ => (M::empty(), M::empty()),
    };
    if rc {
        for_rc
    } else if ud {
        for_ud
    } else {
        M::empty()
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
        assert_eq!(allowed(Opcode::RTS2RTS_QP, service_type::UC), M::empty());
    }
}
