//! Packets whose payload is described rather than carried (a `ZeroMemory` source: the engine
//! HCA's `poll_transmit_described`) are, to everything that observes the fabric, the packets
//! a zeroed buffer gives: the same bytes on the wire at the same times, the same counters,
//! the same bytes placed in the destination's memory.

use softib_fabric::crc::wire_image;
use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::packet::Packet;
use softib_fabric::tap::WireTap;
use softib_fabric::time::{Picos, PS_PER_US};
use softib_fabric::topology::Topology;
use softib_sim::apps::perftest::{device, rc_connect, rc_side_with, Passive, WriteBw, ZeroMemory};
use softib_transport::{Memory, Mtu, VecMemory};
use std::cell::RefCell;
use std::rc::Rc;

const MSG: u32 = 64 * 1024;
/// The destination buffer is longer than a message; its tail must keep this.
const TAIL: u8 = 0xAA;
const TAIL_LEN: usize = 4096;

/// Every frame a tap saw: (time, wire image), and how many were described.
#[derive(Default)]
struct Seen {
    frames: Vec<(Picos, Vec<u8>)>,
    described: usize,
}

struct Recorder(Rc<RefCell<Seen>>);

impl WireTap for Recorder {
    fn on_wire(&mut self, at: Picos, _: softib_fabric::event::EventOrder, packet: &Packet) {
        let mut s = self.0.borrow_mut();
        if packet.meta.zero_payload.is_some() {
            s.described += 1;
        }
        let mut image = Vec::new();
        wire_image(packet, &mut image);
        s.frames.push((at, image));
    }
}

struct Run {
    seen: Seen,
    counters: Vec<String>,
    destination: Vec<u8>,
    malformed: u64,
}

/// h0 writes 64 KiB messages to h1 through one switch for 300 us, from `source`; h1's buffer
/// is one message plus a tail of `TAIL`; h1 processes what it receives after a delay of
/// 0-2 us when `delayed` (the held-packet path of the engine HCA).
fn run(source: Box<dyn Memory>, delayed: bool) -> Run {
    let mut f = Fabric::new(
        Topology::single_switch(2, 8).unwrap(),
        FabricConfig::default(),
    )
    .unwrap();
    let (l0, l1) = (f.lid("h0").unwrap(), f.lid("h1").unwrap());
    let mut d0 = device(l0, 1);
    let mut d1 = device(l1, 2);
    let mut dest = vec![0x55u8; MSG as usize];
    dest.extend_from_slice(&[TAIL; TAIL_LEN]);
    let s0 = rc_side_with(&mut d0, source, 0x1000_0000).unwrap();
    let s1 = rc_side_with(&mut d1, Box::new(VecMemory(dest)), 0x2000_0000).unwrap();
    rc_connect(&mut d0, &s0, &s1, l1, 0, Mtu::M4096, 14).unwrap();
    rc_connect(&mut d1, &s1, &s0, l0, 0, Mtu::M4096, 14).unwrap();
    let app = WriteBw::new(s0, s1, MSG, 16, None);
    f.attach("h0", Box::new(EngineHca::new(d0, Box::new(app))))
        .unwrap();
    let mut receiver = EngineHca::new(d1, Box::new(Passive));
    if delayed {
        receiver = receiver.with_rx_delay(0, 2 * PS_PER_US, 7);
    }
    f.attach("h1", Box::new(receiver)).unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    let ports = [("sw0".to_string(), 1), ("h1".to_string(), 1)];
    f.set_tap(&ports, Box::new(Recorder(seen.clone()))).unwrap();
    f.run_until(300 * PS_PER_US);
    let counters = ["h0", "h1", "sw0"]
        .iter()
        .flat_map(|n| (1..=2u8).map(move |p| (*n, p)))
        .filter_map(|(n, p)| f.port_counters(n, p).map(|c| format!("{n}:{p} {c:?}")))
        .collect();
    let h1 = f.endpoint_mut::<EngineHca>("h1", 1).unwrap();
    let dev = h1.device();
    let mut destination = vec![0u8; MSG as usize + TAIL_LEN];
    dev.memory(s1.keys.lkey)
        .expect("registered")
        .read(0, &mut destination);
    let malformed = dev.counters().malformed_drops;
    drop(f);
    let seen = Rc::try_unwrap(seen)
        .ok()
        .expect("the fabric is gone")
        .into_inner();
    Run {
        seen,
        counters,
        destination,
        malformed,
    }
}

fn same_observations(delayed: bool) {
    let copied = run(Box::new(VecMemory::zeroed(MSG as usize)), delayed);
    let described = run(Box::new(ZeroMemory::new(MSG as usize)), delayed);
    assert_eq!(
        copied.seen.described, 0,
        "a buffer that holds data is copied"
    );
    assert!(
        described.seen.described > 1000,
        "ZeroMemory's payloads travel described: {}",
        described.seen.described
    );
    assert!(copied.seen.frames.len() > 1000);
    assert_eq!(copied.seen.frames.len(), described.seen.frames.len());
    for (i, (a, b)) in copied
        .seen
        .frames
        .iter()
        .zip(&described.seen.frames)
        .enumerate()
    {
        assert_eq!(a, b, "frame {i} differs");
    }
    assert_eq!(copied.counters, described.counters);
    assert_eq!(described.malformed, 0);
    assert_eq!(copied.destination, described.destination);
    let (body, tail) = described.destination.split_at(MSG as usize);
    assert!(body.iter().all(|&b| b == 0), "every message byte written");
    assert!(tail.iter().all(|&b| b == TAIL), "nothing past the message");
}

#[test]
fn described_payloads_look_like_zeroed_buffers_on_the_wire_and_in_memory() {
    same_observations(false);
}

#[test]
fn described_payloads_survive_a_delayed_receive_path() {
    same_observations(true);
}
