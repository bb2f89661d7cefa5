//! The peer checks (`transport::peer`) on every way a packet reaches the device: bytes parsed
//! (`Device::receive`), headers given as the UDP link gives them
//! (`Device::receive_udp_in_place`), and the in-process link's frames (a WRITE burst, an
//! ACK as fields). A packet from an address other than the QP's peer is dropped unanswered
//! and counted on the device and the QP; the responder tests cover the forged WRITE's bytes.
//!
//! Owns: these tests. Must not: test the responder or completer themselves.

use bypass_hw::wqe::{MLX5_WQE_CTRL_CQ_UPDATE, WqeOpcode};

use crate::frame::Frame;
use crate::profile::Profile;
use crate::testkit::{RcConn, Wqe};

const LEN: u32 = 5000; // five packets at a 1024-byte MTU

/// A connection whose B side believes its peer is at 10.0.0.9 (A is at 10.0.0.1), with A's
/// 5000-byte WRITE to B posted.
fn b_connected_elsewhere() -> RcConn {
    let mut c = RcConn::new(1024, 64 << 10, 0x10, 0x20);
    let q = c.p.b.dev.objs.qps.get_mut(c.b_qp.qpn).expect("b's qp");
    q.attrs.path.rgid = Profile::ipv4_gid([10, 0, 0, 9]);
    q.headers = None;
    let (a, b) = (c.a_mr, c.b_mr);
    c.p.a.write(a.off, &vec![0x77; LEN as usize]);
    let w = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
        .flags(MLX5_WQE_CTRL_CQ_UPDATE)
        .raddr(b.va, b.key)
        .data(a.key, a.va, LEN)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c
}

/// B took nothing of the WRITE, answered nothing and counted every packet as from
/// elsewhere; A has no completion.
fn assert_refused(c: &mut RcConn, how: &str) {
    assert_eq!(
        c.p.b.read(c.b_mr.off, LEN as usize),
        vec![0; LEN as usize],
        "{how}: no byte lands"
    );
    let k = &c.p.b.dev.counters;
    assert_eq!(k.rx_addr_errors, 5, "{how}");
    assert_eq!((k.rx_write_requests, k.port_xmit_packets), (0, 0), "{how}");
    assert_eq!(k.rx_discards, 0, "{how}");
    let q = c.p.b.dev.qp_counters(c.b_qp.qpn).expect("b's qp");
    assert_eq!(q.rx_addr_errors, 5, "{how}");
    assert!(
        c.p.a.poll(&mut c.a_cq).is_none(),
        "{how}: no ACK, no completion"
    );
}

#[test]
fn a_write_from_another_address_is_refused_parsed_given_as_the_udp_link_does_and_as_a_burst() {
    let mut c = b_connected_elsewhere();
    c.p.run();
    assert_refused(&mut c, "parsed");

    let mut c = b_connected_elsewhere();
    c.p.run_udp_in_place();
    assert_refused(&mut c, "udp link");

    let mut c = b_connected_elsewhere();
    let (frames, packets) = c.p.run_frames();
    assert_eq!((frames, packets), (1, 5), "one burst of five packets");
    assert_refused(&mut c, "burst");
}

#[test]
fn an_ack_frame_from_another_address_is_refused_and_the_peers_own_is_taken() {
    let mut c = RcConn::new(1024, 64 << 10, 0x10, 0x20);
    c.p.a.dev.set_fast_tx(true);
    c.p.b.dev.set_fast_tx(true);
    let (a, b) = (c.a_mr, c.b_mr);
    let w = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
        .flags(MLX5_WQE_CTRL_CQ_UPDATE)
        .raddr(b.va, b.key)
        .data(a.key, a.va, 64)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.a.dev.step();
    while let Some(f) = c.p.a.dev.take_frame() {
        c.p.b.dev.receive_frame(f);
    }
    c.p.b.dev.step();
    let Some(Frame::Ack(ack)) = c.p.b.dev.take_frame() else {
        panic!("B answers the WRITE with an ACK frame");
    };
    let mut forged = ack;
    let bypass_hw::roce::IpSpec::V4(v) = &mut forged.ip else {
        panic!("an IPv4 profile");
    };
    v.src = [10, 0, 0, 9];
    c.p.a.dev.receive_frame(Frame::Ack(forged));
    c.p.a.dev.step();
    assert!(
        c.p.a.poll(&mut c.a_cq).is_none(),
        "the forged ACK completes nothing"
    );
    assert_eq!(c.p.a.dev.counters.rx_addr_errors, 1);
    let q = c.p.a.dev.qp_counters(c.a_qp.qpn).expect("a's qp");
    assert_eq!(q.rx_addr_errors, 1);
    // B's own ACK, from B's address, completes the WRITE.
    c.p.a.dev.receive_frame(Frame::Ack(ack));
    c.p.a.dev.step();
    assert!(
        c.p.a.poll(&mut c.a_cq).is_some(),
        "the peer's ACK completes the WRITE"
    );
    assert_eq!(c.p.a.dev.counters.rx_addr_errors, 1);
}
