//! The extended post of `ibv_qp_ex` (`ibv_wr_start` … `ibv_wr_complete`).
//!
//! Owns: [`WrState`] (what a QP created with send ops may post) and the function-pointer
//! slots of `ibv_qp_ex`.
//! Must not: post any other way than the driver's post entry points.

use crate::abi::ibv_qp_ex;
use bypass_driver::qp_attr::QpType;

/// The extended-post state of a QP (empty for one created without send ops).
#[derive(Debug, Default)]
pub(crate) struct WrState {}

impl WrState {
    /// The state of a QP of type `t` created with `send_ops_flags` `ops`, or the errno
    /// refusing it.
    pub(crate) fn new(ops: u64, t: QpType) -> Result<Self, i32> {
        let _ = (ops, t);
        Err(libc::EOPNOTSUPP)
    }
}

/// Fills the function-pointer slots of `ex`.
pub(crate) fn fill_ops(ex: &mut ibv_qp_ex) {
    let _ = ex;
}
