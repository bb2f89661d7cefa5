//! `bypass ping --ramp`: bring-up in four stages, each proving more than the last — 1: the
//! 1-byte RC ping; 2: N QPs at once, each a WRITE and a SEND, every byte checked; 3: message
//! sizes doubling up to `--max-size`, WRITE and READ back, every byte checked; 4: GPU memory
//! (in process, when a GPU is there; else skipped, saying why). One line per stage; the first failure stops
//! with its stage, step and the explained error.
//!
//! Owns: the ramp's forms — in-process (`-d sim`: A and B on one fabric), and two processes
//! (`-d udp:…`: the server without HOST is B, the client with HOST is A, requests over TCP
//! port `-p`, authenticated and encrypted under the exchange key unless both sides give
//! `--plaintext`) — and [`RampError`]. Must not post or check anything itself (`stages` for A,
//! `responder` for B) nor change plain `ping`'s steps.

pub mod end;
mod gpu;
mod responder;
mod stages;
mod wire;

use std::net::TcpListener;
use std::time::Duration;

use bypass_testbed::{SimContext, SimFabric};
use bypass_verbs::Context;

use crate::args::DeviceSpec;
use crate::device::{DeviceError, open_net};
use end::End;
pub use end::MAX_QPS;
use responder::Responder;
use stages::{Fail, Peer, Plan, run_stages};
use wire::{Channel, Reply, Request};

use crate::exchange_key::AuthOpts;
use bypass_verbs::exchange::{ExchangeAuth, ExchangeError};

/// How long the control channel waits for the other side (connect, and each request).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the ramp stopped, and why.
#[derive(Debug, thiserror::Error)]
#[error("ping --ramp stopped at stage {stage} ({name}), step \"{step}\": {why}")]
pub struct RampError {
    /// The stage (1-based).
    pub stage: u8,
    /// Its name.
    pub name: &'static str,
    /// The step that failed (`A: …` this side, `B: …` the peer).
    pub step: String,
    /// The explained error.
    pub why: String,
}

fn setup(step: &str) -> impl FnOnce(String) -> RampError + '_ {
    move |why| RampError {
        stage: 1,
        name: "ping",
        step: step.to_owned(),
        why,
    }
}

/// B in this process.
impl Peer for Responder {
    fn call(&mut self, req: &Request) -> Result<Reply, Fail> {
        Ok(self.handle(req))
    }
}

/// B behind the control channel.
struct Remote(Channel);

impl Peer for Remote {
    fn call(&mut self, req: &Request) -> Result<Reply, Fail> {
        let err = |e: ExchangeError| ("control channel".to_owned(), e.to_string());
        self.0.send(req).map_err(err)?;
        self.0.recv().map_err(err)
    }
}

/// What `ping --ramp` was asked to do (its options, from `ping`'s command line).
#[derive(Debug, Clone)]
pub struct RampOpts {
    /// The device: `sim` (both ends here) or `udp:…` (one end; HOST selects which).
    pub device: DeviceSpec,
    /// Fabric seed.
    pub seed: u64,
    /// In-process: run the fabric on an engine thread.
    pub threaded: bool,
    /// How long each wait for a completion may take, in milliseconds.
    pub timeout_ms: u64,
    /// Stage 2's QP count.
    pub qps: u32,
    /// Stage 3's largest message.
    pub max_size: u64,
    /// Two-process form: the server (none: this side serves).
    pub host: Option<String>,
    /// Two-process form: the control channel's TCP port.
    pub port: u16,
    /// Two-process form: how the control channel is protected.
    pub auth: AuthOpts,
}

/// Runs `ping --ramp` in the form `-d` and HOST select.
pub fn run(opts: &RampOpts) -> Result<(), Box<dyn std::error::Error>> {
    let plan = Plan {
        qps: opts.qps,
        max_size: opts.max_size,
    };
    let timeout = Duration::from_millis(opts.timeout_ms);
    match (&opts.device, &opts.host) {
        (DeviceSpec::Sim, Some(_)) => Err(DeviceError::NeedsNetwork {
            command: "ping --ramp HOST",
            device: opts.device.to_string(),
        }
        .into()),
        (DeviceSpec::Sim, None) => {
            let mode = if opts.threaded { "threaded" } else { "stepped" };
            println!(
                "bypass ping --ramp: A and B on two simulated NICs ({mode} fabric, seed {}), {} QPs, sizes up to {}",
                opts.seed,
                plan.qps,
                end::human(plan.max_size)
            );
            let fabric = if opts.threaded {
                SimFabric::threaded(opts.seed)
            } else {
                SimFabric::stepped(opts.seed)
            };
            let open = |id| Context::open_sim(&fabric, id).map_err(|e| e.to_string());
            let (ca, cb) = (
                open(1).map_err(setup("open devices"))?,
                open(2).map_err(setup("open devices"))?,
            );
            let mut a =
                End::new("A", &ca, timeout).map_err(|e| setup("A: PD, CQ, pool")(e.to_string()))?;
            let mut b = Responder::new(&cb, timeout)
                .map_err(|e| setup("B: PD, CQ, pool")(e.to_string()))?;
            let ran = run_stages(&mut a, &mut b, &plan, || gpu::in_process(&ca, &cb, timeout))?;
            println!("ping --ramp: ok, {}", summary(ran));
            Ok(())
        }
        (_, host) => {
            let auth = opts
                .auth
                .auth()
                .map_err(|e| setup("load the control channel's key")(e.to_string()))?;
            let dev = open_net(&opts.device, opts.seed, "ping --ramp", None)?;
            match host {
                Some(h) => {
                    println!(
                        "bypass ping --ramp: A on {} ({}), client of {h}:{}, {} QPs, sizes up to {}",
                        opts.device,
                        dev.ctx.device_info().name,
                        opts.port,
                        plan.qps,
                        end::human(plan.max_size)
                    );
                    let chan = Channel::connect((h.as_str(), opts.port), &auth, CONTROL_TIMEOUT)
                        .map_err(|e| setup("connect to the server")(e.to_string()))?;
                    let mut a = End::new("A", &dev.ctx, timeout)
                        .map_err(|e| setup("A: PD, CQ, pool")(e.to_string()))?;
                    let mut peer = Remote(chan);
                    if let Err(e) = run_stages(&mut a, &mut peer, &plan, || Ok(gpu::two_process()))
                    {
                        // Tell the server where and why, so its output says it too.
                        let _ = peer.call(&Request::Abort {
                            stage: e.stage,
                            step: e.step.clone(),
                            why: e.why.clone(),
                        });
                        return Err(e.into());
                    }
                    // The server's answer to Bye is only a courtesy: the stages are done.
                    let _ = peer.call(&Request::Bye);
                    println!("ping --ramp: ok, {}", summary(false));
                    if let Some(s) = dev.link_summary() {
                        eprintln!("{s}");
                    }
                    Ok(())
                }
                None => serve(&dev.ctx, opts.port, &auth, timeout),
            }
        }
    }
}

/// The closing line's account of the stages.
fn summary(gpu_ran: bool) -> &'static str {
    if gpu_ran {
        "stages 1-4 passed"
    } else {
        "stages 1-3 passed, stage 4 skipped"
    }
}

/// The stage a request belongs to (`Connect` belongs to the last one prepared).
fn stage_of(req: &Request, last: (u8, &'static str)) -> (u8, &'static str) {
    match req {
        Request::PingPrepare | Request::PingCheck => (1, "ping"),
        Request::QpsPrepare { .. } | Request::QpsCheck => (2, "qps"),
        Request::SizesPrepare { .. } | Request::SizesCheck { .. } => (3, "sizes"),
        Request::Abort { stage: 1, .. } => (1, "ping"),
        Request::Abort { stage: 2, .. } => (2, "qps"),
        Request::Abort { stage: 3, .. } => (3, "sizes"),
        Request::Connect { .. } | Request::Abort { .. } | Request::Bye => last,
    }
}

/// B as a server: one client, its requests answered in turn until `Bye`.
fn serve(
    ctx: &std::sync::Arc<Context>,
    port: u16,
    auth: &ExchangeAuth,
    timeout: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        setup("listen for the client")(format!(
            "binding TCP port {port}: {e} (another server on it? pick another -p)"
        ))
    })?;
    println!(
        "bypass ping --ramp (server): B on {}, waiting for a client on TCP port {port}",
        ctx.device_info().name
    );
    let mut chan = Channel::accept(listener, auth, CONTROL_TIMEOUT)
        .map_err(|e| setup("wait for the client")(e.to_string()))?;
    let mut b =
        Responder::new(ctx, timeout).map_err(|e| setup("B: PD, CQ, pool")(e.to_string()))?;
    let mut stage = (1, "ping");
    loop {
        let req: Request = chan.recv().map_err(|e| RampError {
            stage: stage.0,
            name: stage.1,
            step: "control channel".to_owned(),
            why: e.to_string(),
        })?;
        stage = stage_of(&req, stage);
        let reply = b.handle(&req);
        chan.send(&reply)
            .map_err(|e| setup("control channel")(e.to_string()))?;
        match (&req, reply) {
            (Request::Bye, _) => break,
            (Request::Abort { step, why, .. }, _) => {
                println!(
                    "stage {} {:<6}FAILED at the client's step {step}",
                    stage.0, stage.1
                );
                return Err(RampError {
                    stage: stage.0,
                    name: stage.1,
                    step: format!("(client) {step}"),
                    why: why.clone(),
                }
                .into());
            }
            (_, Reply::Done { detail }) if !matches!(req, Request::Connect { .. }) => {
                println!("stage {} {:<6}ok  {detail}", stage.0, stage.1);
            }
            (_, Reply::Failed { step, why }) => {
                println!("stage {} {:<6}FAILED at step {step}", stage.0, stage.1);
                return Err(RampError {
                    stage: stage.0,
                    name: stage.1,
                    step,
                    why,
                }
                .into());
            }
            _ => {}
        }
    }
    println!("ping --ramp (server): ok, the client finished every stage");
    Ok(())
}
