//! RC connections set up by the Communication Manager over QP1 between two softib devices
//! on loopback sockets (`softib_net::verbs::{CmListener, CmConnection}`): connect, move
//! data, disconnect; rejections with their reasons; private data both ways.

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use softib_net::driver::NetConfig;
use softib_net::verbs::{
    CmApiError, CmConnection, CmListener, CompletionQueue, Hca, ProtectionDomain, RecvRequest,
    SendRequest,
};
use softib_transport::harness::empty_wc;
use softib_transport::{QpType, WcOpcode, WcStatus, WorkCompletion};
use softib_wire::cm::RejectReason;

const T: Duration = Duration::from_secs(20);

struct Side {
    hca: Hca,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

fn side(ip: &str) -> Side {
    let mut c = NetConfig::new(format!("{ip}:0").parse().unwrap());
    c.seed = 0xc0ffee ^ ip.len() as u64;
    let hca = Hca::open(c).unwrap();
    let pd = hca.alloc_pd();
    let cq = hca.create_cq().set_entries(64).build().unwrap();
    Side { hca, pd, cq }
}

/// Two devices on distinct loopback addresses, each told the other's UDP port.
fn pair(a_ip: &str, b_ip: &str) -> (Side, Side) {
    let (a, b) = (side(a_ip), side(b_ip));
    let (aa, ba) = (a.hca.context().local_addr(), b.hca.context().local_addr());
    a.hca.context().set_peer_port(ba.ip(), ba.port());
    b.hca.context().set_peer_port(aa.ip(), aa.port());
    (a, b)
}

fn wait_one(cq: &CompletionQueue) -> WorkCompletion {
    let mut wcs = [empty_wc(); 1];
    let got = cq.wait(&mut wcs, T);
    assert_eq!(got.len(), 1, "a completion within {T:?}");
    got[0]
}

fn rdma_addr(s: &Side, port: u16) -> SocketAddr {
    SocketAddr::new(s.hca.context().local_addr().ip(), port)
}

#[test]
fn connect_transfer_and_disconnect_through_the_cm() {
    let (client, server) = pair("127.0.61.1", "127.0.61.2");
    let listener = CmListener::bind(&server.hca, 18515).unwrap();
    let server_addr = rdma_addr(&server, 18515);
    assert_eq!(listener.local_addr(), server_addr);
    let server_thread = thread::spawn(move || {
        let request = listener.get_request(T).unwrap();
        assert_eq!(&request.private_data()[..5], b"hello");
        assert_eq!(request.private_data().len(), 56);
        let peer = request.peer_addr().expect("rdma_cm IP header");
        assert_eq!(peer.ip().to_string(), "127.0.61.1");
        let buf = server.pd.register(vec![0u8; 4096]).unwrap();
        let qp = server
            .pd
            .create_qp(&server.cq, &server.cq, QpType::Rc)
            .build()
            .unwrap();
        // Post the receive before the REP goes out, as an rdma_cm server does.
        let mut conn = request
            .accept_with(qp, b"welcome", T, |qp| {
                qp.post_recv(&[RecvRequest::new(7, buf.slice(0..4096))])
            })
            .unwrap();
        assert!(conn.is_connected());
        let wc = wait_one(&server.cq);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (7, WcStatus::Success, WcOpcode::Recv)
        );
        assert_eq!(
            &buf.read()[..wc.byte_len as usize],
            b"ping over a CM connection"
        );
        let dreq = conn.wait_disconnected(T).unwrap();
        assert_eq!(&dreq[..3], b"bye");
        assert!(!conn.is_connected());
        (server, buf)
    });
    let buf = client.pd.register(vec![0u8; 4096]).unwrap();
    let qp = client
        .pd
        .create_qp(&client.cq, &client.cq, QpType::Rc)
        .build()
        .unwrap();
    let mut conn = CmConnection::connect(qp, server_addr, b"hello", T)
        .unwrap_or_else(|e| panic!("connect: {e}"));
    assert_eq!(&conn.peer_private_data()[..7], b"welcome");
    assert_eq!(conn.peer_private_data().len(), 196);
    let msg = b"ping over a CM connection";
    buf.write()[..msg.len()].copy_from_slice(msg);
    conn.qp()
        .post_send(&[SendRequest::send(1, buf.slice(0..msg.len()))])
        .unwrap();
    let wc = wait_one(&client.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    conn.disconnect(b"bye", T).unwrap();
    assert!(!conn.is_connected());
    let (server, _buf) = server_thread.join().unwrap();
    // REQ, RTU, DREQ from the client; REP, DREP from the server; nothing dropped.
    let (ccm, cgsi) = client.hca.context().cm_counters();
    let (scm, sgsi) = server.hca.context().cm_counters();
    assert_eq!((cgsi.tx_packets, sgsi.tx_packets), (3, 2));
    assert_eq!((cgsi.cm_mads, sgsi.cm_mads), (2, 3));
    for c in [ccm, scm] {
        assert_eq!((c.malformed_drops, c.stale_drops, c.retransmits), (0, 0, 0));
    }
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_rejected_with_invalid_service_id() {
    let (client, server) = pair("127.0.62.1", "127.0.62.2");
    let qp = client
        .pd
        .create_qp(&client.cq, &client.cq, QpType::Rc)
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    match CmConnection::connect(qp, rdma_addr(&server, 4444), b"", T) {
        Err(CmApiError::Rejected { reason, .. }) => {
            assert_eq!(reason, RejectReason::InvalidServiceId);
            assert_eq!(reason.code(), 8);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // An answer, not a timeout.
    assert!(started.elapsed() < Duration::from_secs(5));
    let (cm, gsi) = server.hca.context().cm_counters();
    assert_eq!(cm.rejected_no_listener, 1);
    assert_eq!(gsi.cm_mads, 1);
    assert_eq!(server.hca.context().cm_counters().0.malformed_drops, 0);
}

#[test]
fn a_consumer_reject_carries_its_private_data_to_the_client() {
    let (client, server) = pair("127.0.63.1", "127.0.63.2");
    let listener = CmListener::bind(&server.hca, 7000).unwrap();
    assert!(
        CmListener::bind(&server.hca, 7000).is_err(),
        "one listener per port"
    );
    let server_thread = thread::spawn(move || {
        let request = listener.get_request(T).unwrap();
        assert_eq!(&request.private_data()[..9], b"let me in");
        request.reject(b"not today").unwrap();
        drop(server);
    });
    let qp = client
        .pd
        .create_qp(&client.cq, &client.cq, QpType::Rc)
        .build()
        .unwrap();
    let target = SocketAddr::new("127.0.63.2".parse().unwrap(), 7000);
    match CmConnection::connect(qp, target, b"let me in", T) {
        Err(CmApiError::Rejected {
            reason,
            private_data,
        }) => {
            assert_eq!(reason, RejectReason::ConsumerReject);
            assert_eq!(&private_data[..9], b"not today");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    server_thread.join().unwrap();
}

#[test]
fn private_data_longer_than_a_req_holds_is_refused_before_anything_is_sent() {
    let (client, server) = pair("127.0.64.1", "127.0.64.2");
    let qp = client
        .pd
        .create_qp(&client.cq, &client.cq, QpType::Rc)
        .build()
        .unwrap();
    match CmConnection::connect(qp, rdma_addr(&server, 1), &[0u8; 57], T) {
        Err(CmApiError::PrivateDataTooLong(e)) => assert_eq!(e.0, 57),
        other => panic!("{other:?}"),
    }
}

/// The CM exchange as the server's pcap tap saw it: every QP1 packet has a valid ICRC and
/// Wireshark decodes REQ, REP, RTU, DREQ, DREP in that order, from QP1 to QP1.
#[test]
fn the_cm_exchange_on_the_wire_decodes_in_wireshark_with_valid_icrcs() {
    use softib_wire::pcap::CaptureReader;
    use softib_wire::roce::RoceFrame;
    let dir = std::env::temp_dir().join(format!("softib-cm-tap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tap = dir.join("server.pcap");
    // Both devices on RoCEv2's own port, so no peer port is configured and tshark finds
    // UDP 4791.
    let open = |ip: &str, pcap: Option<std::path::PathBuf>| {
        let mut c = NetConfig::new(format!("{ip}:4791").parse().unwrap());
        c.seed = 7;
        c.pcap = pcap;
        let hca = Hca::open(c).unwrap();
        let pd = hca.alloc_pd();
        let cq = hca.create_cq().build().unwrap();
        Side { hca, pd, cq }
    };
    let client = open("127.0.67.1", None);
    let server = open("127.0.67.2", Some(tap.clone()));
    let listener = CmListener::bind(&server.hca, 9999).unwrap();
    let server_thread = thread::spawn(move || {
        let qp = server
            .pd
            .create_qp(&server.cq, &server.cq, QpType::Rc)
            .build()
            .unwrap();
        let mut conn = listener.accept(qp, b"", T).unwrap();
        conn.wait_disconnected(T).unwrap();
        server.hca.context().flush_capture();
        server
    });
    let qp = client
        .pd
        .create_qp(&client.cq, &client.cq, QpType::Rc)
        .build()
        .unwrap();
    let target: SocketAddr = "127.0.67.2:9999".parse().unwrap();
    let mut conn = CmConnection::connect(qp, target, b"", T).unwrap();
    conn.disconnect(b"", T).unwrap();
    let server = server_thread.join().unwrap();
    drop(server);

    let mut reader = CaptureReader::open(&tap).unwrap();
    let mut frames = 0;
    while let Some(rec) = reader.next_record() {
        let rec = rec.unwrap();
        let f = RoceFrame::parse_ip(&rec.data).unwrap();
        assert!(f.icrc_ok(), "frame {frames} has a bad ICRC");
        frames += 1;
    }
    assert_eq!(frames, 5);
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&tap)
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.deth.srcqp"])
        .args([
            "-e",
            "infiniband.deth.q_key",
            "-e",
            "infiniband.mad.attributeid",
        ])
        .args(["-e", "_ws.malformed"])
        .output()
        .expect("tshark is needed for this test (.ci/run installs it)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(
        rows,
        [
            "0x000001,0x00000001,0x0000000080010000,0x0010,",
            "0x000001,0x00000001,0x0000000080010000,0x0013,",
            "0x000001,0x00000001,0x0000000080010000,0x0014,",
            "0x000001,0x00000001,0x0000000080010000,0x0015,",
            "0x000001,0x00000001,0x0000000080010000,0x0016,",
        ],
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A peer that never answers: the caller's timeout ends the wait, and the CM forgets the
/// connection (its REQ cancelled with a REJ, as ib_cm does), so nothing keeps resending.
#[test]
fn connecting_to_a_silent_address_times_out_and_leaves_no_state() {
    let client = side("127.0.71.1");
    // Nothing listens on 127.0.71.9: the REQs go nowhere.
    let qp = client
        .pd
        .create_qp(&client.cq, &client.cq, QpType::Rc)
        .build()
        .unwrap();
    let target: SocketAddr = "127.0.71.9:18515".parse().unwrap();
    let started = std::time::Instant::now();
    match CmConnection::connect(qp, target, b"", Duration::from_millis(300)) {
        Err(CmApiError::TimedOut) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    let (cm, gsi) = client.hca.context().cm_counters();
    // The REQ, then the REJ that cancelled it; no resend (the first wait is 6.4 s).
    assert_eq!((gsi.tx_packets, cm.retransmits), (2, 0));
}
