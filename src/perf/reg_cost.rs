//! `bypass perf reg-cost`: what registering memory costs, by size, and what a pool lease
//! costs, on one NIC (a simulated one by default).
//!
//! Owns: the options, the measurement loops and the two tables. Must not: touch the device
//! outside the verbs API (`Pd::register_owned`, `Pd::register`, `Pd::create_pool`), or
//! compute anything but medians and ranges of its own samples.
//!
//! Each round registers and then deregisters every size once for each kind of memory of the
//! `--source`, the (size, memory) pairs in an order shuffled per round (seeded by `--seed`),
//! so slow drift of a noisy machine, and the slowness of whatever follows a large
//! deregistration, spread over every pair rather than landing on one; register and
//! deregister are timed apart. `host` memory is of two kinds: `owned`, a `Vec<u8>` the
//! application filled before (so no page is faulted in under the clock) registered with
//! `Pd::register_owned` (`ibv_reg_mr`: pin, then CREATE_MKEY with the page list) and given
//! back by `OwnedMr::deregister`; and `driver`, `Pd::register`, where the driver allocates
//! the memory too (mmap, NUMA policy, mlock faulting zeroed pages in, map, CREATE_MKEY) and
//! drops it. `memfd` is `Pd::register_memfd` of a filled, sealed memfd (its pages mapped
//! shared and pinned); `dmabuf` is `Pd::register_dmabuf` of a udmabuf over such a memfd
//! (`/dev/udmabuf`, which the QEMU guest has). The memory is made once per size and kept
//! (`reg_sources.rs`): making it is never timed. The lease row is one 4 KiB lease taken from
//! a `MemoryPool` and dropped, in ns per pair, over `--lease-ops` pairs a round.
//! Sources: perftest has no registration benchmark; the sizes follow rdma-core's
//! `tests/test_mr.py` ranges up to 1 GiB.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_driver::dma::MemlockState;
use bypass_testbed::{SimContext, SimFabric};
use bypass_verbs::{Access, Context, Pd, VerbsError};
use clap::{Args, ValueEnum};

use super::PerfError;
use super::pin::{self, CpuOpts};
use super::reg_sources::{self, Held, SourceError, UDMABUF};
use crate::args::{DeviceSpec, parse_size};
use crate::stats::RESULT_LINE;

/// The sizes measured, up to `--max`.
const SIZES: [u64; 6] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30];
/// The lease measured (one page).
const LEASE: usize = 4096;
/// Chunks in the lease pool (more than one, so a lease searches a real bitmap).
const POOL_CHUNKS: usize = 64;
/// The IOVA a dma-buf registration is known by (any page-aligned address does).
const DMABUF_IOVA: u64 = 1 << 32;

/// Where the registered memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// Host memory: a Vec the application owns, and memory the driver allocates.
    Host,
    /// A filled, sealed memfd, through Pd::register_memfd.
    Memfd,
    /// A udmabuf over such a memfd, through Pd::register_dmabuf (needs /dev/udmabuf).
    Dmabuf,
}

impl Source {
    /// The option's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Memfd => "memfd",
            Self::Dmabuf => "dmabuf",
        }
    }
}

/// Options of `bypass perf reg-cost`.
#[derive(Args, Debug)]
pub struct RegCostOpts {
    /// The device: `sim` (one simulated NIC on a stepped fabric), a NIC bound to vfio-pci
    /// (its PCI address), or `udp:ADDR` (one simulated NIC on a UDP socket).
    #[arg(short = 'd', long, default_value = "sim")]
    device: DeviceSpec,
    /// Largest size measured (K/M/G suffixes): the sizes are 4K, 64K, 1M, 16M, 256M and 1G
    /// up to this. Each needs that much lockable memory (RLIMIT_MEMLOCK).
    #[arg(long, value_parser = parse_size, default_value = "1G")]
    max: u64,
    /// Rounds (medians and ranges are over them).
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Lease + drop pairs timed per round.
    #[arg(long = "lease-ops", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    lease_ops: u64,
    /// The memory registered.
    #[arg(long, value_enum, default_value = "host")]
    source: Source,
    /// Seed of the simulated fabric and of each round's order.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    seed: u64,
    #[command(flatten)]
    cpu: CpuOpts,
}

/// Why the benchmark cannot run as asked.
#[derive(Debug, thiserror::Error)]
pub enum RegCostError {
    /// `--max` is below the smallest size.
    #[error("--max {max}: the smallest size measured is 4096 bytes; give --max 4K or more")]
    MaxTooSmall {
        /// The value given.
        max: u64,
    },
    /// The largest size cannot be locked.
    #[error(
        "--max {max}: registering {max} bytes pins them, and this process may not lock that much: {source}; or lower --max (e.g. --max 16M)"
    )]
    Memlock {
        /// The largest size.
        max: u64,
        /// The limit, the numbers and how to raise it.
        #[source]
        source: bypass_driver::backend::BackendError,
    },
    /// A udmabuf is needed and there is no `/dev/udmabuf`.
    #[error(
        "--source dmabuf: {path} does not exist, so no dma-buf can be made here; load the udmabuf module (`modprobe udmabuf`, CONFIG_UDMABUF) or run in the QEMU guest, which has it"
    )]
    NoUdmabuf {
        /// The device node.
        path: &'static str,
    },
}

/// One kind of memory a source registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Memory {
    /// A filled `Vec<u8>` through `Pd::register_owned`.
    Owned,
    /// `Pd::register`: allocated by the driver.
    Driver,
    /// A filled memfd through `Pd::register_memfd`.
    Memfd,
    /// A udmabuf through `Pd::register_dmabuf`.
    DmaBuf,
}

impl Memory {
    fn name(self) -> &'static str {
        match self {
            Self::Owned => "owned",
            Self::Driver => "driver",
            Self::Memfd => "memfd",
            Self::DmaBuf => "dmabuf",
        }
    }
}

/// The kinds of memory `source` registers, or why it cannot.
fn memories(source: Source, udmabuf: &Path) -> Result<Vec<Memory>, RegCostError> {
    match source {
        Source::Host => Ok(vec![Memory::Owned, Memory::Driver]),
        Source::Memfd => Ok(vec![Memory::Memfd]),
        Source::Dmabuf if !udmabuf.exists() => Err(RegCostError::NoUdmabuf { path: UDMABUF }),
        Source::Dmabuf => Ok(vec![Memory::DmaBuf]),
    }
}

/// What `source`'s rows register, for the header.
fn describe(source: Source) -> &'static str {
    match source {
        Source::Host => {
            "owned: Pd::register_owned of a filled Vec<u8>; driver: Pd::register, which also allocates and pins"
        }
        Source::Memfd => "Pd::register_memfd of a filled, shrink-sealed memfd",
        Source::Dmabuf => "Pd::register_dmabuf of a udmabuf over a filled memfd",
    }
}

/// The sizes up to `max`.
fn sizes(max: u64) -> Result<Vec<u64>, RegCostError> {
    let v: Vec<u64> = SIZES.iter().copied().filter(|&s| s <= max).collect();
    if v.is_empty() {
        return Err(RegCostError::MaxTooSmall { max });
    }
    Ok(v)
}

/// Whether `largest` bytes may be pinned (one registration is alive at a time).
fn check_memlock(state: &MemlockState, largest: u64) -> Result<(), RegCostError> {
    state
        .check(largest)
        .map_err(|source| RegCostError::Memlock {
            max: largest,
            source,
        })
}

/// Puts `v` in a new order (Fisher–Yates over xorshift64*, seeded by `state`, which it
/// advances): every round measures the (size, memory) pairs in its own order, so no pair
/// always follows the same one (a large deregistration slows the registration after it).
fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let j = (state.wrapping_mul(0x2545_f491_4f6c_dd1d) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Median, min and max (the median of an even count is the upper middle one).
fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    (at(v.len() / 2), at(0), at(v.len().saturating_sub(1)))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The access every registration asks for: what a buffer a peer reads and writes needs.
fn access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
}

/// The memory `memory` registers, made now (filled; never timed).
fn make(memory: Memory, len: usize) -> Result<Option<Held>, SourceError> {
    Ok(match memory {
        Memory::Owned => Some(Held::Vec(vec![1u8; len])),
        Memory::Driver => None,
        Memory::Memfd => Some(Held::Memfd(reg_sources::filled_memfd(len)?)),
        Memory::DmaBuf => Some(Held::DmaBuf(reg_sources::udmabuf(len)?)),
    })
}

/// Times `register`, then `deregister` of what it returned.
fn timed<M>(
    register: impl FnOnce() -> Result<M, VerbsError>,
    deregister: impl FnOnce(M) -> Result<(), VerbsError>,
) -> Result<Result<(Duration, Duration), String>, PerfError> {
    let t0 = Instant::now();
    let mr = match register() {
        Ok(mr) => mr,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let t1 = Instant::now();
    deregister(mr)?;
    Ok(Ok((t1 - t0, t1.elapsed())))
}

/// One register and one deregister of `size` bytes of `memory`: the two times, or why it
/// could not be made or registered (the size is then reported as not registered, not the
/// run failed). `held` keeps the memory between rounds, made on first use.
///
/// Errors: a deregistration that fails (the memory may still be mapped: the run stops).
fn once(
    pd: &Pd,
    memory: Memory,
    size: u64,
    held: &mut Option<Held>,
) -> Result<Result<(Duration, Duration), String>, PerfError> {
    let len = usize::try_from(size).map_err(|_| PerfError::TooLarge { size })?;
    if held.is_none() {
        match make(memory, len) {
            Ok(h) => *held = h,
            Err(e) => return Ok(Err(e.to_string())),
        }
    }
    match held.take() {
        Some(Held::Vec(buf)) => {
            let mut back = None;
            let r = timed(
                || pd.register_owned(buf, access()),
                |mr| {
                    back = Some(mr.deregister().map_err(|e| e.into_error())?);
                    Ok(())
                },
            );
            *held = back.map(Held::Vec);
            r
        }
        Some(Held::Memfd(fd)) => {
            let r = timed(
                || pd.register_memfd(fd.clone(), 0, len, None, access()),
                |mr| mr.deregister(),
            );
            *held = Some(Held::Memfd(fd));
            r
        }
        Some(Held::DmaBuf(src)) => {
            let r = timed(
                || pd.register_dmabuf(&src, 0, len, DMABUF_IOVA, access()),
                |mr| mr.deregister(),
            );
            *held = Some(Held::DmaBuf(src));
            r
        }
        None => timed(
            || pd.register(len, access()),
            |mr| {
                drop(black_box(mr));
                Ok(())
            },
        ),
    }
}

/// What one (memory, size) cell gathered: times per round, or why it could not register.
#[derive(Debug, Clone, Default)]
struct Cell {
    reg: Vec<f64>,
    dereg: Vec<f64>,
    failed: Option<String>,
}

/// Opens the one device the benchmark registers on.
fn open(o: &RegCostOpts) -> Result<(Arc<Context>, Option<SimFabric>), PerfError> {
    match &o.device {
        DeviceSpec::Sim => {
            let fabric = SimFabric::stepped(o.seed);
            let ctx = Context::open_sim(&fabric, 1)?;
            Ok((ctx, Some(fabric)))
        }
        d => {
            let dev = crate::device::open_net(d, o.seed, "perf reg-cost", None)?;
            Ok((dev.ctx, None))
        }
    }
}

/// Runs the benchmark and prints its tables.
pub fn run(o: &RegCostOpts) -> Result<(), PerfError> {
    let sizes = sizes(o.max)?;
    let memories = memories(o.source, Path::new(UDMABUF))?;
    let largest = sizes.last().copied().unwrap_or(0);
    check_memlock(&MemlockState::current(), largest)?;
    pin::apply(&o.cpu, &o.device)?;
    let (ctx, _fabric) = open(o)?;
    let pd = ctx.alloc_pd()?;
    let device = match &o.device {
        DeviceSpec::Sim => format!("sim (one simulated NIC, stepped fabric, seed {})", o.seed),
        d => format!("{d} ({})", d.kind()),
    };
    println!("{RESULT_LINE}");
    println!("                    Registration cost: register and deregister, by size");
    println!(" Device          : {device}");
    println!(
        " Source          : {} ({})",
        o.source.name(),
        describe(o.source)
    );
    println!(" Access          : LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE");
    println!(
        " Rounds          : {} (sizes interleaved, shuffled per round), median [min, max]",
        o.rounds
    );
    println!("{RESULT_LINE}");
    let mut cells = vec![vec![Cell::default(); sizes.len()]; memories.len()];
    let mut held: Vec<Vec<Option<Held>>> = (0..memories.len())
        .map(|_| (0..sizes.len()).map(|_| None).collect())
        .collect();
    let mut order: Vec<(usize, usize)> = (0..sizes.len())
        .flat_map(|i| (0..memories.len()).map(move |m| (i, m)))
        .collect();
    let mut rng = o.seed;
    for _ in 0..o.rounds {
        shuffle(&mut order, &mut rng);
        for &(i, m) in &order {
            let cell = &mut cells[m][i];
            if cell.failed.is_some() {
                continue;
            }
            match once(&pd, memories[m], sizes[i], &mut held[m][i])? {
                Ok((reg, dereg)) => {
                    cell.reg.push(us(reg));
                    cell.dereg.push(us(dereg));
                }
                Err(why) => cell.failed = Some(why),
            }
        }
    }
    drop(held);
    println!(
        " {:<7} {:>11} {:>11} {:>11} {:>11} {:>13} {:>13} {:>13}",
        "memory",
        "#bytes",
        "reg[usec]",
        "reg_min",
        "reg_max",
        "dereg[usec]",
        "dereg_min",
        "dereg_max"
    );
    for (memory, row) in memories.iter().zip(&cells) {
        for (size, cell) in sizes.iter().zip(row) {
            if let Some(why) = &cell.failed {
                println!(" {:<7} {size:>11}  not registered: {why}", memory.name());
                continue;
            }
            let (r, rmin, rmax) = summary(cell.reg.clone());
            let (d, dmin, dmax) = summary(cell.dereg.clone());
            println!(
                " {:<7} {size:>11} {r:>11.2} {rmin:>11.2} {rmax:>11.2} {d:>13.2} {dmin:>13.2} {dmax:>13.2}",
                memory.name()
            );
        }
    }
    println!("{RESULT_LINE}");
    lease_cost(&pd, o.rounds, o.lease_ops)
}

/// The pool row: one 4 KiB lease taken and dropped, ns per pair, median of the rounds.
fn lease_cost(pd: &Pd, rounds: u32, ops: u64) -> Result<(), PerfError> {
    let pool = pd.create_pool(LEASE, POOL_CHUNKS)?;
    let mut per_op = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..ops {
            drop(black_box(pool.lease(LEASE)?));
        }
        per_op.push(t0.elapsed().as_secs_f64() * 1e9 / ops as f64);
    }
    let (med, min, max) = summary(per_op);
    println!(
        " {:<11} {:>7} {:>13} {:>11} {:>11}",
        "op", "#bytes", "ns/op", "ns_min", "ns_max"
    );
    println!(
        " {:<11} {LEASE:>7} {med:>13.1} {min:>11.1} {max:>11.1}",
        "lease+drop"
    );
    println!("{RESULT_LINE}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_capped_by_max_and_a_max_below_a_page_is_refused() {
        assert_eq!(sizes(1 << 30).unwrap().len(), 6);
        assert_eq!(sizes(64 << 10).unwrap(), vec![4096, 65536]);
        assert_eq!(sizes(100 << 10).unwrap(), vec![4096, 65536]);
        let e = sizes(4095).unwrap_err();
        assert!(e.to_string().contains("--max 4K"), "{e}");
    }

    #[test]
    fn a_memlock_limit_below_the_largest_size_is_reported_with_both_fixes() {
        let low = MemlockState {
            limit: Some(64 << 20),
            locked: 0,
            cap_ipc_lock: false,
        };
        let e = check_memlock(&low, 1 << 30).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("--max 1073741824"), "{msg}");
        assert!(
            msg.contains("ulimit -l") && msg.contains("lower --max"),
            "{msg}"
        );
        assert!(check_memlock(&low, 16 << 20).is_ok());
    }

    #[test]
    fn shuffles_are_permutations_that_differ_by_round_and_repeat_by_seed() {
        let base: Vec<u32> = (0..12).collect();
        let (mut a, mut b) = (base.clone(), base.clone());
        let (mut sa, mut sb) = (1u64, 1u64);
        shuffle(&mut a, &mut sa);
        shuffle(&mut b, &mut sb);
        assert_eq!(a, b, "same seed, same order");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, base);
        let first = a.clone();
        shuffle(&mut a, &mut sa);
        assert_ne!(a, first, "the next round has another order");
    }

    #[test]
    fn summaries_are_median_min_max() {
        assert_eq!(summary(vec![3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(summary(vec![4.0, 1.0]), (4.0, 1.0, 4.0));
    }

    #[test]
    fn sources_say_what_they_need() {
        let none = Path::new("/nonexistent/udmabuf");
        assert_eq!(
            memories(Source::Host, none).unwrap(),
            vec![Memory::Owned, Memory::Driver]
        );
        let e = memories(Source::Dmabuf, none).unwrap_err();
        assert!(matches!(e, RegCostError::NoUdmabuf { .. }));
        assert!(e.to_string().contains("/dev/udmabuf"), "{e}");
        assert_eq!(memories(Source::Memfd, none).unwrap(), vec![Memory::Memfd]);
        assert_eq!(
            memories(Source::Dmabuf, Path::new("/")).unwrap(),
            vec![Memory::DmaBuf]
        );
    }
}
