//! The send-queue state transitions: RTS→SQD (drain), SQD→SQD, SQD→RTS and SQE→RTS, each
//! checked against the verbs state table before its command is built.
//!
//! Owns: [`SqTransition`], [`SqAttrs`], [`sq_transition_input`] (the check and the input).
//! Must not: execute commands or track the QP's state (that is `qp.rs`).
//!
//! Sources: the required and optional attributes of each edge are those of the kernel's
//! `qp_state_table` (`drivers/infiniband/core/verbs.c`, checked by `ib_modify_qp_is_ok`):
//! RTS→SQD takes only `IB_QP_EN_SQD_ASYNC_NOTIFY` (which never reaches an mlx5 device:
//! SQ_DRAINED is always raised, see `bypass_hw::cmd::qp::Rts2SqdQpIn`); SQD→RTS takes
//! access flags (RC, UC), the RNR timer (RC) and the Q_Key (UD); SQD→SQD also the P_Key index;
//! SQE→RTS exists for UD (Q_Key) and UC (access flags) only, and may start from the cached
//! RTS (the device moved the QP to SQE by itself: `IB_QP_CUR_STATE`). Their `opt_param_mask`
//! bits are the kernel's (`ib_mask_to_mlx5_opt`: access → RRE|RWE|RAE, UC's RWE alone per its
//! `opt_mask` rows). The opcodes: `SQD_RTS_QP` and `SQERR2RTS_QP` (`mlx5_ifc.h`), and
//! `RTS2SQD_QP` / `SQD2SQD_QP` from the first mlx5 driver (see `bypass_hw::cmd::Opcode`).

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{
    OptParamMask, QpState, Rts2SqdQpIn, Sqd2RtsQpIn, Sqd2SqdQpIn, Sqerr2RtsQpIn,
};

use crate::error::{DriverError, Result};
use crate::qp_attr::{QpAccess, QpType, access_opt, build, header};

/// One of the send-queue transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqTransition {
    /// RTS → SQD: drain the SQ (started messages finish, SQ_DRAINED once none is left).
    Rts2Sqd,
    /// SQD → SQD: change attributes of a drained QP.
    Sqd2Sqd,
    /// SQD → RTS: resume sending.
    Sqd2Rts,
    /// SQE → RTS: recover a UD or UC QP from a send error.
    Sqe2Rts,
}

impl SqTransition {
    /// Its name in the verbs state table's terms.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rts2Sqd => "RTS→SQD",
            Self::Sqd2Sqd => "SQD→SQD",
            Self::Sqd2Rts => "SQD→RTS",
            Self::Sqe2Rts => "SQE→RTS",
        }
    }

    /// The modify command.
    pub const fn opcode(self) -> Opcode {
        match self {
            Self::Rts2Sqd => Opcode::RTS2SQD_QP,
            Self::Sqd2Sqd => Opcode::SQD2SQD_QP,
            Self::Sqd2Rts => Opcode::SQD_RTS_QP,
            Self::Sqe2Rts => Opcode::SQERR2RTS_QP,
        }
    }

    /// The state it leaves the QP in (SQD for a drain: SQ_DRAINING until the device reports
    /// SQ_DRAINED is SQD to a verbs user, `mlx5_ib` `to_ib_qp_state`).
    pub const fn to(self) -> QpState {
        match self {
            Self::Rts2Sqd | Self::Sqd2Sqd => QpState::Sqd,
            Self::Sqd2Rts | Self::Sqe2Rts => QpState::Rts,
        }
    }

    /// True if a QP of type `t` whose driver-side state is `from` may take it.
    fn starts_from(self, t: QpType, from: QpState) -> bool {
        match self {
            Self::Rts2Sqd => from == QpState::Rts,
            Self::Sqd2Sqd | Self::Sqd2Rts => from == QpState::Sqd,
            // The device enters SQE by itself; the driver's state still says RTS.
            Self::Sqe2Rts => t != QpType::Rc && matches!(from, QpState::Rts | QpState::Sqer),
        }
    }

    /// What to do instead, for the error.
    const fn fix(self) -> &'static str {
        match self {
            Self::Rts2Sqd => "drain a QP in RTS only",
            Self::Sqd2Sqd | Self::Sqd2Rts => "move the QP to SQD first (rts2sqd)",
            Self::Sqe2Rts => {
                "only UD and UC QPs enter SQE (an RC send error moves the QP to ERR: reset it)"
            }
        }
    }
}

/// The optional attributes of the send-queue transitions (each `None` unless changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqAttrs {
    /// New remote access (RC; UC: remote write only) — `IB_QP_ACCESS_FLAGS`.
    pub access: Option<QpAccess>,
    /// New RNR timer (RC) — `IB_QP_MIN_RNR_TIMER`.
    pub min_rnr_timer: Option<u8>,
    /// New Q_Key (UD) — `IB_QP_QKEY`.
    pub qkey: Option<u32>,
    /// New P_Key index (SQD→SQD) — `IB_QP_PKEY_INDEX`.
    pub pkey_index: Option<u16>,
}

/// Which of [`SqAttrs`] `tr` takes for type `t`: (access, RNR timer, Q_Key, P_Key index).
fn takes(tr: SqTransition, t: QpType) -> (bool, bool, bool, bool) {
    let (rc, uc, ud) = (t == QpType::Rc, t == QpType::Uc, t == QpType::Ud);
    match tr {
        SqTransition::Rts2Sqd => (false, false, false, false),
        SqTransition::Sqd2Rts => (rc || uc, rc, ud, false),
        SqTransition::Sqd2Sqd => (rc || uc, rc, ud, true),
        SqTransition::Sqe2Rts => (uc, false, ud, false),
    }
}

const fn type_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

/// Checks `tr` of QP `qpn` (type `t`, driver-side state `from`) with `a` against the verbs
/// state table, then builds its input.
///
/// Errors: [`DriverError::BadQpTransition`] (not from this state, or SQE→RTS of an RC QP),
/// [`DriverError::QpAttrNotAllowed`] (an attribute it does not take), or a field out of range.
pub fn sq_transition_input(
    qpn: u32,
    t: QpType,
    from: QpState,
    tr: SqTransition,
    a: &SqAttrs,
) -> Result<Vec<u8>> {
    if !tr.starts_from(t, from) {
        return Err(DriverError::BadQpTransition {
            qpn,
            qp_type: type_name(t),
            transition: tr.name(),
            from: from.name(),
            fix: tr.fix(),
        });
    }
    let (access, rnr, qkey, pkey) = takes(tr, t);
    let given = [
        (
            a.access.is_some(),
            access,
            "access flags (IB_QP_ACCESS_FLAGS)",
        ),
        (
            a.min_rnr_timer.is_some(),
            rnr,
            "an RNR timer (IB_QP_MIN_RNR_TIMER)",
        ),
        (a.qkey.is_some(), qkey, "a Q_Key (IB_QP_QKEY)"),
        (
            a.pkey_index.is_some(),
            pkey,
            "a P_Key index (IB_QP_PKEY_INDEX)",
        ),
    ];
    if let Some(&(_, _, attr)) = given.iter().find(|(set, ok, _)| *set && !*ok) {
        return Err(DriverError::QpAttrNotAllowed {
            qpn,
            qp_type: type_name(t),
            transition: tr.name(),
            attr,
        });
    }
    let e = build(tr.opcode().name().unwrap_or("modify QP"));
    // Every SQ-state input has today's modify layout (checked in bypass-hw's tests).
    let len = match tr {
        SqTransition::Rts2Sqd => Rts2SqdQpIn::<()>::LEN,
        SqTransition::Sqd2Sqd => Sqd2SqdQpIn::<()>::LEN,
        SqTransition::Sqd2Rts => Sqd2RtsQpIn::<()>::LEN,
        SqTransition::Sqe2Rts => Sqerr2RtsQpIn::<()>::LEN,
    };
    let mut i = header(tr.opcode(), len);
    let mut m = Sqd2RtsQpIn::new_checked(&mut i[..]).map_err(&e)?;
    m.set_qpn(qpn).map_err(&e)?;
    let mut opt = OptParamMask::empty();
    {
        let mut q = m.qpc_mut();
        opt |= access_opt(&mut q, t, a.access, &e)?;
        if let Some(r) = a.min_rnr_timer {
            q.set_min_rnr_nak(r.into()).map_err(&e)?;
            opt |= OptParamMask::RNR_TIMEOUT;
        }
        if let Some(k) = a.qkey {
            q.set_q_key(k).map_err(&e)?;
            opt |= OptParamMask::Q_KEY;
        }
        if let Some(p) = a.pkey_index {
            q.primary_address_path_mut()
                .set_pkey_index(p.into())
                .map_err(&e)?;
            opt |= OptParamMask::PKEY_INDEX;
        }
    }
    m.set_opt_param_mask(opt.bits()).map_err(&e)?;
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bypass_hw::cmd::MboxIn;

    fn op_of(i: &[u8]) -> Opcode {
        MboxIn::new_checked(i).unwrap().op()
    }

    #[test]
    fn each_transition_sends_its_opcode() {
        let ok = |t, from, tr| sq_transition_input(7, t, from, tr, &SqAttrs::default()).unwrap();
        let i = ok(QpType::Rc, QpState::Rts, SqTransition::Rts2Sqd);
        assert_eq!(op_of(&i), Opcode::RTS2SQD_QP);
        assert_eq!(Sqd2RtsQpIn::new_checked(&i[..]).unwrap().qpn(), 7);
        let i = ok(QpType::Uc, QpState::Sqd, SqTransition::Sqd2Rts);
        assert_eq!(op_of(&i), Opcode::SQD_RTS_QP);
        let i = ok(QpType::Ud, QpState::Sqd, SqTransition::Sqd2Sqd);
        assert_eq!(op_of(&i), Opcode::SQD2SQD_QP);
        let i = ok(QpType::Ud, QpState::Rts, SqTransition::Sqe2Rts);
        assert_eq!(op_of(&i), Opcode::SQERR2RTS_QP);
    }

    #[test]
    fn a_transition_from_the_wrong_state_is_refused_before_any_command() {
        let e = sq_transition_input(
            7,
            QpType::Rc,
            QpState::Init,
            SqTransition::Rts2Sqd,
            &SqAttrs::default(),
        )
        .unwrap_err();
        assert!(
            matches!(e, DriverError::BadQpTransition { from: "INIT", .. }),
            "{e}"
        );
        let e = sq_transition_input(
            7,
            QpType::Rc,
            QpState::Rts,
            SqTransition::Sqe2Rts,
            &SqAttrs::default(),
        )
        .unwrap_err();
        assert!(matches!(e, DriverError::BadQpTransition { .. }), "{e}");
    }

    #[test]
    fn attributes_follow_the_verbs_state_table() {
        let qkey = SqAttrs {
            qkey: Some(5),
            ..SqAttrs::default()
        };
        let e = sq_transition_input(1, QpType::Rc, QpState::Sqd, SqTransition::Sqd2Rts, &qkey)
            .unwrap_err();
        assert!(matches!(e, DriverError::QpAttrNotAllowed { .. }), "{e}");
        let e = sq_transition_input(1, QpType::Ud, QpState::Rts, SqTransition::Rts2Sqd, &qkey)
            .unwrap_err();
        assert!(matches!(e, DriverError::QpAttrNotAllowed { .. }), "{e}");
        let i =
            sq_transition_input(1, QpType::Ud, QpState::Sqd, SqTransition::Sqd2Rts, &qkey).unwrap();
        let v = Sqd2RtsQpIn::new_checked(&i[..]).unwrap();
        assert_eq!(v.opt_params(), OptParamMask::Q_KEY);
        assert_eq!(v.qpc().q_key(), 5);
        let acc = SqAttrs {
            access: Some(QpAccess::all()),
            ..SqAttrs::default()
        };
        let i =
            sq_transition_input(1, QpType::Uc, QpState::Sqer, SqTransition::Sqe2Rts, &acc).unwrap();
        let v = Sqd2RtsQpIn::new_checked(&i[..]).unwrap();
        assert_eq!(v.opt_params(), OptParamMask::RWE, "UC: remote write only");
        assert_eq!((v.qpc().rwe(), v.qpc().rre()), (1, 0));
    }
}
