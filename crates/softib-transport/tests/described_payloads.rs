//! Described zero payloads (`Device::poll_transmit_described`, `handle_packet_described`):
//! a payload gathered from memory that reads as zeros is left out of the buffer and carried
//! as (offset, length). The packet the description stands for must be byte for byte the
//! packet `poll_transmit` writes, the receiver must place exactly those zeros, and a
//! description that disagrees with the headers must be dropped, not taken as data.

use softib_transport::harness::{Endpoint, Pair, QpOptions};
use softib_transport::{
    AccessFlags, Memory, MrKeys, Mtu, RxGrh, RxMeta, SendFlags, SendWr, Sge, WrOpcode, ZeroPayload,
};
use softib_wire::PacketRepr;

/// Reads as zeros, drops writes: the contract `reads_as_zeros` promises.
struct Zeros(usize);

impl Memory for Zeros {
    fn len(&self) -> usize {
        self.0
    }
    fn read(&self, _offset: usize, dst: &mut [u8]) {
        dst.fill(0);
    }
    fn write(&mut self, _offset: usize, _src: &[u8]) {}
    fn compare_swap(&mut self, _offset: usize, _compare: u64, _swap: u64) -> u64 {
        0
    }
    fn fetch_add(&mut self, _offset: usize, _add: u64) -> u64 {
        0
    }
    fn reads_as_zeros(&self) -> bool {
        true
    }
}

const ZERO_ADDR: u64 = 0x7000_0000;
const LEN: usize = 3000;
/// Where in the destination buffer the WRITE lands.
const AT: u64 = 100;
/// What a stale transmit buffer holds, and what the destination holds before the WRITE.
const STALE: u8 = 0xEE;
const BEFORE: u8 = 0xAA;

fn meta(pair: &Pair, to: usize) -> RxMeta {
    RxMeta {
        grh: Some(RxGrh {
            sgid: pair.device(1 - to).config().gid,
            dgid: pair.device(to).config().gid,
            ..RxGrh::default()
        }),
        ..RxMeta::default()
    }
}

/// A connected pair at MTU 1024, a zero region on side 0 and the destination filled with
/// `BEFORE`; a 3000-byte WRITE from the zero region posted.
fn write_from_zeros(seed: u64) -> (Pair, Endpoint, Endpoint, MrKeys) {
    let mut pair = Pair::new(seed);
    let opts = QpOptions {
        mtu: Mtu::M1024,
        ..QpOptions::default()
    };
    let (a, b) = pair.connect(&opts);
    let zero = pair
        .dev(0)
        .reg_mr(
            a.pd,
            Box::new(Zeros(8192)),
            ZERO_ADDR,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    pair.fill(1, &b, 0, &vec![BEFORE; b.len]);
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: ZERO_ADDR,
            length: LEN as u32,
            lkey: zero.lkey,
        }],
        remote_addr: b.addr + AT,
        rkey: b.keys.rkey,
        ..Default::default()
    };
    pair.dev(0).post_send(0, a.qpn, &wr).unwrap();
    (pair, a, b, zero)
}

#[test]
fn a_described_write_is_the_copied_write_and_places_the_same_zeros() {
    let (mut described, _, b, _) = write_from_zeros(3);
    let (mut copied, _, b2, _) = write_from_zeros(3);
    let (m1, m2) = (meta(&described, 1), meta(&copied, 1));
    let mut buf = vec![STALE; 8192];
    let mut reference = vec![0u8; 8192];
    let mut packets = 0;
    while let Some(t) = {
        buf.fill(STALE);
        described.dev(0).poll_transmit_described(0, &mut buf)
    } {
        let r = copied
            .dev(0)
            .poll_transmit(0, &mut reference)
            .expect("the same packet");
        assert_eq!(r.len, t.len);
        assert_eq!(r.zero_payload, None, "poll_transmit never describes");
        let pkt = PacketRepr::parse(&reference[..r.len]).unwrap();
        let z = t.zero_payload.expect("a payload from zeros is described");
        assert_eq!(
            z,
            ZeroPayload {
                offset: pkt.header_len(),
                len: pkt.payload.len()
            }
        );
        // Nothing was written where the payload goes...
        assert!(buf[z.offset..z.offset + z.len].iter().all(|&x| x == STALE));
        // ...and with the zeros written there the packet is the copied one, headers and
        // pad included.
        let mut image = buf[..t.len].to_vec();
        image[z.offset..z.offset + z.len].fill(0);
        assert_eq!(image, reference[..r.len]);
        described
            .dev(1)
            .handle_packet_described(1_000, &m1, &buf[..t.len], Some(z));
        copied.dev(1).handle_packet(1_000, &m2, &reference[..r.len]);
        packets += 1;
    }
    assert_eq!(packets, 3, "FIRST, MIDDLE, LAST at MTU 1024");
    let got = described.read(1, &b, 0, b.len);
    assert_eq!(got, copied.read(1, &b2, 0, b2.len));
    let (at, end) = (AT as usize, AT as usize + LEN);
    assert!(got[at..end].iter().all(|&x| x == 0), "the WRITE's bytes");
    assert!(got[..at].iter().chain(&got[end..]).all(|&x| x == BEFORE));
    assert_eq!(described.device(1).counters().malformed_drops, 0);
}

#[test]
fn a_description_that_disagrees_with_the_headers_is_dropped() {
    for wrong in [
        |z: ZeroPayload| ZeroPayload {
            offset: z.offset + 1,
            ..z
        },
        |z: ZeroPayload| ZeroPayload {
            offset: z.offset - 1,
            ..z
        },
        |z: ZeroPayload| ZeroPayload {
            len: z.len - 1,
            ..z
        },
        |z: ZeroPayload| ZeroPayload {
            len: z.len + 4,
            ..z
        },
    ] {
        let (mut pair, _, b, _) = write_from_zeros(5);
        let m = meta(&pair, 1);
        let mut buf = vec![STALE; 8192];
        let t = pair.dev(0).poll_transmit_described(0, &mut buf).unwrap();
        let z = wrong(t.zero_payload.unwrap());
        pair.dev(1)
            .handle_packet_described(1_000, &m, &buf[..t.len], Some(z));
        assert_eq!(pair.device(1).counters().malformed_drops, 1, "{z:?}");
        assert!(pair.read(1, &b, 0, b.len).iter().all(|&x| x == BEFORE));
    }
}

#[test]
fn zeros_next_to_data_travel_as_bytes() {
    let (mut pair, a, _, zero) = write_from_zeros(9);
    // Send the posted WRITE's packets (nobody receives them), then post one whose SGEs mix
    // the zero region and side 0's ordinary buffer.
    while pair
        .dev(0)
        .poll_transmit_described(0, &mut [0u8; 8192])
        .is_some()
    {}
    pair.fill(0, &a, 0, &[0x5A; 16]);
    let wr = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: vec![
            Sge {
                addr: ZERO_ADDR,
                length: 16,
                lkey: zero.lkey,
            },
            Sge {
                addr: a.addr,
                length: 16,
                lkey: a.keys.lkey,
            },
        ],
        remote_addr: 0,
        rkey: 0,
        ..Default::default()
    };
    pair.dev(0).post_send(0, a.qpn, &wr).unwrap();
    let mut buf = vec![STALE; 8192];
    // The next packet is the mixed WRITE's only one.
    let t = pair.dev(0).poll_transmit_described(0, &mut buf).unwrap();
    assert_eq!(t.zero_payload, None);
    let pkt = PacketRepr::parse(&buf[..t.len]).unwrap();
    let mut expect = vec![0u8; 16];
    expect.extend_from_slice(&[0x5A; 16]);
    assert_eq!(pkt.payload, &expect[..]);
}

#[test]
fn a_read_response_from_zeros_is_described() {
    let mut pair = Pair::new(11);
    let (a, b) = pair.connect(&QpOptions::default());
    let zero = pair
        .dev(1)
        .reg_mr(
            b.pd,
            Box::new(Zeros(8192)),
            ZERO_ADDR,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    pair.fill(0, &a, 0, &vec![BEFORE; a.len]);
    let wr = SendWr {
        wr_id: 3,
        opcode: WrOpcode::RdmaRead,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.addr,
            length: 512,
            lkey: a.keys.lkey,
        }],
        remote_addr: ZERO_ADDR,
        rkey: zero.rkey,
        ..Default::default()
    };
    pair.dev(0).post_send(0, a.qpn, &wr).unwrap();
    let (to_b, to_a) = (meta(&pair, 1), meta(&pair, 0));
    let mut buf = vec![STALE; 8192];
    let t = pair.dev(0).poll_transmit_described(0, &mut buf).unwrap();
    assert_eq!(t.zero_payload, None, "a READ request has no payload");
    pair.dev(1).handle_packet(1_000, &to_b, &buf[..t.len]);
    buf.fill(STALE);
    let t = pair
        .dev(1)
        .poll_transmit_described(2_000, &mut buf)
        .unwrap();
    let z = t.zero_payload.expect("the response's payload is described");
    assert_eq!(z.len, 512);
    assert!(buf[z.offset..z.offset + z.len].iter().all(|&x| x == STALE));
    pair.dev(0)
        .handle_packet_described(3_000, &to_a, &buf[..t.len], Some(z));
    let got = pair.read(0, &a, 0, a.len);
    assert!(got[..512].iter().all(|&x| x == 0));
    assert!(got[512..].iter().all(|&x| x == BEFORE));
    assert_eq!(pair.completions(0, &a)[0].wr_id, 3);
}
