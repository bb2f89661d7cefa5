//! Stage 4 of `ping --ramp`: RDMA to and from GPU memory, when this machine has a GPU.
//!
//! Owns: running the stage in the in-process form ([`in_process`]: GPU memory registered
//! through its dma-buf on both sim NICs, WRITE/READ GPU↔GPU, GPU↔host and a SEND, every byte
//! compared on the host: `gpu_check::data_checks`) and the account of why it is skipped
//! (no GPU, with the typed reason; the two-process form). Must not: call CUDA except
//! through `bypass-gpu`, or claim a check ran that did not.
//!
//! The two-process form has no GPU stage: its wire protocol has no request for GPU memory,
//! and GPU memory is checked in process (`ping --ramp -d sim`, `bypass gpu check`).

use std::sync::Arc;
use std::time::Duration;

use bypass_verbs::Context;

use super::stages::Fail;
use crate::gpu_check::{self, CheckError};

/// Bytes per check in stage 4.
const STAGE_BYTES: usize = 64 << 10;

/// What stage 4 did.
#[derive(Debug)]
pub enum Outcome {
    /// The checks passed: the stage line.
    Passed(String),
    /// Not run: why.
    Skipped(String),
}

/// Stage 4 on the in-process pair `ca` (A) and `cb` (B): the GPU checks, or why not.
///
/// Errors: a `Fail` (step, explained error) when a GPU is there and a check fails.
pub fn in_process(
    ca: &Arc<Context>,
    cb: &Arc<Context>,
    timeout: Duration,
) -> Result<Outcome, Fail> {
    let (ga, gb) = match gpu_check::open_gpus() {
        Ok(g) => g,
        Err(CheckError::NoGpu(e)) => return Ok(Outcome::Skipped(format!("skipped: no GPU: {e}"))),
        Err(e) => return Err(("A: open the GPUs".to_owned(), e.to_string())),
    };
    let lines = gpu_check::data_checks(ca, cb, &ga, &gb, STAGE_BYTES, timeout)
        .map_err(|e| ("A: GPU memory checks".to_owned(), e.to_string()))?;
    Ok(Outcome::Passed(format!(
        "{} checks of {} KiB (WRITE and READ GPU{}<->GPU{}, GPU<->host, SEND), every byte compared on the host",
        lines.len(),
        STAGE_BYTES >> 10,
        ga.info().ordinal,
        gb.info().ordinal
    )))
}

/// Why the two-process form skips stage 4.
pub fn two_process() -> Outcome {
    Outcome::Skipped(
        "skipped: the two-process form has no GPU stage (GPU memory is checked in process: ping --ramp -d sim, or bypass gpu check)".to_owned(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_two_process_form_says_where_gpu_memory_is_checked() {
        match super::two_process() {
            super::Outcome::Skipped(why) => {
                assert!(why.starts_with("skipped: the two-process form"), "{why}");
                assert!(why.contains("ping --ramp -d sim"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
