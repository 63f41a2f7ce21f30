//! The General Services Interface (QP1, IBA vol. 1 13.5) of a softib-net device: the UD
//! queue pair every port has for management datagrams. It takes the RoCEv2 packets
//! addressed to QP1 before the transport engine sees them, checks them as a GSI must, hands
//! CM MADs to the device's Communication Manager ([`softib_cm::Cm`]) and wraps the CM's
//! MADs in UD SEND_ONLY packets from QP1.
//!
//! Checks on receive (IBA 13.5.3, 10.2.4): opcode UD SEND_ONLY, Q_Key 0x80010000 (QP1 uses
//! no other), a P_Key of the default partition (0xFFFF or 0x7FFF: the port's only table
//! entry), a whole 256-byte MAD. Other management classes get what an IB node's GSI gives
//! when no agent is registered for them (Linux ib_mad `generate_unmatched_resp`): a Get or
//! Set is answered with GetResp and status 0x000C ("method/attribute not supported");
//! anything else is dropped. Every drop is counted.

use std::collections::{HashMap, VecDeque};

use softib_cm::{Cm, CmConfig, CmEvent, ConnId, Gid, ListenerId, Nanos, SidrId};
use softib_wire::mad::{self, MadHeader, MadPacket, GSI_QKEY, GSI_QPN, MAD_LEN};
use softib_wire::{BthRepr, DethRepr, Opcode, PacketRepr};

/// What the GSI counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GsiCounters {
    /// Packets addressed to QP1.
    pub rx_packets: u64,
    /// Dropped: not a transport packet softib-wire parses, or not UD SEND_ONLY.
    pub bad_packet_drops: u64,
    /// Dropped: Q_Key other than 0x80010000.
    pub bad_qkey_drops: u64,
    /// Dropped: P_Key outside the default partition.
    pub bad_pkey_drops: u64,
    /// Dropped: payload shorter than a MAD.
    pub short_mad_drops: u64,
    /// MADs of other classes answered "unsupported" (Get/Set).
    pub unsupported_answered: u64,
    /// MADs of other classes dropped (not Get/Set).
    pub unsupported_drops: u64,
    /// CM MADs handed to the CM.
    pub cm_mads: u64,
    /// Packets sent from QP1.
    pub tx_packets: u64,
}

/// One datagram for the driver to send: BTH, DETH and MAD (no ICRC), to `dest_gid`.
#[derive(Debug, Clone, Copy)]
pub struct GsiTransmit {
    /// The peer's GID (its address).
    pub dest_gid: Gid,
    /// Bytes written into the caller's buffer.
    pub len: usize,
}

/// The CM's events sorted by whom they are for, so several connections and listeners of
/// one device (one [`Cm`]) each take their own.
#[derive(Debug, Default)]
struct Inbox {
    by_conn: HashMap<ConnId, VecDeque<CmEvent>>,
    by_listener: HashMap<ListenerId, VecDeque<CmEvent>>,
    sidr: HashMap<SidrId, VecDeque<CmEvent>>,
}

/// QP1 of one device, with its CM.
#[derive(Debug)]
pub struct Gsi {
    cm: Cm,
    inbox: Inbox,
    next_psn: u32,
    /// Non-CM answers waiting: (peer, peer's QP, P_Key, MAD).
    answers: VecDeque<(Gid, u32, u16, Box<[u8; MAD_LEN]>)>,
    counters: GsiCounters,
}

/// The node GUID of a device with this GID, as the verbs shim reports it: a locally
/// administered EUI-64 of the address's low 6 bytes.
pub fn node_guid_of(gid: Gid) -> u64 {
    u64::from_be_bytes([
        0x02, 0x50, gid[10], gid[11], gid[12], gid[13], gid[14], gid[15],
    ])
}

/// At most this many non-CM answers wait; more are dropped (a flood of Gets must not grow
/// memory).
const MAX_ANSWERS: usize = 256;

impl Gsi {
    /// QP1 for a device with this GID; the CM is seeded with `seed`.
    pub fn new(gid: Gid, seed: u64) -> Gsi {
        Gsi::with_comm_id_prefix(gid, seed, None)
    }

    /// QP1 whose CM puts `prefix` (`(bits, value)`) into the high bits of its communication
    /// IDs (the process slot on a shared address, `group.rs`).
    pub fn with_comm_id_prefix(gid: Gid, seed: u64, prefix: Option<(u32, u32)>) -> Gsi {
        let mut config = CmConfig::new(gid, node_guid_of(gid));
        config.seed = seed;
        config.comm_id_prefix = prefix;
        Gsi {
            cm: Cm::new(config),
            inbox: Inbox::default(),
            next_psn: (seed as u32) & 0xFF_FFFF,
            answers: Default::default(),
            counters: GsiCounters::default(),
        }
    }

    /// The CM.
    pub fn cm(&self) -> &Cm {
        &self.cm
    }
    /// The CM, for commands.
    pub fn cm_mut(&mut self) -> &mut Cm {
        &mut self.cm
    }
    /// The counters.
    pub fn counters(&self) -> GsiCounters {
        self.counters
    }

    /// Sorts the CM's new events into the inbox.
    fn pump(&mut self) {
        while let Some(e) = self.cm.poll_event() {
            let q = match &e {
                CmEvent::ConnectRequest { listener, .. } => {
                    self.inbox.by_listener.entry(*listener).or_default()
                }
                CmEvent::SidrRequest { listener, .. } => {
                    self.inbox.by_listener.entry(*listener).or_default()
                }
                CmEvent::SidrReply { id, .. } | CmEvent::SidrTimeout { id } => {
                    self.inbox.sidr.entry(*id).or_default()
                }
                CmEvent::ConnectReply { conn, .. }
                | CmEvent::Established { conn, .. }
                | CmEvent::Rejected { conn, .. }
                | CmEvent::Unreachable { conn, .. }
                | CmEvent::Disconnected { conn, .. }
                | CmEvent::TimewaitExit { conn } => self.inbox.by_conn.entry(*conn).or_default(),
            };
            q.push_back(e);
        }
    }

    /// The next CM event of one connection.
    pub fn take_conn_event(&mut self, conn: ConnId) -> Option<CmEvent> {
        self.pump();
        let q = self.inbox.by_conn.get_mut(&conn)?;
        let e = q.pop_front();
        if q.is_empty() {
            self.inbox.by_conn.remove(&conn);
        }
        e
    }

    /// The next request (REQ or SIDR_REQ) for one listener.
    pub fn take_listener_event(&mut self, listener: ListenerId) -> Option<CmEvent> {
        self.pump();
        let q = self.inbox.by_listener.get_mut(&listener)?;
        let e = q.pop_front();
        if q.is_empty() {
            self.inbox.by_listener.remove(&listener);
        }
        e
    }

    /// The next event of one SIDR request.
    pub fn take_sidr_event(&mut self, id: SidrId) -> Option<CmEvent> {
        self.pump();
        let q = self.inbox.sidr.get_mut(&id)?;
        let e = q.pop_front();
        if q.is_empty() {
            self.inbox.sidr.remove(&id);
        }
        e
    }

    /// Drops what waits for a connection its owner no longer wants.
    pub fn forget_conn(&mut self, conn: ConnId) {
        self.pump();
        self.inbox.by_conn.remove(&conn);
    }

    /// Drops what waits for a SIDR request its owner no longer wants.
    pub fn forget_sidr(&mut self, id: SidrId) {
        self.pump();
        self.inbox.sidr.remove(&id);
    }

    /// Stops a listener and hands back the requests it had not taken (the caller rejects
    /// them).
    pub fn close_listener(&mut self, listener: ListenerId) -> Vec<CmEvent> {
        let _ = self.cm.stop_listening(listener);
        self.pump();
        self.inbox
            .by_listener
            .remove(&listener)
            .map(Vec::from)
            .unwrap_or_default()
    }

    /// Whether a transport packet is for QP1 (BTH DestQP, IBA 9.2.7).
    pub fn is_for_gsi(transport: &[u8]) -> bool {
        transport.len() >= softib_wire::BTH_LEN
            && u32::from_be_bytes([0, transport[5], transport[6], transport[7]]) == GSI_QPN
    }

    /// A packet for QP1 arrived from `sgid` (BTH and up, ICRC already checked and removed).
    pub fn handle_packet(&mut self, now: Nanos, sgid: Gid, transport: &[u8]) {
        self.counters.rx_packets += 1;
        let Ok(p) = PacketRepr::parse(transport) else {
            self.counters.bad_packet_drops += 1;
            return;
        };
        let Some(deth) = p.deth.filter(|_| p.bth.opcode == Opcode::UD_SEND_ONLY) else {
            self.counters.bad_packet_drops += 1;
            return;
        };
        if deth.qkey != GSI_QKEY {
            self.counters.bad_qkey_drops += 1;
            return;
        }
        // Full and limited members of the default partition (IBA 10.9.1.1).
        if p.bth.pkey & 0x7FFF != 0x7FFF {
            self.counters.bad_pkey_drops += 1;
            return;
        }
        let Ok(m) = MadPacket::new_checked(p.payload) else {
            self.counters.short_mad_drops += 1;
            return;
        };
        if m.mgmt_class() == mad::MGMT_CLASS_CM && m.method() == mad::method::SEND {
            self.counters.cm_mads += 1;
            self.cm
                .handle_mad(now, sgid, p.bth.pkey, &p.payload[..MAD_LEN]);
            return;
        }
        let header = MadHeader::parse(&m);
        if matches!(header.method, mad::method::GET | mad::method::SET)
            && self.answers.len() < MAX_ANSWERS
        {
            let mut answer = Box::new([0u8; MAD_LEN]);
            answer.copy_from_slice(&p.payload[..MAD_LEN]);
            let reply = MadHeader {
                method: mad::method::GET_RESP,
                status: mad::status::UNSUPPORTED_METHOD_ATTRIBUTE,
                ..header
            };
            // 256 bytes always take a 24-byte header.
            let _ = reply.emit(&mut answer[..]);
            self.answers
                .push_back((sgid, deth.src_qp, p.bth.pkey, answer));
            self.counters.unsupported_answered += 1;
        } else {
            self.counters.unsupported_drops += 1;
        }
    }

    /// The CM's earliest timer.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.cm.poll_timeout()
    }

    /// Fires the CM's due timers.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.cm.handle_timeout(now);
    }

    /// Writes the next datagram (BTH + DETH + MAD, no ICRC) into `buf`, which must hold
    /// [`GSI_DATAGRAM_LEN`] bytes.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<GsiTransmit> {
        let (dest_gid, dest_qp, pkey, mad) = match self.answers.pop_front() {
            Some(a) => a,
            None => {
                let t = self.cm.poll_transmit()?;
                (t.dest_gid, GSI_QPN, t.pkey, t.mad)
            }
        };
        let psn = self.next_psn;
        self.next_psn = (self.next_psn + 1) & 0xFF_FFFF;
        let mut p = PacketRepr::new(BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qp,
            // Linux sets AckReq on UD sends too (the rxe capture's QP1 packets have it).
            ack_req: true,
            psn,
        });
        p.deth = Some(DethRepr {
            qkey: GSI_QKEY,
            src_qp: GSI_QPN,
        });
        p.payload = &mad[..];
        let len = p.emit(buf).ok()?;
        self.counters.tx_packets += 1;
        Some(GsiTransmit { dest_gid, len })
    }
}

/// Bytes of a GSI datagram without ICRC: BTH 12 + DETH 8 + MAD 256.
pub const GSI_DATAGRAM_LEN: usize = softib_wire::BTH_LEN + softib_wire::DETH_LEN + MAD_LEN;

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(last: u8) -> Gid {
        std::net::Ipv4Addr::new(127, 0, 0, last)
            .to_ipv6_mapped()
            .octets()
    }

    fn packet(qkey: u32, pkey: u16, mad: &[u8]) -> Vec<u8> {
        let mut p = PacketRepr::new(BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: true,
            psn: 0,
        });
        p.deth = Some(DethRepr { qkey, src_qp: 1 });
        p.payload = mad;
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn wrong_qkey_pkey_and_short_mads_are_dropped_and_counted() {
        let mut g = Gsi::new(gid(1), 1);
        let mad = [0u8; 256];
        g.handle_packet(0, gid(2), &packet(0x1234, 0xffff, &mad));
        g.handle_packet(0, gid(2), &packet(GSI_QKEY, 0x8001, &mad));
        g.handle_packet(0, gid(2), &packet(GSI_QKEY, 0xffff, &mad[..100]));
        g.handle_packet(0, gid(2), &[0u8; 5]);
        let c = g.counters();
        assert_eq!(
            (
                c.bad_qkey_drops,
                c.bad_pkey_drops,
                c.short_mad_drops,
                c.bad_packet_drops
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(c.cm_mads, 0);
        let mut buf = [0u8; GSI_DATAGRAM_LEN];
        assert!(g.poll_transmit(&mut buf).is_none());
    }

    #[test]
    fn a_get_of_an_unserved_class_is_answered_unsupported_and_other_methods_dropped() {
        let mut g = Gsi::new(gid(1), 1);
        let mut mad = [0u8; 256];
        MadHeader {
            base_version: 1,
            mgmt_class: 0x04, // PerfMgt: no agent here
            class_version: 1,
            method: mad::method::GET,
            transaction_id: 0xabcdef,
            attribute_id: 0x0012,
            ..MadHeader::default()
        }
        .emit(&mut mad)
        .unwrap();
        g.handle_packet(0, gid(2), &packet(GSI_QKEY, 0xffff, &mad));
        let mut buf = [0u8; GSI_DATAGRAM_LEN];
        let t = g.poll_transmit(&mut buf).unwrap();
        assert_eq!(t.dest_gid, gid(2));
        let p = PacketRepr::parse(&buf[..t.len]).unwrap();
        assert_eq!(
            p.deth.unwrap(),
            DethRepr {
                qkey: GSI_QKEY,
                src_qp: 1
            }
        );
        let h = MadHeader::parse(&MadPacket::new_checked(p.payload).unwrap());
        assert_eq!(h.method, mad::method::GET_RESP);
        assert_eq!(h.status, mad::status::UNSUPPORTED_METHOD_ATTRIBUTE);
        assert_eq!(h.transaction_id, 0xabcdef);
        mad[3] = mad::method::TRAP;
        g.handle_packet(0, gid(2), &packet(GSI_QKEY, 0xffff, &mad));
        assert!(g.poll_transmit(&mut buf).is_none());
        assert_eq!(g.counters().unsupported_drops, 1);
    }
}
