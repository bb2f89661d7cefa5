//! Wire conformance of what the sim actually sends: a real RC exchange through the verbs API
//! (SEND, SEND_IMM, WRITE, WRITE_IMM, READ, compare-swap, fetch-add; messages of several
//! packets; MTU 256, 1024 and 4096; IPv4 and IPv6 GIDs; a first PSN just below the 24-bit
//! wrap) is teed by the stepped world into a pcap with `bypass_sim::pcap::PcapWriter`, and
//! code nobody here wrote judges every packet: scapy recomputes each ICRC, tshark decodes each
//! as InfiniBand over UDP 4791 (RRoCE) with the opcode and PSN the packet carries, and the
//! request PSNs run on without a gap across the wrap.
//!
//! The oracles come from `hw/tests/common` (skip with a notice when missing, fail under
//! `BYPASS_REQUIRE_ORACLES=1`, as `scripts/test.sh` sets).

#[path = "../hw/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bypass_hw::roce::RocePacket;
use bypass_hw::roce::opcode::Direction;
use bypass_sim::Profile;
use bypass_sim::fabric::SimFabric;
use bypass_sim::pcap::PcapWriter;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Access, Context, Cq, Mtu, QpBuilder};

/// A `Write` the world can own while the test keeps reading it.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);
impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn context(fabric: &SimFabric, id: u8, v6: bool) -> Arc<Context> {
    let mut p = Profile::with_id(id);
    if v6 {
        let mut gid = [0u8; 16];
        gid[0] = 0xfd;
        gid[15] = id;
        p.ports[0].gids = vec![gid];
    }
    let dev = fabric.add_device(p).expect("sim device");
    Context::new(dev).expect("open sim device")
}

/// Runs one exchange of every RC verb and returns the pcap bytes and packet count.
fn exchange(v6: bool, mtu: Mtu, psn: u32) -> (Vec<u8>, u64) {
    let fabric = SimFabric::stepped(42);
    let sink = Shared::default();
    let boxed: Box<dyn Write + Send> = Box::new(sink.clone());
    fabric.with_world(|w| w.set_pcap(Some(PcapWriter::new(boxed).expect("pcap header"))));
    let (ca, cb) = (context(&fabric, 1, v6), context(&fabric, 2, v6));
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (Cq::new(&ca, 64).unwrap(), Cq::new(&cb, 64).unwrap());
    let pool_a = pa.create_pool(16384, 16).unwrap();
    let pool_b = pb.create_pool(16384, 16).unwrap();
    let mr = pb
        .register(
            65536,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    let mut qa = QpBuilder::rc(&pa, &cqa, &cqa).psn(psn).build().unwrap();
    let mut qb = QpBuilder::rc(&pb, &cqb, &cqb).build().unwrap();
    let (mut ea, mut eb) = (qa.endpoint().unwrap(), qb.endpoint().unwrap());
    ea.mtu = mtu;
    eb.mtu = mtu;
    qa.connect(&eb).unwrap();
    qb.connect(&ea).unwrap();
    for i in 0..4 {
        qb.post_recv(RecvWr::new(i, pool_b.lease(16384).unwrap()))
            .unwrap();
    }
    let data = |n: usize| {
        let mut l = pool_a.lease(n).unwrap();
        for (i, b) in l.as_mut_slice().iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        l
    };
    let remote = mr.remote();
    let wrs = [
        SendWr::new(1, SendOp::Send).sge(data(3000)),
        SendWr::new(2, SendOp::SendImm(0xabcd)).sge(data(13)),
        SendWr::new(3, SendOp::Write(remote.slice(0, 5000).unwrap())).sge(data(5000)),
        SendWr::new(4, SendOp::WriteImm(remote.slice(8192, 600).unwrap(), 7)).sge(data(600)),
        SendWr::new(5, SendOp::Read(remote.slice(0, 5000).unwrap()))
            .sge(pool_a.lease(5000).unwrap()),
        SendWr::new(
            6,
            SendOp::CompareSwap {
                remote: remote.slice(16384, 8).unwrap(),
                compare: 0,
                swap: 9,
            },
        )
        .sge(pool_a.lease(8).unwrap()),
        SendWr::new(
            7,
            SendOp::FetchAdd {
                remote: remote.slice(16384, 8).unwrap(),
                add: 5,
            },
        )
        .sge(pool_a.lease(8).unwrap()),
    ];
    for wr in wrs {
        qa.post_send(wr).unwrap();
    }
    for id in 1..=7u64 {
        let c = cqa
            .wait(Duration::from_secs(5))
            .unwrap()
            .expect("a completion");
        assert!(c.is_ok() && c.wr_id() == id, "{c}");
        drop(qa.reclaim(c).unwrap());
    }
    for _ in 0..3 {
        let c = cqb
            .wait(Duration::from_secs(5))
            .unwrap()
            .expect("a receive");
        assert!(c.is_ok(), "{c}");
        drop(qb.reclaim(c).unwrap());
    }
    fabric.with_world(|w| {
        let _ = w.settle(1_000_000_000);
    });
    let n = fabric.with_world(|w| w.set_pcap(None).map(|p| p.packets()).unwrap_or(0));
    let bytes = sink.0.lock().unwrap().clone();
    (bytes, n)
}

fn scratch(name: &str, pcap: &[u8]) -> (PathBuf, PathBuf) {
    let dir = common::scratch_dir(name);
    let path = dir.join("sim.pcap");
    std::fs::write(&path, pcap).unwrap();
    (dir, path)
}

fn scapy_checks_every_icrc(dir: &Path, pkts: &[Vec<u8>]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hw/tests/oracle/roce_scapy.py");
    let hex: String = pkts
        .iter()
        .map(|p| p.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
        .collect();
    let file = dir.join("packets.hex");
    std::fs::write(&file, hex).unwrap();
    let out = Command::new("python3")
        .arg(&script)
        .arg("decode")
        .arg(&file)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), pkts.len(), "one scapy line per packet");
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.split(' ').any(|kv| kv == "icrc_ok=1"),
            "packet {i}: scapy's ICRC differs: {l}"
        );
    }
}

fn tshark_decodes_opcodes_and_psns(dir: &Path, pcap: &Path, pkts: &[Vec<u8>]) {
    let out = Command::new("tshark")
        .env("WIRESHARK_CONFIG_DIR", dir)
        .env_remove("DISPLAY")
        .args(["-n", "-r"])
        .arg(pcap)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-e",
            "frame.protocols",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "_ws.malformed",
        ])
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), pkts.len(), "one tshark row per packet");
    for (i, (row, p)) in rows.iter().zip(pkts).enumerate() {
        let c: Vec<&str> = row.split('|').collect();
        let pkt = RocePacket::parse(p).expect("the sim's own packet parses");
        assert!(
            c[0].contains("udp:infiniband"),
            "packet {i}: not RRoCE to tshark: {row}"
        );
        assert_eq!(
            c[1].parse::<u64>().ok(),
            Some(u64::from(pkt.opcode().0)),
            "packet {i}: opcode: {row}"
        );
        assert_eq!(
            c[2].parse::<u64>().ok(),
            Some(u64::from(pkt.bth().psn())),
            "packet {i}: PSN: {row}"
        );
        assert_eq!(
            c.get(3).copied().unwrap_or(""),
            "",
            "packet {i}: malformed: {row}"
        );
    }
}

/// Every request the requester sent, in order, has the next PSN (24-bit wrap included; a READ
/// takes one PSN per response packet): without faults there is no retransmission.
fn request_psns_are_consecutive(pkts: &[Vec<u8>], first: u32, mtu: u32) {
    let mut want = first;
    let mut n = 0;
    for p in pkts {
        let pkt = RocePacket::parse(p).unwrap();
        if pkt.info().direction != Direction::Request {
            continue;
        }
        assert_eq!(pkt.bth().psn(), want, "request {n}");
        let npsn = match pkt.reth() {
            Some(r) if pkt.opcode() == bypass_hw::roce::BthOpcode::RC_RDMA_READ_REQUEST => {
                r.len().div_ceil(mtu).max(1)
            }
            _ => 1,
        };
        want = (want + npsn) & 0x00ff_ffff;
        n += 1;
    }
    assert!(n >= 7, "{n} requests for 7 work requests");
    assert!(want < first, "the PSNs wrapped past 0xffffff");
}

fn conformance(name: &str, v6: bool, mtu: Mtu) {
    let scapy = common::oracle_available("scapy", || {
        common::command_works("python3", &["-c", "import scapy.contrib.roce"])
    });
    let tshark =
        common::oracle_available("tshark", || common::command_works("tshark", &["--version"]));
    let first = 0x00ff_fffa;
    let (pcap, n) = exchange(v6, mtu, first);
    let pkts = common::pcap_records(&pcap);
    assert_eq!(pkts.len() as u64, n);
    let version = if v6 { 6 } else { 4 };
    assert!(pkts.iter().all(|p| p[0] >> 4 == version));
    request_psns_are_consecutive(&pkts, first, mtu.bytes());
    let (dir, path) = scratch(name, &pcap);
    if scapy {
        scapy_checks_every_icrc(&dir, &pkts);
    }
    if tshark {
        tshark_decodes_opcodes_and_psns(&dir, &path, &pkts);
    }
}

#[test]
fn ipv4_mtu_1024_exchange_passes_scapy_and_tshark() {
    conformance("wire_pcap_v4_1024", false, Mtu::Mtu1024);
}

#[test]
fn ipv6_mtu_4096_exchange_passes_scapy_and_tshark() {
    conformance("wire_pcap_v6_4096", true, Mtu::Mtu4096);
}

#[test]
fn ipv4_mtu_256_exchange_passes_scapy_and_tshark() {
    conformance("wire_pcap_v4_256", false, Mtu::Mtu256);
}
