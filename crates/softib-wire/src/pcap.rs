//! Reading and writing captures (on the `pcap-file` crate) so every softib tool can record
//! what it sends and receives, and `softib decode` can read what Wireshark or tcpdump wrote.
//!
//! Link types: Ethernet (`LINKTYPE_ETHERNET`, 1) for RoCEv2 frames, raw IP (`LINKTYPE_RAW`,
//! 101) for RoCEv2 packets seen from a UDP socket, and native InfiniBand
//! (`LINKTYPE_INFINIBAND`, 247: LRH through VCRC) for the fabric simulator. The reader also
//! takes pcapng files (Wireshark's default) and any other link type, which it reports as
//! [`LinkType::Other`] so a decoder can skip and count those frames.
//!
//! Wireshark 4.0's pcap reader does not map link type 247 to its InfiniBand dissector
//! ("network type 247 unknown or unsupported"); `softib decode` reads such files itself.
//! For native packets that Wireshark opens as they are, write `LINKTYPE_ERF` (197) with each
//! packet in an ERF record of type INFINIBAND ([`crate::erf`]), as the simulator's captures
//! do. The other way is `LinkType::Other(147)` (`LINKTYPE_USER0`) read with
//! `-o 'uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0",""'` (the conformance test
//! `tests/wireshark_encap.rs` does that).
//!
//! A damaged file gives a [`PcapError`] that names the record and what is wrong; the reader
//! never panics and stops after the first error. Reading is not on the per-packet fast path
//! and may allocate; writing allocates nothing per packet.

use pcap_file::pcap::{PcapHeader, PcapReader, RawPcapPacket};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::fs::File;
use std::io::{BufWriter, Cursor, Read, Write};
use std::path::Path;
use std::time::Duration;

/// Link type of a capture (tcpdump.org link-layer header types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II frames.
    Ethernet,
    /// `LINKTYPE_RAW` (101): IPv4 or IPv6 packets without a link header.
    Raw,
    /// `LINKTYPE_INFINIBAND` (247): native IB packets, LRH through VCRC.
    InfiniBand,
    /// `LINKTYPE_ERF` (197): ERF records ([`crate::erf`]); softib writes native IB packets
    /// as records of type INFINIBAND, which stock Wireshark decodes.
    Erf,
    /// Any other link type, by number.
    Other(u32),
}

impl LinkType {
    /// The link type number.
    pub fn value(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
            LinkType::InfiniBand => 247,
            LinkType::Erf => 197,
            LinkType::Other(v) => v,
        }
    }

    /// The link type for a number. 12 and 14 are historical aliases of raw IP.
    pub fn from_value(v: u32) -> LinkType {
        match v {
            1 => LinkType::Ethernet,
            101 | 12 | 14 => LinkType::Raw,
            247 => LinkType::InfiniBand,
            197 => LinkType::Erf,
            other => LinkType::Other(other),
        }
    }
}

/// What went wrong reading or writing a capture.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The file could not be opened, read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. "opening capture.pcap".
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file does not start with a pcap or pcapng magic number.
    #[error("not a pcap or pcapng file (first bytes {0:02x?})")]
    NotPcap(Vec<u8>),
    /// The file header or a record is damaged.
    #[error("damaged capture at record {record}: {reason}")]
    Damaged {
        /// 1-based record number (0 = the file header).
        record: usize,
        /// What is wrong.
        reason: String,
    },
    /// A frame could not be written.
    #[error("cannot write record {record}: {reason}")]
    Write {
        /// 1-based record number.
        record: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapRecord {
    /// Capture time since the Unix epoch (or since the simulation started).
    pub timestamp: Duration,
    /// Link type of this frame.
    pub linktype: LinkType,
    /// The frame bytes as captured (possibly truncated to the snap length).
    pub data: Vec<u8>,
    /// The frame's length on the wire.
    pub orig_len: u32,
}

enum Inner<R: Read> {
    Pcap(PcapReader<Cursor_<R>>),
    PcapNg(Box<PcapNgReader<Cursor_<R>>>),
}

/// The already-read magic number followed by the rest of the stream.
type Cursor_<R> = std::io::Chain<Cursor<[u8; 4]>, R>;

/// Reads frames from a pcap or pcapng stream.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    record: usize,
    done: bool,
}

impl CaptureReader<File> {
    /// Opens a capture file.
    pub fn open(path: impl AsRef<Path>) -> Result<CaptureReader<File>, PcapError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| PcapError::Io {
            context: format!("opening {}", path.display()),
            source,
        })?;
        CaptureReader::new(file)
    }
}

fn damaged(record: usize, e: impl std::fmt::Display) -> PcapError {
    PcapError::Damaged {
        record,
        reason: e.to_string(),
    }
}

/// Turns pcap-file's errors into ours; a short read means the file ends inside a record.
fn read_error(record: usize, e: pcap_file::PcapError) -> PcapError {
    match e {
        pcap_file::PcapError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            damaged(
                record,
                "the file ends in the middle of this record (truncated capture)",
            )
        }
        pcap_file::PcapError::IoError(io) => PcapError::Io {
            context: format!("reading record {record}"),
            source: io,
        },
        other => damaged(record, other),
    }
}

impl<R: Read> CaptureReader<R> {
    /// Starts reading a stream; reads and checks the file header.
    pub fn new(mut reader: R) -> Result<CaptureReader<R>, PcapError> {
        let mut magic = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match reader.read(&mut magic[got..]) {
                Ok(0) => return Err(PcapError::NotPcap(magic[..got].to_vec())),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(PcapError::Io {
                        context: "reading the capture header".into(),
                        source,
                    })
                }
            }
        }
        let stream = Cursor::new(magic).chain(reader);
        let inner = match u32::from_be_bytes(magic) {
            0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 => {
                Inner::Pcap(PcapReader::new(stream).map_err(|e| read_error(0, e))?)
            }
            0x0A0D_0D0A => Inner::PcapNg(Box::new(
                PcapNgReader::new(stream).map_err(|e| read_error(0, e))?,
            )),
            _ => return Err(PcapError::NotPcap(magic.to_vec())),
        };
        Ok(CaptureReader {
            inner,
            record: 0,
            done: false,
        })
    }

    /// The link type of the file (pcap) or of its first interface (pcapng, if known yet).
    pub fn linktype(&self) -> Option<LinkType> {
        match &self.inner {
            Inner::Pcap(r) => Some(LinkType::from_value(u32::from(r.header().datalink))),
            Inner::PcapNg(r) => r
                .interfaces()
                .first()
                .map(|i| LinkType::from_value(u32::from(i.linktype))),
        }
    }

    /// The next frame, `None` at the end of the file. After an error the reader stops.
    pub fn next_record(&mut self) -> Option<Result<PcapRecord, PcapError>> {
        if self.done {
            return None;
        }
        let r = self.read_one();
        if !matches!(r, Some(Ok(_))) {
            self.done = true;
        }
        r
    }

    fn read_one(&mut self) -> Option<Result<PcapRecord, PcapError>> {
        match &mut self.inner {
            Inner::Pcap(reader) => {
                self.record += 1;
                let record = self.record;
                let header = reader.header();
                let raw = match reader.next_raw_packet()? {
                    Ok(raw) => raw,
                    Err(e) => return Some(Err(read_error(record, e))),
                };
                Some(pcap_record(record, &header, raw))
            }
            Inner::PcapNg(reader) => {
                loop {
                    let block = match reader.next_block()? {
                        Ok(b) => b,
                        Err(e) => return Some(Err(read_error(self.record + 1, e))),
                    };
                    let (interface, timestamp, orig_len, data) = match block {
                        Block::EnhancedPacket(p) => (
                            p.interface_id,
                            p.timestamp,
                            p.original_len,
                            p.data.into_owned(),
                        ),
                        Block::SimplePacket(p) => {
                            (0, Duration::ZERO, p.original_len, p.data.into_owned())
                        }
                        _ => continue,
                    };
                    self.record += 1;
                    let Some(idb) = reader.interfaces().get(interface as usize) else {
                        return Some(Err(damaged(self.record, format!("packet names interface {interface}, which the file never describes"))));
                    };
                    let linktype = LinkType::from_value(u32::from(idb.linktype));
                    return Some(Ok(PcapRecord {
                        timestamp,
                        linktype,
                        data,
                        orig_len,
                    }));
                }
            }
        }
    }
}

/// Validates a pcap record ourselves: pcap-file rejects `orig_len > snaplen`, which real
/// truncated captures legitimately contain.
fn pcap_record(
    record: usize,
    header: &PcapHeader,
    raw: RawPcapPacket<'_>,
) -> Result<PcapRecord, PcapError> {
    let nanos = match header.ts_resolution {
        TsResolution::MicroSecond => raw.ts_frac.checked_mul(1000),
        TsResolution::NanoSecond => Some(raw.ts_frac),
    };
    let Some(nanos) = nanos.filter(|n| *n < 1_000_000_000) else {
        return Err(damaged(
            record,
            format!("timestamp fraction {} is out of range", raw.ts_frac),
        ));
    };
    if raw.incl_len > raw.orig_len {
        return Err(damaged(
            record,
            format!(
                "captured length {} exceeds the original length {}",
                raw.incl_len, raw.orig_len
            ),
        ));
    }
    Ok(PcapRecord {
        timestamp: Duration::new(u64::from(raw.ts_sec), nanos),
        linktype: LinkType::from_value(u32::from(header.datalink)),
        data: raw.data.into_owned(),
        orig_len: raw.orig_len,
    })
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<PcapRecord, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

/// Snap length of the files softib writes: the largest RoCEv2 packet (64 KiB of IP) plus link
/// headers, as libpcap's default.
pub const SNAPLEN: u32 = 262_144;

/// Writes frames of one link type to a pcap file (nanosecond timestamps, native byte order).
///
/// The file header comes from `pcap-file`; the 16-byte record headers are written here so
/// the writer owns its stream (flushable by a long-running tap) and allocates nothing per frame.
pub struct CaptureWriter<W: Write> {
    writer: W,
    linktype: LinkType,
    record: usize,
}

impl CaptureWriter<BufWriter<File>> {
    /// Creates (or truncates) a capture file.
    pub fn create(path: impl AsRef<Path>, linktype: LinkType) -> Result<Self, PcapError> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|source| PcapError::Io {
            context: format!("creating {}", path.display()),
            source,
        })?;
        CaptureWriter::new(BufWriter::new(file), linktype)
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header.
    pub fn new(mut writer: W, linktype: LinkType) -> Result<Self, PcapError> {
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: DataLink::from(linktype.value()),
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
            ..PcapHeader::default()
        };
        header
            .write_to(&mut writer)
            .map_err(|e| write_error(0, e))?;
        Ok(CaptureWriter {
            writer,
            linktype,
            record: 0,
        })
    }

    /// The link type every frame of this file has.
    pub fn linktype(&self) -> LinkType {
        self.linktype
    }

    /// Appends one frame.
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError> {
        self.record += 1;
        let record = self.record;
        let len = match u32::try_from(frame.len()) {
            Ok(len) if len <= SNAPLEN => len,
            _ => {
                let reason = format!(
                    "frame of {} bytes exceeds the snap length {SNAPLEN}",
                    frame.len()
                );
                return Err(PcapError::Write { record, reason });
            }
        };
        let Ok(secs) = u32::try_from(timestamp.as_secs()) else {
            return Err(PcapError::Write {
                record,
                reason: "timestamp beyond the year 2106".into(),
            });
        };
        // Record header (native byte order, as the file header says): ts_sec, ts_nsec,
        // captured length, original length.
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_ne_bytes());
        h[4..8].copy_from_slice(&timestamp.subsec_nanos().to_ne_bytes());
        h[8..12].copy_from_slice(&len.to_ne_bytes());
        h[12..16].copy_from_slice(&len.to_ne_bytes());
        let io = |source| PcapError::Io {
            context: format!("writing record {record}"),
            source,
        };
        self.writer.write_all(&h).map_err(io)?;
        self.writer.write_all(frame).map_err(io)?;
        Ok(())
    }

    /// Flushes buffered frames to the file.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.writer.flush().map_err(|source| PcapError::Io {
            context: "flushing the capture".into(),
            source,
        })
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.flush()?;
        Ok(self.writer)
    }
}

fn write_error(record: usize, e: pcap_file::PcapError) -> PcapError {
    match e {
        pcap_file::PcapError::IoError(source) => PcapError::Io {
            context: format!("writing record {record}"),
            source,
        },
        other => PcapError::Write {
            record,
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_each_linktype() {
        for lt in [LinkType::Ethernet, LinkType::Raw, LinkType::InfiniBand] {
            let mut w = CaptureWriter::new(Vec::new(), lt).unwrap();
            w.write(Duration::new(5, 123_456_789), &[1, 2, 3]).unwrap();
            w.write(Duration::new(6, 0), &[4; 100]).unwrap();
            let bytes = w.into_inner().unwrap();
            let mut r = CaptureReader::new(&bytes[..]).unwrap();
            assert_eq!(r.linktype(), Some(lt));
            let a = r.next_record().unwrap().unwrap();
            assert_eq!(
                a,
                PcapRecord {
                    timestamp: Duration::new(5, 123_456_789),
                    linktype: lt,
                    data: vec![1, 2, 3],
                    orig_len: 3
                }
            );
            let b = r.next_record().unwrap().unwrap();
            assert_eq!(b.data, vec![4; 100]);
            assert!(r.next_record().is_none());
        }
    }

    #[test]
    fn bad_files_give_clear_errors() {
        assert!(matches!(
            CaptureReader::new(&b""[..]),
            Err(PcapError::NotPcap(_))
        ));
        assert!(matches!(
            CaptureReader::new(&b"hello world, not a capture"[..]),
            Err(PcapError::NotPcap(_))
        ));
        let mut w = CaptureWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
        w.write(Duration::ZERO, &[9; 40]).unwrap();
        let bytes = w.into_inner().unwrap();
        // Truncated header.
        assert!(CaptureReader::new(&bytes[..10]).is_err());
        // Truncated record: an error naming record 1, then the reader stops.
        let mut r = CaptureReader::new(&bytes[..bytes.len() - 5]).unwrap();
        let e = r.next_record().unwrap().unwrap_err();
        assert!(e.to_string().contains("record 1"), "{e}");
        assert!(r.next_record().is_none());
        // incl_len > orig_len.
        let mut bad = bytes.clone();
        bad[24 + 12..24 + 16].copy_from_slice(&1u32.to_ne_bytes());
        let e = CaptureReader::new(&bad[..])
            .unwrap()
            .next_record()
            .unwrap()
            .unwrap_err();
        assert!(matches!(e, PcapError::Damaged { record: 1, .. }), "{e}");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x9E37_79B9u32;
        for len in 0..400usize {
            let mut bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            for magic in [0xA1B2_C3D4u32, 0x4D3C_B2A1, 0x0A0D_0D0A] {
                if len >= 4 {
                    bytes[..4].copy_from_slice(&magic.to_be_bytes());
                }
                if let Ok(r) = CaptureReader::new(&bytes[..]) {
                    for rec in r.take(50) {
                        let _ = rec;
                    }
                }
            }
        }
    }
}
