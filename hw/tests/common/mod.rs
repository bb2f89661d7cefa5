//! Shared by the conformance tests: oracle gating and the mlx5_ifc field-table checker.
//!
//! An *oracle* is code nobody here wrote (gcc + rdma-core's `mlx5dv.h`, scapy, tshark).
//! When one is missing, a test skips with a visible notice, unless `BYPASS_REQUIRE_ORACLES=1`
//! (set by `scripts/test.sh` and CI), in which case it fails: CI must never pass by skipping.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

use bypass_hw::prm::Field;

/// True when `BYPASS_REQUIRE_ORACLES=1`.
pub fn oracles_required() -> bool {
    std::env::var("BYPASS_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// Runs `probe`; if it fails, skips (prints a notice, returns false) or, under
/// `BYPASS_REQUIRE_ORACLES=1`, panics with the reason.
pub fn oracle_available(name: &str, probe: impl FnOnce() -> Result<(), String>) -> bool {
    match probe() {
        Ok(()) => true,
        Err(why) if oracles_required() => {
            panic!("oracle {name} is required (BYPASS_REQUIRE_ORACLES=1) but unavailable: {why}")
        }
        Err(why) => {
            eprintln!(
                "SKIPPED: oracle {name} unavailable ({why}); run scripts/test.sh to install it"
            );
            false
        }
    }
}

/// Checks that `program --version`-style invocation works.
pub fn command_works(program: &str, args: &[&str]) -> Result<(), String> {
    match std::process::Command::new(program).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`{program} {}` exited with {}: {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("`{program}` cannot be run: {e}")),
    }
}

/// A directory for a test's scratch files (under the target dir, removed and recreated).
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The IP packets of a pcap bypass wrote (LINKTYPE_RAW, nanosecond timestamps), in order.
pub fn pcap_records(pcap: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(
        &pcap[0..4],
        &0xa1b2_3c4du32.to_le_bytes(),
        "ns-resolution magic"
    );
    assert_eq!(u32::from_le_bytes(pcap[20..24].try_into().unwrap()), 101);
    let mut at = 24;
    let mut out = Vec::new();
    while at < pcap.len() {
        let cap = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(pcap[at + 16..at + 16 + cap].to_vec());
        at += 16 + cap;
    }
    out
}

/// One row of `tests/data/mlx5_ifc_fields.tsv`: a field of a kernel `mlx5_ifc_<layout>_bits`.
#[derive(Debug, Clone)]
pub struct IfcRow {
    pub layout: String,
    pub field: String,
    pub bit_off: usize,
    pub width: usize,
}

/// The field table taken from the kernel's `mlx5_ifc.h` (the file's header names the commit).
pub fn ifc_table() -> Vec<IfcRow> {
    let text = include_str!("../data/mlx5_ifc_fields.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert_eq!(c.len(), 4, "bad table row {l:?}");
            let num = |s: &str| usize::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
            IfcRow {
                layout: c[0].into(),
                field: c[1].into(),
                bit_off: num(c[2]),
                width: num(c[3]),
            }
        })
        .collect()
}

/// Checks one `prm_layout!` view against the kernel table:
/// - the layout's size equals the kernel struct's (`__size__` row);
/// - every field bypass defines exists in the kernel struct at the same bit offset and width;
/// - writing all-ones through the field into a zeroed buffer sets exactly the bits the kernel
///   table says it owns (so a wrong byte, shift or width in the accessor fails);
/// - every sub-layout sits at the kernel's offset.
pub fn check_layout(
    table: &[IfcRow],
    ifc: &str,
    len: usize,
    fields: &[Field],
    subs: &[(&str, usize, &[Field])],
) {
    let rows: Vec<&IfcRow> = table.iter().filter(|r| r.layout == ifc).collect();
    assert!(
        !rows.is_empty(),
        "mlx5_ifc_{ifc}_bits is not in the kernel table"
    );
    let size = rows
        .iter()
        .find(|r| r.field == "__size__")
        .unwrap_or_else(|| panic!("{ifc}: no __size__ row"));
    assert_eq!(
        len * 8,
        size.width,
        "{ifc}: bypass says {len} bytes, the kernel {} bits",
        size.width
    );
    for f in fields {
        let row = rows.iter().find(|r| r.field == f.name).unwrap_or_else(|| {
            panic!(
                "{ifc}.{}: bypass defines a field the kernel layout does not have",
                f.name
            )
        });
        assert_eq!(
            (f.bit_off, f.width),
            (row.bit_off, row.width),
            "{ifc}.{}: bypass puts it at bit {:#x} width {:#x}, the kernel at bit {:#x} width {:#x}",
            f.name,
            f.bit_off,
            f.width,
            row.bit_off,
            row.width
        );
        let mut buf = vec![0u8; len];
        f.set(&mut buf, f.max())
            .unwrap_or_else(|e| panic!("{ifc}.{}: {e}", f.name));
        for bit in 0..len * 8 {
            let set = buf[bit / 8] & (0x80 >> (bit % 8)) != 0;
            let owned = bit >= row.bit_off && bit < row.bit_off + row.width;
            assert_eq!(
                set, owned,
                "{ifc}.{}: bit {bit:#x} is {} but the kernel layout says {}",
                f.name, set, owned
            );
        }
        assert_eq!(f.get(&buf), f.max(), "{ifc}.{}: reads back wrong", f.name);
    }
    for (name, byte_off, _) in subs {
        let row = rows
            .iter()
            .find(|r| r.field == *name)
            .unwrap_or_else(|| panic!("{ifc}.{name}: sub-layout not in the kernel layout"));
        assert_eq!(
            byte_off * 8,
            row.bit_off,
            "{ifc}.{name}: sub-layout at byte {byte_off:#x}, kernel at bit {:#x}",
            row.bit_off
        );
    }
}
