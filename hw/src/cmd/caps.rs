//! (filled in by the cmd-layout work)
