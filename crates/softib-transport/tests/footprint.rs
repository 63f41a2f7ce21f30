//! The engine's state footprint: measured from the structures, growing with what a QP
//! reserves, and one QP per connection for RC against one per process for UD.

use softib_transport::{AhAttr, Device, DeviceConfig, QpCap, QpInitAttr, QpType, SrqAttr};

fn qp(dev: &mut Device, ty: QpType, send: u32, recv: u32, srq: bool) -> u32 {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(64).unwrap();
    let srq = srq.then(|| {
        dev.create_srq(
            pd,
            SrqAttr {
                max_wr: 256,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap()
    });
    dev.create_qp(
        pd,
        QpInitAttr {
            qp_type: ty,
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap: QpCap {
                max_send_wr: send,
                max_recv_wr: recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )
    .unwrap()
}

#[test]
fn a_qp_reserves_its_queues_and_the_device_sums_its_qps() {
    let mut dev = Device::new(DeviceConfig::default(), 1);
    let small = qp(&mut dev, QpType::Rc, 16, 16, false);
    let big = qp(&mut dev, QpType::Rc, 1024, 1024, false);
    let on_srq = qp(&mut dev, QpType::Rc, 16, 16, true);
    let (s, b, q) = (
        dev.qp_footprint(small).unwrap(),
        dev.qp_footprint(big).unwrap(),
        dev.qp_footprint(on_srq).unwrap(),
    );
    assert_eq!(s.fixed, b.fixed);
    assert!(s.send_queue > 0 && s.recv_queue > 0);
    // 64 times the WQE slots: 64 times the queue bytes (capacities are exact for these).
    assert!(b.send_queue >= 60 * s.send_queue, "{b:?} vs {s:?}");
    assert!(b.recv_queue >= 60 * s.recv_queue, "{b:?} vs {s:?}");
    // On an SRQ the receive WQEs are the SRQ's.
    assert_eq!(q.recv_queue, 0);
    let before = dev.footprint();
    assert_eq!(before.qps, 3);
    assert!(before.qp_bytes >= s.total() + b.total() + q.total() - 3 * s.fixed);
    assert!(before.srq_bytes > 0 && before.cq_bytes > 0);
    assert_eq!(before.total(), {
        let f = before;
        f.qp_bytes
            + f.cq_bytes
            + f.srq_bytes
            + f.ah_bytes
            + f.mr_table_bytes
            + f.scheduler_bytes
            + f.device_bytes
    });
    // A hundred more connected QPs cost a hundred QPs' worth; a UD QP and a hundred address
    // handles cost one QP and a hundred small table entries.
    let mut rc = Device::new(DeviceConfig::default(), 1);
    let mut ud = Device::new(DeviceConfig::default(), 1);
    let one_rc = {
        let q = qp(&mut rc, QpType::Rc, 64, 64, false);
        rc.qp_footprint(q).unwrap().total()
    };
    let base_rc = rc.footprint().total();
    for _ in 0..100 {
        qp(&mut rc, QpType::Rc, 64, 64, false);
    }
    let grown = rc.footprint().total() - base_rc;
    assert!(grown >= 100 * one_rc, "{grown} for 100 QPs of {one_rc}");
    qp(&mut ud, QpType::Ud, 64, 64, false);
    let base_ud = ud.footprint().total();
    let pd = ud.alloc_pd();
    for i in 0..100u16 {
        ud.create_ah(
            pd,
            AhAttr {
                dlid: i + 1,
                sl: 0,
                src_path_bits: 0,
                grh: None,
            },
        )
        .unwrap();
    }
    let f = ud.footprint();
    assert_eq!((f.qps, f.address_handles), (1, 100));
    assert!(
        f.total() - base_ud < grown / 10,
        "{} vs {grown}",
        f.total() - base_ud
    );
}
