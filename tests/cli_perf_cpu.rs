//! `bypass perf … --cpu`: pinning a tool's threads before it runs. `--cpu LIST` pins and
//! says on stderr the CPUs the kernel reports the process may run on afterwards (read back
//! with sched_getaffinity, so a pin that did not take shows); `--cpu auto` on a simulated NIC
//! says it has no NIC locality and leaves the process alone; CPUs the process may not use
//! and text that is not a cpulist are refused with the fix. The NIC-local case (`auto` on a
//! NIC bound to vfio-pci, from its local_cpulist) is covered by the unit tests on a fake
//! sysfs tree. No test looks at timing.

mod cli_support;

use cli_support::bypass;

/// The data rows of a latency table: lines starting with the message size.
fn lat_rows(out: &str) -> usize {
    out.lines()
        .filter(|l| l.split_whitespace().next() == Some("2"))
        .count()
}

#[test]
fn cpu_0_pins_write_lat_and_says_so() {
    let (code, out, err) = bypass(&["perf", "write-lat", "-d", "sim", "--cpu", "0", "-n", "100"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.lines().any(|l| l == "pinned to CPUs 0"), "{err}");
    assert_eq!(lat_rows(&out), 1, "{out}");
}

#[test]
fn cpu_auto_on_a_sim_is_not_pinned() {
    let (code, out, err) = bypass(&[
        "perf", "write-bw", "-d", "sim", "--cpu", "auto", "-n", "200",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("no NIC locality; not pinned"), "{err}");
    assert!(!err.contains("pinned to CPUs"), "{err}");
}

#[test]
fn cpus_the_process_cannot_use_and_bad_lists_are_refused() {
    let (code, _, err) = bypass(&["perf", "write-lat", "--cpu", "1000", "-n", "100"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--cpu 1000: sched_setaffinity failed"),
        "{err}"
    );
    assert!(err.contains("nproc"), "{err}");
    let (code, _, err) = bypass(&["perf", "write-lat", "--cpu", "3-1", "-n", "100"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("0-3,8-11"), "{err}");
}
