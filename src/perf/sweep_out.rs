//! What a tuning sweep reports: the table on stdout, the CSV (one row per point) and one
//! chart per knob with each curve's knee marked.
//!
//! Owns: [`Row`], [`Measured`], [`csv`], [`table`], [`charts`] and [`knee_lines`]. Must not
//! measure (`sweep`), plan (`sweep_plan`) or draw SVG itself (`crate::chart` does).
//!
//! A chart of knob K holds, per completion mode, the rows that vary K with the other knobs
//! at the base point; the knee rule is `knee::knee` over bandwidth (Gb/s).

use std::fmt::Write as _;

use super::knee::{KNEE_TOLERANCE, knee};
use super::sweep_plan::{Knob, Mode, Point};
use crate::chart::{Chart, Series, TickFormat, XScale, human_bytes};

/// What one point measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// WRs outstanding per QP the run used (the asked depth, capped to fit 64 MiB).
    pub depth_used: u32,
    /// Messages completed over all QPs.
    pub messages: u64,
    /// Seconds the stream ran.
    pub seconds: f64,
    /// Bandwidth in Gb/s (10^9 bits per second).
    pub gbps: f64,
    /// Message rate in millions per second.
    pub mpps: f64,
    /// Typical ping-pong latency at this size in µs (size sweep only).
    pub lat_us: Option<f64>,
    /// CPU use over the stream in % of all CPUs (from /proc/stat, where readable).
    pub cpu_pct: Option<f64>,
}

/// One row of the sweep: the knob it belongs to, its settings and its result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// The knob the row varies.
    pub knob: Knob,
    /// Its settings.
    pub point: Point,
    /// Its result.
    pub m: Measured,
}

/// The CSV columns, in order.
pub const CSV_HEADER: &str =
    "knob,mode,depth,depth_used,size,qps,messages,seconds,gbps,mpps,lat_us,cpu_pct";

/// The rows as CSV (a header line, then one line per row; empty cells where not measured).
pub fn csv(rows: &[Row]) -> String {
    let opt = |v: Option<f64>, prec: usize| v.map_or(String::new(), |v| format!("{v:.prec$}"));
    let mut s = format!("{CSV_HEADER}\n");
    for r in rows {
        let (p, m) = (&r.point, &r.m);
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.6},{:.4},{:.4},{},{}",
            r.knob.name(),
            p.mode,
            p.depth,
            m.depth_used,
            p.size,
            p.qps,
            m.messages,
            m.seconds,
            m.gbps,
            m.mpps,
            opt(m.lat_us, 3),
            opt(m.cpu_pct, 1),
        );
    }
    s
}

/// The rows as an aligned table (a `*` after a depth marks one capped to fit memory).
pub fn table(rows: &[Row]) -> String {
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".into(), |v| format!("{v:.prec$}"));
    let mut s = format!(
        " {:<6} {:<5} {:>6} {:>6} {:>4} {:>10} {:>10} {:>10} {:>6}\n",
        "knob", "mode", "depth", "size", "qps", "Gb/s", "Mpps", "lat[usec]", "CPU%"
    );
    for r in rows {
        let (p, m) = (&r.point, &r.m);
        let depth = if m.depth_used < p.depth {
            format!("{}*", m.depth_used)
        } else {
            p.depth.to_string()
        };
        let _ = writeln!(
            s,
            " {:<6} {:<5} {:>6} {:>6} {:>4} {:>10.3} {:>10.4} {:>10} {:>6}",
            r.knob.name(),
            p.mode.to_string(),
            depth,
            human_bytes(p.size),
            p.qps,
            m.gbps,
            m.mpps,
            opt(m.lat_us, 2),
            opt(m.cpu_pct, 1),
        );
    }
    s
}

/// The base point the charts hold the other knobs at: (depth, size, QPs).
pub type Base = (u32, u64, u32);

/// The x value of `row` on knob `k`'s axis (the depth used, not the one asked for).
fn x_of(k: Knob, r: &Row) -> f64 {
    match k {
        Knob::Depth => f64::from(r.m.depth_used),
        Knob::Size => r.point.size as f64,
        Knob::Qps | Knob::Grid => f64::from(r.point.qps),
    }
}

/// Whether `row` lies on knob `k`'s curve: it varies `k` (or is a grid point) and the other
/// knobs are at `base`.
fn on_curve(k: Knob, r: &Row, base: Base) -> bool {
    let p = &r.point;
    let (d, s, q) = (p.depth == base.0, p.size == base.1, p.qps == base.2);
    (r.knob == k || r.knob == Knob::Grid)
        && match k {
            Knob::Depth => s && q,
            Knob::Size => d && q,
            Knob::Qps => d && s,
            Knob::Grid => false,
        }
}

/// One curve: the mode and its (x, Gb/s) points, sorted by x.
fn curve(rows: &[Row], k: Knob, mode: Mode, base: Base) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.point.mode == mode && on_curve(k, r, base))
        .map(|r| (x_of(k, r), r.m.gbps))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// The modes present in `rows`, in first-seen order.
fn modes(rows: &[Row]) -> Vec<Mode> {
    let mut v = Vec::new();
    for r in rows {
        if !v.contains(&r.point.mode) {
            v.push(r.point.mode);
        }
    }
    v
}

/// One chart per knob that has points: bandwidth against the knob, a curve per mode, knees
/// marked. `verb` names the operation in the titles (e.g. "RDMA WRITE").
pub fn charts(rows: &[Row], base: Base, verb: &str) -> Vec<(Knob, Chart)> {
    let mut out = Vec::new();
    for k in Knob::CHARTED {
        let series: Vec<Series> = modes(rows)
            .into_iter()
            .map(|mode| {
                let points = curve(rows, k, mode, base);
                let knee = knee(&points, KNEE_TOLERANCE);
                Series {
                    name: mode.to_string(),
                    points,
                    knee,
                }
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let qps = |n: u32| format!("{n} QP{}", if n == 1 { "" } else { "s" });
        let (what, x_label, held, ticks) = match k {
            Knob::Depth => (
                "queue depth",
                "queue depth (WRs outstanding per QP)",
                format!("{}-byte messages, {}", human_bytes(base.1), qps(base.2)),
                TickFormat::Plain,
            ),
            Knob::Size => (
                "message size",
                "message size (bytes)",
                format!("depth {}, {}", base.0, qps(base.2)),
                TickFormat::Bytes,
            ),
            _ => (
                "QP count",
                "queue pairs (streaming at once)",
                format!("depth {}, {}-byte messages", base.0, human_bytes(base.1)),
                TickFormat::Plain,
            ),
        };
        let chart = Chart {
            title: format!("{verb} bandwidth vs {what} ({held})"),
            x_label: x_label.into(),
            y_label: "bandwidth (Gb/s)".into(),
            x_scale: XScale::Log2,
            x_ticks: ticks,
            series,
        };
        out.push((k, chart));
    }
    out
}

/// One line per curve naming its knee, e.g.
/// ` knee of depth (spin): 64 (9.81 Gb/s; best 10.02 Gb/s at 1024)`.
pub fn knee_lines(charts: &[(Knob, Chart)]) -> String {
    let mut s = String::new();
    for (k, c) in charts {
        for series in &c.series {
            let best = series
                .points
                .iter()
                .copied()
                .reduce(|a, b| if b.1 > a.1 { b } else { a });
            let label = |x: f64| match k {
                Knob::Size => human_bytes(x as u64),
                _ => format!("{x:.0}"),
            };
            match (series.knee.and_then(|i| series.points.get(i)), best) {
                (Some(&(kx, ky)), Some((bx, by))) => {
                    let _ = writeln!(
                        s,
                        " knee of {} ({}): {} ({ky:.2} Gb/s; best {by:.2} Gb/s at {})",
                        k.name(),
                        series.name,
                        label(kx),
                        label(bx)
                    );
                }
                _ => {
                    let _ = writeln!(s, " knee of {} ({}): none", k.name(), series.name);
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(knob: Knob, depth: u32, size: u64, qps: u32, mode: Mode, gbps: f64) -> Row {
        Row {
            knob,
            point: Point {
                depth,
                size,
                qps,
                mode,
            },
            m: Measured {
                depth_used: depth.min(512),
                messages: 100,
                seconds: 0.5,
                gbps,
                mpps: gbps / 8.0,
                lat_us: (knob == Knob::Size).then_some(3.25),
                cpu_pct: None,
            },
        }
    }

    fn rows() -> Vec<Row> {
        let mut v = Vec::new();
        for (mode, f) in [(Mode::Spin, 1.0), (Mode::Event, 0.5)] {
            for (d, g) in [(1, 1.0), (16, 9.6), (256, 10.0), (1024, 9.9)] {
                v.push(row(Knob::Depth, d, 4096, 1, mode, g * f));
            }
            for (s, g) in [(64, 0.5), (4096, 10.0)] {
                v.push(row(Knob::Size, 256, s, 1, mode, g * f));
            }
            for (q, g) in [(1, 10.0), (4, 20.0)] {
                v.push(row(Knob::Qps, 256, 4096, q, mode, g * f));
            }
        }
        v
    }

    #[test]
    fn the_csv_has_a_header_and_one_line_per_row() {
        let text = csv(&rows());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(lines.len(), 1 + 16);
        assert_eq!(
            lines[4],
            "depth,spin,1024,512,4096,1,100,0.500000,9.9000,1.2375,,"
        );
        assert!(
            lines[5].starts_with("size,spin,256,256,64,1,"),
            "{}",
            lines[5]
        );
        assert!(lines[5].ends_with(",3.250,"), "{}", lines[5]);
    }

    #[test]
    fn charts_have_a_curve_per_mode_and_the_knee_on_it() {
        let c = charts(&rows(), (256, 4096, 1), "RDMA WRITE");
        assert_eq!(c.len(), 3);
        let (k, depth) = &c[0];
        assert_eq!(*k, Knob::Depth);
        assert_eq!(depth.x_label, "queue depth (WRs outstanding per QP)");
        assert_eq!(
            depth.title,
            "RDMA WRITE bandwidth vs queue depth (4K-byte messages, 1 QP)"
        );
        assert_eq!(depth.series.len(), 2);
        // x is the depth used (1024 was capped to 512); the knee is 16 (9.6 within 5 % of 10).
        let spin = &depth.series[0];
        let xs: Vec<f64> = spin.points.iter().map(|p| p.0).collect();
        assert_eq!(xs, [1.0, 16.0, 256.0, 512.0]);
        assert_eq!(spin.knee, Some(1));
        let lines = knee_lines(&c);
        assert!(
            lines.contains(" knee of depth (spin): 16 (9.60 Gb/s; best 10.00 Gb/s at 256)"),
            "{lines}"
        );
        assert!(lines.contains(" knee of size (event): 4K"), "{lines}");
        assert!(lines.contains(" knee of qps (spin): 4 "), "{lines}");
    }

    #[test]
    fn grid_rows_are_sliced_at_the_base() {
        let mut v = Vec::new();
        for d in [1, 64] {
            for q in [1, 2] {
                v.push(row(Knob::Grid, d, 4096, q, Mode::Spin, f64::from(d * q)));
            }
        }
        let c = charts(&v, (64, 4096, 2), "RDMA WRITE");
        let qps = &c.iter().find(|(k, _)| *k == Knob::Qps).unwrap().1;
        assert_eq!(qps.series[0].points, [(1.0, 64.0), (2.0, 128.0)]);
        let depth = &c.iter().find(|(k, _)| *k == Knob::Depth).unwrap().1;
        assert_eq!(depth.series[0].points, [(1.0, 2.0), (64.0, 128.0)]);
    }

    #[test]
    fn the_table_marks_capped_depths() {
        let t = table(&rows());
        assert!(t.lines().next().unwrap().contains("lat[usec]"));
        assert!(t.contains(" 512* "), "{t}");
        assert!(t.contains("3.25"), "{t}");
    }
}
