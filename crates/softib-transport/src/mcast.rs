//! UD multicast groups (IBA vol. 1 10.5 "multicast", 9.8.4): which UD QPs of the device
//! are attached to which multicast GID. A packet addressed to the multicast QPN
//! (DestQP 0xFFFFFF, IBA 9.8.4 C9-226) is delivered to every QP attached to the packet's
//! destination GID; each QP then applies its own P_Key, state and Q_Key checks, as for a
//! unicast datagram.
//!
//! The limits are rxe's (rxe_param.h): 8192 groups, 56 QPs per group, 0x70000 attachments
//! in all. As rxe, attaching a QP already attached succeeds without a second entry, and
//! detaching one that is not attached is refused.

use std::collections::BTreeMap;

/// DestQP of a multicast packet (IBA 9.8.4: the "multicast QP" 0xFFFFFF).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;
/// Groups a device holds at once (`max_mcast_grp`; rxe's RXE_MAX_MCAST_GRP).
pub const MAX_MCAST_GRP: u32 = 8192;
/// QPs attached to one group (`max_mcast_qp_attach`; RXE_MAX_MCAST_QP_ATTACH).
pub const MAX_MCAST_QP_ATTACH: u32 = 56;
/// Attachments over all groups (`max_total_mcast_qp_attach`; RXE_MAX_TOT_MCAST_QP_ATTACH).
pub const MAX_TOTAL_MCAST_QP_ATTACH: u32 = 0x70000;

/// Whether `gid` is a multicast address: an IPv6 multicast address (ff00::/8) or an
/// IPv4-mapped IPv4 multicast address (::ffff:224.0.0.0/100), the kernel's
/// `rdma_is_multicast_addr`, which `ib_attach_mcast` requires on RoCE.
pub fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    let v4_mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    gid[0] == 0xff || (v4_mapped && (224..=239).contains(&gid[12]))
}

/// Why an attach or detach was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McastRefusal {
    /// The GID is no multicast address.
    NotMulticast,
    /// `MAX_MCAST_GRP` groups exist already.
    TooManyGroups,
    /// The group has `MAX_MCAST_QP_ATTACH` QPs.
    GroupFull,
    /// `MAX_TOTAL_MCAST_QP_ATTACH` attachments exist.
    TooManyAttachments,
    /// The QP is not attached to that group.
    NotAttached,
}

/// The multicast groups of one device and the QPs attached to each.
#[derive(Clone, Debug, Default)]
pub struct McastTable {
    groups: BTreeMap<[u8; 16], Vec<u32>>,
    attachments: u32,
}

impl McastTable {
    /// Attaches `qpn` to `gid`. Returns true when the group is new (the driver then joins
    /// it on the network).
    pub fn attach(&mut self, qpn: u32, gid: [u8; 16]) -> Result<bool, McastRefusal> {
        if !is_multicast_gid(&gid) {
            return Err(McastRefusal::NotMulticast);
        }
        let new_group = !self.groups.contains_key(&gid);
        if new_group && self.groups.len() as u32 >= MAX_MCAST_GRP {
            return Err(McastRefusal::TooManyGroups);
        }
        let members = self.groups.get(&gid).map_or(&[][..], Vec::as_slice);
        if members.contains(&qpn) {
            return Ok(false);
        }
        if members.len() as u32 >= MAX_MCAST_QP_ATTACH {
            return Err(McastRefusal::GroupFull);
        }
        if self.attachments >= MAX_TOTAL_MCAST_QP_ATTACH {
            return Err(McastRefusal::TooManyAttachments);
        }
        self.groups.entry(gid).or_default().push(qpn);
        self.attachments += 1;
        Ok(new_group)
    }

    /// Detaches `qpn` from `gid`. Returns true when the group is now empty and gone (the
    /// driver then leaves it).
    pub fn detach(&mut self, qpn: u32, gid: [u8; 16]) -> Result<bool, McastRefusal> {
        let Some(members) = self.groups.get_mut(&gid) else {
            return Err(McastRefusal::NotAttached);
        };
        let Some(at) = members.iter().position(|&q| q == qpn) else {
            return Err(McastRefusal::NotAttached);
        };
        members.remove(at);
        self.attachments -= 1;
        if members.is_empty() {
            self.groups.remove(&gid);
            return Ok(true);
        }
        Ok(false)
    }

    /// Detaches `qpn` from every group (the QP is being destroyed, as the kernel's uverbs
    /// detaches a QP's groups before destroying it). Returns the groups now empty.
    pub fn detach_everywhere(&mut self, qpn: u32) -> Vec<[u8; 16]> {
        let gids: Vec<[u8; 16]> = self
            .groups
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        gids.into_iter()
            .filter(|g| self.detach(qpn, *g) == Ok(true))
            .collect()
    }

    /// The QPs attached to `gid`, in attach order.
    pub fn members(&self, gid: &[u8; 16]) -> &[u32] {
        self.groups.get(gid).map_or(&[], Vec::as_slice)
    }

    /// The groups with at least one QP attached.
    pub fn groups(&self) -> impl Iterator<Item = &[u8; 16]> + '_ {
        self.groups.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[a, b, c, d]);
        g
    }

    #[test]
    fn multicast_gids_are_ipv6_multicast_or_ipv4_mapped_class_d() {
        assert!(is_multicast_gid(&v4(239, 1, 2, 3)));
        assert!(is_multicast_gid(&v4(224, 0, 0, 1)));
        assert!(!is_multicast_gid(&v4(127, 0, 0, 1)));
        assert!(!is_multicast_gid(&v4(240, 0, 0, 1)));
        let mut ff0e = [0u8; 16];
        ff0e[0] = 0xff;
        ff0e[1] = 0x0e;
        assert!(is_multicast_gid(&ff0e));
        assert!(!is_multicast_gid(&[0; 16]));
    }

    #[test]
    fn attach_is_idempotent_and_detach_reports_the_last_member() {
        let mut t = McastTable::default();
        let g = v4(239, 0, 0, 9);
        assert_eq!(t.attach(5, g), Ok(true));
        assert_eq!(t.attach(5, g), Ok(false));
        assert_eq!(t.attach(6, g), Ok(false));
        assert_eq!(t.members(&g), &[5, 6]);
        assert_eq!(t.detach(7, g), Err(McastRefusal::NotAttached));
        assert_eq!(t.detach(5, g), Ok(false));
        assert_eq!(t.detach(6, g), Ok(true));
        assert!(t.members(&g).is_empty());
        assert_eq!(t.detach(6, g), Err(McastRefusal::NotAttached));
        assert_eq!(
            t.attach(1, v4(10, 0, 0, 1)),
            Err(McastRefusal::NotMulticast)
        );
    }

    #[test]
    fn limits_are_rxes() {
        let mut t = McastTable::default();
        let g = v4(239, 0, 0, 1);
        for q in 0..MAX_MCAST_QP_ATTACH {
            t.attach(q, g).unwrap();
        }
        assert_eq!(t.attach(999, g), Err(McastRefusal::GroupFull));
        let mut t = McastTable::default();
        for i in 0..MAX_MCAST_GRP {
            t.attach(1, v4(239, 9, (i >> 8) as u8, i as u8)).unwrap();
        }
        assert_eq!(
            t.attach(1, v4(239, 10, 0, 0)),
            Err(McastRefusal::TooManyGroups)
        );
        assert_eq!(t.detach_everywhere(1).len(), MAX_MCAST_GRP as usize);
        assert_eq!(t.groups().count(), 0);
    }
}
