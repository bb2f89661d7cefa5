//! A progress bar for long runs, drawn on stderr only when stderr is a terminal.
//!
//! Owns: [`Progress`], a thin wrapper over `indicatif` with a three-call API (`new`, `inc`,
//! `finish`) so every long command (`ping --ramp`, sweeps, `-a`/`-D` runs) draws the same way.
//! Must not: write to stdout (results go there and are parsed), draw when stderr is piped or
//! redirected (tests, logs, CI), or block on the terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `total` steps labelled with what is running; silent unless stderr is a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `total` steps named `label` (e.g. `"stage 3 sizes"`); hidden when stderr is
    /// not a terminal.
    pub fn new(total: u64, label: &str) -> Self {
        Self::with_terminal(total, label, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], with the terminal test given (`false`: never draws).
    pub fn with_terminal(total: u64, label: &str, terminal: bool) -> Self {
        let bar = if terminal {
            ProgressBar::new(total)
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_owned());
        Self { bar }
    }

    /// Counts `n` more steps done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Steps counted so far.
    #[allow(dead_code)] // shared API (sweeps, -a/-D runs); used in this module's tests
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    /// Ends the run and erases the bar, leaving the terminal as the command's output left it.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Whether the bar draws anything (false when stderr is not a terminal).
    #[allow(dead_code)] // shared API (sweeps, -a/-D runs); used in this module's tests
    pub fn is_drawn(&self) -> bool {
        !self.bar.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // An early return (an error) must not leave a half-drawn bar above the message.
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_steps_and_stays_hidden_off_a_terminal() {
        let p = Progress::with_terminal(3, "test", false);
        assert!(!p.is_drawn());
        p.inc(1);
        p.inc(2);
        assert_eq!(p.position(), 3);
        p.finish();
    }
}
