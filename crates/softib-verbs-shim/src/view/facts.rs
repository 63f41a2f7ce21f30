//! The facts about the device that both faces of the shim show: the verbs
//! (`ibv_query_device`, `ibv_query_port`, `ibv_query_gid`, `struct ibv_device`) and the
//! kernel-style files of the device view (sysfs, `/dev/infiniband`). Both are generated
//! from here, so a program that reads one and then the other sees one device.

use softib_transport::DeviceConfig;

use crate::abi::{IBV_PORT_ACTIVE, IBV_PORT_CM_SUP, IBV_PORT_IP_BASED_GIDS};
use crate::config::Config;

/// Firmware version string (`fw_ver` in `ibv_query_device` and sysfs): the crate's
/// version, in rxe's `major.minor.sub_minor` form.
pub const FW_VER: &str = env!("CARGO_PKG_VERSION");

/// Node description (`node_desc`): rxe writes its driver name there.
pub const NODE_DESC: &str = "softib";

/// Port state: always ACTIVE (IBA vol. 1 §14.2.5.6, PortInfo:PortState 4).
pub const PORT_STATE: u32 = IBV_PORT_ACTIVE;

/// Physical port state 5, LinkUp (IBA vol. 1 §14.2.5.6, PortInfo:PortPhysicalState).
pub const PHYS_STATE_LINK_UP: u8 = 5;

/// Active width 4X (`IB_WIDTH_4X` = 2, IBA vol. 1 §14.2.5.6 LinkWidthActive).
pub const ACTIVE_WIDTH_4X: u8 = 2;

/// Active speed EDR (`IB_SPEED_EDR` = 32): with 4X, the 100 Gb/s rxe reports on most
/// links. The rate is not enforced.
pub const ACTIVE_SPEED_EDR: u8 = 32;

/// Port capability flags: connection manager supported, IP-based GIDs (RoCE).
pub const PORT_CAP_FLAGS: u32 = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;

/// `IB_USER_VERBS_ABI_VERSION` of Linux 6.1 (include/uapi/rdma/ib_user_verbs.h).
pub const UVERBS_ABI_VERSION: u32 = 6;

/// Entries in the port's GID table: 1024, as rxe (rxe_param.h `RXE_PORT_GID_TBL_LEN`) and
/// the kernel's RoCE GID cache. Only index 0 holds a GID (config.rs); the others are empty
/// slots, which the verbs answer as the kernel does: `ibv_query_gid` gives a zero GID,
/// `ibv_query_gid_ex` ENODATA, and an address vector naming one fails with ENODATA.
pub const GID_TBL_LEN: u32 = 1024;

/// Slots of the GID table that hold a GID (index 0 only).
pub const GIDS_IN_USE: u32 = 1;

/// Prefix of the uverbs class directory (`dev_path` of `struct ibv_device`).
pub const UVERBS_CLASS: &str = "/sys/class/infiniband_verbs";

/// Prefix of the IB device class directory (`ibdev_path`).
pub const IB_CLASS: &str = "/sys/class/infiniband";

/// Directory of the verbs device nodes.
pub const DEV_DIR: &str = "/dev/infiniband";

/// Everything about the device that the view and the verbs share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Device name (`softib0`).
    pub name: String,
    /// Name of the uverbs character device (`uverbs0`), `dev_name` of `struct ibv_device`.
    pub uverbs: String,
    /// Node GUID, wire byte order.
    pub node_guid: [u8; 8],
    /// GID index 0 (the only one in use), RoCEv2.
    pub gid: [u8; 16],
    /// Slots in the GID table (`gid_tbl_len`); all but index 0 are empty.
    pub gid_tbl_len: u32,
    /// The network interface holding the device's address (`lo` for 127.x.y.z), if any.
    pub netdev: Option<String>,
    /// P_Key table.
    pub pkeys: Vec<u16>,
}

impl DeviceFacts {
    /// The facts of the device `config` describes. The interface lookup is the one
    /// softib-net makes to choose the MTU, so the view names the interface whose MTU the
    /// port reports.
    pub fn from_config(config: &Config) -> DeviceFacts {
        DeviceFacts {
            name: config.name.clone(),
            uverbs: "uverbs0".into(),
            node_guid: config.node_guid(),
            gid: config.gid(),
            gid_tbl_len: GID_TBL_LEN,
            netdev: softib_net::roce::interface_mtu(config.addr)
                .ok()
                .map(|(name, _)| name),
            pkeys: DeviceConfig::default().pkeys,
        }
    }

    /// `dev_path` of `struct ibv_device`: the uverbs device's sysfs directory.
    pub fn dev_path(&self) -> String {
        format!("{UVERBS_CLASS}/{}", self.uverbs)
    }

    /// `ibdev_path` of `struct ibv_device`: the IB device's sysfs directory.
    pub fn ibdev_path(&self) -> String {
        format!("{IB_CLASS}/{}", self.name)
    }

    /// The device node programs stat and open (`/dev/infiniband/uverbs0`).
    pub fn dev_node(&self) -> String {
        format!("{DEV_DIR}/{}", self.uverbs)
    }
}
