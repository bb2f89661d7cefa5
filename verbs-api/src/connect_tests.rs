//! A peer's endpoint is checked where it enters `connect`: a QPN or PSN over 24 bits is a
//! typed [`VerbsError::Endpoint`] naming the field, before any command reaches the device,
//! and the QP can still connect to a good endpoint afterwards.
//!
//! Owns: these tests. Must not: test the parsers (the `endpoint` tests do).

use crate::endpoint::{EndpointParseError, MAX_24BIT};
use crate::error::VerbsError;
use crate::test_pair::sim_pair;
use crate::{Cq, QpBuilder};

#[test]
fn connect_to_an_endpoint_with_a_qpn_or_psn_over_24_bits_is_a_typed_error() -> Result<(), VerbsError>
{
    let (a, b) = sim_pair(22)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (Cq::new(&a, 4)?, Cq::new(&b, 4)?);
    let mut x = QpBuilder::rc(&pd_a, &cq_a, &cq_a).build()?;
    let y = QpBuilder::rc(&pd_b, &cq_b, &cq_b).build()?;
    let good = y.endpoint()?;
    x.modify_to_init()?;
    for (field, bad) in [
        (
            "qpn",
            crate::QpEndpoint {
                qpn: MAX_24BIT + 1,
                ..good
            },
        ),
        (
            "psn",
            crate::QpEndpoint {
                psn: u32::MAX,
                ..good
            },
        ),
    ] {
        match x.modify_to_rtr(&bad) {
            Err(VerbsError::Endpoint(EndpointParseError::Range { field: f, max, .. })) => {
                assert_eq!((f, max), (field, MAX_24BIT));
            }
            other => panic!("{field}: expected a range error, got {other:?}"),
        }
    }
    // Nothing was sent to the device: the QP is still in INIT and connects to the good one.
    x.modify_to_rtr(&good)?;
    x.modify_to_rts()?;
    Ok(())
}
