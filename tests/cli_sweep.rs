//! `bypass perf sweep`: a tiny sweep writes the CSV (right rows and columns) and one
//! well-formed SVG chart per knob naming its axes and marking the knee; bad options are
//! refused with a clear message. Form and data only, never speed.

mod cli_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cli_support::bypass;

const COLUMNS: [&str; 12] = [
    "knob",
    "mode",
    "depth",
    "depth_used",
    "size",
    "qps",
    "messages",
    "seconds",
    "gbps",
    "mpps",
    "lat_us",
    "cpu_pct",
];

/// A fresh output folder for one test.
fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli_sweep-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs a sweep of 2 depths × 2 sizes × 2 QP counts (`extra` adds options) into `dir`.
fn tiny_sweep(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "perf",
        "sweep",
        "--depths",
        "1,16",
        "--sizes",
        "64,4K",
        "--qps",
        "1,2",
        "--base-depth",
        "16",
        "--base-size",
        "4K",
        "-n",
        "200",
        "--lat-iters",
        "20",
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = bypass(&args);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    out
}

/// The CSV's rows as column name → value maps, after checking the header.
fn csv_rows(dir: &Path) -> Vec<Vec<(String, String)>> {
    let text = std::fs::read_to_string(dir.join("sweep.csv")).expect("sweep.csv written");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    assert_eq!(header, COLUMNS);
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), COLUMNS.len(), "{l}");
            COLUMNS
                .iter()
                .zip(cells)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn get<'a>(row: &'a [(String, String)], col: &str) -> &'a str {
    &row.iter().find(|(k, _)| k == col).unwrap().1
}

fn num(row: &[(String, String)], col: &str) -> f64 {
    let v = get(row, col);
    v.parse()
        .unwrap_or_else(|_| panic!("{col} = {v:?} is not a number"))
}

/// The trimmed text of every `<text>` element of an SVG file (which must parse as XML).
fn svg_texts(path: &Path) -> Vec<String> {
    let svg = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&svg)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_owned())
        .collect()
}

#[test]
fn a_tiny_sweep_writes_the_csv_and_one_chart_per_knob() {
    let dir = out_dir("knobs");
    let out = tiny_sweep(&dir, &["--events", "both"]);
    let rows = csv_rows(&dir);
    // (2 depths + 2 sizes + 2 QP counts) × (spin, event).
    assert_eq!(rows.len(), 12, "{out}");
    for (knob, col, want) in [
        ("depth", "depth", ["1", "16"]),
        ("size", "size", ["64", "4096"]),
        ("qps", "qps", ["1", "2"]),
    ] {
        for mode in ["spin", "event"] {
            let of: Vec<_> = rows
                .iter()
                .filter(|r| get(r, "knob") == knob && get(r, "mode") == mode)
                .collect();
            let values: BTreeSet<&str> = of.iter().map(|r| get(r, col)).collect();
            assert_eq!(values, want.into_iter().collect(), "{knob} {mode}");
            // The other knobs sit at the base point (depth 16, 4 KiB, 1 QP).
            for r in &of {
                for (other, base) in [("depth", "16"), ("size", "4096"), ("qps", "1")] {
                    if other != col {
                        assert_eq!(get(r, other), base, "{knob} row {r:?}");
                    }
                }
            }
        }
    }
    for r in &rows {
        assert_eq!(num(r, "messages"), 200.0, "{r:?}");
        assert!(num(r, "gbps") > 0.0 && num(r, "mpps") > 0.0, "{r:?}");
        assert!(num(r, "seconds") > 0.0, "{r:?}");
        assert!(num(r, "depth_used") <= num(r, "depth"), "{r:?}");
        // Latency is measured for the size sweep only.
        let lat = get(r, "lat_us");
        if get(r, "knob") == "size" {
            assert!(num(r, "lat_us") > 0.0, "{r:?}");
        } else {
            assert_eq!(lat, "", "{r:?}");
        }
        let cpu = get(r, "cpu_pct");
        assert!(
            cpu.is_empty() || (0.0..=100.0).contains(&num(r, "cpu_pct")),
            "{r:?}"
        );
    }
    for (file, axis) in [
        ("depth.svg", "queue depth (WRs outstanding per QP)"),
        ("size.svg", "message size (bytes)"),
        ("qps.svg", "queue pairs (streaming at once)"),
    ] {
        let texts = svg_texts(&dir.join(file));
        for want in [axis, "bandwidth (Gb/s)", "spin", "event"] {
            assert!(
                texts.iter().any(|t| t == want),
                "{file}: {want:?} not in {texts:?}"
            );
        }
        let knees = texts.iter().filter(|t| t.starts_with("knee: ")).count();
        assert_eq!(knees, 2, "{file}: one knee per curve in {texts:?}");
    }
    // The table and the knee lines on stdout.
    assert!(out.contains("lat[usec]") && out.contains("Gb/s"), "{out}");
    for knob in ["depth", "size", "qps"] {
        for mode in ["spin", "event"] {
            let line = format!(" knee of {knob} ({mode}): ");
            assert!(out.contains(&line), "{line:?} missing:\n{out}");
        }
    }
}

#[test]
fn a_full_grid_measures_every_combination_once() {
    let dir = out_dir("grid");
    tiny_sweep(&dir, &["--events", "spin", "--full-grid"]);
    let rows = csv_rows(&dir);
    assert_eq!(rows.len(), 8);
    let points: BTreeSet<(String, String, String)> = rows
        .iter()
        .map(|r| {
            assert_eq!(get(r, "knob"), "grid");
            assert_eq!(get(r, "mode"), "spin");
            (
                get(r, "depth").to_owned(),
                get(r, "size").to_owned(),
                get(r, "qps").to_owned(),
            )
        })
        .collect();
    assert_eq!(points.len(), 8);
    for file in ["depth.svg", "size.svg", "qps.svg"] {
        let texts = svg_texts(&dir.join(file));
        assert!(texts.iter().any(|t| t == "bandwidth (Gb/s)"), "{file}");
    }
}

#[test]
fn bad_options_are_refused_with_the_fix() {
    let dir = out_dir("bad");
    let d = dir.to_str().unwrap();
    for (args, says) in [
        (vec!["--depths", "0,4"], "--depths"),
        (vec!["--sizes", "16M"], "sizes up to 8M"),
        (vec!["-D", "0"], "seconds per point"),
        (vec!["-n", "100", "-D", "1"], "cannot be used with"),
        (vec!["--qps", "1", "--events", "sometimes"], "--events"),
        (vec!["-r", "0"], "--repeats"),
        (vec!["-n", "20000000"], "--iters"),
    ] {
        let mut a = vec!["perf", "sweep", "--out", d];
        a.extend_from_slice(&args);
        let (code, out, err) = bypass(&a);
        assert_ne!(code, 0, "{args:?} was accepted:\n{out}");
        assert!(err.contains(says), "{args:?}: {says:?} not in:\n{err}");
    }
    // An --out that is a file, not a folder.
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("not-a-folder");
    std::fs::write(&file, "x").unwrap();
    let (code, _, err) = bypass(&[
        "perf",
        "sweep",
        "--depths",
        "1",
        "--sizes",
        "64",
        "--qps",
        "1",
        "-n",
        "20",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot write") && err.contains("--out"),
        "{err}"
    );
}
