//! Reliable Datagram through the softib-net verbs API over real loopback sockets (two
//! devices on 127.0.0.1 / 127.0.0.2): three RD QPs per device of one domain share one EE
//! context, connected by an endpoint handshake as an RC QP is; each QP of one device
//! SENDs to each QP of the other, and one RDMA WRITE lands; completions name the QPs.

use std::time::Duration;

use softib_net::driver::NetConfig;
use softib_net::verbs::{CompletionQueue, Hca, ProtectionDomain, RecvRequest, SendRequest};
use softib_transport::harness::empty_wc;
use softib_transport::{QpType, WcOpcode, WcStatus, WorkCompletion};

struct Side {
    hca: Hca,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

fn side(addr: &str) -> Side {
    let mut c = NetConfig::new(addr.parse().unwrap());
    c.seed = 0x7d19;
    let hca = Hca::open(c).unwrap();
    let pd = hca.alloc_pd();
    let cq = hca.create_cq().set_entries(256).build().unwrap();
    Side { hca, pd, cq }
}

fn wait(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wcs = [empty_wc(); 16];
    while out.len() < n {
        let got = cq.wait(&mut wcs, Duration::from_secs(20));
        assert!(!got.is_empty(), "{} of {n} completions: {out:?}", out.len());
        out.extend_from_slice(got);
    }
    out
}

#[test]
fn rd_qps_sharing_one_eec_send_and_write_over_loopback() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let (rdd_a, rdd_b) = (a.hca.alloc_rdd(), b.hca.alloc_rdd());
    let qps = |s: &Side, rdd| -> Vec<_> {
        (0..3)
            .map(|_| {
                s.pd.create_qp(&s.cq, &s.cq, QpType::Rd)
                    .set_rdd(rdd)
                    .build()
                    .unwrap()
                    .ready_rd()
                    .unwrap()
            })
            .collect()
    };
    let (qa, qb) = (qps(&a, rdd_a), qps(&b, rdd_b));
    let (pa, pb) = (
        a.hca.create_eec(rdd_a, 64).unwrap(),
        b.hca.create_eec(rdd_b, 64).unwrap(),
    );
    let (ea, eb) = (pa.endpoint(), pb.endpoint());
    let eec_a = pa.handshake(&eb).unwrap();
    let _eec_b = pb.handshake(&ea).unwrap();
    assert_eq!(eec_a.state(), Some(softib_transport::QpState::Rts));

    let la = a.pd.allocate(9 * 4096).unwrap();
    let rb = b.pd.allocate(10 * 4096).unwrap();
    for (i, byte) in la.write().iter_mut().enumerate() {
        *byte = (i * 7 % 251) as u8;
    }
    for (to, q) in qb.iter().enumerate() {
        for from in 0..3 {
            let slot = from * 3 + to;
            q.post_recv(&[RecvRequest::new(
                slot as u64,
                rb.slice(slot * 4096..(slot + 1) * 4096),
            )])
            .unwrap();
        }
    }
    for (from, q) in qa.iter().enumerate() {
        for (to, dest) in qb.iter().enumerate() {
            let slot = from * 3 + to;
            let wr = SendRequest::send(slot as u64, la.slice(slot * 4096..slot * 4096 + 3000))
                .over(&eec_a, dest.qpn(), 0x1111_1111);
            q.post_send(&[wr]).unwrap();
        }
    }
    let sends = wait(&a.cq, 9);
    assert!(
        sends.iter().all(|w| w.status == WcStatus::Success),
        "{sends:?}"
    );
    let recvs = wait(&b.cq, 9);
    for w in &recvs {
        let slot = w.wr_id as usize;
        let (from, to) = (slot / 3, slot % 3);
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        assert_eq!(w.byte_len, 3000);
        assert_eq!(
            w.qp_num,
            qb[to].qpn(),
            "delivered to the QP the sender named"
        );
        assert_eq!(w.src_qp, qa[from].qpn(), "the DETH names the sending QP");
    }
    // Receive WQEs are consumed in arrival order at each QP, so check bytes by source.
    let got = rb.read();
    for w in &recvs {
        let from = (w.src_qp == qa[1].qpn()) as usize + 2 * (w.src_qp == qa[2].qpn()) as usize;
        let to = qb.iter().position(|q| q.qpn() == w.qp_num).unwrap();
        let sent = from * 3 + to;
        let at = w.wr_id as usize * 4096;
        assert_eq!(
            &got[at..at + 3000],
            &la.read()[sent * 4096..sent * 4096 + 3000],
            "message {from}->{to}"
        );
    }
    drop(got);
    // An RDMA WRITE over the same EEC.
    let wr = SendRequest::write(
        99,
        la.slice(0..4096),
        rb.remote().slice(9 * 4096..10 * 4096),
    )
    .over(&eec_a, qb[0].qpn(), 0x1111_1111);
    qa[2].post_send(&[wr]).unwrap();
    let w = wait(&a.cq, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (99, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(&rb.read()[9 * 4096..], &la.read()[..4096]);
    assert_eq!(eec_a.counters().unwrap().resyncs_sent, 0);
}
