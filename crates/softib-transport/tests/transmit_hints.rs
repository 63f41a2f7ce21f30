//! The `Transmit::batchable` hint: packets that more of the same message follow may be held
//! for batching; whatever someone waits for (a message's last packet, ACKs) may not.

use softib_transport::harness::{Pair, QpOptions};
use softib_transport::{Mtu, RxGrh, RxMeta, SendFlags, SendWr, Sge, WrOpcode};
use softib_wire::{Opcode, PacketRepr};

#[test]
fn first_and_middle_packets_are_batchable_last_and_ack_are_not() {
    let mut pair = Pair::new(7);
    let opts = QpOptions {
        mtu: Mtu::M1024,
        ..QpOptions::default()
    };
    let (a, b) = pair.connect(&opts);
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.addr,
            length: 3000,
            lkey: a.keys.lkey,
        }],
        remote_addr: b.addr,
        rkey: b.keys.rkey,
        ..Default::default()
    };
    pair.dev(0).post_send(0, a.qpn, &wr).unwrap();

    // Requester: FIRST, MIDDLE, LAST of a 3000-byte write at MTU 1024.
    let meta = RxMeta {
        grh: Some(RxGrh {
            sgid: pair.device(0).config().gid,
            dgid: pair.device(1).config().gid,
            ..RxGrh::default()
        }),
        ..RxMeta::default()
    };
    let mut buf = vec![0u8; 8192];
    let mut seen = Vec::new();
    while let Some(t) = pair.dev(0).poll_transmit(0, &mut buf) {
        let op = PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode;
        seen.push((op, t.batchable));
        pair.dev(1).handle_packet(1_000, &meta, &buf[..t.len]);
    }
    assert_eq!(
        seen,
        vec![
            (Opcode::RC_RDMA_WRITE_FIRST, true),
            (Opcode::RC_RDMA_WRITE_MIDDLE, true),
            (Opcode::RC_RDMA_WRITE_LAST, false),
        ]
    );

    // Responder: the ACK someone waits for.
    let t = pair.dev(1).poll_transmit(2_000, &mut buf).expect("an ACK");
    assert_eq!(
        PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode,
        Opcode::RC_ACKNOWLEDGE
    );
    assert!(!t.batchable);
}
