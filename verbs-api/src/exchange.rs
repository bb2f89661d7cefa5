//! The out-of-band exchange: two peers swap their endpoints over TCP before the QPs connect.
//!
//! Two protocols:
//! - **JSON lines** ([`ExchangeServer::exchange`], [`exchange_as_client`]): any serde value,
//!   typically [`PeerInfo`] (a QP endpoint plus the buffers the peer may access). The client
//!   sends one line of JSON, the server answers with one line.
//! - **`ibv_rc_pingpong`** ([`ExchangeServer::exchange_pingpong`], [`exchange_pingpong_as_client`]):
//!   byte-compatible with rdma-core's `libibverbs/examples/rc_pingpong.c`
//!   (`pp_client_exch_dest` / `pp_server_exch_dest`): the client writes its 52-byte message
//!   (`"%04x:%06x:%06x:%s"` plus its NUL), reads the server's, and writes `"done"` plus NUL.
//!
//! Every step is bounded by one deadline; every failure is a typed [`ExchangeError`].
//!
//! A run that meets its peer more than once uses an [`ExchangeSession`]: one TCP connection
//! for every message of the run, so each message is bound to the peer the run started with.
//! The server's session keeps the listener only to close (and report) any other connection
//! that arrives during the run; nothing such a connection sends is ever read.
//!
//! Owns: sockets it opens, for the duration of one exchange. Must not: touch a device.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::endpoint::{EndpointParseError, Mtu, QpEndpoint, RemoteBuffer};

/// The largest JSON line accepted (a peer cannot make us buffer without bound).
pub const MAX_LINE: usize = 64 * 1024;

/// The size of an `ibv_rc_pingpong` message: the text plus its NUL (`sizeof msg`).
pub const PINGPONG_MSG_LEN: usize = QpEndpoint::PINGPONG_TEXT_LEN + 1;

/// What peers usually swap: the QP's endpoint and the buffers the other side may access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// The QP to connect to.
    pub qp: QpEndpoint,
    /// Buffers the peer may RDMA READ/WRITE or run atomics on (may be empty).
    pub buffers: Vec<RemoteBuffer>,
}

/// Why an out-of-band exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The listening socket could not be bound.
    #[error(
        "could not listen on {addr}: {source}; pick another port or stop the process holding it"
    )]
    Bind {
        /// The address asked for.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// The address did not resolve.
    #[error("{addr} does not resolve to a socket address: give host:port (e.g. 192.0.2.1:18515)")]
    Resolve {
        /// The address asked for.
        addr: String,
    },
    /// The deadline passed.
    #[error(
        "out-of-band exchange timed out after {timeout:?} while {step}: start the peer (server first), check the address and firewall, or raise the timeout"
    )]
    Timeout {
        /// What the exchange was doing.
        step: &'static str,
        /// The whole exchange's timeout.
        timeout: Duration,
    },
    /// Another socket error.
    #[error("out-of-band exchange failed while {step}: {source}")]
    Io {
        /// What the exchange was doing.
        step: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The peer closed the connection early.
    #[error(
        "the peer closed the connection while {step}: it probably failed on its side; read its error"
    )]
    Closed {
        /// What the exchange was doing.
        step: &'static str,
    },
    /// The peer's message is longer than [`MAX_LINE`].
    #[error("the peer's message exceeds {MAX_LINE} bytes: it is not speaking this protocol")]
    TooLong,
    /// The peer's JSON did not decode.
    #[error(
        "the peer's message is not the expected JSON ({source}): both sides must run the same bypass version and protocol"
    )]
    Decode {
        /// The serde error.
        source: serde_json::Error,
    },
    /// Our value did not encode.
    #[error("could not encode the local value as JSON: {source}")]
    Encode {
        /// The serde error.
        source: serde_json::Error,
    },
    /// The peer's pingpong text did not parse.
    #[error("the peer's ibv_rc_pingpong message is malformed: {source}")]
    Pingpong {
        /// Why.
        source: EndpointParseError,
    },
}

fn io_err(step: &'static str, timeout: Duration) -> impl Fn(io::Error) -> ExchangeError {
    move |source| match source.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            ExchangeError::Timeout { step, timeout }
        }
        // A peer that closes with our bytes unread resets the connection
        // (RFC 1122 4.2.2.13): to the reader that is the same early close.
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => ExchangeError::Closed { step },
        _ => ExchangeError::Io { step, source },
    }
}

/// A deadline for one exchange: every socket operation gets the time that is left.
#[derive(Clone, Copy)]
struct Deadline {
    end: Instant,
    timeout: Duration,
}

impl Deadline {
    fn new(timeout: Duration) -> Self {
        Deadline {
            end: Instant::now() + timeout,
            timeout,
        }
    }

    fn left(&self, step: &'static str) -> Result<Duration, ExchangeError> {
        let left = self.end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ExchangeError::Timeout {
                step,
                timeout: self.timeout,
            });
        }
        Ok(left)
    }

    fn arm(&self, s: &TcpStream, step: &'static str) -> Result<(), ExchangeError> {
        let left = self.left(step)?;
        s.set_read_timeout(Some(left))
            .and_then(|_| s.set_write_timeout(Some(left)))
            .map_err(io_err(step, self.timeout))
    }
}

/// The listening side of an exchange. Bind it before the client starts.
///
/// ```
/// use std::time::Duration;
/// use bypass_verbs::exchange::{ExchangeServer, exchange_as_client};
/// let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
/// let addr = server.local_addr().unwrap();
/// let t = std::thread::spawn(move || server.exchange(&"from server".to_string(), Duration::from_secs(5)));
/// let got: String = exchange_as_client(addr, &"from client".to_string(), Duration::from_secs(5)).unwrap();
/// assert_eq!(got, "from server");
/// assert_eq!(t.join().unwrap().unwrap(), "from client");
/// ```
#[derive(Debug)]
pub struct ExchangeServer {
    listener: TcpListener,
}

impl ExchangeServer {
    /// Listens on `addr` (`"0.0.0.0:18515"`; port 0 picks a free one).
    pub fn bind(addr: impl ToSocketAddrs + std::fmt::Debug) -> Result<Self, ExchangeError> {
        let name = format!("{addr:?}");
        let listener = TcpListener::bind(addr).map_err(|source| ExchangeError::Bind {
            addr: name.clone(),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| ExchangeError::Bind { addr: name, source })?;
        Ok(ExchangeServer { listener })
    }

    /// The address the server listens on (to tell the client, or a test).
    pub fn local_addr(&self) -> Result<SocketAddr, ExchangeError> {
        self.listener
            .local_addr()
            .map_err(|source| ExchangeError::Io {
                step: "reading the listening address",
                source,
            })
    }

    fn accept(&self, dl: Deadline) -> Result<TcpStream, ExchangeError> {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)
                        .map_err(io_err("accepting the peer", dl.timeout))?;
                    // Small messages: send each at once.
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    dl.left("waiting for the peer to connect")?;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(source) => {
                    return Err(ExchangeError::Io {
                        step: "accepting the peer",
                        source,
                    });
                }
            }
        }
    }

    /// Accepts one client and keeps its connection for the rest of a run: every later
    /// [`ExchangeSession::swap`] talks to that client alone. The listener stays with the
    /// session so that other connections are accepted only to be closed (see
    /// [`ExchangeSession::take_refused`]), never read.
    pub fn accept_session(self, timeout: Duration) -> Result<ExchangeSession, ExchangeError> {
        let dl = Deadline::new(timeout);
        let stream = self.accept(dl)?;
        ExchangeSession::new(stream, Some(self.listener))
    }

    /// Accepts one client, reads its JSON line, answers with `local`; returns the client's value.
    pub fn exchange<T: Serialize + DeserializeOwned>(
        &self,
        local: &T,
        timeout: Duration,
    ) -> Result<T, ExchangeError> {
        let dl = Deadline::new(timeout);
        let stream = self.accept(dl)?;
        let remote = read_json(&stream, dl)?;
        write_json(&stream, local, dl)?;
        Ok(remote)
    }

    /// Accepts one `ibv_rc_pingpong` client (or [`exchange_pingpong_as_client`]), reads its
    /// endpoint, sends `local`, and waits for its `"done"`. The text carries no MTU: the
    /// returned endpoint has `mtu`.
    pub fn exchange_pingpong(
        &self,
        local: &QpEndpoint,
        mtu: Mtu,
        timeout: Duration,
    ) -> Result<QpEndpoint, ExchangeError> {
        let dl = Deadline::new(timeout);
        let mut stream = self.accept(dl)?;
        let remote = read_pingpong(&mut stream, mtu, dl)?;
        write_pingpong(&mut stream, local, dl)?;
        let mut done = [0u8; 5];
        read_exact_by(&mut stream, &mut done, dl, "reading the client's \"done\"")?;
        Ok(remote)
    }
}

fn connect(addr: impl ToSocketAddrs, dl: Deadline) -> Result<TcpStream, ExchangeError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|_| ExchangeError::Resolve {
            addr: "the given address".into(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ExchangeError::Resolve {
            addr: "the given address".into(),
        });
    }
    // The server may not be listening yet: retry refused connections until the deadline.
    loop {
        for a in &addrs {
            let left = dl.left("connecting to the server")?;
            match TcpStream::connect_timeout(a, left) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut
                    ) => {}
                Err(source) => {
                    return Err(ExchangeError::Io {
                        step: "connecting to the server",
                        source,
                    });
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Connects to an [`ExchangeServer`] at `addr` (retrying until it listens), sends `local` as
/// one JSON line and returns the server's answer.
pub fn exchange_as_client<T: Serialize + DeserializeOwned>(
    addr: impl ToSocketAddrs,
    local: &T,
    timeout: Duration,
) -> Result<T, ExchangeError> {
    let dl = Deadline::new(timeout);
    let stream = connect(addr, dl)?;
    write_json(&stream, local, dl)?;
    read_json(&stream, dl)
}

/// One connection to the peer for every message of a run (JSON lines, as
/// [`ExchangeServer::exchange`]). Each [`swap`](Self::swap) sends one value and reads the
/// peer's, within one deadline for both.
///
/// ```
/// use std::time::Duration;
/// use bypass_verbs::exchange::{ExchangeServer, ExchangeSession};
/// let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
/// let addr = server.local_addr().unwrap();
/// let t = std::thread::spawn(move || {
///     let mut s = server.accept_session(Duration::from_secs(5)).unwrap();
///     let a: u32 = s.swap(&1u32, Duration::from_secs(5)).unwrap();
///     let b: u32 = s.swap(&2u32, Duration::from_secs(5)).unwrap();
///     (a, b)
/// });
/// let mut c = ExchangeSession::connect(addr, Duration::from_secs(5)).unwrap();
/// assert_eq!(c.swap(&10u32, Duration::from_secs(5)).unwrap(), 1);
/// assert_eq!(c.swap(&20u32, Duration::from_secs(5)).unwrap(), 2);
/// assert_eq!(t.join().unwrap(), (10, 20));
/// ```
#[derive(Debug)]
pub struct ExchangeSession {
    /// Reads the peer's lines; kept for the whole session (it may hold the start of the
    /// peer's next line).
    reader: BufReader<TcpStream>,
    /// The same connection, for writing and for its timeouts.
    writer: TcpStream,
    /// The peer the session started with.
    peer: SocketAddr,
    /// Server side: the listener, whose later connections are closed unread.
    listener: Option<TcpListener>,
    /// Peers of connections closed unread since the last [`take_refused`](Self::take_refused).
    refused: Vec<SocketAddr>,
}

impl ExchangeSession {
    fn new(stream: TcpStream, listener: Option<TcpListener>) -> Result<Self, ExchangeError> {
        const STEP: &str = "setting up the session's connection";
        let peer = stream
            .peer_addr()
            .map_err(|source| ExchangeError::Io { step: STEP, source })?;
        let writer = stream
            .try_clone()
            .map_err(|source| ExchangeError::Io { step: STEP, source })?;
        Ok(ExchangeSession {
            reader: BufReader::new(stream),
            writer,
            peer,
            listener,
            refused: Vec::new(),
        })
    }

    /// Connects to an [`ExchangeServer`] at `addr` (retrying until it listens, within
    /// `timeout`) for a session.
    pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> Result<Self, ExchangeError> {
        let stream = connect(addr, Deadline::new(timeout))?;
        ExchangeSession::new(stream, None)
    }

    /// The peer this session is bound to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sends `local` as one JSON line and reads the peer's, both within `timeout` (one
    /// deadline for the whole swap, not one per read: a peer trickling bytes cannot stretch
    /// it). Server side: first closes any other connection waiting on the listener.
    pub fn swap<T: Serialize + DeserializeOwned>(
        &mut self,
        local: &T,
        timeout: Duration,
    ) -> Result<T, ExchangeError> {
        let dl = Deadline::new(timeout);
        self.refuse_others();
        write_json(&self.writer, local, dl)?;
        let remote = read_json_from(&mut self.reader, &self.writer, dl);
        self.refuse_others();
        remote
    }

    /// The peers of other connections closed unread since the last call (a second client,
    /// or someone injecting messages into the run), for the caller to log.
    pub fn take_refused(&mut self) -> Vec<SocketAddr> {
        self.refuse_others();
        std::mem::take(&mut self.refused)
    }

    /// Accepts and at once closes every connection waiting on the listener.
    fn refuse_others(&mut self) {
        let Some(l) = &self.listener else { return };
        // The listener is non-blocking: this ends when none is waiting (or on an error,
        // which a later call retries).
        while let Ok((s, from)) = l.accept() {
            let _ = s.shutdown(std::net::Shutdown::Both);
            self.refused.push(from);
        }
    }
}

/// The client side of the `ibv_rc_pingpong` exchange: works against `ibv_rc_pingpong` itself
/// as the server. The returned endpoint has `mtu` (the text carries none).
pub fn exchange_pingpong_as_client(
    addr: impl ToSocketAddrs,
    local: &QpEndpoint,
    mtu: Mtu,
    timeout: Duration,
) -> Result<QpEndpoint, ExchangeError> {
    let dl = Deadline::new(timeout);
    let mut stream = connect(addr, dl)?;
    write_pingpong(&mut stream, local, dl)?;
    let remote = read_pingpong(&mut stream, mtu, dl)?;
    dl.arm(&stream, "sending \"done\"")?;
    stream
        .write_all(b"done\0")
        .map_err(io_err("sending \"done\"", timeout))?;
    Ok(remote)
}

fn write_json<T: Serialize>(s: &TcpStream, v: &T, dl: Deadline) -> Result<(), ExchangeError> {
    let mut line = serde_json::to_vec(v).map_err(|source| ExchangeError::Encode { source })?;
    line.push(b'\n');
    dl.arm(s, "sending the local endpoint")?;
    let mut w = s;
    w.write_all(&line)
        .and_then(|_| w.flush())
        .map_err(io_err("sending the local endpoint", dl.timeout))
}

fn read_json<T: DeserializeOwned>(s: &TcpStream, dl: Deadline) -> Result<T, ExchangeError> {
    read_json_from(&mut BufReader::new(s), s, dl)
}

/// Reads one JSON line from `r`, a reader of the connection `s` (whose read timeout is
/// armed with what is left of `dl`).
fn read_json_from<T: DeserializeOwned, R: Read>(
    r: &mut BufReader<R>,
    s: &TcpStream,
    dl: Deadline,
) -> Result<T, ExchangeError> {
    const STEP: &str = "reading the peer's endpoint";
    // One deadline for the whole line: the timeout is re-armed with what is left before
    // every read, so a peer sending a byte at a time cannot stretch it.
    let mut line = Vec::new();
    loop {
        dl.arm(s, STEP)?;
        let buf = r.fill_buf().map_err(io_err(STEP, dl.timeout))?;
        if buf.is_empty() {
            return Err(ExchangeError::Closed { step: STEP });
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if line.len() > MAX_LINE {
            return Err(ExchangeError::TooLong);
        }
        if done {
            break;
        }
    }
    serde_json::from_slice(&line).map_err(|source| ExchangeError::Decode { source })
}

/// Fills `buf` from `s` by the deadline `dl` (re-armed before every read, so the bound is
/// on the whole message, not on each read).
fn read_exact_by(
    s: &mut TcpStream,
    buf: &mut [u8],
    dl: Deadline,
    step: &'static str,
) -> Result<(), ExchangeError> {
    let mut got = 0;
    while got < buf.len() {
        dl.arm(s, step)?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(ExchangeError::Closed { step }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(step, dl.timeout)(e)),
        }
    }
    Ok(())
}

fn write_pingpong(s: &mut TcpStream, ep: &QpEndpoint, dl: Deadline) -> Result<(), ExchangeError> {
    const STEP: &str = "sending the local endpoint";
    let text = ep.to_string();
    let mut msg = [0u8; PINGPONG_MSG_LEN];
    for (d, b) in msg.iter_mut().zip(text.bytes()) {
        *d = b;
    }
    dl.arm(s, STEP)?;
    s.write_all(&msg).map_err(io_err(STEP, dl.timeout))
}

fn read_pingpong(s: &mut TcpStream, mtu: Mtu, dl: Deadline) -> Result<QpEndpoint, ExchangeError> {
    const STEP: &str = "reading the peer's endpoint";
    let mut msg = [0u8; PINGPONG_MSG_LEN];
    read_exact_by(s, &mut msg, dl, STEP)?;
    let text = std::str::from_utf8(&msg).map_err(|_| ExchangeError::Pingpong {
        source: EndpointParseError::NotText,
    })?;
    QpEndpoint::parse_pingpong(text, mtu).map_err(|source| ExchangeError::Pingpong { source })
}

#[cfg(test)]
#[path = "exchange_session_tests.rs"]
mod session_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A peer that closes with our bytes unread sends RST: the reader sees
    /// ECONNRESET, and that is reported as the peer's early close.
    #[test]
    fn a_reset_by_the_peer_is_an_early_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        server.write_all(b"x").unwrap();
        // Once the byte sits unread in the client's receive queue, closing resets.
        client.peek(&mut [0u8; 1]).unwrap();
        drop(client);
        let mut buf = [0u8; 8];
        let err = loop {
            match server.read(&mut buf) {
                Err(e) => break e,
                Ok(0) => panic!("the close arrived as FIN, not RST"),
                Ok(_) => continue,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        let mapped = io_err("reading the peer's endpoint", Duration::from_secs(1))(err);
        assert!(matches!(mapped, ExchangeError::Closed { .. }), "{mapped:?}");
        assert!(mapped.to_string().contains("closed the connection"));
    }
}
