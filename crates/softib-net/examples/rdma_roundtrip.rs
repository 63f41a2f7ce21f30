//! RDMA WRITE, READ and atomics between two softib devices, across processes or hosts.
//!
//! ```text
//! # terminal 1 (server: exposes 1 MiB, waits for the client)
//! cargo run -p softib-net --example rdma_roundtrip -- server 127.0.0.2:4791
//! # terminal 2 (client: writes, reads back, fetch-adds, compare-swaps)
//! cargo run -p softib-net --example rdma_roundtrip -- client 127.0.0.1:4791 127.0.0.1
//! ```
//! The endpoints are exchanged over TCP port 18516 (softib's own JSON format). Each side
//! prints what it checked; a mismatch exits with status 1.

use std::time::Duration;

use softib_net::context::{ConnectOptions, Context, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::{
    AccessFlags, QpCap, QpInitAttr, QpType, SendFlags, SendWr, Sge, WcStatus, WrOpcode,
};

const PORT: u16 = 18516;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (role, bind) = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some(r @ ("server" | "client")), Some(b)) => (r, b),
        _ => {
            eprintln!(
                "usage: rdma_roundtrip server BIND_ADDR:PORT | client BIND_ADDR:PORT SERVER_HOST"
            );
            std::process::exit(2);
        }
    };
    let bind = bind
        .parse()
        .unwrap_or_else(|e| fail(&format!("bad address {bind}: {e}")));
    let ctx = Context::open(NetConfig::new(bind), WaitMode::default())
        .unwrap_or_else(|e| fail(&e.to_string()));
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256).unwrap_or_else(|e| fail(&e.to_string()));
    let mr = ctx
        .reg_mr(pd, 1 << 20, AccessFlags::all())
        .unwrap_or_else(|e| fail(&e.to_string()));
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let qpn = ctx
        .create_qp(pd, init)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let peer = if role == "server" {
        None
    } else {
        Some(
            args.get(3)
                .map(String::as_str)
                .unwrap_or_else(|| fail("client needs SERVER_HOST")),
        )
    };
    println!(
        "{role}: device {} (MTU {:?}), QP {qpn:#x}, exchanging endpoints on TCP {PORT}",
        ctx.local_addr(),
        ctx.mtu()
    );
    let theirs = ctx
        .handshake(
            qpn,
            QpType::Rc,
            &[mr],
            peer,
            PORT,
            Duration::from_secs(60),
            &ConnectOptions::default(),
        )
        .unwrap_or_else(|e| fail(&e.to_string()));
    println!(
        "{role}: connected to QP {:#x} at {}",
        theirs.qpn, theirs.gid
    );
    if role == "server" {
        // The client does everything; wait for its atomics to land, then show the word.
        let mut word = [0u8; 8];
        for _ in 0..600 {
            ctx.read_mr(&mr, 0, &mut word)
                .unwrap_or_else(|e| fail(&e.to_string()));
            if u64::from_le_bytes(word) == 1000 {
                println!(
                    "server: word 0 is 1000 after the client's FETCH_AND_ADD and COMPARE_AND_SWAP"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        fail("the client's atomics did not arrive within 60 s");
    }
    let remote = theirs
        .regions
        .first()
        .copied()
        .unwrap_or_else(|| fail("server exposed no memory"));
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
    ctx.write_mr(&mr, 4096, &data)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let sge = |off: u64, len: u32| {
        vec![Sge {
            addr: mr.addr + off,
            length: len,
            lkey: mr.keys.lkey,
        }]
    };
    let wrs = [
        SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite,
            flags: SendFlags::SIGNALED,
            sg_list: sge(4096, 65536),
            remote_addr: remote.addr + 4096,
            rkey: remote.rkey,
            ..Default::default()
        },
        SendWr {
            wr_id: 2,
            opcode: WrOpcode::RdmaRead,
            flags: SendFlags::SIGNALED,
            sg_list: sge(131072, 65536),
            remote_addr: remote.addr + 4096,
            rkey: remote.rkey,
            ..Default::default()
        },
        SendWr {
            wr_id: 3,
            opcode: WrOpcode::AtomicFetchAndAdd,
            flags: SendFlags::SIGNALED,
            sg_list: sge(8, 8),
            remote_addr: remote.addr,
            rkey: remote.rkey,
            compare_add: 5,
            ..Default::default()
        },
        SendWr {
            wr_id: 4,
            opcode: WrOpcode::AtomicCmpAndSwp,
            flags: SendFlags::SIGNALED,
            sg_list: sge(16, 8),
            remote_addr: remote.addr,
            rkey: remote.rkey,
            compare_add: 5,
            swap: 1000,
            ..Default::default()
        },
    ];
    ctx.post_send(qpn, &wrs)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let mut wcs = [softib_transport::harness::empty_wc(); 8];
    let mut done = 0;
    while done < wrs.len() {
        let n = ctx.wait_cq(cq, &mut wcs, Duration::from_secs(30));
        if n == 0 {
            fail("no completion within 30 s");
        }
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                fail(&format!(
                    "WR {} failed: {} (vendor error {})",
                    wc.wr_id,
                    wc.status.as_str(),
                    wc.vendor_err
                ));
            }
            println!("client: WR {} ({:?}) completed", wc.wr_id, wc.opcode);
        }
        done += n;
    }
    let mut back = vec![0u8; 65536];
    ctx.read_mr(&mr, 131072, &mut back)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let mut word = [0u8; 8];
    ctx.read_mr(&mr, 8, &mut word)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let fadd_orig = u64::from_le_bytes(word);
    ctx.read_mr(&mr, 16, &mut word)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let cas_orig = u64::from_le_bytes(word);
    if back != data || fadd_orig != 0 || cas_orig != 5 {
        fail(&format!("read-back equal: {}, FETCH_AND_ADD saw {fadd_orig} (want 0), COMPARE_AND_SWAP saw {cas_orig} (want 5)", back == data));
    }
    println!("client: 64 KiB read back byte-exact; FETCH_AND_ADD saw 0, COMPARE_AND_SWAP saw 5 and stored 1000");
}

fn fail(msg: &str) -> ! {
    eprintln!("rdma_roundtrip: {msg}");
    std::process::exit(1);
}
