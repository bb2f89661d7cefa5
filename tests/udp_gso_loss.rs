//! Two simulated NICs on real UDP sockets in this process (127.0.0.1 and 127.0.0.2): a 1 MiB
//! RDMA WRITE goes out as segmented sends (`UDP_SEGMENT` trains) and arrives as coalesced
//! reads (`UDP_GRO`); the receiving link drops every 97th packet it reads, so packets inside
//! trains are lost; the RC transport must still deliver every byte, and the WRITE complete
//! successfully. Both devices are pumped by this thread (`Context::progress`), as the
//! busy-poll loops of `bypass perf` and `bypass pingpong` do.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bypass_sim::fabric::SimFabric;
use bypass_sim::link::udp::{LinkCounters, UdpLink};
use bypass_verbs::{
    Access, Completion, Context, Cq, MemoryPool, Mr, Qp, QpBuilder, SendOp, SendWr,
};

/// How long the transfer may take before the test reports it stuck (a bound, not a speed
/// check).
const STALL: Duration = Duration::from_secs(60);

/// A UDP port free on both addresses.
fn free_port(a: IpAddr, b: IpAddr) -> u16 {
    for _ in 0..64 {
        let s = UdpSocket::bind((a, 0)).expect("bind a UDP port");
        let port = s.local_addr().unwrap().port();
        if UdpSocket::bind((b, port)).is_ok() {
            return port;
        }
    }
    panic!("no UDP port free on both {a} and {b}");
}

fn open(addr: SocketAddr, seed: u64, drop_every: u64) -> (Arc<Context>, Arc<LinkCounters>) {
    let mut link = UdpLink::bind(addr).expect("bind the link");
    link.drop_incoming_every(drop_every);
    let counters = link.counters();
    let profile = link.profile();
    let fabric = SimFabric::udp(seed, link).expect("UDP fabric");
    let backend = fabric.add_device(profile).expect("add the device");
    (Context::new(backend).expect("open the device"), counters)
}

/// Two connected RC QPs on links at 127.0.0.1 (a) and 127.0.0.2 (b), b's link dropping every
/// `drop_every`-th packet it reads (0: none), a `len`-byte writable region of b's and a pool
/// of a's to post from. Field order is drop order.
struct Pair {
    a: Qp,
    _b: Qp,
    cqa: Cq,
    _cqb: Cq,
    target: Mr,
    pool: MemoryPool,
    ca: Arc<Context>,
    cb: Arc<Context>,
    la: Arc<LinkCounters>,
    lb: Arc<LinkCounters>,
    /// The path MTU the QPs connected with, in bytes.
    mtu: u64,
}

fn pair(len: usize, drop_every: u64) -> Pair {
    let (ia, ib): (IpAddr, IpAddr) = (
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    );
    let port = free_port(ia, ib);
    let (ca, la) = open(SocketAddr::new(ia, port), 1, 0);
    let (cb, lb) = open(SocketAddr::new(ib, port), 2, drop_every);
    let (pa, pb) = (ca.alloc_pd().expect("PD a"), cb.alloc_pd().expect("PD b"));
    let cqa = Cq::new(&ca, 16).expect("CQ a");
    let cqb = Cq::new(&cb, 16).expect("CQ b");
    let target = pb
        .register(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .expect("MR b");
    let pool = pa.create_pool(len, 2).expect("pool a");
    let mut a = QpBuilder::rc(&pa, &cqa, &cqa).build().expect("QP a");
    let mut b = QpBuilder::rc(&pb, &cqb, &cqb).build().expect("QP b");
    let (ea, eb) = (a.endpoint().expect("ep a"), b.endpoint().expect("ep b"));
    let mtu = u64::from(ea.mtu.bytes().min(eb.mtu.bytes()));
    a.connect(&eb).expect("connect a");
    b.connect(&ea).expect("connect b");
    Pair {
        mtu,
        a,
        _b: b,
        cqa,
        _cqb: cqb,
        target,
        pool,
        ca,
        cb,
        la,
        lb,
    }
}

impl Pair {
    /// Pumps both devices from this thread until a's CQ gives a completion.
    fn wait(&mut self) -> Completion {
        let t0 = Instant::now();
        loop {
            if let Some(c) = self.cqa.poll_one() {
                return c;
            }
            self.ca.progress();
            self.cb.progress();
            assert!(
                t0.elapsed() < STALL,
                "no completion after {STALL:?}: link a {}; link b {}",
                self.la.summary(),
                self.lb.summary()
            );
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_megabyte_write_over_udp_trains_survives_packets_lost_inside_them() {
    const LEN: usize = 1 << 20;
    let mut p = pair(LEN, 97);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 13 + i / 4093) as u8).collect();
    let mut lease = p.pool.lease(LEN).expect("lease");
    lease.as_mut_slice().copy_from_slice(&data);
    let remote = p.target.remote().slice(0, LEN as u64).expect("slice");
    p.a.post_send(SendWr::new(5, SendOp::Write(remote)).sge(lease))
        .expect("post the WRITE");
    let c = p.wait();
    let (target, la, lb) = (&p.target, &p.la, &p.lb);
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.wr_id(), 5);
    let mut got = vec![0u8; LEN];
    target.read(0, &mut got).expect("read MR b");
    assert!(got == data, "the WRITE's bytes differ at the receiver");
    assert!(
        la.tx_gso_sends.load(Ordering::Relaxed) > 0,
        "the WRITE went out as segmented sends: {}",
        la.summary()
    );
    assert!(
        la.tx_from_memory.load(Ordering::Relaxed) > 0,
        "the WRITE's packets were sent from the source memory (iovecs): {}",
        la.summary()
    );
    assert!(
        lb.rx_injected_drops.load(Ordering::Relaxed) > 0,
        "packets were lost on the way: {}",
        lb.summary()
    );
    // The WRITE left on a's connected socket: only the flow's first packet had its IPv4 ID
    // solved for; every later ID (segment k of a send: the send's ID + k) was guessed.
    assert!(
        la.tx_connected.load(Ordering::Relaxed) > 0,
        "{}",
        la.summary()
    );
    assert_eq!(
        lb.rx_ip_id_recovered.load(Ordering::Relaxed),
        1,
        "{}",
        lb.summary()
    );
}

#[test]
fn a_megabyte_write_leaves_in_full_segmented_sends() {
    const LEN: usize = 1 << 20;
    let mut p = pair(LEN, 0);
    let mut lease = p.pool.lease(LEN).expect("lease");
    lease.as_mut_slice().fill(0x5a);
    let remote = p.target.remote().slice(0, LEN as u64).expect("slice");
    p.a.post_send(SendWr::new(6, SendOp::Write(remote)).sge(lease))
        .expect("post the WRITE");
    let c = p.wait();
    let (la, lb) = (&p.la, &p.lb);
    assert!(c.is_ok(), "{c}");

    // The window (128 packets, an ACK asked for every 64) cuts the message into bursts; each
    // ends where a send ends, so every send is full but the message's first (its
    // WRITE_FIRST, longer by the RETH, and the packet after it) and its last.
    let (packets, mtu) = (la.tx_packets.load(Ordering::Relaxed), p.mtu);
    assert_eq!(mtu, 4096, "the links' path MTU");
    assert_eq!(
        packets,
        LEN as u64 / mtu,
        "each packet sent once: {}",
        la.summary()
    );
    // A send carries at most 64 KiB of UDP payload (`GSO_MAX_BYTES`): 15 packets of 4112 B
    // (BTH 12 + 4096 + ICRC 4). 256 packets: the WRITE_FIRST pair, 16 sends of 15, one of 14.
    assert_eq!(packets, 256);
    assert_eq!(
        la.tx_gso_sends.load(Ordering::Relaxed),
        18,
        "{packets} packets of {mtu} B in sends of 15: {}",
        la.summary()
    );
    assert_eq!(lb.rx_injected_drops.load(Ordering::Relaxed), 0);
}

#[test]
fn an_empty_write_completes_over_udp() {
    let mut p = pair(4096, 0);
    let remote = p.target.remote().slice(0, 0).expect("empty slice");
    p.a.post_send(SendWr::new(7, SendOp::Write(remote)))
        .expect("post the empty WRITE");
    let c = p.wait();
    assert!(c.is_ok(), "{c}");
    assert_eq!(c.wr_id(), 7);
}
