//! Unreliable datagram SENDs between two softib devices, with the object API: a UD QP with
//! separate send and receive CQs, address handles built from the peer's endpoint, owned
//! receive buffers that show the GRH area.
//!
//! ```text
//! # both sides in one process (127.0.0.1 and 127.0.0.2, ephemeral ports); what `tests/examples.rs` runs
//! cargo run -p softib-net --example ud_send
//! # two processes or hosts; endpoints over TCP port 18517
//! cargo run -p softib-net --example ud_send -- receiver 127.0.0.2:4791
//! cargo run -p softib-net --example ud_send -- sender 127.0.0.1:4791 127.0.0.2
//! ```
//! UD has no retransmission and a datagram that finds no posted receive is dropped, so the
//! receiver first posts its receives and then announces "ready" (a datagram of its own,
//! repeated every 100 ms until data arrives); the sender waits for it, then sends 10
//! datagrams of 1,000 bytes. The receiver checks each payload and prints the sender's address
//! from the GRH area (RoCEv2 over IPv4: the IPv4 header at bytes 20..40).

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{check, fail, Link, Setup};
use softib_net::verbs::{Hca, RecvRequest, SendRequest};
use softib_transport::harness::empty_wc;
use softib_transport::{QpType, WcOpcode};

const NAME: &str = "ud_send";
const PORT: u16 = 18517;
const COUNT: usize = 10;
const PAYLOAD: usize = 1000;
/// The 40-byte GRH area in front of every UD receive (IBA 11.4.1.1).
const GRH: usize = 40;
const SLOT: usize = GRH + PAYLOAD;

/// Both sides in this process (what `tests/examples.rs` runs).
pub fn loopback() {
    common::loopback(NAME, receiver, sender);
}

fn main() {
    match common::setup(NAME, "receiver", "sender").0 {
        Setup::Loopback => loopback(),
        Setup::Server { bind } => receiver(
            common::open(NAME, bind),
            Link::Tcp {
                peer: None,
                port: PORT,
            },
        ),
        Setup::Client { bind, host } => sender(
            common::open(NAME, bind),
            Link::Tcp {
                peer: Some(host),
                port: PORT,
            },
        ),
    }
}

fn byte(datagram: usize, i: usize) -> u8 {
    (datagram * 31 + i) as u8
}

fn receiver(hca: Hca, link: Link) {
    let pd = hca.alloc_pd();
    let send_cq = hca.create_cq().set_entries(64).build();
    let recv_cq = hca.create_cq().set_entries(64).build();
    let (send_cq, recv_cq) = match (send_cq, recv_cq) {
        (Ok(s), Ok(r)) => (s, r),
        (Err(e), _) | (_, Err(e)) => fail(NAME, &e.to_string()),
    };
    let mr = pd
        .allocate(COUNT * SLOT + 64)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let prepared = pd
        .create_qp(&send_cq, &recv_cq, QpType::Ud)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let (qp, theirs) = link.connect(NAME, prepared, &[]);
    let recvs: Vec<RecvRequest> = (0..COUNT)
        .map(|i| RecvRequest::new(i as u64, mr.slice(i * SLOT..(i + 1) * SLOT)))
        .collect();
    qp.post_recv(&recvs)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let ah = pd
        .create_ah(&theirs)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let qkey = theirs.qkey.unwrap_or(0x1111_1111);
    mr.write()[COUNT * SLOT..COUNT * SLOT + 5].copy_from_slice(b"ready");
    let ready =
        SendRequest::send(100, mr.slice(COUNT * SLOT..COUNT * SLOT + 5)).to(&ah, theirs.qpn, qkey);
    let mut wcs = [empty_wc(); COUNT];
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < COUNT {
        if Instant::now() > deadline {
            fail(NAME, &format!("receiver: {got} of {COUNT} datagrams within 30 s (UD does not retransmit: was one lost?)"));
        }
        if got == 0 {
            qp.post_send(std::slice::from_ref(&ready))
                .unwrap_or_else(|e| fail(NAME, &e.to_string()));
            let sent = send_cq.wait(&mut wcs, Duration::from_secs(10));
            sent.iter().for_each(|wc| check(NAME, wc));
        }
        for wc in recv_cq.wait(&mut wcs, Duration::from_millis(100)).iter() {
            check(NAME, wc);
            let i = wc.wr_id as usize;
            let m = mr.read();
            let slot = &m[i * SLOT..(i + 1) * SLOT];
            let intact = wc.byte_len as usize == SLOT
                && slot[GRH..]
                    .iter()
                    .enumerate()
                    .all(|(j, &b)| b == byte(i, j));
            if !intact {
                fail(
                    NAME,
                    &format!(
                        "receiver: datagram {i} ({} bytes) is not what was sent",
                        wc.byte_len
                    ),
                );
            }
            println!(
                "receiver: datagram {i} of {PAYLOAD} bytes from QP {:#x}, IPv4 source {}.{}.{}.{}",
                wc.src_qp, slot[32], slot[33], slot[34], slot[35]
            );
            got += 1;
        }
    }
}

fn sender(hca: Hca, link: Link) {
    let pd = hca.alloc_pd();
    let cq = hca
        .create_cq()
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let mr = pd
        .allocate(COUNT * PAYLOAD + SLOT)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let prepared = pd
        .create_qp(&cq, &cq, QpType::Ud)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let (qp, theirs) = link.connect(NAME, prepared, &[]);
    let ready_at = COUNT * PAYLOAD;
    qp.post_recv(&[RecvRequest::new(1, mr.slice(ready_at..ready_at + SLOT))])
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let mut wcs = [empty_wc(); 16];
    let got = cq.wait(&mut wcs, Duration::from_secs(30));
    match got.first() {
        Some(wc) if wc.opcode == WcOpcode::Recv => check(NAME, wc),
        _ => fail(
            NAME,
            "sender: the receiver did not announce itself within 30 s",
        ),
    }
    let ah = pd
        .create_ah(&theirs)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let qkey = theirs.qkey.unwrap_or(0x1111_1111);
    {
        let mut m = mr.write();
        for i in 0..COUNT {
            for j in 0..PAYLOAD {
                m[i * PAYLOAD + j] = byte(i, j);
            }
        }
    }
    let batch: Vec<SendRequest> = (0..COUNT)
        .map(|i| {
            SendRequest::send(i as u64, mr.slice(i * PAYLOAD..(i + 1) * PAYLOAD))
                .to(&ah, theirs.qpn, qkey)
        })
        .collect();
    qp.post_send(&batch)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let mut done = 0;
    while done < COUNT {
        let got = cq.wait(&mut wcs, Duration::from_secs(10));
        if got.is_empty() {
            fail(NAME, &format!("sender: {done} of {COUNT} sends completed"));
        }
        got.iter().for_each(|wc| check(NAME, wc));
        done += got.len();
    }
    println!("sender: {COUNT} datagrams sent to QP {:#x}", theirs.qpn);
}
