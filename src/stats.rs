//! Benchmark statistics and the perftest-style result tables.
//!
//! Owns: turning raw timestamps into the numbers perftest prints (latency: min, max, typical,
//! average, standard deviation, 99% and 99.9% percentiles; bandwidth: peak, average, message
//! rate) and formatting them under perftest's column headers, so that a run of `bypass perf`
//! can be diffed against `ib_write_lat` / `ib_write_bw`. Must not touch devices, sockets or
//! clocks: callers hand in nanosecond timestamps.
//!
//! The arithmetic follows linux-rdma/perftest `src/perftest_parameters.c`:
//! `print_report_lat` (latency) and `print_report_bw` (bandwidth), cited at each step.

use std::fmt;

/// perftest's latency header (`RESULT_FMT_LAT` in `src/perftest_parameters.h`), byte for byte.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The labels of [`LAT_HEADER`], in order: the columns a latency row has.
pub const LAT_COLUMNS: [&str; 9] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99% percentile[usec]",
    "99.9% percentile[usec]",
];

/// perftest's bandwidth header (`RESULT_FMT`, MiB/s units), byte for byte.
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";

/// perftest's bandwidth header with `--report_gbits` (`RESULT_FMT_G`).
pub const BW_HEADER_GBITS: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/// The labels of [`BW_HEADER`], in order.
pub const BW_COLUMNS: [&str; 5] = [
    "#bytes",
    "#iterations",
    "BW peak[MiB/sec]",
    "BW average[MiB/sec]",
    "MsgRate[Mpps]",
];

/// The labels of [`BW_HEADER_GBITS`], in order.
pub const BW_COLUMNS_GBITS: [&str; 5] = [
    "#bytes",
    "#iterations",
    "BW peak[Gb/sec]",
    "BW average[Gb/sec]",
    "MsgRate[Mpps]",
];

/// perftest's latency header of a duration run (`RESULT_FMT_LAT_DUR`).
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// The labels of [`LAT_DUR_HEADER`], in order.
pub const LAT_DUR_COLUMNS: [&str; 4] = ["#bytes", "#iterations", "t_avg[usec]", "tps average"];

/// What perftest appends to a table header with `--cpu_util` (`RESULT_EXT_CPU_UTIL`).
pub const CPU_UTIL_COLUMN: &str = "    CPU_Util[%]";

/// A duration run's latency row, aligned under [`LAT_DUR_HEADER`].
pub fn lat_duration_row(bytes: u64, iterations: u64, t_avg_us: f64, tps: f64) -> String {
    align_row(
        LAT_DUR_HEADER,
        &LAT_DUR_COLUMNS,
        &[
            bytes.to_string(),
            iterations.to_string(),
            format!("{t_avg_us:.2}"),
            format!("{tps:.2}"),
        ],
    )
}

/// `row` with the CPU utilisation appended under [`CPU_UTIL_COLUMN`] of `header` + it.
pub fn with_cpu_util(header: &str, row: &str, util: Option<f64>) -> String {
    let col = header.trim_end().len() + CPU_UTIL_COLUMN.len() - "CPU_Util[%]".len();
    let pad = col.saturating_sub(row.len()).max(1);
    let v = util.map_or_else(|| "n/a".to_owned(), |u| format!("{u:.2}"));
    format!("{row}{}{v}", " ".repeat(pad))
}

/// The dashed line perftest prints around its tables (`RESULT_LINE`).
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// How many of the largest samples perftest drops before computing latency statistics
/// (`LAT_MEASURE_TAIL` in `print_report_lat`).
pub const LAT_MEASURE_TAIL: usize = 2;

/// The fewest iterations a latency report can be computed from: perftest's `MIN_ITER` (5),
/// which leaves at least two samples once the tail is dropped.
pub const MIN_LAT_ITERS: usize = 5;

/// Why a report could not be computed from the samples given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    /// Too few samples: the statistics need at least `needed`.
    #[error(
        "{what}: {got} samples are too few to report (at least {needed} are needed): run more iterations (-n)"
    )]
    TooFewSamples {
        /// Which report was being computed.
        what: &'static str,
        /// How many samples were given.
        got: usize,
        /// How many are needed.
        needed: usize,
    },
    /// The posted and completed timestamp series differ in length.
    #[error(
        "bandwidth report: {posted} post times but {completed} completion times: every posted message needs a completion time"
    )]
    MismatchedSeries {
        /// Number of post timestamps.
        posted: usize,
        /// Number of completion timestamps.
        completed: usize,
    },
}

/// One latency result row, every time in microseconds (one-way: round trip / `rtt_factor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyReport {
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations run (perftest prints the requested count, not the number of samples).
    pub iterations: u64,
    /// Smallest sample.
    pub t_min: f64,
    /// Largest sample kept (perftest drops the [`LAT_MEASURE_TAIL`] largest and prints the
    /// first dropped one, `delta[measure_cnt]`).
    pub t_max: f64,
    /// The median ("typical") of the kept samples.
    pub t_typical: f64,
    /// The mean of the kept samples.
    pub t_avg: f64,
    /// The population standard deviation of the kept samples.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

impl LatencyReport {
    /// Computes the report from per-iteration post timestamps (nanoseconds, any epoch), as
    /// perftest does for `ib_write_lat`: the samples are the differences between consecutive
    /// posts (each is one round trip), divided by `rtt_factor` (2 for SEND/WRITE ping-pong,
    /// 1 for READ/atomics). perftest `print_report_lat`, `tst == LAT` branch.
    pub fn from_post_times(
        bytes: u64,
        iterations: u64,
        posted_ns: &[u64],
        rtt_factor: u32,
    ) -> Result<Self, StatsError> {
        let deltas: Vec<u64> = posted_ns
            .windows(2)
            .map(|w| match w {
                [a, b] => b.saturating_sub(*a),
                _ => 0,
            })
            .collect();
        Self::from_round_trips(bytes, iterations, deltas, rtt_factor)
    }

    /// Computes the report from round-trip samples in nanoseconds.
    ///
    /// perftest `print_report_lat`: sort; drop the two largest; median by `get_median`
    /// (the mean of the two middle samples when the count is even); mean and standard
    /// deviation over the kept samples; percentiles at index `ceil(n × 0.99)` and
    /// `ceil(n × 0.999)` of the sorted array (n = kept count, so the index may reach the first
    /// dropped sample, as in perftest); max = `delta[n]`.
    ///
    /// One deliberate difference: perftest accumulates the variance in `int`s, truncating each
    /// squared deviation to whole microseconds (so sub-microsecond spreads print 0.00); this
    /// computes it in `f64`.
    pub fn from_round_trips(
        bytes: u64,
        iterations: u64,
        mut rtt_ns: Vec<u64>,
        rtt_factor: u32,
    ) -> Result<Self, StatsError> {
        let needed = MIN_LAT_ITERS - 1;
        if rtt_ns.len() < needed {
            return Err(StatsError::TooFewSamples {
                what: "latency report",
                got: rtt_ns.len(),
                needed,
            });
        }
        rtt_ns.sort_unstable();
        let quotient = 1000.0 * f64::from(rtt_factor.max(1));
        let us = |i: usize| rtt_ns.get(i).map_or(0.0, |&v| v as f64 / quotient);
        let kept = rtt_ns.len() - LAT_MEASURE_TAIL;
        // perftest get_median(n): `(n - 1) % 2` is true when n is even.
        let t_typical = if kept.is_multiple_of(2) {
            (us(kept / 2) + us(kept / 2 - 1)) / 2.0
        } else {
            us(kept / 2)
        };
        let t_avg = (0..kept).map(us).sum::<f64>() / kept as f64;
        let var = (0..kept).map(|i| (t_avg - us(i)).powi(2)).sum::<f64>() / kept as f64;
        let idx = |p: f64| ((kept as f64) * p).ceil() as usize;
        Ok(Self {
            bytes,
            iterations,
            t_min: us(0),
            t_max: us(kept),
            t_typical,
            t_avg,
            t_stdev: var.sqrt(),
            p99: us(idx(0.99)),
            p99_9: us(idx(0.999)),
        })
    }

    /// The values in [`LAT_COLUMNS`] order.
    fn cells(&self) -> [String; 9] {
        [
            self.bytes.to_string(),
            self.iterations.to_string(),
            format!("{:.2}", self.t_min),
            format!("{:.2}", self.t_max),
            format!("{:.2}", self.t_typical),
            format!("{:.2}", self.t_avg),
            format!("{:.2}", self.t_stdev),
            format!("{:.2}", self.p99),
            format!("{:.2}", self.p99_9),
        ]
    }
}

impl fmt::Display for LatencyReport {
    /// One row aligned under [`LAT_HEADER`]: each value starts where its label starts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&align_row(LAT_HEADER, &LAT_COLUMNS, &self.cells()))
    }
}

/// Units of a bandwidth report (perftest `report_fmt`: MBS or GBS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BwUnits {
    /// MiB per second (2^20 bytes/s), perftest's default.
    #[default]
    MibPerSec,
    /// Gigabits per second (10^9 bit/s), perftest `--report_gbits`.
    GbitPerSec,
}

impl BwUnits {
    /// Bytes per second in one unit (perftest `format_factor`).
    fn bytes_per_unit(self) -> f64 {
        match self {
            Self::MibPerSec => 1_048_576.0,
            Self::GbitPerSec => 125_000_000.0,
        }
    }

    /// The table header for these units.
    pub fn header(self) -> &'static str {
        match self {
            Self::MibPerSec => BW_HEADER,
            Self::GbitPerSec => BW_HEADER_GBITS,
        }
    }

    /// The column labels for these units.
    pub fn columns(self) -> &'static [&'static str; 5] {
        match self {
            Self::MibPerSec => &BW_COLUMNS,
            Self::GbitPerSec => &BW_COLUMNS_GBITS,
        }
    }
}

/// One bandwidth result row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub bytes: u64,
    /// Messages sent.
    pub iterations: u64,
    /// Peak bandwidth over the best window of the run, in `units`.
    pub bw_peak: f64,
    /// Average bandwidth over the whole run, in `units`.
    pub bw_avg: f64,
    /// Average message rate in millions of messages per second.
    pub msg_rate_mpps: f64,
    /// The units of `bw_peak` and `bw_avg`.
    pub units: BwUnits,
}

impl BwReport {
    /// Computes the report from per-message post and completion timestamps (nanoseconds).
    ///
    /// `completed_ns[j]` is when message `j`'s completion was seen; with completion
    /// moderation (`cq_mod` > 1) only every `cq_mod`-th message (and the last) produces a CQE,
    /// so only those entries are read, as in perftest. perftest `print_report_bw`:
    /// average = `size × iters / (tcompleted[last] − tposted[0])`; peak = `size` / the minimum
    /// over windows of `(tcompleted[j] − tposted[i]) / (j − i + 1)`, for post-list starts `i`
    /// and signalled `j ≥ i`.
    pub fn from_times(
        bytes: u64,
        posted_ns: &[u64],
        completed_ns: &[u64],
        cq_mod: usize,
        post_list: usize,
        units: BwUnits,
    ) -> Result<Self, StatsError> {
        if posted_ns.len() != completed_ns.len() {
            return Err(StatsError::MismatchedSeries {
                posted: posted_ns.len(),
                completed: completed_ns.len(),
            });
        }
        let n = posted_ns.len();
        let (Some(&first), Some(&last)) = (posted_ns.first(), completed_ns.last()) else {
            return Err(StatsError::TooFewSamples {
                what: "bandwidth report",
                got: 0,
                needed: 1,
            });
        };
        let cq_mod = cq_mod.max(1);
        let post_list = post_list.max(1);
        let elapsed_ns = last.saturating_sub(first).max(1) as f64;
        let mut best_ns = elapsed_ns;
        let at = |s: &[u64], k: usize| s.get(k).copied().unwrap_or(0);
        for i in (0..n).step_by(post_list) {
            // perftest: j from ROUND_UP(i + 1, cq_mod) - 1 in steps of cq_mod, then the last.
            let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            while j < n {
                let t = at(completed_ns, j).saturating_sub(at(posted_ns, i)) as f64
                    / (j - i + 1) as f64;
                best_ns = best_ns.min(t);
                j += cq_mod;
            }
            if !n.is_multiple_of(cq_mod) {
                let j = n - 1;
                let t = at(completed_ns, j).saturating_sub(at(posted_ns, i)) as f64
                    / (j - i + 1) as f64;
                best_ns = best_ns.min(t);
            }
        }
        let unit = units.bytes_per_unit();
        let secs = elapsed_ns / 1e9;
        Ok(Self {
            bytes,
            iterations: n as u64,
            bw_peak: bytes as f64 / (best_ns.max(1e-3) / 1e9) / unit,
            bw_avg: bytes as f64 * n as f64 / secs / unit,
            msg_rate_mpps: n as f64 / secs / 1e6,
            units,
        })
    }

    /// The values in column order.
    fn cells(&self) -> [String; 5] {
        [
            self.bytes.to_string(),
            self.iterations.to_string(),
            format!("{:.2}", self.bw_peak),
            format!("{:.2}", self.bw_avg),
            format!("{:.6}", self.msg_rate_mpps),
        ]
    }
}

impl fmt::Display for BwReport {
    /// One row aligned under the header of its units.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&align_row(
            self.units.header(),
            self.units.columns(),
            &self.cells(),
        ))
    }
}

/// Lays `cells` out so that each starts in the column where its label starts in `header`
/// (at least one space apart), the way perftest's printf widths line up under its headers.
pub fn align_row(header: &str, labels: &[&str], cells: &[String]) -> String {
    let mut row = String::with_capacity(header.len() + 16);
    let mut search_from = 0;
    for (label, cell) in labels.iter().zip(cells) {
        let start = header
            .get(search_from..)
            .and_then(|rest| rest.find(label))
            .map_or(row.len() + 1, |off| search_from + off);
        search_from = start + label.len();
        let pad = start
            .saturating_sub(row.len())
            .max(usize::from(!row.is_empty()));
        row.extend(std::iter::repeat_n(' ', pad));
        row.push_str(cell);
    }
    row
}

/// The per-round ratios of an interleaved comparison as one line, `digits` decimals each
/// (`perf compare`, `perf compare-udp`).
pub fn ratio_list(ratios: &[f64], digits: usize) -> String {
    ratios
        .iter()
        .map(|r| format!("{r:.digits$}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The median of `samples` (sorted copy; the mean of the two middle values when even).
/// Returns `None` for an empty slice.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => v.get(n / 2).copied(),
        _ => Some((v.get(n / 2 - 1)? + v.get(n / 2)?) / 2.0),
    }
}

/// A table parsed back from text: the header line's position and every row's cells.
/// Used by the unit tests (the CLI tests parse the output on their own).
#[cfg(test)]
pub fn parse_rows(text: &str, header: &str, columns: usize) -> Option<Vec<Vec<String>>> {
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim_end() != header.trim_end());
    lines.next()?;
    let rows: Vec<Vec<String>> = lines
        .take_while(|l| !l.trim().is_empty() && !l.starts_with('-'))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    rows.iter().all(|r| r.len() == columns).then_some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approx(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn latency_drops_the_two_largest_and_halves_round_trips() {
        // 12 round trips of 2..=10 µs plus three outliers; rtt_factor 2 halves them.
        let mut rtt: Vec<u64> = (1..=10).map(|k| k * 2000).collect();
        rtt.extend([100_000, 200_000]);
        let r = LatencyReport::from_round_trips(8, 13, rtt, 2).unwrap();
        assert!(approx(r.t_min, 1.0), "{r:?}");
        // kept = 10 samples 1..=10 µs; t_max is delta[10] = first dropped = 50 µs.
        assert!(approx(r.t_max, 50.0), "{r:?}");
        assert!(approx(r.t_typical, 5.5), "{r:?}");
        assert!(approx(r.t_avg, 5.5), "{r:?}");
        assert!(approx(r.t_stdev, 8.25f64.sqrt()), "{r:?}");
        // ceil(10 * 0.99) = 10 → the first dropped sample, as perftest indexes it.
        assert!(approx(r.p99, 50.0), "{r:?}");
        assert!(approx(r.p99_9, 50.0), "{r:?}");
        assert_eq!((r.bytes, r.iterations), (8, 13));
    }

    #[test]
    fn latency_median_of_odd_count_is_the_middle_sample() {
        let rtt = vec![3000, 1000, 2000, 9000, 9000];
        let r = LatencyReport::from_round_trips(2, 6, rtt, 1).unwrap();
        assert!(approx(r.t_typical, 2.0), "{r:?}");
        assert!(approx(r.t_min, 1.0), "{r:?}");
    }

    #[test]
    fn latency_percentiles_index_like_perftest_on_large_runs() {
        let rtt: Vec<u64> = (0..1002).map(|k| k * 1000).collect();
        let r = LatencyReport::from_round_trips(2, 1003, rtt, 1).unwrap();
        // kept = 1000: p99 = delta[990], p99.9 = delta[999], max = delta[1000].
        assert!(approx(r.p99, 990.0), "{r:?}");
        assert!(approx(r.p99_9, 999.0), "{r:?}");
        assert!(approx(r.t_max, 1000.0), "{r:?}");
    }

    #[test]
    fn latency_from_post_times_uses_consecutive_differences() {
        let posted = [0, 4000, 8000, 12000, 16000, 20000];
        let r = LatencyReport::from_post_times(8, 6, &posted, 2).unwrap();
        assert!(approx(r.t_typical, 2.0), "{r:?}");
        assert!(approx(r.t_stdev, 0.0), "{r:?}");
    }

    #[test]
    fn latency_needs_enough_samples_and_says_so() {
        let e = LatencyReport::from_round_trips(8, 3, vec![1, 2], 2).unwrap_err();
        assert!(e.to_string().contains("run more iterations (-n)"), "{e}");
    }

    #[test]
    fn latency_row_lines_up_under_the_header_and_parses_back() {
        let r = LatencyReport::from_round_trips(8, 100, (1..100).map(|k| k * 100).collect(), 2)
            .unwrap();
        let row = r.to_string();
        for label in ["t_min[usec]", "t_typical[usec]", "99.9% percentile[usec]"] {
            let col = LAT_HEADER.find(label).unwrap();
            assert_eq!(row.as_bytes()[col - 1], b' ', "{row}");
            assert_ne!(row.as_bytes()[col], b' ', "{label} in {row}");
        }
        let text = format!("{LAT_HEADER}\n{row}\n");
        let rows = parse_rows(&text, LAT_HEADER, LAT_COLUMNS.len()).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][0], "8");
        assert_eq!(rows[0][1], "100");
        assert_eq!(rows[0][4], format!("{:.2}", r.t_typical));
    }

    #[test]
    fn bandwidth_average_and_rate_over_the_whole_run() {
        // 4 messages of 1 MiB, posted at 0 and completing every 1 ms: 4 MiB in 4 ms.
        let posted = [0, 0, 0, 0];
        let completed = [1_000_000, 2_000_000, 3_000_000, 4_000_000];
        let r =
            BwReport::from_times(1 << 20, &posted, &completed, 1, 1, BwUnits::MibPerSec).unwrap();
        assert!(approx(r.bw_avg, 1000.0), "{r:?}");
        assert!(approx(r.msg_rate_mpps, 0.001), "{r:?}");
        // Best window: all 4 in 4 ms, or the first in 1 ms: 1 ms per message either way.
        assert!(approx(r.bw_peak, 1000.0), "{r:?}");
    }

    #[test]
    fn bandwidth_peak_finds_the_fastest_window() {
        // Slow start, then three messages completing 0.5 ms apart.
        let posted = [0, 0, 5_000_000, 5_000_000];
        let completed = [5_000_000, 5_000_000, 5_500_000, 6_000_000];
        let r = BwReport::from_times(1000, &posted, &completed, 1, 1, BwUnits::MibPerSec).unwrap();
        // Window i=2..j=3: 1 ms / 2 messages = 0.5 ms each.
        let expect = 1000.0 / 0.0005 / 1_048_576.0;
        assert!(approx(r.bw_peak, expect), "{r:?}");
        assert!(r.bw_peak > r.bw_avg);
    }

    #[test]
    fn bandwidth_with_moderation_reads_only_signalled_completions() {
        // cq_mod 2: only j = 1 and j = 3 are signalled; entries 0 and 2 are never read.
        let posted = [0, 0, 0, 0];
        let completed = [0, 2_000_000, 0, 4_000_000];
        let r =
            BwReport::from_times(1 << 20, &posted, &completed, 2, 1, BwUnits::GbitPerSec).unwrap();
        assert!(
            approx(r.bw_peak, (1u64 << 20) as f64 / 0.001 / 125e6),
            "{r:?}"
        );
    }

    #[test]
    fn bandwidth_rejects_mismatched_series() {
        let e = BwReport::from_times(8, &[0, 1], &[1], 1, 1, BwUnits::MibPerSec).unwrap_err();
        assert!(matches!(e, StatsError::MismatchedSeries { .. }));
    }

    #[test]
    fn bandwidth_row_parses_back() {
        let r =
            BwReport::from_times(65536, &[0; 3], &[10, 20, 30], 1, 1, BwUnits::MibPerSec).unwrap();
        let text = format!("{BW_HEADER}\n{r}\n");
        let rows = parse_rows(&text, BW_HEADER, 5).unwrap();
        assert_eq!(rows[0][0], "65536");
        assert_eq!(rows[0][1], "3");
    }

    #[test]
    fn median_handles_even_odd_and_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
