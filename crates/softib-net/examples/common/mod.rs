//! What the verbs examples share: their command line, the endpoint exchange (TCP between
//! processes, or a channel between the two threads of the self-contained loopback run), and
//! failing with a message.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use softib_net::driver::NetConfig;
use softib_net::oob::endpoint::{Endpoint, RemoteRegion};
use softib_net::verbs::{Hca, PreparedQueuePair, QueuePair};
use softib_transport::{WcStatus, WorkCompletion};

/// How the example runs.
pub enum Setup {
    /// Both sides in this process, on 127.0.0.1 and 127.0.0.2 (ephemeral UDP ports).
    Loopback,
    /// The passive side, in its own process.
    Server { bind: SocketAddr },
    /// The active side, connecting to the server's host.
    Client { bind: SocketAddr, host: String },
}

/// Parses `[server BIND | client BIND HOST] [FLAGS...]`; no role (only flags) means the
/// loopback run. Returns the flags left over.
pub fn setup(name: &str, server: &str, client: &str) -> (Setup, Vec<String>) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        fail(
            name,
            &format!(
                "usage: {name} [{server} BIND_ADDR:PORT | {client} BIND_ADDR:PORT HOST] [flags]"
            ),
        )
    };
    let parse = |s: &String| -> SocketAddr {
        s.parse()
            .unwrap_or_else(|e| fail(name, &format!("bad address {s}: {e}")))
    };
    match args.first().map(String::as_str) {
        Some(r) if r == server => {
            let bind = parse(args.get(1).unwrap_or_else(|| usage()));
            (Setup::Server { bind }, args[2..].to_vec())
        }
        Some(r) if r == client => {
            let bind = parse(args.get(1).unwrap_or_else(|| usage()));
            let host = args.get(2).unwrap_or_else(|| usage()).clone();
            (Setup::Client { bind, host }, args[3..].to_vec())
        }
        Some(f) if !f.starts_with('-') => usage(),
        _ => (Setup::Loopback, args),
    }
}

/// How two sides swap endpoints.
pub enum Link {
    /// softib's JSON endpoint over TCP.
    Tcp { peer: Option<String>, port: u16 },
    /// A channel between two threads.
    Local {
        tx: Sender<Endpoint>,
        rx: Receiver<Endpoint>,
    },
}

impl Link {
    /// Two ends of an in-process link.
    pub fn pair() -> (Link, Link) {
        let (a_tx, b_rx) = channel();
        let (b_tx, a_rx) = channel();
        (
            Link::Local { tx: a_tx, rx: a_rx },
            Link::Local { tx: b_tx, rx: b_rx },
        )
    }

    /// Publishes our endpoint (exposing `regions`), takes the peer's, connects the QP.
    pub fn connect(
        self,
        name: &str,
        prepared: PreparedQueuePair,
        regions: &[RemoteRegion],
    ) -> (QueuePair, Endpoint) {
        match self {
            Link::Tcp { peer, port } => prepared
                .exchange(regions, peer.as_deref(), port, Duration::from_secs(60))
                .unwrap_or_else(|e| fail(name, &e.to_string())),
            Link::Local { tx, rx } => {
                let _ = tx.send(prepared.endpoint(regions));
                let theirs = rx
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|_| fail(name, "the other side sent no endpoint"));
                let qp = prepared
                    .handshake(&theirs)
                    .unwrap_or_else(|e| fail(name, &e.to_string()));
                (qp, theirs)
            }
        }
    }
}

/// Opens a device on `bind`.
pub fn open(name: &str, bind: SocketAddr) -> Hca {
    Hca::open(NetConfig::new(bind)).unwrap_or_else(|e| fail(name, &e.to_string()))
}

/// Runs `server` and `client` as the two sides of a loopback run (server in a thread).
pub fn loopback(
    name: &'static str,
    server: impl FnOnce(Hca, Link) + Send + 'static,
    client: impl FnOnce(Hca, Link),
) {
    let (a, b) = Link::pair();
    let s = std::thread::spawn(move || server(open(name, "127.0.0.1:0".parse().unwrap()), a));
    client(open(name, "127.0.0.2:0".parse().unwrap()), b);
    if s.join().is_err() {
        fail(name, "the server side panicked");
    }
}

/// Fails unless the completion is a success.
pub fn check(name: &str, wc: &WorkCompletion) {
    if wc.status != WcStatus::Success {
        fail(
            name,
            &format!(
                "WR {} ({:?}) failed: {} (vendor error {})",
                wc.wr_id,
                wc.opcode,
                wc.status.as_str(),
                wc.vendor_err
            ),
        );
    }
}

/// Prints the message and exits with status 1; inside `tests/examples.rs` it panics
/// instead, so the failing test is named and the other tests still run.
pub fn fail(name: &str, msg: &str) -> ! {
    if cfg!(test) {
        panic!("{name}: {msg}");
    }
    eprintln!("{name}: {msg}");
    std::process::exit(1);
}
