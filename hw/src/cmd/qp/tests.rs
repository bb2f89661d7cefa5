//! Unit tests of `cmd::qp`: state codes, the allowed transitions, MTU and size encodings,
//! the remote MAC and GID bytes of the address path.

use super::*;

#[test]
fn states_round_trip() {
    for s in QpState::ALL {
        assert_eq!(QpState::try_from(s as u8), Ok(s));
    }
    assert!(QpState::try_from(8).is_err());
    assert!(QpState::try_from(0xff).is_err());
    assert_eq!(QpState::SqDraining.to_string(), "SQ_DRAINING");
}

#[test]
fn the_rc_bring_up_path_is_allowed_and_nothing_skips_a_step() {
    assert_eq!(
        apply(Opcode::RST2INIT_QP, QpState::Rst),
        Some(QpState::Init)
    );
    assert_eq!(
        apply(Opcode::INIT2RTR_QP, QpState::Init),
        Some(QpState::Rtr)
    );
    assert_eq!(apply(Opcode::RTR2RTS_QP, QpState::Rtr), Some(QpState::Rts));
    assert_eq!(apply(Opcode::INIT2RTR_QP, QpState::Rst), None);
    assert_eq!(apply(Opcode::RTR2RTS_QP, QpState::Init), None);
    assert_eq!(apply(Opcode::QP_2RST, QpState::Err), Some(QpState::Rst));
    assert_eq!(apply(Opcode::QP_2ERR, QpState::SqDraining), None);
    assert_eq!(apply(Opcode::CREATE_QP, QpState::Rst), None);
    assert_eq!(
        modify_opcode(QpState::Sqer, QpState::Rts),
        Some(Opcode::SQERR2RTS_QP)
    );
    assert_eq!(
        modify_opcode(QpState::Rts, QpState::Err),
        Some(Opcode::QP_2ERR)
    );
    assert_eq!(modify_opcode(QpState::Rst, QpState::Rts), None);
    assert_eq!(modify_qp_in_len(Opcode::QP_2RST), Some(0x10));
    assert_eq!(modify_qp_in_len(Opcode::INIT2RTR_QP), Some(0x110));
    assert_eq!(modify_qp_in_len(Opcode::CREATE_QP), None);
}

#[test]
fn mtu_and_sizes() {
    assert_eq!(PathMtu::Mtu1024.bytes(), 1024);
    assert_eq!(PathMtu::from_bytes(4096), Some(PathMtu::Mtu4096));
    assert_eq!(PathMtu::from_bytes(1500), None);
    assert_eq!(
        PathMtu::try_from(0),
        Err(Error::Malformed {
            what: "qpc.mtu",
            reason: "not a path MTU code (1..=5)"
        })
    );
    assert_eq!(rq_stride_bytes(2), 64);
    assert_eq!(rq_buf_bytes(4, 2), Some(16 * 64));
    assert_eq!(sq_buf_bytes(6), Some(64 * 64));
    assert_eq!(wq_buf_layout(4, 2, Some(6)), Some((1024, 1024 + 4096)));
    assert_eq!(sq_buf_bytes(64), None);
    assert_eq!(rq_buf_bytes(60, 7), None);
}

#[test]
fn rmac_and_gid_bytes() {
    let mut b = [0u8; 0x2c];
    let mut a = Ads::new_checked(&mut b[..]).unwrap();
    a.set_rmac([1, 2, 3, 4, 5, 6])
        .unwrap()
        .set_rgid_rip(&[0xfe; 16])
        .unwrap();
    assert_eq!(a.rmac(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(&b[0x26..0x2c], &[1, 2, 3, 4, 5, 6]);
    assert_eq!(&b[0x10..0x20], &[0xfe; 16]);
    assert!(
        Ads::wrap_unchecked(&mut [0u8; 0x1f][..])
            .set_rgid_rip(&[0; 16])
            .is_err()
    );
}

#[test]
fn the_sq_drain_edges_follow_the_first_mlx5_optab() {
    assert_eq!(apply(Opcode::RTS2SQD_QP, QpState::Rts), Some(QpState::Sqd));
    assert_eq!(apply(Opcode::RTS2SQD_QP, QpState::Sqd), None);
    assert_eq!(apply(Opcode::SQD2SQD_QP, QpState::Sqd), Some(QpState::Sqd));
    // Attributes change only once drained.
    assert_eq!(apply(Opcode::SQD2SQD_QP, QpState::SqDraining), None);
    // The return to RTS may cancel a drain in progress.
    assert_eq!(
        apply(Opcode::SQD_RTS_QP, QpState::SqDraining),
        Some(QpState::Rts)
    );
    assert_eq!(
        modify_opcode(QpState::Rts, QpState::Sqd),
        Some(Opcode::RTS2SQD_QP)
    );
    assert_eq!(
        modify_opcode(QpState::Sqd, QpState::Sqd),
        Some(Opcode::SQD2SQD_QP)
    );
    assert_eq!(modify_qp_in_len(Opcode::RTS2SQD_QP), Some(0x110));
    assert_eq!(Opcode::RTS2SQD_QP.0, 0x508);
    assert_eq!(Opcode::SQD2SQD_QP.0, 0x511);
}
