//! Writes the seed corpora of the sim's fuzz targets (`sim/fuzz/seeds/<target>/`) from real
//! runs: two connected NICs exchange SENDs, RDMA WRITEs (with and without immediate), an RDMA
//! READ, atomics and a UD SEND, every packet recorded by the sim's pcap writer into
//! `seeds/capture.pcap` (10.0.0.1 ↔ 10.0.0.2, for `rx_packets`) and
//! `seeds/capture-udp.pcap` (127.0.0.2 → 127.0.0.1, the world of `udp_link`); the packet
//! seeds are read back from those captures. The `commands` seeds are the commands a driver's
//! bring-up and QP setup ran; the `wqes` seeds post the WQEs of the same traffic.
//!
//! Owns: the seeds' formats' writers (each target's module comment gives its format). Must
//! not: write outside the directory it is given.
//!
//! Run: `cargo run -p bypass-sim --example fuzz_seeds -- sim/fuzz/seeds`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::fs;
use std::io;
use std::path::Path;

use bypass_hw::cmd::mkey::MkeyAccess;
use bypass_hw::cmd::qp::{PathMtu, service_type as st};
use bypass_hw::wqe::{AtomicSeg, Av, DataSeg, DgramParams, RaddrSeg, WqeOpcode};
use bypass_sim::Profile;
use bypass_sim::pcap::PcapWriter;
use common::Raw;
use common::pair::{Nic, Pair};
use common::qp::{QKEY, wqe};
use zerocopy::IntoBytes;

/// Host memory per NIC (as the `rx_packets` and `udp_link` fuzz targets).
const MEM: usize = 400 << 10;

/// The WQEs of the traffic `from` sends `to`: a 3000-byte SEND, a 2500-byte RDMA WRITE, a
/// WRITE with immediate, a 20-byte READ, a fetch-and-add and a compare-and-swap over RC, and
/// a SEND over UD. Each is (QP is UD, WQE bytes).
fn traffic_wqes(from: &Nic, to: &Nic) -> Vec<(bool, Vec<u8>)> {
    let (k, va) = (from.mr.key, from.mr.va);
    let (rk, rva) = (to.mr.key, to.mr.va);
    let data = |off: u64, len: u32| DataSeg::new(len, k, va + off);
    let rc = from.rc.qpn;
    let mut idx = from.rc.sq_pi;
    let mut next = |n: u32| {
        let i = idx;
        idx += n;
        i
    };
    let mut out = vec![
        (
            false,
            wqe(WqeOpcode::SEND, next(1), rc, 0, &[data(0, 3000).as_bytes()]),
        ),
        (
            false,
            wqe(
                WqeOpcode::RDMA_WRITE,
                next(1),
                rc,
                0,
                &[
                    RaddrSeg::new(rva + 16384, rk).as_bytes(),
                    data(0, 2500).as_bytes(),
                ],
            ),
        ),
        (
            false,
            wqe(
                WqeOpcode::RDMA_WRITE_IMM,
                next(1),
                rc,
                0x1234_5678,
                &[
                    RaddrSeg::new(rva + 20480, rk).as_bytes(),
                    data(0, 64).as_bytes(),
                ],
            ),
        ),
        (
            false,
            wqe(
                WqeOpcode::RDMA_READ,
                next(1),
                rc,
                0,
                &[
                    RaddrSeg::new(rva + 24576, rk).as_bytes(),
                    data(8192, 20).as_bytes(),
                ],
            ),
        ),
    ];
    for (op, seg) in [
        (WqeOpcode::ATOMIC_FA, AtomicSeg::fetch_add(1)),
        (WqeOpcode::ATOMIC_CS, AtomicSeg::compare_swap(0, 7)),
    ] {
        let w = wqe(
            op,
            next(1),
            rc,
            0,
            &[
                RaddrSeg::new(rva + 28672, rk).as_bytes(),
                seg.as_bytes(),
                data(12288, 8).as_bytes(),
            ],
        );
        out.push((false, w));
    }
    let av = Av::new(&DgramParams {
        key: u64::from(QKEY) << 32,
        dqp_dct: to.ud.qpn,
        ext: true,
        hop_limit: 64,
        rgid: to.raw.gid(),
        ..Default::default()
    })
    .expect("UD address vector");
    let ud = wqe(
        WqeOpcode::SEND,
        from.ud.sq_pi,
        from.ud.qpn,
        0,
        &[av.as_bytes(), data(0, 200).as_bytes()],
    );
    out.push((true, ud));
    out
}

/// Posts `from`'s traffic to `to` (A → B when `a_sends`), carries every packet both ways
/// until idle, and records them into a pcap stream.
fn run(p: &mut Pair, a_sends: bool) -> Vec<u8> {
    let (from, to) = if a_sends {
        (&mut p.a, &p.b)
    } else {
        (&mut p.b, &p.a)
    };
    from.raw
        .write(from.mr.off, &(0..3000).map(|i| i as u8).collect::<Vec<_>>());
    for (ud, w) in traffic_wqes(from, to) {
        let mut qp = if ud { from.ud } else { from.rc };
        from.raw.post_send(&mut qp, &w);
        if ud {
            from.ud = qp;
        } else {
            from.rc = qp;
        }
    }
    let mut pcap = PcapWriter::new(Vec::new()).expect("pcap header");
    let (a, b) = (&mut p.a.raw.dev, &mut p.b.raw.dev);
    for _ in 0..256 {
        let now = a.now().max(b.now()) + 50_000;
        a.set_time(now);
        b.set_time(now);
        let mut moved = a.step() | b.step();
        while let Some(x) = a.take_tx() {
            pcap.write_packet(now, &x).expect("pcap record");
            b.receive(x);
            moved = true;
        }
        while let Some(x) = b.take_tx() {
            pcap.write_packet(now, &x).expect("pcap record");
            a.receive(x);
            moved = true;
        }
        if !moved && a.next_deadline().is_none() && b.next_deadline().is_none() {
            break;
        }
    }
    pcap.into_inner()
}

/// The packets of a pcap stream the sim's writer wrote (raw IP link type).
fn packets(pcap: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 24;
    while let Some(h) = pcap.get(at..at + 16) {
        let cap = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let Some(p) = pcap.get(at + 16..at + 16 + cap) else {
            break;
        };
        out.push(p);
        at += 16 + cap;
    }
    out
}

fn push_record(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn write_seeds(dir: &Path, seeds: &[(String, Vec<u8>)]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for (name, bytes) in seeds {
        fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

/// The IPv4 destination of a packet, if it is IPv4.
fn ipv4_dst(p: &[u8]) -> Option<[u8; 4]> {
    (p.first()? >> 4 == 4).then(|| [p[16], p[17], p[18], p[19]])
}

/// `rx_packets`: each packet A sent B alone, headers and ICRC fixed up (flags 0x03), and the
/// whole A → B stream as it was captured (flags 0x00).
fn rx_packets_seeds(pcap: &[u8]) -> Vec<(String, Vec<u8>)> {
    let to_b: Vec<&[u8]> = packets(pcap)
        .into_iter()
        .filter(|p| ipv4_dst(p) == Some([10, 0, 0, 2]))
        .collect();
    let mut seeds = Vec::new();
    let mut all = Vec::new();
    for (k, p) in to_b.iter().enumerate() {
        let mut one = vec![0x03];
        push_record(&mut one, p);
        seeds.push((format!("packet-{k:02}"), one));
        all.push(0x00);
        push_record(&mut all, p);
    }
    seeds.push(("stream".into(), all));
    seeds
}

/// `udp_link`: each UDP payload 127.0.0.2 sent 127.0.0.1 as a datagram as captured (flags
/// 0, IPv4 ID 0), again with its ICRC written for ID 0x1234 (flags 1), and the equal-sized
/// WRITE packets as one `UDP_GRO` train.
fn udp_link_seeds(pcap: &[u8]) -> Vec<(String, Vec<u8>)> {
    let payloads: Vec<(u16, &[u8])> = packets(pcap)
        .into_iter()
        .filter(|p| ipv4_dst(p) == Some([127, 0, 0, 1]))
        .map(|p| (u16::from_be_bytes([p[20], p[21]]), &p[28..]))
        .collect();
    let mut seeds = Vec::new();
    let mut stream = Vec::new();
    for (k, (sport, d)) in payloads.iter().enumerate() {
        let mut plain = vec![0x00];
        plain.extend_from_slice(&sport.to_be_bytes());
        plain.extend_from_slice(&0u16.to_be_bytes());
        push_record(&mut plain, d);
        stream.extend_from_slice(&plain);
        seeds.push((format!("datagram-{k:02}"), plain));
        let mut id = vec![0x01];
        id.extend_from_slice(&sport.to_be_bytes());
        id.extend_from_slice(&0u16.to_be_bytes());
        id.extend_from_slice(&0x1234u16.to_be_bytes());
        push_record(&mut id, d);
        seeds.push((format!("datagram-{k:02}-id"), id));
    }
    seeds.push(("stream".into(), stream));
    // The first run of same-length datagrams from one port (a multi-packet message) as a train.
    if let Some((sport, first)) = payloads.first() {
        let same: Vec<&[u8]> = payloads
            .iter()
            .take_while(|(s, d)| s == sport && d.len() == first.len())
            .map(|(_, d)| *d)
            .collect();
        let mut train = vec![0x00];
        train.extend_from_slice(&sport.to_be_bytes());
        train.extend_from_slice(&(first.len() as u16).to_be_bytes());
        push_record(&mut train, &same.concat());
        seeds.push(("train".into(), train));
    }
    seeds
}

/// `commands`: every command of a bring-up and QP setup as mode-0 records (opcode kept),
/// one seed per command after the bring-up, and one with the whole setup.
fn commands_seeds() -> Vec<(String, Vec<u8>)> {
    let mut r = Raw::with_memory(Profile::default(), MEM, 24);
    r.log = Some(Vec::new());
    r.bring_up();
    let up = r.log.as_ref().map_or(0, Vec::len);
    let pd = r.alloc_pd().expect("PD");
    let eqn = r.async_eq.expect("EQ").eqn;
    let cq = r.create_cq(6, eqn).expect("CQ");
    r.reg_mr(pd, 16 << 10, MkeyAccess::all()).expect("MR");
    let qp = r.create_qp(st::RC, pd, &cq, &cq, 4, 4).expect("QP");
    r.walk_to_rts(&qp, st::RC, 0x99, r.gid(), (1, 1), PathMtu::Mtu1024);
    let log = r.log.take().unwrap_or_default();
    let record = |(input, out_len): &(Vec<u8>, usize)| {
        // `[sel][len:2][outlen:2][input]`, sel 0x80: the opcode as it is.
        let mut v = vec![0x80];
        v.extend_from_slice(&(input.len() as u16).to_be_bytes());
        v.extend_from_slice(&(*out_len as u16).to_be_bytes());
        v.extend_from_slice(input);
        v
    };
    let mut seeds = Vec::new();
    let mut setup = vec![0x00];
    for (k, c) in log.iter().enumerate() {
        if k >= up {
            let mut one = vec![0x00];
            one.extend(record(c));
            seeds.push((format!("command-{k:02}"), one));
            setup.extend(record(c));
        }
    }
    seeds.push(("setup".into(), setup));
    seeds
}

/// `wqes`: A's traffic to B posted with 8-byte doorbells, then carried and polled.
fn wqes_seeds(p: &Pair) -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for (ud, w) in traffic_wqes(&p.a, &p.b) {
        let nbb = (w.len() / 64) as u8;
        let op = (u8::from(ud) << 6) | ((nbb - 1) << 3);
        all.push(op);
        all.extend_from_slice(&w);
    }
    all.extend_from_slice(&[0x07, 0x07, 0x06, 0x86]);
    vec![("traffic".into(), all)]
}

fn main() -> io::Result<()> {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: fuzz_seeds DIR (sim/fuzz/seeds)");
        std::process::exit(2);
    };
    let dir = Path::new(&dir);
    fs::create_dir_all(dir)?;

    // The wqes target's world (its WQEs carry MR addresses of that layout).
    write_seeds(&dir.join("wqes"), &wqes_seeds(&Pair::lean(2)))?;
    let mut p = Pair::connected(MEM);
    let pcap = run(&mut p, true);
    fs::write(dir.join("capture.pcap"), &pcap)?;
    write_seeds(&dir.join("rx_packets"), &rx_packets_seeds(&pcap))?;

    // The udp_link target's world: the link's device at 127.0.0.1, its peer at 127.0.0.2.
    let with_gid = |id: u8, ip: [u8; 4]| {
        let mut pr = Profile::with_id(id);
        pr.ports[0].gids = vec![Profile::ipv4_gid(ip)];
        pr
    };
    let mut u = Pair::connected_as(
        with_gid(1, [127, 0, 0, 1]),
        with_gid(2, [127, 0, 0, 2]),
        MEM,
    );
    let pcap = run(&mut u, false);
    fs::write(dir.join("capture-udp.pcap"), &pcap)?;
    write_seeds(&dir.join("udp_link"), &udp_link_seeds(&pcap))?;

    write_seeds(&dir.join("commands"), &commands_seeds())?;
    Ok(())
}
