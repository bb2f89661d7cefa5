//! A locked-memory limit too small for bring-up is a typed error with the numbers and the
//! fix, and the partial bring-up is undone. Its own test binary: it lowers RLIMIT_MEMLOCK and
//! drops CAP_IPC_LOCK for the whole process, which must not affect other tests.

use bypass_driver::backend::BackendError;
use bypass_driver::dma::MemlockState;
use bypass_driver::{DriverError, Hca};
use bypass_sim::fabric::SimFabric;
use bypass_sim::{Profile, Stage};
use caps::{CapSet, Capability};
use nix::sys::resource::{Resource, getrlimit, setrlimit};

#[test]
fn memlock_limit_too_small_is_a_typed_error_with_the_numbers() {
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).unwrap();
    let had_cap = MemlockState::current().cap_ipc_lock;
    let limit: u64 = 256 << 10;
    setrlimit(Resource::RLIMIT_MEMLOCK, limit, hard).unwrap();
    // Without CAP_IPC_LOCK the limit binds.
    caps::drop(None, CapSet::Effective, Capability::CAP_IPC_LOCK).unwrap();

    let fabric = SimFabric::stepped(1);
    let dev = fabric.add_device(Profile::default()).unwrap();
    let r = Hca::open(dev.clone());

    if had_cap {
        caps::raise(None, CapSet::Effective, Capability::CAP_IPC_LOCK).unwrap();
    }
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
