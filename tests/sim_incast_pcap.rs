//! A pcap of a `bypass sim incast --mode pfc-ecn` run, judged by code nobody here wrote
//! where it can be: tshark (with the project's CNP post-dissector,
//! `scripts/wireshark/roce_cnp.lua`, since tshark 4.0 has none) finds the CNPs with BECN set,
//! at DSCP 48, and the CE marks the switch made in the IP header; every packet's ICRC is
//! still valid after marking (RoCEv2's ICRC masks the ECN bits).
//!
//! The oracle comes from `hw/tests/common` (skipped with a notice when missing, a failure
//! under `BYPASS_REQUIRE_ORACLES=1`, as `scripts/test.sh` runs it).

#[path = "../hw/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use bypass_hw::roce::icrc;

/// The ECN bits of an IPv4 packet.
fn ecn(p: &[u8]) -> u8 {
    p[1] & 3
}

/// The BTH opcode of an IPv4 RoCEv2 packet (IHL 5).
fn opcode(p: &[u8]) -> u8 {
    p[28]
}

fn tshark_lines(pcap: &Path, filter: &str, fields: &[&str]) -> Vec<String> {
    let lua = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/wireshark/roce_cnp.lua");
    let mut args = vec![
        "-X".to_owned(),
        format!("lua_script:{}", lua.display()),
        "-r".to_owned(),
        pcap.display().to_string(),
        "-Y".to_owned(),
        filter.to_owned(),
        "-T".to_owned(),
        "fields".to_owned(),
    ];
    for f in fields {
        args.push("-e".to_owned());
        args.push((*f).to_owned());
    }
    let out = Command::new("tshark")
        .args(&args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_incast_capture_shows_cnps_ce_marks_and_valid_icrcs() {
    let dir = common::scratch_dir("sim_incast_pcap");
    let path = dir.join("incast.pcap");
    let out = Command::new(env!("CARGO_BIN_EXE_bypass"))
        .args([
            "sim",
            "incast",
            "--mode",
            "pfc-ecn",
            "--duration-us",
            "3000",
            "--pcap",
        ])
        .arg(&path)
        .output()
        .expect("run bypass");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pkts = common::pcap_records(&std::fs::read(&path).unwrap());
    let cnps: Vec<&Vec<u8>> = pkts.iter().filter(|p| opcode(p) == 0x81).collect();
    let ce = pkts.iter().filter(|p| ecn(p) == 3).count();
    println!(
        "{} packets, {} CNPs, {ce} CE-marked",
        pkts.len(),
        cnps.len()
    );
    assert!(
        !cnps.is_empty() && ce > 0,
        "the run must congest the switch"
    );
    for (i, p) in pkts.iter().enumerate() {
        assert_eq!(
            icrc::check(p),
            Ok(true),
            "packet {i}: ICRC after the switch"
        );
    }
    for c in &cnps {
        assert_eq!(c[1] >> 2, 48, "CNPs at cnp_dscp");
        assert_eq!(ecn(c), 0, "a CNP is not ECN-capable");
    }
    if !common::oracle_available("tshark", || common::command_works("tshark", &["--version"])) {
        return;
    }
    let lines = tshark_lines(
        &path,
        "roce_cnp",
        &["roce_cnp.becn", "roce_cnp.reserved_zero", "ip.dsfield.dscp"],
    );
    assert_eq!(lines.len(), cnps.len(), "tshark finds every CNP");
    assert!(lines.iter().all(|l| l == "1\t1\t48"), "{lines:?}");
    let marked = tshark_lines(&path, "ip.dsfield.ecn == 3", &["frame.number"]);
    assert_eq!(marked.len(), ce, "tshark sees the CE marks");
}
