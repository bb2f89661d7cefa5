//! The per-verb half of the perf engine: which verb a tool runs, on which transport, and how
//! one of its work requests is built and its data checked.
//!
//! Owns: [`Verb`], [`Conn`], [`AtomicOp`], the data patterns of `--check` and the rules of
//! which verb runs on which transport (perftest's `check_link_and_mtu` / `parser` checks).
//! Must not post, poll or time anything: `flows` posts, `bw` and `lat` loop and time.
//!
//! Sources: perftest's test kinds (`SEND`, `WRITE`, `READ`, `ATOMIC` with `FETCH_AND_ADD` /
//! `CMP_AND_SWAP`, src/perftest_parameters.h) and their defaults (`DEF_INLINE_WRITE` 220,
//! `DEF_INLINE_SEND_RC_UC` 236, `DEF_INLINE_SEND_UD` 188; READ and atomics never inline).

use bypass_verbs::RemoteBuffer;
use bypass_verbs::wr::SendOp;
use serde::Serialize;

/// The atomic operation of the atomic tools (perftest `-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
pub enum AtomicOp {
    /// 8-byte fetch-and-add of 1.
    #[default]
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    /// 8-byte compare-and-swap: `k` → `k + 1` for the `k`-th operation on the word.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

/// The operation a tool measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Verb {
    /// SEND into a posted receive.
    Send,
    /// RDMA WRITE.
    #[default]
    Write,
    /// RDMA READ.
    Read,
    /// An 8-byte atomic.
    Atomic(AtomicOp),
}

/// The transport of the QPs (perftest `-c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
pub enum Conn {
    /// Reliable connected.
    #[default]
    #[value(name = "RC")]
    Rc,
    /// Unreliable connected: SEND and WRITE only.
    #[value(name = "UC")]
    Uc,
    /// Unreliable datagram: SEND only, one packet per message.
    #[value(name = "UD")]
    Ud,
}

/// Bytes of the GRH in front of every UD receive.
pub const GRH: usize = 40;

/// The size of an atomic operand.
pub const ATOMIC_SIZE: u64 = 8;

impl Verb {
    /// perftest's name of the test (`ctx_print_test_info`'s title).
    pub fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic(_) => "Atomic",
        }
    }

    /// The tool's name: `send`, `write`, `read`, `atomic`.
    pub fn tool(self) -> &'static str {
        match self {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic(_) => "atomic",
        }
    }

    /// How many one-way trips a latency sample spans: SEND and WRITE ping-pong (2), READ
    /// and atomics are one request and its response (1) (perftest `rtt_factor`).
    pub fn rtt_factor(self) -> u32 {
        match self {
            Verb::Send | Verb::Write => 2,
            Verb::Read | Verb::Atomic(_) => 1,
        }
    }

    /// Whether the peer consumes receives.
    pub fn needs_recv(self) -> bool {
        self == Verb::Send
    }

    /// Whether the local buffer is written by the NIC (a READ's data, an atomic's old value).
    pub fn fetches(self) -> bool {
        matches!(self, Verb::Read | Verb::Atomic(_))
    }

    /// perftest's default inline size for this verb on `conn`.
    pub fn default_inline(self, conn: Conn) -> u32 {
        match (self, conn) {
            (Verb::Write, _) => 220,
            (Verb::Send, Conn::Ud) => 188,
            (Verb::Send, _) => 236,
            (Verb::Read | Verb::Atomic(_), _) => 0,
        }
    }

    /// The message size a run of this verb uses: atomics are always 8 bytes.
    pub fn size(self, asked: u64) -> u64 {
        match self {
            Verb::Atomic(_) => ATOMIC_SIZE,
            _ => asked,
        }
    }

    /// Refuses a verb the transport does not carry, with the fix.
    pub fn check_conn(self, conn: Conn) -> Result<(), String> {
        match (self, conn) {
            (_, Conn::Rc) | (Verb::Send, _) | (Verb::Write, Conn::Uc) => Ok(()),
            (v, c) => Err(format!(
                "{} over {c:?}: {} has {}; use -c RC{}",
                v.title(),
                match c {
                    Conn::Uc => "UC",
                    _ => "UD",
                },
                match c {
                    Conn::Uc => "no RDMA READ or atomics (no responder state to answer them)",
                    _ => "only SEND (datagrams carry no remote address)",
                },
                if v == Verb::Write { " or UC" } else { "" },
            )),
        }
    }

    /// The send opcode of the `k`-th operation to `remote`.
    pub fn op(self, remote: RemoteBuffer, k: u64) -> SendOp {
        match self {
            Verb::Send => SendOp::Send,
            Verb::Write => SendOp::Write(remote),
            Verb::Read => SendOp::Read(remote),
            Verb::Atomic(AtomicOp::FetchAndAdd) => SendOp::FetchAdd { remote, add: 1 },
            Verb::Atomic(AtomicOp::CmpAndSwap) => SendOp::CompareSwap {
                remote,
                compare: k,
                swap: k + 1,
            },
        }
    }
}

/// Byte `j` of message `k` under `--check` (never the same for two consecutive messages).
pub fn pattern(k: u64, j: usize) -> u8 {
    // `k >> 8` too: messages 256 apart (a stale buffer) must not share a pattern.
    (k.wrapping_mul(131) as u8).wrapping_add((j as u8).wrapping_mul(7))
        ^ (j >> 8) as u8
        ^ (k >> 8) as u8
}

/// Fills `buf` with message `k`'s pattern.
pub fn fill(buf: &mut [u8], k: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = pattern(k, j);
    }
}

/// The first byte of `got` that differs from message `k`'s pattern: (offset, got, expected).
pub fn mismatch(got: &[u8], k: u64) -> Option<(usize, u8, u8)> {
    got.iter()
        .enumerate()
        .find(|&(j, &b)| b != pattern(k, j))
        .map(|(j, &b)| (j, b, pattern(k, j)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_carry_only_their_verbs() {
        assert!(Verb::Send.check_conn(Conn::Ud).is_ok());
        assert!(Verb::Write.check_conn(Conn::Uc).is_ok());
        let e = Verb::Read.check_conn(Conn::Uc).unwrap_err();
        assert!(e.contains("no RDMA READ"), "{e}");
        assert!(Verb::Write.check_conn(Conn::Ud).is_err());
        assert!(
            Verb::Atomic(AtomicOp::CmpAndSwap)
                .check_conn(Conn::Rc)
                .is_ok()
        );
    }

    #[test]
    fn patterns_differ_between_messages_and_mismatch_finds_the_byte() {
        let mut b = vec![0u8; 300];
        fill(&mut b, 4);
        assert_eq!(mismatch(&b, 4), None);
        assert!(mismatch(&b, 5).is_some());
        b[299] ^= 1;
        assert_eq!(mismatch(&b, 4).map(|m| m.0), Some(299));
    }
}
