//! Helpers shared by the device integration tests.
#![allow(dead_code)]

pub mod netns;

use std::net::SocketAddr;
use std::time::Duration;

use softib_net::context::{ConnectOptions, Context, MemoryRegion, WaitMode};
use softib_net::driver::NetConfig;
use softib_net::oob::endpoint::Endpoint;
use softib_transport::{
    AccessFlags, CqHandle, PdHandle, QpCap, QpInitAttr, QpType, WcStatus, WorkCompletion,
};

/// One side: device, PD, CQ, a registered buffer and a QP.
pub struct Side {
    pub ctx: Context,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub mr: MemoryRegion,
    pub qpn: u32,
    pub psn: u32,
}

pub const ALL_ACCESS: AccessFlags = AccessFlags::all();

pub fn side(
    bind: &str,
    qp_type: QpType,
    buf: usize,
    configure: impl FnOnce(&mut NetConfig),
) -> Side {
    let addr: SocketAddr = bind.parse().unwrap();
    let mut config = NetConfig::new(addr);
    config.seed = u64::from(addr.port()) ^ 0x5eed;
    configure(&mut config);
    let ctx = Context::open(config, WaitMode::default()).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(4096).unwrap();
    let mr = ctx.reg_mr(pd, buf, ALL_ACCESS).unwrap();
    let qpn = ctx
        .create_qp(
            pd,
            QpInitAttr {
                qp_type,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1024,
                    max_recv_wr: 1024,
                    ..QpCap::default()
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    let psn = ctx.random_psn();
    Side {
        ctx,
        pd,
        cq,
        mr,
        qpn,
        psn,
    }
}

impl Side {
    pub fn endpoint(&self) -> Endpoint {
        self.ctx.endpoint(self.qpn, self.psn, &[self.mr])
    }

    pub fn connect(&self, qp_type: QpType, remote: &Endpoint) {
        self.ctx
            .connect(
                self.qpn,
                qp_type,
                self.psn,
                remote,
                &ConnectOptions::default(),
            )
            .unwrap();
    }

    /// Waits for `n` completions (panics after `secs` seconds), checks they succeeded.
    pub fn completions(&self, n: usize, secs: u64) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        let mut buf = [WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: softib_transport::WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: 0,
            src_qp: 0,
            slid: 0,
            sl: 0,
            wc_flags: Default::default(),
            vendor_err: 0,
        }; 64];
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        while out.len() < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                !left.is_zero(),
                "only {} of {n} completions after {secs} s: {out:?}",
                out.len()
            );
            let k = self.ctx.wait_cq(self.cq, &mut buf, left);
            out.extend_from_slice(&buf[..k]);
        }
        for wc in &out {
            assert_eq!(
                wc.status,
                WcStatus::Success,
                "{wc:?}\ncounters of this side: {:?}",
                self.ctx.counters()
            );
        }
        out
    }

    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.ctx.read_mr(&self.mr, offset, &mut v).unwrap();
        v
    }
}

/// A deterministic byte pattern.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Two RC sides on `addr_a` and `addr_b`, each with a registered buffer of `region` bytes,
/// connected to each other.
pub fn rc_pair(addr_a: &str, addr_b: &str, region: usize) -> (Side, Side) {
    let a = side(addr_a, QpType::Rc, region, |_| {});
    let b = side(addr_b, QpType::Rc, region, |_| {});
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(QpType::Rc, &eb);
    b.connect(QpType::Rc, &ea);
    (a, b)
}

/// A UDP socket on a third loopback host of this process (an ephemeral port at
/// `unique_loopback(3, salt)`): another machine's packets, for the peer-source rule.
pub fn third_host_socket(salt: u8) -> std::net::UdpSocket {
    let addr: SocketAddr = unique_loopback(3, salt)
        .replace(":4791", ":0")
        .parse()
        .unwrap();
    std::net::UdpSocket::bind(addr).expect("bind the third host's socket")
}

/// A loopback address unique to this process (`127.P.P.host`), so devices can bind the real
/// RoCEv2 port 4791 (which capture decoders require) without colliding with other test
/// processes running at the same time.
pub fn unique_loopback(host: u8, salt: u8) -> String {
    let pid = std::process::id();
    format!("127.{}.{}.{host}:4791", (pid >> 8) as u8 ^ salt, pid as u8)
}
