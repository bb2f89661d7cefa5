//! `bypass cong show|set`: a device's congestion control (RoCE ECN / DCQCN) as the firmware
//! reports it: the RP and NP status per priority, their parameters and the four counters,
//! under mlx5's names; `set` changes status and parameters first.
//!
//! Owns: the command's options, parsing `NAME=VALUE` and `NODE:PRIO`, and its text output.
//! Must not: build commands (the driver's `cong` module does) or keep state: on `-d sim` the
//! device lives only as long as this process, so `set` shows its effect in the same run.
//!
//! Sources: the parameter names are `mlx5_ifc.h`'s (`cong_control_r_roce_ecn_rp` / `_np`, the
//! kernel's `cong.c` debugfs files under the same names with an `rp_` / `np_` prefix), the
//! node names MLNX_OFED's `ecn/roce_rp`, `ecn/roce_np` sysfs directories.

use std::io::{self, Write};

use bypass_driver::cong::{self, CongNode, NpChanges, RpChanges};
use bypass_driver::{DriverError, Hca};
use clap::{Args, Subcommand};

use crate::args::DeviceSpec;
use crate::device::{DeviceError, open_hca};

/// `bypass cong` subcommands.
#[derive(Subcommand, Debug)]
pub enum CongCommand {
    /// Show the status per priority, the parameters and the counters.
    Show(CongOpts),
    /// Change status or parameters, then show them.
    Set(SetOpts),
}

/// Which device.
#[derive(Args, Debug)]
pub struct CongOpts {
    /// The device: `sim`, `udp:ADDR[:PORT]` or `vfio:BDF`.
    #[arg(short = 'd', long, default_value = "sim")]
    pub device: DeviceSpec,
    /// Seed of the simulated fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What `set` changes.
#[derive(Args, Debug)]
pub struct SetOpts {
    /// The device.
    #[command(flatten)]
    pub dev: CongOpts,
    /// Turn a node on for a priority: `rp:3`, `np:3` (repeatable).
    #[arg(long, value_parser = parse_node_prio)]
    pub enable: Vec<(CongNode, u8)>,
    /// Turn a node off for a priority (repeatable).
    #[arg(long, value_parser = parse_node_prio)]
    pub disable: Vec<(CongNode, u8)>,
    /// An RP parameter: `rpg_ai_rate=10` (repeatable; names as `cong show` prints them).
    #[arg(long, value_parser = parse_assign)]
    pub rp: Vec<(String, u32)>,
    /// An NP parameter: `cnp_dscp=26` (repeatable).
    #[arg(long, value_parser = parse_assign)]
    pub np: Vec<(String, u32)>,
}

/// Why `bypass cong` failed.
#[derive(Debug, thiserror::Error)]
pub enum CongCmdError {
    /// The device did not open.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A congestion command failed (the error names the command, cause and fix).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A parameter name the node does not have.
    #[error("the {node} has no parameter {name:?}: use one of {}", known.join(", "))]
    UnknownParam {
        /// `RP` or `NP`.
        node: &'static str,
        /// The name given.
        name: String,
        /// The names it has.
        known: &'static [&'static str],
    },
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Output(#[from] io::Error),
}

/// Parses `rp:3` / `np:3`.
pub fn parse_node_prio(s: &str) -> Result<(CongNode, u8), String> {
    let bad = || {
        format!("{s:?} is not NODE:PRIO: give rp or np, a colon and a priority 0..=7 (e.g. rp:3)")
    };
    let (n, p) = s.split_once(':').ok_or_else(bad)?;
    let node = match n {
        "rp" => CongNode::Rp,
        "np" => CongNode::Np,
        _ => return Err(bad()),
    };
    let prio: u8 = p.parse().map_err(|_| bad())?;
    if prio > 7 {
        return Err(bad());
    }
    Ok((node, prio))
}

/// Parses `NAME=VALUE` (VALUE decimal).
pub fn parse_assign(s: &str) -> Result<(String, u32), String> {
    let bad = || format!("{s:?} is not NAME=VALUE with a decimal value (e.g. rpg_ai_rate=10)");
    let (n, v) = s.split_once('=').ok_or_else(bad)?;
    Ok((n.to_owned(), v.parse().map_err(|_| bad())?))
}

/// Runs `bypass cong`.
pub fn run(cmd: &CongCommand) -> Result<(), CongCmdError> {
    let (dev, set) = match cmd {
        CongCommand::Show(o) => (o, None),
        CongCommand::Set(s) => (&s.dev, Some(s)),
    };
    let hca = open_hca(&dev.device, dev.seed)?;
    if let Some(s) = set {
        apply(&hca, s)?;
    }
    show(&mut io::stdout().lock(), &hca)
}

/// Applies `s`: every name is checked before any command is sent.
fn apply(hca: &Hca, s: &SetOpts) -> Result<(), CongCmdError> {
    let mut rp = RpChanges::default();
    for (n, v) in &s.rp {
        if !rp.set_by_name(n, *v) {
            return Err(CongCmdError::UnknownParam {
                node: "RP",
                name: n.clone(),
                known: RpChanges::NAMES,
            });
        }
    }
    let mut np = NpChanges::default();
    for (n, v) in &s.np {
        if !np.set_by_name(n, *v) {
            return Err(CongCmdError::UnknownParam {
                node: "NP",
                name: n.clone(),
                known: NpChanges::NAMES,
            });
        }
    }
    for (list, on) in [(&s.enable, true), (&s.disable, false)] {
        for &(node, prio) in list {
            cong::modify_status(hca, node, prio, on)?;
        }
    }
    if !rp.is_empty() {
        cong::modify_rp_params(hca, &rp)?;
    }
    if !np.is_empty() {
        cong::modify_np_params(hca, &np)?;
    }
    Ok(())
}

/// Prints `roce_rp enabled prio ...`, one `NAME VALUE` line per parameter and counter.
fn show(out: &mut impl Write, hca: &Hca) -> Result<(), CongCmdError> {
    let st = cong::query_all_status(hca)?;
    for (node, on) in [(CongNode::Rp, &st.rp), (CongNode::Np, &st.np)] {
        let prios: Vec<String> = (0..on.len())
            .filter(|&p| on[p])
            .map(|p| p.to_string())
            .collect();
        let list = if prios.is_empty() {
            "none".to_owned()
        } else {
            prios.join(",")
        };
        writeln!(out, "{} enabled on priorities: {list}", node.name())?;
    }
    for (k, v) in cong::query_rp_params(hca)?.iter() {
        writeln!(out, "rp {k} {v}")?;
    }
    for (k, v) in cong::query_np_params(hca)?.iter() {
        writeln!(out, "np {k} {v}")?;
    }
    for (k, v) in cong::query_statistics(hca, false)?.iter() {
        writeln!(out, "counter {k} {v}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_prio_and_assignments_parse() {
        assert_eq!(parse_node_prio("rp:3"), Ok((CongNode::Rp, 3)));
        assert_eq!(parse_node_prio("np:0"), Ok((CongNode::Np, 0)));
        assert!(parse_node_prio("np:8").unwrap_err().contains("0..=7"));
        assert!(parse_node_prio("general:1").is_err());
        assert_eq!(
            parse_assign("rpg_ai_rate=10"),
            Ok(("rpg_ai_rate".into(), 10))
        );
        assert!(parse_assign("rpg_ai_rate").is_err());
        assert!(parse_assign("x=-1").is_err());
    }

    #[test]
    fn set_then_show_on_a_sim() {
        let hca = open_hca(&DeviceSpec::Sim, 1).unwrap();
        let s = SetOpts {
            dev: CongOpts {
                device: DeviceSpec::Sim,
                seed: 1,
            },
            enable: vec![(CongNode::Rp, 3), (CongNode::Np, 3)],
            disable: vec![],
            rp: vec![("rpg_ai_rate".into(), 10)],
            np: vec![("cnp_dscp".into(), 26)],
        };
        apply(&hca, &s).unwrap();
        let mut out = Vec::new();
        show(&mut out, &hca).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("roce_rp enabled on priorities: 3\n"),
            "{text}"
        );
        assert!(
            text.contains("roce_np enabled on priorities: 3\n"),
            "{text}"
        );
        assert!(text.contains("\nrp rpg_ai_rate 10\n"), "{text}");
        assert!(text.contains("\nrp rpg_hai_rate 50\n"), "{text}");
        assert!(text.contains("\nnp cnp_dscp 26\n"), "{text}");
        assert!(text.contains("\ncounter np_cnp_sent 0\n"), "{text}");
        let bad = SetOpts {
            rp: vec![("rpg_nonsense".into(), 1)],
            enable: vec![(CongNode::Rp, 5)],
            ..s
        };
        let e = apply(&hca, &bad).unwrap_err();
        assert!(e.to_string().contains("rpg_time_reset"), "{e}");
        assert!(
            !cong::query_status(&hca, CongNode::Rp, 5).unwrap(),
            "a refused set sent nothing"
        );
    }
}
