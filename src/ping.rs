//! `bypass ping`: two RC endpoints on simulated NICs walk RESET → INIT → RTR → RTS and
//! exchange a 1-byte SEND, printing each step as it happens; on failure, the step it stopped
//! at and the typed error's explanation. `--ramp` hands the run to `crate::ramp` (the staged
//! bring-up, also across two processes).
//!
//! Before the SEND, `crate::ping_probe` sends one message of the path MTU (and smaller ones
//! if it does not pass), so a hop with a small MTU is named, not just a RETRY_EXC.
//!
//! Owns: that command's options, its steps and their output. Must not build WQEs, touch the
//! device except through the verbs API, or hide an error's text (it is the point of the
//! command: a user sees where bring-up of a connection stops and why).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bypass_sim::net::{LinkSpec, Node, SwitchSpec, Topology};
use bypass_testbed::{Profile, SimContext, SimFabric};
use bypass_verbs::driver::qp_attr::Rtr2Rts;
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Completion, Context, Cq, MemoryPool, Pd, Qp, QpBuilder, QpEndpoint};
use clap::Args;

use crate::args::DeviceSpec;
use crate::device::DeviceError;

/// Options of `bypass ping`.
#[derive(Args, Debug)]
pub struct PingOpts {
    /// The device both endpoints use: `sim` puts two simulated NICs on one fabric.
    #[arg(short = 'd', long, default_value = "sim")]
    pub device: DeviceSpec,
    /// Seed of the simulated fabric (the same seed replays the same run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the fabric on an engine thread in real time instead of stepping it
    /// deterministically.
    #[arg(long)]
    pub threaded: bool,
    /// How long to wait for each completion, in milliseconds (1..=3600000: a zero wait
    /// could never see one).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    pub timeout_ms: u64,
    /// Troubleshooting demo: do not post the receive and give up after the first RNR NAK
    /// (rnr_retry 0), so the SEND completes with RNR_RETRY_EXC_ERR.
    #[arg(long)]
    pub no_recv: bool,
    /// Bring-up in stages instead of one ping: 1 the ping, 2 --qps QPs at once (WRITE+SEND
    /// each), 3 sizes doubling to --max-size (WRITE and READ back), 4 GPU memory; every
    /// byte checked. With -d udp:…, HOST makes this side the client, none the server.
    #[arg(long, conflicts_with = "no_recv")]
    pub ramp: bool,
    /// --ramp: how many RC QPs stage 2 opens at once.
    #[arg(long, default_value_t = 8, requires = "ramp", value_parser = clap::value_parser!(u32).range(1..=crate::ramp::MAX_QPS as i64))]
    pub qps: u32,
    /// --ramp: the largest message of stage 3 (K/M/G suffixes allowed).
    #[arg(long, default_value = "8M", requires = "ramp", value_parser = crate::args::parse_size)]
    pub max_size: u64,
    /// --ramp with -d udp:…: the server to connect to; without it this side is the server.
    #[arg(requires = "ramp")]
    pub host: Option<String>,
    /// --ramp with -d udp:…: TCP port of the control channel.
    #[arg(short = 'p', long, default_value_t = 18515, requires = "ramp")]
    pub port: u16,
    /// --ramp with -d udp:…: the pre-shared key of the control channel (both ends need the
    /// same file; `bypass exchange-key` makes one). Default as `perf`'s --key-file.
    #[arg(
        long,
        value_name = "PATH",
        requires = "ramp",
        conflicts_with = "plaintext"
    )]
    pub key_file: Option<std::path::PathBuf>,
    /// --ramp with -d udp:…: run the control channel unauthenticated, in clear (both ends
    /// must give it).
    #[arg(long, requires = "ramp")]
    pub plaintext: bool,
    /// Ethernet MTU of the simulated NICs' ports, A[,B] (bytes; the active path MTU follows
    /// from it as the kernel's `iboe_get_mtu` computes it).
    #[arg(long, default_value = "9000", value_parser = parse_mtus, conflicts_with = "ramp")]
    pub eth_mtu: (u32, u32),
    /// Troubleshooting demo: the NICs sit on two leaf switches joined through a spine by
    /// links of this MTU, which neither endpoint's port reports; the path probe finds and
    /// explains it (68..=9000 bytes, as an Ethernet MTU).
    #[arg(long, conflicts_with = "ramp", value_parser = clap::value_parser!(u32).range(68..=9000))]
    pub hop_mtu: Option<u32>,
}

/// The longest `--timeout-ms`: an hour.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// `A[,B]`: two Ethernet MTUs (68..=9000), one given for both.
fn parse_mtus(s: &str) -> Result<(u32, u32), String> {
    let one = |t: &str| {
        t.trim()
            .parse::<u32>()
            .ok()
            .filter(|m| (68..=9000).contains(m))
            .ok_or_else(|| format!("{t:?} is not an Ethernet MTU (68..=9000 bytes)"))
    };
    match s.split_once(',') {
        Some((a, b)) => Ok((one(a)?, one(b)?)),
        None => one(s).map(|m| (m, m)),
    }
}

/// A step that failed: where ping stopped and why.
#[derive(Debug, thiserror::Error)]
#[error("ping stopped at step {step} ({name}): {why}")]
pub struct PingError {
    /// The step number (1-based).
    pub step: usize,
    /// The step's name.
    pub name: &'static str,
    /// The error's text.
    pub why: String,
}

/// One side of the ping.
struct Side {
    name: &'static str,
    ctx: Arc<Context>,
    _pd: Pd,
    cq: Cq,
    pool: MemoryPool,
    qp: Qp,
}

/// Prints the steps as they run and numbers them.
struct Steps {
    n: usize,
}

impl Steps {
    /// Runs `f` as the next step: prints its name, then `ok` and what it returned, or
    /// returns the failure naming the step.
    fn run<T, E: std::fmt::Display>(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> Result<(T, String), E>,
    ) -> Result<T, PingError> {
        self.n += 1;
        print!("[{:>2}] {name:<34} ", self.n);
        let _ = std::io::stdout().flush();
        let t0 = Instant::now();
        match f() {
            Ok((v, detail)) => {
                println!("ok  {detail} ({} us)", t0.elapsed().as_micros());
                Ok(v)
            }
            Err(e) => {
                println!("FAILED");
                Err(PingError {
                    step: self.n,
                    name,
                    why: e.to_string(),
                })
            }
        }
    }
}

/// NIC A on leaf switch 0 and NIC B on leaf 1 (links of their Ethernet MTUs), the leaves
/// joined through a spine (switch 2) by links of MTU `hop`: a hop the endpoints cannot see.
fn hop_topology(eth_mtu: (u32, u32), hop: u32) -> Topology {
    let link = |mtu| LinkSpec {
        mtu,
        ..LinkSpec::default()
    };
    let mut t = Topology::new();
    let (l0, l1, spine) = (
        t.add_switch(SwitchSpec::default()),
        t.add_switch(SwitchSpec::default()),
        t.add_switch(SwitchSpec::default()),
    );
    t.connect(Node::Nic(0), Node::Switch(l0), link(eth_mtu.0))
        .connect(Node::Nic(1), Node::Switch(l1), link(eth_mtu.1))
        .connect(Node::Switch(l0), Node::Switch(spine), link(hop))
        .connect(Node::Switch(l1), Node::Switch(spine), link(hop));
    t
}

/// Runs the ping and prints every step.
pub fn run(opts: &PingOpts) -> Result<(), Box<dyn std::error::Error>> {
    if opts.ramp {
        return crate::ramp::run(&crate::ramp::RampOpts {
            device: opts.device.clone(),
            seed: opts.seed,
            threaded: opts.threaded,
            timeout_ms: opts.timeout_ms,
            qps: opts.qps,
            max_size: opts.max_size,
            host: opts.host.clone(),
            port: opts.port,
            auth: crate::exchange_key::AuthOpts {
                key_file: opts.key_file.clone(),
                plaintext: opts.plaintext,
            },
        });
    }
    match &opts.device {
        DeviceSpec::Vfio(_) | DeviceSpec::Udp(_) => {
            return Err(DeviceError::InProcessOnly {
                command: "ping",
                device: opts.device.to_string(),
            }
            .into());
        }
        DeviceSpec::Sim => {}
    }
    let timeout = Duration::from_millis(opts.timeout_ms);
    let mode = if opts.threaded { "threaded" } else { "stepped" };
    println!(
        "bypass ping: RC, 1-byte SEND between two simulated NICs ({mode} fabric, seed {})",
        opts.seed
    );
    let mut s = Steps { n: 0 };

    let fabric = if opts.threaded {
        SimFabric::threaded(opts.seed)
    } else {
        SimFabric::stepped(opts.seed)
    };
    if let Some(hop) = opts.hop_mtu {
        fabric.with_world(|w| w.set_topology(Some(&hop_topology(opts.eth_mtu, hop))))?;
    }
    let (ca, cb) = s.run("open devices", || {
        let open = |id: u8, mtu: u32| -> Result<Arc<Context>, bypass_verbs::VerbsError> {
            let mut p = Profile::with_id(id);
            if let Some(port) = p.ports.first_mut() {
                port.eth_mtu = mtu;
            }
            let dev = fabric
                .add_device(p)
                .map_err(bypass_verbs::driver::DriverError::from)?;
            Context::new(dev)
        };
        let a = open(1, opts.eth_mtu.0)?;
        let b = open(2, opts.eth_mtu.1)?;
        let mut detail = format!(
            "A={} gid {} fw {} Ethernet MTU {}, B={} gid {} Ethernet MTU {}",
            a.device_info().name,
            a.gid(1)?,
            a.device_info().fw_version,
            a.eth_mtu(1)?,
            b.device_info().name,
            b.gid(1)?,
            b.eth_mtu(1)?,
        );
        if let Some(hop) = opts.hop_mtu {
            detail.push_str(&format!(
                ", through leaf, spine and leaf switches whose uplinks carry MTU {hop}"
            ));
        }
        Ok::<_, bypass_verbs::VerbsError>(((a, b), detail))
    })?;

    let (mut a, mut b) = s.run("create PD, CQ, pool, RC QP (each)", || {
        let a = side("A", &ca)?;
        let b = side("B", &cb)?;
        let detail = format!(
            "A qpn {:#x} cqn {:#x}, B qpn {:#x} cqn {:#x}",
            a.qp.qpn(),
            a.cq.cqn(),
            b.qp.qpn(),
            b.cq.cqn()
        );
        Ok::<_, bypass_verbs::VerbsError>(((a, b), detail))
    })?;

    let (ea, eb) = s.run("exchange endpoints", || {
        let (ea, eb) = (a.qp.endpoint()?, b.qp.endpoint()?);
        let detail = format!("A {ea}, B {eb}");
        Ok::<_, bypass_verbs::VerbsError>(((ea, eb), detail))
    })?;
    if let Err(e) = a.qp.check_peer_mtu(&eb) {
        println!("     warning: {e}");
    }

    for side in [&mut a, &mut b] {
        let name = if side.name == "A" {
            "A: RESET -> INIT"
        } else {
            "B: RESET -> INIT"
        };
        s.run(name, || {
            side.qp.modify_to_init()?;
            Ok::<_, bypass_verbs::VerbsError>(((), format!("state {}", side.qp.state()?)))
        })?;
    }

    if !opts.no_recv {
        s.run("B: post a 1-byte receive", || {
            let lease = b.pool.lease(1)?;
            b.qp.post_recv(RecvWr::new(2, lease))?;
            Ok::<_, bypass_verbs::VerbsError>(((), "wr_id 2".to_owned()))
        })?;
    }

    connect_rtr(&mut s, &mut a, &eb, "A: INIT -> RTR")?;
    connect_rtr(&mut s, &mut b, &ea, "B: INIT -> RTR")?;
    connect_rts(&mut s, &mut a, opts.no_recv, "A: RTR -> RTS")?;
    connect_rts(&mut s, &mut b, opts.no_recv, "B: RTR -> RTS")?;

    let path_mtu = ca.active_mtu(1).map_or(ea.mtu, |m| m.min(eb.mtu));
    s.run("A -> B: probe the path MTU", || {
        crate::ping_probe::probe(&ca, &cb, path_mtu, timeout).map(|d| ((), d))
    })?;

    let t_send = Instant::now();
    s.run("A: post a 1-byte SEND", || {
        let mut lease = a.pool.lease(1)?;
        lease.as_mut_slice().fill(0x42);
        a.qp.post_send(SendWr::new(1, SendOp::Send).sge(lease))?;
        Ok::<_, bypass_verbs::VerbsError>(((), "wr_id 1, byte 0x42".to_owned()))
    })?;

    s.run("A: send completion", || {
        let c = wait_ok(&mut a, timeout)?;
        let detail = format!("wr_id {} {} {:?}", c.wr_id(), c.status(), c.opcode());
        a.qp.reclaim(c).map_err(|e| e.to_string())?;
        Ok::<_, String>(((), detail))
    })?;

    s.run("B: receive completion", || {
        let c = wait_ok(&mut b, timeout)?;
        let detail = format!(
            "wr_id {} {} {:?}, {} byte(s) from qpn {:#x}",
            c.wr_id(),
            c.status(),
            c.opcode(),
            c.byte_len(),
            c.src_qp(),
        );
        let got = b
            .qp
            .reclaim_lease(c)
            .map_err(|e| e.to_string())?
            .and_then(|l| l.as_slice().first().copied());
        match got {
            Some(0x42) => Ok(((), format!("{detail}, data 0x42"))),
            other => Err(format!(
                "{detail}, but the data is {other:?} instead of 0x42 (the payload was not delivered intact)"
            )),
        }
    })?;

    println!(
        "ping: ok, 1 byte A -> B in {} us (post to receive completion)",
        t_send.elapsed().as_micros()
    );
    Ok(())
}

fn side(name: &'static str, ctx: &Arc<Context>) -> Result<Side, bypass_verbs::VerbsError> {
    let pd = ctx.alloc_pd()?;
    let cq = Cq::new(ctx, 16)?;
    let pool = pd.create_pool(64, 4)?;
    let qp = QpBuilder::rc(&pd, &cq, &cq)
        .max_send_wr(4)
        .max_recv_wr(4)
        .build()?;
    Ok(Side {
        name,
        ctx: ctx.clone(),
        _pd: pd,
        cq,
        pool,
        qp,
    })
}

fn connect_rtr(
    s: &mut Steps,
    side: &mut Side,
    remote: &QpEndpoint,
    name: &'static str,
) -> Result<(), PingError> {
    s.run(name, || {
        side.qp.modify_to_rtr(remote)?;
        let mtu = side.ctx.active_mtu(1)?.min(remote.mtu);
        Ok::<_, bypass_verbs::VerbsError>((
            (),
            format!(
                "state {}, to qpn {:#x} psn {:#x} mtu {mtu}",
                side.qp.state()?,
                remote.qpn,
                remote.psn
            ),
        ))
    })
}

fn connect_rts(
    s: &mut Steps,
    side: &mut Side,
    no_rnr_retry: bool,
    name: &'static str,
) -> Result<(), PingError> {
    s.run(name, || {
        let mut attr = Rtr2Rts::new(side.qp.psn());
        if no_rnr_retry {
            attr.rnr_retry = 0;
        }
        side.qp.modify_to_rts_with(&attr)?;
        Ok::<_, bypass_verbs::VerbsError>((
            (),
            format!(
                "state {}, sq psn {:#x}, rnr_retry {}",
                side.qp.state()?,
                side.qp.psn(),
                attr.rnr_retry
            ),
        ))
    })
}

/// Waits for one completion on the side's CQ and turns a timeout or an error status into the
/// text the user sees.
fn wait_ok(side: &mut Side, timeout: Duration) -> Result<Completion, String> {
    match side.cq.wait(timeout) {
        Ok(Some(c)) if c.is_ok() => Ok(c),
        Ok(Some(c)) => Err(side.ctx.retry_exc_cause(side.qp.qpn()).map_or_else(
            || format!("wr_id {} completed with {}", c.wr_id(), c.status()),
            |e| format!("wr_id {} {e}", c.wr_id()),
        )),
        Ok(None) => Err(format!(
            "no completion on {}'s CQ within {} ms (the peer never answered: check both QPs reached RTR/RTS toward each other)",
            side.name,
            timeout.as_millis()
        )),
        Err(e) => Err(e.to_string()),
    }
}
