//! Bring-up order, each violation, teardown and pages, through the command queue.

mod common;

use common::*;

#[test]
fn rdma_core_bring_up_sequence_succeeds() {
    let r = Raw::up();
    assert!(r.async_eq.is_some());
    assert_eq!(r.dev.firmware_stage(), bypass_sim::Stage::Initialized);
}
