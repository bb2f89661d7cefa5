//! An [`crate::Mr`] covers exactly the bytes asked for: `Pd::register(len)` allocates whole
//! pages but its mkey, [`crate::Mr::len`] and [`crate::Mr::remote`] say `len`, so a peer's
//! WRITE or READ past `len` (inside the last page) is refused by the responder with a remote
//! access error, on the stepped sim.
//!
//! Owns: these tests. Must not: test the MTT page choice (driver `mtt_pages.rs` does) or the
//! responder's bounds checks for themselves (the sim's responder tests do).

use std::time::Duration;

use crate::driver::hw::syndrome::CqeSyndrome;
use crate::driver::poll::WcStatus;
use crate::endpoint::RemoteBuffer;
use crate::error::VerbsError;
use crate::test_pair::sim_pair;
use crate::{Access, Cq, QpBuilder, SendOp, SendWr};

const WAIT: Duration = Duration::from_secs(2);

#[test]
fn register_advertises_exactly_the_length_asked_and_refuses_a_peer_write_past_it()
-> Result<(), VerbsError> {
    let (a, b) = sim_pair(21)?;
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut cq_a, cq_b) = (Cq::new(&a, 16)?, Cq::new(&b, 16)?);
    let pool = pd_a.create_pool(64, 4)?;
    let target = pd_b.register(1024, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    assert_eq!(target.len(), 1024);
    assert_eq!(target.remote().len, 1024, "the peer is told 1024 bytes");

    let mut x = QpBuilder::rc(&pd_a, &cq_a, &cq_a).build()?;
    let mut y = QpBuilder::rc(&pd_b, &cq_b, &cq_b).build()?;
    let (ex, ey) = (x.endpoint()?, y.endpoint()?);
    x.connect(&ey)?;
    y.connect(&ex)?;

    // The last 64 bytes of the region: inside, accepted.
    let mut src = pool.lease(64)?;
    src.as_mut_slice().fill(0x5a);
    let last = target.remote().slice(960, 64).expect("inside");
    x.post_send(SendWr::new(1, SendOp::Write(last)).sge(src))?;
    let c = cq_a.wait(WAIT)?.expect("the first WRITE's completion");
    assert!(c.is_ok(), "{c}");
    let mut got = [0u8; 64];
    target.read(960, &mut got)?;
    assert_eq!(got, [0x5a; 64]);
    drop(x.reclaim(c)?);

    // Offset 3072 of the same page: mapped, but outside the 1024 bytes registered. A peer
    // building its own RETH (not `RemoteBuffer::slice`, which refuses) is refused by the NIC.
    let past = RemoteBuffer {
        addr: target.addr() + 3072,
        rkey: target.rkey(),
        len: 64,
    };
    let mut src = pool.lease(64)?;
    src.as_mut_slice().fill(0xa5);
    x.post_send(SendWr::new(2, SendOp::Write(past)).sge(src))?;
    let c = cq_a.wait(WAIT)?.expect("the second WRITE's completion");
    assert_eq!(
        c.status(),
        WcStatus::Error(CqeSyndrome::REMOTE_ACCESS_ERR),
        "{c}"
    );
    assert!(
        target.read(3072, &mut got).is_err(),
        "not readable locally either"
    );
    Ok(())
}

#[test]
fn a_zero_length_registration_advertises_nothing() -> Result<(), VerbsError> {
    let (a, _b) = sim_pair(23)?;
    let mr = a
        .alloc_pd()?
        .register(0, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    assert_eq!((mr.len(), mr.remote().len), (0, 0));
    assert!(mr.write(0, &[1]).is_err(), "not one byte is inside");
    Ok(())
}
