//! The out-of-band exchange: two peers swap their endpoints over TCP before the QPs connect.
//!
//! Two protocols:
//! - **bypass's own** ([`ExchangeServer::exchange`], [`exchange_as_client`], and an
//!   [`ExchangeSession`] for runs that meet more than once): any serde value as JSON,
//!   typically [`PeerInfo`] (a QP endpoint plus the buffers the peer may access). The
//!   client sends first, the server answers. Under [`ExchangeAuth::Psk`] (the default of
//!   every bypass command) the connection starts with a Noise handshake keyed by the
//!   pre-shared [`ExchangeKey`] and every message is encrypted and integrity-checked
//!   (`noise`); [`ExchangeAuth::Plaintext`] sends one JSON line per message in clear.
//!   A peer on the other setting, or with another key, is a typed error on both ends.
//! - **`ibv_rc_pingpong`** ([`ExchangeServer::exchange_pingpong`], [`exchange_pingpong_as_client`]):
//!   byte-compatible with rdma-core's `libibverbs/examples/rc_pingpong.c`
//!   (`pp_client_exch_dest` / `pp_server_exch_dest`): the client writes its 52-byte message
//!   (`"%04x:%06x:%06x:%s"` plus its NUL), reads the server's, and writes `"done"` plus NUL.
//!   A wire standard, so always unauthenticated plaintext: callers warn.
//!
//! Every step is bounded by one deadline; every failure is a typed [`ExchangeError`].
//!
//! Owns: sockets it opens, for the duration of one exchange or session; the public API and
//! its errors. Must not: touch a device. Modules: `key` (the PSK and its file), `noise`
//! (handshake and frames), `session` ([`ExchangeSession`]).

mod key;
mod noise;
mod session;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::endpoint::{EndpointParseError, Mtu, QpEndpoint, RemoteBuffer};
use noise::read_exact_by;

pub use key::{ExchangeKey, KEY_FILE_ENV, KEY_LEN, KeyError, key_path};
pub use session::ExchangeSession;

/// How an exchange of bypass's own protocol is protected: a required argument, so that no
/// caller gets plaintext by accident.
#[derive(Debug, Clone)]
pub enum ExchangeAuth {
    /// Noise handshake with this pre-shared key; every message encrypted and authenticated.
    Psk(ExchangeKey),
    /// One JSON line per message in clear: endpoints, addresses and rkeys readable and
    /// forgeable by anyone on the path. Only on an explicit request (`--plaintext`).
    Plaintext,
}

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
    /// The peers hold different pre-shared keys.
    #[error(
        "the peers' exchange keys differ: the handshake did not authenticate, so nothing was exchanged; give both ends the same key (copy one key file to both hosts, mode 0600)"
    )]
    KeyMismatch,
    /// This side runs the authenticated exchange, the peer plaintext.
    #[error(
        "the peer runs the out-of-band exchange in plaintext (--plaintext) and this side requires the authenticated one: give both ends the same key, or run both with --plaintext"
    )]
    PlaintextPeer,
    /// This side runs plaintext, the peer the authenticated exchange.
    #[error(
        "the peer runs the authenticated out-of-band exchange (a pre-shared key) and this side plaintext: drop --plaintext here and give both ends the same key, or run both with --plaintext"
    )]
    PeerWantsKey,
    /// A message failed its authentication tag.
    #[error(
        "a message from the peer failed its integrity check (altered on the way, or not from this session's peer): the exchange was stopped"
    )]
    Integrity,
    /// The peer's bytes are not this protocol.
    #[error("the peer does not speak bypass's authenticated exchange: {why}")]
    Protocol {
        /// What was wrong.
        why: &'static str,
    },
    /// The Noise library refused an operation (not the peer's doing).
    #[error("the Noise handshake could not be run: {source}")]
    Crypto {
        /// The library's error.
        source: snow::Error,
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
/// use bypass_verbs::exchange::{ExchangeAuth, ExchangeKey, ExchangeServer, exchange_as_client};
/// // Both ends hold the same key (in real life: the same key file, `ExchangeKey::load`).
/// let auth = ExchangeAuth::Psk(ExchangeKey::generate().unwrap());
/// let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
/// let addr = server.local_addr().unwrap();
/// let server_auth = auth.clone();
/// let t = std::thread::spawn(move || {
///     server.exchange(&"from server".to_string(), &server_auth, Duration::from_secs(5))
/// });
/// let got: String =
///     exchange_as_client(addr, &"from client".to_string(), &auth, Duration::from_secs(5)).unwrap();
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

    /// Serves on a listener the caller bound (to word its own bind errors).
    pub fn from_listener(listener: TcpListener) -> Result<Self, ExchangeError> {
        listener
            .set_nonblocking(true)
            .map_err(|source| ExchangeError::Io {
                step: "setting up the listener",
                source,
            })?;
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

    /// Accepts one client, runs the handshake `auth` asks for, and keeps its connection for
    /// the rest of a run: every later [`ExchangeSession::swap`] talks to that client alone.
    /// The listener stays with the session so that other connections are accepted only to
    /// be closed (see [`ExchangeSession::take_refused`]), never read.
    pub fn accept_session(
        self,
        auth: &ExchangeAuth,
        timeout: Duration,
    ) -> Result<ExchangeSession, ExchangeError> {
        let dl = Deadline::new(timeout);
        let stream = self.accept(dl)?;
        ExchangeSession::start(stream, true, Some(self.listener), auth, dl)
    }

    /// Accepts one client, reads its value, answers with `local`; returns the client's
    /// value. `auth` protects the exchange (the handshake is part of `timeout`).
    pub fn exchange<T: Serialize + DeserializeOwned>(
        &self,
        local: &T,
        auth: &ExchangeAuth,
        timeout: Duration,
    ) -> Result<T, ExchangeError> {
        let dl = Deadline::new(timeout);
        let stream = self.accept(dl)?;
        let mut session = ExchangeSession::start(stream, true, None, auth, dl)?;
        let remote = session.recv_by(dl)?;
        session.send_by(local, dl)?;
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
        read_exact_by(
            &mut &stream,
            &stream,
            &mut done,
            dl,
            "reading the client's \"done\"",
        )?;
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

/// Connects to an [`ExchangeServer`] at `addr` (retrying until it listens), runs the
/// handshake `auth` asks for, sends `local` and returns the server's answer.
pub fn exchange_as_client<T: Serialize + DeserializeOwned>(
    addr: impl ToSocketAddrs,
    local: &T,
    auth: &ExchangeAuth,
    timeout: Duration,
) -> Result<T, ExchangeError> {
    let dl = Deadline::new(timeout);
    let stream = connect(addr, dl)?;
    let mut session = ExchangeSession::start(stream, false, None, auth, dl)?;
    session.send_by(local, dl)?;
    session.recv_by(dl)
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
    read_exact_by(&mut &*s, s, &mut msg, dl, STEP)?;
    let text = std::str::from_utf8(&msg).map_err(|_| ExchangeError::Pingpong {
        source: EndpointParseError::NotText,
    })?;
    QpEndpoint::parse_pingpong(text, mtu).map_err(|source| ExchangeError::Pingpong { source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn peer_info_json_with_a_bad_endpoint_is_refused() {
        let info = PeerInfo {
            qp: QpEndpoint::parse_pingpong(
                "0012:abcdef:000001:fe80000000000000021122fffe334455",
                Mtu::Mtu4096,
            )
            .unwrap(),
            buffers: vec![],
        };
        let mut v = serde_json::to_value(&info).unwrap();
        v["qp"]["psn"] = 0x0123_4567.into();
        let err = serde_json::from_value::<PeerInfo>(v).unwrap_err();
        assert!(err.to_string().contains("psn = 0x1234567"), "{err}");
    }

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
