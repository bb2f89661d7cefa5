//! CPU utilisation over a measured interval, as perftest's `--cpu_util` reports it.
//!
//! Owns: reading the aggregate `cpu` line of /proc/stat at the start and end of a run and
//! turning the two into a percentage. Must not print or time anything else.
//!
//! Sources: perftest `get_cpu_stats` (src/perftest_parameters.c): it reads the first four
//! fields (user, nice, system, idle) of the `cpu` line; the utilisation is the busy share of
//! the ticks that passed: `100 × Δ(user+nice+system) / Δ(user+nice+system+idle)`.

/// The first four fields of /proc/stat's `cpu` line, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system.
    pub busy: u64,
    /// idle.
    pub idle: u64,
}

/// Parses the `cpu` line of /proc/stat text; `None` if it has no such line.
pub fn parse_stat(text: &str) -> Option<CpuTicks> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(4)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match f.as_slice() {
        [user, nice, system, idle] => Some(CpuTicks {
            busy: user + nice + system,
            idle: *idle,
        }),
        _ => None,
    }
}

/// The busy share of the ticks between `a` and `b`, percent; `None` if no tick passed.
pub fn utilisation(a: CpuTicks, b: CpuTicks) -> Option<f64> {
    let busy = b.busy.saturating_sub(a.busy);
    let total = busy + b.idle.saturating_sub(a.idle);
    (total > 0).then(|| 100.0 * busy as f64 / total as f64)
}

fn read() -> Option<CpuTicks> {
    parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// A measurement in progress.
pub struct Sampler(CpuTicks);

impl Sampler {
    /// Reads the counters now; `None` where /proc/stat cannot be read.
    pub fn start() -> Option<Self> {
        read().map(Self)
    }

    /// The utilisation since [`Sampler::start`].
    pub fn stop(self) -> Option<f64> {
        utilisation(self.0, read()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_cpu_line_and_computes_the_busy_share() {
        let a = parse_stat("cpu  100 0 50 850 9 9 9\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(
            a,
            CpuTicks {
                busy: 150,
                idle: 850
            }
        );
        let b = parse_stat("cpu  160 0 90 900 0\n").unwrap();
        // 100 busy ticks of 150.
        let u = utilisation(a, b).unwrap();
        assert!((u - 100.0 * 100.0 / 150.0).abs() < 1e-9, "{u}");
        assert_eq!(utilisation(a, a), None);
        assert_eq!(parse_stat("intr 5\n"), None);
    }
}
