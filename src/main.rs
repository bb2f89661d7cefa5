//! `bypass`: the command-line tool of the bypass RDMA stack.
//!
//! The device commands (`devinfo`, `ping`, `perf`) arrive with the driver. Today the tool
//! explains the codes a device or a peer can answer with, which is what a user staring at a
//! failed command or an error completion needs first.

use std::process::ExitCode;

use bypass_hw::syndrome::{AethSyndrome, CmdStatus, CqeSyndrome};

const USAGE: &str = "usage: bypass explain (status|syndrome|aeth) VALUE
  status VALUE    a firmware command status (mbox_out.status), e.g. 0x3
  syndrome VALUE  an error-CQE syndrome (mlx5_err_cqe.syndrome), e.g. 0x13
  aeth VALUE      an AETH syndrome byte from an ACK/NAK on the wire, e.g. 0x62";

fn parse_u8(s: &str) -> Option<u8> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = match words.as_slice() {
        ["explain", kind, value] => match (*kind, parse_u8(value)) {
            ("status", Some(v)) => CmdStatus(v).to_string(),
            ("syndrome", Some(v)) => CqeSyndrome(v).to_string(),
            ("aeth", Some(v)) => format!("{} [{:?}]", AethSyndrome(v).explain(), AethSyndrome(v).kind()),
            (_, None) => {
                eprintln!("bypass: {value:?} is not a byte value (decimal or 0x-prefixed hex)\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => {
                eprintln!("bypass: unknown code kind {kind:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        },
        ["--help"] | ["-h"] | ["help"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!("{line}");
    ExitCode::SUCCESS
}
