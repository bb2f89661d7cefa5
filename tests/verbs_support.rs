//! Shared rig for the `verbs_*` tests: two stepped sim NICs, each with a PD, a CQ, a pool
//! and a remotely accessible MR, and helpers to connect QPs and wait for completions.
//! Included by the other `verbs_*.rs` files with `#[path]`; built on its own it tests the rig.
#![allow(dead_code, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bypass_sim::fabric::SimFabric;
use bypass_testbed::SimContext;
use bypass_verbs::{
    Access, Completion, Context, Cq, MemoryPool, Mr, Pd, Qp, QpBuilder, SendOp, SendWr,
};

/// One NIC's objects.
pub struct Side {
    pub ctx: Arc<Context>,
    pub pd: Pd,
    pub cq: Cq,
    pub pool: MemoryPool,
    /// Memory a peer may read, write and run atomics on (4 KiB in [`rig`]).
    pub mr: Mr,
}

/// Two NICs on one stepped fabric.
pub struct Rig {
    pub fabric: SimFabric,
    pub a: Side,
    pub b: Side,
}

pub const WAIT: Duration = Duration::from_secs(2);

fn side(ctx: Arc<Context>) -> Side {
    side_sized(ctx, 4096, 32, 4096)
}

/// One NIC's objects: a 256-entry CQ, a pool of `slots` buffers of `slot` bytes, and an MR of
/// `mr_len` bytes a peer may read, write and run atomics on.
pub fn side_sized(ctx: Arc<Context>, slot: usize, slots: usize, mr_len: usize) -> Side {
    let pd = ctx.alloc_pd().expect("ALLOC_PD");
    let cq = Cq::new(&ctx, 256).expect("CREATE_CQ");
    let pool = pd.create_pool(slot, slots).expect("pool");
    let mr = pd
        .register(
            mr_len,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .expect("MR");
    Side {
        ctx,
        pd,
        cq,
        pool,
        mr,
    }
}

pub fn rig() -> Rig {
    let pair = Context::sim_pair(7).expect("two sim NICs");
    Rig {
        fabric: pair.fabric,
        a: side(pair.a),
        b: side(pair.b),
    }
}

/// An RC QP on each side, connected to each other.
pub fn rc_pair(r: &Rig) -> (Qp, Qp) {
    let mut a = QpBuilder::rc(&r.a.pd, &r.a.cq, &r.a.cq)
        .build()
        .expect("QP a");
    let mut b = QpBuilder::rc(&r.b.pd, &r.b.cq, &r.b.cq)
        .build()
        .expect("QP b");
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).expect("connect a");
    b.connect(&ea).expect("connect b");
    (a, b)
}

/// One completion, or a panic naming what was awaited.
pub fn wait1(cq: &mut Cq, what: &str) -> Completion {
    match cq.wait(WAIT) {
        Ok(Some(c)) => c,
        Ok(None) => panic!("no completion for {what} within {WAIT:?}"),
        Err(e) => panic!("waiting for {what}: {e}"),
    }
}

/// A lease holding `bytes`.
pub fn lease_with(pool: &MemoryPool, bytes: &[u8]) -> bypass_verbs::Lease {
    let mut l = pool.lease(bytes.len()).expect("lease");
    l.as_mut_slice().copy_from_slice(bytes);
    l
}

/// A signaled SEND of `bytes` from a lease.
pub fn send_of<'a>(pool: &MemoryPool, wr_id: u64, bytes: &[u8]) -> SendWr<'a> {
    SendWr::new(wr_id, SendOp::Send).sge(lease_with(pool, bytes))
}

#[test]
fn rig_connects_two_rc_qps() {
    let r = rig();
    let (a, b) = rc_pair(&r);
    assert_eq!(a.state().unwrap(), bypass_verbs::QpState::Rts);
    assert_eq!(b.state().unwrap(), bypass_verbs::QpState::Rts);
}
