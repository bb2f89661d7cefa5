//! QP commands: CREATE_QP, QUERY_QP, DESTROY_QP and the modify family.
//!
//! (Being written: the QP-commands work item owns this file.)

use bypass_hw::cmd::Opcode;

use super::CmdResult;
use crate::device::Device;

/// CREATE_QP.
pub(crate) fn create_qp(_dev: &mut Device, _input: &[u8], _output: &mut [u8]) -> CmdResult {
    Ok(())
}

/// DESTROY_QP.
pub(crate) fn destroy_qp(_dev: &mut Device, _input: &[u8], _output: &mut [u8]) -> CmdResult {
    Ok(())
}

/// QUERY_QP.
pub(crate) fn query_qp(_dev: &mut Device, _input: &[u8], _output: &mut [u8]) -> CmdResult {
    Ok(())
}

/// RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, SQD_RTS, 2ERR, 2RST.
pub(crate) fn modify_qp(
    _dev: &mut Device,
    _op: Opcode,
    _input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    Ok(())
}
