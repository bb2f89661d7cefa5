//! A locked-memory limit too small for bring-up is a typed error with the numbers and the
//! fix, and the partial bring-up is undone. Its own test binary: it lowers RLIMIT_MEMLOCK and
//! drops CAP_IPC_LOCK for the whole process, which must not affect other tests.

use bypass_driver::backend::BackendError;
use bypass_driver::dma::MemlockState;
use bypass_driver::{DriverError, Hca};
use bypass_sim::fabric::SimFabric;
use bypass_sim::{Profile, Stage};
use nix::libc;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// `struct __user_cap_header_struct` / `__user_cap_data_struct` (linux/capability.h, v3).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_IPC_LOCK: u32 = 14;

/// Sets or clears CAP_IPC_LOCK in the effective set (the limit does not apply with it).
fn set_ipc_lock(on: bool) {
    let mut h = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: capget with a v3 header and room for its two data structs.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut CapHeader, d.as_mut_ptr()) };
    assert_eq!(r, 0, "capget");
    if on {
        d[0].effective |= d[0].permitted & (1 << CAP_IPC_LOCK);
    } else {
        d[0].effective &= !(1 << CAP_IPC_LOCK);
    }
    // SAFETY: capset with the header and data capget filled in.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut CapHeader, d.as_ptr()) };
    assert_eq!(r, 0, "capset");
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
