//! The files of the device view, rendered as Linux 6.1 renders them: the IB device
//! (drivers/infiniband/core/sysfs.c: device and port attributes, GID and P_Key tables),
//! the uverbs device (drivers/infiniband/core/uverbs_main.c: `ibdev`, `abi_version`,
//! `dev`) and the device node. Pure: the tree is a list of entries, written to disk by
//! `tree.rs`.

use super::facts::*;

/// One entry of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file with this text.
    File(String),
    /// A symbolic link to this target.
    Symlink(String),
    /// Another name (a hard link) of the regular file at this path of the tree, written
    /// earlier: the 1023 empty GID slots share one file instead of a disk block each.
    SameAs(String),
}

/// What the view takes from the host rather than from the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// `local_cpus` text: the CPUs a virtual device is local to, all of them, in the
    /// kernel's bitmap format (`%*pb`, e.g. `3` or `ffffffff,ffffffff`).
    pub local_cpus: String,
    /// `local_cpulist` text (`%*pbl`, e.g. `0-1`).
    pub local_cpulist: String,
    /// Major and minor of the node `/dev/infiniband/uverbsN` leads to (`/dev/null`), so the
    /// uverbs device's `dev` file agrees with what stat(2) of the node says.
    pub node_rdev: (u32, u32),
}

/// A GID as the kernel's `%pI6` prints it: eight groups of four hex digits.
pub fn gid_text(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|w| format!("{:02x}{:02x}", w[0], w[1]))
        .collect();
    groups.join(":")
}

/// A GUID as sysfs prints it (`%04x:%04x:%04x:%04x` of its big-endian 16-bit words).
pub fn guid_text(guid: &[u8; 8]) -> String {
    let groups: Vec<String> = guid
        .chunks(2)
        .map(|w| format!("{:02x}{:02x}", w[0], w[1]))
        .collect();
    groups.join(":")
}

/// `rate` of a port: the kernel's rate_show for 4X EDR.
pub fn rate_text(width: u8, speed: u8) -> String {
    // Per-lane rate in deci-Gb/s (sysfs.c rate_show); SDR for unknown speeds, as there.
    let (name, deci) = match speed {
        2 => ("DDR", 50),
        4 => ("QDR", 100),
        8 => ("FDR10", 100),
        16 => ("FDR", 140),
        32 => ("EDR", 250),
        64 => ("HDR", 500),
        128 => ("NDR", 1000),
        _ => ("SDR", 25),
    };
    // ib_width_enum_to_int.
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    let rate = deci * lanes;
    let half = if rate % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X {name})\n", rate / 10)
}

fn state_name(state: u32) -> &'static str {
    match state {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

fn phys_state_name(state: u8) -> &'static str {
    match state {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "Phy Test",
        _ => "<unknown>",
    }
}

/// Every entry of the view, parents before children, paths relative to the view's root
/// (`sys/class/infiniband/softib0/node_guid`, ...).
pub fn render(dev: &DeviceFacts, host: &HostFacts) -> Vec<(String, Node)> {
    let mut out: Vec<(String, Node)> = Vec::new();
    let mut dir = |p: String| out.push((p, Node::Dir));
    let ib = format!("{}/{}", &IB_CLASS[1..], dev.name);
    let uv_class = &UVERBS_CLASS[1..];
    let uv = format!("{uv_class}/{}", dev.uverbs);
    let port = format!("{ib}/ports/1");
    for d in [
        "sys".to_string(),
        "sys/class".into(),
        IB_CLASS[1..].into(),
        ib.clone(),
        format!("{ib}/device"),
        format!("{ib}/ports"),
        port.clone(),
        format!("{port}/gids"),
        format!("{port}/pkeys"),
        format!("{port}/gid_attrs"),
        format!("{port}/gid_attrs/types"),
        format!("{port}/gid_attrs/ndevs"),
        uv_class.into(),
        uv.clone(),
        "dev".into(),
        DEV_DIR[1..].into(),
    ] {
        dir(d);
    }
    let file = |p: String, text: String| (p, Node::File(text));
    let guid = guid_text(&dev.node_guid);
    // drivers/infiniband/core/sysfs.c: the device's attributes.
    out.push(file(format!("{ib}/node_type"), "1: CA\n".into()));
    out.push(file(format!("{ib}/node_guid"), format!("{guid}\n")));
    out.push(file(format!("{ib}/sys_image_guid"), format!("{guid}\n")));
    out.push(file(format!("{ib}/node_desc"), format!("{NODE_DESC}\n")));
    out.push(file(format!("{ib}/fw_ver"), format!("{FW_VER}\n")));
    // rxe's driver attribute: the name of the netdev under the device.
    if let Some(nd) = &dev.netdev {
        out.push(file(format!("{ib}/parent"), format!("{nd}\n")));
    }
    // The device's parent (a virtual device): its netdev and the CPUs it is local to.
    out.push(file(
        format!("{ib}/device/local_cpus"),
        format!("{}\n", host.local_cpus),
    ));
    out.push(file(
        format!("{ib}/device/local_cpulist"),
        format!("{}\n", host.local_cpulist),
    ));
    out.push(file(format!("{ib}/device/numa_node"), "-1\n".into()));
    if let Some(nd) = &dev.netdev {
        out.push((format!("{ib}/device/net"), Node::Dir));
        out.push((
            format!("{ib}/device/net/{nd}"),
            Node::Symlink(format!("/sys/class/net/{nd}")),
        ));
    }
    // The port's attributes (port_default_attrs).
    out.push(file(
        format!("{port}/state"),
        format!("{PORT_STATE}: {}\n", state_name(PORT_STATE)),
    ));
    out.push(file(format!("{port}/lid"), "0x0\n".into()));
    out.push(file(format!("{port}/lid_mask_count"), "0\n".into()));
    out.push(file(format!("{port}/sm_lid"), "0x0\n".into()));
    out.push(file(format!("{port}/sm_sl"), "0\n".into()));
    out.push(file(
        format!("{port}/cap_mask"),
        format!("0x{PORT_CAP_FLAGS:08x}\n"),
    ));
    out.push(file(
        format!("{port}/rate"),
        rate_text(ACTIVE_WIDTH_4X, ACTIVE_SPEED_EDR),
    ));
    out.push(file(
        format!("{port}/phys_state"),
        format!(
            "{PHYS_STATE_LINK_UP}: {}\n",
            phys_state_name(PHYS_STATE_LINK_UP)
        ),
    ));
    out.push(file(format!("{port}/link_layer"), "Ethernet\n".into()));
    // GID table: `gid_tbl_len` slots; index 0 holds the RoCEv2 GID of the address, the
    // empty ones read as the zero GID (show_port_gid). The kernel fails a read of an empty
    // slot's type or netdev with EINVAL; a file cannot, so those files are absent (open
    // fails with ENOENT), which a reader handles the same way.
    out.push(file(
        format!("{port}/gids/0"),
        format!("{}\n", gid_text(&dev.gid)),
    ));
    let first_empty = format!("{port}/gids/1");
    for i in 1..dev.gid_tbl_len {
        let path = format!("{port}/gids/{i}");
        out.push(if i == 1 {
            file(path, format!("{}\n", gid_text(&[0; 16])))
        } else {
            (path, Node::SameAs(first_empty.clone()))
        });
    }
    out.push(file(
        format!("{port}/gid_attrs/types/0"),
        "RoCE v2\n".into(),
    ));
    if let Some(nd) = &dev.netdev {
        out.push(file(format!("{port}/gid_attrs/ndevs/0"), format!("{nd}\n")));
    }
    for (i, k) in dev.pkeys.iter().enumerate() {
        out.push(file(format!("{port}/pkeys/{i}"), format!("0x{k:04x}\n")));
    }
    // drivers/infiniband/core/uverbs_main.c: the class attribute and the device's.
    out.push(file(
        format!("{uv_class}/abi_version"),
        format!("{UVERBS_ABI_VERSION}\n"),
    ));
    out.push(file(format!("{uv}/ibdev"), format!("{}\n", dev.name)));
    out.push(file(
        format!("{uv}/abi_version"),
        format!("{UVERBS_ABI_VERSION}\n"),
    ));
    out.push(file(
        format!("{uv}/dev"),
        format!("{}:{}\n", host.node_rdev.0, host.node_rdev.1),
    ));
    // The uverbs device's parent is the IB device's parent.
    out.push((
        format!("{uv}/device"),
        Node::Symlink(format!("../../infiniband/{}/device", dev.name)),
    ));
    // The device node: stat(2) through it sees a character device the user may read and
    // write, which is what UCX and libibverbs check before using a device.
    out.push((
        dev.dev_node()[1..].to_string(),
        Node::Symlink("/dev/null".into()),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> (DeviceFacts, HostFacts) {
        (
            DeviceFacts {
                name: "softib0".into(),
                uverbs: "uverbs0".into(),
                node_guid: [0x02, 0x50, 0xff, 0xff, 0x7f, 0, 0, 1],
                gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1],
                gid_tbl_len: 1024,
                netdev: Some("lo".into()),
                pkeys: vec![0xffff],
            },
            HostFacts {
                local_cpus: "3".into(),
                local_cpulist: "0-1".into(),
                node_rdev: (1, 3),
            },
        )
    }

    fn text(entries: &[(String, Node)], path: &str) -> String {
        match entries.iter().find(|(p, _)| p == path) {
            Some((_, Node::File(t))) => t.clone(),
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn files_read_as_linux_6_1_prints_them() {
        let (d, h) = facts();
        let e = render(&d, &h);
        let ib = "sys/class/infiniband/softib0";
        assert_eq!(text(&e, &format!("{ib}/node_type")), "1: CA\n");
        assert_eq!(
            text(&e, &format!("{ib}/node_guid")),
            "0250:ffff:7f00:0001\n"
        );
        assert_eq!(text(&e, &format!("{ib}/ports/1/state")), "4: ACTIVE\n");
        assert_eq!(text(&e, &format!("{ib}/ports/1/phys_state")), "5: LinkUp\n");
        assert_eq!(
            text(&e, &format!("{ib}/ports/1/rate")),
            "100 Gb/sec (4X EDR)\n"
        );
        assert_eq!(text(&e, &format!("{ib}/ports/1/link_layer")), "Ethernet\n");
        assert_eq!(
            text(&e, &format!("{ib}/ports/1/gids/0")),
            "0000:0000:0000:0000:0000:ffff:7f00:0001\n"
        );
        assert_eq!(
            text(&e, &format!("{ib}/ports/1/gids/1")),
            "0000:0000:0000:0000:0000:0000:0000:0000\n"
        );
        assert!(e.contains(&(
            format!("{ib}/ports/1/gids/1023"),
            Node::SameAs(format!("{ib}/ports/1/gids/1"))
        )));
        assert!(!e.iter().any(|(p, _)| p.ends_with("gid_attrs/types/1")));
        assert_eq!(
            text(&e, &format!("{ib}/ports/1/gid_attrs/types/0")),
            "RoCE v2\n"
        );
        assert_eq!(text(&e, &format!("{ib}/ports/1/gid_attrs/ndevs/0")), "lo\n");
        assert_eq!(text(&e, &format!("{ib}/ports/1/pkeys/0")), "0xffff\n");
        assert_eq!(text(&e, &format!("{ib}/ports/1/cap_mask")), "0x04010000\n");
        assert_eq!(text(&e, &format!("{ib}/ports/1/lid")), "0x0\n");
        assert_eq!(text(&e, &format!("{ib}/device/local_cpus")), "3\n");
        assert_eq!(
            text(&e, "sys/class/infiniband_verbs/uverbs0/ibdev"),
            "softib0\n"
        );
        assert_eq!(
            text(&e, "sys/class/infiniband_verbs/uverbs0/abi_version"),
            "6\n"
        );
        assert_eq!(text(&e, "sys/class/infiniband_verbs/uverbs0/dev"), "1:3\n");
        assert!(e.contains(&(
            format!("{ib}/device/net/lo"),
            Node::Symlink("/sys/class/net/lo".into())
        )));
        assert!(e.contains(&(
            "dev/infiniband/uverbs0".into(),
            Node::Symlink("/dev/null".into())
        )));
    }

    #[test]
    fn parents_come_before_children() {
        let (d, h) = facts();
        let e = render(&d, &h);
        for (i, (p, _)) in e.iter().enumerate() {
            if let Some((parent, _)) = p.rsplit_once('/') {
                let at = e.iter().position(|(q, n)| q == parent && *n == Node::Dir);
                assert!(at.is_some_and(|a| a < i), "{p} before its directory");
            }
        }
    }

    #[test]
    fn rates_follow_the_kernel_table() {
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X SDR)\n");
        assert_eq!(rate_text(2, 16), "56 Gb/sec (4X FDR)\n");
        assert_eq!(rate_text(8, 64), "600 Gb/sec (12X HDR)\n");
    }
}
