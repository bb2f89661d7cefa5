//! The modify family: the state machine against the kernel's table, required fields and
//! their limits, optional parameters, 2ERR and 2RST.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{MODIFY_OPCODES, OptParamMask as M, QpState, apply, service_type};
use bypass_hw::syndrome::CmdStatus;
use proptest::prelude::*;

use super::{Rig, assert_fails, good_fields, out_qpc};
use super::{create_qp, destroy_qp, modify_qp, query_qp};
use crate::firmware::qp::*;
use crate::objects::QpAttrs;
use crate::profile::Profile;

fn peer() -> [u8; 16] {
    Profile::with_id(2).ports[0].gids[0]
}

/// A QP of `st` walked to INIT.
fn in_init(r: &mut Rig, st: u8) -> u32 {
    let qpn = r.qp_of(st);
    r.step(Opcode::RST2INIT_QP, qpn).unwrap();
    qpn
}

/// INIT2RTR with the good fields, then `edit`.
fn init2rtr(
    r: &mut Rig,
    qpn: u32,
    edit: impl FnOnce(&mut bypass_hw::cmd::qp::Qpc<&mut [u8]>),
) -> crate::firmware::CmdResult {
    let st = r.qp(qpn).st;
    r.modify(Opcode::INIT2RTR_QP, qpn, 0, |q| {
        good_fields(Opcode::INIT2RTR_QP, st, peer(), q);
        edit(q);
    })
}

#[test]
fn every_modify_opcode_from_every_state_follows_the_kernel_table() {
    for st in [service_type::RC, service_type::UD, service_type::UC] {
        for from in QpState::ALL {
            for op in MODIFY_OPCODES {
                let mut r = Rig::new();
                let qpn = r.qp_of(st);
                r.force(qpn, from);
                let result = r.step(op, qpn);
                // The kernel's table knows SQD only; a draining QP is one (2ERR, 2RST).
                let table_from = match (from, op) {
                    (QpState::SqDraining, Opcode::QP_2ERR | Opcode::QP_2RST) => QpState::Sqd,
                    _ => from,
                };
                match apply(op, table_from) {
                    Some(to) => {
                        assert!(result.is_ok(), "st {st} {op:?} from {from}: {result:?}");
                        assert_eq!(r.qp(qpn).state, to, "st {st} {op:?} from {from}");
                    }
                    None => {
                        assert_fails(result, CmdStatus::BAD_QP_STATE_ERR, SYND_BAD_QP_STATE);
                        assert_eq!(r.qp(qpn).state, from, "refused: unchanged");
                    }
                }
            }
        }
    }
}

#[test]
fn nothing_skips_a_step_of_the_walk() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    for op in [Opcode::INIT2RTR_QP, Opcode::RTR2RTS_QP, Opcode::RTS2RTS_QP] {
        assert_fails(
            r.step(op, qpn),
            CmdStatus::BAD_QP_STATE_ERR,
            SYND_BAD_QP_STATE,
        );
    }
    r.step(Opcode::RST2INIT_QP, qpn).unwrap();
    assert_fails(
        r.step(Opcode::RST2INIT_QP, qpn),
        CmdStatus::BAD_QP_STATE_ERR,
        SYND_BAD_QP_STATE,
    );
    assert_fails(
        r.step(Opcode::RTR2RTS_QP, qpn),
        CmdStatus::BAD_QP_STATE_ERR,
        SYND_BAD_QP_STATE,
    );
}

#[test]
fn init2rtr_refuses_codes_that_are_not_an_mtu() {
    let mut r = Rig::new();
    let qpn = in_init(&mut r, service_type::RC);
    let before = r.qp(qpn).attrs.clone();
    for code in [0, 6, 7] {
        let res = init2rtr(&mut r, qpn, |q| drop(q.set_mtu(code)));
        assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_MTU);
    }
    assert_eq!(r.qp(qpn).state, QpState::Init);
    assert_eq!(r.qp(qpn).attrs, before, "a refused command changes nothing");
}

#[test]
fn init2rtr_refuses_an_mtu_above_the_ports() {
    let mut r = Rig::new();
    r.host.dev.profile.ports[0].max_mtu = 1024;
    let qpn = in_init(&mut r, service_type::RC);
    let res = init2rtr(&mut r, qpn, |q| drop(q.set_mtu(4)));
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_MTU_ABOVE_PORT);
    init2rtr(&mut r, qpn, |q| drop(q.set_mtu(3))).unwrap();
    assert_eq!(r.qp(qpn).attrs.mtu, 1024);
}

#[test]
fn init2rtr_refuses_a_gid_index_beyond_the_ports_table() {
    let mut r = Rig::new();
    let qpn = in_init(&mut r, service_type::RC);
    assert_eq!(r.host.dev.profile.ports[0].gids.len(), 1);
    let res = init2rtr(&mut r, qpn, |q| {
        drop(q.primary_address_path_mut().set_src_addr_index(1));
    });
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_GID_INDEX);
}

#[test]
fn init2rtr_refuses_sizes_above_the_capabilities() {
    let mut r = Rig::new();
    let qpn = in_init(&mut r, service_type::RC);
    let caps = r.host.dev.profile.caps.clone();
    let rra = u32::from(caps.log_max_ra_res_qp) + 1;
    let res = init2rtr(&mut r, qpn, |q| drop(q.set_log_rra_max(rra)));
    assert_fails(res, CmdStatus::LIM_ERR, SYND_RRA_MAX);
    let msg = u32::from(caps.log_max_msg) + 1;
    let res = init2rtr(&mut r, qpn, |q| drop(q.set_log_msg_max(msg)));
    assert_fails(res, CmdStatus::LIM_ERR, SYND_LOG_MSG_MAX);
    let res = init2rtr(&mut r, qpn, |q| {
        drop(q.primary_address_path_mut().set_vhca_port_num(2));
    });
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_PORT);
    // At the limits it is accepted.
    let rra = u32::from(caps.log_max_ra_res_qp);
    init2rtr(&mut r, qpn, |q| drop(q.set_log_rra_max(rra))).unwrap();
    assert_eq!(r.qp(qpn).attrs.log_rra_max, caps.log_max_ra_res_qp);
}

#[test]
fn rtr2rts_refuses_log_sra_max_above_the_capability() {
    let mut r = Rig::new();
    let qpn = in_init(&mut r, service_type::RC);
    r.step(Opcode::INIT2RTR_QP, qpn).unwrap();
    let cap = r.host.dev.profile.caps.log_max_ra_req_qp;
    let res = r.modify(Opcode::RTR2RTS_QP, qpn, 0, |q| {
        good_fields(Opcode::RTR2RTS_QP, service_type::RC, peer(), q);
        q.set_log_sra_max(u32::from(cap) + 1).unwrap();
    });
    assert_fails(res, CmdStatus::LIM_ERR, SYND_SRA_MAX);
    assert_eq!(r.qp(qpn).state, QpState::Rtr);
    // rdma-core's DEVX test passes MAX_RDMA_ATOMIC = 20 into this 3-bit field: the layout's
    // setter refuses it, so it can never reach the device.
    let mut qpc = [0u8; 0xe8];
    let mut view = bypass_hw::cmd::qp::Qpc::new_checked(&mut qpc[..]).unwrap();
    assert!(view.set_log_sra_max(20).is_err());
}

#[test]
fn rst2init_refuses_a_missing_port_a_pkey_index_and_atomics_without_the_cap() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    for port in [0, 2] {
        let res = r.modify(Opcode::RST2INIT_QP, qpn, 0, |q| {
            drop(q.primary_address_path_mut().set_vhca_port_num(port));
        });
        assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_PORT);
    }
    let res = r.modify(Opcode::RST2INIT_QP, qpn, 0, |q| {
        drop(q.primary_address_path_mut().set_vhca_port_num(1));
        drop(q.primary_address_path_mut().set_pkey_index(1));
    });
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_PKEY_INDEX);
    r.host.dev.profile.caps.atomic = false;
    let res = r.modify(Opcode::RST2INIT_QP, qpn, 0, |q| {
        drop(q.primary_address_path_mut().set_vhca_port_num(1));
        drop(q.set_rae(1));
    });
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_RAE_NO_ATOMIC);
    assert_eq!(r.qp(qpn).state, QpState::Rst);
}

#[test]
fn optional_bits_outside_the_transitions_set_are_bad_param() {
    let mut r = Rig::new();
    let rc = r.qp_of(service_type::RC);
    let ud = r.qp_of(service_type::UD);
    let cases: [(u32, QpState, Opcode, M); 7] = [
        (rc, QpState::Rst, Opcode::RST2INIT_QP, M::RRE),
        (rc, QpState::Init, Opcode::INIT2RTR_QP, M::PRIMARY_ADDR_PATH),
        (rc, QpState::Rtr, Opcode::RTR2RTS_QP, M::SRA_MAX),
        (rc, QpState::Rts, Opcode::RTS2RTS_QP, M::Q_KEY),
        (
            rc,
            QpState::Rts,
            Opcode::RTS2RTS_QP,
            M::from_bits_retain(1 << 11),
        ),
        (
            rc,
            QpState::Rts,
            Opcode::RTS2RTS_QP,
            M::from_bits_retain(1 << 31),
        ),
        (ud, QpState::Rts, Opcode::RTS2RTS_QP, M::RRE),
    ];
    for (qpn, state, op, bits) in cases {
        r.force(qpn, state);
        let res = r.modify(op, qpn, bits.bits(), |q| {
            good_fields(op, r_st(qpn == ud), peer(), q);
        });
        assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_OPT_PARAM);
        assert_eq!(r.qp(qpn).state, state);
    }
}

fn r_st(ud: bool) -> u8 {
    if ud {
        service_type::UD
    } else {
        service_type::RC
    }
}

#[test]
fn optional_fields_apply_only_with_their_bit() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    // Without bits, RTS2RTS changes nothing.
    r.modify(Opcode::RTS2RTS_QP, qpn, 0, |q| {
        q.set_min_rnr_nak(20).unwrap().set_rre(0).unwrap();
    })
    .unwrap();
    assert_eq!(r.qp(qpn).attrs.min_rnr_nak, 12);
    assert!(r.qp(qpn).attrs.rre);
    // With RNR_TIMEOUT only the timer changes.
    r.modify(Opcode::RTS2RTS_QP, qpn, M::RNR_TIMEOUT.bits(), |q| {
        q.set_min_rnr_nak(20).unwrap().set_rre(0).unwrap();
    })
    .unwrap();
    assert_eq!(r.qp(qpn).attrs.min_rnr_nak, 20);
    assert!(r.qp(qpn).attrs.rre);
    assert_eq!(out_qpc(&r.query(qpn)).min_rnr_nak(), 20);
    // Access rights, one bit each.
    r.modify(Opcode::RTS2RTS_QP, qpn, (M::RRE | M::RAE).bits(), |q| {
        q.set_rre(0)
            .unwrap()
            .set_rae(1)
            .unwrap()
            .set_rwe(0)
            .unwrap();
    })
    .unwrap();
    let a = &r.qp(qpn).attrs;
    assert!(!a.rre && a.rae && a.rwe);
    assert_eq!(r.qp(qpn).state, QpState::Rts);
}

#[test]
fn init2init_takes_a_new_pkey_index_and_port_only_when_asked() {
    let mut r = Rig::new();
    r.host.dev.profile.caps.pkey_table_size = 4;
    let qpn = in_init(&mut r, service_type::UD);
    r.modify(
        Opcode::INIT2INIT_QP,
        qpn,
        (M::PKEY_INDEX | M::Q_KEY).bits(),
        |q| {
            q.primary_address_path_mut().set_pkey_index(3).unwrap();
            q.set_q_key(0x42).unwrap();
        },
    )
    .unwrap();
    assert_eq!(r.qp(qpn).attrs.path.pkey_index, 3);
    assert_eq!(r.qp(qpn).attrs.q_key, 0x42);
    let res = r.modify(Opcode::INIT2INIT_QP, qpn, M::PRI_PORT.bits(), |q| {
        drop(q.primary_address_path_mut().set_vhca_port_num(3));
    });
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_PORT);
}

#[test]
fn rts2rts_cqn_rcv_moves_the_users_count() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::UD);
    r.walk_to_rts(qpn);
    let (a, b) = (r.cq.cqn, r.cq2.cqn);
    let res = r.modify(Opcode::RTS2RTS_QP, qpn, M::CQN_RCV.bits(), |q| {
        q.set_cqn_rcv(999).unwrap();
    });
    assert_fails(res, CmdStatus::BAD_RES_ERR, SYND_NO_CQ_RCV);
    r.modify(Opcode::RTS2RTS_QP, qpn, M::CQN_RCV.bits(), |q| {
        q.set_cqn_rcv(b).unwrap();
    })
    .unwrap();
    assert_eq!(r.qp(qpn).cqn_rcv, b);
    assert_eq!(r.host.dev.comp.cqs.get(a).unwrap().users, 1);
    assert_eq!(r.host.dev.comp.cqs.get(b).unwrap().users, 1);
    let res = r.modify(Opcode::RTS2RTS_QP, qpn, M::SRQN.bits(), |_| {});
    assert_fails(res, CmdStatus::BAD_PARAM_ERR, SYND_SRQN);
    r.destroy(qpn).unwrap();
    assert_eq!(r.host.dev.comp.cqs.get(a).unwrap().users, 0);
    assert_eq!(r.host.dev.comp.cqs.get(b).unwrap().users, 0);
}

#[test]
fn to_err_is_allowed_from_every_state_of_the_table() {
    for from in QpState::ALL {
        let mut r = Rig::new();
        let qpn = r.qp_of(service_type::RC);
        r.force(qpn, from);
        let res = r.modify(Opcode::QP_2ERR, qpn, 0, |_| {});
        if QpState::MODIFIABLE.contains(&from) || from == QpState::SqDraining {
            res.unwrap();
            assert_eq!(r.qp(qpn).state, QpState::Err);
        } else {
            assert_fails(res, CmdStatus::BAD_QP_STATE_ERR, SYND_BAD_QP_STATE);
        }
    }
}

#[test]
fn to_rst_from_every_state_forgets_counters_psns_and_attributes() {
    for from in QpState::MODIFIABLE {
        let mut r = Rig::new();
        let qpn = r.qp_of(service_type::RC);
        r.walk_to_rts(qpn);
        {
            let qp = r.host.dev.objs.qps.get_mut(qpn).unwrap();
            qp.state = from;
            qp.sq_ci = 9;
            qp.rq_ci = 4;
        }
        r.modify(Opcode::QP_2RST, qpn, 0, |_| {}).unwrap();
        let qp = r.qp(qpn);
        assert_eq!(qp.state, QpState::Rst, "from {from}");
        assert_eq!((qp.sq_ci, qp.rq_ci), (0, 0));
        assert_eq!(qp.attrs, QpAttrs::default());
        let q = out_qpc(&r.query(qpn));
        assert_eq!(q.state(), 0);
        assert_eq!(q.remote_qpn(), 0);
        assert_eq!(q.mtu(), 0);
        assert_eq!(q.primary_address_path().vhca_port_num(), 0);
        // What CREATE_QP set stays.
        assert_eq!(q.pd(), r.host.pd);
        assert_eq!(q.log_sq_size(), 6);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a driver writes, the handlers answer with a status and never panic.
    #[test]
    fn no_command_bytes_panic_the_handlers(
        create in proptest::collection::vec(any::<u8>(), 0..0x140),
        modify in proptest::collection::vec(any::<u8>(), 0..0x120),
        op_index in 0usize..MODIFY_OPCODES.len(),
        fields in proptest::collection::vec(any::<u8>(), 0xe8),
        opt in any::<u32>(),
    ) {
        let mut r = Rig::new();
        let mut out = vec![0u8; 0x110 + 64];
        let _ = create_qp(&mut r.host.dev, &create, &mut out);
        let qpn = r.qp_of(service_type::RC);
        let op = MODIFY_OPCODES[op_index];
        let _ = modify_qp(&mut r.host.dev, op, &modify, &mut out);
        for from in QpState::ALL {
            r.force(qpn, from);
            let _ = r.modify(op, qpn, opt, |q| q.as_bytes_mut().copy_from_slice(&fields));
        }
        let _ = query_qp(&mut r.host.dev, &modify, &mut out);
        let _ = destroy_qp(&mut r.host.dev, &modify, &mut out);
        let _ = r.query_with_room(qpn, 1);
        let _ = r.destroy(qpn);
    }
}

/// The headers `transport::wire::qp_headers` keeps in QP `qpn` for its primary path (building them
/// if the QP has none).
fn kept_headers(
    r: &mut Rig,
    qpn: u32,
) -> Option<(bypass_hw::roce::IpSpec, bypass_hw::roce::UdpPorts)> {
    let path = r.qp(qpn).attrs.path.clone();
    let route = crate::transport::wire::Route {
        port: path.port,
        path: &path,
        src_qpn: qpn,
    };
    r.host.dev.data_path().qp_headers(qpn, route)
}

#[test]
fn a_new_path_gets_new_headers_after_the_modify_commands_replace_the_old_one() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    let (_, old_ports) = kept_headers(&mut r, qpn).expect("headers of the RTS path");
    assert_eq!(old_ports.src, 0xdcba, "the path's UDP source port");
    assert!(r.qp(qpn).headers.is_some(), "kept in the QP");
    r.step(Opcode::RTS2RTS_QP, qpn).unwrap();
    assert!(
        r.qp(qpn).headers.is_none(),
        "RTS2RTS replaces the attributes"
    );
    kept_headers(&mut r, qpn).expect("built again");
    r.step(Opcode::QP_2RST, qpn).unwrap();
    assert!(r.qp(qpn).headers.is_none(), "2RST clears the attributes");
    // Reconnected with another UDP source port and hop limit: the headers follow.
    r.step(Opcode::RST2INIT_QP, qpn).unwrap();
    init2rtr(&mut r, qpn, |q| {
        let mut p = q.primary_address_path_mut();
        p.set_udp_sport(0x1234).unwrap();
        p.set_hop_limit(7).unwrap();
    })
    .unwrap();
    r.step(Opcode::RTR2RTS_QP, qpn).unwrap();
    let (ip, ports) = kept_headers(&mut r, qpn).expect("headers of the new path");
    assert_eq!(ports.src, 0x1234);
    let hop = match ip {
        bypass_hw::roce::IpSpec::V4(v) => v.ttl,
        bypass_hw::roce::IpSpec::V6(v) => v.hop_limit,
    };
    assert_eq!(hop, 7);
}
