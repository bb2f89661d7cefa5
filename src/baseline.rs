//! The baselines every sim figure is reported against, measured in the same run.
//!
//! Owns: a memcpy bandwidth loop (the ceiling for an in-process RDMA WRITE, which is a copy
//! done by the simulated NIC's DMA engine) and a TCP loopback ping-pong with `TCP_NODELAY`
//! and non-blocking sockets spinning on both ends (the kernel-stack latency a bypass stack
//! exists to beat). Must not touch devices or the verbs API: this is the yardstick, not the
//! thing measured.

use std::hint::black_box;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// Why a baseline could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// A socket call of the TCP ping-pong failed.
    #[error(
        "TCP loopback baseline: {step} failed: {source} (is the loopback interface up, and may this process open TCP sockets on 127.0.0.1?)"
    )]
    Tcp {
        /// Which step failed (bind, connect, read, ...).
        step: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The peer closed the connection in the middle of the ping-pong.
    #[error(
        "TCP loopback baseline: the echo thread closed the connection after {done} of {iters} round trips (it failed or was killed; run again)"
    )]
    PeerClosed {
        /// Round trips completed.
        done: usize,
        /// Round trips asked for.
        iters: usize,
    },
    /// The ping-pong did not finish in time (one side stopped making progress).
    #[error(
        "TCP loopback baseline: no reply within {0:?} (the echo thread is starved: close other busy programs, the ping-pong needs two cores)"
    )]
    Timeout(Duration),
}

/// Measures copying `size` bytes between two pre-touched buffers `iters` times and returns
/// each copy's duration in nanoseconds. The buffers are written once before timing, so page
/// faults are not measured.
pub fn memcpy_times(size: usize, iters: usize) -> Vec<u64> {
    let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut dst = vec![0u8; size];
    dst.copy_from_slice(&src);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        times.push(elapsed_ns(t0));
    }
    times
}

/// Runs `iters` round trips of `size`-byte messages over TCP on 127.0.0.1, both ends with
/// `TCP_NODELAY` and non-blocking sockets that spin (no sleeping in the kernel), and returns
/// the round-trip times in nanoseconds. An echo thread answers each message with one of the
/// same size. `warmup` round trips run first and are not returned.
pub fn tcp_pingpong_rtts(
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<Vec<u64>, BaselineError> {
    let tcp = |step| move |source| BaselineError::Tcp { step, source };
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(tcp("bind"))?;
    let addr = listener.local_addr().map_err(tcp("local_addr"))?;
    let total = iters + warmup;
    let deadline = Duration::from_secs(10) + Duration::from_micros(100 * total as u64);

    let echo = thread::spawn(move || -> Result<(), BaselineError> {
        let (mut s, _) = listener.accept().map_err(tcp("accept"))?;
        prepare(&s).map_err(tcp("echo socket options"))?;
        let mut buf = vec![0u8; size];
        for done in 0..total {
            spin_read(&mut s, &mut buf, deadline, done, total)?;
            spin_write(&mut s, &buf, deadline)?;
        }
        Ok(())
    });

    let run = || -> Result<Vec<u64>, BaselineError> {
        let mut s = TcpStream::connect(addr).map_err(tcp("connect"))?;
        prepare(&s).map_err(tcp("client socket options"))?;
        let msg = vec![0x5au8; size];
        let mut reply = vec![0u8; size];
        let mut rtts = Vec::with_capacity(iters);
        for i in 0..total {
            let t0 = Instant::now();
            spin_write(&mut s, &msg, deadline)?;
            spin_read(&mut s, &mut reply, deadline, i, total)?;
            if i >= warmup {
                rtts.push(elapsed_ns(t0));
            }
        }
        Ok(rtts)
    };
    let result = run();
    if result.is_err() {
        // Unblock an echo thread still in accept() (the client may have failed before
        // connecting); a connected echo thread sees the close and returns.
        drop(TcpStream::connect(addr));
    }
    let echoed = echo.join().unwrap_or(Err(BaselineError::PeerClosed {
        done: 0,
        iters: total,
    }));
    let rtts = result?;
    echoed?;
    Ok(rtts)
}

fn prepare(s: &TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_nonblocking(true)
}

fn spin_read(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Duration,
    done: usize,
    iters: usize,
) -> Result<(), BaselineError> {
    let t0 = Instant::now();
    let mut got = 0;
    while got < buf.len() {
        let Some(rest) = buf.get_mut(got..) else {
            break;
        };
        match s.read(rest) {
            Ok(0) => return Err(BaselineError::PeerClosed { done, iters }),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if t0.elapsed() > deadline {
                    return Err(BaselineError::Timeout(deadline));
                }
                std::hint::spin_loop();
            }
            Err(source) => {
                return Err(BaselineError::Tcp {
                    step: "read",
                    source,
                });
            }
        }
    }
    Ok(())
}

fn spin_write(s: &mut TcpStream, buf: &[u8], deadline: Duration) -> Result<(), BaselineError> {
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < buf.len() {
        let Some(rest) = buf.get(sent..) else {
            break;
        };
        match s.write(rest) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if t0.elapsed() > deadline {
                    return Err(BaselineError::Timeout(deadline));
                }
                std::hint::spin_loop();
            }
            Err(source) => {
                return Err(BaselineError::Tcp {
                    step: "write",
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Nanoseconds since `t0`, saturating at `u64::MAX`.
pub fn elapsed_ns(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcpy_returns_one_time_per_copy() {
        let t = memcpy_times(4096, 7);
        assert_eq!(t.len(), 7);
    }

    #[test]
    fn tcp_pingpong_returns_one_rtt_per_iteration_after_warmup() {
        let rtts = tcp_pingpong_rtts(8, 20, 5).expect("loopback ping-pong");
        assert_eq!(rtts.len(), 20);
        assert!(rtts.iter().all(|&r| r > 0));
    }

    #[test]
    fn tcp_pingpong_carries_messages_larger_than_one_segment() {
        let rtts = tcp_pingpong_rtts(256 * 1024, 3, 0).expect("loopback ping-pong");
        assert_eq!(rtts.len(), 3);
    }
}
