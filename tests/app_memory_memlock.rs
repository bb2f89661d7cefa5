//! Registering application memory past `RLIMIT_MEMLOCK` on the sim path (where the driver
//! `mlock`s the pages itself) is a typed error with the numbers and the fix, and nothing stays
//! mapped. Its own test binary: it lowers RLIMIT_MEMLOCK and drops CAP_IPC_LOCK for the whole
//! process, which must not affect other tests.

use bypass_testbed::SimContext;
use bypass_verbs::driver::DriverError;
use bypass_verbs::driver::backend::BackendError;
use bypass_verbs::driver::dma::MemlockState;
use bypass_verbs::{Access, Context, VerbsError};
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Sets or clears CAP_IPC_LOCK in the effective set (the limit does not apply with it); it can
/// be set only if it is in the permitted set.
fn set_ipc_lock(on: bool) {
    use caps::{CapSet, Capability};
    let r = if !on {
        caps::drop(None, CapSet::Effective, Capability::CAP_IPC_LOCK)
    } else if caps::has_cap(None, CapSet::Permitted, Capability::CAP_IPC_LOCK).unwrap() {
        caps::raise(None, CapSet::Effective, Capability::CAP_IPC_LOCK)
    } else {
        Ok(())
    };
    r.unwrap();
}

#[test]
fn registering_past_the_memlock_limit_is_explained() {
    let pair = Context::sim_pair(3).unwrap();
    let pd = pair.a.alloc_pd().unwrap();
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).unwrap();
    let had_cap = MemlockState::current().cap_ipc_lock;
    // Room for 16 KiB more than the bring-up locked.
    let limit = MemlockState::current().locked + (16 << 10);
    setrlimit(Resource::RLIMIT_MEMLOCK, limit, hard.max(limit)).unwrap();
    set_ipc_lock(false);

    let small = pd.register_owned(vec![0u8; 4096], Access::LOCAL_WRITE);
    let big = pd.register_owned(vec![0u8; 1 << 20], Access::LOCAL_WRITE);

    set_ipc_lock(had_cap);
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
    let ext = pair.a.hca().dma().caller_extents();
    assert_eq!(ext.len(), 1, "{ext:x?}");
    drop(small);
    assert!(pair.a.hca().dma().caller_extents().is_empty());
}
