//! The verbs vocabulary both runtimes expose: the Rust spelling of `ibv_*` types.
//!
//! Numeric values follow libibverbs (`verbs.h`) where a value is visible to users, so a
//! reader who knows the C API recognises them.

use crate::flags::bit_flags;

/// A protection domain (IBA 10.2.3). Memory regions, address handles, SRQs and QPs belong
/// to one; remote and local accesses are only allowed within the same domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub u32);

/// A completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// A shared receive queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// An address handle (UD destinations, IBA 10.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AhHandle(pub u32);

/// The two keys of a registered memory region. softib, like rxe, gives both the same value:
/// 24-bit table index in the high bits, 8-bit unpredictable key in the low byte (IBA 10.6.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Key for local access (SGEs).
    pub lkey: u32,
    /// Key for remote access (RETH / AtomicETH R_Key).
    pub rkey: u32,
}

bit_flags! {
    /// Memory region and QP access rights (`ibv_access_flags`, IBA 10.6.3.2).
    pub struct AccessFlags(u32) {
        /// The local HCA may write the region (receive buffers, read responses, atomics).
        const LOCAL_WRITE = 1;
        /// A remote peer may RDMA WRITE into the region.
        const REMOTE_WRITE = 2;
        /// A remote peer may RDMA READ from the region.
        const REMOTE_READ = 4;
        /// A remote peer may run atomics on the region.
        const REMOTE_ATOMIC = 8;
        /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`, IBA 10.6.7.2,
        /// C10-73). Meaningless on a window's own access rights.
        const MW_BIND = 16;
        /// A type 2 window bound with this flag is zero-based: remote VAs are offsets from
        /// the window's start (`IBV_ACCESS_ZERO_BASED`, IBA 10.6.7.2.3).
        const ZERO_BASED = 32;
    }
}

/// Transport service of a QP (IBA 9.8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// XRC initiator (`IBV_QPT_XRC_SEND`, IBA Annex A14): an RC send queue whose requests
    /// carry an XRCETH naming the remote XRC SRQ (`SendWr::xrc_remote_srqn`); no receive
    /// queue.
    XrcSend,
    /// XRC target (`IBV_QPT_XRC_RECV`, IBA Annex A14): an RC responder in an XRC domain
    /// that delivers each request into the XRC SRQ its XRCETH names; no send queue.
    /// Created with `Device::create_xrc_target_qp`.
    XrcRecv,
    /// Reliable datagram (IBA 9.7, 10.2.7): a connectionless QP of a reliable datagram
    /// domain whose messages travel over end-to-end contexts (EECs) shared by every RD QP
    /// of the node; each send WR names its EEC, remote QP and Q_Key (`SendWr::rd`).
    /// Created with `Device::create_rd_qp`; libibverbs has no RD, so this is softib's own.
    Rd,
}

impl QpType {
    /// True for the services that run RC's reliability (RC and both XRC halves).
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// True for the XRC halves.
    pub const fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }

    /// True if this service's send queue carries `opcode` (IBA 9.2 Table 38's per-service
    /// opcodes, 9.8.2 for UC, 9.8.3 for UD; rxe's `rxe_wr_opcode_info`): RC carries every
    /// operation, an XRC initiator every one but ATOMIC WRITE (IBA 1.5 defines it on RC,
    /// rxe offers it there only), UC SENDs, WRITEs and the local operations, UD SENDs, RD
    /// SENDs, WRITEs, READs and the two atomics.
    /// An XRC target has no send queue (IBA Annex A14) and carries nothing.
    pub fn carries(self, opcode: WrOpcode) -> bool {
        match self {
            QpType::Rc => true,
            QpType::XrcSend => opcode != WrOpcode::AtomicWrite,
            QpType::XrcRecv => false,
            QpType::Uc => matches!(
                opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::BindMw
                    | WrOpcode::LocalInv
            ),
            QpType::Ud => matches!(opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            // IBA 9.7 / table 38: SEND, RDMA WRITE, RDMA READ and the two atomics (no
            // invalidate, no ATOMIC WRITE, no memory-window operations).
            QpType::Rd => matches!(
                opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::RdmaRead
                    | WrOpcode::AtomicCmpAndSwp
                    | WrOpcode::AtomicFetchAndAdd
            ),
        }
    }
}

/// An XRC domain (`ibv_xrcd`, IBA Annex A14): XRC SRQs and XRC target QPs of one domain
/// belong together; a request may only reach an SRQ of its target QP's domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct XrcdHandle(pub u32);

/// QP states (IBA 10.3.1, `ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Freshly created or reset: no queue is processed.
    Reset,
    /// Receive WRs may be posted; nothing is processed yet.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drain: no new send WR is started.
    Sqd,
    /// Send queue error (UC/UD only): the send queue stopped after a send error.
    Sqe,
    /// Error: every WR is flushed.
    Err,
}

impl QpState {
    /// The `IBV_QPS_*` spelling, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

impl core::fmt::Display for QpState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Path MTU (IBA 9.7.4.1.x; `ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256,
    /// 512 bytes.
    M512,
    /// 1024 bytes.
    M1024,
    /// 2048 bytes.
    M2048,
    /// 4096 bytes.
    M4096,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::M256 => 256,
            Mtu::M512 => 512,
            Mtu::M1024 => 1024,
            Mtu::M2048 => 2048,
            Mtu::M4096 => 4096,
        }
    }

    /// The MTU of exactly `bytes`, if it is one of the five IB sizes.
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::M256),
            512 => Some(Mtu::M512),
            1024 => Some(Mtu::M1024),
            2048 => Some(Mtu::M2048),
            4096 => Some(Mtu::M4096),
            _ => None,
        }
    }
}

/// Work completion status: the `ibv_wc_status` values that this engine can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The WR completed.
    Success,
    /// A receive buffer was too small, or a message too long (`IBV_WC_LOC_LEN_ERR`).
    LocLenErr,
    /// An internal QP consistency error (`IBV_WC_LOC_QP_OP_ERR`).
    LocQpOpErr,
    /// An SGE used an invalid lkey, left its region or lacked LOCAL_WRITE (`IBV_WC_LOC_PROT_ERR`).
    LocProtErr,
    /// The QP entered the error state before the WR completed (`IBV_WC_WR_FLUSH_ERR`).
    WrFlushErr,
    /// An unexpected response opcode or length (`IBV_WC_BAD_RESP_ERR`).
    BadRespErr,
    /// A protection error on an incoming RDMA / atomic at the responder (`IBV_WC_LOC_ACCESS_ERR`).
    LocAccessErr,
    /// The responder NAKed with "invalid request" (`IBV_WC_REM_INV_REQ_ERR`).
    RemInvReqErr,
    /// The responder NAKed with "remote access error" (`IBV_WC_REM_ACCESS_ERR`).
    RemAccessErr,
    /// The responder NAKed with "remote operational error" (`IBV_WC_REM_OP_ERR`).
    RemOpErr,
    /// retry_cnt exhausted (`IBV_WC_RETRY_EXC_ERR`).
    RetryExcErr,
    /// rnr_retry exhausted (`IBV_WC_RNR_RETRY_EXC_ERR`).
    RnrRetryExcErr,
    /// A memory window bind failed: window, region, range or rights (`IBV_WC_MW_BIND_ERR`,
    /// IBA 10.6.7.2.x).
    MwBindErr,
    /// Anything else (`IBV_WC_GENERAL_ERR`).
    GeneralErr,
    /// RD: the QP's and the EEC's reliable datagram domains differ (`IBV_WC_LOC_RDD_VIOL_ERR`,
    /// IBA 10.2.7).
    LocRddViolErr,
    /// RD: the responder NAKed with "invalid RD request": unknown destination QP, its
    /// domain or Q_Key does not match (`IBV_WC_REM_INV_RD_REQ_ERR`, IBA 9.7.5.2.x).
    RemInvRdReqErr,
    /// RD: the WR names no EE context (`IBV_WC_INV_EECN_ERR`).
    InvEecnErr,
    /// RD: the EE context is not in a state that sends (`IBV_WC_INV_EEC_STATE_ERR`).
    InvEecStateErr,
}

impl WcStatus {
    /// The text `ibv_wc_status_str` prints for this status.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::GeneralErr => "general error",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a completed WR did (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (any variant) completed at the requester.
    Send,
    /// An RDMA WRITE (with or without immediate) completed at the requester.
    RdmaWrite,
    /// An RDMA READ completed.
    RdmaRead,
    /// A compare-and-swap completed.
    CompSwap,
    /// A fetch-and-add completed.
    FetchAdd,
    /// An ATOMIC WRITE completed (`IBV_WC_ATOMIC_WRITE`, IBA 1.5).
    AtomicWrite,
    /// A receive WR consumed by an incoming SEND.
    Recv,
    /// A receive WR consumed by an incoming RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// A memory window bind (`IBV_WC_BIND_MW`).
    BindMw,
    /// A local invalidate (`IBV_WC_LOCAL_INV`).
    LocalInv,
}

bit_flags! {
    /// Extra facts about a completion (`ibv_wc_flags`).
    pub struct WcFlags(u32) {
        /// The first 40 bytes of the receive buffer hold a valid GRH (UD).
        const GRH = 1;
        /// `imm_data` is valid.
        const WITH_IMM = 2;
        /// `invalidated_rkey` is valid.
        const WITH_INV = 8;
        /// The sender set the solicited event bit (softib extension for event tests).
        const SOLICITED = 0x100;
    }
}

/// One work completion (`ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The user's id from the WR.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it did.
    pub opcode: WcOpcode,
    /// Bytes transferred (receives: bytes placed, including the 40-byte GRH area for UD).
    pub byte_len: u32,
    /// Immediate data, for SEND/WRITE with immediate.
    pub imm_data: Option<u32>,
    /// The R_Key a SEND_WITH_INV invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The local QP.
    pub qp_num: u32,
    /// The sending QP (UD receives; for RC/UC the connected peer).
    pub src_qp: u32,
    /// Source LID of the received packet (receives).
    pub slid: u16,
    /// Service level of the received packet (receives).
    pub sl: u8,
    /// GRH present, immediate present, ...
    pub wc_flags: WcFlags,
    /// Engine-specific detail for errors: a [`VendorErr`] value, 0 on success.
    pub vendor_err: u32,
}

/// softib's `vendor_err` codes: what exactly went wrong behind a coarse `WcStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum VendorErr {
    /// No detail.
    None = 0,
    /// The lkey of an SGE names no region.
    BadLkey = 1,
    /// An SGE leaves its region.
    SgeOutOfBounds = 2,
    /// The region lacks LOCAL_WRITE for a buffer the HCA writes.
    NoLocalWrite = 3,
    /// The region belongs to another protection domain.
    PdMismatch = 4,
    /// The receive buffer is smaller than the message.
    RecvBufferTooSmall = 5,
    /// A read response's length disagrees with the request.
    ReadResponseLength = 6,
    /// The QP entered ERR with this WR outstanding.
    Flushed = 7,
    /// A NAK from the responder.
    RemoteNak = 8,
    /// The local ACK timer expired retry_cnt+1 times.
    AckTimeout = 9,
    /// The responder answered RNR rnr_retry+1 times.
    RnrNak = 10,
    /// A local atomic buffer is not 8 bytes.
    AtomicBuffer = 11,
    /// A BIND_MW failed one of the bind rules ([`crate::memory::MwBindFault`]).
    MwBind = 12,
    /// A LOCAL_INV named no valid window or region, or one that cannot be invalidated.
    Invalidate = 13,
    /// The network refused a packet of this QP for good (the driver's
    /// [`crate::Device::transmit_refused`]: e.g. larger than the path MTU after the route or
    /// the interface MTU changed), so the connection cannot go on.
    TransmitRefused = 14,
    /// The WR's operation is one the QP's service does not carry (an atomic or an RDMA
    /// READ on UC, an RDMA operation on UD): accepted at post time as the kernel does, it
    /// fails when it reaches the head of the send queue ([`QpType::carries`]).
    OpcodeForService = 15,
}

bit_flags! {
    /// Send WR flags (`ibv_send_flags`).
    pub struct SendFlags(u32) {
        /// Wait for prior RDMA READs and atomics to complete before starting (IBA 10.8.3.3).
        const FENCE = 1;
        /// Generate a completion (always on when the QP has `sq_sig_all`).
        const SIGNALED = 2;
        /// Set the solicited event bit on the last packet.
        const SOLICITED = 4;
        /// Copy the data into the WR at post time; lkeys are not checked.
        const INLINE = 8;
    }
}

/// The operation of a send WR (`ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WrOpcode {
    /// SEND.
    #[default]
    Send,
    /// SEND with immediate data.
    SendWithImm,
    /// SEND that invalidates `invalidate_rkey` at the responder (RC only).
    SendWithInv,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA WRITE with immediate data (consumes a receive WR at the responder).
    RdmaWriteWithImm,
    /// RDMA READ (RC only).
    RdmaRead,
    /// 8-byte compare-and-swap (RC only).
    AtomicCmpAndSwp,
    /// 8-byte fetch-and-add (RC only).
    AtomicFetchAndAdd,
    /// 8-byte ATOMIC WRITE (RC only; IBA vol. 1 release 1.5, `IBV_WR_ATOMIC_WRITE`): the
    /// gather list's exactly 8 bytes are stored at `remote_addr` (8-byte aligned, an R_Key
    /// with REMOTE_WRITE) as one indivisible store, after every earlier request of the QP
    /// has been carried out at the responder. Like READs and atomics it takes a responder
    /// resource (max_rd_atomic) and completes on the responder's answer. The bytes are
    /// usually posted INLINE (libibverbs' `ibv_wr_atomic_write` copies them at the call);
    /// INLINE here is not bounded by `max_inline_data`, as the 8 bytes live in the WQE.
    AtomicWrite,
    /// Binds a memory window (RC and UC; a local operation, nothing goes on the wire;
    /// IBA 10.6.7.2). The details are in `SendWr::bind_mw`.
    BindMw,
    /// Invalidates `invalidate_rkey`, a type 2 window or a region, locally (RC and UC;
    /// IBA 10.6.7.2.5, 10.8.2.x "Local Invalidate").
    LocalInv,
}

impl WrOpcode {
    /// The `IBV_WR_*` spelling, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            WrOpcode::Send => "SEND",
            WrOpcode::SendWithImm => "SEND_WITH_IMM",
            WrOpcode::SendWithInv => "SEND_WITH_INV",
            WrOpcode::RdmaWrite => "RDMA_WRITE",
            WrOpcode::RdmaWriteWithImm => "RDMA_WRITE_WITH_IMM",
            WrOpcode::RdmaRead => "RDMA_READ",
            WrOpcode::AtomicCmpAndSwp => "ATOMIC_CMP_AND_SWP",
            WrOpcode::AtomicFetchAndAdd => "ATOMIC_FETCH_AND_ADD",
            WrOpcode::AtomicWrite => "ATOMIC_WRITE",
            WrOpcode::BindMw => "BIND_MW",
            WrOpcode::LocalInv => "LOCAL_INV",
        }
    }

    /// True for the operations that need responder resources (max_rd_atomic) and
    /// complete only on the responder's answer: READ, the atomics and ATOMIC WRITE.
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpAndSwp
                | WrOpcode::AtomicFetchAndAdd
                | WrOpcode::AtomicWrite
        )
    }

    /// True for the operations whose answer lands in the local buffers (READ and the
    /// AtomicETH atomics), which therefore need LOCAL_WRITE there.
    pub fn writes_local(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    /// True for the operations that run on the local HCA alone (BIND_MW, LOCAL_INV): they
    /// put nothing on the wire and take no PSN.
    pub fn is_local(self) -> bool {
        matches!(self, WrOpcode::BindMw | WrOpcode::LocalInv)
    }

    /// True for the atomics.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    /// The completion opcode.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
        }
    }
}

/// One scatter/gather element (`ibv_sge`): `length` bytes at virtual address `addr` of the
/// region `lkey` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Virtual address (in the region's iova space).
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// A reliable datagram domain (IBA 10.2.7): an RD QP may use an EEC only of its own
/// domain, and a responder delivers only to an RD QP of the EEC's domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RddHandle(pub u32);

/// Where an RD send goes (IBA 9.7.1, 10.8.3: an RD work request names the EE context, the
/// destination QP and its Q_Key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RdDest {
    /// The local EE context (its number, from `Device::create_eec`) that carries the message.
    pub eec: u32,
    /// Destination RD QP number at the far end of the EEC.
    pub remote_qpn: u32,
    /// Q_Key to send; if its high bit is set the QP's own Q_Key is used (IBA 10.2.5).
    pub remote_qkey: u32,
}

/// Where a UD send goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Address handle of the destination port.
    pub ah: AhHandle,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key to send; if its high bit is set the QP's own Q_Key is used (IBA 10.2.5).
    pub remote_qkey: u32,
}

/// A send work request (`ibv_send_wr`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Local buffers (read from for sends/writes, written for reads/atomics).
    pub sg_list: Vec<Sge>,
    /// SIGNALED, SOLICITED, FENCE, INLINE.
    pub flags: SendFlags,
    /// Immediate data for the *_WITH_IMM opcodes.
    pub imm_data: Option<u32>,
    /// R_Key to invalidate for SEND_WITH_INV.
    pub invalidate_rkey: u32,
    /// Remote virtual address for RDMA and atomics.
    pub remote_addr: u64,
    /// Remote key for RDMA and atomics.
    pub rkey: u32,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Destination for UD QPs.
    pub ud: Option<UdDest>,
    /// What a BIND_MW binds (required for `WrOpcode::BindMw`, ignored otherwise).
    pub bind_mw: Option<MwBind>,
    /// XRC initiator QPs: the number of the remote XRC SRQ the message goes to (the
    /// XRCETH's XRCSRQ, `qp_type.xrc.remote_srqn`; IBA Annex A14). Ignored otherwise.
    pub xrc_remote_srqn: u32,
    /// Destination for RD QPs (EEC, remote QP, Q_Key); required there, ignored otherwise.
    pub rd: Option<RdDest>,
}

/// The kind of a memory window (`ibv_mw_type`, IBA 10.6.7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound by the Bind Memory Window verb, valid for any QP of its PD.
    Type1,
    /// Type 2: bound by a BIND_MW work request; only the QP that bound it may use it.
    /// QPNs are never reused, so IBA's 2A (bound to a QP number) and 2B (bound to a QP)
    /// cannot be told apart here.
    Type2,
}

/// The arguments of a memory window bind (`ibv_mw_bind_info` plus the window's keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MwBind {
    /// The window's current R_Key (`ibv_mw::rkey`), which names the window.
    pub mw_rkey: u32,
    /// The R_Key after the bind: the window's index with a new 8-bit key part (type 2:
    /// the consumer's choice, `ibv_send_wr::bind_mw.rkey`; IBA 10.6.7.2.4).
    pub new_rkey: u32,
    /// The region the window lies in (`bind_info.mr->lkey`); ignored when `length` is 0.
    pub mr_lkey: u32,
    /// First byte of the window, a VA inside the region.
    pub addr: u64,
    /// Bytes; 0 unbinds a type 1 window (a type 2 window cannot be bound with 0).
    pub length: u64,
    /// REMOTE_READ / REMOTE_WRITE / REMOTE_ATOMIC, and ZERO_BASED (type 2 only).
    pub access: AccessFlags,
}

impl core::fmt::Display for WrOpcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where incoming SEND data goes, in order.
    pub sg_list: Vec<Sge>,
}

/// Global route of an address vector (`ibv_global_route`): the GRH fields (IBA 8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct GlobalRoute {
    /// Destination GID (for RoCEv2: the peer's IPv6 or IPv4-mapped address).
    pub dgid: [u8; 16],
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Index of the local GID.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / DSCP+ECN byte.
    pub traffic_class: u8,
}

/// Address vector (`ibv_ah_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AhAttr {
    /// Destination LID (native IB).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Low LID bits selecting among the local port's LIDs (LMC).
    pub src_path_bits: u8,
    /// GRH fields; required for RoCEv2 and routed IB.
    pub grh: Option<GlobalRoute>,
}

/// QP capacities (`ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        }
    }
}

/// QP creation attributes (`ibv_qp_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInitAttr {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// A shared receive queue instead of the QP's own.
    pub srq: Option<SrqHandle>,
    /// Queue capacities.
    pub cap: QpCap,
    /// Every send WR generates a completion, SIGNALED or not.
    pub sq_sig_all: bool,
}

/// Path migration state (`ibv_mig_state`); softib has no alternate path, so it stays MIGRATED.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MigState {
    /// No alternate path loaded (the only state softib supports).
    #[default]
    Migrated,
    /// Alternate path loaded, migration allowed.
    Rearm,
    /// Migration armed.
    Armed,
}

/// QP attributes (`ibv_qp_attr`): what `modify_qp` sets and `query_qp` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: QpState,
    /// The state the caller believes the QP is in (checked when CUR_STATE is set).
    pub cur_qp_state: QpState,
    /// Index into the device's P_Key table.
    pub pkey_index: u16,
    /// Physical port (always 1).
    pub port_num: u8,
    /// UD Q_Key.
    pub qkey: u32,
    /// Path MTU (RC/UC).
    pub path_mtu: Mtu,
    /// Connected peer QPN (RC/UC).
    pub dest_qp_num: u32,
    /// Expected PSN of the receive side.
    pub rq_psn: u32,
    /// First PSN of the send side.
    pub sq_psn: u32,
    /// Outstanding RDMA READ / atomic requests this QP may have as a requester.
    pub max_rd_atomic: u8,
    /// RDMA READ / atomic requests this QP accepts as a responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder advertises (IBA 9.7.5.2.8 table).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 us x 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retries (3 bits).
    pub retry_cnt: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry: u8,
    /// Address vector of the peer (RC/UC).
    pub ah_attr: AhAttr,
    /// What remote peers may do (REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC).
    pub qp_access_flags: AccessFlags,
    /// SQD: true while the send queue is still draining.
    pub sq_draining: bool,
    /// Raise `AsyncEvent::SqDrained` when SQD finishes draining.
    pub en_sqd_async_notify: bool,
    /// Path migration state.
    pub path_mig_state: MigState,
    /// Capacities (reported by `query_qp`).
    pub cap: QpCap,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            pkey_index: 0,
            port_num: 1,
            qkey: 0,
            path_mtu: Mtu::M1024,
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ah_attr: AhAttr::default(),
            qp_access_flags: AccessFlags::empty(),
            sq_draining: false,
            en_sqd_async_notify: false,
            path_mig_state: MigState::Migrated,
            cap: QpCap::default(),
        }
    }
}

bit_flags! {
    /// Which `QpAttr` fields a `modify_qp` call sets (`ibv_qp_attr_mask`, same bit values).
    pub struct QpAttrMask(u32) {
        /// qp_state
        const STATE = 1 << 0;
        /// cur_qp_state
        const CUR_STATE = 1 << 1;
        /// en_sqd_async_notify
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// qp_access_flags
        const ACCESS_FLAGS = 1 << 3;
        /// pkey_index
        const PKEY_INDEX = 1 << 4;
        /// port_num
        const PORT = 1 << 5;
        /// qkey
        const QKEY = 1 << 6;
        /// ah_attr
        const AV = 1 << 7;
        /// path_mtu
        const PATH_MTU = 1 << 8;
        /// timeout
        const TIMEOUT = 1 << 9;
        /// retry_cnt
        const RETRY_CNT = 1 << 10;
        /// rnr_retry
        const RNR_RETRY = 1 << 11;
        /// rq_psn
        const RQ_PSN = 1 << 12;
        /// max_rd_atomic
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// alt_ah_attr & co (not supported)
        const ALT_PATH = 1 << 14;
        /// min_rnr_timer
        const MIN_RNR_TIMER = 1 << 15;
        /// sq_psn
        const SQ_PSN = 1 << 16;
        /// max_dest_rd_atomic
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// path_mig_state
        const PATH_MIG_STATE = 1 << 18;
        /// cap (not modifiable)
        const CAP = 1 << 19;
        /// dest_qp_num
        const DEST_QPN = 1 << 20;
    }
}

/// SRQ attributes (`ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqAttr {
    /// Queue depth.
    pub max_wr: u32,
    /// SGEs per receive WR.
    pub max_sge: u32,
    /// When the number of posted WRs drops below this, `SrqLimitReached` fires (0 = disarmed).
    pub srq_limit: u32,
}
