//! Registering application memory past `RLIMIT_MEMLOCK` on the sim path (where the driver
//! `mlock`s the pages itself) is a typed error with the numbers and the fix, and nothing stays
//! mapped. Its own test binary: it lowers RLIMIT_MEMLOCK and drops CAP_IPC_LOCK for the whole
//! process, which must not affect other tests.

use bypass_testbed::SimContext;
use bypass_verbs::driver::DriverError;
use bypass_verbs::driver::backend::BackendError;
use bypass_verbs::driver::dma::MemlockState;
use bypass_verbs::{Access, Context, VerbsError};
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
