//! How the CLI protects its out-of-band exchanges: `--key-file` / `--plaintext` (flattened
//! into every two-process command's options), and `bypass exchange-key [PATH]`, which
//! makes a key file to copy to the peer's host.
//!
//! Key file: `--key-file PATH`, else `$BYPASS_EXCHANGE_KEY_FILE`, else
//! `$XDG_CONFIG_HOME/bypass/exchange.key` (or `~/.config/bypass/exchange.key`). A missing
//! default file is created on first use (mode 0600, race-free, and said on stderr): both
//! ends then hold the same key when they share the file system (one host, or a shared home);
//! otherwise the handshake fails with "keys differ" and the user copies one file over. A
//! named file (flag or variable) is never created implicitly: a typo must not mint a key.
//!
//! Owns: these options and the command. Must not: run an exchange (`bypass_verbs::exchange`
//! does) or print a key (only where it went).

use std::path::PathBuf;

use bypass_verbs::exchange::{ExchangeAuth, ExchangeKey, KeyError, key_path};
use clap::Args;

/// The exchange protection options of a two-process command.
#[derive(Args, Debug, Clone, Default)]
pub struct AuthOpts {
    /// The pre-shared key of the authenticated out-of-band exchange (both ends need the
    /// same file; make one with `bypass exchange-key`). Default: $BYPASS_EXCHANGE_KEY_FILE,
    /// else $XDG_CONFIG_HOME/bypass/exchange.key (~/.config/...; created if missing).
    #[arg(long, value_name = "PATH", conflicts_with = "plaintext")]
    pub key_file: Option<PathBuf>,
    /// Run the out-of-band exchange unauthenticated, in clear (endpoints, addresses and
    /// rkeys readable and forgeable on the path). Both ends must give it.
    #[arg(long)]
    pub plaintext: bool,
}

impl AuthOpts {
    /// The protection these options ask for; warns on stderr for `--plaintext`, says so
    /// when it created the default key file.
    pub fn auth(&self) -> Result<ExchangeAuth, KeyError> {
        if self.plaintext {
            eprintln!(
                " warning: --plaintext: the out-of-band exchange is unauthenticated and unencrypted; anyone on the path can read and forge its endpoints, addresses and rkeys"
            );
            return Ok(ExchangeAuth::Plaintext);
        }
        let (path, default) = key_path(self.key_file.as_deref())?;
        if !default {
            return ExchangeKey::load(&path).map(ExchangeAuth::Psk);
        }
        let (key, made) = ExchangeKey::load_or_create(&path)?;
        if made {
            eprintln!(
                " created the exchange key {} (mode 0600): a peer on another host needs a copy of this file",
                path.display()
            );
        }
        Ok(ExchangeAuth::Psk(key))
    }
}

/// `bypass exchange-key [PATH]`.
#[derive(Args, Debug)]
pub struct ExchangeKeyOpts {
    /// Where to write the new key (mode 0600; never overwrites). Default: the file the
    /// commands read ($BYPASS_EXCHANGE_KEY_FILE, else $XDG_CONFIG_HOME/bypass/exchange.key
    /// or ~/.config/bypass/exchange.key).
    pub path: Option<PathBuf>,
}

/// Makes a new key file and prints where it went.
pub fn run(o: &ExchangeKeyOpts) -> Result<(), KeyError> {
    let (path, _) = key_path(o.path.as_deref())?;
    ExchangeKey::create(&path)?;
    println!(
        "wrote a new exchange key to {} (mode 0600); copy it to the peer's host and pass --key-file there (or put it at the same default path)",
        path.display()
    );
    Ok(())
}
