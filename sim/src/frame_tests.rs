//! The in-process link's bursts (`crate::frame`) against the byte path: the same workload
//! gives the same memory, CQEs, counters, PSNs and QP states whether the packets travel as
//! bytes (built, ICRC'd, parsed, checked) or as bursts applied with one copy; a burst taken as
//! bytes is exactly the byte path's packets; a packet lost out of a segmented burst is
//! recovered by the usual go-back-N.

use bypass_hw::cmd::qp::QpState;
use bypass_hw::roce::RocePacket;
use bypass_hw::wqe::WqeOpcode;

use crate::counters::Counters;
use crate::testkit::{Host, HostMr, RcConn, Wqe};

/// MR size on each side.
const MR_LEN: usize = 256 << 10;

/// The connection of [`RcConn`] plus a region of b without REMOTE_WRITE.
struct Conn {
    rc: RcConn,
    /// A region of b without REMOTE_WRITE.
    b_ro: HostMr,
}

impl std::ops::Deref for Conn {
    type Target = RcConn;
    fn deref(&self) -> &RcConn {
        &self.rc
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut RcConn {
        &mut self.rc
    }
}

fn connect(mtu: u32) -> Conn {
    // a starts near the 24-bit PSN wrap.
    let mut rc = RcConn::new(mtu, MR_LEN, 0x00ff_ff80, 0x20);
    let mut ro = Host::all_access();
    ro.remote_write = false;
    let b_ro = rc.p.b.mr(16 << 10, ro);
    rc.p.a.write(rc.a_mr.off, &source());
    Conn { rc, b_ro }
}

/// One WRITE: length, source offset, destination offset, and whether it targets the region
/// without REMOTE_WRITE.
#[derive(Debug, Clone, Copy)]
struct W {
    len: u32,
    src: u64,
    dst: u64,
    read_only_target: bool,
    /// The payload goes inline in the WQE (`src` then indexes [`source`]).
    inline: bool,
}

const fn w(len: u32, src: u64, dst: u64) -> W {
    W {
        len,
        src,
        dst,
        read_only_target: false,
        inline: false,
    }
}

/// An inline WRITE (its payload from [`source`] at `src`).
const fn wi(len: u32, src: u64, dst: u64) -> W {
    W {
        inline: true,
        ..w(len, src, dst)
    }
}

/// What a's MR holds, and what inline WRITEs carry.
fn source() -> Vec<u8> {
    (0..MR_LEN)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add((i >> 8) as u8))
        .collect()
}

fn post(c: &mut Conn, writes: &[W]) {
    let data = source();
    for x in writes {
        let target = if x.read_only_target { c.b_ro } else { c.b_mr };
        let wqe = Wqe::new(WqeOpcode::RDMA_WRITE, c.a_qp.sq_pi, c.a_qp.qpn)
            .raddr(target.va + x.dst, target.key);
        let wqe = if x.inline {
            let (at, n) = (x.src as usize, x.len as usize);
            wqe.inline(&data[at..at + n])
        } else {
            wqe.data(c.a_mr.key, c.a_mr.va + x.src, x.len)
        }
        .finish();
        let rc = &mut c.rc;
        rc.p.a.post_send(&mut rc.a_qp, &wqe);
    }
}

/// Everything a workload leaves behind that the two paths must agree on.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    b_mem: Vec<u8>,
    a_cqes: Vec<[u8; 64]>,
    b_cqes: Vec<[u8; 64]>,
    a_counters: Counters,
    b_counters: Counters,
    a_qp_counters: Counters,
    b_qp_counters: Counters,
    a_next_psn: u32,
    a_una: u32,
    b_epsn: u32,
    b_msn: u32,
    states: (QpState, QpState),
}

fn outcome(c: &mut Conn) -> Outcome {
    let rc = &mut c.rc;
    let mut a_cqes = Vec::new();
    while let Some(e) = rc.p.a.poll(&mut rc.a_cq) {
        a_cqes.push(e);
    }
    let mut b_cqes = Vec::new();
    while let Some(e) = rc.p.b.poll(&mut rc.b_cq) {
        b_cqes.push(e);
    }
    let aq = c.p.a.dev.objs.qps.get(c.a_qp.qpn).expect("qp a");
    let bq = c.p.b.dev.objs.qps.get(c.b_qp.qpn).expect("qp b");
    Outcome {
        b_mem: c.p.b.read(c.b_mr.off, MR_LEN),
        a_cqes,
        b_cqes,
        a_counters: c.p.a.dev.counters.clone(),
        b_counters: c.p.b.dev.counters.clone(),
        a_qp_counters: aq.counters.clone(),
        b_qp_counters: bq.counters.clone(),
        a_next_psn: aq.req.psn,
        a_una: aq.req.una,
        b_epsn: bq.resp.epsn,
        b_msn: bq.resp.msn,
        states: (aq.state, bq.state),
    }
}

/// A connection at `mtu` with `writes` posted and A's requester stepped once: their packets
/// (or, with `fast`, their bursts) wait in A's transmit queue.
fn stepped(mtu: u32, writes: &[W], fast: bool) -> Conn {
    let mut c = connect(mtu);
    if fast {
        c.p.a.dev.set_fast_tx(true);
    }
    post(&mut c, writes);
    c.p.a.dev.step();
    c
}

/// Everything waiting in A's transmit queue, taken as wire packets.
fn take_packets(c: &mut Conn) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| c.p.a.dev.take_tx()).collect()
}

/// Runs `writes` at `mtu` over bytes and over bursts; returns both outcomes and the frames and
/// packets the burst run carried.
fn both_paths(mtu: u32, writes: &[W]) -> (Outcome, Outcome, (usize, u64)) {
    let mut bytes = connect(mtu);
    post(&mut bytes, writes);
    let carried = bytes.p.run();
    let by_bytes = outcome(&mut bytes);

    let mut fast = connect(mtu);
    post(&mut fast, writes);
    let (frames, packets) = fast.p.run_frames();
    assert_eq!(packets, carried as u64, "the same packets, counted");
    (by_bytes, outcome(&mut fast), (frames, packets))
}

#[test]
fn writes_over_bursts_leave_the_same_memory_cqes_counters_and_psns_as_over_bytes() {
    // 60 000 bytes at MTU 256 is 235 packets: more than the 128-PSN window (two bursts and an
    // ACK in between), with AckReq every 64 packets; the PSNs wrap past 2^24. Later WRITEs
    // overwrite parts of earlier ones, in order.
    let writes = [
        w(60_000, 0, 0),
        w(1, 70_000, 70_000),
        w(3000, 100, 80_001),
        w(256, 4096, 90_000),
        w(512, 5000, 91_000),
        w(100_000, 8, 120_000),
        // 100 then 200 packets: the second starts with a burst cut by the window mid-way
        // between AckReqs, so the next burst starts with packets already counted since one.
        w(25_600, 0, 222_000),
        w(51_200, 0, 200_000),
    ];
    let (bytes, fast, (frames, packets)) = both_paths(256, &writes);
    assert_eq!(fast, bytes);
    assert!(
        frames * 10 < packets as usize,
        "bursts were used: {frames} frames for {packets} packets"
    );
    assert_eq!(fast.a_cqes.len(), writes.len());
    assert!(
        fast.a_cqes.iter().all(|c| c[63] >> 4 == 0),
        "every WRITE completed successfully"
    );
    assert_eq!(fast.b_counters.rx_write_requests, writes.len() as u64);
    assert_eq!(fast.states, (QpState::Rts, QpState::Rts));
}

#[test]
fn a_write_the_responder_refuses_fails_the_same_way_over_bursts() {
    // The second WRITE targets a region without REMOTE_WRITE: NAK remote access, the
    // requester's WQE fails, both QPs go to ERR and the third WRITE is flushed.
    let writes = [
        w(5000, 0, 0),
        W {
            read_only_target: true,
            ..w(9000, 0, 0)
        },
        w(700, 0, 10_000),
    ];
    let (bytes, fast, _) = both_paths(1024, &writes);
    assert_eq!(fast, bytes);
    assert_eq!(fast.states.0, QpState::Err);
    assert_eq!(fast.b_counters.resp_remote_access_errors, 1);
}

#[test]
fn a_burst_taken_as_bytes_is_exactly_the_packets_of_the_byte_path() {
    let writes = [w(20_000, 3, 5), w(4096, 0, 40_000), w(10, 0, 50_000)];
    let expected = take_packets(&mut stepped(1024, &writes, false));

    let mut fast = stepped(1024, &writes, true);
    assert_eq!(fast.p.a.dev.tp.tx.len(), 3, "one burst per WRITE");
    let got = take_packets(&mut fast);
    assert_eq!(got.len(), 20 + 4 + 1);
    assert_eq!(got, expected);
    assert!(got.iter().all(|p| RocePacket::parse(p).unwrap().icrc_ok()));
}

#[test]
fn bursts_segmented_into_reused_dirty_buffers_are_exactly_the_packets_of_the_byte_path() {
    let writes = [w(20_000, 3, 5), w(4096, 0, 40_000), w(10, 0, 50_000)];
    let expected = take_packets(&mut stepped(1024, &writes, false));

    let mut fast = stepped(1024, &writes, true);
    // What a link recycles: buffers of earlier packets, longer and shorter, full of junk.
    let mut spare: Vec<Vec<u8>> = (0..40).map(|i| vec![0xa5; 100 + i * 97]).collect();
    let mut got = Vec::new();
    while let Some(frame) = fast.p.a.dev.take_frame() {
        let crate::frame::Frame::Burst(b) = frame else {
            panic!("a burst per WRITE");
        };
        b.segment_into(&mut got, &mut spare);
    }
    assert_eq!(
        spare.len(),
        40 - 25,
        "every packet was built in a reused buffer"
    );
    assert_eq!(got, expected);
}

#[test]
fn a_packet_lost_from_a_segmented_burst_is_resent_and_the_write_completes() {
    let mut c = connect(1024);
    c.p.a.dev.set_fast_tx(true);
    post(&mut c, &[w(16_384, 0, 0)]);
    c.p.a.dev.step();
    // The link segments the burst and loses its sixth packet.
    let mut n = 0;
    while let Some(p) = c.p.a.dev.take_tx() {
        n += 1;
        if n != 6 {
            c.p.b.dev.receive(p);
        }
    }
    assert_eq!(n, 16);
    // The responder NAKs the gap; the requester goes back to PSN 5 and resends (as a burst
    // again, on the in-process link).
    c.p.run_frames();
    let o = outcome(&mut c);
    assert_eq!(
        o.b_mem[..16_384],
        c.p.a.read(c.a_mr.off, 16_384)[..],
        "the message landed whole"
    );
    assert_eq!(o.a_cqes.len(), 1);
    assert_eq!(o.a_cqes[0][63] >> 4, 0, "a success CQE (opcode REQ)");
    assert_eq!(o.b_counters.out_of_sequence, 1);
    assert_eq!(o.a_counters.packet_seq_err, 1);
    assert_eq!(o.a_counters.retransmits, 11, "PSNs 5..16 again");
    assert_eq!(o.b_counters.rx_write_requests, 1);
    assert_eq!(o.states, (QpState::Rts, QpState::Rts));
}

#[test]
fn a_duplicated_burst_is_taken_once_and_answered_as_duplicates_are() {
    let writes = [w(8192, 0, 0)];
    let mut bytes = stepped(1024, &writes, false);
    let pkts = take_packets(&mut bytes);
    for p in pkts.iter().chain(&pkts) {
        bytes.p.b.dev.receive(p.clone());
    }
    bytes.p.run();
    let by_bytes = outcome(&mut bytes);

    let mut fast = stepped(1024, &writes, true);
    let Some(crate::frame::Frame::Burst(b)) = fast.p.a.dev.take_frame() else {
        panic!("a burst");
    };
    fast.p
        .b
        .dev
        .receive_frame(crate::frame::Frame::Burst(b.clone()));
    fast.p.b.dev.receive_frame(crate::frame::Frame::Burst(b));
    fast.p.run_frames();
    let by_bursts = outcome(&mut fast);
    assert_eq!(by_bursts, by_bytes);
    assert_eq!(by_bursts.b_counters.duplicate_request, 8);
}

#[test]
fn inline_writes_over_bursts_match_bytes_and_carry_their_data() {
    // 8 bytes (the ping-pong's message), one MTU of 256 exactly, and 700 bytes over three
    // packets, among gathered WRITEs.
    let writes = [
        wi(8, 1, 0),
        w(3000, 0, 100),
        wi(256, 40, 5000),
        wi(700, 9, 6000),
    ];
    let (bytes, fast, (frames, packets)) = both_paths(256, &writes);
    assert_eq!(fast, bytes);
    assert!((frames as u64) < packets, "bursts were used");
    let data = source();
    assert_eq!(fast.b_mem[..8], data[1..9]);
    assert_eq!(fast.b_mem[6000..6700], data[9..709]);
    assert!(fast.a_cqes.iter().all(|c| c[63] >> 4 == 0));
}

#[test]
fn acknowledgements_taken_as_bytes_are_exactly_the_byte_paths() {
    // 20 000 bytes at MTU 256 is 79 packets: an ACK at the 64th (AckReq by count) and one at
    // the last; then a WRITE to the read-only region draws a NAK remote access.
    let writes = [
        w(20_000, 0, 0),
        W {
            read_only_target: true,
            ..w(100, 0, 0)
        },
    ];
    let responses = |fast: bool| {
        let mut c = stepped(256, &writes, false);
        let pkts = take_packets(&mut c);
        c.p.b.dev.set_fast_tx(fast);
        for p in pkts {
            c.p.b.dev.receive(p);
        }
        c.p.b.dev.step();
        let acks =
            c.p.b
                .dev
                .tp
                .tx
                .iter()
                .filter(|f| matches!(f, crate::frame::Frame::Ack(_)))
                .count();
        let bytes: Vec<Vec<u8>> = std::iter::from_fn(|| c.p.b.dev.take_tx()).collect();
        (acks, bytes, c.p.b.dev.counters.clone())
    };
    let (frames, by_frames, fast_counters) = responses(true);
    let (none, by_bytes, counters) = responses(false);
    assert_eq!((frames, none), (3, 0), "the fast side queued ACK frames");
    assert_eq!(by_frames, by_bytes);
    assert_eq!(fast_counters, counters);
    let psns: Vec<u32> = by_bytes
        .iter()
        .map(|p| RocePacket::parse(p).unwrap().bth().psn())
        .collect();
    assert_eq!(psns, [0x00ff_ffbf, 0x00ff_ffce, 0x00ff_ffcf]);
}

/// Runs `writes` at `mtu` with both devices in a [`crate::World`] on a zero-latency link
/// (`fast`: bursts, each frame handed straight to its device; else every packet as bytes).
/// Returns the outcome and the packets the world delivered.
fn via_world(mtu: u32, writes: &[W], fast: bool) -> (Outcome, u64) {
    use crate::device::Device;
    use crate::profile::Profile;
    use crate::world::{LinkConfig, World};
    let mut c = connect(mtu);
    post(&mut c, writes);
    let spare = || Device::new(Profile::with_id(9));
    let a = std::mem::replace(&mut c.p.a.dev, spare());
    let b = std::mem::replace(&mut c.p.b.dev, spare());
    let mut world = World::with_devices(5, vec![a, b]);
    world.set_link(LinkConfig {
        latency_ns: 0,
        jitter_ns: 0,
    });
    world.set_fast_path(fast);
    assert!(world.settle(1_000_000_000).unwrap(), "the world went quiet");
    let delivered = world.stats().delivered;
    let mut devices = world.into_devices().into_iter();
    c.p.a.dev = devices.next().unwrap();
    c.p.b.dev = devices.next().unwrap();
    (outcome(&mut c), delivered)
}

#[test]
fn a_world_handing_frames_straight_to_devices_leaves_what_the_byte_path_leaves() {
    // Inline and gathered WRITEs, one over the 128-PSN window (several bursts and ACKs), then
    // one the responder refuses (NAK, both QPs to ERR, the last one flushed).
    let writes = [
        wi(8, 1, 0),
        w(40_000, 0, 100),
        wi(300, 9, 50_000),
        w(8, 3, 60_000),
        W {
            read_only_target: true,
            ..w(64, 0, 0)
        },
        w(8, 0, 70_000),
    ];
    let (bytes, carried) = via_world(256, &writes, false);
    let (fast, delivered) = via_world(256, &writes, true);
    assert_eq!(fast, bytes);
    assert_eq!(delivered, carried, "the same packets, counted");
    let mut pair = connect(256);
    post(&mut pair, &writes);
    pair.p.run();
    assert_eq!(
        fast,
        outcome(&mut pair),
        "what two devices stepped by hand leave"
    );
    assert_eq!(
        fast.a_cqes.len(),
        writes.len(),
        "four, then the error, then the flush"
    );
    assert!(
        fast.a_cqes[..4].iter().all(|c| c[63] >> 4 == 0),
        "four successes"
    );
    assert_eq!(fast.states.0, QpState::Err);
    assert_eq!(fast.b_mem[..8], source()[1..9]);
}

#[test]
fn a_received_burst_box_carries_the_next_burst_sent_and_keeps_no_buffer_alive() {
    let mut c = connect(1024);
    c.p.a.dev.set_fast_tx(true);
    c.p.b.dev.set_fast_tx(true);
    post(&mut c, &[w(3000, 0, 0)]);
    c.p.a.dev.step();
    let Some(crate::frame::Frame::Burst(b)) = c.p.a.dev.take_frame() else {
        panic!("a burst for the WRITE");
    };
    let boxed: *const crate::frame::Burst = &*b;
    let crate::frame::Payload::Host(runs) = &b.src else {
        panic!("a host payload");
    };
    let mem = runs[0].mem.clone();
    let held = std::sync::Arc::strong_count(&mem);
    c.p.b.dev.receive_frame(crate::frame::Frame::Burst(b));
    c.p.b.dev.step();
    assert_eq!(c.p.b.dev.tp.burst_spare.len(), 1, "b kept the box");
    assert!(
        std::sync::Arc::strong_count(&mem) < held,
        "the kept box let go of a's buffer"
    );
    // b's own WRITE goes out in that box.
    let wqe = Wqe::new(WqeOpcode::RDMA_WRITE, c.b_qp.sq_pi, c.b_qp.qpn)
        .raddr(c.a_mr.va, c.a_mr.key)
        .inline(b"pong")
        .finish();
    let rc = &mut c.rc;
    rc.p.b.post_send(&mut rc.b_qp, &wqe);
    c.p.b.dev.step();
    assert!(c.p.b.dev.tp.burst_spare.is_empty(), "the box was taken");
    let frames: Vec<_> = std::iter::from_fn(|| c.p.b.dev.take_frame()).collect();
    let reused = frames.iter().any(|f| match f {
        crate::frame::Frame::Burst(b) => std::ptr::eq(&**b, boxed) && b.bytes() == 4,
        _ => false,
    });
    assert!(reused, "the WRITE went out in the received box: {frames:?}");
    // Delivered, it lands as the byte path would have it.
    for f in frames {
        c.p.a.dev.receive_frame(f);
    }
    c.p.run_frames();
    assert_eq!(c.p.a.read(c.a_mr.off, 4), b"pong");
}

#[test]
fn bursts_segmented_straight_into_their_buffers_are_exactly_the_packets_of_the_byte_path() {
    // First/middle/last/only packets, pads of 0..3 bytes, a payload from host memory and
    // one inline, and buffers that are recycled, dirty, longer and shorter.
    let writes = [
        w(20_000, 3, 5),
        w(4093, 0, 40_000),
        w(10, 0, 50_000),
        w(3071, 7, 60_000),
        wi(9, 1, 70_000),
    ];
    let expected = take_packets(&mut stepped(1024, &writes, false));

    let mut fast = stepped(1024, &writes, true);
    let mut spare: Vec<Vec<u8>> = (0..40).map(|i| vec![0x5a; 50 + i * 131]).collect();
    let mut got = Vec::new();
    // One header cache for all the bursts, as the link keeps it: hits and evictions.
    let mut crcs = crate::header_cache::HeaderCache::default();
    while let Some(frame) = fast.p.a.dev.take_frame() {
        let crate::frame::Frame::Burst(b) = frame else {
            panic!("a burst per WRITE");
        };
        b.segment_direct_into(&mut got, &mut spare, &mut crcs);
    }
    assert_eq!(got.len(), 20 + 4 + 1 + 3 + 1);
    assert_eq!(got, expected);
}

/// The WR_FLUSH_ERR CQEs in `cqes`, as their WQE counters (panics on any other CQE).
fn flushed_wqes(cqes: &[[u8; 64]]) -> Vec<u16> {
    use bypass_hw::View;
    use bypass_hw::cqe::ErrCqe;
    use bypass_hw::syndrome::CqeSyndrome;
    cqes.iter()
        .map(|c| {
            let e = ErrCqe::view(c).expect("an error CQE");
            assert_eq!(e.syndrome(), CqeSyndrome::WR_FLUSH_ERR);
            e.wqe_counter()
        })
        .collect()
}

/// Every CQE waiting in a's CQ.
fn a_cqes(c: &mut Conn) -> Vec<[u8; 64]> {
    let rc = &mut c.rc;
    std::iter::from_fn(|| rc.p.a.poll(&mut rc.a_cq)).collect()
}

#[test]
fn a_retransmitted_write_copies_its_payload_instead_of_reading_it_late() {
    // The first transmission goes out as a burst by reference and is lost; the retransmission
    // after the ACK timeout is sent as packets carrying a copy: its WQE may complete (an ACK of
    // the first transmission could still arrive) while a burst would not have been read yet.
    let mut c = connect(1024);
    c.p.a.dev.set_fast_tx(true);
    post(&mut c, &[w(3000, 0, 0)]);
    c.p.a.dev.step();
    let first: Vec<_> = std::iter::from_fn(|| c.p.a.dev.take_frame()).collect();
    assert!(
        matches!(first.as_slice(), [crate::frame::Frame::Burst(b)] if b.host_runs().is_some()),
        "the first transmission is a burst by reference: {first:?}"
    );
    drop(first);
    // Past the ACK timeout (4.096 us x 2^14).
    let later = c.p.a.dev.now + 100_000_000;
    c.p.a.dev.set_time(later);
    c.p.a.dev.step();
    let again: Vec<_> = std::iter::from_fn(|| c.p.a.dev.take_frame()).collect();
    assert_eq!(again.len(), 3, "three packets at MTU 1024: {again:?}");
    assert!(
        again
            .iter()
            .all(|f| matches!(f, crate::frame::Frame::Wire(_))),
        "retransmitted as bytes: {again:?}"
    );
    let qp = c.p.a.dev.objs.qps.get(c.a_qp.qpn).expect("qp a");
    assert_eq!(qp.counters.retransmits, 3, "counted as retransmissions");
    for f in again {
        c.p.b.dev.receive_frame(f);
    }
    c.p.b.dev.set_time(later);
    c.p.run_frames();
    assert_eq!(c.p.b.read(c.b_mr.off, 3000), source()[..3000]);
    let cqes = a_cqes(&mut c);
    assert_eq!(cqes.len(), 1, "the WRITE completed");
}

/// a posts a 3000-byte WRITE, which leaves as one burst by reference; the burst, held (its
/// memory unread until it drops).
fn hold_one_burst(c: &mut Conn) -> Vec<crate::frame::Frame> {
    c.p.a.dev.set_fast_tx(true);
    post(c, &[w(3000, 0, 0)]);
    c.p.a.dev.step();
    let held: Vec<_> = std::iter::from_fn(|| c.p.a.dev.take_frame()).collect();
    assert_eq!(held.len(), 1, "one burst by reference: {held:?}");
    held
}

/// A QP_2RST of `qpn` through a's command queue, slot 0 (the device runs it at its next step).
fn post_2rst(c: &mut Conn, qpn: u32) -> usize {
    use bypass_hw::cmd::Opcode;
    use bypass_hw::cmd::qp::Qp2RstIn;
    let mut input = [0u8; 16];
    let mut v = Qp2RstIn::new_checked(&mut input[..]).expect("16 bytes");
    v.set_opcode(u32::from(Opcode::QP_2RST.0)).expect("opcode");
    v.set_qpn(qpn).expect("qpn");
    c.p.a.post_inline_cmd(0, &input)
}

/// Asserts the command at `entry` completed with status OK.
fn assert_cmd_ok(c: &Conn, entry: usize) {
    use bypass_hw::cmd::MboxOut;
    use bypass_hw::syndrome::CmdStatus;
    let out =
        c.p.a
            .inline_cmd_output(entry)
            .expect("the command completed");
    let out = MboxOut::new_checked(&out[..]).expect("16 bytes");
    assert_eq!(out.cmd_status(), CmdStatus::OK);
}

#[test]
fn a_2rst_waits_for_its_qps_unread_burst_and_runs_at_the_first_step_after_it_is_read() {
    // A 2RST_QP hands the QP's buffers back: it may complete only once no burst of the QP
    // still reads them (`firmware::cmdq::waits_for`). The burst may be let go outside any
    // step (the UDP link drops it after sending): the very next `step`, with nothing else to
    // do, runs the command.
    let mut c = connect(1024);
    let held = hold_one_burst(&mut c);
    let qpn = c.a_qp.qpn;
    let entry = post_2rst(&mut c, qpn);
    assert!(c.p.a.dev.step(), "the command doorbell is taken");
    for _ in 0..3 {
        c.p.a.dev.step();
    }
    assert_eq!(
        c.p.a.inline_cmd_output(entry),
        None,
        "the entry stays the device's while the burst reads"
    );
    let state = |c: &Conn| c.p.a.dev.objs.qps.get(qpn).expect("qp a").state;
    assert_eq!(state(&c), QpState::Rts, "not reset while the burst reads");
    let now = c.p.a.dev.now;
    assert!(
        c.p.a.dev.next_deadline().is_some_and(|t| t > now),
        "only the ACK timeout is due until it is read"
    );

    drop(held);
    assert_eq!(
        c.p.a.dev.next_deadline(),
        Some(c.p.a.dev.now),
        "due at once"
    );
    assert!(c.p.a.dev.step(), "the command ran");
    assert_cmd_ok(&c, entry);
    assert_eq!(state(&c), QpState::Rst);
    assert!(!c.p.a.dev.tp.ledger.commands_waiting());
}

#[test]
fn the_flush_cqes_held_for_a_burst_are_written_before_a_2rst_waiting_for_it_runs() {
    // The QP enters ERR while its burst is unread: its flush CQEs wait for the burst
    // (`engine::ledger`), and so does a 2RST_QP issued meanwhile. A NIC wrote
    // the flush CQEs when the QP entered ERR, before any reset: once the burst is read, they
    // must be written before the reset forgets the QP's work.
    let mut c = connect(1024);
    let held = hold_one_burst(&mut c);
    let qpn = c.a_qp.qpn;
    c.p.a.dev.set_qp_state(qpn, QpState::Err);
    let entry = post_2rst(&mut c, qpn);
    for _ in 0..3 {
        c.p.a.dev.step();
    }
    assert!(
        a_cqes(&mut c).is_empty(),
        "no flush CQE while the burst reads"
    );
    assert_eq!(c.p.a.inline_cmd_output(entry), None, "nor the reset");

    drop(held);
    assert!(c.p.a.dev.step());
    assert_eq!(flushed_wqes(&a_cqes(&mut c)), [0], "the WRITE is flushed");
    assert_cmd_ok(&c, entry);
    let qp = c.p.a.dev.objs.qps.get(qpn).expect("qp a");
    assert_eq!(qp.state, QpState::Rst);
    assert_eq!(qp.counters.req_cqe_flush_error, 1);
    assert!(!c.p.a.dev.tp.ledger.flushes_waiting() && !c.p.a.dev.tp.ledger.commands_waiting());
}

#[test]
fn a_flush_waits_until_no_burst_of_the_qp_still_reads_its_memory() {
    // Two WRITEs from a's memory go out as bursts and are held on the wire; the QP is moved
    // to ERR (what QP_2ERR does, `firmware::qp::modify`). A flush CQE hands the buffer back to
    // the application, which may write it at once: none may appear while a burst still reads
    // it. One burst is applied, the other lost; then the flush comes, in SQ order, with the
    // WRITE posted in ERR meanwhile behind them.
    let mut c = connect(1024);
    c.p.a.dev.set_fast_tx(true);
    post(&mut c, &[w(3000, 0, 0), w(500, 4000, 8000)]);
    c.p.a.dev.step();
    let frames: Vec<_> = std::iter::from_fn(|| c.p.a.dev.take_frame()).collect();
    assert!(
        frames.len() == 2
            && frames.iter().all(|f| matches!(
                f,
                crate::frame::Frame::Burst(b) if b.host_runs().is_some()
            )),
        "two bursts by reference: {frames:?}"
    );
    let qpn = c.a_qp.qpn;
    c.p.a.dev.set_qp_state(qpn, QpState::Err);
    post(&mut c, &[w(8, 0, 9000)]);
    for _ in 0..3 {
        c.p.a.dev.step();
    }
    assert!(
        a_cqes(&mut c).is_empty(),
        "no flush CQE while the bursts read a's memory"
    );
    assert_eq!(
        c.p.a.dev.next_deadline(),
        None,
        "nothing due until they are read"
    );

    let mut frames = frames.into_iter();
    c.p.b
        .dev
        .receive_frame(frames.next().expect("the first burst"));
    c.p.b.dev.step();
    assert_eq!(c.p.b.read(c.b_mr.off, 3000), source()[..3000], "applied");
    c.p.a.dev.step();
    assert!(a_cqes(&mut c).is_empty(), "the second burst still reads");

    drop(frames);
    let now = c.p.a.dev.now;
    assert_eq!(c.p.a.dev.next_deadline(), Some(now), "due at once");
    assert!(c.p.a.dev.step(), "the flush is work done");
    assert_eq!(flushed_wqes(&a_cqes(&mut c)), [0, 1, 2]);
    let qp = c.p.a.dev.objs.qps.get(qpn).expect("qp a");
    assert_eq!(qp.counters.req_cqe_flush_error, 3);
    assert!(!c.p.a.dev.tp.ledger.holds_errs(qpn) && !c.p.a.dev.tp.ledger.flushes_waiting());
}

#[test]
fn a_flush_behind_a_burst_on_a_link_with_latency_comes_once_the_burst_is_applied() {
    use crate::device::Device;
    use crate::profile::Profile;
    use crate::world::{LinkConfig, World};
    let mut c = connect(1024);
    post(&mut c, &[w(3000, 0, 0)]);
    let spare = || Device::new(Profile::with_id(9));
    let a = std::mem::replace(&mut c.p.a.dev, spare());
    let b = std::mem::replace(&mut c.p.b.dev, spare());
    let mut world = World::with_devices(5, vec![a, b]);
    world.set_link(LinkConfig {
        latency_ns: 10_000,
        jitter_ns: 0,
    });
    world.set_fast_path(true);
    world.run_until_idle().unwrap();
    assert_eq!(world.in_flight(), 3, "the WRITE's burst is on the link");
    let qpn = c.a_qp.qpn;
    world.device(0).set_qp_state(qpn, QpState::Err);
    world.run_until_idle().unwrap();
    assert_eq!(
        world.device(0).counters.req_cqe_flush_error,
        0,
        "no flush while the burst is in flight"
    );
    world.advance(9_999).unwrap();
    assert_eq!(
        world.device(0).counters.req_cqe_flush_error,
        0,
        "none until the burst arrives"
    );
    world.advance(1).unwrap();
    assert_eq!(
        world.device(0).counters.req_cqe_flush_error,
        1,
        "the flush follows the burst's arrival at once"
    );
    assert!(world.settle(1_000_000_000).unwrap(), "the world went quiet");
    let mut devices = world.into_devices().into_iter();
    c.p.a.dev = devices.next().unwrap();
    c.p.b.dev = devices.next().unwrap();
    assert_eq!(flushed_wqes(&a_cqes(&mut c)), [0]);
    assert_eq!(c.p.b.read(c.b_mr.off, 3000), source()[..3000]);
}

#[test]
fn an_error_completion_waits_with_the_flush_while_a_burst_of_the_qp_still_reads() {
    // The first WRITE is refused (NAK remote access) while the second's burst is still held on
    // the wire: the error CQE and the flush behind it wait for that burst, then come in order.
    use bypass_hw::View;
    use bypass_hw::cqe::ErrCqe;
    use bypass_hw::syndrome::CqeSyndrome;
    let mut c = connect(1024);
    c.p.a.dev.set_fast_tx(true);
    c.p.b.dev.set_fast_tx(true);
    let refused = W {
        read_only_target: true,
        ..w(2000, 0, 0)
    };
    post(&mut c, &[refused, w(500, 4000, 8000)]);
    c.p.a.dev.step();
    let frames: Vec<_> = std::iter::from_fn(|| c.p.a.dev.take_frame()).collect();
    let mut frames = frames.into_iter();
    c.p.b
        .dev
        .receive_frame(frames.next().expect("the refused WRITE's burst"));
    let held = frames.next().expect("the second WRITE's burst");
    c.p.b.dev.step();
    while let Some(nak) = c.p.b.dev.take_frame() {
        c.p.a.dev.receive_frame(nak);
    }
    c.p.a.dev.step();
    let qpn = c.a_qp.qpn;
    assert_eq!(c.p.a.dev.objs.qps.get(qpn).unwrap().state, QpState::Err);
    assert!(
        a_cqes(&mut c).is_empty(),
        "nothing while the second burst reads"
    );
    drop(held);
    c.p.a.dev.step();
    let cqes = a_cqes(&mut c);
    assert_eq!(cqes.len(), 2, "the error, then the flush");
    let err = ErrCqe::view(&cqes[0]).unwrap();
    assert_eq!(
        (err.syndrome(), err.wqe_counter()),
        (CqeSyndrome::REMOTE_ACCESS_ERR, 0)
    );
    assert_eq!(flushed_wqes(&cqes[1..]), [1]);
}

/// The IPv4 header of a packet from 10.0.0.1 to 10.0.0.`last` (rxe's defaults).
fn ip_to(last: u8) -> bypass_hw::roce::IpSpec {
    bypass_hw::roce::IpSpec::from_gids(
        &crate::Profile::ipv4_gid([10, 0, 0, 1]),
        &crate::Profile::ipv4_gid([10, 0, 0, last]),
    )
    .unwrap()
}

/// An IPv6 header between two fixed GIDs.
fn ip_v6() -> bypass_hw::roce::IpSpec {
    bypass_hw::roce::IpSpec::from_gids(&[0xfe; 16], &[0xfd; 16]).unwrap()
}

#[test]
fn an_ack_writer_writes_what_emit_writes_across_flows_and_repeats() {
    use crate::frame::{AckFrame, AckWriter};
    use bypass_hw::roce::{Aeth, UdpPorts, emit};
    use bypass_hw::syndrome::AethSyndrome;
    let (v4, v4b, v6) = (ip_to(2), ip_to(3), ip_v6());
    let port = |src| UdpPorts { src, dst: 4791 };
    // Flows that differ in one thing each (address, family, source port, QP), each written
    // several times in a row and returned to after others: the kept headers must follow.
    let flows = [
        (v4, port(0xc123), 0x12_3456),
        (v4b, port(0xc123), 0x12_3456),
        (v6, port(0xc123), 0x12_3456),
        (v4, port(0xc124), 0x12_3456),
        (v4, port(0xc123), 0x12_3457),
    ];
    let mut w = AckWriter::new();
    let mut buf = vec![0x5a; 300];
    let mut psn = 0x00ff_fffdu32;
    for round in 0..3u32 {
        for (ip, ports, qp) in flows {
            for (syndrome, msn) in [
                (AethSyndrome::ACK_UNLIMITED, round),
                (AethSyndrome::NAK_PSN_SEQ_ERROR, 0x00ab_cdef),
                (AethSyndrome::RNR_NAK, 9),
            ] {
                psn = (psn + 1) & 0x00ff_ffff;
                let aeth = Aeth::new(syndrome, msn).unwrap();
                let a = AckFrame {
                    ip,
                    ports,
                    dest_qp: qp,
                    psn,
                    aeth,
                    wire_len: 0,
                };
                let spec = AckFrame::spec(ip, ports, qp, psn, aeth);
                let mut want = vec![0u8; spec.packet_len().unwrap()];
                emit(&spec, &mut want).unwrap();
                assert!(w.write(&a, &mut buf));
                assert_eq!(buf, want, "round {round} qp {qp:#x} psn {psn} {syndrome:?}");
            }
        }
    }
}
