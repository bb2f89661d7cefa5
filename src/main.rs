//! `bypass`: the command-line tool of the bypass RDMA stack.
//!
//! The device commands (`devinfo`, `pingpong`, `perf`) arrive with the driver. Today the tool
//! explains the codes a device or a peer can answer with, which is what a user staring at a
//! failed command or an error completion needs first.

use std::process::ExitCode;

use bypass_hw::syndrome::{AethSyndrome, CmdStatus, CqeSyndrome};
use clap::{Parser, Subcommand, ValueEnum};

/// A kernel-bypass RDMA stack for mlx5 NICs.
#[derive(Parser)]
#[command(name = "bypass", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Name a status or syndrome and say what usually causes it and how to fix it.
    Explain {
        /// Which kind of code VALUE is.
        kind: CodeKind,
        /// The code: decimal, or hex with 0x.
        #[arg(value_parser = parse_u8)]
        value: u8,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum CodeKind {
    /// A firmware command status (`mbox_out.status`).
    Status,
    /// An error-CQE syndrome (`mlx5_err_cqe.syndrome`).
    Syndrome,
    /// The AETH syndrome byte of an ACK/NAK on the wire.
    Aeth,
}

fn parse_u8(s: &str) -> Result<u8, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not a byte value (0..=255, decimal or 0x-prefixed hex)"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Explain { kind, value } => {
            let line = match kind {
                CodeKind::Status => CmdStatus(value).to_string(),
                CodeKind::Syndrome => CqeSyndrome(value).to_string(),
                CodeKind::Aeth => {
                    let s = AethSyndrome(value);
                    format!("{} [{:?}]", s.explain(), s.kind())
                }
            };
            println!("{line}");
        }
    }
    ExitCode::SUCCESS
}
