//! `bypass pingpong`: rdma-core's `ibv_rc_pingpong`, on a simulated NIC whose wire is a UDP
//! socket, interoperable with the real tool on a Linux rxe (or any RoCEv2) peer.
//!
//! The protocol is `libibverbs/examples/rc_pingpong.c`'s: both sides post `rx_depth`
//! receives and swap `"%04x:%06x:%06x:%s"` (lid:qpn:psn:gid) over TCP port `-p` (18515); the
//! server connects its QP *before* answering (`pp_server_exch_dest`), the client answers with
//! `"done"` and connects after. The client posts the first SEND; each side posts its next SEND
//! once its last SEND and a RECV completed (`parse_single_wc`), refills receives when one or
//! fewer are left, and stops after `iters` of each. QP attributes: `-m` (1024), RTR/RTS as
//! `pp_connect_ctx` (timeout 14, or `-u`; retry 7, RNR retry 7), PSN `lrand48() & 0xffffff`. Output:
//! the address lines, then `bytes` (size × iters × 2) and usec/iter, in the same formats.
//!
//! That exchange is a wire standard, so it stays as it is: unauthenticated plaintext, the
//! QPN, PSN and GID readable and forgeable on the path. Every run says so on stderr
//! ([`PLAINTEXT_WARNING`]); bypass's own two-process commands (`perf`) authenticate and
//! encrypt theirs.
//!
//! The server's exchange has one deadline for all of it ([`TIMEOUT`], each read bounded by
//! what is left), so a client that trickles bytes cannot hold it longer; a client that
//! closes early is said as such, and `-p 0` prints the port the OS chose.
//!
//! Owns: the command's options, its out-of-band exchange as a server (the client side is
//! `bypass_verbs::exchange::exchange_pingpong_as_client`), the ping-pong loop and its output.
//! Must not build WQEs or touch the device except through the verbs API.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bypass_verbs::driver::qp_attr::Rtr2Rts;
use bypass_verbs::exchange::{PINGPONG_MSG_LEN, exchange_pingpong_as_client};
use bypass_verbs::wr::{RecvWr, SendOp, SendWr};
use bypass_verbs::{Completion, Cq, Mtu, QpBuilder, QpEndpoint, VerbsError};
use clap::Args;

use crate::args::{DeviceSpec, parse_size};
use crate::device::{DeviceError, open_net};

/// `PINGPONG_SEND_WRID` of rc_pingpong.
const SEND_WRID: u64 = 1;
/// `PINGPONG_RECV_WRID` of rc_pingpong.
const RECV_WRID: u64 = 2;
/// The byte rc_pingpong fills its buffer with (`memset(ctx->buf, 0x7b, size)`).
const FILL: u8 = 0x7b;
/// What every run prints on stderr before its exchange.
pub const PLAINTEXT_WARNING: &str = "warning: the ibv_rc_pingpong exchange is unauthenticated plaintext (its wire format): anyone on the path can read and forge the QPN, PSN and GID; use it on trusted networks only";

/// How long the exchange and each wait for a completion may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The most buffer memory a run registers: (`-r` + 2) buffers of `-s` bytes.
const MAX_BUFFER_BYTES: u64 = 4 << 30;
/// How long nothing may complete while packets are dropped for their size before the run
/// gives up (a retry of a packet too large for a hop is dropped again).
const MTU_STALL: Duration = Duration::from_secs(2);

/// Options of `bypass pingpong` (`ibv_rc_pingpong`'s, where they apply).
#[derive(Args, Debug)]
pub struct PingpongOpts {
    /// The server to connect to; without it, this side is the server and waits for a client.
    pub host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// The device: `udp:ADDR[:PORT]` (a simulated NIC on a UDP socket bound to ADDR).
    #[arg(
        short = 'd',
        long = "ib-dev",
        visible_alias = "device",
        default_value = "sim"
    )]
    pub device: DeviceSpec,
    /// The port of the device (the sim NIC has one: 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=1))]
    pub ib_port: u8,
    /// Size of each message (K/M suffixes allowed).
    #[arg(short = 's', long, default_value = "4096", value_parser = parse_size)]
    pub size: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Receives kept posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500, value_parser = clap::value_parser!(u32).range(2..=8192))]
    pub rx_depth: u32,
    /// Exchanges (each: one SEND each way).
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Service level (accepted for compatibility; RoCEv2 on the sim does not use it).
    #[arg(short = 'l', long, default_value_t = 0)]
    pub sl: u8,
    /// Sleep on CQ events (the completion interrupt) instead of busy-polling.
    #[arg(short = 'e', long)]
    pub events: bool,
    /// Local GID index (the device on a UDP link has one GID: index 0, its address).
    #[arg(short = 'g', long = "gid-idx", default_value_t = 0)]
    pub gid_idx: u8,
    /// Check every received message: its length and that it is rc_pingpong's fill (0x7b).
    #[arg(short = 'c', long)]
    pub chk: bool,
    /// Record every packet the UDP link sends and receives in this pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Seed of the simulated NIC's fabric.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The QP's local ACK timeout: 4.096 us × 2^N before a request is resent (perftest's
    /// `-u`; ibv_rc_pingpong's is 14, about 67 ms). A peer much slower than that to
    /// acknowledge (Soft-RoCE on an emulated guest) needs a larger one.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
}

/// Why a pingpong failed.
#[derive(Debug, thiserror::Error)]
pub enum PingpongError {
    /// The device could not be opened.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A verbs call failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The exchange failed.
    #[error(transparent)]
    Exchange(#[from] bypass_verbs::exchange::ExchangeError),
    /// HOST does not resolve.
    #[error(transparent)]
    Resolve(#[from] crate::resolve::ResolveError),
    /// The client did not send its address within the exchange's deadline.
    #[error(
        "out-of-band exchange (server, port {port}): the client did not send its whole address within {timeout:?}: it is not an ibv_rc_pingpong client, or its network is too slow; restart the server and then the client"
    )]
    ClientTooSlow {
        /// The TCP port.
        port: u16,
        /// The whole exchange's deadline.
        timeout: Duration,
    },
    /// The client closed the connection before its address was read.
    #[error(
        "out-of-band exchange (server, port {port}): the client closed the connection after {got} of the {PINGPONG_MSG_LEN} bytes of its address: it probably failed on its side; read its error"
    )]
    ClientClosed {
        /// The TCP port.
        port: u16,
        /// Bytes of the address that arrived.
        got: usize,
    },
    /// An option is out of range.
    #[error("{0}")]
    Usage(String),
    /// The server's side of the exchange failed.
    #[error("out-of-band exchange (server, port {port}) failed while {step}: {source}")]
    Server {
        /// The TCP port.
        port: u16,
        /// What it was doing.
        step: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The client's message did not parse.
    #[error("the client's ibv_rc_pingpong message is malformed: {0}")]
    BadMessage(String),
    /// A completion came back with an error.
    #[error(
        "Failed status {status} for wr_id {wr_id} (after {scnt} sends and {rcnt} receives): {cause}"
    )]
    Completion {
        /// The status with its explanation.
        status: String,
        /// What the counters say caused it: packets dropped for their size (the port's or
        /// the UDP route's MTU), or else where to look.
        cause: String,
        /// The work request.
        wr_id: u64,
        /// SENDs completed.
        scnt: u32,
        /// RECVs completed.
        rcnt: u32,
    },
    /// Nothing completed for [`MTU_STALL`] while packets were dropped for their size: each
    /// retry is dropped the same way, so waiting longer cannot help.
    #[error(
        "no completion for {after:?} (after {scnt} sends and {rcnt} receives), and packets were dropped for their size: {cause}"
    )]
    MtuStalled {
        /// How long nothing completed.
        after: Duration,
        /// SENDs completed.
        scnt: u32,
        /// RECVs completed.
        rcnt: u32,
        /// The MTU drops, explained.
        cause: String,
    },
    /// Nothing completed for too long.
    #[error(
        "no completion for {0:?} (after {1} sends and {2} receives): the peer is gone or its packets do not reach this host (check the address, the UDP port and the firewall)"
    )]
    Stalled(Duration, u32, u32),
    /// A message was not what the peer sent.
    #[error("receive {n}: {why}")]
    BadData {
        /// Which receive.
        n: u32,
        /// What was wrong.
        why: String,
    },
}

/// A PSN as rc_pingpong draws it (`lrand48() & 0xffffff`): from the clock and the pid.
fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = (t ^ u64::from(std::process::id()).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 40) as u32) & 0x00ff_ffff
}

/// The address line (`"  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s"`),
/// the GID written as `inet_ntop(AF_INET6)` does.
fn address_line(label: &str, ep: &QpEndpoint) -> String {
    format!(
        "  {label} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        ep.lid,
        ep.qpn,
        ep.psn,
        ep.gid.to_ipv6()
    )
}

/// Runs `bypass pingpong`.
pub fn run(o: &PingpongOpts) -> Result<(), PingpongError> {
    let mtu = Mtu::from_bytes(o.mtu).ok_or_else(|| {
        PingpongError::Usage(format!(
            "-m {}: the path MTU is one of 256, 512, 1024, 2048, 4096",
            o.mtu
        ))
    })?;
    if o.gid_idx != 0 {
        return Err(PingpongError::Usage(format!(
            "-g {}: this device has one GID, index 0 (its UDP address); the peer's index is the peer's business",
            o.gid_idx
        )));
    }
    let size = usize::try_from(o.size)
        .ok()
        .filter(|&s| s > 0 && s <= 1 << 30)
        .ok_or_else(|| PingpongError::Usage(format!("-s {}: give 1 byte to 1 GiB", o.size)))?;
    // Every receive holds a buffer of -s bytes, plus two SEND buffers: bounded before any
    // memory is asked for.
    let total = o.size.saturating_mul(u64::from(o.rx_depth) + 2);
    if total > MAX_BUFFER_BYTES {
        return Err(PingpongError::Usage(format!(
            "-s {} × -r {}: the receives and sends keep {} MiB of buffers registered, more than the {} MiB allowed: give a smaller -s or -r",
            o.size,
            o.rx_depth,
            total >> 20,
            MAX_BUFFER_BYTES >> 20
        )));
    }
    // HOST is resolved before anything starts, so a bad name is reported by that name.
    let server = match &o.host {
        Some(host) => Some(crate::resolve::resolve(host, o.port)?),
        None => None,
    };
    let dev = open_net(&o.device, o.seed, "pingpong", o.pcap.as_deref())?;
    let ctx = dev.ctx.clone();
    let pd = ctx.alloc_pd()?;
    let mut cq = Cq::new(&ctx, o.rx_depth + 1)?;
    // Receives, plus one SEND buffer in flight and one being filled.
    let pool = pd.create_pool(size, o.rx_depth as usize + 2)?;
    let mut qp = QpBuilder::rc(&pd, &cq, &cq)
        .max_send_wr(2)
        .max_recv_wr(o.rx_depth)
        .max_send_sge(1)
        .max_recv_sge(1)
        .psn(random_psn())
        .build()?;
    // pp_init_ctx: the QP goes to INIT before the receives are posted.
    qp.modify_to_init()?;
    let mut routs = 0u32;
    for _ in 0..o.rx_depth {
        qp.post_recv(RecvWr::new(RECV_WRID, pool.lease(size)?))?;
        routs += 1;
    }
    let mut local = qp.endpoint()?;
    if mtu > local.mtu {
        // rc_pingpong's message carries no MTU: both ends take -m. A port that cannot carry
        // it runs at its own (the smaller), and says why.
        let why = bypass_verbs::driver::hw::roce::mtu::TooLarge {
            path_mtu: mtu.bytes(),
            eth_mtu: ctx.eth_mtu(1)?,
        };
        eprintln!(
            "warning: -m {mtu}: {why}; running at path MTU {}",
            local.mtu
        );
    }
    local.mtu = mtu;
    println!("{}", address_line("local address: ", &local));
    let rts = Rtr2Rts {
        timeout: o.qp_timeout,
        ..Rtr2Rts::new(local.psn)
    };

    eprintln!("{PLAINTEXT_WARNING}");
    let remote = match &server {
        Some(addrs) => {
            let remote = exchange_pingpong_as_client(addrs.as_slice(), &local, mtu, TIMEOUT)?;
            qp.modify_to_rtr(&remote)?;
            qp.modify_to_rts_with(&rts)?;
            remote
        }
        None => serve_exchange(o.port, &local, mtu, |remote| {
            qp.modify_to_rtr(remote)?;
            qp.modify_to_rts_with(&rts)
        })?,
    };
    println!("{}", address_line("remote address:", &remote));

    let mut pending = RECV_WRID;
    let send = |qp: &mut bypass_verbs::Qp| -> Result<(), VerbsError> {
        let mut lease = pool.lease(size)?;
        lease.as_mut_slice().fill(FILL);
        qp.post_send(SendWr::new(SEND_WRID, SendOp::Send).sge(lease))
    };
    if o.host.is_some() {
        send(&mut qp)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut last = Instant::now();
    let mut mtu_checked = Instant::now();
    while rcnt < o.iters || scnt < o.iters {
        let c = if o.events {
            cq.wait(Duration::from_millis(100))?
        } else {
            cq.poll_one()
        };
        let Some(c) = c else {
            if last.elapsed() > TIMEOUT {
                return Err(PingpongError::Stalled(TIMEOUT, scnt, rcnt));
            }
            if last.elapsed() > MTU_STALL && mtu_checked.elapsed() > Duration::from_millis(500) {
                mtu_checked = Instant::now();
                if let Some(cause) = mtu_cause(&dev, qp.qpn()) {
                    return Err(PingpongError::MtuStalled {
                        after: last.elapsed(),
                        scnt,
                        rcnt,
                        cause,
                    });
                }
            }
            // Busy-poll: pump the link in this thread (read the socket, run the NIC, send
            // what it answers), and let other threads have the core when cores are few.
            if !o.events {
                ctx.progress();
            }
            std::thread::yield_now();
            continue;
        };
        last = Instant::now();
        let wr_id = c.wr_id();
        check_ok(&c, scnt, rcnt, || mtu_cause(&dev, qp.qpn()))?;
        match wr_id {
            SEND_WRID => {
                scnt += 1;
                qp.reclaim(c)?;
            }
            _ => {
                let len = c.byte_len() as usize;
                let lease = qp.reclaim_lease(c)?;
                if o.chk {
                    check_data(lease.as_ref().map(|l| l.as_slice()), len, size, rcnt)?;
                }
                routs -= 1;
                // Refill (rc_pingpong: when one or fewer are left); reuse the buffer.
                if let Some(l) = lease {
                    qp.post_recv(RecvWr::new(RECV_WRID, l))?;
                    routs += 1;
                }
                while routs < o.rx_depth && routs <= 1 {
                    qp.post_recv(RecvWr::new(RECV_WRID, pool.lease(size)?))?;
                    routs += 1;
                }
                rcnt += 1;
            }
        }
        pending &= !wr_id;
        if scnt < o.iters && pending == 0 {
            send(&mut qp)?;
            pending = RECV_WRID | SEND_WRID;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size * u64::from(o.iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / f64::from(o.iters)
    );
    // Let the last ACKs leave before the device goes away (rc_pingpong tears down at once
    // too; the peer has already counted its completions).
    std::thread::sleep(Duration::from_millis(20));
    if let Some(line) = dev.link_summary() {
        eprintln!("{line}");
    }
    drop((qp, cq, pool, pd));
    Ok(())
}

/// Packets of QP `qpn` dropped for their size, explained: by the NIC's port
/// (`tx_mtu_drops`, [`SimContext::retry_exc_cause`]) or refused by the kernel on the UDP
/// route (`EMSGSIZE`, with the route's MTU).
fn mtu_cause(dev: &crate::device::NetDevice, qpn: u32) -> Option<String> {
    use bypass_testbed::SimContext;
    dev.ctx
        .retry_exc_cause(qpn)
        .map(|e| e.to_string())
        .or_else(|| dev.link.as_ref().and_then(|l| l.mtu_note()))
}

fn check_ok(
    c: &Completion,
    scnt: u32,
    rcnt: u32,
    mtu_cause: impl FnOnce() -> Option<String>,
) -> Result<(), PingpongError> {
    if c.is_ok() {
        return Ok(());
    }
    let cause = mtu_cause().unwrap_or_else(|| {
        "the peer stopped answering or refused the QP; read its output".to_owned()
    });
    Err(PingpongError::Completion {
        cause,
        status: c.status().to_string(),
        wr_id: c.wr_id(),
        scnt,
        rcnt,
    })
}

fn check_data(got: Option<&[u8]>, len: usize, size: usize, n: u32) -> Result<(), PingpongError> {
    let bad = |why: String| Err(PingpongError::BadData { n, why });
    if len != size {
        return bad(format!("{len} bytes arrived, the message size is {size}"));
    }
    match got.and_then(|b| b.get(..len)) {
        Some(b) => match b.iter().position(|&x| x != FILL) {
            None => Ok(()),
            Some(i) => bad(format!("byte {i} is {:#04x}, not {FILL:#04x}", b[i])),
        },
        None => bad("the receive buffer did not come back".into()),
    }
}

/// The server's side of the exchange, as `pp_server_exch_dest`: accept one client, read its
/// message, `connect` to it, send ours, read its `"done"`.
fn serve_exchange(
    port: u16,
    local: &QpEndpoint,
    mtu: Mtu,
    connect: impl FnOnce(&QpEndpoint) -> Result<(), VerbsError>,
) -> Result<QpEndpoint, PingpongError> {
    let err = |step| move |source| PingpongError::Server { port, step, source };
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(err(
            "listening (is another pingpong server running on this port?)",
        ))?;
    if port == 0 {
        // The port the OS chose is the only way a client can find this server.
        let bound = listener
            .local_addr()
            .map_err(err("reading the bound port"))?;
        println!("  listening on TCP port {}", bound.port());
    }
    let (mut s, _): (TcpStream, _) = listener.accept().map_err(err("accepting the client"))?;
    // One deadline for the whole exchange, not one per read: a client trickling a byte at a
    // time cannot hold the server past TIMEOUT.
    let deadline = Instant::now() + TIMEOUT;
    let mut msg = [0u8; PINGPONG_MSG_LEN];
    let got = match read_full(&mut s, &mut msg, deadline) {
        Ok(got) => got,
        Err(e) if is_timeout(&e) => {
            return Err(PingpongError::ClientTooSlow {
                port,
                timeout: TIMEOUT,
            });
        }
        Err(e) => return Err(err("reading the client's address")(e)),
    };
    if got < msg.len() {
        return Err(PingpongError::ClientClosed { port, got });
    }
    let text = std::str::from_utf8(&msg)
        .map_err(|_| PingpongError::BadMessage("it is not text".into()))?;
    let remote = QpEndpoint::parse_pingpong(text, mtu)
        .map_err(|e| PingpongError::BadMessage(e.to_string()))?;
    connect(&remote)?;
    let mut out = [0u8; PINGPONG_MSG_LEN];
    for (d, b) in out.iter_mut().zip(local.to_string().bytes()) {
        *d = b;
    }
    let left = left_until(deadline).map_err(err("sending our address"))?;
    s.set_write_timeout(Some(left))
        .map_err(err("setting a timeout"))?;
    s.write_all(&out).map_err(err("sending our address"))?;
    // "done" plus its NUL; a client that closes (or is late) instead is tolerated, as
    // rc_pingpong does.
    let mut done = [0u8; 5];
    if let Ok(left) = left_until(deadline) {
        let _ = s.set_read_timeout(Some(left));
        let _ = s.read(&mut done);
    }
    Ok(remote)
}

/// A read or write that stopped at its timeout (`WouldBlock` on Unix, `TimedOut` elsewhere).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The time left until `deadline`, or a `TimedOut` error once it has passed.
fn left_until(deadline: Instant) -> std::io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// A stream whose reads can be bounded in time (a TCP socket; a test's stand-in).
trait TimedRead: Read {
    /// Bounds the next reads to `timeout`.
    fn set_timeout(&mut self, timeout: Duration) -> std::io::Result<()>;
}

impl TimedRead for TcpStream {
    fn set_timeout(&mut self, timeout: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(timeout))
    }
}

/// Reads into `buf` until it is full or the peer closes, each read bounded by what is left
/// until `deadline`; returns the bytes read (short only when the peer closed), or a timeout
/// error ([`is_timeout`]) once the deadline passes.
fn read_full(s: &mut impl TimedRead, buf: &mut [u8], deadline: Instant) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        s.set_timeout(left_until(deadline)?)?;
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that sends one byte per read, forever.
    struct Trickle {
        reads: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            buf[0] = b'0';
            Ok(1)
        }
    }

    impl TimedRead for Trickle {
        fn set_timeout(&mut self, _: Duration) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_trickling_client_is_stopped_by_the_whole_exchange_deadline() {
        let mut msg = [0u8; PINGPONG_MSG_LEN];
        // A deadline already passed: no read is even started.
        let mut t = Trickle { reads: 0 };
        let e = read_full(&mut t, &mut msg, Instant::now()).unwrap_err();
        assert!(is_timeout(&e), "{e}");
        assert_eq!(t.reads, 0);
        // A deadline far ahead: the 52 bytes arrive one read at a time.
        let mut t = Trickle { reads: 0 };
        let got = read_full(&mut t, &mut msg, Instant::now() + TIMEOUT).unwrap();
        assert_eq!((got, t.reads), (PINGPONG_MSG_LEN, PINGPONG_MSG_LEN));
    }

    #[test]
    fn an_early_close_is_a_short_count_not_an_error() {
        let mut msg = [0u8; PINGPONG_MSG_LEN];
        let mut part: &[u8] = b"0000:000";
        struct Part<'a>(&'a mut &'a [u8]);
        impl Read for Part<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.0.read(buf)
            }
        }
        impl TimedRead for Part<'_> {
            fn set_timeout(&mut self, _: Duration) -> std::io::Result<()> {
                Ok(())
            }
        }
        let got = read_full(&mut Part(&mut part), &mut msg, Instant::now() + TIMEOUT).unwrap();
        assert_eq!(got, 8);
    }
}
