//! Conformance of the RoCEv2 wire format with Wireshark's InfiniBand dissector (tshark), code
//! nobody here wrote: every packet of the corpus (every opcode, IPv4 and IPv6, every pad
//! count) is written to a pcap, and tshark must decode it as InfiniBand over UDP 4791 with the
//! opcode, QPN, PSN and every extension header field bypass set, without flagging it malformed.

mod common;
mod roce_support;

use std::path::Path;
use std::process::Command;

use common::{oracle_available, scratch_dir};
use roce_support::{Case, corpus};

/// pcap LINKTYPE_RAW: each record starts at the IPv4 or IPv6 header.
const LINKTYPE_RAW: u32 = 101;

/// A minimal pcap (libpcap 2.4, microsecond timestamps, little-endian) writer.
fn write_pcap(path: &Path, packets: &[&[u8]]) {
    let mut f = Vec::new();
    f.extend(0xa1b2_c3d4u32.to_le_bytes());
    f.extend(2u16.to_le_bytes());
    f.extend(4u16.to_le_bytes());
    f.extend(0i32.to_le_bytes()); // thiszone
    f.extend(0u32.to_le_bytes()); // sigfigs
    f.extend(65535u32.to_le_bytes()); // snaplen
    f.extend(LINKTYPE_RAW.to_le_bytes());
    for (i, p) in packets.iter().enumerate() {
        f.extend((1_700_000_000u32 + i as u32).to_le_bytes());
        f.extend(0u32.to_le_bytes());
        f.extend((p.len() as u32).to_le_bytes());
        f.extend((p.len() as u32).to_le_bytes());
        f.extend(*p);
    }
    std::fs::write(path, f).expect("write pcap");
}

const FIELDS: &[&str] = &[
    "frame.protocols",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.invariant.crc",
    "_ws.malformed",
    "_ws.expert.message",
];

/// Parses a tshark number field (decimal, or hex with 0x).
fn n(s: &str) -> Option<u64> {
    if s.is_empty() {
        None
    } else if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// tshark prints booleans as 1/0 (or True/False in some versions).
fn flag(s: &str) -> bool {
    matches!(s, "1" | "True" | "true")
}

fn hexcolon(b: &[u8]) -> [String; 2] {
    let plain: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let colon = b
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    [plain, colon]
}

/// A bytes field (possibly shown more than once, comma-aggregated) holds exactly `want`.
fn bytes_field_is(field: &str, want: &[u8]) -> bool {
    let forms = hexcolon(want);
    !field.is_empty() && field.split(',').all(|v| forms.iter().any(|f| f == v))
}

fn check(c: &Case, cols: &[&str]) {
    let l = &c.label;
    let get = |name: &str| cols[FIELDS.iter().position(|f| *f == name).unwrap()];
    let protos = get("frame.protocols");
    assert!(
        protos.contains("udp:infiniband"),
        "{l}: tshark did not decode InfiniBand over UDP: {protos}"
    );
    let b = &c.bth;
    assert_eq!(
        n(get("infiniband.bth.opcode")),
        Some(b.opcode.0 as u64),
        "{l}: opcode"
    );
    assert_eq!(flag(get("infiniband.bth.se")), b.se, "{l}: SE");
    assert_eq!(flag(get("infiniband.bth.m")), b.mig_req, "{l}: MigReq");
    assert_eq!(
        n(get("infiniband.bth.padcnt")),
        Some(b.pad_cnt as u64),
        "{l}: PadCnt"
    );
    assert_eq!(n(get("infiniband.bth.tver")), Some(0), "{l}: TVer");
    assert_eq!(
        n(get("infiniband.bth.p_key")),
        Some(b.pkey as u64),
        "{l}: P_Key"
    );
    assert_eq!(
        n(get("infiniband.bth.destqp")),
        Some(b.dest_qp as u64),
        "{l}: DestQP"
    );
    assert_eq!(flag(get("infiniband.bth.a")), b.ack_req, "{l}: AckReq");
    assert_eq!(n(get("infiniband.bth.psn")), Some(b.psn as u64), "{l}: PSN");
    let e = &c.ext;
    // tshark shows the AtomicETH's address and R_Key under the RETH field names.
    let (va, rkey) = match (e.reth, e.atomic_eth) {
        (Some(r), _) => (Some(r.va()), Some(r.rkey() as u64)),
        (None, Some(a)) => (Some(a.va()), Some(a.rkey() as u64)),
        (None, None) => (None, None),
    };
    assert_eq!(n(get("infiniband.reth.va")), va, "{l}: RETH/AtomicETH va");
    assert_eq!(
        n(get("infiniband.reth.r_key")),
        rkey,
        "{l}: RETH/AtomicETH rkey"
    );
    assert_eq!(
        n(get("infiniband.reth.dmalen")),
        e.reth.map(|r| r.len() as u64),
        "{l}: RETH length"
    );
    assert_eq!(
        n(get("infiniband.aeth.syndrome")),
        e.aeth.map(|a| a.syndrome().0 as u64),
        "{l}: AETH syndrome"
    );
    assert_eq!(
        n(get("infiniband.aeth.msn")),
        e.aeth.map(|a| a.msn() as u64),
        "{l}: AETH MSN"
    );
    assert_eq!(
        n(get("infiniband.atomiceth.swapdt")),
        e.atomic_eth.map(|a| a.swap_add()),
        "{l}: swap/add"
    );
    assert_eq!(
        n(get("infiniband.atomiceth.cmpdt")),
        e.atomic_eth.map(|a| a.comp()),
        "{l}: compare"
    );
    assert_eq!(
        n(get("infiniband.atomicacketh.origremdt")),
        e.atomic_ack_eth.map(|a| a.orig()),
        "{l}: orig"
    );
    assert_eq!(
        n(get("infiniband.deth.q_key")),
        e.deth.map(|d| d.qkey() as u64),
        "{l}: Q_Key"
    );
    assert_eq!(
        n(get("infiniband.deth.srcqp")),
        e.deth.map(|d| d.src_qp() as u64),
        "{l}: src QP"
    );
    match e.imm_dt {
        Some(i) => assert!(
            bytes_field_is(get("infiniband.immdt"), &i.imm().to_be_bytes()),
            "{l}: ImmDt {}",
            get("infiniband.immdt")
        ),
        None => assert_eq!(get("infiniband.immdt"), "", "{l}: unexpected ImmDt"),
    }
    match e.ieth {
        Some(i) => assert!(
            bytes_field_is(get("infiniband.ieth"), &i.rkey().to_be_bytes()),
            "{l}: IETH {}",
            get("infiniband.ieth")
        ),
        None => assert_eq!(get("infiniband.ieth"), "", "{l}: unexpected IETH"),
    }
    // tshark 4.0 shows the ICRC without checking it, reading the four wire bytes big-endian.
    let wire = &c.bytes[c.bytes.len() - 4..];
    let icrc = n(get("infiniband.invariant.crc"));
    assert_eq!(
        icrc,
        Some(u32::from_be_bytes(wire.try_into().unwrap()) as u64),
        "{l}: tshark's ICRC field is not the 4 trailing bytes"
    );
    assert_eq!(
        get("_ws.malformed"),
        "",
        "{l}: tshark flags the packet malformed"
    );
    // The one expert note allowed: a zero UDP checksum over IPv6, which tshark calls illegal
    // but rxe sends (rxe_net.c `prepare_udp_hdr`: `check = 0` for both families; RFC 6935
    // allows it for tunnels) and masks out of the ICRC anyway.
    let v6 = matches!(c.ip, bypass_hw::roce::IpSpec::V6(_));
    for msg in get("_ws.expert.message")
        .split(',')
        .filter(|m| !m.is_empty())
    {
        assert!(
            v6 && msg == "Illegal checksum value (0)",
            "{l}: tshark expert note: {msg}"
        );
    }
}

/// The heuristic dissectors registered on `infiniband.payload` (`tshark -G heuristic-decodes`).
fn payload_heuristics() -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-G", "heuristic-decodes"])
        .output()
        .expect("run tshark -G");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut c = l.split('\t');
            (c.next() == Some("infiniband.payload"))
                .then(|| c.next().map(str::to_string))
                .flatten()
        })
        .collect()
}

#[test]
fn tshark_decodes_every_opcode_with_the_fields_bypass_set() {
    if !oracle_available("tshark", || common::command_works("tshark", &["--version"])) {
        return;
    }
    let cases = corpus();
    let dir = scratch_dir("roce_tshark");
    let pcap = dir.join("roce.pcap");
    write_pcap(
        &pcap,
        &cases.iter().map(|c| c.bytes.as_slice()).collect::<Vec<_>>(),
    );
    let mut cmd = Command::new("tshark");
    // No name resolution, no personal config, no display; fields separated by '|'.
    cmd.env("WIRESHARK_CONFIG_DIR", &dir).env_remove("DISPLAY");
    cmd.args(["-n", "-r"]).arg(&pcap).args([
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    // The corpus payloads are arbitrary bytes: keep the upper-layer heuristics that sit on the
    // InfiniBand payload (RPC-over-RDMA, iSER, SMB Direct, ...) from claiming them.
    for h in payload_heuristics() {
        cmd.args(["--disable-protocol", &h]);
    }
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        cases.len(),
        "tshark printed {} lines for {} packets:\n{text}",
        lines.len(),
        cases.len()
    );
    for (c, line) in cases.iter().zip(&lines) {
        let cols: Vec<&str> = line.split('|').collect();
        assert_eq!(cols.len(), FIELDS.len(), "{}: {line}", c.label);
        check(c, &cols);
    }
    eprintln!(
        "tshark decoded {} packets as InfiniBand with the expected fields",
        cases.len()
    );
}
