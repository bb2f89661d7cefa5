//! Registering application memory past `RLIMIT_MEMLOCK` on the sim path (where the driver
//! `mlock`s the pages itself) is a typed error with the numbers and the fix, and nothing stays
//! mapped. Its own test binary: it lowers RLIMIT_MEMLOCK and drops CAP_IPC_LOCK for the whole
//! process, which must not affect other tests.

use bypass_testbed::SimContext;
use bypass_verbs::driver::DriverError;
use bypass_verbs::driver::backend::BackendError;
use bypass_verbs::driver::dma::MemlockState;
use bypass_verbs::{Access, Context, VerbsError};
use caps::{CapSet, Capability};
use nix::sys::resource::{Resource, getrlimit, setrlimit};

#[test]
fn registering_past_the_memlock_limit_is_explained() {
    let pair = Context::sim_pair(3).unwrap();
    let pd = pair.a.alloc_pd().unwrap();
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).unwrap();
    let had_cap = MemlockState::current().cap_ipc_lock;
    // Room for 16 KiB more than the bring-up locked.
    let limit = MemlockState::current().locked + (16 << 10);
    setrlimit(Resource::RLIMIT_MEMLOCK, limit, hard.max(limit)).unwrap();
    // Without CAP_IPC_LOCK the limit binds.
    caps::drop(None, CapSet::Effective, Capability::CAP_IPC_LOCK).unwrap();

    let small = pd.register_owned(vec![0u8; 4096], Access::LOCAL_WRITE);
    let big = pd.register_owned(vec![0u8; 1 << 20], Access::LOCAL_WRITE);

    if had_cap {
        caps::raise(None, CapSet::Effective, Capability::CAP_IPC_LOCK).unwrap();
    }
    setrlimit(Resource::RLIMIT_MEMLOCK, soft, hard).unwrap();

    assert!(small.is_ok(), "a registration inside the limit: {small:?}");
    let e = big.unwrap_err();
    let VerbsError::Driver(DriverError::Backend(BackendError::MemlockLimit {
        needed,
        limit: l,
        locked,
    })) = e
    else {
        panic!("expected MemlockLimit, got {e:?}");
    };
    assert_eq!(l, limit);
    assert!(needed >= 1 << 20, "the whole buffer's pages: {needed}");
    let msg = e.to_string();
    for s in [
        needed.to_string(),
        limit.to_string(),
        locked.to_string(),
        "ulimit -l".into(),
        "LimitMEMLOCK".into(),
    ] {
        assert!(msg.contains(&s), "{s} missing from: {msg}");
    }
    // Only the small registration's pages are mapped; the refused one left nothing behind.
    let ext = pair.a.caller_extents();
    assert_eq!(ext.len(), 1, "{ext:x?}");
    drop(small);
    assert!(pair.a.caller_extents().is_empty());
}
