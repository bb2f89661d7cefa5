//! [`ExchangeSession`]: one connection to the peer for every message of a run, protected
//! as its [`ExchangeAuth`] says from the handshake on.
//!
//! Each message is bound to the peer the run started with: the server's session keeps the
//! listener only to close (and report) any other connection that arrives during the run;
//! nothing such a connection sends is ever read. Under a PSK a forged or altered message
//! on the session's own connection fails its tag ([`ExchangeError::Integrity`]).
//!
//! Owns: the session's connection, its reader (which may hold the start of the peer's next
//! message) and its codec state (Noise nonces: one send and one receive counter). Must
//! not: know the frames (`noise`) or the values' meaning (callers).

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::noise::{Codec, handshake_client, handshake_server};
use super::{Deadline, ExchangeAuth, ExchangeError, connect};

/// One connection to the peer for every message of a run. Each [`swap`](Self::swap) sends
/// one value and reads the peer's, within one deadline for both.
///
/// ```
/// use std::time::Duration;
/// use bypass_verbs::exchange::{ExchangeAuth, ExchangeKey, ExchangeServer, ExchangeSession};
/// let auth = ExchangeAuth::Psk(ExchangeKey::generate().unwrap());
/// let server = ExchangeServer::bind("127.0.0.1:0").unwrap();
/// let addr = server.local_addr().unwrap();
/// let server_auth = auth.clone();
/// let t = std::thread::spawn(move || {
///     let mut s = server.accept_session(&server_auth, Duration::from_secs(5)).unwrap();
///     let a: u32 = s.swap(&1u32, Duration::from_secs(5)).unwrap();
///     let b: u32 = s.swap(&2u32, Duration::from_secs(5)).unwrap();
///     (a, b)
/// });
/// let mut c = ExchangeSession::connect(addr, &auth, Duration::from_secs(5)).unwrap();
/// assert_eq!(c.swap(&10u32, Duration::from_secs(5)).unwrap(), 1);
/// assert_eq!(c.swap(&20u32, Duration::from_secs(5)).unwrap(), 2);
/// assert_eq!(t.join().unwrap(), (10, 20));
/// ```
#[derive(Debug)]
pub struct ExchangeSession {
    /// Reads the peer's messages; kept for the whole session (it may hold the start of the
    /// peer's next one).
    reader: BufReader<TcpStream>,
    /// The same connection, for writing and for its timeouts.
    writer: TcpStream,
    /// How messages travel (plaintext lines or Noise frames with their nonces).
    codec: Codec,
    /// The peer the session started with.
    peer: SocketAddr,
    /// Server side: the listener, whose later connections are closed unread.
    listener: Option<TcpListener>,
    /// Peers of connections closed unread since the last [`take_refused`](Self::take_refused).
    refused: Vec<SocketAddr>,
}

impl ExchangeSession {
    /// Sets up a session on a fresh connection: the handshake `auth` asks for, as the
    /// Noise responder when `server`, by `dl`. A server's session that keeps the
    /// `listener` refuses later connections on it.
    pub(super) fn start(
        stream: TcpStream,
        server: bool,
        listener: Option<TcpListener>,
        auth: &ExchangeAuth,
        dl: Deadline,
    ) -> Result<Self, ExchangeError> {
        const STEP: &str = "setting up the session's connection";
        let peer = stream
            .peer_addr()
            .map_err(|source| ExchangeError::Io { step: STEP, source })?;
        let writer = stream
            .try_clone()
            .map_err(|source| ExchangeError::Io { step: STEP, source })?;
        let mut reader = BufReader::new(stream);
        let codec = match auth {
            ExchangeAuth::Plaintext => Codec::Plain,
            ExchangeAuth::Psk(key) if server => handshake_server(&mut reader, &writer, key, dl)?,
            ExchangeAuth::Psk(key) => handshake_client(&mut reader, &writer, key, dl)?,
        };
        Ok(ExchangeSession {
            reader,
            writer,
            codec,
            peer,
            listener,
            refused: Vec::new(),
        })
    }

    /// Connects to an [`ExchangeServer`](super::ExchangeServer) at `addr` (retrying until
    /// it listens) and runs the handshake `auth` asks for, all within `timeout`.
    pub fn connect(
        addr: impl ToSocketAddrs,
        auth: &ExchangeAuth,
        timeout: Duration,
    ) -> Result<Self, ExchangeError> {
        let dl = Deadline::new(timeout);
        let stream = connect(addr, dl)?;
        ExchangeSession::start(stream, false, None, auth, dl)
    }

    /// The peer this session is bound to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sends `local` and reads the peer's value, both within `timeout` (one deadline for
    /// the whole swap, not one per read: a peer trickling bytes cannot stretch it). Server
    /// side: first closes any other connection waiting on the listener.
    pub fn swap<T: Serialize + DeserializeOwned>(
        &mut self,
        local: &T,
        timeout: Duration,
    ) -> Result<T, ExchangeError> {
        let dl = Deadline::new(timeout);
        self.refuse_others();
        self.send_by(local, dl)?;
        let remote = self.recv_by(dl);
        self.refuse_others();
        remote
    }

    /// Sends one value within `timeout`: half of a request-reply protocol, where one side
    /// sends and the other answers ([`swap`](Self::swap) is both halves at once).
    pub fn send<T: Serialize>(
        &mut self,
        local: &T,
        timeout: Duration,
    ) -> Result<(), ExchangeError> {
        self.refuse_others();
        self.send_by(local, Deadline::new(timeout))
    }

    /// Reads the peer's next value within `timeout` (one deadline for the whole message).
    pub fn recv<T: DeserializeOwned>(&mut self, timeout: Duration) -> Result<T, ExchangeError> {
        let got = self.recv_by(Deadline::new(timeout));
        self.refuse_others();
        got
    }

    /// Sends one value as JSON, by `dl`.
    pub(super) fn send_by<T: Serialize>(
        &mut self,
        v: &T,
        dl: Deadline,
    ) -> Result<(), ExchangeError> {
        let json = serde_json::to_vec(v).map_err(|source| ExchangeError::Encode { source })?;
        self.codec.send(&self.writer, &json, dl)
    }

    /// Reads one JSON value, by `dl`.
    pub(super) fn recv_by<T: DeserializeOwned>(
        &mut self,
        dl: Deadline,
    ) -> Result<T, ExchangeError> {
        let msg = self.codec.recv(&mut self.reader, &self.writer, dl)?;
        serde_json::from_slice(&msg).map_err(|source| ExchangeError::Decode { source })
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

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
