//! Secrets never reach formatted output unless asked: one of every public type that holds a
//! memory key or the address registered memory is reached at (verbs `Mr`, `OwnedMr`,
//! `RawMr`, `DeviceMr`, `DevicePool`, `DeviceLease`, `MemoryPool`, `Lease`, `SharedLease`,
//! `RemoteBuffer`, `PeerInfo`, `Pd`, `SendWr` with a remote; the driver's `RemoteAddr`, `Sge`,
//! `SendWr`, `UserMr`, `DmaBufRange`, `FdMapping`, `Pd`), built on a stepped sim NIC and
//! formatted with `{:?}` (and `{}` where implemented).
//!
//! - Without `BYPASS_LOG_KEYS`, no key and no such address appears in any output (as a
//!   decimal, hex or `0x` hex token), and a PD's key generator state never does.
//! - With `BYPASS_LOG_KEYS=1` (the switch is read once per process, so that half runs in a
//!   child process of this test binary) every key and address of every type does appear.
//!
//! - The out-of-band exchange's pre-shared key (`ExchangeKey`, inside `ExchangeAuth::Psk`)
//!   never appears, with or without `BYPASS_LOG_KEYS=1`: that switch reveals memory keys to
//!   debug a run; this key would let anyone read and forge every exchange.
//!
//! Must not: depend on which key values the firmware hands out (every check is against the
//! values the objects report through their named methods).

use std::os::fd::OwnedFd;
use std::process::Command;
use std::ptr::NonNull;
use std::sync::Arc;

use bypass_driver::dmabuf_mr::DmaBufRange;
use bypass_driver::memfd_mr::FdMapping;
use bypass_driver::post::{RemoteAddr, SendOp as DSendOp, SendWr as DSendWr};
use bypass_driver::redact::LOG_KEYS_ENV;
use bypass_testbed::SimContext;
use bypass_verbs::exchange::{ExchangeAuth, ExchangeKey};
use bypass_verbs::{Access, Context, Cq, DevicePool, PeerInfo, QpBuilder, SendOp, SendWr};
use nix::sys::memfd::{MFdFlags, memfd_create};

const PAGE: usize = 4096;
/// Set in the child process that checks the `BYPASS_LOG_KEYS=1` half.
const CHILD_ENV: &str = "BYPASS_SECRETS_REDACTED_CHILD";

/// One formatted object and the secret values it holds: `shown` are formatted (redacted
/// unless asked), `hidden` never are.
struct Case {
    name: &'static str,
    text: String,
    shown: Vec<u64>,
    hidden: Vec<u64>,
}

fn case(name: &'static str, text: String, shown: &[u64]) -> Case {
    hiding(name, text, shown, &[])
}

fn hiding(name: &'static str, text: String, shown: &[u64], hidden: &[u64]) -> Case {
    Case {
        name,
        text,
        shown: shown.to_vec(),
        hidden: hidden.to_vec(),
    }
}

fn memfd(len: usize) -> Arc<OwnedFd> {
    let fd = memfd_create(c"secrets-redacted", MFdFlags::MFD_ALLOW_SEALING).expect("memfd_create");
    nix::unistd::ftruncate(&fd, len as i64).expect("ftruncate");
    Arc::new(fd)
}

/// Builds one of every key-holding type on a sim NIC and formats each; `check` sees them all
/// while they are alive.
fn with_cases(check: impl FnOnce(&[Case])) {
    let pair = Context::sim_pair(1).expect("sim pair");
    let ctx = pair.a.clone();
    let pd = ctx.alloc_pd().expect("ALLOC_PD");
    let remote_access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mut cases = Vec::new();

    let mr = pd.register(PAGE, remote_access).expect("MR");
    let (lk, rk, addr) = (u64::from(mr.lkey()), u64::from(mr.rkey()), mr.addr());
    cases.push(case("verbs Mr", format!("{mr:?}"), &[lk, rk, addr]));
    let remote = mr.remote();
    cases.push(case("RemoteBuffer", format!("{remote:?}"), &[rk, addr]));
    let part = remote.slice(64, 128).expect("slice");
    cases.push(case(
        "RemoteBuffer slice",
        format!("{part:?}"),
        &[rk, addr + 64],
    ));
    let info = PeerInfo {
        qp: QpBuilder::rc(
            &pd,
            &Cq::new(&ctx, 16).expect("CQ"),
            &Cq::new(&ctx, 16).expect("CQ"),
        )
        .build()
        .expect("QP")
        .endpoint()
        .expect("endpoint"),
        buffers: vec![remote],
    };
    cases.push(case("PeerInfo", format!("{info:?}"), &[rk, addr]));
    cases.push(case("verbs Pd", format!("{pd:?}"), &[]));

    let pool = pd.create_pool(PAGE, 4).expect("pool");
    cases.push(case("MemoryPool", format!("{pool:?}"), &[]));
    let lease = pool.lease(100).expect("lease");
    let (llk, liova) = (u64::from(lease.lkey()), lease.iova());
    cases.push(hiding("Lease", format!("{lease:?}"), &[], &[llk, liova]));
    let wr = SendWr::new(7, SendOp::Write(remote)).sge(lease);
    cases.push(hiding(
        "verbs SendWr",
        format!("{wr:?}"),
        &[rk, addr],
        &[llk, liova],
    ));
    drop(wr);
    let shared = pool.lease(100).expect("lease").freeze();
    let shared_secrets = [u64::from(shared.lkey()), shared.iova()];
    cases.push(hiding(
        "SharedLease",
        format!("{shared:?}"),
        &[],
        &shared_secrets,
    ));
    let wr = SendWr::new(8, SendOp::Send).sge(shared.clone());
    cases.push(hiding(
        "verbs SendWr shared",
        format!("{wr:?}"),
        &[],
        &shared_secrets,
    ));

    let owned = pd
        .register_owned(vec![0u8; 2 * PAGE], remote_access)
        .expect("owned MR");
    let owned_secrets = [
        u64::from(owned.lkey()),
        u64::from(owned.rkey()),
        owned.addr(),
    ];
    cases.push(hiding(
        "OwnedMr",
        format!("{owned:?}"),
        &owned_secrets[2..],
        &owned_secrets[..2],
    ));
    let user = owned.driver().expect("registered");
    cases.push(case("driver UserMr", format!("{user:?}"), &owned_secrets));

    let backing = vec![0u8; PAGE];
    let ptr = NonNull::new(backing.as_ptr().cast_mut()).expect("non-null");
    // SAFETY: `backing` outlives `raw` (declared before it, so dropped after it) and is never
    // touched while registered; the region is local-only.
    let raw = unsafe { pd.register_raw(ptr, PAGE, Access::LOCAL_WRITE, None) }.expect("raw MR");
    let sge = raw.sge(16, 32);
    cases.push(case(
        "RawMr",
        format!("{raw:?}"),
        &[u64::from(raw.lkey()), u64::from(raw.rkey()), raw.addr()],
    ));
    cases.push(case(
        "driver Sge",
        format!("{sge:?}"),
        &[u64::from(sge.lkey), sge.addr],
    ));
    let raddr = RemoteAddr {
        addr: remote.addr,
        rkey: remote.rkey,
    };
    cases.push(case("driver RemoteAddr", format!("{raddr:?}"), &[rk, addr]));
    let sges = [sge];
    let dwr = DSendWr::new(9, DSendOp::Write { remote: raddr }, &sges);
    cases.push(case(
        "driver SendWr",
        format!("{dwr:?}"),
        &[rk, addr, u64::from(sge.lkey), sge.addr],
    ));

    let fd = memfd(4 * PAGE);
    let dev = pd
        .register_memfd(fd.clone(), PAGE as u64, 2 * PAGE, None, remote_access)
        .expect("memfd MR");
    let dev_secrets = [u64::from(dev.lkey()), u64::from(dev.rkey()), dev.addr()];
    cases.push(case("DeviceMr", format!("{dev:?}"), &dev_secrets));
    let dev_local = pd
        .register_memfd(
            fd.clone(),
            0,
            PAGE,
            Some(0x5_0000_0000),
            Access::LOCAL_WRITE,
        )
        .expect("memfd MR");
    let local_secrets = [u64::from(dev_local.lkey()), dev_local.addr()];
    let dpool = DevicePool::new(dev_local, 1024).expect("device pool");
    cases.push(case("DevicePool", format!("{dpool:?}"), &local_secrets));
    let dlease = dpool.lease(10).expect("device lease");
    let dl_secrets = [u64::from(dlease.lkey()), dlease.iova()];
    cases.push(hiding(
        "DeviceLease",
        format!("{dlease:?}"),
        &[],
        &dl_secrets,
    ));
    let map = FdMapping::new(fd, 0, PAGE).expect("mmap");
    let map_addr = map.ptr().as_ptr() as u64;
    cases.push(case("FdMapping", format!("{map:?}"), &[map_addr]));
    let range = DmaBufRange {
        offset: 0,
        len: PAGE,
        iova: 0x7_1234_5000,
    };
    cases.push(case("DmaBufRange", format!("{range:?}"), &[0x7_1234_5000]));

    let dpd = bypass_driver::pd::Pd::alloc(ctx.hca()).expect("driver PD");
    cases.push(case("driver Pd", format!("{dpd:?}"), &[]));

    check(&cases);
}

/// The tokens of `text`: runs of ASCII letters and digits.
fn tokens(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The forms a value takes in formatted output: decimal, hex, `0x` hex.
fn forms(v: u64) -> [String; 3] {
    [format!("{v}"), format!("{v:x}"), format!("0x{v:x}")]
}

fn in_child(test: &str, log_keys: bool) {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1");
    if log_keys {
        cmd.env(LOG_KEYS_ENV, "1");
    } else {
        cmd.env_remove(LOG_KEYS_ENV);
    }
    let out = cmd.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{test} with {LOG_KEYS_ENV}={}: {stdout}\n{}",
        u8::from(log_keys),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in the child: {stdout}"
    );
}

fn wants(log_keys: bool) -> bool {
    let on = std::env::var_os(LOG_KEYS_ENV).is_some_and(|v| v == "1");
    on == log_keys
}

#[test]
fn no_key_or_remote_address_in_formatted_output() {
    if !wants(false) {
        return in_child("no_key_or_remote_address_in_formatted_output", false);
    }
    with_cases(|cases| {
        let mut checked = 0;
        for c in cases {
            let toks = tokens(&c.text);
            assert!(
                c.text.contains("<redacted>") || c.shown.is_empty(),
                "{}: {}",
                c.name,
                c.text
            );
            for &s in c.shown.iter().chain(&c.hidden) {
                for f in forms(s) {
                    assert!(
                        !toks.contains(&f.as_str()),
                        "{} prints the secret {f}: {}",
                        c.name,
                        c.text
                    );
                    checked += 1;
                }
            }
            // A PD's key generator state (a 64-bit random number) is never printed.
            assert!(!c.text.contains("rng"), "{}: {}", c.name, c.text);
            assert!(
                toks.iter()
                    .all(|t| !(t.len() > 12 && t.bytes().all(|b| b.is_ascii_digit()))),
                "{} prints a 64-bit number: {}",
                c.name,
                c.text
            );
        }
        assert!(checked >= 3 * 40, "only {checked} forms checked");
    });
}

#[test]
fn keys_and_addresses_shown_when_bypass_log_keys_is_1() {
    if !wants(true) {
        return in_child("keys_and_addresses_shown_when_bypass_log_keys_is_1", true);
    }
    with_cases(|cases| {
        for c in cases {
            let toks = tokens(&c.text);
            assert!(!c.text.contains("<redacted>"), "{}: {}", c.name, c.text);
            for &s in &c.shown {
                let hex = format!("0x{s:x}");
                assert!(
                    toks.contains(&hex.as_str()),
                    "{} hides {hex} although {LOG_KEYS_ENV}=1: {}",
                    c.name,
                    c.text
                );
            }
            // Asked for or not, the key generator's state stays out.
            assert!(!c.text.contains("rng"), "{}: {}", c.name, c.text);
        }
    });
}

/// The exchange key's forms: its hex text (as the key file holds it) and each 8-byte word
/// of it in the forms of [`forms`], both byte orders.
fn exchange_key_forms(bytes: &[u8; 32]) -> Vec<String> {
    let mut out: Vec<String> = vec![bytes.iter().map(|b| format!("{b:02x}")).collect()];
    for w in bytes.chunks(8) {
        let w: [u8; 8] = w.try_into().expect("8 bytes");
        out.extend(forms(u64::from_be_bytes(w)));
        out.extend(forms(u64::from_le_bytes(w)));
    }
    out
}

#[test]
fn the_exchange_key_never_shows_even_with_bypass_log_keys_1() {
    if !wants(true) {
        return in_child(
            "the_exchange_key_never_shows_even_with_bypass_log_keys_1",
            true,
        );
    }
    let bytes: [u8; 32] = std::array::from_fn(|i| 0xa0 ^ (i as u8 * 7));
    let key = ExchangeKey::from_bytes(bytes);
    let auth = ExchangeAuth::Psk(key.clone());
    for (name, text) in [
        ("ExchangeKey", format!("{key:?}")),
        ("ExchangeAuth", format!("{auth:?}")),
    ] {
        assert!(text.contains("<redacted>"), "{name}: {text}");
        // No number at all: a derived Debug would print the bytes one by one.
        assert!(!text.bytes().any(|b| b.is_ascii_digit()), "{name}: {text}");
        let toks = tokens(&text);
        for f in exchange_key_forms(&bytes) {
            // As a token, and (long enough not to match by chance) anywhere in the text.
            let inside = f.len() >= 8 && text.contains(&f);
            assert!(
                !toks.contains(&f.as_str()) && !inside,
                "{name} prints the key as {f}: {text}"
            );
        }
    }
}
