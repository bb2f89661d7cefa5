//! `bypass perf reg-cost` on a simulated NIC with tiny sizes and two rounds: the header, one
//! row per kind of memory and size with six numbers that parse and are positive (host memory:
//! owned and driver rows; `--source memfd`: memfd rows), the lease row, and the refusals (a
//! `--max` below a page, `--source dmabuf` without /dev/udmabuf).
//! The tests check form and that numbers are there, never how large they are.

mod cli_support;

use cli_support::bypass;

const HEADER: &str = " memory       #bytes   reg[usec]     reg_min     reg_max   dereg[usec]     dereg_min     dereg_max";
const LEASE_HEADER: &str = " op           #bytes         ns/op      ns_min      ns_max";

/// The rows between `header` and the next dashed line, split on whitespace.
fn rows(out: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = out
        .lines()
        .skip_while(|l| l.trim_end() != header.trim_end());
    assert!(lines.next().is_some(), "no header {header:?} in:\n{out}");
    lines
        .take_while(|l| !l.starts_with("---"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn positive(cell: &str) -> f64 {
    let v: f64 = cell
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a number"));
    assert!(v > 0.0, "{cell} is not positive");
    v
}

/// The register/deregister table has exactly `want` (memory, size) rows, each with six
/// positive numbers, every median inside its range.
fn check_rows(out: &str, want: &[(&str, &str)]) {
    let table = rows(out, HEADER);
    let keys: Vec<(&str, &str)> = table
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(keys, want, "{out}");
    for r in &table {
        assert_eq!(r.len(), 8, "{r:?}");
        let v: Vec<f64> = r[2..].iter().map(|c| positive(c)).collect();
        assert!(v[1] <= v[0] && v[0] <= v[2], "{r:?}");
        assert!(v[4] <= v[3] && v[3] <= v[5], "{r:?}");
    }
}

#[test]
fn tiny_sizes_give_a_row_per_memory_and_size_and_a_lease_row() {
    let (code, out, err) = bypass(&[
        "perf",
        "reg-cost",
        "--max",
        "64K",
        "-r",
        "2",
        "--lease-ops",
        "1000",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains(" Rounds          : 2 (sizes interleaved, shuffled per round)"),
        "{out}"
    );
    check_rows(
        &out,
        &[
            ("owned", "4096"),
            ("owned", "65536"),
            ("driver", "4096"),
            ("driver", "65536"),
        ],
    );
    let lease = rows(&out, LEASE_HEADER);
    assert_eq!(lease.len(), 1, "{out}");
    assert_eq!(&lease[0][..2], ["lease+drop", "4096"]);
    let v: Vec<f64> = lease[0][2..].iter().map(|c| positive(c)).collect();
    assert!(v[1] <= v[0] && v[0] <= v[2], "{:?}", lease[0]);
}

#[test]
fn a_memfd_source_gives_memfd_rows() {
    let (code, out, err) = bypass(&[
        "perf",
        "reg-cost",
        "--source",
        "memfd",
        "--max",
        "64K",
        "-r",
        "2",
        "--lease-ops",
        "100",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("Pd::register_memfd"), "{out}");
    check_rows(&out, &[("memfd", "4096"), ("memfd", "65536")]);
}

#[test]
fn a_max_below_a_page_and_a_missing_udmabuf_are_refused() {
    let (code, _, err) = bypass(&["perf", "reg-cost", "--max", "1K"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--max 4K"), "{err}");
    if !std::path::Path::new("/dev/udmabuf").exists() {
        let (code, _, err) = bypass(&["perf", "reg-cost", "--source", "dmabuf", "--max", "4K"]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("/dev/udmabuf does not exist"), "{err}");
    }
}

#[test]
fn cpu_pins_reg_cost_too() {
    let (code, out, err) = bypass(&[
        "perf",
        "reg-cost",
        "--max",
        "4K",
        "-r",
        "1",
        "--lease-ops",
        "10",
        "--cpu",
        "0",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.lines().any(|l| l == "pinned to CPUs 0"), "{err}");
    check_rows(&out, &[("owned", "4096"), ("driver", "4096")]);
}
