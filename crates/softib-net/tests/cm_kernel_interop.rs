//! A softib device answers the Linux kernel's own CM MADs: the REQ and RTU that rdma_cm sent
//! in the rxe capture (`ib_write_bw -R`, testdata/captures/cm/rxe-write_bw_rdmacm-cm.pcap) are
//! replayed byte for byte (re-sealed for the loopback addresses) from a plain UDP socket
//! into a softib listener, which must take the kernel's REQ as a connection request, answer
//! with a REP to the kernel's communication ID and QPN, and establish on the kernel's RTU.

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::thread;
use std::time::Duration;

use pcap_file::pcap::PcapReader;
use softib_net::driver::NetConfig;
use softib_net::roce;
use softib_net::verbs::{CmListener, Hca};
use softib_transport::QpType;
use softib_wire::cm::{CmMessage, CmRtu};
use softib_wire::mad::{GSI_QKEY, MAD_HEADER_LEN};
use softib_wire::{Opcode, PacketRepr};

const T: Duration = Duration::from_secs(20);
const ICRC_LEN: usize = 4;

/// BTH + DETH + MAD of each frame of the capture extract (the UDP payload minus ICRC).
fn captured_transport() -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures/cm/rxe-write_bw_rdmacm-cm.pcap");
    let file = File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = PcapReader::new(file).unwrap();
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet() {
        let data = p.unwrap().data;
        let udp = &data[14 + 20..];
        let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        out.push(udp[8..len - ICRC_LEN].to_vec());
    }
    out
}

fn send_sealed(sock: &UdpSocket, to: SocketAddr, transport: &[u8]) {
    let mut buf = vec![0u8; transport.len() + ICRC_LEN];
    buf[..transport.len()].copy_from_slice(transport);
    let n = roce::seal(
        sock.local_addr().unwrap(),
        to,
        0,
        0,
        &mut buf,
        transport.len(),
    )
    .unwrap();
    sock.send_to(&buf[..n], to).unwrap();
}

#[test]
fn the_kernels_req_and_rtu_connect_to_a_softib_listener() {
    let frames = captured_transport();
    let kernel_req = &frames[0];
    let kernel_rtu = &frames[2];

    let mut config = NetConfig::new("127.0.66.2:0".parse().unwrap());
    config.seed = 66;
    let hca = Hca::open(config).unwrap();
    let server = hca.context().local_addr();
    let kernel = UdpSocket::bind("127.0.66.1:0").unwrap();
    kernel.set_read_timeout(Some(T)).unwrap();
    hca.context().set_peer_port(
        kernel.local_addr().unwrap().ip(),
        kernel.local_addr().unwrap().port(),
    );

    let listener = CmListener::bind(&hca, 18515).unwrap();
    let pd = hca.alloc_pd();
    let cq = hca.create_cq().build().unwrap();
    let server_thread = thread::spawn(move || {
        let request = listener.get_request(T).unwrap();
        // rdma_cm's IP header in the kernel's private data.
        assert_eq!(
            request.peer_addr(),
            Some("10.99.0.2:45926".parse().unwrap())
        );
        assert_eq!(request.req().local_qpn, 0x1b);
        let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
        let qpn = qp.qpn();
        let conn = request.accept(qp, b"from softib", T).unwrap();
        let attr = conn.qp().query().unwrap();
        (qpn, conn.qp().state(), attr.sq_psn, attr.rq_psn)
    });

    send_sealed(&kernel, server, kernel_req);
    let mut buf = [0u8; 2048];
    let (n, from) = kernel.recv_from(&mut buf).unwrap();
    assert_eq!(from, server);
    let rep_packet = PacketRepr::parse(&buf[..n - ICRC_LEN]).unwrap();
    assert_eq!(rep_packet.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(rep_packet.bth.dest_qp, 1);
    let deth = rep_packet.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, 1));
    let (header, rep) = CmMessage::parse(rep_packet.payload).unwrap();
    // The REP continues the REQ's transaction.
    assert_eq!(header.transaction_id, 0x0000_0002_6e9a_eba0);
    let CmMessage::Rep(rep) = rep else {
        panic!("softib answered the kernel's REQ with {rep:?}");
    };
    assert_eq!(rep.remote_comm_id, 0xa0eb_9a6e);
    assert_eq!(&rep.private_data[..11], b"from softib");
    // The kernel asked for no READ/atomic resources, so softib grants none.
    assert_eq!((rep.responder_resources, rep.initiator_depth), (0, 0));

    // The kernel's RTU, addressed to softib's communication ID.
    let mut rtu = kernel_rtu.clone();
    let at = 12 + 8 + MAD_HEADER_LEN;
    let (_, msg) = CmMessage::parse(&rtu[20..]).unwrap();
    let CmMessage::Rtu(k) = msg else { panic!() };
    let ours = CmMessage::Rtu(CmRtu {
        remote_comm_id: rep.local_comm_id,
        ..k
    })
    .to_mad(0x0000_0002_6e9a_eba0);
    rtu[20..20 + 256].copy_from_slice(&ours);
    assert_eq!(&rtu[at..at + 4], &0xa0eb_9a6e_u32.to_be_bytes());
    send_sealed(&kernel, server, &rtu);

    let (qpn, state, sq_psn, rq_psn) = server_thread.join().unwrap();
    assert_eq!(rep.local_qpn, qpn);
    // Linux's PSN convention (kernel ib_send_cm_req sets the active side's rq_psn from the
    // REQ's Starting PSN; in the capture the server's first SEND carries the REQ's PSN
    // 0xe92f1e and the client's the REP's): the passive side sends with the REQ's PSN and
    // expects the PSN its REP announces.
    assert_eq!(sq_psn, 0xe9_2f1e);
    assert_eq!(rq_psn, rep.starting_psn);
    assert_eq!(state, Some(softib_transport::QpState::Rts));
    let (cm, gsi) = hca.context().cm_counters();
    assert_eq!((gsi.cm_mads, cm.malformed_drops, cm.stale_drops), (2, 0, 0));
}
