//! A locked-memory limit too small for bring-up is a typed error with the numbers and the
//! fix, and the partial bring-up is undone. Its own test binary: it lowers RLIMIT_MEMLOCK and
//! drops CAP_IPC_LOCK for the whole process, which must not affect other tests.

use bypass_driver::backend::BackendError;
use bypass_driver::dma::MemlockState;
use bypass_driver::{DriverError, Hca};
use bypass_sim::fabric::SimFabric;
use bypass_sim::{Profile, Stage};
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
fn memlock_limit_too_small_is_a_typed_error_with_the_numbers() {
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).unwrap();
    let had_cap = MemlockState::current().cap_ipc_lock;
    let limit: u64 = 256 << 10;
    setrlimit(Resource::RLIMIT_MEMLOCK, limit, hard).unwrap();
    set_ipc_lock(false);

    let fabric = SimFabric::stepped(1);
    let dev = fabric.add_device(Profile::default()).unwrap();
    let r = Hca::open(dev.clone());

    set_ipc_lock(had_cap);
    setrlimit(Resource::RLIMIT_MEMLOCK, soft, hard).unwrap();

    let e = r.unwrap_err();
    let DriverError::Backend(BackendError::MemlockLimit {
        needed,
        limit: l,
        locked,
    }) = e
    else {
        panic!("expected MemlockLimit, got {e:?}");
    };
    assert_eq!(l, limit);
    assert_eq!(needed, 2 << 20, "the 2 MiB firmware page block did not fit");
    let msg = e.to_string();
    for s in [
        needed.to_string(),
        limit.to_string(),
        locked.to_string(),
        "ulimit -l".into(),
        "LimitMEMLOCK".into(),
        "/etc/security/limits.conf".into(),
    ] {
        assert!(msg.contains(&s), "{s} missing from: {msg}");
    }
    // What bring-up had done was undone.
    let (stage, mappings) = dev
        .with_device(|d| (d.firmware_stage(), d.iommu().mappings()))
        .unwrap();
    assert_eq!(stage, Stage::Disabled);
    assert_eq!(mappings, 0);
}
