//! A pcap writer for RoCEv2 packets as the sim carries them (IP header first, no Ethernet).
//!
//! Owns: [`PcapWriter`], the classic libpcap file format (`pcap-savefile(5)`) with nanosecond
//! timestamps (magic `0xa1b23c4d`) and link type `LINKTYPE_RAW` (101): each record is an IPv4
//! or IPv6 packet, told apart by its version nibble, which is what the sim's packets are.
//! Wireshark/tshark decode UDP port 4791 as RRoCE (RoCEv2). [`PcapTee`] is the writer as a
//! packet rule: every link (the stepped [`World`](crate::world::World), the UDP link) tees
//! the packets it carries through one. Must not: look inside the packets or decide which
//! ones to write (a tee writes every packet a link shows it).

use std::io::{self, Write};

use crate::link::rule::{Rule, Seen};

/// pcap magic for nanosecond-resolution timestamps (`pcap-savefile(5)`).
pub const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
/// `LINKTYPE_RAW`: the packet starts at the IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// Longest packet recorded whole (longer ones are truncated to this, as `tcpdump -s` does).
pub const SNAPLEN: u32 = 65_535;

/// Writes packets into a pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    packets: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Starts a pcap stream on `out`: writes the file header.
    ///
    /// # Errors
    /// The write error of `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&PCAP_MAGIC_NS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes()); // version 2.4
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs: 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self { out, packets: 0 })
    }

    /// Records `bytes` (an IP packet) seen at `ts_ns` nanoseconds (virtual or real time).
    ///
    /// # Errors
    /// The write error of the underlying stream.
    pub fn write_packet(&mut self, ts_ns: u64, bytes: &[u8]) -> io::Result<()> {
        let orig = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let cap = orig.min(SNAPLEN);
        let secs = u32::try_from(ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
        let nanos = (ts_ns % 1_000_000_000) as u32;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&nanos.to_le_bytes());
        h[8..12].copy_from_slice(&cap.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.out.write_all(&h)?;
        let body = bytes.get(..cap as usize).unwrap_or(bytes);
        self.out.write_all(body)?;
        self.packets += 1;
        Ok(())
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes the underlying stream.
    ///
    /// # Errors
    /// The flush error of the underlying stream.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying stream (not flushed).
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// A [`PcapWriter`] as a packet rule: records every packet its link shows it (delivered,
/// sent, or dropped by a rule: `Seen`), stamped with the link's clock, and flushes the stream
/// after each one: a process may exit without dropping its link (a C program that returns from
/// `main` without `ibv_close_device`, as perftest's passive side does), and the file must hold
/// every packet shown so far. A write error stops the recording (a full disk must not stop the
/// link) and is kept ([`PcapTee::error`]).
#[derive(Debug)]
pub struct PcapTee<W: Write> {
    writer: Option<PcapWriter<W>>,
    error: Option<io::Error>,
}

impl<W: Write> PcapTee<W> {
    /// A tee writing into `writer`.
    pub fn new(writer: PcapWriter<W>) -> Self {
        Self {
            writer: Some(writer),
            error: None,
        }
    }

    /// Writes into `writer` from now on (`None`: stops); hands the writer it had back.
    pub fn replace(&mut self, writer: Option<PcapWriter<W>>) -> Option<PcapWriter<W>> {
        std::mem::replace(&mut self.writer, writer)
    }

    /// The last write error, if any (writing stopped then).
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }
}

impl<W: Write + Send + 'static> Rule for PcapTee<W> {
    fn on_seen(&mut self, bytes: &[u8], now_ns: u64, _: Seen) {
        if let Some(w) = self.writer.as_mut()
            && let Err(e) = w.write_packet(now_ns, bytes).and_then(|()| w.flush())
        {
            self.writer = None;
            self.error = Some(e);
        }
    }

    fn active(&self) -> bool {
        self.writer.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records_follow_the_savefile_format() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_packet(3_000_000_123, &[0x45, 1, 2]).unwrap();
        assert_eq!(w.packets(), 1);
        let b = w.into_inner();
        assert_eq!(b.len(), 24 + 16 + 3);
        assert_eq!(
            &b[0..4],
            &[0x4d, 0x3c, 0xb2, 0xa1],
            "ns magic, little-endian"
        );
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 101);
        assert_eq!(
            u32::from_le_bytes(b[24..28].try_into().unwrap()),
            3,
            "seconds"
        );
        assert_eq!(u32::from_le_bytes(b[28..32].try_into().unwrap()), 123, "ns");
        assert_eq!(
            u32::from_le_bytes(b[32..36].try_into().unwrap()),
            3,
            "caplen"
        );
        assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), 3, "len");
        assert_eq!(&b[40..], &[0x45, 1, 2]);
    }

    /// A stream whose bytes stay readable through a second handle.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_tee_over_a_buffered_stream_has_written_each_packet_before_the_next() {
        let file = Shared::default();
        // never dropped, as when the process exits without dropping its link
        let mut t = std::mem::ManuallyDrop::new(PcapTee::new(
            PcapWriter::new(io::BufWriter::new(file.clone())).unwrap(),
        ));
        let len = || file.0.lock().map(|b| b.len()).unwrap_or(0);
        t.on_seen(&[0x45, 1, 2], 5, Seen::Sent);
        let first = len();
        assert_eq!(
            first,
            24 + 16 + 3,
            "the header and the packet are in the file"
        );
        t.on_seen(&[0x45, 3], 6, Seen::Delivered);
        let second = len();
        assert_eq!(second, 24 + 16 + 3 + 16 + 2);
    }

    /// A stream that refuses every write.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_tee_records_what_it_is_shown_and_stops_at_a_write_error() {
        let mut t = PcapTee::new(PcapWriter::new(Vec::new()).unwrap());
        assert!(t.active());
        t.on_seen(&[0x45, 1], 5, Seen::Delivered);
        t.on_seen(&[0x45, 2], 6, Seen::Dropped);
        let w = t.replace(None).unwrap();
        assert_eq!(w.packets(), 2);
        assert!(!t.active());
        let mut full = PcapTee {
            writer: Some(PcapWriter {
                out: Full,
                packets: 0,
            }),
            error: None,
        };
        full.on_seen(&[0x45], 1, Seen::Sent);
        assert!(!full.active(), "stopped");
        assert!(full.error().is_some());
    }
}
