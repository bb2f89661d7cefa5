//! The exchange's two wire codecs: the authenticated one, a Noise
//! `NNpsk0_25519_ChaChaPoly_BLAKE2s` handshake then encrypted, length-prefixed frames, and
//! the plaintext one (`--plaintext`), one JSON line per message.
//!
//! Authenticated wire form (the client is the Noise initiator):
//! - each side first sends [`MAGIC`] (it starts with NUL, which no JSON line does, and ends
//!   with `\n`, so a plaintext peer reads it as one line and can say what it met);
//! - then frames of `u16` big-endian length + bytes: the client's handshake message, the
//!   server's answer (or a frame of length 0: "your key is not mine"), then transport
//!   messages. A transport frame's plaintext is one flag byte (1: the message's last
//!   frame, 0: more follow) and a piece of the message, so a message up to [`MAX_LINE`]
//!   spans frames within Noise's 65535-byte limit.
//!
//! The PSK makes both ends prove they hold the key before anything is sent under it: a
//! wrong key fails the server's decryption of the first message, and both ends report
//! [`ExchangeError::KeyMismatch`]. Every frame's tag is checked; a frame that fails is
//! [`ExchangeError::Integrity`] and ends the session (Noise nonces cannot resynchronise).
//!
//! Owns: the handshake, the frames, and detecting a peer on the other codec. Must not: pick
//! the key or the codec (the caller's [`ExchangeAuth`]) or decode JSON (`mod.rs`). Follows:
//! the Noise Protocol Framework rev. 34 (sections 7.5 pattern NN, 9 PSKs), via `snow`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use super::{Deadline, ExchangeError, MAX_LINE, io_err};
use crate::exchange::key::ExchangeKey;

/// The Noise protocol: no static keys (the PSK authenticates), 25519, ChaChaPoly, BLAKE2s.
const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";

/// What each side of the authenticated exchange sends first.
pub(super) const MAGIC: &[u8; 16] = b"\0bypass-noise-1\n";

/// Noise's largest message, and so the largest frame.
const MAX_FRAME: usize = 65535;

/// The AEAD tag every transport frame carries.
const TAG: usize = 16;

/// The most message bytes one frame carries (after its flag byte and before its tag).
const CHUNK: usize = MAX_FRAME - TAG - 1;

/// How one session's messages travel.
pub(super) enum Codec {
    /// One JSON line per message, in clear.
    Plain,
    /// Noise transport frames.
    Noise(Box<snow::TransportState>),
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The transport state holds the session keys: never formatted.
        f.write_str(match self {
            Codec::Plain => "Plain",
            Codec::Noise(_) => "Noise(<session keys redacted>)",
        })
    }
}

fn crypto(source: snow::Error) -> ExchangeError {
    ExchangeError::Crypto { source }
}

fn builder(key: &ExchangeKey) -> Result<snow::Builder<'_>, ExchangeError> {
    let params: snow::params::NoiseParams = PATTERN.parse().map_err(crypto)?;
    snow::Builder::new(params)
        .psk(0, key.bytes())
        .map_err(crypto)
}

/// Fills `buf` from `r`, a reader of the connection `s`, by `dl` (re-armed before every
/// read, so the bound is on the whole message, not on each read).
pub(super) fn read_exact_by<R: Read>(
    r: &mut R,
    s: &TcpStream,
    buf: &mut [u8],
    dl: Deadline,
    step: &'static str,
) -> Result<(), ExchangeError> {
    let mut got = 0;
    while got < buf.len() {
        dl.arm(s, step)?;
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(ExchangeError::Closed { step }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(step, dl.timeout)(e)),
        }
    }
    Ok(())
}

fn write_all_by(
    s: &TcpStream,
    bytes: &[u8],
    dl: Deadline,
    step: &'static str,
) -> Result<(), ExchangeError> {
    dl.arm(s, step)?;
    let mut w = s;
    w.write_all(bytes)
        .and_then(|_| w.flush())
        .map_err(io_err(step, dl.timeout))
}

fn frame(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every caller's bytes fit: handshake messages are < 100 bytes, transport frames are
    // built at most MAX_FRAME long.
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Reads one frame's bytes (its length first).
fn read_frame<R: Read>(
    r: &mut R,
    s: &TcpStream,
    dl: Deadline,
    step: &'static str,
) -> Result<Vec<u8>, ExchangeError> {
    let mut len = [0u8; 2];
    read_exact_by(r, s, &mut len, dl, step)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact_by(r, s, &mut buf, dl, step)?;
    Ok(buf)
}

/// Reads the peer's [`MAGIC`]; a first byte other than NUL is a plaintext peer, and is
/// answered with our own magic (`answer`) so that it, too, can say what it met.
fn read_magic<R: Read>(
    r: &mut R,
    s: &TcpStream,
    dl: Deadline,
    answer: bool,
) -> Result<(), ExchangeError> {
    const STEP: &str = "reading the peer's handshake";
    let mut first = [0u8; 1];
    read_exact_by(r, s, &mut first, dl, STEP)?;
    if first[0] != 0 {
        if answer {
            let _ = write_all_by(s, MAGIC, dl, STEP);
        }
        return Err(ExchangeError::PlaintextPeer);
    }
    let mut rest = [0u8; MAGIC.len() - 1];
    read_exact_by(r, s, &mut rest, dl, STEP)?;
    if rest != MAGIC[1..] {
        return Err(ExchangeError::Protocol {
            why: "its handshake does not start with bypass's magic (another program, or another protocol version)",
        });
    }
    Ok(())
}

/// The client's side of the handshake on a fresh connection.
pub(super) fn handshake_client(
    r: &mut BufReader<TcpStream>,
    s: &TcpStream,
    key: &ExchangeKey,
    dl: Deadline,
) -> Result<Codec, ExchangeError> {
    const STEP: &str = "sending the handshake";
    let mut hs = builder(key)?.build_initiator().map_err(crypto)?;
    let mut buf = vec![0u8; MAX_FRAME];
    let n = hs.write_message(&[], &mut buf).map_err(crypto)?;
    let mut out = MAGIC.to_vec();
    frame(&mut out, &buf[..n]);
    write_all_by(s, &out, dl, STEP)?;
    read_magic(r, s, dl, false)?;
    let answer = read_frame(r, s, dl, "reading the peer's handshake")?;
    if answer.is_empty() {
        // The server could not authenticate our first message: the keys differ.
        return Err(ExchangeError::KeyMismatch);
    }
    hs.read_message(&answer, &mut buf)
        .map_err(|_| ExchangeError::KeyMismatch)?;
    Ok(Codec::Noise(Box::new(
        hs.into_transport_mode().map_err(crypto)?,
    )))
}

/// The server's side of the handshake on a connection just accepted.
pub(super) fn handshake_server(
    r: &mut BufReader<TcpStream>,
    s: &TcpStream,
    key: &ExchangeKey,
    dl: Deadline,
) -> Result<Codec, ExchangeError> {
    const STEP: &str = "answering the handshake";
    let mut hs = builder(key)?.build_responder().map_err(crypto)?;
    read_magic(r, s, dl, true)?;
    write_all_by(s, MAGIC, dl, STEP)?;
    let first = read_frame(r, s, dl, "reading the peer's handshake")?;
    let mut buf = vec![0u8; MAX_FRAME];
    if first.is_empty() || hs.read_message(&first, &mut buf).is_err() {
        // Tell the client its key is not ours (unauthenticated, but so is a reset: it
        // only lets the client say why), then give up.
        let _ = write_all_by(s, &[0, 0], dl, STEP);
        return Err(ExchangeError::KeyMismatch);
    }
    let n = hs.write_message(&[], &mut buf).map_err(crypto)?;
    let mut out = Vec::with_capacity(n + 2);
    frame(&mut out, &buf[..n]);
    write_all_by(s, &out, dl, STEP)?;
    Ok(Codec::Noise(Box::new(
        hs.into_transport_mode().map_err(crypto)?,
    )))
}

impl Codec {
    /// Sends one message (at most [`MAX_LINE`] bytes; plaintext: one line, so no `\n`).
    pub(super) fn send(
        &mut self,
        s: &TcpStream,
        msg: &[u8],
        dl: Deadline,
    ) -> Result<(), ExchangeError> {
        const STEP: &str = "sending the local endpoint";
        if msg.len() > MAX_LINE {
            return Err(ExchangeError::TooLong);
        }
        let out = match self {
            Codec::Plain => {
                let mut line = msg.to_vec();
                line.push(b'\n');
                line
            }
            Codec::Noise(ts) => {
                let mut out = Vec::with_capacity(msg.len() + 64);
                let mut ct = vec![0u8; MAX_FRAME];
                let mut pieces = msg.chunks(CHUNK).peekable();
                let mut plain = Vec::with_capacity(CHUNK + 1);
                // An empty message is still one (last) frame.
                let mut first = true;
                while first || pieces.peek().is_some() {
                    first = false;
                    let piece = pieces.next().unwrap_or(&[]);
                    plain.clear();
                    plain.push(u8::from(pieces.peek().is_none()));
                    plain.extend_from_slice(piece);
                    let n = ts.write_message(&plain, &mut ct).map_err(crypto)?;
                    frame(&mut out, &ct[..n]);
                }
                out
            }
        };
        write_all_by(s, &out, dl, STEP)
    }

    /// Reads one message from `r`, a reader of the connection `s`, by `dl`.
    pub(super) fn recv(
        &mut self,
        r: &mut BufReader<TcpStream>,
        s: &TcpStream,
        dl: Deadline,
    ) -> Result<Vec<u8>, ExchangeError> {
        const STEP: &str = "reading the peer's endpoint";
        match self {
            Codec::Plain => {
                let line = read_line(r, s, dl)?;
                if line.first() == Some(&0) {
                    // The authenticated exchange's magic: tell that peer we run in clear
                    // (any first byte but NUL says so), then stop.
                    let _ = write_all_by(s, b"plaintext\n", dl, STEP);
                    return Err(ExchangeError::PeerWantsKey);
                }
                Ok(line)
            }
            Codec::Noise(ts) => {
                let mut msg = Vec::new();
                let mut plain = vec![0u8; MAX_FRAME];
                loop {
                    let ct = read_frame(r, s, dl, STEP)?;
                    if ct.len() < TAG + 1 {
                        return Err(ExchangeError::Integrity);
                    }
                    let n = ts
                        .read_message(&ct, &mut plain)
                        .map_err(|_| ExchangeError::Integrity)?;
                    let (last, piece) = match plain[..n].split_first() {
                        Some((&1, p)) => (true, p),
                        Some((&0, p)) => (false, p),
                        // Authenticated, so from the peer: a bug or another version.
                        _ => {
                            return Err(ExchangeError::Protocol {
                                why: "a frame's flag is neither 0 nor 1",
                            });
                        }
                    };
                    if msg.len() + piece.len() > MAX_LINE {
                        return Err(ExchangeError::TooLong);
                    }
                    msg.extend_from_slice(piece);
                    if last {
                        return Ok(msg);
                    }
                }
            }
        }
    }
}

/// Reads one line (with its `\n`) from `r`, a reader of the connection `s`, by `dl`.
fn read_line(
    r: &mut BufReader<TcpStream>,
    s: &TcpStream,
    dl: Deadline,
) -> Result<Vec<u8>, ExchangeError> {
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
            return Ok(line);
        }
    }
}

#[cfg(test)]
#[path = "noise_tests.rs"]
mod tests;
