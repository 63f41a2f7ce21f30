//! `softib decode FILE [--json]`: one line per RoCEv2 / InfiniBand packet of a capture.
//!
//! The text form follows what users know from `tshark`: frame number, time relative to the
//! first frame, addresses, then the transport fields. The JSON form is one object per line
//! (JSON Lines) with stable keys, so scripts and tests can consume it; its summary goes to
//! stderr so stdout stays pure JSON.

use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};
use softib_wire::dissect::{dissect, Dissection, Encapsulation, Endpoints};
use softib_wire::pcap::CaptureReader;
use softib_wire::{Error as WireError, PacketRepr, Syndrome};

/// Arguments of `softib decode`.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// The capture to decode (pcap or pcapng; Ethernet, raw IP, LINKTYPE_INFINIBAND or ERF).
    pub file: PathBuf,
    /// Print one JSON object per packet instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What a decode run saw, printed at the end.
#[derive(Debug, Default)]
struct Tally {
    packets: u64,
    bad_icrc: u64,
    bad_vcrc: u64,
    malformed: u64,
    skipped: u64,
}

/// Runs `softib decode`.
pub fn run(args: &DecodeArgs) -> Result<()> {
    let mut reader = CaptureReader::open(&args.file)
        .with_context(|| format!("cannot read capture {}", args.file.display()))?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut tally = Tally::default();
    let mut first_time: Option<Duration> = None;
    let mut frame_no = 0u64;
    let mut line = String::new();
    while let Some(record) = reader.next_record() {
        let record = record.with_context(|| format!("in capture {}", args.file.display()))?;
        frame_no += 1;
        let start = *first_time.get_or_insert(record.timestamp);
        let time = record.timestamp.saturating_sub(start).as_secs_f64();
        line.clear();
        match dissect(record.linktype, &record.data) {
            Err(WireError::NotInfiniBand(_)) => {
                tally.skipped += 1;
                continue;
            }
            Err(e) => {
                tally.malformed += 1;
                if args.json {
                    let v = json!({"frame": frame_no, "time": time, "error": e.to_string()});
                    writeln!(line, "{v}").ok();
                } else {
                    writeln!(line, "{frame_no:>6} {time:>12.6} malformed: {e}").ok();
                }
            }
            Ok(d) => {
                tally.packets += 1;
                tally.bad_icrc += u64::from(!d.icrc_ok());
                tally.bad_vcrc += u64::from(d.vcrc_ok() == Some(false));
                tally.malformed += u64::from(d.packet.is_err());
                if args.json {
                    writeln!(line, "{}", Value::Object(json_record(frame_no, time, &d))).ok();
                } else {
                    text_record(&mut line, frame_no, time, &d);
                }
            }
        }
        if let Err(e) = out.write_all(line.as_bytes()) {
            return stdout_closed_or(e);
        }
    }
    let summary = format!(
        "{} packets, {} with a bad ICRC, {} with a bad VCRC, {} malformed; {} other frames skipped",
        tally.packets, tally.bad_icrc, tally.bad_vcrc, tally.malformed, tally.skipped
    );
    let written = if args.json {
        out.flush().map(|()| eprintln!("{summary}"))
    } else {
        writeln!(out, "{summary}").and_then(|()| out.flush())
    };
    written.or_else(stdout_closed_or)
}

/// A reader that stopped reading (`softib decode ... | head`) is a normal end, as for any
/// Unix filter; any other write failure is an error.
fn stdout_closed_or(e: io::Error) -> Result<()> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(e).context("cannot write to standard output")
    }
}

/// The extension-header fields of a packet as (key, value) pairs, in header order. Keys are
/// `<header>_<field>` so text and JSON name every field the same way.
fn extension_fields(p: &PacketRepr<'_>) -> Vec<(&'static str, Value)> {
    let mut f = Vec::new();
    if let Some(h) = p.rdeth {
        f.push(("rdeth_ee_context", json!(h.ee_context)));
    }
    if let Some(h) = p.deth {
        f.push(("deth_qkey", json!(h.qkey)));
        f.push(("deth_src_qp", json!(h.src_qp)));
    }
    if let Some(h) = p.xrceth {
        f.push(("xrceth_xrc_srq", json!(h.xrc_srq)));
    }
    if let Some(h) = p.reth {
        f.push(("reth_va", json!(h.va)));
        f.push(("reth_rkey", json!(h.rkey)));
        f.push(("reth_dma_len", json!(h.dma_len)));
    }
    if let Some(h) = p.atomic_eth {
        f.push(("atomiceth_va", json!(h.va)));
        f.push(("atomiceth_rkey", json!(h.rkey)));
        f.push(("atomiceth_swap_add", json!(h.swap_or_add)));
        f.push(("atomiceth_compare", json!(h.compare)));
    }
    if let Some(h) = p.aeth {
        f.push(("aeth_syndrome", json!(h.syndrome.to_u8())));
        f.push(("aeth_kind", json!(syndrome_text(h.syndrome))));
        f.push(("aeth_msn", json!(h.msn)));
    }
    if let Some(h) = p.atomic_ack_eth {
        f.push(("atomicacketh_orig", json!(h.orig_remote_data)));
    }
    if let Some(v) = p.immdt {
        f.push(("immdt", json!(v)));
    }
    if let Some(v) = p.ieth {
        f.push(("ieth_rkey", json!(v)));
    }
    f
}

/// The AETH syndrome in words (IBA 9.7.5.2, table 43).
fn syndrome_text(s: Syndrome) -> String {
    match s {
        Syndrome::Ack { credit } => match credit.wqes() {
            Some(n) => format!("ACK credits={n}"),
            None => "ACK credits=unlimited".to_string(),
        },
        Syndrome::RnrNak { timer } => format!("RNR_NAK timer={}us", timer.micros()),
        Syndrome::Nak(code) => format!("NAK {code:?}"),
        Syndrome::Reserved(b) => format!("reserved {b:#04x}"),
    }
}

fn endpoint_text(d: &Dissection<'_>) -> String {
    match d.endpoints() {
        Endpoints::Ip { src, dst } => format!("{}:{} -> {}:{}", src.0, src.1, dst.0, dst.1),
        Endpoints::Lid { slid, dlid } => format!("LID {slid} -> LID {dlid}"),
    }
}

fn text_record(line: &mut String, frame_no: u64, time: f64, d: &Dissection<'_>) {
    write!(line, "{frame_no:>6} {time:>12.6} {}", endpoint_text(d)).ok();
    if let Encapsulation::Native(n) = &d.encapsulation {
        write!(line, " VL{} SL{}", n.lrh.vl, n.lrh.sl).ok();
    }
    match &d.packet {
        Err(e) => {
            write!(line, " malformed transport: {e}").ok();
        }
        Ok(p) => {
            let b = &p.bth;
            write!(
                line,
                " {} qp={:#08x} psn={} A={} SE={} pad={}",
                b.opcode.name(),
                b.dest_qp,
                b.psn,
                u8::from(b.ack_req),
                u8::from(b.solicited),
                b.pad_count
            )
            .ok();
            if b.fecn || b.becn {
                write!(line, " FECN={} BECN={}", u8::from(b.fecn), u8::from(b.becn)).ok();
            }
            for (key, value) in extension_fields(p) {
                match value {
                    Value::Number(n) if key.ends_with("_va") || key.ends_with("rkey") => {
                        write!(line, " {key}={:#x}", n.as_u64().unwrap_or(0)).ok();
                    }
                    Value::String(s) => {
                        write!(line, " {key}=\"{s}\"").ok();
                    }
                    v => {
                        write!(line, " {key}={v}").ok();
                    }
                }
            }
            write!(line, " len={}", p.payload.len()).ok();
        }
    }
    if d.ecn() == Some(3) {
        line.push_str(" ECN=CE");
    }
    write!(line, " icrc={}", if d.icrc_ok() { "ok" } else { "BAD" }).ok();
    if let Some(v) = d.vcrc_ok() {
        write!(line, " vcrc={}", if v { "ok" } else { "BAD" }).ok();
    }
    line.push('\n');
}

fn json_record(frame_no: u64, time: f64, d: &Dissection<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("frame".into(), json!(frame_no));
    m.insert("time".into(), json!(time));
    match d.endpoints() {
        Endpoints::Ip { src, dst } => {
            m.insert("src".into(), json!(src.0.to_string()));
            m.insert("src_port".into(), json!(src.1));
            m.insert("dst".into(), json!(dst.0.to_string()));
            m.insert("dst_port".into(), json!(dst.1));
        }
        Endpoints::Lid { slid, dlid } => {
            m.insert("slid".into(), json!(slid));
            m.insert("dlid".into(), json!(dlid));
        }
    }
    if let Encapsulation::Native(n) = &d.encapsulation {
        m.insert("vl".into(), json!(n.lrh.vl));
        m.insert("sl".into(), json!(n.lrh.sl));
    }
    if let Some(ecn) = d.ecn() {
        m.insert("ecn".into(), json!(ecn));
    }
    match &d.packet {
        Err(e) => {
            m.insert("error".into(), json!(e.to_string()));
        }
        Ok(p) => {
            let b = &p.bth;
            m.insert("opcode".into(), json!(b.opcode.value()));
            m.insert("opcode_name".into(), json!(b.opcode.name()));
            m.insert("dest_qp".into(), json!(b.dest_qp));
            m.insert("psn".into(), json!(b.psn));
            m.insert("ack_req".into(), json!(b.ack_req));
            m.insert("solicited".into(), json!(b.solicited));
            m.insert("pad_count".into(), json!(b.pad_count));
            m.insert("pkey".into(), json!(b.pkey));
            m.insert("fecn".into(), json!(b.fecn));
            m.insert("becn".into(), json!(b.becn));
            for (key, value) in extension_fields(p) {
                m.insert(key.into(), value);
            }
            m.insert("payload_len".into(), json!(p.payload.len()));
        }
    }
    m.insert("icrc_ok".into(), json!(d.icrc_ok()));
    if let Some(v) = d.vcrc_ok() {
        m.insert("vcrc_ok".into(), json!(v));
    }
    m
}
