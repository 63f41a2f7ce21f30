//! Helpers shared by the integration tests (each test file includes this with `mod common`).
#![allow(dead_code)]

use softib_transport::harness::{Endpoint, Pair};
use softib_transport::{RecvWr, SendFlags, SendWr, Sge, WorkCompletion, WrOpcode};

/// One second of virtual time.
pub const SEC: u64 = 1_000_000_000;

/// A deterministic byte pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A signaled WR of `opcode` moving `len` bytes from `local_off` of `a` to `remote_off` of `b`.
pub fn wr(
    opcode: WrOpcode,
    id: u64,
    a: &Endpoint,
    local_off: u64,
    b: &Endpoint,
    remote_off: u64,
    len: u32,
) -> SendWr {
    SendWr {
        wr_id: id,
        opcode,
        sg_list: vec![Sge {
            addr: a.addr + local_off,
            length: len,
            lkey: a.keys.lkey,
        }],
        flags: SendFlags::SIGNALED,
        remote_addr: b.addr + remote_off,
        rkey: b.keys.rkey,
        imm_data: matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
            .then_some(0xabcd),
        ..Default::default()
    }
}

/// A receive WR for `len` bytes at `off` of `ep`.
pub fn recv(id: u64, ep: &Endpoint, off: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        sg_list: vec![Sge {
            addr: ep.addr + off,
            length: len,
            lkey: ep.keys.lkey,
        }],
    }
}

/// Drives until `n` completions are available on the send CQ of `ep` (collecting them).
pub fn wait_send(pair: &mut Pair, ep: &Endpoint, n: usize, deadline: u64) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let side = ep.side;
    let cq = ep.send_cq;
    pair.drive_until(deadline, |p| {
        let mut buf = [softib_transport::harness::empty_wc(); 16];
        loop {
            let k = p.dev(side).poll_cq(cq, &mut buf);
            got.extend_from_slice(&buf[..k]);
            if k == 0 {
                break;
            }
        }
        got.len() >= n
    });
    got
}

/// All receive completions available now.
pub fn recv_wcs(pair: &mut Pair, ep: &Endpoint) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut buf = [softib_transport::harness::empty_wc(); 16];
    loop {
        let k = pair.dev(ep.side).poll_cq(ep.recv_cq, &mut buf);
        got.extend_from_slice(&buf[..k]);
        if k == 0 {
            break;
        }
    }
    got
}
