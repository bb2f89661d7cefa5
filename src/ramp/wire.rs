//! The two-process form of `ping --ramp`: the requests the active side (the client) sends
//! the passive side (the server), their replies, and the TCP channel that carries them:
//! `bypass_verbs::exchange`'s session, so each message is JSON, encrypted and
//! authenticated under the pre-shared key unless both sides give `--plaintext`.
//!
//! Owns: [`Request`], [`Reply`], [`Channel`] (one connection for the whole ramp, every read
//! and write under a deadline, every message bounded by the exchange's `MAX_LINE`; 64 QP
//! endpoints fit many times over). Must not act on a request (the responder does) or print.

use std::net::{TcpListener, ToSocketAddrs};
use std::time::Duration;

use bypass_verbs::exchange::{ExchangeAuth, ExchangeError, ExchangeServer, ExchangeSession};
use bypass_verbs::{QpEndpoint, RemoteBuffer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

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

/// One connection for the whole ramp: an [`ExchangeSession`], authenticated and encrypted
/// unless both sides give `--plaintext`.
pub struct Channel {
    session: ExchangeSession,
    timeout: Duration,
}

impl Channel {
    /// Waits (until `timeout`) for one client on `listener` and runs the handshake.
    pub fn accept(
        listener: TcpListener,
        auth: &ExchangeAuth,
        timeout: Duration,
    ) -> Result<Self, ExchangeError> {
        let session = ExchangeServer::from_listener(listener)?.accept_session(auth, timeout)?;
        Ok(Self { session, timeout })
    }

    /// Connects to the server at `addr`, retrying refused connections until `timeout` (the
    /// server may not listen yet), and runs the handshake.
    pub fn connect(
        addr: impl ToSocketAddrs,
        auth: &ExchangeAuth,
        timeout: Duration,
    ) -> Result<Self, ExchangeError> {
        let session = ExchangeSession::connect(addr, auth, timeout)?;
        Ok(Self { session, timeout })
    }

    /// Sends one value.
    pub fn send<T: Serialize>(&mut self, v: &T) -> Result<(), ExchangeError> {
        self.session.send(v, self.timeout)
    }

    /// Receives one value, waiting at most the channel's timeout.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T, ExchangeError> {
        self.session.recv(self.timeout)
    }
}
