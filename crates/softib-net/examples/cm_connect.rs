//! An RC connection set up by the Communication Manager (QP1), as rdma_cm programs connect:
//! no out-of-band TCP exchange, the peer is an IP address and an rdma_cm port. The client
//! sends messages carrying their index, the server checks every byte, then the client
//! disconnects (DREQ/DREP).
//!
//! ```text
//! # both sides in one process (127.0.0.1 and 127.0.0.2, ephemeral UDP ports); what
//! # `cargo test` runs
//! cargo run -p softib-net --example cm_connect
//! # two processes or hosts (devices on UDP 4791; rdma_cm port 18515 unless -p)
//! cargo run -p softib-net --example cm_connect -- server 10.0.0.1:4791 [-p PORT] [-n MSGS]
//! cargo run -p softib-net --example cm_connect -- client 10.0.0.2:4791 10.0.0.1 [-p PORT] [-n MSGS]
//! # against librdmacm's rdma_server (rdmacm-utils) on a Linux rxe or hardware host: one
//! # 16-byte message each way
//! cargo run -p softib-net --example cm_connect -- client 10.0.0.2:4791 10.0.0.1 -p 7471 --rdma-server
//! # and for librdmacm's rdma_client (`rdma_client -s 10.0.0.1 -p 7471` on the other host)
//! cargo run -p softib-net --example cm_connect -- server 10.0.0.1:4791 -p 7471 --rdma-client
//! ```

use std::net::{IpAddr, SocketAddr};
use std::process::exit;
use std::time::Duration;

use softib_net::driver::NetConfig;
use softib_net::verbs::{CmConnection, CmListener, Hca, RecvRequest, SendRequest};
use softib_transport::harness::empty_wc;
use softib_transport::{QpType, WcStatus};

const T: Duration = Duration::from_secs(30);
const SIZE: usize = 64;

fn fail(msg: &str) -> ! {
    eprintln!("cm_connect: {msg}");
    exit(1)
}

fn open(bind: SocketAddr) -> Hca {
    Hca::open(NetConfig::new(bind)).unwrap_or_else(|e| fail(&format!("open {bind}: {e}")))
}

fn message(i: u32) -> [u8; SIZE] {
    let mut m = [0u8; SIZE];
    m[..4].copy_from_slice(&i.to_be_bytes());
    for (k, b) in m[4..].iter_mut().enumerate() {
        *b = (i as usize * 31 + k) as u8;
    }
    m
}

fn listen(hca: &Hca, port: u16) -> CmListener {
    CmListener::bind(hca, port).unwrap_or_else(|e| fail(&e.to_string()))
}

fn server(hca: Hca, listener: CmListener, msgs: u32) {
    let (pd, cq) = (
        hca.alloc_pd(),
        hca.create_cq().set_entries(256).build().unwrap(),
    );
    println!("server: listening on {}", listener.local_addr());
    let request = listener
        .get_request(T)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let hello = String::from_utf8_lossy(request.private_data())
        .trim_end_matches('\0')
        .to_string();
    println!("server: request from {:?}: {hello:?}", request.peer_addr());
    let buf = pd.register(vec![0u8; SIZE * msgs as usize]).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .set_max_recv_wr(msgs.max(1))
        .build()
        .unwrap();
    let mut conn = request
        .accept_with(qp, b"welcome", T, |qp| {
            let wrs: Vec<_> = (0..msgs as usize)
                .map(|i| RecvRequest::new(i as u64, buf.slice(i * SIZE..(i + 1) * SIZE)))
                .collect();
            qp.post_recv(&wrs)
        })
        .unwrap_or_else(|e| fail(&format!("accept: {e}")));
    let mut wcs = [empty_wc(); 32];
    let mut got = 0;
    while got < msgs {
        let done = cq.wait(&mut wcs, T);
        if done.is_empty() {
            fail(&format!("{got} of {msgs} messages within {T:?}"));
        }
        for wc in done {
            if wc.status != WcStatus::Success {
                fail(&format!("receive failed: {wc:?}"));
            }
            let i = wc.wr_id as usize;
            if buf.read()[i * SIZE..(i + 1) * SIZE] != message(i as u32) {
                fail(&format!("message {i} corrupted"));
            }
            got += 1;
        }
    }
    conn.wait_disconnected(T)
        .unwrap_or_else(|e| fail(&e.to_string()));
    println!("server: {msgs} messages checked, client disconnected");
}

/// The server side of librdmacm's `rdma_client` example: a receive is posted before the
/// REP, 16 bytes arrive, 16 bytes go back, then the client disconnects.
fn rdma_client_server(hca: Hca, listener: CmListener) {
    let (pd, cq) = (
        hca.alloc_pd(),
        hca.create_cq().set_entries(16).build().unwrap(),
    );
    println!(
        "server: listening on {} for rdma_client",
        listener.local_addr()
    );
    let request = listener
        .get_request(T)
        .unwrap_or_else(|e| fail(&e.to_string()));
    println!("server: request from {:?}", request.peer_addr());
    let recv = pd.register(vec![0u8; 16]).unwrap();
    let send = pd.register(vec![0xa5u8; 16]).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let mut conn = request
        .accept_with(qp, b"", T, |qp| {
            qp.post_recv(&[RecvRequest::new(2, recv.slice(..))])
        })
        .unwrap_or_else(|e| fail(&format!("accept: {e}")));
    let mut wcs = [empty_wc(); 1];
    match cq.wait(&mut wcs, T) {
        [wc] if wc.status == WcStatus::Success && wc.byte_len == 16 => {}
        other => fail(&format!("receive from rdma_client: {other:?}")),
    }
    conn.qp()
        .post_send(&[SendRequest::send(1, send.slice(..))])
        .unwrap();
    match cq.wait(&mut wcs, T) {
        [wc] if wc.status == WcStatus::Success => {}
        other => fail(&format!("send to rdma_client: {other:?}")),
    }
    conn.wait_disconnected(T)
        .unwrap_or_else(|e| fail(&e.to_string()));
    println!("server: 16 bytes each way with rdma_client, client disconnected");
}

/// The client side of librdmacm's `rdma_server` example: after connecting, a receive is
/// posted, 16 bytes are sent, the server's 16 bytes arrive, then we disconnect.
fn rdma_server_client(hca: Hca, server_ip: IpAddr, port: u16) {
    let (pd, cq) = (
        hca.alloc_pd(),
        hca.create_cq().set_entries(16).build().unwrap(),
    );
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let target = SocketAddr::new(server_ip, port);
    let mut conn = CmConnection::connect(qp, target, b"", T)
        .unwrap_or_else(|e| fail(&format!("connect to {target}: {e}")));
    println!("client: connected to {target}, QP {:#x}", conn.qp().qpn());
    let send = pd.register(vec![0x5au8; 16]).unwrap();
    let recv = pd.register(vec![0u8; 16]).unwrap();
    conn.qp()
        .post_recv(&[RecvRequest::new(2, recv.slice(..))])
        .unwrap();
    conn.qp()
        .post_send(&[SendRequest::send(1, send.slice(..))])
        .unwrap();
    let mut done = 0;
    let mut wcs = [empty_wc(); 2];
    while done < 2 {
        let got = cq.wait(&mut wcs, T);
        if got.is_empty() {
            fail("no completion from rdma_server within the timeout");
        }
        for wc in got {
            if wc.status != WcStatus::Success {
                fail(&format!("completion failed: {wc:?}"));
            }
            done += 1;
        }
    }
    conn.disconnect(b"", T)
        .unwrap_or_else(|e| fail(&e.to_string()));
    println!("client: 16 bytes each way with rdma_server, disconnected");
}

fn client(hca: Hca, server_ip: IpAddr, port: u16, msgs: u32) {
    let (pd, cq) = (
        hca.alloc_pd(),
        hca.create_cq().set_entries(256).build().unwrap(),
    );
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let target = SocketAddr::new(server_ip, port);
    let mut conn = CmConnection::connect(qp, target, b"hello from softib", T)
        .unwrap_or_else(|e| fail(&format!("connect to {target}: {e}")));
    println!(
        "client: connected to {target}, QP {:#x}, server says {:?}",
        conn.qp().qpn(),
        String::from_utf8_lossy(&conn.peer_private_data()[..7])
    );
    let buf = pd.register(vec![0u8; SIZE]).unwrap();
    let mut wcs = [empty_wc(); 1];
    for i in 0..msgs {
        buf.write().copy_from_slice(&message(i));
        conn.qp()
            .post_send(&[SendRequest::send(u64::from(i), buf.slice(..))])
            .unwrap();
        match cq.wait(&mut wcs, T) {
            [wc] if wc.status == WcStatus::Success => {}
            other => fail(&format!("send {i}: {other:?}")),
        }
    }
    conn.disconnect(b"", T)
        .unwrap_or_else(|e| fail(&e.to_string()));
    println!("client: {msgs} messages sent, disconnected");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut port, mut msgs) = (18515u16, 100u32);
    let mut rdma_server = false;
    let mut rdma_client = false;
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-p" => {
                port = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail("-p needs a port"))
            }
            "-n" => {
                msgs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail("-n needs a count"))
            }
            "--rdma-server" => rdma_server = true,
            "--rdma-client" => rdma_client = true,
            // Flags `cargo test` passes to every test binary.
            f if f.starts_with("--") => {}
            p => positional.push(p.to_string()),
        }
    }
    let addr = |s: &str| {
        s.parse::<SocketAddr>()
            .unwrap_or_else(|_| fail(&format!("bad address {s}")))
    };
    match positional.as_slice() {
        [] => {
            let a = open("127.0.0.1:0".parse().unwrap());
            let b = open("127.0.0.2:0".parse().unwrap());
            let (aa, ba) = (a.context().local_addr(), b.context().local_addr());
            a.context().set_peer_port(ba.ip(), ba.port());
            b.context().set_peer_port(aa.ip(), aa.port());
            // Listen before the client connects: a REQ to an unbound port is rejected.
            let listener = listen(&b, port);
            let s = std::thread::spawn(move || server(b, listener, msgs));
            client(a, ba.ip(), port, msgs);
            s.join().unwrap_or_else(|_| fail("server thread failed"));
        }
        [role, bind] if role == "server" => {
            let hca = open(addr(bind));
            let listener = listen(&hca, port);
            if rdma_client {
                rdma_client_server(hca, listener)
            } else {
                server(hca, listener, msgs)
            }
        }
        [role, bind, peer] if role == "client" => {
            let hca = open(addr(bind));
            let peer = peer
                .parse()
                .unwrap_or_else(|_| fail(&format!("bad peer address {peer}")));
            if rdma_server {
                rdma_server_client(hca, peer, port)
            } else {
                client(hca, peer, port, msgs)
            }
        }
        _ => fail("usage: cm_connect [server BIND [--rdma-client] | client BIND SERVER_IP [--rdma-server]] [-p PORT] [-n MSGS]"),
    }
}
