//! `--cpu auto|LIST`: pinning a benchmark to CPUs, `taskset -c` style, before it starts.
//!
//! Owns: the option ([`CpuOpts`], [`CpuChoice`]), resolving `auto` to the NIC's local CPUs,
//! the `sched_setaffinity` call, the affinity read back and the one line on stderr that says
//! what happened ([`apply`]). Must not: parse cpulists (`crate::topo::parse_cpulist` is the
//! one parser) or read sysfs itself (the VFIO backend's `Sysfs` reads `local_cpulist`).
//!
//! The whole process is pinned, as `taskset -c` would: the call is made on the main thread
//! before the benchmark spawns any thread (a threaded sim fabric's engine, a UDP link's
//! receiver), and threads inherit their creator's mask (sched_setaffinity(2)). `auto` means
//! the CPUs of the NIC's PCI function (`local_cpulist`, the kernel's
//! `drivers/pci/pci-sysfs.c`), which is where the NIC's interrupts and DMA memory are local.
//! A simulated NIC (`-d sim`, `-d udp:`) has no place in the machine, so `auto` leaves the
//! process unpinned and says so: pinning it to node 0's CPUs would be a choice with nothing
//! behind it, and on a one-node machine the same as not pinning.

use bypass_driver::backend::vfio::{Sysfs, VfioError, parse_bdf};
use clap::Args;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::args::DeviceSpec;
use crate::topo::{MAX_CPUS, format_cpulist, parse_cpulist};

/// What `--cpu` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuChoice {
    /// The NIC's local CPUs (its PCI function's `local_cpulist`).
    Auto,
    /// These CPUs (ascending, at least one).
    List(Vec<u32>),
}

/// Parses `--cpu`: `auto` or a cpulist such as `0`, `0-3,8-11`.
pub fn parse_cpu(s: &str) -> Result<CpuChoice, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(CpuChoice::Auto);
    }
    match parse_cpulist(s) {
        Some(cpus) if !cpus.is_empty() => Ok(CpuChoice::List(cpus)),
        _ => Err(format!(
            "{s:?} is not `auto` or a CPU list such as 0 or 0-3,8-11 (CPUs below {MAX_CPUS})"
        )),
    }
}

/// The `--cpu` option, flattened into the tools that take it.
#[derive(Args, Debug, Clone, Default)]
pub struct CpuOpts {
    /// Pin the benchmark's threads to CPUs before it starts (like `taskset -c`): `auto` for
    /// the NIC's local CPUs (its PCI function's local_cpulist; a simulated NIC has none and
    /// is left unpinned), or a list such as 0 or 0-3,8-11.
    #[arg(long = "cpu", value_name = "auto|LIST", value_parser = parse_cpu)]
    pub cpu: Option<CpuChoice>,
}

/// Why pinning failed.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The kernel refused the CPU set.
    #[error(
        "--cpu {cpus}: sched_setaffinity failed: {errno}; name CPUs this process may run on (`nproc`, `taskset -pc $$`, the container's cpuset)"
    )]
    SetAffinity {
        /// The CPUs asked for.
        cpus: String,
        /// What the kernel said.
        errno: nix::errno::Errno,
    },
    /// The affinity could not be read back.
    #[error("--cpu: sched_getaffinity failed: {errno}; the pinning cannot be confirmed")]
    GetAffinity {
        /// What the kernel said.
        errno: nix::errno::Errno,
    },
    /// The NIC's PCI address or its sysfs attribute could not be read.
    #[error("--cpu auto: {0}")]
    Sysfs(#[from] VfioError),
    /// The NIC's `local_cpulist` is not a cpulist.
    #[error(
        "--cpu auto: {bdf}'s local_cpulist holds {text:?}, not a CPU list; give the CPUs with --cpu LIST"
    )]
    BadCpulist {
        /// The NIC.
        bdf: String,
        /// What the file holds.
        text: String,
    },
}

/// The CPUs `--cpu` names for `device`, with the reason when there are none (`auto` on a
/// NIC with no locality).
fn resolve(
    choice: &CpuChoice,
    device: &DeviceSpec,
    sysfs: &Sysfs,
) -> Result<Result<Vec<u32>, String>, PinError> {
    let addr = match (choice, device) {
        (CpuChoice::List(cpus), _) => return Ok(Ok(cpus.clone())),
        (CpuChoice::Auto, DeviceSpec::Vfio(addr)) => addr,
        (CpuChoice::Auto, d) => {
            return Ok(Err(format!(
                "-d {d} is a simulated NIC with no NIC locality"
            )));
        }
    };
    let bdf = parse_bdf(addr)?;
    let Some(text) = sysfs.local_cpulist(&bdf)? else {
        return Ok(Err(format!(
            "{bdf} has no local_cpulist in sysfs, so no NIC locality"
        )));
    };
    match parse_cpulist(&text) {
        Some(cpus) if !cpus.is_empty() => Ok(Ok(cpus)),
        Some(_) => Ok(Err(format!(
            "{bdf}'s local_cpulist is empty, so no NIC locality"
        ))),
        None => Err(PinError::BadCpulist { bdf, text }),
    }
}

/// Pins the calling thread (and so every thread it starts afterwards) to `cpus`, and
/// returns the CPUs the kernel reports it may now run on.
pub fn pin_current_thread(cpus: &[u32]) -> Result<Vec<u32>, PinError> {
    let list = format_cpulist(cpus);
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c as usize).map_err(|errno| PinError::SetAffinity {
            cpus: list.clone(),
            errno,
        })?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|errno| PinError::SetAffinity {
        cpus: list.clone(),
        errno,
    })?;
    let now =
        sched_getaffinity(Pid::from_raw(0)).map_err(|errno| PinError::GetAffinity { errno })?;
    Ok((0..MAX_CPUS)
        .filter(|&c| now.is_set(c as usize).unwrap_or(false))
        .collect())
}

/// Applies `--cpu` for a run on `device`: pins the process where a CPU set results, and says
/// on stderr what it did (`pinned to CPUs 0-3`, or why it did not pin). Call it on the main
/// thread before the benchmark starts any thread.
pub fn apply(opts: &CpuOpts, device: &DeviceSpec) -> Result<(), PinError> {
    let Some(choice) = &opts.cpu else {
        return Ok(());
    };
    match resolve(choice, device, &Sysfs::default())? {
        Ok(cpus) => {
            let now = pin_current_thread(&cpus)?;
            eprintln!("pinned to CPUs {}", format_cpulist(&now));
        }
        Err(why) => eprintln!("--cpu auto: {why}; not pinned"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_takes_auto_or_a_nonempty_cpulist() {
        assert_eq!(parse_cpu("auto"), Ok(CpuChoice::Auto));
        assert_eq!(parse_cpu("AUTO"), Ok(CpuChoice::Auto));
        assert_eq!(parse_cpu("0-2,5"), Ok(CpuChoice::List(vec![0, 1, 2, 5])));
        for bad in ["", "x", "4096", "2-1"] {
            let e = parse_cpu(bad).unwrap_err();
            assert!(e.contains("0-3,8-11"), "{bad}: {e}");
        }
    }

    #[test]
    fn auto_on_a_sim_does_not_pin_and_a_list_is_taken_as_given() {
        let sys = Sysfs::new("/nonexistent");
        let r = resolve(&CpuChoice::Auto, &DeviceSpec::Sim, &sys).unwrap();
        assert!(r.unwrap_err().contains("no NIC locality"));
        let r = resolve(&CpuChoice::List(vec![1, 3]), &DeviceSpec::Sim, &sys).unwrap();
        assert_eq!(r, Ok(vec![1, 3]));
    }

    #[test]
    fn auto_on_a_vfio_nic_takes_its_local_cpulist() {
        let root = std::env::temp_dir().join(format!("bypass-pin-{}", std::process::id()));
        let dev = root.join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        let sys = Sysfs::new(&root);
        let spec = DeviceSpec::Vfio("3b:00.0".into());
        let none = resolve(&CpuChoice::Auto, &spec, &sys).unwrap();
        assert!(none.unwrap_err().contains("no local_cpulist"));
        std::fs::write(dev.join("local_cpulist"), "4-5,9\n").unwrap();
        assert_eq!(
            resolve(&CpuChoice::Auto, &spec, &sys).unwrap(),
            Ok(vec![4, 5, 9])
        );
        std::fs::write(dev.join("local_cpulist"), "ff\n").unwrap();
        let e = resolve(&CpuChoice::Auto, &spec, &sys).unwrap_err();
        assert!(matches!(e, PinError::BadCpulist { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_pinned_thread_reads_back_the_cpu_it_asked_for() {
        // A fresh thread, so the test harness's threads keep their mask.
        let now = std::thread::spawn(|| pin_current_thread(&[0]))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(now, vec![0]);
    }
}
