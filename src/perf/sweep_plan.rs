//! The points of a tuning sweep: which (depth, size, QPs, spin/event) combinations to
//! measure, one knob at a time around a base point or as a full grid.
//!
//! Owns: [`Grid`], [`Point`], [`Knob`], [`Mode`] and [`plan`]. Must not measure or print
//! (`sweep` does) and must not allocate from user numbers without a bound ([`MAX_POINTS`]).
//!
//! Follows the seed's §5.2 tuning method: vary one knob (queue depth, message size, QP
//! count) with the others held at a base point, and §2.4: measure spinning polls against
//! blocking ones (completion events).

use std::fmt;

/// The most points one sweep may plan (a full grid of the default lists is 7 × 7 × 5 × 2).
pub const MAX_POINTS: usize = 4096;

/// Which knob a row of the sweep varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Knob {
    /// Queue depth (WRs outstanding per QP) at the base size and QP count.
    Depth,
    /// Message size at the base depth and QP count.
    Size,
    /// QP count at the base depth and size.
    Qps,
    /// A point of the full grid (`--full-grid`): every knob varies.
    Grid,
}

impl Knob {
    /// The three knobs that get a chart.
    pub const CHARTED: [Knob; 3] = [Knob::Depth, Knob::Size, Knob::Qps];

    /// The name used in the CSV, the table and the chart file names.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Depth => "depth",
            Knob::Size => "size",
            Knob::Qps => "qps",
            Knob::Grid => "grid",
        }
    }
}

/// How completions are awaited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Busy-poll the CQ.
    Spin,
    /// Block on a completion channel (perftest `-e`).
    Event,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Spin => "spin",
            Mode::Event => "event",
        })
    }
}

/// One measurement's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Point {
    /// WRs outstanding per QP (asked for; the run may cap it to fit memory).
    pub depth: u32,
    /// Message size in bytes.
    pub size: u64,
    /// QPs streaming at once.
    pub qps: u32,
    /// Spin or event.
    pub mode: Mode,
}

/// The values of each knob, the base point and the completion modes.
#[derive(Clone, Debug)]
pub struct Grid {
    /// Depths of the depth sweep.
    pub depths: Vec<u32>,
    /// Sizes of the size sweep.
    pub sizes: Vec<u64>,
    /// QP counts of the QP sweep.
    pub qps: Vec<u32>,
    /// Spin, event or both.
    pub modes: Vec<Mode>,
    /// The depth held while another knob varies.
    pub base_depth: u32,
    /// The size held while another knob varies.
    pub base_size: u64,
    /// The QP count held while another knob varies.
    pub base_qps: u32,
}

/// Why a sweep could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A list was given empty.
    #[error("--{0} is empty: give at least one value (e.g. --{0} 1,4,16)")]
    Empty(&'static str),
    /// Too many points.
    #[error(
        "the sweep has {points} points, more than {MAX_POINTS}: shorten --depths/--sizes/--qps, or drop --full-grid to vary one knob at a time"
    )]
    TooMany {
        /// Points asked for (saturating).
        points: usize,
    },
}

impl Grid {
    /// The base point a full grid's charts are sliced at: each base value if its list holds
    /// it, else the list's first value (so every chart slice has points).
    pub fn grid_base(&self) -> (u32, u64, u32) {
        fn pick<T: Copy + PartialEq>(list: &[T], base: T) -> T {
            if list.contains(&base) {
                base
            } else {
                list.first().copied().unwrap_or(base)
            }
        }
        (
            pick(&self.depths, self.base_depth),
            pick(&self.sizes, self.base_size),
            pick(&self.qps, self.base_qps),
        )
    }
}

/// The rows of a sweep, each a knob and a point, in run order (mode outermost, then knob).
/// A point may appear under several knobs (the base point does); `sweep` measures it once.
pub fn plan(grid: &Grid, full_grid: bool) -> Result<Vec<(Knob, Point)>, PlanError> {
    for (name, empty) in [
        ("depths", grid.depths.is_empty()),
        ("sizes", grid.sizes.is_empty()),
        ("qps", grid.qps.is_empty()),
        ("events", grid.modes.is_empty()),
    ] {
        if empty {
            return Err(PlanError::Empty(name));
        }
    }
    let (d, s, q, m) = (
        grid.depths.len(),
        grid.sizes.len(),
        grid.qps.len(),
        grid.modes.len(),
    );
    let points = if full_grid {
        d.saturating_mul(s).saturating_mul(q).saturating_mul(m)
    } else {
        d.saturating_add(s).saturating_add(q).saturating_mul(m)
    };
    if points > MAX_POINTS {
        return Err(PlanError::TooMany { points });
    }
    let mut rows = Vec::with_capacity(points);
    for &mode in &grid.modes {
        if full_grid {
            for &depth in &grid.depths {
                for &size in &grid.sizes {
                    for &qps in &grid.qps {
                        let p = Point {
                            depth,
                            size,
                            qps,
                            mode,
                        };
                        rows.push((Knob::Grid, p));
                    }
                }
            }
            continue;
        }
        let base = Point {
            depth: grid.base_depth,
            size: grid.base_size,
            qps: grid.base_qps,
            mode,
        };
        rows.extend(
            grid.depths
                .iter()
                .map(|&depth| (Knob::Depth, Point { depth, ..base })),
        );
        rows.extend(
            grid.sizes
                .iter()
                .map(|&size| (Knob::Size, Point { size, ..base })),
        );
        rows.extend(
            grid.qps
                .iter()
                .map(|&qps| (Knob::Qps, Point { qps, ..base })),
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        Grid {
            depths: vec![1, 16, 256],
            sizes: vec![64, 4096],
            qps: vec![1, 4],
            modes: vec![Mode::Spin, Mode::Event],
            base_depth: 256,
            base_size: 4096,
            base_qps: 1,
        }
    }

    #[test]
    fn one_knob_at_a_time_holds_the_others_at_the_base() {
        let rows = plan(&grid(), false).unwrap();
        assert_eq!(rows.len(), (3 + 2 + 2) * 2);
        let spin: Vec<_> = rows.iter().filter(|(_, p)| p.mode == Mode::Spin).collect();
        assert_eq!(spin.len(), 7);
        for (knob, p) in spin {
            match knob {
                Knob::Depth => assert_eq!((p.size, p.qps), (4096, 1)),
                Knob::Size => assert_eq!((p.depth, p.qps), (256, 1)),
                Knob::Qps => assert_eq!((p.depth, p.size), (256, 4096)),
                Knob::Grid => panic!("no grid rows without --full-grid"),
            }
        }
        let depths: Vec<u32> = rows
            .iter()
            .filter(|(k, p)| *k == Knob::Depth && p.mode == Mode::Event)
            .map(|(_, p)| p.depth)
            .collect();
        assert_eq!(depths, [1, 16, 256]);
    }

    #[test]
    fn a_full_grid_has_every_combination_once() {
        let rows = plan(&grid(), true).unwrap();
        assert_eq!(rows.len(), 3 * 2 * 2 * 2);
        let unique: std::collections::HashSet<_> = rows.iter().map(|(_, p)| *p).collect();
        assert_eq!(unique.len(), rows.len());
        assert!(rows.iter().all(|(k, _)| *k == Knob::Grid));
    }

    #[test]
    fn empty_lists_and_huge_grids_are_refused() {
        let mut g = grid();
        g.sizes.clear();
        let e = plan(&g, false).unwrap_err();
        assert!(e.to_string().contains("--sizes is empty"), "{e}");
        let mut g = grid();
        g.depths = (1..=100).collect();
        g.sizes = (1..=100).collect();
        assert!(matches!(
            plan(&g, true),
            Err(PlanError::TooMany { points: 40_000 })
        ));
        assert!(plan(&g, false).is_ok());
    }

    #[test]
    fn the_grid_base_falls_back_to_each_lists_first_value() {
        let mut g = grid();
        assert_eq!(g.grid_base(), (256, 4096, 1));
        g.base_depth = 64;
        g.base_qps = 8;
        assert_eq!(g.grid_base(), (1, 4096, 1));
    }
}
