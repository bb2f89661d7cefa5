//! Caps beyond the device through the safe API: a CQ or a QP asked for with `u32::MAX`
//! entries (or SGEs, or inline bytes) is refused before anything is allocated, by an error
//! that names the cap and the largest value the device takes, and the objects stay usable.
//!
//! Owns: the regression tests for the limits `QpGeometry::new` and `Cq::create` enforce.
//! Must not: test the sizing arithmetic itself (`driver/src/qp_geometry.rs` unit tests do).
//!
//! Sources: libibverbs `ibv_create_cq` / `ibv_create_qp` (EINVAL for caps above
//! `ibv_query_device`'s `max_cqe`, `max_qp_wr`, `max_sge`); rdma-core
//! `providers/mlx5/verbs.c` (`mlx5_calc_sq_size`, `mlx5_calc_rq_size`).

#[path = "verbs_support.rs"]
mod support;

use bypass_verbs::driver::DriverError;
use bypass_verbs::{Cq, QpBuilder, VerbsError};
use support::*;

#[test]
fn a_cq_beyond_max_cqe_is_refused_naming_the_cap() {
    let r = rig();
    let max = r.a.ctx.caps().max_cqe();
    let err = Cq::new(&r.a.ctx, u32::MAX).unwrap_err();
    assert!(
        matches!(
            err,
            VerbsError::Driver(DriverError::CqTooLarge { asked: u32::MAX, max: m }) if m == max
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("max_cqe") && text.contains(&format!("at most {max}")),
        "{text}"
    );
    let err = Cq::new(&r.a.ctx, max + 1).unwrap_err();
    assert!(
        matches!(err, VerbsError::Driver(DriverError::CqTooLarge { .. })),
        "{err}"
    );
    // The largest accepted is accepted, and the context still makes CQs.
    assert!(Cq::new(&r.a.ctx, 64).is_ok());
}

#[test]
fn qp_caps_at_u32_max_are_refused_naming_the_cap() {
    let r = rig();
    type Set = fn(QpBuilder<'_>) -> QpBuilder<'_>;
    let cases: [(Set, &str); 5] = [
        (|b| b.max_recv_wr(u32::MAX), "max_recv_wr"),
        (|b| b.max_send_wr(u32::MAX), "max_send_wr"),
        (|b| b.max_send_sge(u32::MAX), "max_send_sge"),
        (|b| b.max_recv_sge(u32::MAX), "max_recv_sge"),
        (|b| b.max_inline(u32::MAX), "max_inline_data"),
    ];
    for (set, cap) in cases {
        let err = set(QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq))
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, VerbsError::Driver(DriverError::QpCapTooLarge { cap: c, .. }) if *c == cap),
            "{err}"
        );
        assert!(err.to_string().contains("ask for at most"), "{err}");
    }
    let (_a, _b) = rc_pair(&r);
}

#[test]
fn the_inline_limit_shown_is_the_one_an_rc_qp_accepts() {
    let r = rig();
    let shown = r.a.ctx.caps().max_inline_data() as u32;
    assert_eq!(
        shown, 908,
        "RC: 960-byte WQE less 48 bytes of segments and the 4-byte header"
    );
    let at = |n| {
        QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq)
            .max_inline(n)
            .build()
    };
    assert!(at(shown).is_ok());
    assert!(at(shown + 1).is_err());
}
