//! The exchange's pre-shared key: [`ExchangeKey`] (32 random bytes), the key file that holds
//! it, and where that file is looked for.
//!
//! A key file is one line of 64 hex digits, mode 0600. It is created with `O_CREAT|O_EXCL`
//! and its mode set at creation ([`ExchangeKey::create`]), never widened afterwards; one
//! that group or others may read is refused ([`KeyError::Exposed`]) rather than used, so a
//! key that may have leaked is never trusted. [`ExchangeKey::load_or_create`] publishes a
//! new key by `link(2)` of a complete temporary file, so two processes racing to create the
//! same default file both end up with the one that won, never with a half-written one.
//!
//! The key never reaches formatted output: `Debug` prints `ExchangeKey(<redacted>)`, with or
//! without `BYPASS_LOG_KEYS` (that switch reveals memory keys for debugging a run; this key
//! would let anyone read and forge every exchange). Its bytes are wiped when it drops.
//!
//! Owns: the key's bytes and the key file's format, mode and path. Must not: open sockets
//! or know the handshake (`noise` does). Follows: Noise spec rev. 34 section 9 (a PSK is
//! 32 bytes), open(2) / link(2) for the race-free creation.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The environment variable naming the key file (when no `--key-file` is given).
pub const KEY_FILE_ENV: &str = "BYPASS_EXCHANGE_KEY_FILE";

/// Bytes in a key.
pub const KEY_LEN: usize = 32;

/// What [`ExchangeKey::load`] reads at most: 64 hex digits and a line end, with room for
/// a stray `\r` or space (anything longer is not a key file).
const MAX_FILE: u64 = 128;

/// Why a key could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No file at the path.
    #[error(
        "no exchange key at {path}: create one with `bypass exchange-key {path}` and copy it (mode 0600) to the peer's host, or run both ends with --plaintext"
    )]
    Missing {
        /// The key file looked for.
        path: PathBuf,
    },
    /// The file exists but group or others may read or write it.
    #[error(
        "the exchange key file {path} has mode {mode:04o}: group or others may read it, so the key may have leaked; run `chmod 600 {path}` (or make a new key with `bypass exchange-key`)"
    )]
    Exposed {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file does not hold one line of 64 hex digits.
    #[error(
        "the exchange key file {path} does not hold a key ({why}): a key file is one line of 64 hex digits, as `bypass exchange-key` writes it"
    )]
    Malformed {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// [`ExchangeKey::create`] found a file already there.
    #[error(
        "{path} already exists: remove it first to replace the key (both ends must then get the new one), or pick another path"
    )]
    Exists {
        /// The path asked for.
        path: PathBuf,
    },
    /// No path was given and neither `$XDG_CONFIG_HOME` nor `$HOME` is set.
    #[error(
        "no exchange key file given and neither XDG_CONFIG_HOME nor HOME is set: pass --key-file PATH or set {KEY_FILE_ENV}"
    )]
    NoDefaultPath,
    /// The OS could not supply random bytes.
    #[error("the OS random source failed ({0}): cannot make a key")]
    Random(String),
    /// Another file system error.
    #[error("could not {what} the exchange key file {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// A 32-byte pre-shared key: both ends of an authenticated exchange hold the same one.
#[derive(Clone, PartialEq, Eq)]
pub struct ExchangeKey([u8; KEY_LEN]);

impl fmt::Debug for ExchangeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExchangeKey(<redacted>)")
    }
}

impl Drop for ExchangeKey {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into our own array; the
            // volatile write only keeps the compiler from dropping the wipe as dead.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

impl ExchangeKey {
    /// A key of these bytes (a test's, or one kept elsewhere).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        ExchangeKey(bytes)
    }

    /// A new key from the OS random source.
    pub fn generate() -> Result<Self, KeyError> {
        let mut k = [0u8; KEY_LEN];
        getrandom::fill(&mut k).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(ExchangeKey(k))
    }

    /// The key's bytes, for the handshake.
    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    fn to_hex(&self) -> String {
        let mut s = String::with_capacity(2 * KEY_LEN + 1);
        for b in &self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s.push('\n');
        s
    }

    /// Reads the key file at `path`, refusing one that group or others may access.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let io = |what| {
            move |source| KeyError::Io {
                what,
                path: path.to_path_buf(),
                source,
            }
        };
        let mut f = match fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(KeyError::Missing {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(io("open")(e)),
        };
        // The mode of the file opened, not of whatever the path names a moment later.
        let meta = f.metadata().map_err(io("inspect"))?;
        if !meta.is_file() {
            return Err(KeyError::Malformed {
                path: path.to_path_buf(),
                why: "it is not a regular file".into(),
            });
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        let mut text = Vec::new();
        (&mut f)
            .take(MAX_FILE + 1)
            .read_to_end(&mut text)
            .map_err(io("read"))?;
        let bad = |why: String| KeyError::Malformed {
            path: path.to_path_buf(),
            why,
        };
        if text.len() as u64 > MAX_FILE {
            return Err(bad(format!("it is longer than {MAX_FILE} bytes")));
        }
        let hex = std::str::from_utf8(&text)
            .map_err(|_| bad("it is not text".into()))?
            .trim();
        if hex.len() != 2 * KEY_LEN {
            return Err(bad(format!(
                "{} characters where {} hex digits belong",
                hex.len(),
                2 * KEY_LEN
            )));
        }
        if let Some(i) = hex.bytes().position(|b| !b.is_ascii_hexdigit()) {
            return Err(bad(format!("a non-hex character at offset {i}")));
        }
        let mut k = [0u8; KEY_LEN];
        for (i, d) in k.iter_mut().enumerate() {
            // Every byte is an ASCII hex digit: each pair is a char boundary and parses.
            *d = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| bad(format!("a non-hex character near offset {}", 2 * i)))?;
        }
        Ok(ExchangeKey(k))
    }

    /// Makes a new key and writes it to `path`, created with mode 0600 (its directory,
    /// if missing, 0700); an existing file is never overwritten ([`KeyError::Exists`]).
    pub fn create(path: &Path) -> Result<Self, KeyError> {
        let key = ExchangeKey::generate()?;
        make_parent(path)?;
        write_new(path, &key).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => KeyError::Exists {
                path: path.to_path_buf(),
            },
            _ => KeyError::Io {
                what: "create",
                path: path.to_path_buf(),
                source: e,
            },
        })?;
        Ok(key)
    }

    /// Reads the key at `path`, or, if there is none, makes one there and says so (`true`).
    /// Two processes racing here get the same key: the new one is written whole to a
    /// temporary file and published by `link(2)`, which fails if another was first.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), KeyError> {
        match ExchangeKey::load(path) {
            Err(KeyError::Missing { .. }) => {}
            other => return other.map(|k| (k, false)),
        }
        let key = ExchangeKey::generate()?;
        make_parent(path)?;
        // Unique per process and call: racing threads of one process must not share it.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp.{}.{seq}", std::process::id()));
        let io = |what, p: &Path| {
            let p = p.to_path_buf();
            move |source| KeyError::Io {
                what,
                path: p,
                source,
            }
        };
        write_new(&tmp, &key).map_err(io("create", &tmp))?;
        let linked = fs::hard_link(&tmp, path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok((key, true)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                ExchangeKey::load(path).map(|k| (k, false))
            }
            Err(e) => Err(io("publish", path)(e)),
        }
    }
}

/// Creates `path`'s directory (mode 0700) if it is missing.
fn make_parent(path: &Path) -> Result<(), KeyError> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| KeyError::Io {
            what: "create the directory of",
            path: path.to_path_buf(),
            source,
        })
}

/// Writes `key` to a file that must not exist yet, mode 0600 from its creation on.
fn write_new(path: &Path, key: &ExchangeKey) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(key.to_hex().as_bytes())?;
    f.sync_all()
}

/// The key file to use: `given` (a `--key-file`), else `$BYPASS_EXCHANGE_KEY_FILE`, else
/// `$XDG_CONFIG_HOME/bypass/exchange.key`, else `$HOME/.config/bypass/exchange.key`. The
/// flag is `true` for the last two (the default, which a first run may create).
pub fn key_path(given: Option<&Path>) -> Result<(PathBuf, bool), KeyError> {
    if let Some(p) = given {
        return Ok((p.to_path_buf(), false));
    }
    let env = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(p) = env(KEY_FILE_ENV) {
        return Ok((PathBuf::from(p), false));
    }
    let config = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config")))
        .ok_or(KeyError::NoDefaultPath)?;
    Ok((config.join("bypass").join("exchange.key"), true))
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
