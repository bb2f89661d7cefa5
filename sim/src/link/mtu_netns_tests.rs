//! The UDP link against a route whose MTU is smaller than a packet, in a network namespace
//! the test makes for itself: `lo` with MTU 1500, a 2000-byte RoCE packet refused by the
//! kernel with `EMSGSIZE` (DF is set), counted as an MTU drop with the route's MTU read back,
//! and a small packet passing; the link's device profile takes `lo`'s MTU as its port's.
//!
//! Needs root (`unshare(CLONE_NEWNET)`) and iproute2 (`ip link set lo ...`); without them it
//! says so LOUDLY on stderr and skips. The namespace belongs to the test's own thread and
//! goes away with it (nothing is left on the host; its addresses are 127.0.23.x, port 23xxx).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use bypass_hw::roce::{
    BthFields, BthOpcode, DEFAULT_PKEY, ExtFields, IpSpec, PacketSpec, ROCE_V2_UDP_DPORT, UdpPorts,
    emit,
};

use super::UdpLink;
use crate::profile::Profile;

/// Skips, loudly, where a namespace cannot be made; under `BYPASS_REQUIRE_ORACLES=1` (as
/// `scripts/test.sh` runs) a skip is a failure.
fn skip(why: &str) {
    if std::env::var("BYPASS_REQUIRE_ORACLES").as_deref() == Ok("1") {
        panic!(
            "the UDP-link MTU test cannot run: {why} (BYPASS_REQUIRE_ORACLES=1 forbids skipping)"
        );
    }
    eprintln!("\n!!!!!!!! SKIPPED the UDP-link MTU test in a network namespace: {why} !!!!!!!!\n");
}

/// A RoCEv2 SEND ONLY of `len` payload bytes from 127.0.23.1 to 127.0.23.2.
fn packet(len: usize) -> Vec<u8> {
    let ip = IpSpec::from_gids(
        &Profile::ipv4_gid([127, 0, 23, 1]),
        &Profile::ipv4_gid([127, 0, 23, 2]),
    )
    .unwrap();
    let payload = vec![0x33u8; len];
    let spec = PacketSpec {
        ip,
        ports: UdpPorts {
            src: 0xc0de,
            dst: ROCE_V2_UDP_DPORT,
        },
        bth: BthFields {
            opcode: BthOpcode::RC_SEND_ONLY,
            pkey: DEFAULT_PKEY,
            dest_qp: 0x11,
            psn: 1,
            ..Default::default()
        },
        ext: ExtFields::default(),
        payload: &payload,
    };
    let mut buf = vec![0u8; spec.packet_len().unwrap()];
    emit(&spec, &mut buf).unwrap();
    buf
}

/// In a fresh network namespace (this thread's): `lo` up with MTU 1500, or why not.
fn enter_netns_with_lo_1500() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN)".into());
    }
    // SAFETY: unshare(2) with CLONE_NEWNET affects only the calling thread's network
    // namespace; no memory is passed.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        ));
    }
    // A child forked from this thread starts in its namespace.
    let out = std::process::Command::new("ip")
        .args(["link", "set", "dev", "lo", "mtu", "1500", "up"])
        .output()
        .map_err(|e| format!("running ip(8): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip link set lo mtu 1500 up: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

#[test]
fn emsgsize_on_a_1500_route_is_an_mtu_drop_with_the_routes_mtu() {
    let outcome = std::thread::spawn(|| -> Result<[u64; 6], String> {
        enter_netns_with_lo_1500()?;
        let port = 23_791;
        let at = |last: u8| SocketAddr::new(Ipv4Addr::new(127, 0, 23, last).into(), port);
        let mut b = UdpLink::bind(at(2)).map_err(|e| e.to_string())?;
        let mut a = UdpLink::bind(at(1)).map_err(|e| e.to_string())?;
        // 2000 bytes of payload: a 2048-byte IP packet, larger than the route's 1500.
        a.send(&mut packet(2000));
        a.send(&mut packet(100));
        let mut got = 0u64;
        for _ in 0..200 {
            b.fill_rx(64);
            b.deliver_rx(|_| got += 1);
            if got != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let c = a.counters();
        let g = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        if let Some(note) = c.mtu_note() {
            eprintln!("{note}");
        }
        Ok([
            g(&c.tx_mtu_drops),
            g(&c.route_mtu),
            g(&c.tx_errors),
            g(&c.tx_packets),
            got,
            u64::from(a.profile().ports[0].eth_mtu),
        ])
    })
    .join()
    .expect("the namespace thread");
    match outcome {
        Err(why) => skip(&why),
        Ok(counts) => {
            // One MTU drop (also a tx error) at route MTU 1500; the small one sent and
            // received; the device's port takes lo's MTU.
            assert_eq!(counts, [1, 1500, 1, 1, 1, 1500]);
        }
    }
}
