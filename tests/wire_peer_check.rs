//! A spoofed source over real UDP sockets: B's RC QP is connected to A (127.0.32.3); C
//! (127.0.32.4) builds a QP aimed at B's QP with the PSN B expects and RDMA WRITEs B's buffer
//! with its rkey, a correctly built packet from the wrong address. B must drop every such
//! packet unanswered (as rxe's `check_addr`) and count it in `rx_addr_errors`, on the device
//! and the QP (what `bypass stats` prints); A's own WRITE still lands. All three NICs are
//! pumped by this thread.
//!
//! Owns: this test. Must not: test the sim's check on its own (sim `transport::peer` tests).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_sim::counters::Counters;
use bypass_sim::fabric::SimFabric;
use bypass_sim::link::udp::UdpLink;
use bypass_testbed::SimContext;
use bypass_verbs::driver::qp_attr::Rtr2Rts;
use bypass_verbs::{Access, Context, Cq, QpBuilder, SendOp, SendWr};

/// A bound on each wait (not a speed check).
const STALL: Duration = Duration::from_secs(20);

fn addr(last: u8) -> IpAddr {
    Ipv4Addr::new(127, 0, 32, last).into()
}

/// A UDP port in 32000..33000 free on every address of `on`.
fn free_port(on: &[IpAddr]) -> u16 {
    (32000..33000)
        .find(|&p| on.iter().all(|a| UdpSocket::bind((*a, p)).is_ok()))
        .expect("a UDP port in 32000..33000 free on 127.0.32.2-4")
}

fn open(ip: IpAddr, port: u16, seed: u64) -> Arc<Context> {
    let link = UdpLink::bind(SocketAddr::new(ip, port)).expect("bind the link");
    let profile = link.profile();
    let fabric = SimFabric::udp(seed, link).expect("UDP fabric");
    Context::new(fabric.add_device(profile).expect("add the device")).expect("open the device")
}

fn counters(ctx: &Context, qpn: u32) -> (Counters, Counters) {
    ctx.sim()
        .expect("a sim NIC")
        .with_device(|d| (d.counters.clone(), d.qp_counters(qpn).expect("the QP")))
        .expect("the device")
}

#[test]
fn a_write_from_a_spoofed_source_is_dropped_and_counted_and_the_peers_lands() {
    let port = free_port(&[addr(2), addr(3), addr(4)]);
    let (cb, ca, cc) = (
        open(addr(2), port, 2),
        open(addr(3), port, 3),
        open(addr(4), port, 4),
    );
    let (pa, pb, pc) = (
        ca.alloc_pd().expect("PD a"),
        cb.alloc_pd().expect("PD b"),
        cc.alloc_pd().expect("PD c"),
    );
    let (mut cqa, cqb, mut cqc) = (
        Cq::new(&ca, 8).expect("CQ a"),
        Cq::new(&cb, 8).expect("CQ b"),
        Cq::new(&cc, 8).expect("CQ c"),
    );
    let target = pb
        .register(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .expect("MR b");
    let mut a = QpBuilder::rc(&pa, &cqa, &cqa).build().expect("QP a");
    let mut b = QpBuilder::rc(&pb, &cqb, &cqb).build().expect("QP b");
    let mut c = QpBuilder::rc(&pc, &cqc, &cqc).build().expect("QP c");
    let (ea, eb) = (a.endpoint().expect("ep a"), b.endpoint().expect("ep b"));
    a.connect(&eb).expect("connect a");
    b.connect(&ea).expect("connect b");
    // C aims at B's QP and sends from the PSN B expects of A: only its address differs.
    c.modify_to_init().expect("c init");
    c.modify_to_rtr(&eb).expect("c rtr");
    c.modify_to_rts_with(&Rtr2Rts::new(ea.psn)).expect("c rts");

    let pool_c = pc.create_pool(64, 2).expect("pool c");
    let mut forged = pool_c.lease(64).expect("lease c");
    forged.as_mut_slice().fill(0xee);
    c.post_send(
        SendWr::new(1, SendOp::Write(target.remote().slice(0, 64).expect("64"))).sge(forged),
    )
    .expect("post c");
    let pump = || {
        ca.progress();
        cb.progress();
        cc.progress();
    };
    let t0 = Instant::now();
    while counters(&cb, b.qpn()).0.rx_addr_errors == 0 {
        pump();
        assert!(t0.elapsed() < STALL, "B never saw C's WRITE");
        std::thread::yield_now();
    }
    let (dev, qp) = counters(&cb, b.qpn());
    assert_eq!(qp.rx_addr_errors, dev.rx_addr_errors);
    assert_eq!(dev.rx_write_requests, 0, "B processed none of C's WRITE");
    assert_eq!(dev.port_xmit_packets, 0, "B answered nothing");
    let mut got = [0u8; 64];
    target.read(0, &mut got).expect("read");
    assert_eq!(got, [0u8; 64], "no byte of C's WRITE landed");
    assert!(cqc.poll_one().is_none(), "C's WRITE was not acknowledged");

    // A, the real peer, writes the same bytes' place at the same PSN: it lands and completes.
    let pool_a = pa.create_pool(64, 2).expect("pool a");
    let mut real = pool_a.lease(64).expect("lease a");
    real.as_mut_slice().fill(0xa1);
    a.post_send(SendWr::new(2, SendOp::Write(target.remote().slice(0, 64).expect("64"))).sge(real))
        .expect("post a");
    let t0 = Instant::now();
    let done = loop {
        if let Some(done) = cqa.poll_one() {
            break done;
        }
        pump();
        assert!(t0.elapsed() < STALL, "A's WRITE never completed");
        std::thread::yield_now();
    };
    assert!(done.is_ok(), "{done}");
    target.read(0, &mut got).expect("read");
    assert_eq!(got, [0xa1; 64]);
    let (dev, _) = counters(&cb, b.qpn());
    assert_eq!(
        dev.rx_write_requests, 1,
        "A's WRITE, and only it, was processed"
    );
}
