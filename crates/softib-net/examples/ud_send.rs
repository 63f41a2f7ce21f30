//! Unreliable datagram SENDs between two softib devices.
//!
//! ```text
//! cargo run -p softib-net --example ud_send -- receiver 127.0.0.2:4791
//! cargo run -p softib-net --example ud_send -- sender 127.0.0.1:4791 127.0.0.1
//! ```
//! The sender sends 10 datagrams of 1,000 bytes; the receiver prints each with its sender's
//! address from the GRH area (for RoCEv2 over IPv4: the IPv4 header at bytes 20..40).
//! Endpoints are exchanged over TCP port 18517.

use std::time::Duration;

use softib_net::context::{ConnectOptions, Context, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::{
    AccessFlags, AhAttr, GlobalRoute, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge,
    UdDest, WcStatus, WrOpcode,
};

const PORT: u16 = 18517;
const COUNT: u64 = 10;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (role, bind) = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some(r @ ("sender" | "receiver")), Some(b)) => (r, b),
        _ => fail("usage: ud_send receiver BIND_ADDR:PORT | sender BIND_ADDR:PORT RECEIVER_HOST"),
    };
    let bind = bind
        .parse()
        .unwrap_or_else(|e| fail(&format!("bad address {bind}: {e}")));
    let ctx = Context::open(NetConfig::new(bind), WaitMode::default())
        .unwrap_or_else(|e| fail(&e.to_string()));
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64).unwrap_or_else(|e| fail(&e.to_string()));
    let mr = ctx
        .reg_mr(pd, 1 << 16, AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let init = QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let qpn = ctx
        .create_qp(pd, init)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let slot = 1040u64; // 40-byte GRH area + 1000 bytes
    let peer = if role == "receiver" {
        None
    } else {
        Some(
            args.get(3)
                .map(String::as_str)
                .unwrap_or_else(|| fail("sender needs RECEIVER_HOST")),
        )
    };
    let o = ConnectOptions::default();
    let theirs = ctx
        .handshake(
            qpn,
            QpType::Ud,
            &[],
            peer,
            PORT,
            Duration::from_secs(60),
            &o,
        )
        .unwrap_or_else(|e| fail(&e.to_string()));
    // Receives can be posted once the QP left RESET; the sender waits a moment before its
    // first datagram.
    if role == "receiver" {
        let recvs: Vec<RecvWr> = (0..COUNT)
            .map(|i| RecvWr {
                wr_id: i,
                sg_list: vec![Sge {
                    addr: mr.addr + i * slot,
                    length: slot as u32,
                    lkey: mr.keys.lkey,
                }],
            })
            .collect();
        ctx.post_recv(qpn, &recvs)
            .unwrap_or_else(|e| fail(&e.to_string()));
    }
    let mut wcs = [softib_transport::harness::empty_wc(); 16];
    if role == "receiver" {
        let mut got = 0;
        while got < COUNT as usize {
            let n = ctx.wait_cq(cq, &mut wcs, Duration::from_secs(30));
            if n == 0 {
                fail("no datagram within 30 s (UD does not retransmit: was one lost?)");
            }
            for wc in &wcs[..n] {
                let mut grh = [0u8; 40];
                ctx.read_mr(&mr, (wc.wr_id * slot) as usize, &mut grh)
                    .unwrap_or_else(|e| fail(&e.to_string()));
                println!(
                    "receiver: datagram {} of {} bytes from QP {:#x}, IPv4 source {}.{}.{}.{}",
                    wc.wr_id,
                    wc.byte_len - 40,
                    wc.src_qp,
                    grh[32],
                    grh[33],
                    grh[34],
                    grh[35]
                );
            }
            got += n;
        }
        return;
    }
    let ah = ctx
        .create_ah(
            pd,
            AhAttr {
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid: theirs.gid.octets(),
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                }),
            },
        )
        .unwrap_or_else(|e| fail(&e.to_string()));
    let qkey = theirs.qkey.unwrap_or(o.qkey);
    // Give the receiver a moment to be in RTS before the first datagram (UD has no retries).
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..COUNT {
        let wr = SendWr {
            wr_id: i,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: vec![Sge {
                addr: mr.addr,
                length: 1000,
                lkey: mr.keys.lkey,
            }],
            ud: Some(UdDest {
                ah,
                remote_qpn: theirs.qpn,
                remote_qkey: qkey,
            }),
            ..Default::default()
        };
        ctx.post_send(qpn, &[wr])
            .unwrap_or_else(|e| fail(&e.to_string()));
        let n = ctx.wait_cq(cq, &mut wcs, Duration::from_secs(10));
        if n == 0 || wcs[0].status != WcStatus::Success {
            fail(&format!("send {i} did not complete"));
        }
    }
    println!("sender: {COUNT} datagrams sent to QP {:#x}", theirs.qpn);
}

fn fail(msg: &str) -> ! {
    eprintln!("ud_send: {msg}");
    std::process::exit(1);
}
