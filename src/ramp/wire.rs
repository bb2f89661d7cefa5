//! The two-process form of `ping --ramp`: the requests the active side (the client) sends
//! the passive side (the server), their replies, and the TCP channel that carries them as
//! one JSON line each.
//!
//! Owns: [`Request`], [`Reply`], [`Channel`] (one connection for the whole ramp, every read
//! and write under a deadline, every line bounded). Must not act on a request (the
//! responder does) or print.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bypass_verbs::{QpEndpoint, RemoteBuffer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The longest line either side accepts (64 QP endpoints fit many times over).
const MAX_LINE: u64 = 1 << 20;

/// What the active side asks of the passive one, stage by stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// Stage 1: create the first RC QP and post a 1-byte receive on it.
    PingPrepare,
    /// Connect the QPs made by the last `*Prepare` to these endpoints, in order.
    Connect {
        /// The active side's endpoints.
        endpoints: Vec<QpEndpoint>,
    },
    /// Stage 1: take the 1-byte receive and check its byte.
    PingCheck,
    /// Stage 2: `qps` more RC QPs, each with a `msg`-byte receive and a `msg`-byte slice of
    /// one remotely writable region.
    QpsPrepare {
        /// How many QPs.
        qps: u32,
        /// The message size.
        msg: u32,
    },
    /// Stage 2: take every receive and check it and every WRITE slice.
    QpsCheck,
    /// Stage 3: a region of `max_size` bytes the peer may WRITE and READ.
    SizesPrepare {
        /// Its size.
        max_size: u64,
    },
    /// Stage 3: check the region holds the last WRITE (`size` bytes).
    SizesCheck {
        /// The last WRITE's size.
        size: u64,
    },
    /// The active side stopped at `stage`, step `step`, for `why`: the ramp is over.
    Abort {
        /// The stage.
        stage: u8,
        /// The step.
        step: String,
        /// The explained error.
        why: String,
    },
    /// The ramp is over.
    Bye,
}

/// The passive side's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    /// QPs made: their endpoints, and the region made for the stage, if any.
    Made {
        /// The new QPs' endpoints.
        endpoints: Vec<QpEndpoint>,
        /// The stage's remotely accessible region.
        target: Option<RemoteBuffer>,
    },
    /// Done; what was seen or checked, in words.
    Done {
        /// The account.
        detail: String,
    },
    /// The request failed at `step`, for `why`.
    Failed {
        /// The passive side's step.
        step: String,
        /// The explained error.
        why: String,
    },
}

/// Why the channel failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A socket operation failed.
    #[error("the TCP control channel failed while {step}: {source}")]
    Io {
        /// What it was doing.
        step: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The deadline passed.
    #[error(
        "the TCP control channel timed out after {secs} s while {step} (is the other side running, with the same -p?)"
    )]
    Timeout {
        /// What it was doing.
        step: &'static str,
        /// The timeout.
        secs: u64,
    },
    /// The peer closed the connection.
    #[error(
        "the other side closed the control channel while this side was {step} (its output says why)"
    )]
    Closed {
        /// What it was doing.
        step: &'static str,
    },
    /// A line did not parse.
    #[error(
        "the other side sent a message this side does not understand ({0}): run the same bypass version on both"
    )]
    Malformed(String),
}

/// One JSON-lines connection.
pub struct Channel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    timeout: Duration,
}

fn io(step: &'static str) -> impl FnOnce(std::io::Error) -> WireError {
    move |source| WireError::Io { step, source }
}

impl Channel {
    fn new(stream: TcpStream, timeout: Duration) -> Result<Self, WireError> {
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .map_err(io("setting its timeouts"))?;
        let writer = stream.try_clone().map_err(io("cloning the socket"))?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
            timeout,
        })
    }

    /// Waits (until `timeout`) for one client on `listener`.
    pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<Self, WireError> {
        listener.set_nonblocking(true).map_err(io("listening"))?;
        let end = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)
                        .map_err(io("accepting the client"))?;
                    return Self::new(s, timeout);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= end {
                        return Err(WireError::Timeout {
                            step: "waiting for the client to connect",
                            secs: timeout.as_secs(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(io("accepting the client")(e)),
            }
        }
    }

    /// Connects to the server at `addr`, retrying refused connections until `timeout` (the
    /// server may not listen yet).
    pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> Result<Self, WireError> {
        let end = Instant::now() + timeout;
        loop {
            let addrs: Vec<_> = addr
                .to_socket_addrs()
                .map_err(io("resolving the server's address"))?
                .collect();
            for a in &addrs {
                if let Ok(s) = TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                    return Self::new(s, timeout);
                }
            }
            if Instant::now() >= end {
                return Err(WireError::Timeout {
                    step: "connecting to the server",
                    secs: timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends one value as a JSON line.
    pub fn send<T: Serialize>(&mut self, v: &T) -> Result<(), WireError> {
        let mut line = serde_json::to_vec(v).map_err(|e| WireError::Malformed(e.to_string()))?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .and_then(|_| self.writer.flush())
            .map_err(io("sending a message"))
    }

    /// Receives one JSON line (at most 1 MiB), waiting at most the channel's timeout.
    pub fn recv<T: DeserializeOwned>(&mut self, step: &'static str) -> Result<T, WireError> {
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    WireError::Timeout {
                        step,
                        secs: self.timeout.as_secs(),
                    }
                }
                _ => WireError::Io { step, source: e },
            })?;
        if n == 0 {
            return Err(WireError::Closed { step });
        }
        serde_json::from_str(&line).map_err(|e| WireError::Malformed(e.to_string()))
    }
}
