//! Device counters as a user reads them: collected from a simulated NIC (the port's and each
//! QP's) and printed as `label` blocks of `name value` lines.
//!
//! Owns: [`collect`] and [`print_counters`]; `perf --report-counters` uses both, and any
//! command that shows counters (`bypass stats`) can. Must not decide anything about the
//! values or read the device itself (`crate::stats_view::sim_counters` takes the snapshot).
//!
//! Sources: the counter names are the sim's (`sim/src/counters.rs`), which follow
//! `rdma statistic` for mlx5 (the port and q counters) and rxe where mlx5 has none.

use std::io::{self, Write};

use bypass_sim::counters::Counters;
use bypass_verbs::Context;

use crate::stats_view::sim_counters;

/// One block of counters and what it counts (`port 1 of 10.0.0.1`, `QP 0x12`).
pub type Labelled = (String, Counters);

/// The counters of `ctx`'s device (labelled `label`) and of each of `qpns` on it, from
/// [`sim_counters`]'s snapshot; empty for a device that keeps none (a real NIC).
pub fn collect(ctx: &Context, label: &str, qpns: &[u32]) -> Vec<Labelled> {
    let Some(snap) = sim_counters(ctx) else {
        return Vec::new();
    };
    let mut out = vec![(format!("{label} port {}", snap.port), snap.port_counters)];
    out.extend(
        snap.qps
            .into_iter()
            .filter(|(qpn, _)| qpns.contains(qpn))
            .map(|(qpn, c)| (format!("{label} QP {qpn:#x}"), c)),
    );
    out
}

/// Prints each block as a title line and one `  name  value` line per counter; with
/// `nonzero_only`, counters at 0 are left out (a block with none left says so).
pub fn print_counters(
    out: &mut impl Write,
    blocks: &[Labelled],
    nonzero_only: bool,
) -> io::Result<()> {
    for (label, c) in blocks {
        writeln!(out, " Counters of {label}:")?;
        let mut shown = 0;
        for (name, v) in c.iter() {
            if nonzero_only && v == 0 {
                continue;
            }
            writeln!(out, "   {name:<28} {v}")?;
            shown += 1;
        }
        if shown == 0 {
            writeln!(out, "   (all zero)")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_names_and_values_and_skips_zeros_on_request() {
        let c = Counters {
            port_xmit_packets: 7,
            ..Counters::default()
        };
        let mut out = Vec::new();
        print_counters(&mut out, &[("a port 1".into(), c.clone())], true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Counters of a port 1:"), "{text}");
        assert!(text.contains("port_xmit_packets"), "{text}");
        assert!(!text.contains("port_rcv_packets"), "{text}");
        let mut out = Vec::new();
        print_counters(&mut out, &[("b".into(), Counters::default())], true).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("(all zero)"));
    }
}
