//! `bypass gpu`: the CUDA devices this machine has, and (`check`) RDMA to and from their
//! memory through two simulated NICs.
//!
//! Owns: the command's options, `gpu info`'s listing and the text of its errors. Must not:
//! call CUDA itself (the `bypass-gpu` crate does, and never panics when CUDA is absent) or
//! wire NICs (`gpu_check.rs` does, with the perf engine's in-process pairs).
//!
//! `gpu info` prints, per device, what perftest's `init_gpu` prints and what GPUDirect RDMA
//! needs: the CUDA ordinal, the name, the PCI bus id as sysfs spells it (so it lines up with
//! `bypass topo`) and `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`. Without a GPU it prints the
//! typed reason (no libcuda; `CUDA_ERROR_NO_DEVICE`) and exits non-zero.
//!
//! Sources: perftest `src/cuda_memory.c` (`init_gpu`); CUDA Driver API reference
//! ("Device Management": `cuDeviceGetName`, `cuDeviceGetPCIBusId`, `cuDeviceGetAttribute`).

use std::fmt::Write as _;

use std::process::ExitCode;

use bypass_gpu::DeviceInfo;
use clap::Subcommand;

use crate::gpu_check::{self, CheckOpts};

/// `bypass gpu` subcommands.
#[derive(Subcommand, Debug)]
pub enum GpuCommand {
    /// List the CUDA devices: ordinal, name, PCI bus id, dma-buf support.
    Info,
    /// RDMA WRITE/READ/SEND between GPU and host memory on two sim NICs, every byte
    /// checked, and GPU->GPU WRITE bandwidth against cuMemcpyDtoD (exit 77: no GPU).
    Check(CheckOpts),
}

/// Runs a `bypass gpu` subcommand; prints its error and returns the exit code (1 on an
/// error; `gpu check` 77 when there is no GPU).
pub fn main(cmd: &GpuCommand) -> ExitCode {
    let (why, code) = match cmd {
        GpuCommand::Info => match bypass_gpu::devices() {
            Ok((version, list)) => {
                print!("{}", info_text(version, &list));
                return ExitCode::SUCCESS;
            }
            Err(e) => (e.to_string(), 1),
        },
        GpuCommand::Check(o) => match gpu_check::run(o) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(e) => (e.to_string(), e.exit_code()),
        },
    };
    eprintln!("bypass: {why}");
    ExitCode::from(code)
}

/// `gpu info`'s text for a driver version and its devices.
pub fn info_text(version: i32, list: &[DeviceInfo]) -> String {
    let mut out = format!(
        "CUDA driver {}.{}: {} device(s)\n",
        version / 1000,
        (version % 1000) / 10,
        list.len()
    );
    for d in list {
        let _ = writeln!(
            out,
            "  GPU {}  {}  {}  dma-buf {}",
            d.ordinal,
            d.pci_bus_id,
            d.name,
            if d.dma_buf { "yes" } else { "no" }
        );
    }
    if list.iter().any(|d| !d.dma_buf) {
        out.push_str(
            "A device without dma-buf support cannot be registered: use the open NVIDIA kernel modules on Linux 5.12 or later.\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lists_each_device_on_one_line() {
        let list = [
            DeviceInfo {
                ordinal: 0,
                name: "NVIDIA H200".into(),
                pci_bus_id: "0000:1b:00.0".into(),
                dma_buf: true,
            },
            DeviceInfo {
                ordinal: 1,
                name: "Tesla T4".into(),
                pci_bus_id: "0000:3b:00.0".into(),
                dma_buf: false,
            },
        ];
        let text = info_text(12080, &list);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "CUDA driver 12.8: 2 device(s)");
        assert_eq!(lines[1], "  GPU 0  0000:1b:00.0  NVIDIA H200  dma-buf yes");
        assert_eq!(lines[2], "  GPU 1  0000:3b:00.0  Tesla T4  dma-buf no");
        assert!(lines[3].contains("open NVIDIA kernel modules"), "{text}");
    }
}
