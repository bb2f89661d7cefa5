//! The key file: created 0600 (its directory 0700), refused when group or others may read
//! it, refused when it is not a regular file or does not hold exactly 64 hex digits, never
//! overwritten; a racing `load_or_create` gets the winner's key; `Debug` never shows the
//! bytes.
//!
//! Owns: these tests, each in its own directory under the system temporary directory.
//! Must not: open sockets (the handshake tests in `noise_tests` do).

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

/// A fresh, empty directory for one test (removed when dropped).
struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "bypass-key-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_created_key_is_mode_0600_in_a_0700_directory_and_loads_back() {
    let d = Dir::new();
    let path = d.0.join("sub").join("exchange.key");
    let key = ExchangeKey::create(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&d.0.join("sub")), 0o700);
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.trim().len(), 64, "{text:?}");
    assert_eq!(ExchangeKey::load(&path).unwrap(), key);
    assert!(matches!(
        ExchangeKey::create(&path),
        Err(KeyError::Exists { .. })
    ));
    // Not overwritten by the refused create.
    assert_eq!(ExchangeKey::load(&path).unwrap(), key);
}

#[test]
fn a_key_file_others_may_read_is_refused_naming_the_file_and_chmod() {
    let d = Dir::new();
    let path = d.0.join("exchange.key");
    ExchangeKey::create(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let err = ExchangeKey::load(&path).unwrap_err();
    assert!(
        matches!(err, KeyError::Exposed { mode: 0o644, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("chmod 600"), "{msg}");
    // load_or_create must not paper over it with a new key either.
    assert!(matches!(
        ExchangeKey::load_or_create(&path),
        Err(KeyError::Exposed { .. })
    ));
}

#[test]
fn a_key_file_of_the_wrong_length_or_digits_is_refused() {
    let d = Dir::new();
    let path = d.0.join("exchange.key");
    for (text, why) in [
        ("00ff\n".to_string(), "4 characters"),
        ("a".repeat(66), "66 characters"),
        (format!("{}zz\n", "0".repeat(62)), "non-hex"),
        ("\u{e9}".repeat(32), "non-hex"),
        ("0".repeat(200), "longer than"),
    ] {
        let _ = fs::remove_file(&path);
        fs::write(&path, &text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = ExchangeKey::load(&path).unwrap_err();
        assert!(
            matches!(err, KeyError::Malformed { .. }),
            "{text:?}: {err:?}"
        );
        assert!(err.to_string().contains(why), "{text:?}: {err}");
    }
}

#[test]
fn a_directory_is_not_a_key_file() {
    let d = Dir::new();
    fs::set_permissions(&d.0, fs::Permissions::from_mode(0o700)).unwrap();
    let err = ExchangeKey::load(&d.0).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn a_missing_key_file_says_how_to_make_one() {
    let d = Dir::new();
    let err = ExchangeKey::load(&d.0.join("none.key")).unwrap_err();
    assert!(matches!(err, KeyError::Missing { .. }));
    assert!(err.to_string().contains("bypass exchange-key"), "{err}");
}

#[test]
fn racing_load_or_create_calls_all_get_the_one_key_published() {
    let d = Dir::new();
    let path = d.0.join("cfg").join("exchange.key");
    let got: Vec<(ExchangeKey, bool)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| ExchangeKey::load_or_create(&path).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(got.iter().all(|(k, _)| *k == got[0].0));
    assert!(got.iter().filter(|(_, made)| *made).count() <= 1);
    assert_eq!(ExchangeKey::load(&path).unwrap(), got[0].0);
    assert_eq!(mode(&path), 0o600);
    // No temporary file is left behind.
    assert_eq!(fs::read_dir(d.0.join("cfg")).unwrap().count(), 1);
}

#[test]
fn the_key_never_shows_in_debug() {
    let key = ExchangeKey::from_bytes([0xab; KEY_LEN]);
    let text = format!("{key:?}");
    assert_eq!(text, "ExchangeKey(<redacted>)");
    assert!(!text.contains("ab") && !text.contains("171"), "{text}");
}
