//! The RST → INIT → RTR → RTS walk as rdma-core's DEVX test does it, for RC and UD, and what
//! QUERY_QP shows along the way.

use bypass_hw::cmd::Opcode;
use bypass_hw::cmd::qp::{PathMtu, QpState, service_type};

use super::{PEER_MAC, PEER_QPN, RQ_PSN, Rig, SQ_PSN, out_qpc};
use crate::objects::{AddressPath, QpAttrs};
use crate::profile::Profile;

#[test]
fn rc_walks_rst_init_rtr_rts_like_rdma_core_devx_test() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    let peer = Profile::with_id(2).ports[0].gids[0];

    r.step(Opcode::RST2INIT_QP, qpn).unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Init);
    let a = &r.qp(qpn).attrs;
    assert!(a.rre && a.rwe && !a.rae);
    assert_eq!(a.path.port, 1);
    assert_eq!(out_qpc(&r.query(qpn)).state(), QpState::Init as u32);

    r.step(Opcode::INIT2RTR_QP, qpn).unwrap();
    assert_eq!(r.qp(qpn).state, QpState::Rtr);

    r.step(Opcode::RTR2RTS_QP, qpn).unwrap();
    let qp = r.qp(qpn);
    assert_eq!(qp.state, QpState::Rts);
    assert_eq!(
        qp.attrs,
        QpAttrs {
            mtu: 1024,
            log_msg_max: 20,
            remote_qpn: PEER_QPN,
            q_key: 0,
            path: AddressPath {
                rgid: peer,
                rmac: PEER_MAC,
                src_addr_index: 0,
                hop_limit: 64,
                tclass: 0,
                flow_label: 0,
                udp_sport: 0xdcba,
                port: 1,
                ack_timeout: 14,
                pkey_index: 0,
            },
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_nak: 12,
            log_sra_max: 3,
            log_rra_max: 0,
            rre: true,
            rwe: true,
            rae: false,
            sq_psn: SQ_PSN,
            rq_psn: RQ_PSN,
        }
    );

    // QUERY_QP: the state and PSNs live from the transport, the rest as the commands set it.
    let (live_sq, live_rq) = (qp.req.psn(), qp.resp.epsn());
    let out = r.query(qpn);
    let q = out_qpc(&out);
    assert_eq!(q.state(), QpState::Rts as u32);
    assert_eq!(q.next_send_psn(), live_sq & 0xff_ffff);
    assert_eq!(q.next_rcv_psn(), live_rq & 0xff_ffff);
    assert_eq!(q.mtu(), u32::from(PathMtu::Mtu1024.code()));
    assert_eq!(q.log_msg_max(), 20);
    assert_eq!(q.remote_qpn(), PEER_QPN);
    assert_eq!(q.min_rnr_nak(), 12);
    assert_eq!((q.rre(), q.rwe(), q.rae()), (1, 1, 0));
    assert_eq!((q.retry_count(), q.rnr_retry(), q.log_sra_max()), (7, 7, 3));
    let p = q.primary_address_path();
    assert_eq!(p.rgid_rip(), peer);
    assert_eq!(p.rmac(), PEER_MAC);
    assert_eq!(p.vhca_port_num(), 1);
    assert_eq!(p.hop_limit(), 64);
    assert_eq!(p.udp_sport(), 0xdcba);
    assert_eq!(p.ack_timeout(), 14);
}

#[test]
fn query_reports_the_psns_the_transport_holds() {
    // The stored context has the PSNs the commands gave; QUERY_QP reports the transport's
    // current ones, which start there.
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    let qp = r.qp(qpn);
    let expect_sq = crate::transport::requester::state::ReqState::new(SQ_PSN).psn();
    let expect_rq = crate::transport::responder::state::RespState::new(RQ_PSN).epsn();
    assert_eq!(qp.req.psn(), expect_sq);
    assert_eq!(qp.resp.epsn(), expect_rq);
    let q = out_qpc(&r.query(qpn));
    assert_eq!(q.next_send_psn(), expect_sq & 0xff_ffff);
    assert_eq!(q.next_rcv_psn(), expect_rq & 0xff_ffff);
}

#[test]
fn ud_walks_to_rts_with_its_q_key_and_the_port_mtu() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::UD);
    r.walk_to_rts(qpn);
    let qp = r.qp(qpn);
    assert_eq!(qp.state, QpState::Rts);
    assert_eq!(qp.attrs.q_key, 0x1111_1111);
    assert_eq!(qp.attrs.mtu, 4096, "the port's MTU");
    assert_eq!(qp.attrs.sq_psn, SQ_PSN);
    assert_eq!(qp.attrs.path.port, 1);
    assert!(!qp.attrs.rre && !qp.attrs.rwe && !qp.attrs.rae);
    let q = out_qpc(&r.query(qpn));
    assert_eq!(q.q_key(), 0x1111_1111);
    assert_eq!(q.state(), QpState::Rts as u32);
}

#[test]
fn a_reset_qp_can_walk_again() {
    let mut r = Rig::new();
    let qpn = r.qp_of(service_type::RC);
    r.walk_to_rts(qpn);
    r.modify(Opcode::QP_2RST, qpn, 0, |_| {}).unwrap();
    r.walk_to_rts(qpn);
    assert_eq!(r.qp(qpn).state, QpState::Rts);
    assert_eq!(r.qp(qpn).attrs.remote_qpn, PEER_QPN);
}
