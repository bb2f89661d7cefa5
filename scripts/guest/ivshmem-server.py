#!/usr/bin/env python3
"""ivshmem-server.py SOCKET [VECTORS] - the server side of QEMU's ivshmem-doorbell device.

Debian ships no `ivshmem-server`, so this speaks its small protocol itself (QEMU
`docs/specs/ivshmem-spec.rst`, "The ivshmem Client-Server Protocol"): every message is one
little-endian int64, optionally with one file descriptor (SCM_RIGHTS). To the one client (a
QEMU started with `-chardev socket,path=SOCKET,id=ivs -device
ivshmem-doorbell,chardev=ivs,vectors=VECTORS`) it sends:

  1. the protocol version, 0;
  2. the client's ID, 0;
  3. -1 with the shared memory's fd (a 1 MiB memfd: BAR2);
  4. no connect notifications (there is no other peer);
  5. the client's own ID VECTORS times, each with one eventfd: QEMU raises MSI-X vector i
     when eventfd i is signalled, and a doorbell write of (0 << 16 | i) signals it.

So a guest driver that writes its own ID and vector i to the Doorbell register interrupts
itself on vector i: the guest test of the VFIO backend's MSI-X path
(`driver/tests/vfio_msix.rs`) needs nothing else from the host. The server exits when the
client disconnects (QEMU exits) or on SIGTERM. It writes "ready" to stdout once listening.
"""
import os
import signal
import socket
import struct
import sys

SHM_BYTES = 1 << 20


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    path = sys.argv[1]
    vectors = int(sys.argv[2]) if len(sys.argv) == 3 else 4
    if not 1 <= vectors <= 64:
        print(f"ivshmem-server: VECTORS must be 1..64 (QEMU's limit), not {vectors}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    shm = os.memfd_create("bypass-ivshmem")
    os.ftruncate(shm, SHM_BYTES)
    # Kept open for the server's life: QEMU holds duplicates, and signalling one from here
    # would interrupt the guest too.
    eventfds = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(vectors)]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(1)
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            def send(value: int, fd: int | None = None) -> None:
                anc = [] if fd is None else [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
                conn.sendmsg([struct.pack("<q", value)], anc)

            peer_id = 0
            send(0)  # protocol version
            send(peer_id)  # the client's ID
            send(-1, shm)  # the shared memory
            for fd in eventfds:  # interrupt setup: vector 0, 1, ... in order
                send(peer_id, fd)
            # The connection is one-way: wait for QEMU to close it.
            while conn.recv(64):
                pass
    os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
