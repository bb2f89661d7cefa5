//! What a `bypass sim` experiment records over time, and the figures drawn from it.
//!
//! Owns: [`Series`] (one row per sample: virtual time, each flow's rate at the receiver
//! over the interval, the bottleneck queue, running totals of pauses, drops and CNPs), its CSV form,
//! its two charts (rate per flow over time, queue over time) and the summary statistics the
//! reports and tests read: [`jain`] (Jain's fairness index), [`percentile`]. Must not: run
//! the world or read devices (`incast` feeds it numbers).
//!
//! Sources: R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and
//! Discrimination for Resource Allocation in Shared Computer Systems" (DEC-TR-301, 1984):
//! J = (Σx)² / (n·Σx²), 1 for equal shares, 1/n when one flow takes everything.

use std::fmt::Write as _;
use std::path::Path;

use crate::chart::{Chart, ChartError, Series as Curve, TickFormat, XScale, write_svg};

/// One sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Virtual time, ns.
    pub t_ns: u64,
    /// Each flow's rate at its receiver over the interval that ended now (IP bytes delivered,
    /// retransmissions included), Gb/s.
    pub flow_gbps: Vec<f64>,
    /// The bottleneck egress queue, bytes.
    pub queue_bytes: u64,
    /// PFC pauses sent so far (XOFF).
    pub pauses: u64,
    /// Packets dropped so far (every cause).
    pub drops: u64,
    /// CNPs sent so far.
    pub cnps: u64,
}

/// Samples at a fixed interval, and the flows' names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// The flows' names, in `Sample::flow_gbps` order.
    pub flows: Vec<String>,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
}

impl Series {
    /// The CSV form: a header line, then one line per sample.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("t_us");
        for f in &self.flows {
            let _ = write!(s, ",{f}_gbps");
        }
        s.push_str(",queue_bytes,pauses,drops,cnps\n");
        for x in &self.samples {
            let _ = write!(s, "{:.3}", x.t_ns as f64 / 1e3);
            for r in &x.flow_gbps {
                let _ = write!(s, ",{r:.4}");
            }
            let _ = writeln!(s, ",{},{},{},{}", x.queue_bytes, x.pauses, x.drops, x.cnps);
        }
        s
    }

    /// The samples from `from_ns` on.
    pub fn after(&self, from_ns: u64) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(move |s| s.t_ns >= from_ns)
    }

    /// Each flow's mean rate over the samples from `from_ns` on, Gb/s.
    pub fn mean_rates(&self, from_ns: u64) -> Vec<f64> {
        let mut sum = vec![0.0; self.flows.len()];
        let mut n = 0usize;
        for s in self.after(from_ns) {
            for (acc, r) in sum.iter_mut().zip(&s.flow_gbps) {
                *acc += r;
            }
            n += 1;
        }
        sum.iter().map(|x| x / n.max(1) as f64).collect()
    }

    /// The largest queue seen from `from_ns` on, bytes.
    pub fn max_queue(&self, from_ns: u64) -> u64 {
        self.after(from_ns)
            .map(|s| s.queue_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The chart of each flow's delivered rate over time.
    pub fn rate_chart(&self, title: &str) -> Chart {
        let series = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, name)| Curve {
                name: name.clone(),
                points: self
                    .samples
                    .iter()
                    .map(|s| {
                        (
                            s.t_ns as f64 / 1e3,
                            s.flow_gbps.get(i).copied().unwrap_or(0.0),
                        )
                    })
                    .collect(),
                knee: None,
            })
            .collect();
        Chart {
            title: title.to_owned(),
            x_label: "virtual time (µs)".into(),
            y_label: "delivered (Gb/s)".into(),
            x_scale: XScale::Linear,
            x_ticks: TickFormat::Plain,
            series,
        }
    }

    /// The chart of the bottleneck queue over time.
    pub fn queue_chart(&self, title: &str) -> Chart {
        Chart {
            title: title.to_owned(),
            x_label: "virtual time (µs)".into(),
            y_label: "queue (KiB)".into(),
            x_scale: XScale::Linear,
            x_ticks: TickFormat::Plain,
            series: vec![Curve {
                name: "bottleneck egress queue".into(),
                points: self
                    .samples
                    .iter()
                    .map(|s| (s.t_ns as f64 / 1e3, s.queue_bytes as f64 / 1024.0))
                    .collect(),
                knee: None,
            }],
        }
    }

    /// Writes `PREFIX.csv`, `PREFIX-rate.svg` and `PREFIX-queue.svg`; returns their paths.
    pub fn write_files(&self, prefix: &Path, title: &str) -> Result<Vec<String>, ChartError> {
        let with = |suffix: &str| {
            let mut p = prefix.as_os_str().to_owned();
            p.push(suffix);
            std::path::PathBuf::from(p)
        };
        let csv = with(".csv");
        std::fs::write(&csv, self.to_csv()).map_err(|source| ChartError::Io {
            path: csv.clone(),
            source,
        })?;
        let rate = with("-rate.svg");
        write_svg(
            &self.rate_chart(&format!("{title}: rate per flow at the receiver")),
            &rate,
        )?;
        let queue = with("-queue.svg");
        write_svg(
            &self.queue_chart(&format!("{title}: bottleneck queue")),
            &queue,
        )?;
        Ok([csv, rate, queue]
            .iter()
            .map(|p| p.display().to_string())
            .collect())
    }
}

/// Jain's fairness index of `xs` (1 = equal shares; `None` for no flow or no traffic).
pub fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    (!xs.is_empty() && sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sq))
}

/// The `p`-th percentile (0..=100, nearest rank) of `xs`, or `None` if empty.
pub fn percentile(xs: &[u64], p: f64) -> Option<u64> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        return None;
    }
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    v.get(rank.clamp(1, n) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_hog() {
        assert_eq!(jain(&[3.0, 3.0, 3.0, 3.0]), Some(1.0));
        let j = jain(&[8.0, 0.0, 0.0, 0.0]).unwrap();
        assert!((j - 0.25).abs() < 1e-12, "{j}");
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn percentile_takes_the_nearest_rank() {
        let xs = [5, 1, 4, 2, 3];
        assert_eq!(percentile(&xs, 50.0), Some(3));
        assert_eq!(percentile(&xs, 100.0), Some(5));
        assert_eq!(percentile(&xs, 0.0), Some(1));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn csv_has_a_column_per_flow_and_a_row_per_sample() {
        let s = Series {
            flows: vec!["f0".into(), "f1".into()],
            samples: vec![Sample {
                t_ns: 1500,
                flow_gbps: vec![1.0, 2.5],
                queue_bytes: 4096,
                pauses: 1,
                drops: 0,
                cnps: 7,
            }],
        };
        assert_eq!(
            s.to_csv(),
            "t_us,f0_gbps,f1_gbps,queue_bytes,pauses,drops,cnps\n1.500,1.0000,2.5000,4096,1,0,7\n"
        );
        assert_eq!(s.mean_rates(0), vec![1.0, 2.5]);
        assert_eq!(s.max_queue(2000), 0);
    }
}
