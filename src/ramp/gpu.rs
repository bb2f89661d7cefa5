//! Stage 4 of `ping --ramp`: RDMA to and from GPU memory. This build has no GPU memory
//! code (registering device memory through dma-buf is not built yet), so the stage can
//! only say why it is skipped, and whether a CUDA device is there to try once it exists.
//!
//! Owns: [`why_skipped`], the honest account. Must not pretend a check ran, load a GPU
//! library, or touch a device: it only looks for the NVIDIA driver's device nodes.

use std::path::Path;

/// The NVIDIA kernel driver's device nodes and its per-GPU proc directory.
const NVIDIA_NODES: [&str; 2] = ["/dev/nvidia0", "/proc/driver/nvidia/gpus"];

/// Why stage 4 cannot run: the build's reason, then what was found on this machine.
pub fn why_skipped() -> String {
    let found = NVIDIA_NODES.iter().find(|p| Path::new(p).exists());
    let device = match found {
        Some(p) => format!("a CUDA device is present ({p}) but unused"),
        None => format!("no CUDA device ({} absent)", NVIDIA_NODES.join(", ")),
    };
    format!(
        "skipped: no GPU support in this build (GPU memory registration is not built yet); {device}"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reason_names_the_build_and_the_device() {
        let why = super::why_skipped();
        assert!(
            why.starts_with("skipped: no GPU support in this build"),
            "{why}"
        );
        assert!(why.contains("CUDA device"), "{why}");
    }
}
