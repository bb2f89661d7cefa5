//! Conformance of the RoCEv2 wire format with scapy's RoCE layer (`scapy.contrib.roce`),
//! code nobody here wrote:
//! - bypass → scapy: every opcode in the table, IPv4 and IPv6, every pad count; scapy decodes
//!   the IP/UDP/BTH fields, recomputes the ICRC, and each must equal what bypass set.
//! - scapy → bypass: scapy builds packets with its own ICRC; bypass must accept them, decode
//!   the same fields, and reject the packet when any bit the ICRC covers is flipped (and still
//!   accept it when a bit the ICRC masks out is flipped).

mod common;
mod roce_support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use bypass_hw::roce::icrc;
use bypass_hw::roce::ip::IpSpec;
use bypass_hw::roce::{BTH_LEN, RocePacket};
use common::{oracle_available, scratch_dir};
use roce_support::{corpus, hex, unhex};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/roce_scapy.py")
}

fn scapy_available() -> bool {
    oracle_available("scapy", || {
        common::command_works("python3", &["-c", "import scapy.contrib.roce"])
    })
}

/// Runs the script; returns one key=value map per output line.
fn run(args: &[&str]) -> Vec<HashMap<String, String>> {
    let out = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "roce_scapy.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| {
            l.split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn num(m: &HashMap<String, String>, k: &str) -> u64 {
    let v = m
        .get(k)
        .unwrap_or_else(|| panic!("scapy output lacks {k}: {m:?}"));
    v.parse()
        .unwrap_or_else(|_| panic!("{k}={v} is not a number"))
}

#[test]
fn scapy_decodes_every_bypass_packet_with_matching_icrc_and_fields() {
    if !scapy_available() {
        return;
    }
    let cases = corpus();
    let dir = scratch_dir("roce_scapy_decode");
    let file = dir.join("packets.hex");
    let text: String = cases.iter().map(|c| hex(&c.bytes) + "\n").collect();
    std::fs::write(&file, text).expect("write packets");
    let rows = run(&["decode", file.to_str().unwrap()]);
    assert_eq!(
        rows.len(),
        cases.len(),
        "scapy decoded a different number of packets"
    );
    let (mut v4, mut v6) = (0, 0);
    for (c, m) in cases.iter().zip(&rows) {
        let l = &c.label;
        assert!(!m.contains_key("error"), "{l}: {}", m["error"]);
        assert_eq!(
            m["icrc_ok"], "1",
            "{l}: ICRC on the wire {} but scapy computes {}",
            m["icrc_wire"], m["icrc_scapy"]
        );
        assert_eq!(m["icrc_wire"], hex(&c.bytes[c.bytes.len() - 4..]), "{l}");
        let b = &c.bth;
        assert_eq!(num(m, "opcode"), b.opcode.0 as u64, "{l}: opcode");
        assert_eq!(num(m, "solicited"), b.se as u64, "{l}: SE");
        assert_eq!(num(m, "migreq"), b.mig_req as u64, "{l}: MigReq");
        assert_eq!(num(m, "padcount"), b.pad_cnt as u64, "{l}: PadCnt");
        assert_eq!(num(m, "tver"), 0, "{l}: TVer");
        assert_eq!(num(m, "pkey"), b.pkey as u64, "{l}: P_Key");
        assert_eq!(num(m, "fecn"), b.fecn as u64, "{l}: FECN");
        assert_eq!(num(m, "becn"), b.becn as u64, "{l}: BECN");
        assert_eq!(num(m, "dqpn"), b.dest_qp as u64, "{l}: DestQP");
        assert_eq!(num(m, "ackreq"), b.ack_req as u64, "{l}: AckReq");
        assert_eq!(num(m, "psn"), b.psn as u64, "{l}: PSN");
        assert_eq!(num(m, "udp_sport"), c.ports.src as u64, "{l}: UDP sport");
        assert_eq!(num(m, "udp_dport"), 4791, "{l}: UDP dport");
        assert_eq!(num(m, "udp_chksum"), 0, "{l}: UDP checksum (rxe sends 0)");
        let hl = c.ip.header_len();
        assert_eq!(
            num(m, "udp_len") as usize,
            c.bytes.len() - hl,
            "{l}: UDP length"
        );
        // Everything between the BTH and the ICRC: extension headers in table order, payload, pad.
        let mut after = Vec::new();
        for h in [
            c.ext
                .deth
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
            c.ext
                .reth
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
            c.ext
                .atomic_eth
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
            c.ext
                .aeth
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
            c.ext
                .atomic_ack_eth
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
            c.ext
                .imm_dt
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
            c.ext
                .ieth
                .map(|x| zerocopy::IntoBytes::as_bytes(&x).to_vec()),
        ]
        .into_iter()
        .flatten()
        {
            after.extend(h);
        }
        after.extend(&c.payload);
        after.extend(std::iter::repeat_n(0u8, b.pad_cnt as usize));
        assert_eq!(
            m["after_bth"],
            hex(&after),
            "{l}: bytes between BTH and ICRC"
        );
        match c.ip {
            IpSpec::V4(ip) => {
                v4 += 1;
                assert_eq!(
                    m["ip_src"],
                    format!("{}.{}.{}.{}", ip.src[0], ip.src[1], ip.src[2], ip.src[3]),
                    "{l}"
                );
                assert_eq!(
                    m["ip_dst"],
                    format!("{}.{}.{}.{}", ip.dst[0], ip.dst[1], ip.dst[2], ip.dst[3]),
                    "{l}"
                );
                assert_eq!(m["ip_df"], "1", "{l}: DF");
                assert_eq!(num(m, "ip_id"), 0, "{l}: IP ID");
                assert_eq!(num(m, "ip_ttl"), 64, "{l}: TTL");
                assert_eq!(num(m, "ip_tos"), ip.tos as u64, "{l}: TOS");
                assert_eq!(
                    num(m, "ip_len") as usize,
                    c.bytes.len(),
                    "{l}: IP total length"
                );
                assert_eq!(m["ip_chksum_ok"], "1", "{l}: IPv4 header checksum");
            }
            IpSpec::V6(ip) => {
                v6 += 1;
                assert_eq!(m["ip_src"], "fd00::1", "{l}");
                assert_eq!(m["ip_dst"], "fd00::2", "{l}");
                assert_eq!(
                    num(m, "ip_tc"),
                    ip.traffic_class as u64,
                    "{l}: traffic class"
                );
                assert_eq!(num(m, "ip_fl"), ip.flow_label as u64, "{l}: flow label");
                assert_eq!(num(m, "ip_hlim"), ip.hop_limit as u64, "{l}: hop limit");
                assert_eq!(
                    num(m, "ip_plen") as usize,
                    c.bytes.len() - 40,
                    "{l}: payload length"
                );
            }
        }
    }
    eprintln!(
        "scapy agreed on {} packets ({v4} IPv4, {v6} IPv6)",
        cases.len()
    );
    assert!(v4 > 50 && v6 > 50);
}

/// Byte offsets and bit masks the ICRC does not cover (rxe `rxe_icrc.c`).
fn masked_bits(pkt: &[u8]) -> HashMap<usize, u8> {
    let mut m = HashMap::new();
    let udp = if pkt[0] >> 4 == 4 {
        m.extend([(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)]);
        20
    } else {
        m.extend([(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff)]);
        40
    };
    m.extend([(udp + 6, 0xff), (udp + 7, 0xff), (udp + 8 + 4, 0xff)]);
    m
}

#[test]
fn bypass_accepts_scapy_packets_and_rejects_every_covered_bit_flip() {
    if !scapy_available() {
        return;
    }
    let rows = run(&["build"]);
    assert!(rows.len() >= 20, "scapy built only {} packets", rows.len());
    let mut flips = 0;
    for m in &rows {
        let l = &m["label"];
        let pkt = unhex(&m["hex"]);
        assert_eq!(
            icrc::check(&pkt),
            Ok(true),
            "{l}: bypass rejects scapy's ICRC"
        );
        let p = RocePacket::parse(&pkt).unwrap_or_else(|e| panic!("{l}: bypass cannot parse: {e}"));
        assert!(p.icrc_ok(), "{l}");
        assert_eq!(p.bth().pkey(), 0xffff, "{l}");
        assert!(
            l.contains(p.opcode().name().unwrap()),
            "{l}: bypass decodes opcode {}",
            p.opcode()
        );
        // The UDP-socket path: rebuild the IP/UDP headers from the fields and check again.
        let udp_payload = p.udp_payload();
        assert_eq!(
            icrc::check_udp_payload(p.ip(), p.ports(), udp_payload),
            Ok(true),
            "{l}: UDP payload path"
        );
        let q = RocePacket::parse_udp_payload(*p.ip(), p.ports(), udp_payload).unwrap();
        assert!(q.icrc_ok(), "{l}: UDP payload path");
        assert!(udp_payload.len() >= BTH_LEN);

        let masked = masked_bits(&pkt);
        for i in 0..pkt.len() {
            for bit in 0..8 {
                let mut bad = pkt.clone();
                bad[i] ^= 1 << bit;
                let is_masked = masked.get(&i).is_some_and(|m| m & (1 << bit) != 0);
                let r = icrc::check(&bad);
                if is_masked {
                    assert_eq!(
                        r,
                        Ok(true),
                        "{l}: flipping masked bit {bit} of byte {i} must not change the ICRC"
                    );
                } else {
                    assert_ne!(
                        r,
                        Ok(true),
                        "{l}: flipping bit {bit} of byte {i} went unnoticed"
                    );
                }
                flips += 1;
            }
        }
    }
    eprintln!(
        "{} scapy packets accepted; {flips} single-bit flips judged",
        rows.len()
    );
}

/// A CNP bypass builds is byte for byte the one scapy's `cnp()` builds for the same DestQP,
/// addresses, DSCP and UDP source port (IPv4 and IPv6, scapy's ICRC included), and bypass
/// parses scapy's with a valid ICRC.
#[test]
fn bypass_cnps_are_byte_identical_to_scapys() {
    use bypass_hw::roce::cnp::{Cnp, CnpSpec, cnp_tos, emit_cnp};
    use bypass_hw::roce::ip::ipv4_to_gid;
    use bypass_hw::roce::{ROCE_V2_UDP_DPORT, UdpPorts};
    if !scapy_available() {
        return;
    }
    let rows = run(&["cnp"]);
    assert_eq!(rows.len(), 6, "scapy built a different number of CNPs");
    for m in &rows {
        let l = &m["label"];
        let v6 = m["v6"] == "1";
        let (s, d) = if v6 {
            let mut s = [0u8; 16];
            s[0] = 0xfd;
            let mut d = s;
            s[15] = 1;
            d[15] = 2;
            (s, d)
        } else {
            (ipv4_to_gid([10, 99, 0, 1]), ipv4_to_gid([10, 99, 0, 2]))
        };
        let mut ip = IpSpec::from_gids(&s, &d).unwrap();
        ip.set_tclass(cnp_tos(num(m, "dscp") as u8));
        let spec = CnpSpec {
            ip,
            ports: UdpPorts {
                src: num(m, "sport") as u16,
                dst: ROCE_V2_UDP_DPORT,
            },
            dest_qp: num(m, "dqpn") as u32,
        };
        let mut buf = vec![0u8; spec.packet_len()];
        emit_cnp(&spec, &mut buf).unwrap();
        assert_eq!(
            hex(&buf),
            m["hex"],
            "{l}: bypass's CNP differs from scapy's"
        );
        let theirs = unhex(&m["hex"]);
        let c = Cnp::parse(&theirs).unwrap();
        assert!(c.icrc_ok, "{l}: scapy's CNP ICRC rejected");
        assert_eq!(c.dest_qp(), spec.dest_qp, "{l}");
        assert!(c.bth.becn, "{l}: BECN");
    }
}
