//! Tests of the send side.
