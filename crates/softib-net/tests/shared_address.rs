//! Several processes on one device address (docs/design/net.md, "Several processes on one
//! address"), as on a kernel device every process of a host shares: RC traffic both ways
//! between two processes on one address, a CM connection between them, the port owner
//! leaving while the others keep working, and datagrams for a slot nobody holds dropped and
//! counted.
//!
//! The other process is this same test binary re-run with `--ignored --exact
//! member_process`, told its role by an environment variable.

mod common;

use std::io::{BufRead, BufReader, Lines};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::{pattern, side, unique_loopback, Side};
use softib_net::driver::NetConfig;
use softib_net::oob::stream::OobStream;
use softib_net::verbs::{CmConnection, CmListener, Hca, RecvRequest, SendRequest};
use softib_transport::harness::empty_wc;
use softib_transport::{QpType, RecvWr, SendFlags, SendWr, Sge, WcStatus, WrOpcode};

const ROLE: &str = "SOFTIB_NET_SHARED_ADDRESS_ROLE";
const KIB: usize = 1 << 10;
const T: Duration = Duration::from_secs(30);
const WRITE_LEN: usize = 256 * KIB;
const SEND_LEN: usize = 4000;

fn sge(s: &Side, offset: usize, len: usize) -> Vec<Sge> {
    vec![Sge {
        addr: s.mr.addr + offset as u64,
        length: len as u32,
        lkey: s.mr.keys.lkey,
    }]
}

/// One side of the RC exchange: receive at 1 MiB, RDMA WRITE `WRITE_LEN` bytes of
/// `pattern(own)` to the peer's offset 0 and SEND the first `SEND_LEN` of them; then check
/// that the peer's bytes (`pattern(peer)`) arrived in both places.
fn rc_exchange(s: &Side, oob: &mut OobStream, own: u64, peer: u64) -> Result<(), String> {
    let remote = oob
        .exchange_endpoint(&s.endpoint())
        .map_err(|e| e.to_string())?;
    s.connect(QpType::Rc, &remote);
    s.ctx
        .post_recv(
            s.qpn,
            &[RecvWr {
                wr_id: 9,
                sg_list: sge(s, 1 << 20, SEND_LEN),
            }],
        )
        .map_err(|e| e.to_string())?;
    // Both receives are posted before either side sends.
    oob.write_msg("ready", b"ready")
        .map_err(|e| e.to_string())?;
    let mut ready = [0u8; 5];
    oob.read_msg("ready", &mut ready)
        .map_err(|e| e.to_string())?;
    let data = pattern(own, WRITE_LEN);
    s.ctx
        .write_mr(&s.mr, 2 << 20, &data)
        .map_err(|e| e.to_string())?;
    let write = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: sge(s, 2 << 20, WRITE_LEN),
        remote_addr: remote.regions[0].addr,
        rkey: remote.regions[0].rkey,
        ..Default::default()
    };
    let send = SendWr {
        wr_id: 2,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: sge(s, 2 << 20, SEND_LEN),
        ..Default::default()
    };
    s.ctx
        .post_send(s.qpn, &[write, send])
        .map_err(|e| e.to_string())?;
    let wcs = s.completions(3, 30);
    let recv = wcs
        .iter()
        .find(|w| w.wr_id == 9)
        .ok_or("no receive completion")?;
    if recv.byte_len as usize != SEND_LEN {
        return Err(format!("SEND carried {} bytes", recv.byte_len));
    }
    let expected = pattern(peer, WRITE_LEN);
    if s.read(0, WRITE_LEN) != expected {
        return Err("the peer's RDMA WRITE bytes differ".into());
    }
    if s.read(1 << 20, SEND_LEN) != expected[..SEND_LEN] {
        return Err("the peer's SEND bytes differ".into());
    }
    Ok(())
}

fn side_on(addr: &str, seed: u64) -> Side {
    side(addr, QpType::Rc, 4 << 20, |c| c.seed = seed)
}

/// The other process: its role and the shared address come from [`ROLE`].
#[test]
#[ignore = "the other process of the shared_address tests, run by them"]
fn member_process() {
    let role = std::env::var(ROLE).expect("run by the shared_address tests, not alone");
    let (what, addr) = role.split_once(' ').unwrap();
    match what {
        "rc" => {
            let s = side_on(addr, 0x1111);
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            println!("LISTEN {}", listener.local_addr().unwrap().port());
            let mut oob = OobStream::accept(&listener, T).unwrap();
            let verdict = match rc_exchange(&s, &mut oob, 42, 41) {
                Ok(()) => "ok".to_string(),
                Err(e) => e,
            };
            let mut msg = [0u8; 64];
            let n = verdict.len().min(64);
            msg[..n].copy_from_slice(&verdict.as_bytes()[..n]);
            oob.write_msg("verdict", &msg).unwrap();
            let mut done = [0u8; 4];
            oob.read_msg("done", &mut done).unwrap();
        }
        "cm" => {
            let mut c = NetConfig::new(addr.parse().unwrap());
            c.seed = 0x2222;
            let hca = Hca::open(c).unwrap();
            let pd = hca.alloc_pd();
            let cq = hca.create_cq().set_entries(64).build().unwrap();
            let listener = CmListener::bind(&hca, 18600).unwrap();
            println!("READY");
            let request = listener.get_request(T).unwrap();
            assert_eq!(&request.private_data()[..5], b"hello");
            let buf = pd.register(vec![0u8; 4096]).unwrap();
            let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
            let mut conn = request
                .accept_with(qp, b"welcome", T, |qp| {
                    qp.post_recv(&[RecvRequest::new(7, buf.slice(0..4096))])
                })
                .unwrap();
            let mut wcs = [empty_wc(); 1];
            let got = cq.wait(&mut wcs, T);
            assert_eq!(got.len(), 1, "the client's SEND");
            assert_eq!(got[0].status, WcStatus::Success);
            let n = got[0].byte_len as usize;
            let msg = buf.read()[..n].to_vec();
            assert_eq!(msg, pattern(5, 3000));
            // Answer with the bytes reversed, so the check is not an echo.
            let reply: Vec<u8> = msg.iter().rev().copied().collect();
            buf.write()[..n].copy_from_slice(&reply);
            conn.qp()
                .post_send(&[SendRequest::send(8, buf.slice(0..n))])
                .unwrap();
            let got = cq.wait(&mut wcs, T);
            assert_eq!((got.len(), got[0].status), (1, WcStatus::Success));
            let bye = conn.wait_disconnected(T).unwrap();
            assert_eq!(&bye[..3], b"bye");
            println!("VERDICT ok");
        }
        "owner" => {
            // Holds the port until its stdin closes (or the test kills it).
            let s = side_on(addr, 0x3333);
            let (_, drv) = s.ctx.counters();
            println!("OWNER {}", drv.group.takeovers);
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn_member(role: &str, addr: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "member_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ROLE, format!("{role} {addr}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The rest of the first line of the child's output containing `tag`.
fn wait_line(lines: &mut Lines<BufReader<ChildStdout>>, tag: &str) -> String {
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the other process ended before printing {tag}"))
            .unwrap();
        // libtest prints "test member_process ... " on the same line first.
        if let Some(i) = line.find(tag) {
            return line[i + tag.len()..].trim().to_string();
        }
    }
}

#[test]
fn two_processes_on_one_address_exchange_rc_traffic_both_ways() {
    let addr = unique_loopback(1, 0x3a);
    let (mut child, mut lines) = spawn_member("rc", &addr);
    let port: u16 = wait_line(&mut lines, "LISTEN ").parse().unwrap();
    // The child opened the device first, so it owns the port; this one shares it.
    let s = side_on(&addr, 0x4444);
    assert_eq!(s.ctx.local_addr().to_string(), addr);
    let mut oob = OobStream::connect("127.0.0.1", port, T).unwrap();
    rc_exchange(&s, &mut oob, 41, 42).unwrap();
    let mut verdict = [0u8; 64];
    oob.read_msg("verdict", &mut verdict).unwrap();
    oob.write_msg("done", b"done").unwrap();
    let verdict = String::from_utf8_lossy(&verdict)
        .trim_end_matches('\0')
        .to_string();
    assert_eq!(verdict, "ok", "the other process");
    assert!(child.wait().unwrap().success(), "the other process failed");
    let (dev, drv) = s.ctx.counters();
    // Everything this process received came through the owner.
    assert!(
        drv.group.received >= (WRITE_LEN / 4096) as u64,
        "{:?}",
        drv.group
    );
    assert_eq!(drv.group.bad_header_drops, 0);
    assert_eq!(dev.foreign_source_drops, 0);
}

#[test]
fn a_cm_connection_between_two_processes_on_one_address() {
    let addr = unique_loopback(2, 0x3b);
    let (mut child, mut lines) = spawn_member("cm", &addr);
    wait_line(&mut lines, "READY");
    let mut c = NetConfig::new(addr.parse().unwrap());
    c.seed = 0x5555;
    let hca = Hca::open(c).unwrap();
    let pd = hca.alloc_pd();
    let cq = hca.create_cq().set_entries(64).build().unwrap();
    let buf = pd.register(vec![0u8; 8192]).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let server: SocketAddr = SocketAddr::new(hca.context().local_addr().ip(), 18600);
    let mut conn = CmConnection::connect(qp, server, b"hello", T)
        .unwrap_or_else(|e| panic!("connect to the other process: {e}"));
    assert_eq!(&conn.peer_private_data()[..7], b"welcome");
    conn.qp()
        .post_recv(&[RecvRequest::new(3, buf.slice(4096..8192))])
        .unwrap();
    let msg = pattern(5, 3000);
    buf.write()[..3000].copy_from_slice(&msg);
    conn.qp()
        .post_send(&[SendRequest::send(1, buf.slice(0..3000))])
        .unwrap();
    let mut wcs = [empty_wc(); 2];
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while got.len() < 2 && Instant::now() < deadline {
        got.extend_from_slice(cq.wait(&mut wcs, Duration::from_secs(1)));
    }
    assert_eq!(got.len(), 2, "send and reply completions: {got:?}");
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    let reversed: Vec<u8> = msg.iter().rev().copied().collect();
    assert_eq!(&buf.read()[4096..4096 + 3000], &reversed[..]);
    conn.disconnect(b"bye", T).unwrap();
    assert_eq!(wait_line(&mut lines, "VERDICT "), "ok");
    assert!(child.wait().unwrap().success(), "the other process failed");
    let (cm, _) = hca.context().cm_counters();
    assert_eq!((cm.malformed_drops, cm.stale_drops), (0, 0));
}

/// RC traffic both ways between two devices of this process on the shared address.
fn exchange_in_process(a: &Side, b: &Side, seed: u64) {
    let data_a = pattern(seed, 64 * KIB);
    let data_b = pattern(seed + 1, 64 * KIB);
    a.ctx.write_mr(&a.mr, 2 << 20, &data_a).unwrap();
    b.ctx.write_mr(&b.mr, 2 << 20, &data_b).unwrap();
    for (from, to) in [(a, b), (b, a)] {
        let write = SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite,
            flags: SendFlags::SIGNALED,
            sg_list: sge(from, 2 << 20, 64 * KIB),
            remote_addr: to.mr.addr,
            rkey: to.mr.keys.rkey,
            ..Default::default()
        };
        from.ctx.post_send(from.qpn, &[write]).unwrap();
    }
    a.completions(1, 30);
    b.completions(1, 30);
    assert_eq!(b.read(0, 64 * KIB), data_a);
    assert_eq!(a.read(0, 64 * KIB), data_b);
}

#[test]
fn the_others_keep_working_when_the_port_owner_and_a_member_exit() {
    let addr = unique_loopback(3, 0x3c);
    let (mut owner, mut lines) = spawn_member("owner", &addr);
    assert_eq!(wait_line(&mut lines, "OWNER "), "0");
    // A member that exits first: the others keep working.
    let gone = side_on(&addr, 0x6666);
    let a = side_on(&addr, 0x7777);
    let b = side_on(&addr, 0x8888);
    a.connect(QpType::Rc, &b.endpoint());
    b.connect(QpType::Rc, &a.endpoint());
    drop(gone);
    exchange_in_process(&a, &b, 61);
    // The owner exits: one of the two takes the port over and both keep working.
    owner.kill().unwrap();
    owner.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let takeovers = || a.ctx.counters().1.group.takeovers + b.ctx.counters().1.group.takeovers;
    while takeovers() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(takeovers(), 1, "exactly one survivor owns the port");
    exchange_in_process(&a, &b, 71);
    // A process that joins now shares the address with the new owner.
    let c = side_on(&addr, 0x9999);
    c.connect(QpType::Rc, &a.endpoint());
    let fresh = side_on(&addr, 0xaaaa);
    drop(fresh);
    let (_, drv) = c.ctx.counters();
    assert_eq!(drv.group.takeovers, 0);
}

#[test]
fn a_datagram_for_a_slot_no_process_holds_is_dropped_and_counted() {
    let addr = unique_loopback(4, 0x3d);
    let s = side_on(&addr, 0xbbbb);
    let member = side_on(&addr, 0xcccc);
    let dest: SocketAddr = addr.parse().unwrap();
    let stranger = UdpSocket::bind(SocketAddr::new(dest.ip(), 0)).unwrap();
    // A BTH whose DestQP carries slot 40 (no process holds it): the QPN offset's top six
    // bits (group.rs), above FIRST_QPN.
    let mut datagram = vec![0u8; 64];
    datagram[0] = 0x04; // RC SEND_ONLY
    let qpn = softib_transport::FIRST_QPN + (40 << 16) + 5;
    datagram[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    for _ in 0..3 {
        stranger.send_to(&datagram, dest).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.ctx.counters().1.group.unowned_drops < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // The owner's own receive path drops them under their cause: the stranger's bytes
    // carry no valid ICRC.
    let (dev, owner) = s.ctx.counters();
    assert_eq!(owner.group.unowned_drops, 3, "{:?}", owner.group);
    assert_eq!(owner.group.forwarded, 0);
    assert_eq!(dev.icrc_drops, 3, "{dev:?}");
    // A datagram for the member's slot is forwarded to it (and dropped there by its own
    // checks: the stranger's bytes carry no valid ICRC).
    let member_qpn = member.qpn;
    datagram[5..8].copy_from_slice(&member_qpn.to_be_bytes()[1..]);
    stranger.send_to(&datagram, dest).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while member.ctx.counters().1.group.received < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (dev, drv) = member.ctx.counters();
    assert_eq!(drv.group.received, 1);
    assert_eq!(dev.icrc_drops, 1, "{dev:?}");
    assert_eq!(s.ctx.counters().1.group.forwarded, 1);
}

#[test]
fn a_stranger_cannot_write_into_a_members_slot_socket() {
    let addr = unique_loopback(5, 0x3e);
    let _owner = side_on(&addr, 0xdddd);
    let _member = side_on(&addr, 0xeeee);
    use std::os::linux::net::SocketAddrExt;
    let name =
        std::os::unix::net::SocketAddr::from_abstract_name(format!("softib/{addr}/1")).unwrap();
    let stranger = std::os::unix::net::UnixDatagram::unbound().unwrap();
    // The slot socket is connected to the owner's forwarding socket: the kernel refuses
    // every other sender (EPERM).
    let err = stranger.send_to_addr(b"hostile", &name).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
}

#[test]
fn a_service_id_another_process_listens_on_is_refused_until_it_stops() {
    let addr = unique_loopback(6, 0x3f);
    let a = side_on(&addr, 0x1212);
    let b = side_on(&addr, 0x3434);
    let sid = 0x0000_0106_0000_4a38;
    let listener = a.ctx.cm_listen(sid).unwrap();
    match b.ctx.cm_listen(sid) {
        Err(softib_cm::CmError::ServiceIdInUse(s)) => assert_eq!(s, sid),
        other => panic!("expected ServiceIdInUse, got {other:?}"),
    }
    assert_eq!(b.ctx.counters().1.group.service_conflicts, 1);
    a.ctx.with_cm(|cm, _| cm.stop_listening(listener)).unwrap();
    // The claim goes with the listener, at the next turn of a's driver.
    a.ctx.with_engine(|_, _| ());
    b.ctx.cm_listen(sid).unwrap();
}

#[test]
fn a_port_held_by_something_else_than_softib_is_not_shared() {
    let addr: SocketAddr = unique_loopback(7, 0x40).parse().unwrap();
    // A plain UDP socket on the port (as the kernel's rdma_rxe holds 4791): no softib owner
    // would ever forward, so the device must refuse to open.
    let _other = UdpSocket::bind(addr).unwrap();
    let err = softib_net::context::Context::open(
        NetConfig::new(addr),
        softib_net::context::WaitMode::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
}
