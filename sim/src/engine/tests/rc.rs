//! RC requester and completer: packets of every opcode, ACKs, NAKs, RNR, timeouts.

use bypass_hw::roce::{AtomicAckEth, BthOpcode as B, ExtFields};
use bypass_hw::syndrome::{AethSyndrome, CqeSyndrome};
use bypass_hw::wqe::{
    AtomicSeg, DataSeg, MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_FENCE, MLX5_WQE_CTRL_SOLICITED,
    RaddrSeg, WqeOpcode, write_inline,
};
use zerocopy::IntoBytes;

use super::*;

#[test]
fn send_is_segmented_at_each_mtu_with_consecutive_psns_and_ackreq_on_the_last() {
    for mtu in [256u32, 1024, 4096] {
        let mut r = Rig::rc(mtu, 100);
        let len = 2 * mtu + 10;
        r.send(len);
        let pkts = r.sent();
        assert_eq!(pkts.len(), 3, "mtu {mtu}");
        let want = [B::RC_SEND_FIRST, B::RC_SEND_MIDDLE, B::RC_SEND_LAST];
        let mut data = Vec::new();
        for (i, b) in pkts.iter().enumerate() {
            let p = parse(b);
            assert_eq!(p.opcode(), want[i]);
            assert_eq!(p.bth().psn(), 100 + i as u32);
            assert_eq!(p.bth().dest_qp(), REMOTE);
            assert_eq!(p.bth().pkey(), 0xffff);
            assert_eq!(p.bth().ack_req(), i == 2);
            data.extend_from_slice(p.payload());
        }
        assert_eq!(data, r.p.a.read(r.mr.off, len as usize));
        assert!(r.poll().is_none(), "no CQE before the ACK");
        r.ack(102);
        let c = r.poll().expect("completion");
        assert_ok(&c, r.qp.qpn, 0, WqeOpcode::SEND);
    }
}

#[test]
fn zero_byte_send_and_write_are_one_only_packet() {
    let mut r = Rig::rc(1024, 5);
    r.post(WqeOpcode::SEND, &[], 0, MLX5_WQE_CTRL_CQ_UPDATE);
    // rdma-core leaves zero-length SGEs out (a 0 byte_count would mean 2 GiB).
    let ra = RaddrSeg::new(0x1000, 3);
    r.post(
        WqeOpcode::RDMA_WRITE,
        &[ra.as_bytes()],
        0,
        MLX5_WQE_CTRL_CQ_UPDATE,
    );
    let pkts = r.sent();
    let p0 = parse(&pkts[0]);
    assert_eq!((p0.opcode(), p0.payload().len()), (B::RC_SEND_ONLY, 0));
    let p1 = parse(&pkts[1]);
    assert_eq!(p1.opcode(), B::RC_RDMA_WRITE_ONLY);
    assert_eq!(p1.reth().expect("reth").len(), 0);
    assert_eq!(p1.bth().psn(), 6);
}

#[test]
fn multi_sge_gather_and_inline_payloads() {
    let mut r = Rig::rc(1024, 0);
    let (k, va) = (r.mr.key, r.mr.va);
    let a = DataSeg::new(3, k, va + 10);
    let b = DataSeg::new(5, k, va + 4000);
    let c = DataSeg::new(700, k, va + 8190);
    r.post(
        WqeOpcode::SEND,
        &[a.as_bytes(), b.as_bytes(), c.as_bytes()],
        0,
        MLX5_WQE_CTRL_CQ_UPDATE,
    );
    let mut inl = [0u8; 48];
    write_inline(&mut inl, b"hello, inline world").expect("fits");
    r.post(WqeOpcode::SEND, &[&inl[..32]], 0, MLX5_WQE_CTRL_CQ_UPDATE);
    let pkts = r.sent();
    let mut want = r.p.a.read(r.mr.off + 10, 3);
    want.extend(r.p.a.read(r.mr.off + 4000, 5));
    want.extend(r.p.a.read(r.mr.off + 8190, 700));
    assert_eq!(parse(&pkts[0]).payload(), &want[..]);
    assert_eq!(parse(&pkts[1]).payload(), b"hello, inline world");
}

#[test]
fn write_with_immediate_has_reth_first_and_immdt_last() {
    let mut r = Rig::rc(256, 7);
    let ra = RaddrSeg::new(0x1234_5000, 0xbeef);
    let d = DataSeg::new(600, r.mr.key, r.mr.va);
    r.post(
        WqeOpcode::RDMA_WRITE_IMM,
        &[ra.as_bytes(), d.as_bytes()],
        0xcafe_f00d,
        MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED,
    );
    let pkts = r.sent();
    let ops: Vec<_> = pkts.iter().map(|b| parse(b).opcode()).collect();
    assert_eq!(
        ops,
        [
            B::RC_RDMA_WRITE_FIRST,
            B::RC_RDMA_WRITE_MIDDLE,
            B::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
        ]
    );
    let first = parse(&pkts[0]);
    let reth = first.reth().expect("reth");
    assert_eq!(
        (reth.va(), reth.rkey(), reth.len()),
        (0x1234_5000, 0xbeef, 600)
    );
    let last = parse(&pkts[2]);
    assert_eq!(last.imm_dt().expect("imm").imm(), 0xcafe_f00d);
    assert!(last.bth().se() && !first.bth().se());
    // SEND with immediate, one packet.
    let d = DataSeg::new(8, r.mr.key, r.mr.va);
    r.post(
        WqeOpcode::SEND_IMM,
        &[d.as_bytes()],
        0x11,
        MLX5_WQE_CTRL_CQ_UPDATE,
    );
    let p = r.sent();
    assert_eq!(parse(&p[0]).opcode(), B::RC_SEND_ONLY_WITH_IMMEDIATE);
}

#[test]
fn long_messages_ask_for_an_ack_every_64_packets_and_respect_the_window() {
    let mut r = Rig::rc(256, 0);
    r.send(200 * 256);
    let pkts = r.sent();
    assert_eq!(pkts.len(), 128, "the window holds 128 unacknowledged PSNs");
    let acks: Vec<u32> = pkts
        .iter()
        .map(|b| parse(b))
        .filter(|p| p.bth().ack_req())
        .map(|p| p.bth().psn())
        .collect();
    assert_eq!(acks, [63, 127]);
    r.ack(63);
    let more = r.sent();
    assert_eq!(more.len(), 64);
    assert_eq!(parse(&more[0]).bth().psn(), 128);
    r.ack(191);
    let rest = r.sent();
    assert_eq!(rest.len(), 8);
    assert!(parse(&rest[7]).bth().ack_req());
    r.ack(199);
    assert_eq!(r.poll().expect("cqe").wqe_counter(), 0);
}

#[test]
fn read_reserves_psns_and_responses_reassemble_into_the_local_buffer() {
    let mut r = Rig::rc(1024, 50);
    let idx = r.read(2500, 0x8000);
    r.send(1);
    let pkts = r.sent();
    let req = parse(&pkts[0]);
    assert_eq!(req.opcode(), B::RC_RDMA_READ_REQUEST);
    assert_eq!(req.bth().psn(), 50);
    assert!(req.bth().ack_req());
    assert_eq!(req.reth().expect("reth").len(), 2500);
    assert_eq!(parse(&pkts[1]).bth().psn(), 53, "READ reserved 3 PSNs");
    let src: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
    let aeth = |s| ExtFields {
        aeth: Some(bypass_hw::roce::Aeth::new(AethSyndrome(s), 1).expect("aeth")),
        ..Default::default()
    };
    r.respond(B::RC_RDMA_READ_RESPONSE_FIRST, 50, aeth(0x1f), &src[..1024]);
    // A duplicate is ignored.
    r.respond(B::RC_RDMA_READ_RESPONSE_FIRST, 50, aeth(0x1f), &[0; 1024]);
    r.respond(
        B::RC_RDMA_READ_RESPONSE_MIDDLE,
        51,
        ExtFields::default(),
        &src[1024..2048],
    );
    assert!(r.poll().is_none());
    r.respond(B::RC_RDMA_READ_RESPONSE_LAST, 52, aeth(0x1f), &src[2048..]);
    let c = r.poll().expect("read completes");
    assert_ok(&c, r.qp.qpn, idx, WqeOpcode::RDMA_READ);
    assert_eq!(c.byte_cnt(), 2500);
    assert_eq!(r.p.a.read(r.mr.off + 0x8000, 2500), src);
    r.ack(53);
    assert_eq!(r.poll().expect("send").wqe_counter(), 1);
}

#[test]
fn atomics_carry_atomiceth_and_the_ack_writes_the_original_value_big_endian() {
    let mut r = Rig::rc(1024, 9);
    let ra = RaddrSeg::new(0x1000_0008, 0x42);
    let at = AtomicSeg::compare_swap(5, 6);
    let d = DataSeg::new(8, r.mr.key, r.mr.va + 64);
    r.post(
        WqeOpcode::ATOMIC_CS,
        &[ra.as_bytes(), at.as_bytes(), d.as_bytes()],
        0,
        MLX5_WQE_CTRL_CQ_UPDATE,
    );
    let p = r.sent();
    let pkt = parse(&p[0]);
    assert_eq!(pkt.opcode(), B::RC_COMPARE_SWAP);
    let e = pkt.atomic_eth().expect("atomic eth");
    assert_eq!(
        (e.va(), e.rkey(), e.swap_add(), e.comp()),
        (0x1000_0008, 0x42, 6, 5)
    );
    let ext = ExtFields {
        aeth: Some(bypass_hw::roce::Aeth::new(AethSyndrome(0x1f), 1).expect("aeth")),
        atomic_ack_eth: Some(AtomicAckEth::new(0x0102_0304_0506_0708)),
        ..Default::default()
    };
    r.respond(B::RC_ATOMIC_ACKNOWLEDGE, 9, ext, &[]);
    let c = r.poll().expect("atomic completes");
    assert_ok(&c, r.qp.qpn, 0, WqeOpcode::ATOMIC_CS);
    assert_eq!(c.byte_cnt(), 8);
    assert_eq!(r.p.a.read(r.mr.off + 64, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn coalesced_ack_completes_several_wqes_in_order_and_unsignaled_ones_silently() {
    let mut r = Rig::rc(1024, 0);
    r.send(10);
    let d = DataSeg::new(10, r.mr.key, r.mr.va);
    r.post(WqeOpcode::SEND, &[d.as_bytes()], 0, 0); // unsignaled
    r.write(3000);
    r.send(1);
    assert_eq!(r.sent().len(), 6);
    r.ack(4); // up to the WRITE's last packet
    let c = r.poll_all();
    assert_eq!(c.len(), 2);
    assert_ok(&c[0], r.qp.qpn, 0, WqeOpcode::SEND);
    assert_ok(&c[1], r.qp.qpn, 2, WqeOpcode::RDMA_WRITE);
    r.ack(4); // duplicate: nothing
    assert!(r.poll().is_none());
    r.ack(5);
    assert_eq!(r.poll().expect("last").wqe_counter(), 3);
}

#[test]
fn psns_wrap_at_two_to_the_24() {
    let mut r = Rig::rc(256, 0x00ff_fffe);
    r.send(1000);
    let psns: Vec<u32> = r.sent().iter().map(|b| parse(b).bth().psn()).collect();
    assert_eq!(psns, [0x00ff_fffe, 0x00ff_ffff, 0, 1]);
    r.ack(1);
    assert!(r.poll().is_some());
    assert_eq!(r.qp_mut().req.psn(), 2);
}

#[test]
fn psn_sequence_nak_goes_back_to_the_nak_psn() {
    let mut r = Rig::rc(256, 10);
    r.send(1000); // PSNs 10..13
    r.send(10); // 14
    assert_eq!(r.sent().len(), 5);
    r.aeth(12, 0x60); // responder expects 12: 10 and 11 arrived
    let again: Vec<(B, u32)> = r
        .sent()
        .iter()
        .map(|b| (parse(b).opcode(), parse(b).bth().psn()))
        .collect();
    assert_eq!(
        again,
        [
            (B::RC_SEND_MIDDLE, 12),
            (B::RC_SEND_LAST, 13),
            (B::RC_SEND_ONLY, 14)
        ]
    );
    let c = &r.p.a.dev.counters;
    assert_eq!(
        (c.packet_seq_err, c.naks_received, c.retransmits),
        (1, 1, 3)
    );
    r.ack(14);
    assert_eq!(r.poll_all().len(), 2);
}

#[test]
fn fatal_naks_complete_with_their_syndrome_and_flush_the_rest() {
    for (code, synd) in [
        (0x61, CqeSyndrome::REMOTE_INVAL_REQ_ERR),
        (0x62, CqeSyndrome::REMOTE_ACCESS_ERR),
        (0x63, CqeSyndrome::REMOTE_OP_ERR),
    ] {
        let mut r = Rig::rc(1024, 0);
        r.send(10);
        r.write(10);
        r.send(10);
        r.sent();
        r.aeth(1, code);
        let c = r.poll_all();
        assert_eq!(c.len(), 3, "{synd}");
        assert_ok(&c[0], r.qp.qpn, 0, WqeOpcode::SEND);
        assert_err(&c[1], r.qp.qpn, 1, synd);
        assert_err(&c[2], r.qp.qpn, 2, CqeSyndrome::WR_FLUSH_ERR);
        assert_eq!(r.qp_mut().state, bypass_hw::cmd::qp::QpState::Err);
        let k = &r.p.a.dev.counters;
        assert_eq!((k.req_cqe_error, k.req_cqe_flush_error), (1, 1));
    }
}

#[test]
fn rnr_nak_waits_the_timer_then_retries_until_the_receive_is_posted() {
    let mut r = Rig::rc(1024, 0);
    r.send(10);
    r.sent();
    r.aeth(0, AethSyndrome::rnr_nak(14).0); // 1.28 ms
    assert_eq!(r.p.a.dev.next_deadline(), Some(1_280_000));
    r.at(1_279_999);
    assert!(r.sent().is_empty(), "not before the timer");
    r.at(1_280_000);
    let again = r.sent();
    assert_eq!(again.len(), 1);
    assert_eq!(parse(&again[0]).bth().psn(), 0);
    r.aeth(0, AethSyndrome::rnr_nak(1).0);
    r.at(1_290_000);
    assert_eq!(r.sent().len(), 1);
    r.ack(0);
    assert_ok(&r.poll().expect("cqe"), r.qp.qpn, 0, WqeOpcode::SEND);
    assert_eq!(r.p.a.dev.counters.rnr_nak_received, 2);
}

#[test]
fn rnr_retries_exhausted_complete_with_rnr_retry_exc() {
    let mut r = Rig::rc(1024, 0);
    r.qp_mut().attrs.rnr_retry = 2;
    r.send(10);
    r.send(10);
    let mut t = 0;
    for _ in 0..2 {
        r.sent();
        r.aeth(0, AethSyndrome::rnr_nak(1).0);
        t += 10_000;
        r.at(t);
    }
    r.aeth(0, AethSyndrome::rnr_nak(1).0);
    let c = r.poll_all();
    assert_err(&c[0], r.qp.qpn, 0, CqeSyndrome::RNR_RETRY_EXC_ERR);
    assert_err(&c[1], r.qp.qpn, 1, CqeSyndrome::WR_FLUSH_ERR);
    assert_eq!(r.p.a.dev.counters.rnr_nak_retry_err, 1);
}

#[test]
fn ack_timeout_retransmits_then_fails_with_transport_retry_exc_and_flushes_the_rest() {
    let mut r = Rig::rc(1024, 0);
    r.qp_mut().attrs.retry_count = 2;
    r.qp_mut().attrs.path.ack_timeout = 10; // 4.096 µs << 10
    let t = 4096u64 << 10;
    r.send(10);
    r.send(10);
    assert_eq!(r.sent().len(), 2);
    assert_eq!(r.p.a.dev.next_deadline(), Some(t));
    r.at(t);
    let psns: Vec<u32> = r.sent().iter().map(|b| parse(b).bth().psn()).collect();
    assert_eq!(psns, [0, 1], "go-back-N from the oldest unacknowledged PSN");
    r.at(2 * t);
    assert_eq!(r.sent().len(), 2);
    assert!(r.poll().is_none());
    r.at(3 * t);
    let c = r.poll_all();
    assert_err(&c[0], r.qp.qpn, 0, CqeSyndrome::TRANSPORT_RETRY_EXC_ERR);
    assert_err(&c[1], r.qp.qpn, 1, CqeSyndrome::WR_FLUSH_ERR);
    let k = &r.p.a.dev.counters;
    assert_eq!(
        (k.local_ack_timeout_err, k.retry_exceeded_err, k.retransmits),
        (3, 1, 4)
    );
    assert_eq!(r.p.a.dev.next_deadline(), None);
}

#[test]
fn fence_holds_a_wqe_until_earlier_reads_complete() {
    let mut r = Rig::rc(1024, 0);
    r.read(8, 0);
    let d = DataSeg::new(4, r.mr.key, r.mr.va);
    r.post(
        WqeOpcode::SEND,
        &[d.as_bytes()],
        0,
        MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE,
    );
    assert_eq!(r.sent().len(), 1, "the fenced SEND waits");
    let ext = ExtFields {
        aeth: Some(bypass_hw::roce::Aeth::new(AethSyndrome(0x1f), 1).expect("aeth")),
        ..Default::default()
    };
    r.respond(B::RC_RDMA_READ_RESPONSE_ONLY, 0, ext, &[9; 8]);
    let p = r.sent();
    assert_eq!(p.len(), 1);
    assert_eq!(parse(&p[0]).opcode(), B::RC_SEND_ONLY);
}

#[test]
fn lost_read_response_is_retried_from_the_missing_psn() {
    let mut r = Rig::rc(256, 0);
    r.read(600, 0); // PSNs 0..2
    r.sent();
    let ext = ExtFields {
        aeth: Some(bypass_hw::roce::Aeth::new(AethSyndrome(0x1f), 1).expect("aeth")),
        ..Default::default()
    };
    r.respond(B::RC_RDMA_READ_RESPONSE_FIRST, 0, ext, &[1; 256]);
    r.respond(B::RC_RDMA_READ_RESPONSE_LAST, 2, ext, &[3; 88]);
    let p = r.sent();
    assert_eq!(p.len(), 1);
    let q = parse(&p[0]);
    assert_eq!(q.bth().psn(), 1);
    let reth = q.reth().expect("reth");
    assert_eq!((reth.va(), reth.len()), (0xabc0_0000 + 256, 344));
}

/// READ response packets carry no AETH in the middle, an AETH on FIRST/LAST/ONLY.
fn read_resp(r: &mut Rig, op: B, psn: u32, byte: u8, len: usize) {
    let ext = ExtFields {
        aeth: matches!(
            op,
            B::RC_RDMA_READ_RESPONSE_FIRST
                | B::RC_RDMA_READ_RESPONSE_LAST
                | B::RC_RDMA_READ_RESPONSE_ONLY
        )
        .then(|| bypass_hw::roce::Aeth::new(AethSyndrome(0x1f), 1).expect("aeth")),
        ..Default::default()
    };
    r.respond(op, psn, ext, &vec![byte; len]);
}

#[test]
fn responses_to_a_retry_in_progress_start_no_second_retry() {
    // Soak finding: every duplicate ACK or stale response a go-back-N provokes started another
    // full go-back-N, and the retransmissions grew without bound. rxe starts no new retry
    // while one is under way (`rxe_comp.c`: `started_retry && !timeout_retry`).
    let mut r = Rig::rc(256, 0);
    r.read(600, 0); // PSNs 0..2
    r.send(10); // PSN 3
    assert_eq!(r.sent().len(), 2);
    // FIRST is lost; MIDDLE reveals it: one retry, from PSN 0.
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 2, 256);
    let p = r.sent();
    assert_eq!(parse(&p[0]).bth().psn(), 0, "the READ again");
    let resent = p.len();
    assert!(resent >= 1);
    // The first round's LAST and the ACKs of the resent SEND's duplicate: no new retry.
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_LAST, 2, 3, 88);
    r.ack(3);
    r.ack(3);
    assert!(r.sent().is_empty(), "no second go-back-N");
    assert_eq!(r.p.a.dev.counters.completer_retry_err, 1);
    assert_eq!(r.p.a.dev.counters.implied_nak_seq_err, 1);
    // The replay completes the READ, then the SEND.
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_FIRST, 0, 1, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 2, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_LAST, 2, 3, 88);
    r.ack(3);
    let c = r.poll_all();
    assert_eq!(c.len(), 2, "READ and SEND complete");
    assert_ok(&c[0], r.qp.qpn, 0, WqeOpcode::RDMA_READ);
    let got = r.p.a.read(r.mr.off, 600);
    assert!(got[..256].iter().all(|&b| b == 1) && got[256..512].iter().all(|&b| b == 2));
    assert!(got[512..].iter().all(|&b| b == 3));
}

#[test]
fn a_read_response_beyond_a_lost_one_does_not_acknowledge_the_missing_data() {
    // A READ response after a lost one must not move the oldest unacknowledged PSN past the
    // READ's missing data (the replayed responses would be taken as stale and the READ
    // complete with the wrong bytes): the implicit ACK stops at the READ's first missing PSN
    // (rxe `check_psn`).
    let mut r = Rig::rc(256, 0);
    r.read(1000, 0); // PSNs 0..3
    assert_eq!(r.sent().len(), 1);
    // FIRST is lost; MIDDLE 1, MIDDLE 2 and LAST 3 of the first round arrive.
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 0xee, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_MIDDLE, 2, 0xee, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_LAST, 3, 0xee, 232);
    let resent = r.sent();
    assert_eq!(resent.len(), 1, "one retry of the whole READ");
    assert_eq!(parse(&resent[0]).bth().psn(), 0);
    assert_eq!(r.qp_mut().req.una, 0, "nothing of the READ is acknowledged");
    // The replay from PSN 0 is taken whole.
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_FIRST, 0, 1, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 2, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_MIDDLE, 2, 3, 256);
    read_resp(&mut r, B::RC_RDMA_READ_RESPONSE_LAST, 3, 4, 232);
    let c = r.poll_all();
    assert_eq!(c.len(), 1);
    assert_ok(&c[0], r.qp.qpn, 0, WqeOpcode::RDMA_READ);
    let got = r.p.a.read(r.mr.off, 1000);
    for (k, want) in [(0usize, 1u8), (1, 2), (2, 3)] {
        assert!(
            got[k * 256..(k + 1) * 256].iter().all(|&b| b == want),
            "packet {k}"
        );
    }
    assert!(got[768..].iter().all(|&b| b == 4));
}
