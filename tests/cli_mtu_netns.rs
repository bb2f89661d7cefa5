//! `bypass pingpong -m 4096` over a 1500-byte link: in a network namespace the test makes
//! (`lo` with MTU 1500), each side's port takes the link's MTU, says that path MTU 4096
//! needs an Ethernet MTU of 4192 and runs at 1024 instead, and the run completes.
//!
//! Needs root and iproute2 (`ip netns`); when `ip netns add` fails (not root, no iproute2)
//! it says so LOUDLY and skips. The
//! namespace is deleted when the test ends, also when it fails. Addresses 127.0.23.x, ports
//! 23xxx.

use std::process::{Command, Output, Stdio};

/// A namespace; dropping it deletes it.
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

/// Runs `ip ARGS`, or says why it failed.
fn ip_ok(args: &[&str]) -> Result<(), String> {
    let o = ip(args)?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// A new namespace named after `tag` and this process, with `lo` up.
fn new_ns(tag: &str) -> Result<Netns, String> {
    let ns = Netns(format!("bypass-mtu-{tag}-{}", std::process::id()));
    ip_ok(&["netns", "add", &ns.0])?;
    ip_ok(&["-n", &ns.0, "link", "set", "lo", "up"])?;
    Ok(ns)
}

/// A namespace with `lo` up at MTU 1500, or why not.
fn netns() -> Result<Netns, String> {
    let ns = new_ns("lo")?;
    ip_ok(&["-n", &ns.0, "link", "set", "lo", "mtu", "1500"])?;
    Ok(ns)
}

/// Two namespaces joined by a veth pair on 10.23.`net`.0/24 (.1 in the first, .2 in the
/// second) whose ends have MTUs `mtu_a` and `mtu_b`.
fn veth_pair(tag: &str, net: u8, mtu_a: u32, mtu_b: u32) -> Result<(Netns, Netns), String> {
    let (a, b) = (new_ns(&format!("{tag}a"))?, new_ns(&format!("{tag}b"))?);
    let (va, vb) = (format!("bm{tag}a"), format!("bm{tag}b"));
    ip_ok(&[
        "link", "add", &va, "netns", &a.0, "type", "veth", "peer", "name", &vb, "netns", &b.0,
    ])?;
    for (ns, dev, mtu, last) in [(&a, &va, mtu_a, 1), (&b, &vb, mtu_b, 2)] {
        let mtu = mtu.to_string();
        ip_ok(&["-n", &ns.0, "link", "set", dev, "mtu", &mtu, "up"])?;
        let addr = format!("10.23.{net}.{last}/24");
        ip_ok(&["-n", &ns.0, "addr", "add", &addr, "dev", dev])?;
    }
    Ok((a, b))
}

/// Starts `bypass ARGS` in namespace `ns`.
fn spawn_in(ns: &Netns, args: &[&str]) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_bypass")])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Skips, loudly, where namespaces cannot be made; under `BYPASS_REQUIRE_ORACLES=1` (as
/// `scripts/test.sh` runs) a skip is a failure.
fn skip(what: &str, why: &str) {
    if std::env::var("BYPASS_REQUIRE_ORACLES").as_deref() == Ok("1") {
        panic!("{what} cannot run: {why} (BYPASS_REQUIRE_ORACLES=1 forbids skipping)");
    }
    eprintln!("\n!!!!!!!! SKIPPED {what}: {why} !!!!!!!!\n");
}

#[test]
fn pingpong_at_4096_over_a_1500_link_explains_and_runs_at_1024() {
    let ns = match netns() {
        Ok(ns) => ns,
        Err(why) => return skip("pingpong over a 1500-byte link", &why),
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

#[test]
fn perf_between_a_9000_and_a_1500_port_names_both_mtus() {
    let (a, b) = match veth_pair("pf", 1, 9000, 1500) {
        Ok(p) => p,
        Err(why) => return skip("perf across a 9000/1500 veth pair", &why),
    };
    let server = spawn_in(
        &a,
        &[
            "perf",
            "write-bw",
            "-d",
            "udp:10.23.1.1:23991",
            "-p",
            "23992",
            "-n",
            "20",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client = spawn_in(
        &b,
        &[
            "perf",
            "write-bw",
            "-d",
            "udp:10.23.1.2:23991",
            "-p",
            "23992",
            "-n",
            "20",
            "10.23.1.1",
        ],
    )
    .wait_with_output()
    .unwrap();
    let server = server.wait_with_output().unwrap();
    for (name, o, mine, peer) in [
        ("server", &server, 4096, 1024),
        ("client", &client, 1024, 4096),
    ] {
        let (out, err) = text(o);
        assert!(o.status.success(), "{name} failed:\n{out}\n{err}");
        let want = format!("this end's port carries path MTU {mine}, the peer's {peer}");
        assert!(
            err.contains(&want) && err.contains("or connect at path MTU 1024 on purpose"),
            "{name}: {err}"
        );
    }
}

#[test]
fn pingpong_over_a_route_below_its_interfaces_mtu_names_the_emsgsize_drops() {
    let (a, b) = match veth_pair("rt", 2, 9000, 9000) {
        Ok(p) => p,
        Err(why) => return skip("pingpong over a 1500-byte route", &why),
    };
    // The interface says 9000 (so the port does too), the route to the peer 1500.
    if let Err(why) = ip_ok(&[
        "-n",
        &a.0,
        "route",
        "replace",
        "10.23.2.0/24",
        "dev",
        "bmrta",
        "mtu",
        "1500",
        "src",
        "10.23.2.1",
    ]) {
        return skip("pingpong over a 1500-byte route", &why);
    }
    let args = |dev: &'static str| {
        vec![
            "pingpong", "-d", dev, "-p", "23994", "-m", "4096", "-s", "4096", "-n", "3",
        ]
    };
    let mut server = spawn_in(&b, &args("udp:10.23.2.2:23993"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut c_args = args("udp:10.23.2.1:23993");
    c_args.push("10.23.2.2");
    let client = spawn_in(&a, &c_args).wait_with_output().unwrap();
    // The server waits for sends that never come; it is this test's own child.
    let _ = server.kill();
    let _ = server.wait();
    let (out, err) = text(&client);
    assert!(
        !client.status.success(),
        "the client cannot succeed:\n{out}\n{err}"
    );
    for want in [
        "and packets were dropped for their size",
        "refused by the kernel as larger than the route's MTU 1500 (EMSGSIZE)",
        "the route carries path MTU 1024 at most",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}
