//! Interop evidence: the REQ softib's CM sends for an rdma_cm-style connect is, field by
//! field and byte by byte, the REQ Linux 6.1's rdma_cm sent in the rxe capture
//! (`ib_write_bw -R`, client 10.99.0.2 port 45926 -> server 10.99.0.1 port 18515), apart from
//! what is chosen per connection: the communication ID and the transaction ID. QPN, PSN and
//! GUID are given the capture's values so that every other byte can be compared.

use std::fs::File;
use std::path::Path;

use pcap_file::pcap::PcapReader;
use softib_cm::rdma_cm::{rc_connect_params, PortSpace};
use softib_cm::{Cm, CmConfig};
use softib_wire::cm::CmMessage;

/// The MADs (UD SEND_ONLY to QP1) of the bundled capture extract, in order.
fn captured_mads() -> Vec<[u8; 256]> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures/cm/rxe-write_bw_rdmacm-cm.pcap");
    let file = File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = PcapReader::new(file).expect("pcap header");
    let mut out = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let data = packet.expect("pcap record").data;
        // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + DETH 8, then the MAD.
        let mad_at = 14 + 20 + 8 + 12 + 8;
        let mut mad = [0u8; 256];
        mad.copy_from_slice(&data[mad_at..mad_at + 256]);
        out.push(mad);
    }
    out
}

#[test]
fn softib_req_for_an_rdma_cm_connect_matches_the_kernels_field_by_field() {
    let mads = captured_mads();
    assert_eq!(mads.len(), 10);
    let (kernel_header, kernel) = CmMessage::parse(&mads[0]).unwrap();
    let CmMessage::Req(kernel) = kernel else {
        panic!("frame 1 is not a REQ");
    };

    let src = "10.99.0.2:45926".parse().unwrap();
    let dst = "10.99.0.1:18515".parse().unwrap();
    let gid = softib_cm::rdma_cm::gid_of("10.99.0.2".parse().unwrap());
    let mut cm = Cm::new(CmConfig::new(gid, 0x5054_00ff_fe99_0002));
    let params = rc_connect_params(PortSpace::Tcp, src, dst, 0x1b, 0xe9_2f1e, &[]).unwrap();
    cm.connect(0, &params).unwrap();
    let t = cm.poll_transmit().unwrap();
    assert_eq!(
        t.dest_gid,
        softib_cm::rdma_cm::gid_of("10.99.0.1".parse().unwrap())
    );
    assert_eq!(t.pkey, 0xffff);
    let (header, ours) = CmMessage::parse(&t.mad[..]).unwrap();
    let CmMessage::Req(ours) = ours else {
        panic!("softib sent no REQ");
    };

    // The MAD header: all but the transaction ID.
    assert_eq!(
        (
            header.base_version,
            header.mgmt_class,
            header.class_version,
            header.method
        ),
        (
            kernel_header.base_version,
            kernel_header.mgmt_class,
            kernel_header.class_version,
            kernel_header.method
        )
    );
    assert_eq!(header.attribute_id, kernel_header.attribute_id);
    assert_eq!(header.attribute_modifier, kernel_header.attribute_modifier);
    assert_eq!(header.status, kernel_header.status);

    // Every REQ field but the communication ID.
    let same_but_id = softib_wire::cm::CmReq {
        local_comm_id: kernel.local_comm_id,
        ..ours
    };
    assert_eq!(same_but_id, kernel);

    // And byte for byte, with the two per-connection IDs masked.
    let mut a = *t.mad;
    let mut b = mads[0];
    for m in [&mut a, &mut b] {
        m[8..16].fill(0); // TID
        m[24..28].fill(0); // local communication ID
    }
    assert_eq!(a, b);
}

#[test]
fn every_captured_cm_mad_parses_and_reemits_exactly() {
    for (i, mad) in captured_mads().iter().enumerate() {
        let (h, m) = CmMessage::parse(mad).unwrap_or_else(|e| panic!("frame {i}: {e}"));
        assert_eq!(&m.to_mad(h.transaction_id), mad, "frame {i}");
    }
}

/// BTH + payload of every frame of a bundled capture (Ethernet, IPv4, UDP 4791), ICRC cut.
fn transport_frames(name: &str) -> Vec<(std::net::Ipv4Addr, Vec<u8>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures/cm")
        .join(name);
    let file = File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = PcapReader::new(file).expect("pcap header");
    let mut out = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let data = packet.expect("pcap record").data;
        let src = std::net::Ipv4Addr::new(data[26], data[27], data[28], data[29]);
        let udp = &data[14 + 20..];
        let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        out.push((src, udp[8..len - 4].to_vec()));
    }
    out
}

/// What a capture of one CM-connected exchange shows: (from softib?, attribute ID) of each
/// CM MAD, the REQ and REP, and (from softib?, DestQP, PSN) of each RC SEND.
type Exchange = (
    Vec<(bool, u16)>,
    softib_wire::cm::CmReq,
    softib_wire::cm::CmRep,
    Vec<(bool, u32, u32)>,
);

fn exchange(name: &str) -> Exchange {
    use softib_wire::PacketRepr;
    let softib: std::net::Ipv4Addr = "10.99.0.254".parse().unwrap();
    let mut req = None;
    let mut rep = None;
    let mut sends = Vec::new();
    let mut cm_attrs = Vec::new();
    for (src, bytes) in &transport_frames(name) {
        let p = PacketRepr::parse(bytes).unwrap();
        if p.bth.dest_qp == 1 {
            let (_, m) = CmMessage::parse(p.payload).unwrap();
            cm_attrs.push((*src == softib, m.attribute_id()));
            match m {
                CmMessage::Req(r) => req = Some(r),
                CmMessage::Rep(r) => rep = Some(r),
                _ => {}
            }
        } else if p.bth.opcode == softib_wire::Opcode::RC_SEND_ONLY {
            sends.push((*src == softib, p.bth.dest_qp, p.bth.psn));
        }
    }
    (cm_attrs, req.expect("a REQ"), rep.expect("a REP"), sends)
}

/// softib's CM against Linux 6.1 rxe's rdma_server (oracle VM run, bundled capture): the
/// kernel took softib's REQ (its REP answers softib's communication ID), and both sides'
/// first SENDs carry the PSN the other side's CM message announced as expected, so neither
/// was taken for a duplicate.
#[test]
fn linux_rdma_server_accepted_softibs_req_and_psns_agree() {
    let (cm, req, rep, sends) = exchange("softib-rxe-rdma_server.pcap");
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    // softib: REQ, RTU, DREQ, then DREP for rxe's crossing DREQ.
    assert_eq!(
        cm,
        [
            (true, 0x10),
            (false, 0x13),
            (true, 0x14),
            (true, 0x15),
            (false, 0x15),
            (true, 0x16)
        ]
    );
    // softib sends to rxe's QP with the REP's PSN; rxe sends to softib's with the REQ's.
    assert_eq!(
        sends,
        [
            (true, rep.local_qpn, rep.starting_psn),
            (false, req.local_qpn, req.starting_psn)
        ]
    );
}

/// Linux 6.1 rxe's rdma_client connecting to a softib listener (oracle VM run, bundled
/// capture): softib answered the kernel's REQ with a REP to its communication ID, rxe sent
/// the RTU and then data with the REP's PSN; softib's answer carries the REQ's PSN; rxe's
/// DREQ got softib's DREP.
#[test]
fn softib_accepted_linux_rdma_clients_req_and_psns_agree() {
    let (cm, req, rep, sends) = exchange("softib-rxe-rdma_client.pcap");
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    assert_eq!(
        cm,
        [
            (false, 0x10),
            (true, 0x13),
            (false, 0x14),
            (false, 0x15),
            (true, 0x16)
        ]
    );
    assert_eq!(
        sends,
        [
            (false, rep.local_qpn, rep.starting_psn),
            (true, req.local_qpn, req.starting_psn)
        ]
    );
}
