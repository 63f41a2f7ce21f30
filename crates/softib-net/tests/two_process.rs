//! Two softib devices in two processes on loopback, connected through softib's own TCP
//! endpoint exchange: RDMA WRITE, RDMA READ, FETCH_AND_ADD and SEND between them, memory
//! checked on both sides, and a pcap of the client decoded by softib-wire with every ICRC
//! valid.
//!
//! The server side is this same test binary re-run with `--ignored --exact
//! server_process`, told its role by environment variables.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{pattern, side, unique_loopback, Side};
use softib_net::oob::stream::OobStream;
use softib_transport::{QpType, RecvWr, SendFlags, SendWr, Sge, WrOpcode};

const MIB: usize = 1 << 20;
const ENV: &str = "SOFTIB_NET_TWO_PROCESS_SERVER";

fn sge(s: &Side, offset: u64, len: u32) -> Vec<Sge> {
    vec![Sge {
        addr: s.mr.addr + offset,
        length: len,
        lkey: s.mr.keys.lkey,
    }]
}

/// The server process: announces its exchange port on stdout, exchanges endpoints, posts a
/// receive, waits for the client's SEND, checks what the client wrote, reports over TCP.
#[test]
#[ignore = "server half of two_devices_in_two_processes, run by that test"]
fn server_process() {
    assert!(
        std::env::var(ENV).is_ok(),
        "run by two_devices_in_two_processes, not alone"
    );
    let bind = std::env::var(ENV).unwrap();
    let s = side(&bind, QpType::Rc, 4 * MIB, |_| {});
    s.ctx.write_mr(&s.mr, 0, &9u64.to_le_bytes()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("LISTEN {}", listener.local_addr().unwrap().port());
    let mut oob = OobStream::accept(&listener, Duration::from_secs(30)).unwrap();
    let peer = oob.exchange_endpoint(&s.endpoint()).unwrap();
    s.connect(QpType::Rc, &peer);
    s.ctx
        .post_recv(
            s.qpn,
            &[RecvWr {
                wr_id: 1,
                sg_list: sge(&s, 3 * MIB as u64, 65536),
            }],
        )
        .unwrap();
    // The client SENDs after its WRITE, READ and atomic completed.
    let wc = s.completions(1, 30);
    let verdict = if wc[0].byte_len != 4000 {
        format!("SEND carried {} bytes, not 4000", wc[0].byte_len)
    } else if s.read(3 * MIB, 4000) != pattern(22, 4000) {
        "SEND payload differs".to_string()
    } else if s.read(4096, MIB) != pattern(21, MIB) {
        "RDMA WRITE payload differs".to_string()
    } else if s.read(0, 8) != 12u64.to_le_bytes() {
        format!("FETCH_AND_ADD left {:?}", s.read(0, 8))
    } else {
        "ok".to_string()
    };
    let mut msg = [0u8; 64];
    msg[..verdict.len().min(64)].copy_from_slice(&verdict.as_bytes()[..verdict.len().min(64)]);
    oob.write_msg("verdict", &msg).unwrap();
    let mut done = [0u8; 5];
    oob.read_msg("done", &mut done).unwrap();
}

#[test]
fn two_devices_in_two_processes() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "server_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ENV, unique_loopback(2, 0x5a))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines.next().expect("server printed its port").unwrap();
        // libtest prints "test server_process ... " on the same line first.
        if let Some(i) = line.find("LISTEN ") {
            break line[i + 7..].trim().parse().unwrap();
        }
    };
    let dir = std::env::temp_dir().join(format!("softib-two-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("client.pcap");
    let c = side(&unique_loopback(1, 0x5a), QpType::Rc, 4 * MIB, |cfg| {
        cfg.pcap = Some(pcap.clone())
    });
    let mut oob = OobStream::connect("127.0.0.1", port, Duration::from_secs(30)).unwrap();
    let peer = oob.exchange_endpoint(&c.endpoint()).unwrap();
    c.connect(QpType::Rc, &peer);
    let region = peer.regions[0];

    let data = pattern(21, MIB);
    c.ctx.write_mr(&c.mr, 0, &data).unwrap();
    let write = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: sge(&c, 0, MIB as u32),
        remote_addr: region.addr + 4096,
        rkey: region.rkey,
        ..Default::default()
    };
    let read = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaRead,
        flags: SendFlags::SIGNALED,
        sg_list: sge(&c, MIB as u64, MIB as u32),
        remote_addr: region.addr + 4096,
        rkey: region.rkey,
        ..Default::default()
    };
    let fadd = SendWr {
        wr_id: 3,
        opcode: WrOpcode::AtomicFetchAndAdd,
        flags: SendFlags::SIGNALED,
        sg_list: sge(&c, 2 * MIB as u64, 8),
        remote_addr: region.addr,
        rkey: region.rkey,
        compare_add: 3,
        ..Default::default()
    };
    // The READ follows the WRITE on the same QP, so it reads what the WRITE put there.
    c.ctx.post_send(c.qpn, &[write, read, fadd]).unwrap();
    c.completions(3, 30);
    assert_eq!(
        c.read(MIB, MIB),
        data,
        "READ returns what WRITE wrote in the other process"
    );
    assert_eq!(c.read(2 * MIB, 8), 9u64.to_le_bytes());
    let msg = pattern(22, 4000);
    c.ctx.write_mr(&c.mr, 3 * MIB, &msg).unwrap();
    let send = SendWr {
        wr_id: 4,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: sge(&c, 3 * MIB as u64, 4000),
        ..Default::default()
    };
    c.ctx.post_send(c.qpn, &[send]).unwrap();
    c.completions(1, 30);
    let mut verdict = [0u8; 64];
    oob.read_msg("verdict", &mut verdict).unwrap();
    oob.write_msg("done", b"done\0").unwrap();
    let verdict = String::from_utf8_lossy(&verdict)
        .trim_end_matches('\0')
        .to_string();
    assert_eq!(verdict, "ok");
    assert!(child.wait().unwrap().success(), "server process failed");
    let (dev, drv) = c.ctx.counters();
    drop(c);

    // Every datagram of the client's capture is RoCEv2 with a valid ICRC.
    let mut r = softib_wire::pcap::CaptureReader::open(&pcap).unwrap();
    let mut n = 0u64;
    while let Some(rec) = r.next_record() {
        let rec = rec.unwrap();
        let f = softib_wire::roce::RoceFrame::parse_ip(&rec.data).unwrap();
        assert!(
            f.icrc_ok(),
            "record {n}: ICRC {:#x} != {:#x}",
            f.icrc,
            f.computed_icrc
        );
        n += 1;
    }
    assert_eq!(n, drv.tx_datagrams + drv.rx.accepted, "{dev:?} {drv:?}");
    assert!(
        n > 512,
        "a 1 MiB write and read at MTU 4096 is over 512 packets: {n}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
