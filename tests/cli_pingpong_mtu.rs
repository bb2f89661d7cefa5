//! `bypass pingpong -m 4096` over a 1500-byte link: in a network namespace the test makes
//! (`lo` with MTU 1500), each side's port takes the link's MTU, says that path MTU 4096
//! needs an Ethernet MTU of 4192 and runs at 1024 instead, and the run completes.
//!
//! Needs root and iproute2 (`ip netns`); when `ip netns add` fails (not root, no iproute2)
//! it says so LOUDLY and skips. The
//! namespace is deleted when the test ends, also when it fails. Addresses 127.0.23.x, ports
//! 23xxx.

use std::process::{Command, Output, Stdio};

/// The namespace; dropping it deletes it.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn ip(args: &[&str]) -> Result<Output, String> {
    Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {args:?}: {e}"))
}

/// A namespace with `lo` up at MTU 1500, or why not.
fn netns() -> Result<Netns, String> {
    let ns = Netns(format!("bypass-mtu-{}", std::process::id()));
    let add = ip(&["netns", "add", &ns.0])?;
    if !add.status.success() {
        return Err(format!(
            "ip netns add: {}",
            String::from_utf8_lossy(&add.stderr)
        ));
    }
    let lo = ip(&[
        "netns", "exec", &ns.0, "ip", "link", "set", "lo", "mtu", "1500", "up",
    ])?;
    if !lo.status.success() {
        return Err(format!(
            "ip link set lo mtu 1500: {}",
            String::from_utf8_lossy(&lo.stderr)
        ));
    }
    Ok(ns)
}

#[test]
fn pingpong_at_4096_over_a_1500_link_explains_and_runs_at_1024() {
    let ns = match netns() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("\n!!!!!!!! SKIPPED pingpong over a 1500-byte link: {why} !!!!!!!!\n");
            return;
        }
    };
    let bin = env!("CARGO_BIN_EXE_bypass");
    let side = |last: u8, peer: Option<&str>| {
        let dev = format!("udp:127.0.23.{last}:23891");
        let mut args = vec![
            "netns", "exec", &ns.0, bin, "pingpong", "-d", &dev, "-p", "23892", "-m", "4096", "-s",
            "4096", "-n", "3",
        ];
        args.extend(peer);
        Command::new("ip")
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let server = side(1, None);
    // The server listens before the client's first try; the client retries its connect.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client = side(2, Some("127.0.23.1")).wait_with_output().unwrap();
    let server = server.wait_with_output().unwrap();
    for (name, o) in [("server", &server), ("client", &client)] {
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "{name} failed:\n{out}\n{err}");
        assert!(
            err.contains(
                "warning: -m 4096: path MTU 4096 needs an Ethernet MTU >= 4192 on every hop (RoCEv2 headers: 96 bytes); this port has 1500"
            ) && err.contains("running at path MTU 1024"),
            "{name}: {err}"
        );
        assert!(out.contains("3 iters in "), "{name}: {out}");
    }
}
