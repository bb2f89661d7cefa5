//! End-to-end data path between two simulated NICs: requester, wire, responder, completer.
//!
//! Objects come from the test rig (`testkit`), WQEs are built with `bypass-hw` and posted
//! through the real doorbells; everything else — WQE fetch, packets with ICRC, ACKs, READ
//! responses, CQEs with owner bits — is the device's own doing.

use bypass_hw::cqe::{Cqe64, CqeOpcode, ErrCqe};
use bypass_hw::syndrome::CqeSyndrome;
use bypass_hw::view::View;
use bypass_hw::wqe::{
    AtomicSeg, DgramParams, MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_SOLICITED, WqeOpcode,
};

use crate::testkit::{Host, Pair, RcConn, UD, Wqe};
use bypass_hw::cmd::qp::QpState;

type Conn = RcConn;

/// Two RC QPs connected at `mtu`, each with its own CQ and a 64 KiB MR with every right.
fn connect(mtu: u32) -> Conn {
    RcConn::new(mtu, 64 << 10, 0x10, 0x20)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn cqe(bytes: &[u8; 64]) -> &Cqe64 {
    Cqe64::view(bytes).expect("64 bytes")
}

#[test]
fn send_segments_at_the_mtu_and_lands_in_a_multi_sge_receive() {
    let mut c = connect(1024);
    let msg = pattern(5000, 1);
    c.p.a.write(c.a_mr.off, &msg);
    // The receive spreads over three SGEs.
    let b = c.b_mr;
    c.p.b.post_recv(
        &mut c.b_qp,
        &[
            (b.key, b.va, 1000),
            (b.key, b.va + 4096, 3000),
            (b.key, b.va + 8192, 2000),
        ],
    );
    let w = Wqe::new(WqeOpcode::SEND, c.a_qp.sq_pi, c.a_qp.qpn)
        .data(c.a_mr.key, c.a_mr.va, 5000)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    let carried = c.p.run();
    assert!(
        carried >= 6,
        "5 data packets and at least one ACK, got {carried}"
    );
    let got: Vec<u8> = [
        c.p.b.read(b.off, 1000),
        c.p.b.read(b.off + 4096, 3000),
        c.p.b.read(b.off + 8192, 1000),
    ]
    .concat();
    assert_eq!(got, msg);
    let rc = c.p.b.poll(&mut c.b_cq).expect("receive CQE");
    assert_eq!(cqe(&rc).opcode(), CqeOpcode::RESP_SEND);
    assert_eq!(cqe(&rc).byte_cnt(), 5000);
    assert_eq!(cqe(&rc).qpn(), c.b_qp.qpn);
    let sc = c.p.a.poll(&mut c.a_cq).expect("send CQE");
    assert_eq!(cqe(&sc).opcode(), CqeOpcode::REQ);
    assert_eq!(cqe(&sc).wqe_counter(), 0);
    assert_eq!(cqe(&sc).qpn(), c.a_qp.qpn);
    assert!(c.p.a.poll(&mut c.a_cq).is_none());
}

#[test]
fn send_with_immediate_and_solicited_flag() {
    let mut c = connect(4096);
    let b = c.b_mr;
    c.p.b.post_recv(&mut c.b_qp, &[(b.key, b.va, 64)]);
    let w = Wqe::new(WqeOpcode::SEND_IMM, 0, c.a_qp.qpn)
        .flags(MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED)
        .imm(0x1234_5678)
        .inline(b"hello")
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert_eq!(c.p.b.read(b.off, 5), b"hello");
    let rc = c.p.b.poll(&mut c.b_cq).expect("receive CQE");
    let e = cqe(&rc);
    assert_eq!(e.opcode(), CqeOpcode::RESP_SEND_IMM);
    assert_eq!(e.imm_inval_pkey(), 0x1234_5678);
    assert_eq!(e.se(), 1);
}

#[test]
fn rdma_write_and_write_with_immediate() {
    let mut c = connect(512);
    let data = pattern(3000, 9);
    c.p.a.write(c.a_mr.off, &data);
    let b = c.b_mr;
    let w = Wqe::new(WqeOpcode::RDMA_WRITE, 0, c.a_qp.qpn)
        .raddr(b.va + 100, b.key)
        .data(c.a_mr.key, c.a_mr.va, 3000)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert_eq!(c.p.b.read(b.off + 100, 3000), data);
    assert!(
        c.p.b.poll(&mut c.b_cq).is_none(),
        "a plain WRITE consumes no receive"
    );
    assert_eq!(
        cqe(&c.p.a.poll(&mut c.a_cq).expect("send CQE")).opcode(),
        CqeOpcode::REQ
    );

    c.p.b.post_recv(&mut c.b_qp, &[(b.key, b.va, 16)]);
    let w = Wqe::new(WqeOpcode::RDMA_WRITE_IMM, c.a_qp.sq_pi, c.a_qp.qpn)
        .imm(0xabcd)
        .raddr(b.va + 8192, b.key)
        .data(c.a_mr.key, c.a_mr.va, 700)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert_eq!(c.p.b.read(b.off + 8192, 700), data[..700]);
    let rc =
        c.p.b
            .poll(&mut c.b_cq)
            .expect("WRITE_IMM consumes a receive");
    assert_eq!(cqe(&rc).opcode(), CqeOpcode::RESP_WR_IMM);
    assert_eq!(cqe(&rc).imm_inval_pkey(), 0xabcd);
    assert_eq!(cqe(&rc).byte_cnt(), 700);
}

#[test]
fn rdma_read_reassembles_many_response_packets() {
    let mut c = connect(1024);
    let remote = pattern(4500, 3);
    c.p.b.write(c.b_mr.off + 64, &remote);
    let w = Wqe::new(WqeOpcode::RDMA_READ, 0, c.a_qp.qpn)
        .raddr(c.b_mr.va + 64, c.b_mr.key)
        .data(c.a_mr.key, c.a_mr.va + 10, 4500)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert_eq!(c.p.a.read(c.a_mr.off + 10, 4500), remote);
    let sc = c.p.a.poll(&mut c.a_cq).expect("READ CQE");
    assert_eq!(cqe(&sc).opcode(), CqeOpcode::REQ);
    assert_eq!(cqe(&sc).byte_cnt(), 4500);
}

#[test]
fn atomics_compare_swap_and_fetch_add_return_the_original_value() {
    let mut c = connect(1024);
    // mlx5 atomics operate on big-endian 64-bit values.
    c.p.b.write(c.b_mr.off, &100u64.to_be_bytes());
    let w = Wqe::new(WqeOpcode::ATOMIC_FA, 0, c.a_qp.qpn)
        .raddr(c.b_mr.va, c.b_mr.key)
        .atomic(AtomicSeg::fetch_add(5))
        .data(c.a_mr.key, c.a_mr.va, 8)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert_eq!(c.p.b.read(c.b_mr.off, 8), 105u64.to_be_bytes());
    assert_eq!(c.p.a.read(c.a_mr.off, 8), 100u64.to_be_bytes());
    c.p.a.poll(&mut c.a_cq).expect("FA CQE");

    let w = Wqe::new(WqeOpcode::ATOMIC_CS, c.a_qp.sq_pi, c.a_qp.qpn)
        .raddr(c.b_mr.va, c.b_mr.key)
        .atomic(AtomicSeg::compare_swap(105, 7))
        .data(c.a_mr.key, c.a_mr.va + 8, 8)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert_eq!(c.p.b.read(c.b_mr.off, 8), 7u64.to_be_bytes());
    assert_eq!(c.p.a.read(c.a_mr.off + 8, 8), 105u64.to_be_bytes());
    assert_eq!(cqe(&c.p.a.poll(&mut c.a_cq).expect("CS CQE")).byte_cnt(), 8);
}

#[test]
fn rnr_nak_retries_until_recv_posted() {
    let mut c = connect(1024);
    c.p.a.write(c.a_mr.off, b"late");
    let w = Wqe::new(WqeOpcode::SEND, 0, c.a_qp.qpn)
        .data(c.a_mr.key, c.a_mr.va, 4)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    assert!(
        c.p.b.dev.counters.out_of_buffer >= 1,
        "the responder answered RNR NAK"
    );
    assert!(c.p.a.dev.counters.rnr_nak_received >= 1);
    assert!(c.p.a.poll(&mut c.a_cq).is_none());
    let b = c.b_mr;
    c.p.b.post_recv(&mut c.b_qp, &[(b.key, b.va, 64)]);
    // min_rnr_nak 1 = 0.01 ms; give the timer time to fire.
    c.p.run_until(1_000_000);
    assert_eq!(c.p.b.read(b.off, 4), b"late");
    assert_eq!(
        cqe(&c
            .p
            .a
            .poll(&mut c.a_cq)
            .expect("send completes after the retry"))
        .opcode(),
        CqeOpcode::REQ
    );
    assert_eq!(
        cqe(&c.p.b.poll(&mut c.b_cq).expect("receive CQE")).byte_cnt(),
        4
    );
}

#[test]
fn remote_access_error_moves_the_requester_to_err_and_flushes_the_rest() {
    let mut c = connect(1024);
    let bad = Wqe::new(WqeOpcode::RDMA_WRITE, 0, c.a_qp.qpn)
        .raddr(c.b_mr.va, c.b_mr.key ^ 0x100)
        .data(c.a_mr.key, c.a_mr.va, 8)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &bad);
    let next = Wqe::new(WqeOpcode::SEND, 1, c.a_qp.qpn)
        .data(c.a_mr.key, c.a_mr.va, 8)
        .finish();
    c.p.a.post_send(&mut c.a_qp, &next);
    c.p.run();
    let e = c.p.a.poll(&mut c.a_cq).expect("error CQE");
    let err = ErrCqe::view(&e).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::REQ_ERR);
    assert_eq!(err.syndrome(), CqeSyndrome::REMOTE_ACCESS_ERR);
    assert_eq!(err.wqe_counter(), 0);
    let f = c.p.a.poll(&mut c.a_cq).expect("flush CQE");
    assert_eq!(
        ErrCqe::view(&f).unwrap().syndrome(),
        CqeSyndrome::WR_FLUSH_ERR
    );
    assert_eq!(
        c.p.a.dev.objs.qps.get(c.a_qp.qpn).unwrap().state,
        QpState::Err
    );
}

#[test]
fn ud_send_puts_the_grh_at_the_head_of_the_receive_buffer() {
    let mut p = Pair::new();
    let a_cq = p.a.cq(4);
    let b_cq = p.b.cq(4);
    let mut a_qp = p.a.qp(UD, &a_cq, &a_cq, 4, 4);
    let mut b_qp = p.b.qp(UD, &b_cq, &b_cq, 4, 4);
    let (ga, gb) = (p.a.gid(), p.b.gid());
    p.a.make_rts(&a_qp, 0, gb, 1024, 1, 1);
    p.b.make_rts(&b_qp, 0, ga, 1024, 1, 1);
    let a_mr = p.a.mr(4096, Host::all_access());
    let b_mr = p.b.mr(4096, Host::all_access());
    p.a.write(a_mr.off, b"datagram");
    p.b.post_recv(&mut b_qp, &[(b_mr.key, b_mr.va, 256)]);
    let av = DgramParams {
        key: u64::from(0x1111_1111u32) << 32,
        dqp_dct: b_qp.qpn,
        ext: true,
        hop_limit: 64,
        rgid: gb,
        ..Default::default()
    };
    let w = Wqe::new(WqeOpcode::SEND, 0, a_qp.qpn)
        .av(&av)
        .data(a_mr.key, a_mr.va, 8)
        .finish();
    p.a.post_send(&mut a_qp, &w);
    p.run();
    let mut b_cq = b_cq;
    let rc = p.b.poll(&mut b_cq).expect("UD receive");
    assert_eq!(cqe(&rc).byte_cnt(), 40 + 8);
    assert_eq!(cqe(&rc).rqpn(), a_qp.qpn);
    assert_eq!(p.b.read(b_mr.off + 40, 8), b"datagram");
    // RoCEv2 over IPv4: the IPv4 header sits in the last 20 bytes of the 40-byte GRH.
    let grh = p.b.read(b_mr.off, 40);
    assert_eq!(grh[20] >> 4, 4, "IPv4 header version");
    assert_eq!(&grh[32..36], &ga[12..16], "source address");
    let mut a_cq = a_cq;
    assert!(p.a.poll(&mut a_cq).is_some(), "UD send completes locally");
}

#[test]
fn owner_bit_and_ring_wrap_over_several_laps() {
    let mut c = connect(4096);
    let b = c.b_mr;
    // SQ and RQ of 64 entries and a CQ of 64 CQEs: 200 messages wrap each of them three times.
    for i in 0..200u32 {
        c.p.b.post_recv(&mut c.b_qp, &[(b.key, b.va, 64)]);
        c.p.a.write(c.a_mr.off, &i.to_be_bytes());
        let w = Wqe::new(WqeOpcode::SEND, c.a_qp.sq_pi, c.a_qp.qpn)
            .data(c.a_mr.key, c.a_mr.va, 4)
            .finish();
        c.p.a.post_send(&mut c.a_qp, &w);
        c.p.run();
        assert_eq!(c.p.b.read(b.off, 4), i.to_be_bytes(), "message {i}");
        assert_eq!(
            cqe(&c
                .p
                .a
                .poll(&mut c.a_cq)
                .unwrap_or_else(|| panic!("send CQE {i}")))
            .wqe_counter(),
            i as u16
        );
        assert!(c.p.b.poll(&mut c.b_cq).is_some(), "receive CQE {i}");
    }
}

#[test]
fn multi_wqebb_wqe_with_many_sges() {
    let mut c = connect(1024);
    let a = c.a_mr;
    // 12 SGEs of 10 bytes: ctrl + 12 data segs = 13 DS = 4 WQEBBs.
    let mut w = Wqe::new(WqeOpcode::SEND, 0, c.a_qp.qpn);
    for i in 0..12u64 {
        c.p.a.write(a.off + i as usize * 100, &[i as u8; 10]);
        w = w.data(a.key, a.va + i * 100, 10);
    }
    let w = w.finish();
    assert_eq!(w.len(), 256);
    let b = c.b_mr;
    c.p.b.post_recv(&mut c.b_qp, &[(b.key, b.va, 200)]);
    c.p.a.post_send(&mut c.a_qp, &w);
    c.p.run();
    let expect: Vec<u8> = (0..12u8).flat_map(|i| [i; 10]).collect();
    assert_eq!(c.p.b.read(b.off, 120), expect);
    assert_eq!(c.a_qp.sq_pi, 4);
}

#[test]
fn a_connection_carried_as_the_udp_link_hands_packets_over_ends_as_one_carried_parsed() {
    // The same exchange twice: a 5000-byte WRITE at a 1024 MTU (five packets), a SEND with
    // immediate into a posted receive, and an 8-byte READ; once carried with every packet
    // parsed (`Device::receive`), once with the IP and UDP headers given as the UDP link gives
    // them (`Device::receive_udp_in_place`). Memory, CQEs and counters must agree.
    let outcome = |udp: bool| {
        let mut c = connect(1024);
        let (a, b) = (c.a_mr, c.b_mr);
        c.p.a.write(a.off, &pattern(5000, 7));
        c.p.b.write(b.off + 0x8000, &pattern(8, 9));
        c.p.b.post_recv(&mut c.b_qp, &[(b.key, b.va + 0x4000, 64)]);
        let write = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
            .raddr(b.va, b.key)
            .data(a.key, a.va, 5000)
            .finish();
        c.p.a.post_send(&mut c.a_qp, &write);
        let send = Wqe::new(WqeOpcode::SEND_IMM, c.a_qp.sq_pi, c.a_qp.qpn)
            .imm(0x1234_5678)
            .data(a.key, a.va, 32)
            .finish();
        c.p.a.post_send(&mut c.a_qp, &send);
        let read = Wqe::new(WqeOpcode::RDMA_READ, c.a_qp.sq_pi, c.a_qp.qpn)
            .flags(MLX5_WQE_CTRL_CQ_UPDATE)
            .raddr(b.va + 0x8000, b.key)
            .data(a.key, a.va + 0x8000, 8)
            .finish();
        c.p.a.post_send(&mut c.a_qp, &read);
        let carried = if udp {
            c.p.run_udp_in_place()
        } else {
            c.p.run()
        };
        let mut cqes = Vec::new();
        while let Some(e) = c.p.a.poll(&mut c.a_cq) {
            cqes.push(e);
        }
        while let Some(e) = c.p.b.poll(&mut c.b_cq) {
            cqes.push(e);
        }
        let memory = (
            c.p.b.read(b.off, 5000),
            c.p.b.read(b.off + 0x4000, 32),
            c.p.a.read(a.off + 0x8000, 8),
        );
        let counters = |d: &crate::device::Device| {
            let k = &d.counters;
            (
                k.port_rcv_packets,
                k.port_xmit_packets,
                k.rx_icrc_errors,
                k.rx_discards,
            )
        };
        (
            carried,
            cqes,
            memory,
            counters(&c.p.a.dev),
            counters(&c.p.b.dev),
        )
    };
    let (parsed, given) = (outcome(false), outcome(true));
    assert_eq!(given, parsed);
    let (_, cqes, (written, sent, read), a_counts, b_counts) = given;
    assert_eq!(written, pattern(5000, 7));
    assert_eq!(sent, pattern(32, 7));
    assert_eq!(read, pattern(8, 9));
    // Lossless and no timer run, so nothing is retransmitted. a sends five WRITE packets, the
    // SEND and the READ request; b answers the two AckReq packets (the WRITE's last and the
    // SEND, each the last of its message: `requester::send_rc`; `responder::advance`) and the
    // READ with one response packet (8 bytes).
    assert_eq!(
        b_counts,
        (7, 3, 0, 0),
        "b: received, sent, ICRC errors, discards"
    );
    assert_eq!(
        a_counts,
        (3, 7, 0, 0),
        "a: received, sent, ICRC errors, discards"
    );
    assert!(
        cqes.iter().all(|e| {
            let op = cqe(e).opcode();
            op == CqeOpcode::REQ || op == CqeOpcode::RESP_SEND_IMM
        }),
        "every completion succeeded"
    );
}
