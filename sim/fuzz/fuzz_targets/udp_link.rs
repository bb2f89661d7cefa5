//! Fuzz target `udp_link`: datagrams into the UDP link's receive handling
//! (`UdpLink::push_rx`, then `UdpLink::deliver_rx`: `UDP_GRO` trains cut into segments,
//! IP/UDP headers rebuilt in front of each, the IPv4 ID recovered from the ICRC), each packet
//! handed to the link's device as the fabric's pump hands it (`receive_udp_in_place`). The
//! device (the link's profile, 127.0.0.1) and its peer (127.0.0.2), RC connected and UD in
//! RTS with receives posted, are built once per process and reset to their snapshot before
//! every input, and the link, bound once too, forgets the IDs it learned from its peers
//! (`UdpLink::forget_rx`), so a finding replays from its file alone.
//!
//! Input: records `[flags][sport:2][seg:2][len:2][UDP payload: BTH through ICRC]`. `flags`:
//! bit 0 writes the ICRC for IPv4 ID `id` (two more bytes, big-endian, before `len`;
//! segment `k` of a train gets `id + k`), about half the inputs, so the link must solve for
//! the ID; bit 1 sets the BTH destination QP to the device's RC (bit 2: UD) QP.
//!
//! Asserts that nothing panics; that every packet the link says it checked has a right
//! ICRC over the header it wrote; that a packet whose ICRC the input wrote for an ID is
//! checked, its ID recovered; and that the device still answers a command.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run udp_link seeds/udp_link` in `sim/fuzz`.

#![no_main]

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};

use bypass_hw::cmd::Opcode;
use bypass_hw::roce::icrc::{self, ICRC_LEN};
use bypass_hw::roce::ip::{DEFAULT_TTL, IpSpec, Ipv4Spec, UdpPorts};
use bypass_sim::Profile;
use bypass_sim::link::udp::{ROCE_PORT, UdpLink};
use bypass_sim_fuzz::common::header;
use bypass_sim_fuzz::common::pair::{Pair, PairSnapshot};
use bypass_sim_fuzz::input::Input;
use bypass_sim_fuzz::packet::icrc_for;
use bypass_sim_fuzz::persist::{self, Persistent, Resettable};
use libfuzzer_sys::fuzz_target;

/// Host memory per NIC (a reset copies it back: keep it small).
const MEM: usize = 400 << 10;
/// The longest datagram a record carries (a jumbo frame's).
const MAX_DATAGRAM: usize = 9216;
/// BTH length: a shorter payload carries no packet.
const BTH_LEN: usize = 12;

const LOCAL: [u8; 4] = [127, 0, 0, 1];
const PEER: [u8; 4] = [127, 0, 0, 2];

/// The link and the NICs behind it.
struct World {
    link: UdpLink,
    pair: Pair,
}

impl Resettable for World {
    type Snapshot = PairSnapshot;
    fn snapshot(&self) -> PairSnapshot {
        self.pair.snapshot()
    }
    fn reset_to(&mut self, snap: &PairSnapshot) {
        self.pair.reset_to(snap);
        self.link.forget_rx();
    }
}

thread_local! {
    static WORLD: RefCell<Option<Persistent<World>>> = const { RefCell::new(None) };
}

/// The link on 127.0.0.1, its device (A) and the device's peer at 127.0.0.2 (B).
fn world() -> World {
    let link = UdpLink::bind(SocketAddr::from((LOCAL, 0))).expect("bind a UDP link on 127.0.0.1");
    let pa = link.profile();
    let mut pb = Profile::with_id(2);
    pb.ports[0].gids = vec![Profile::ipv4_gid(PEER)];
    let pair = Pair::connected_as(pa, pb, MEM);
    World { link, pair }
}

/// One record's datagram, with the fix-ups its flags ask for; the ID its ICRCs were written
/// for, if any.
fn datagram(p: &Pair, flags: u8, data: &mut Input<'_>) -> (u16, usize, Vec<u8>, Option<u16>) {
    let sport = data.u16();
    let seg = usize::from(data.u16());
    let id = (flags & 1 != 0).then(|| data.u16());
    let mut d = data.record(MAX_DATAGRAM).to_vec();
    let n = d.len();
    let seg_len = if seg == 0 || seg > n { n.max(1) } else { seg };
    let qpn = if flags & 4 == 0 {
        p.a.rc.qpn
    } else {
        p.a.ud.qpn
    };
    for (k, s) in d.chunks_mut(seg_len).enumerate() {
        if flags & 2 != 0
            && let Some(q) = s.get_mut(5..8)
        {
            q.copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        if let Some(id) = id {
            let ip = IpSpec::V4(Ipv4Spec {
                src: PEER,
                dst: LOCAL,
                tos: 0,
                ttl: DEFAULT_TTL,
                id: id.wrapping_add(k as u16),
                dont_fragment: true,
            });
            let ports = UdpPorts {
                src: sport,
                dst: ROCE_PORT,
            };
            icrc_for(&ip, ports, s);
        }
    }
    (sport, seg, d, id)
}

fn run(w: &mut World, data: &[u8]) {
    let World { link, pair: p } = w;
    let mut data = Input(data);
    while !data.is_empty() {
        let flags = data.u8();
        let (sport, seg, d, id) = datagram(p, flags, &mut data);
        let from = SocketAddr::from((Ipv4Addr::from(PEER), sport));
        link.push_rx(from, &d, seg);
        let dev = &mut p.a.raw.dev;
        link.deliver_rx(|pkt| {
            let ok = icrc::check(pkt.bytes).unwrap_or(false);
            assert!(
                !pkt.icrc_checked || ok,
                "the link passed a packet as checked whose ICRC is wrong"
            );
            let covered = pkt.bytes.len() >= pkt.ip.header_len() + 8 + BTH_LEN + ICRC_LEN;
            if id.is_some() && covered {
                assert!(
                    pkt.icrc_checked && ok,
                    "the link did not recover the IPv4 ID of a right ICRC"
                );
            }
            dev.receive_udp_in_place(pkt.bytes, pkt.ip, pkt.ports, pkt.icrc_checked);
        });
        while dev.step() {}
        while let Some(out) = dev.take_tx() {
            p.b.raw.dev.receive(out);
        }
        while p.b.raw.dev.step() {}
        while p.b.raw.dev.take_tx().is_some() {}
    }
    let a = &mut p.a;
    let mut cq = a.cq;
    for _ in 0..64 {
        if a.raw.poll_cq(&mut cq).is_none() {
            break;
        }
    }
    a.cq = cq;
    let i = header(Opcode::NOP, 0, 16);
    a.raw
        .cmd(&i, 16)
        .expect("the device still answers commands");
}

fuzz_target!(|data: &[u8]| {
    persist::with(&WORLD, world, |w| run(w, data));
});
