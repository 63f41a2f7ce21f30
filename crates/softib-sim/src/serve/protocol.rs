//! The messages of ibsim's client protocol (`include/ibsim.h` of linux-rdma/ibsim), which
//! `libumad2sim.so` speaks to redirect libibumad to a simulator: control messages on the
//! `<base>:ctl` socket and MAD requests on `<base>:out<client>`. The structures are the C
//! ones in the host's byte order (the client and the server run on one machine), except
//! the LIDs and QPNs of a request, which umad2sim carries in network order.

/// `SIM_MAGIC`: the first word of every control message.
pub const SIM_MAGIC: u32 = 0xdead_beef;
/// `IBSIM_MAX_CLIENTS`: at most this many clients at once (sockets `out0` .. `out9`).
pub const MAX_CLIENTS: usize = 10;
/// Size of `struct sim_ctl`: magic, clientid, type, len, 64 bytes of data.
pub const CTL_LEN: usize = 80;
/// Bytes of data in a control message.
pub const CTL_DATA_LEN: usize = 64;
/// Size of `struct sim_request`: dlid, slid, dqp, sqp, status, (padding), length, mad.
pub const REQUEST_LEN: usize = 288;
/// Offset of the MAD in a request.
pub const REQUEST_MAD: usize = 32;
/// The status umad2sim hands the tool for a MAD that got no response (ETIMEDOUT), so the
/// tool reports a timeout at once instead of waiting for one.
pub const STATUS_TIMEOUT: u32 = 110;

/// Control message types (`enum SIM_CTL_TYPES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtlType {
    /// The reply type of a refused request.
    Error,
    /// Attach a client to a node.
    Connect,
    /// Detach.
    Disconnect,
    /// LID and state of the client's port.
    GetPort,
    /// Vendor, part, hardware and firmware versions.
    GetVendor,
    /// The port's GID.
    GetGid,
    /// The node GUID.
    GetGuid,
    /// The node's NodeInfo.
    GetNodeInfo,
    /// A port's PortInfo.
    GetPortInfo,
    /// The client runs an SM (IsSM).
    SetIsSm,
    /// The port's P_Keys.
    GetPkeys,
}

impl CtlType {
    /// The type of wire value `v`.
    pub fn from_wire(v: u32) -> Option<Self> {
        use CtlType::*;
        Some(match v {
            0 => Error,
            1 => Connect,
            2 => Disconnect,
            3 => GetPort,
            4 => GetVendor,
            5 => GetGid,
            6 => GetGuid,
            7 => GetNodeInfo,
            8 => GetPortInfo,
            9 => SetIsSm,
            10 => GetPkeys,
            _ => return None,
        })
    }

    /// The wire value.
    pub fn wire(self) -> u32 {
        self as u32
    }
}

/// A control message (`struct sim_ctl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ctl {
    /// The client's id (its slot), or anything on a connect.
    pub client: u32,
    /// The wire type (kept raw: an unknown type is answered with Error).
    pub kind: u32,
    /// The `len` field.
    pub len: u32,
    /// The data.
    pub data: [u8; CTL_DATA_LEN],
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Ctl {
    /// Parses a control datagram: exactly [`CTL_LEN`] bytes with the magic, else `None`.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() != CTL_LEN || word(b, 0) != SIM_MAGIC {
            return None;
        }
        let mut data = [0; CTL_DATA_LEN];
        data.copy_from_slice(&b[16..80]);
        Some(Ctl {
            client: word(b, 4),
            kind: word(b, 8),
            len: word(b, 12),
            data,
        })
    }

    /// The datagram.
    pub fn encode(&self) -> [u8; CTL_LEN] {
        let mut b = [0; CTL_LEN];
        b[0..4].copy_from_slice(&SIM_MAGIC.to_ne_bytes());
        b[4..8].copy_from_slice(&self.client.to_ne_bytes());
        b[8..12].copy_from_slice(&self.kind.to_ne_bytes());
        b[12..16].copy_from_slice(&self.len.to_ne_bytes());
        b[16..].copy_from_slice(&self.data);
        b
    }
}

/// `struct sim_client_info`, the data of a connect: the client's pid (or UDP port), its QP,
/// whether it is an SM, and the node it asks for (`SIM_HOST`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    /// Pid of the client (names its `<base>:in<pid>` socket).
    pub id: u32,
    /// QP number (0 or 1).
    pub qp: u32,
    /// Non-zero: the client runs an SM.
    pub issm: u32,
    /// The node asked for (empty: the default).
    pub node: String,
}

impl ClientInfo {
    /// Reads it from a connect's data.
    pub fn parse(d: &[u8; CTL_DATA_LEN]) -> Self {
        let name = &d[12..44];
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        ClientInfo {
            id: word(d, 0),
            qp: word(d, 4),
            issm: word(d, 8),
            node: String::from_utf8_lossy(&name[..end]).into_owned(),
        }
    }

    /// Writes it into a reply's data (the node name cut to 31 bytes, NUL-terminated).
    pub fn encode(&self, d: &mut [u8; CTL_DATA_LEN]) {
        d[0..4].copy_from_slice(&self.id.to_ne_bytes());
        d[4..8].copy_from_slice(&self.qp.to_ne_bytes());
        d[8..12].copy_from_slice(&self.issm.to_ne_bytes());
        d[12..44].fill(0);
        let b = self.node.as_bytes();
        let n = b.len().min(31);
        d[12..12 + n].copy_from_slice(&b[..n]);
    }
}

/// A MAD request or response (`struct sim_request`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Destination LID.
    pub dlid: u16,
    /// Source LID (0: the sender's, filled in by the simulator).
    pub slid: u16,
    /// Destination QP (network order word as sent).
    pub dqp: [u8; 4],
    /// Source QP.
    pub sqp: [u8; 4],
    /// Status (0, or [`STATUS_TIMEOUT`]).
    pub status: u32,
    /// Length of the MAD as umad2sim gave it (big-endian 64-bit on the wire).
    pub length: u64,
    /// The MAD.
    pub mad: [u8; 256],
}

impl Request {
    /// Parses a request datagram of exactly [`REQUEST_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() != REQUEST_LEN {
            return None;
        }
        let mut mad = [0; 256];
        mad.copy_from_slice(&b[REQUEST_MAD..]);
        Some(Request {
            dlid: u16::from_be_bytes([b[0], b[1]]),
            slid: u16::from_be_bytes([b[4], b[5]]),
            dqp: [b[8], b[9], b[10], b[11]],
            sqp: [b[12], b[13], b[14], b[15]],
            status: u32::from_be_bytes([b[16], b[17], b[18], b[19]]),
            length: u64::from_be_bytes(b[24..32].try_into().expect("8 bytes")),
            mad,
        })
    }

    /// The datagram.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0; REQUEST_LEN];
        b[0..2].copy_from_slice(&self.dlid.to_be_bytes());
        b[4..6].copy_from_slice(&self.slid.to_be_bytes());
        b[8..12].copy_from_slice(&self.dqp);
        b[12..16].copy_from_slice(&self.sqp);
        b[16..20].copy_from_slice(&self.status.to_be_bytes());
        b[24..32].copy_from_slice(&self.length.to_be_bytes());
        b[REQUEST_MAD..].copy_from_slice(&self.mad);
        b
    }

    /// The reply to this request carrying `mad` (addresses and QPs swapped, as a response
    /// travels back), or a timeout status with the request's MAD when `mad` is `None`.
    pub fn reply(&self, sender_lid: u16, target_lid: u16, mad: Option<&[u8; 256]>) -> Request {
        Request {
            dlid: if self.slid == 0 {
                sender_lid
            } else {
                self.slid
            },
            slid: target_lid,
            dqp: self.sqp,
            sqp: self.dqp,
            status: if mad.is_some() { 0 } else { STATUS_TIMEOUT },
            length: self.length,
            mad: *mad.unwrap_or(&self.mad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_bad_ones_are_refused() {
        let mut data = [0u8; CTL_DATA_LEN];
        ClientInfo {
            id: 4242,
            qp: 0,
            issm: 1,
            node: "a-node-name-longer-than-thirty-one-bytes".into(),
        }
        .encode(&mut data);
        let c = Ctl {
            client: 3,
            kind: CtlType::Connect.wire(),
            len: 44,
            data,
        };
        let b = c.encode();
        assert_eq!(Ctl::parse(&b), Some(c));
        let info = ClientInfo::parse(&data);
        assert_eq!(info.id, 4242);
        assert_eq!(info.node.len(), 31, "cut to 31 bytes and NUL-terminated");
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Ctl::parse(&bad), None, "wrong magic");
        assert_eq!(Ctl::parse(&b[..79]), None, "short");
        assert_eq!(CtlType::from_wire(11), None);
    }

    #[test]
    fn a_reply_swaps_addresses_and_a_lost_mad_says_timeout() {
        let mut mad = [0u8; 256];
        mad[0] = 1;
        let r = Request {
            dlid: 7,
            slid: 0,
            dqp: [0, 0, 0, 1],
            sqp: [0, 0, 0, 0],
            status: 0,
            length: 256,
            mad,
        };
        let b = r.encode();
        assert_eq!(&b[0..2], &[0, 7], "LID in network order");
        assert_eq!(Request::parse(&b), Some(r.clone()));
        assert_eq!(Request::parse(&b[..287]), None);
        let ok = r.reply(1, 7, Some(&[2u8; 256]));
        assert_eq!(
            (ok.dlid, ok.slid, ok.dqp, ok.sqp, ok.status),
            (1, 7, r.sqp, r.dqp, 0)
        );
        let lost = r.reply(1, 7, None);
        assert_eq!(lost.status, STATUS_TIMEOUT);
        assert_eq!(lost.mad, r.mad);
    }
}
