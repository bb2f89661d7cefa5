#!/usr/bin/env python3
"""Oracle for hw/tests/roce_scapy.rs: scapy's RoCE layer (scapy.contrib.roce) judges bypass's
RoCEv2 packets, and builds packets of its own for bypass to judge.

  roce_scapy.py decode FILE   FILE holds one packet per line (hex, from the IP header to the
                              ICRC). For each, prints one JSON object: the IP/UDP/BTH fields
                              scapy decodes, the bytes after the BTH (extension headers,
                              payload, pad), the ICRC on the wire and the ICRC scapy computes.
  roce_scapy.py build         Prints one line per packet scapy builds (with its own
                              ICRC): label=... hex=...
  roce_scapy.py cnp           Prints one line per CNP scapy's cnp() builds (IPv4 and IPv6,
                              several DestQPs and DSCPs, with its ICRC): label=... dqpn=...
                              dscp=... sport=... hex=...
"""
import sys

from scapy.compat import raw
from scapy.contrib.roce import BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw


def emit(fields):
    """One line of space-separated key=value pairs (values have no spaces; booleans as 0/1)."""
    def fmt(v):
        if isinstance(v, bool):
            return "1" if v else "0"
        return str(v).replace(" ", "_")
    print(" ".join(f"{k}={fmt(v)}" for k, v in fields.items()), flush=True)


def decode(path):
    with open(path) as f:
        lines = [l.strip() for l in f if l.strip()]
    for i, line in enumerate(lines):
        data = bytes.fromhex(line)
        pkt = IP(data) if data[0] >> 4 == 4 else IPv6(data)
        out = {"i": i}
        if BTH not in pkt:
            out["error"] = "scapy did not decode a BTH: " + pkt.summary()
            emit(out)
            continue
        bth = pkt[BTH]
        udp = pkt[UDP]
        # compute_icrc ignores its argument; it walks the underlayers (UDP, IP/IPv6) and the
        # payload of the dissected packet, masking as IBTA/rxe do.
        scapy_icrc = bth.compute_icrc(b"")
        wire_icrc = data[-4:]
        out.update({
            "version": 4 if IP in pkt else 6,
            "udp_sport": udp.sport,
            "udp_dport": udp.dport,
            "udp_len": udp.len,
            "udp_chksum": udp.chksum,
            "opcode": bth.opcode,
            "solicited": bth.solicited,
            "migreq": bth.migreq,
            "padcount": bth.padcount,
            "tver": bth.version,
            "pkey": bth.pkey,
            "fecn": bth.fecn,
            "becn": bth.becn,
            "dqpn": bth.dqpn,
            "ackreq": bth.ackreq,
            "psn": bth.psn,
            "after_bth": raw(bth.payload).hex(),
            "icrc_wire": wire_icrc.hex(),
            "icrc_scapy": scapy_icrc.hex(),
            "icrc_ok": scapy_icrc == wire_icrc,
        })
        if IP in pkt:
            ip = pkt[IP]
            out.update({"ip_src": ip.src, "ip_dst": ip.dst, "ip_df": bool(ip.flags.DF), "ip_id": ip.id,
                        "ip_ttl": ip.ttl, "ip_tos": ip.tos, "ip_len": ip.len})
            # Recompute the IPv4 header checksum independently.
            hdr = bytearray(data[:20])
            hdr[10:12] = b"\0\0"
            s = sum(int.from_bytes(hdr[j:j + 2], "big") for j in range(0, 20, 2))
            while s >> 16:
                s = (s & 0xffff) + (s >> 16)
            out["ip_chksum_ok"] = (~s & 0xffff) == ip.chksum
        else:
            ip6 = pkt[IPv6]
            out.update({"ip_src": ip6.src, "ip_dst": ip6.dst, "ip_tc": ip6.tc, "ip_fl": ip6.fl,
                        "ip_hlim": ip6.hlim, "ip_plen": ip6.plen})
        emit(out)


def build():
    v4 = dict(src="10.99.0.2", dst="10.99.0.1", flags="DF", id=0, ttl=64, tos=0)
    v6 = dict(src="fd00::2", dst="fd00::1", hlim=64, tc=0, fl=0)
    reth = bytes.fromhex("00007f0012345000" "11223344" "00001000")
    aeth_ack = bytes.fromhex("1f000005")
    aeth_nak = bytes.fromhex("60000006")
    atomic = bytes.fromhex("0000000000001000" "55667788" "0000000000000001" "0000000000000000")
    imm = bytes.fromhex("deadbeef")
    deth = bytes.fromhex("80010000" "00000001")
    cases = [
        # (label, opcode, after-BTH bytes, payload, pad)
        ("RC_SEND_ONLY len 13", 0x04, b"", bytes(range(13)), 3),
        ("RC_SEND_FIRST len 16", 0x00, b"", bytes(range(16)), 0),
        ("RC_SEND_LAST_WITH_IMMEDIATE len 2", 0x03, imm, b"\xaa\xbb", 2),
        ("RC_RDMA_WRITE_ONLY len 5", 0x0a, reth, b"hello", 3),
        ("RC_RDMA_READ_REQUEST", 0x0c, reth, b"", 0),
        ("RC_RDMA_READ_RESPONSE_ONLY len 7", 0x10, aeth_ack, bytes(7), 1),
        ("RC_ACKNOWLEDGE ack", 0x11, aeth_ack, b"", 0),
        ("RC_ACKNOWLEDGE nak", 0x11, aeth_nak, b"", 0),
        ("RC_COMPARE_SWAP", 0x13, atomic, b"", 0),
        ("UD_SEND_ONLY len 6", 0x64, deth, b"abcdef", 2),
    ]
    for ipname, ipargs, ipcls in (("v4", v4, IP), ("v6", v6, IPv6)):
        for n, (label, op, ext, payload, pad) in enumerate(cases):
            bth = BTH(opcode=op, solicited=n % 2, padcount=pad, pkey=0xffff, dqpn=0x11 + n,
                      ackreq=1, psn=0xfffffe + n & 0xffffff)
            pkt = ipcls(**ipargs) / UDP(sport=0xc000 + n, dport=4791, chksum=0) / bth \
                / Raw(ext + payload + bytes(pad))
            emit({"label": f"{label} {ipname}", "hex": raw(pkt).hex()})


def cnps():
    cases = [(0x000001, 48, 0xc000), (0x123456, 26, 0xd00d), (0xffffff, 0, 0xffff)]
    for ipname, ipcls, addrs in (("v4", IP, ("10.99.0.1", "10.99.0.2")),
                                 ("v6", IPv6, ("fd00::1", "fd00::2"))):
        for dqpn, dscp, sport in cases:
            if ipcls is IP:
                ip = IP(src=addrs[0], dst=addrs[1], flags="DF", id=0, ttl=64, tos=dscp << 2)
            else:
                ip = IPv6(src=addrs[0], dst=addrs[1], hlim=64, tc=dscp << 2, fl=0)
            pkt = ip / UDP(sport=sport, dport=4791, chksum=0) / cnp(dqpn)
            emit({"label": f"cnp {ipname} qp {dqpn:#x}", "v6": ipcls is IPv6, "dqpn": dqpn,
                  "dscp": dscp, "sport": sport, "hex": raw(pkt).hex()})


if __name__ == "__main__":
    if sys.argv[1:2] == ["decode"]:
        decode(sys.argv[2])
    elif sys.argv[1:2] == ["build"]:
        build()
    elif sys.argv[1:2] == ["cnp"]:
        cnps()
    else:
        sys.exit(__doc__)
