//! RDMA WRITE, READ and both atomics between two softib devices, with the object API
//! (`softib_net::verbs`): owned memory regions, QP builder, safe posting of a batch.
//!
//! ```text
//! # both sides in one process (127.0.0.1 and 127.0.0.2, ephemeral ports); what `tests/examples.rs` runs
//! cargo run -p softib-net --example rdma_roundtrip
//! # two processes or hosts; endpoints over TCP port 18516 (softib's JSON format)
//! cargo run -p softib-net --example rdma_roundtrip -- server 127.0.0.2:4791
//! cargo run -p softib-net --example rdma_roundtrip -- client 127.0.0.1:4791 127.0.0.2
//! ```
//! The server exposes 1 MiB and waits; the client writes 64 KiB into it, reads them back
//! into another part of its own region, fetch-adds 5 to the server's first word and
//! compare-swaps it from 5 to 1000, checks every byte and both original values, then sends
//! "done", on which the server checks its word is 1000. A mismatch exits with status 1.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use common::{check, fail, Link, Setup};
use softib_net::verbs::{Hca, RecvRequest, SendRequest};
use softib_transport::harness::empty_wc;
use softib_transport::QpType;

const NAME: &str = "rdma_roundtrip";
const PORT: u16 = 18516;
const LEN: usize = 65536;

/// Both sides in this process (what `tests/examples.rs` runs).
pub fn loopback() {
    common::loopback(NAME, server, client);
}

fn main() {
    match common::setup(NAME, "server", "client").0 {
        Setup::Loopback => loopback(),
        Setup::Server { bind } => server(
            common::open(NAME, bind),
            Link::Tcp {
                peer: None,
                port: PORT,
            },
        ),
        Setup::Client { bind, host } => client(
            common::open(NAME, bind),
            Link::Tcp {
                peer: Some(host),
                port: PORT,
            },
        ),
    }
}

fn server(hca: Hca, link: Link) {
    let pd = hca.alloc_pd();
    let cq = hca
        .create_cq()
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let mr = pd
        .allocate(1 << 20)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let prepared = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let (qp, theirs) = link.connect(NAME, prepared, &[mr.remote()]);
    // The client's closing "done" lands in the second half of the region (if it comes
    // before this receive is posted, the client's QP retries after an RNR NAK).
    let done = 1 << 19;
    qp.post_recv(&[RecvRequest::new(9, mr.slice(done..done + 64))])
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    println!(
        "server: {} QP {:#x} connected to QP {:#x} at {}",
        hca.local_addr(),
        qp.qpn(),
        theirs.qpn,
        theirs.gid
    );
    let mut wcs = [empty_wc(); 4];
    let got = cq.wait(&mut wcs, Duration::from_secs(60));
    let Some(wc) = got.first() else {
        fail(NAME, "server: no \"done\" from the client within 60 s");
    };
    check(NAME, wc);
    let word = u64::from_le_bytes(mr.read()[..8].try_into().unwrap());
    let msg = mr.read()[done..done + 4].to_vec();
    if word != 1000 || msg != b"done" {
        fail(
            NAME,
            &format!("server: word 0 is {word} (want 1000), message {msg:?}"),
        );
    }
    println!("server: word 0 is 1000 after the client's FETCH_AND_ADD and COMPARE_AND_SWAP");
}

fn client(hca: Hca, link: Link) {
    let pd = hca.alloc_pd();
    let cq = hca
        .create_cq()
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let mr = pd
        .allocate(1 << 20)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let prepared = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .set_max_rd_atomic(4)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let (qp, theirs) = link.connect(NAME, prepared, &[]);
    let remote = theirs
        .regions
        .first()
        .copied()
        .unwrap_or_else(|| fail(NAME, "the server exposed no memory"));
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 7 + 3) as u8).collect();
    mr.write()[4096..4096 + LEN].copy_from_slice(&data);
    mr.write()[LEN * 4..LEN * 4 + 4].copy_from_slice(b"done");
    // One batch: the READ sees the WRITE (RC executes in order, IBA 9.5), the atomics
    // run one after the other on the same word.
    let batch = [
        SendRequest::write(
            1,
            mr.slice(4096..4096 + LEN),
            remote.slice(4096..4096 + LEN),
        ),
        SendRequest::read(
            2,
            mr.slice(2 * LEN..3 * LEN),
            remote.slice(4096..4096 + LEN),
        ),
        SendRequest::fetch_add(3, mr.slice(8..16), remote.slice(0..8), 5),
        SendRequest::compare_swap(4, mr.slice(16..24), remote.slice(0..8), 5, 1000),
        SendRequest::send(5, mr.slice(LEN * 4..LEN * 4 + 4)).fence(),
    ];
    qp.post_send(&batch)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let mut wcs = [empty_wc(); 8];
    let mut done = 0;
    while done < batch.len() {
        let got = cq.wait(&mut wcs, Duration::from_secs(30));
        if got.is_empty() {
            fail(NAME, "client: no completion within 30 s");
        }
        for wc in got.iter() {
            check(NAME, wc);
            println!("client: WR {} ({:?}) completed", wc.wr_id, wc.opcode);
        }
        done += got.len();
    }
    let m = mr.read();
    let fadd_orig = u64::from_le_bytes(m[8..16].try_into().unwrap());
    let cas_orig = u64::from_le_bytes(m[16..24].try_into().unwrap());
    let same = m[2 * LEN..3 * LEN] == data[..];
    drop(m);
    if !same || fadd_orig != 0 || cas_orig != 5 {
        fail(
            NAME,
            &format!(
                "client: read-back equal: {same}, FETCH_AND_ADD saw {fadd_orig} (want 0), \
                 COMPARE_AND_SWAP saw {cas_orig} (want 5)"
            ),
        );
    }
    println!(
        "client: 64 KiB read back byte-exact; FETCH_AND_ADD saw 0, COMPARE_AND_SWAP saw 5 \
         and stored 1000"
    );
}
