//! `softib sim SCENARIO --serve`: the fabric, frozen at one simulated instant, served to the
//! stock management tools (infiniband-diags, later OpenSM) through ibsim's client protocol
//! ([`protocol`]): a tool run under `ibsim-run` (which preloads `libumad2sim.so`) attaches
//! to a node (`SIM_HOST`: a NodeDescription or a GUID), and its MADs are answered by the
//! node agents of `softib_fabric::agents` against the snapshot. Every exchange goes into the
//! MAD log ([`mad_log`]) that `--replay` checks. With an external SM the fabric is held at
//! time 0 until the SM is done, then run on its tables; a congestion control Set on a
//! fabric that has run runs it again with the new settings (`start_run`).
//!
//! Sockets ([`Transport`]): abstract Unix datagram sockets `<base>:ctl` and `<base>:out0` ..
//! `out9` (the base is `sim` unless the tools are given `IBSIM_SOCKNAME`), or UDP on
//! 127.0.0.1 ports P (control) and P+1 .. P+10 (the tools' `IBSIM_SERVER_NAME=127.0.0.1`,
//! `IBSIM_SERVER_PORT=P`); one thread per socket. A
//! malformed control message or request is dropped and counted; the server keeps running.

pub mod mad_log;
pub mod protocol;

use mad_log::{Entry, Exchange};
use protocol::{ClientInfo, Ctl, CtlType, Request, CTL_DATA_LEN, MAX_CLIENTS};
use softib_fabric::agents::delivery::lid_route;
use softib_fabric::agents::mad::Mad;
use softib_fabric::agents::{sma, Subnet, VENDOR_ID};
use softib_fabric::fabric::SubnetProgram;
use softib_fabric::topology::{NodeKind, PortAddr};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Abstract Unix datagram sockets named from this base (umad2sim's default, `sim`).
    Abstract(String),
    /// UDP on 127.0.0.1: control on this port, client slot i on port + i + 1.
    Udp(u16),
}

/// A bound datagram socket of either kind.
enum Sock {
    Unix(UnixDatagram),
    Udp(UdpSocket),
}

/// The address of a client's socket.
#[derive(Clone, Debug)]
enum Peer {
    Unix(SocketAddr),
    Udp(std::net::SocketAddr),
}

impl Sock {
    fn recv_from(&self, buf: &mut [u8]) -> std::io::Result<(usize, Peer)> {
        match self {
            Sock::Unix(s) => s.recv_from(buf).map(|(n, a)| (n, Peer::Unix(a))),
            Sock::Udp(s) => s.recv_from(buf).map(|(n, a)| (n, Peer::Udp(a))),
        }
    }

    fn send_to(&self, buf: &[u8], to: &Peer) -> std::io::Result<usize> {
        match (self, to) {
            (Sock::Unix(s), Peer::Unix(a)) => s.send_to_addr(buf, a),
            (Sock::Udp(s), Peer::Udp(a)) => s.send_to(buf, a),
            _ => Err(std::io::Error::other("address of the other transport")),
        }
    }
}
use std::sync::{Arc, Mutex};

/// A connected client: the tool's process and the port it is attached to.
#[derive(Clone, Debug)]
struct Client {
    at: PortAddr,
    /// The client's `in` socket, where its responses go.
    to: Peer,
}

/// What the server counts (printed at the end, and for tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServeCounters {
    /// Clients that connected.
    pub connects: u64,
    /// Connects refused (unknown node, no free slot).
    pub refused: u64,
    /// MADs answered.
    pub answered: u64,
    /// MADs that got no response, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Control messages or requests of the wrong size or magic, dropped.
    pub malformed: u64,
}

/// Runs the scenario with an external SM's tables and returns the snapshot at the serving
/// instant (see [`mad_log::RunWithSm`]).
pub type SmRun = Box<dyn FnMut(SubnetProgram) -> Result<Subnet, String> + Send>;

/// Where a fabric held for an external SM stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SmPhase {
    /// Held at time 0, waiting for every port to be Active and the SM to be done.
    Waiting,
    /// Every port Active: the scenario runs with the SM's tables (MADs are answered against
    /// the time-0 state meanwhile).
    Running,
    /// The run is done and its snapshot is served (or there is no external SM).
    Done,
}

struct State {
    subnet: Subnet,
    clients: [Option<Client>; MAX_CLIENTS],
    log: Option<Box<dyn Write + Send>>,
    counters: ServeCounters,
    transport: Transport,
    phase: SmPhase,
    run: Option<SmRun>,
    /// Wall-clock instant of the first MAD (for the bring-up's wall time; nothing simulated
    /// depends on it).
    first_mad: Option<std::time::Instant>,
    /// Wall-clock instant of the latest MAD, to tell when the SM has finished.
    last_mad: Option<std::time::Instant>,
    /// A watcher waits for the SM to finish ([`await_sm_done`]).
    watching: bool,
    /// A CC Set was taken during a run: run again when it is done.
    rerun_wanted: bool,
}

/// How long the SM must have sent nothing, once every port is Active, for its sweep to
/// count as done when it stays attached (a resident `opensm` between sweeps).
const SM_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

impl State {
    fn log(&mut self, e: &Entry) {
        if let Some(l) = &mut self.log {
            let _ = l.write_all(e.line().as_bytes()).and_then(|_| l.flush());
        }
    }
}

/// A server bound to its sockets, not yet serving.
pub struct Server {
    state: Arc<Mutex<State>>,
    ctl: Sock,
    outs: Vec<Sock>,
}

/// The abstract socket address umad2sim uses for `name`: its length counts the C string's
/// terminating NUL, so the NUL is part of the name.
fn abstract_addr(name: &str) -> std::io::Result<SocketAddr> {
    let mut b = name.as_bytes().to_vec();
    b.push(0);
    SocketAddr::from_abstract_name(&b)
}

impl Server {
    /// Binds the control socket and the ten client sockets of `transport`. `log` receives
    /// the MAD log (its header is written here, from `scenario`). With an external SM
    /// (`subnet.external_sm`), `run` runs the scenario once the SM has brought every port
    /// up, and its snapshot replaces the held one; on any fabric it runs the scenario again
    /// after a congestion control Set (`None`: Sets change the served state only).
    pub fn bind(
        subnet: Subnet,
        transport: &Transport,
        scenario: &str,
        mut log: Option<Box<dyn Write + Send>>,
        run: Option<SmRun>,
    ) -> std::io::Result<Server> {
        let bind = |what: &str, offset: u16| -> std::io::Result<Sock> {
            Ok(match transport {
                Transport::Abstract(base) => Sock::Unix(UnixDatagram::bind_addr(&abstract_addr(
                    &format!("{base}:{what}"),
                )?)?),
                Transport::Udp(port) => Sock::Udp(UdpSocket::bind((
                    Ipv4Addr::LOCALHOST,
                    port.checked_add(offset)
                        .ok_or_else(|| std::io::Error::other("UDP port out of range"))?,
                ))?),
            })
        };
        let ctl = bind("ctl", 0)?;
        let mut outs = Vec::with_capacity(MAX_CLIENTS);
        for i in 0..MAX_CLIENTS {
            outs.push(bind(&format!("out{i}"), i as u16 + 1)?);
        }
        if let Some(l) = &mut log {
            l.write_all(mad_log::header(scenario, subnet.at).as_bytes())?;
            l.flush()?;
        }
        let subnet_external = subnet.external_sm;
        Ok(Server {
            state: Arc::new(Mutex::new(State {
                subnet,
                clients: Default::default(),
                log,
                counters: ServeCounters::default(),
                transport: transport.clone(),
                phase: if subnet_external {
                    SmPhase::Waiting
                } else {
                    SmPhase::Done
                },
                run,
                first_mad: None,
                last_mad: None,
                watching: false,
                rerun_wanted: false,
            })),
            ctl,
            outs,
        })
    }

    /// A handle on the counters, to read while serving.
    pub fn counters(&self) -> impl Fn() -> ServeCounters {
        let s = self.state.clone();
        move || s.lock().expect("server state").counters.clone()
    }

    /// Serves until the process ends: one thread per client socket, the control socket on
    /// this one. Returns only on a socket error.
    pub fn serve(self) -> std::io::Result<()> {
        for (i, sock) in self.outs.into_iter().enumerate() {
            let state = self.state.clone();
            std::thread::spawn(move || serve_client(i, sock, state));
        }
        let mut buf = [0u8; 512];
        loop {
            let (n, from) = self.ctl.recv_from(&mut buf)?;
            let reply = {
                let mut st = self.state.lock().expect("server state");
                match Ctl::parse(&buf[..n]) {
                    None => {
                        count_malformed(&mut st.counters, "a malformed control message");
                        None
                    }
                    Some(c) => Some(control(&mut st, c, &from)),
                }
            };
            if let Some(r) = reply {
                // A client that vanished before the reply is no concern of the server's.
                let _ = self.ctl.send_to(&r.encode(), &from);
            }
        }
    }
}

/// Counts a malformed message and says so on stderr at the 1st, 2nd, 4th, 8th, ... one, so
/// a flood cannot drown the terminal.
fn count_malformed(c: &mut ServeCounters, what: &str) {
    c.malformed += 1;
    if c.malformed.is_power_of_two() {
        eprintln!(
            "softib sim --serve: dropped {what} ({} malformed so far)",
            c.malformed
        );
    }
}

/// Answers one control message.
fn control(st: &mut State, mut c: Ctl, from: &Peer) -> Ctl {
    let kind = CtlType::from_wire(c.kind);
    let slot = c.client as usize;
    let client = st.clients.get(slot).cloned().flatten();
    let ok = match (kind, client) {
        (Some(CtlType::Connect), _) => connect(st, &mut c, from),
        (Some(CtlType::Disconnect), _) => {
            if let Some(s) = st.clients.get_mut(slot) {
                *s = None;
            }
            true
        }
        (Some(CtlType::SetIsSm), Some(cl)) => {
            let on = i32::from_ne_bytes([c.data[0], c.data[1], c.data[2], c.data[3]]) != 0;
            st.subnet.set_is_sm(cl.at, on);
            let node = st.subnet.nodes[cl.at.node].name.clone();
            st.log(&Entry::IsSm {
                node,
                port: cl.at.port,
                on,
            });
            true
        }
        (Some(k), Some(cl)) => query(&mut st.subnet, &cl, k, &mut c.data),
        (_, _) => false,
    };
    if !ok {
        c.kind = CtlType::Error.wire();
    }
    c
}

fn connect(st: &mut State, c: &mut Ctl, from: &Peer) -> bool {
    let info = ClientInfo::parse(&c.data);
    let node = if info.node.is_empty() {
        st.subnet.default_node()
    } else {
        st.subnet.find_node(&info.node)
    };
    let Some(node) = node else {
        st.counters.refused += 1;
        let names: Vec<&str> = st
            .subnet
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .take(8)
            .collect();
        eprintln!(
            "softib sim --serve: client pid {} asked for node \"{}\", which is not in this fabric (nodes: {}{}); refused",
            info.id,
            info.node,
            names.join(", "),
            if st.subnet.nodes.len() > 8 { ", ..." } else { "" }
        );
        return false;
    };
    if st.clients.iter().all(Option::is_some) {
        reclaim_vanished(st);
    }
    let Some(slot) = st.clients.iter().position(Option::is_none) else {
        st.counters.refused += 1;
        eprintln!(
            "softib sim --serve: {MAX_CLIENTS} clients connected already; pid {} refused",
            info.id
        );
        return false;
    };
    let port = match st.subnet.nodes[node].kind {
        NodeKind::Switch => 0,
        NodeKind::Hca => 1,
    };
    // The client's `in` socket: `<base>:in<pid>`, or over UDP its port (the id it sent)
    // at the address its control message came from.
    let to = match (&st.transport, from) {
        (Transport::Abstract(base), _) => match abstract_addr(&format!("{base}:in{}", info.id)) {
            Ok(a) => Peer::Unix(a),
            Err(_) => return false,
        },
        (Transport::Udp(_), Peer::Udp(a)) => {
            Peer::Udp(std::net::SocketAddr::new(a.ip(), info.id as u16))
        }
        (Transport::Udp(_), Peer::Unix(_)) => return false,
    };
    st.clients[slot] = Some(Client {
        at: PortAddr { node, port },
        to,
    });
    st.counters.connects += 1;
    ClientInfo {
        id: slot as u32,
        node: st.subnet.nodes[node].name.clone(),
        ..info
    }
    .encode(&mut c.data);
    true
}

/// Frees the slots of clients whose `in` socket is gone (a tool killed before it could
/// disconnect): an abstract socket that nothing binds refuses a connect, which sends
/// nothing to a live client. UDP clients cannot be probed so; their slots free when a
/// response to them fails.
fn reclaim_vanished(st: &mut State) {
    for (slot, c) in st.clients.iter_mut().enumerate() {
        let gone = match c {
            Some(Client {
                to: Peer::Unix(a), ..
            }) => UnixDatagram::unbound()
                .and_then(|s| s.connect_addr(a))
                .is_err(),
            _ => false,
        };
        if gone {
            *c = None;
            eprintln!(
                "softib sim --serve: the client of slot {slot} is gone (its socket is closed); slot freed"
            );
        }
    }
}

/// A control query about the client's node: answered from the same agents as the MADs.
fn query(subnet: &mut Subnet, cl: &Client, k: CtlType, data: &mut [u8; CTL_DATA_LEN]) -> bool {
    let n = &subnet.nodes[cl.at.node];
    let pv = &n.ports[cl.at.port as usize];
    let lid = pv.lid;
    let state = if pv.link_up && (cl.at.port == 0 || pv.peer.is_some()) {
        pv.state
    } else {
        1
    };
    match k {
        CtlType::GetPort => {
            data.fill(0);
            data[0..2].copy_from_slice(&lid.to_ne_bytes());
            data[2] = state;
        }
        CtlType::GetVendor => {
            data.fill(0);
            data[0..4].copy_from_slice(&VENDOR_ID.to_ne_bytes());
            data[4..8].copy_from_slice(&0x5EF1u32.to_ne_bytes());
            data[16..24].copy_from_slice(&1u64.to_ne_bytes());
        }
        CtlType::GetGid => {
            data.fill(0);
            data[0..8].copy_from_slice(&0xFE80_0000_0000_0000u64.to_be_bytes());
            data[8..16].copy_from_slice(&subnet.node_guid(cl.at.node).to_be_bytes());
        }
        CtlType::GetGuid => {
            data.fill(0);
            data[0..8].copy_from_slice(&subnet.node_guid(cl.at.node).to_be_bytes());
        }
        CtlType::GetNodeInfo | CtlType::GetPortInfo => {
            let (attr, modifier) = if k == CtlType::GetNodeInfo {
                (sma::attr::NODE_INFO, 0)
            } else {
                let p = data[0];
                let p = if p == 0 || p as usize >= n.ports.len() {
                    cl.at.port
                } else {
                    p
                };
                (sma::attr::PORT_INFO, p as u32)
            };
            let mut m: Mad = [0; 256];
            m[0] = 1;
            m[1] = 0x01;
            m[2] = 1;
            m[3] = 0x01;
            m[16..18].copy_from_slice(&attr.to_be_bytes());
            m[20..24].copy_from_slice(&modifier.to_be_bytes());
            if sma::answer(subnet, cl.at.node, cl.at.port, &mut m) != 0 {
                return false;
            }
            data.copy_from_slice(&m[64..128]);
        }
        CtlType::SetIsSm => {}
        CtlType::GetPkeys => {
            data.fill(0);
            data[0..2].copy_from_slice(&sma::DEFAULT_PKEY.to_be_bytes());
        }
        CtlType::Error | CtlType::Connect | CtlType::Disconnect => return false,
    }
    true
}

/// Serves the MADs of client slot `slot`.
fn serve_client(slot: usize, sock: Sock, state: Arc<Mutex<State>>) {
    let mut buf = [0u8; 1024];
    loop {
        let Ok((n, _)) = sock.recv_from(&mut buf) else {
            // The socket itself failed: this slot stops serving, the others go on.
            return;
        };
        let mut st = state.lock().expect("server state");
        let Some(req) = Request::parse(&buf[..n]) else {
            count_malformed(
                &mut st.counters,
                &format!("a {n}-byte MAD request on out{slot}"),
            );
            continue;
        };
        let Some(cl) = st.clients[slot].clone() else {
            count_malformed(
                &mut st.counters,
                &format!("a MAD on out{slot}, which no client holds"),
            );
            continue;
        };
        st.first_mad.get_or_insert_with(std::time::Instant::now);
        st.last_mad = Some(std::time::Instant::now());
        let sender_lid = st.subnet.nodes[cl.at.node].ports[cl.at.port as usize].lid;
        let result = mad_log::answer(&mut st.subnet, cl.at, req.dlid, &req.mad);
        let target_lid = match lid_route(&st.subnet, cl.at, req.dlid) {
            Some(_) => req.dlid,
            None => 0xffff,
        };
        let rerun = match &result {
            Ok(m) => rerun_after_cc_set(&mut st, &req.mad, m),
            Err(_) => false,
        };
        let reply = match &result {
            Ok(m) => {
                st.counters.answered += 1;
                Some(req.reply(sender_lid, target_lid, Some(m)))
            }
            Err(d) => {
                *st.counters.dropped.entry(d.to_string()).or_default() += 1;
                if let softib_fabric::agents::delivery::Dropped::Malformed(why) = d {
                    count_malformed(&mut st.counters, &format!("a malformed MAD ({why})"));
                }
                // A response or trap repress needs nothing back; anything else gets the
                // timeout status at once, as ibsim does for a MAD lost on the way.
                (*d != softib_fabric::agents::delivery::Dropped::Response)
                    .then(|| req.reply(sender_lid, target_lid, None))
            }
        };
        let entry = Exchange {
            node: st.subnet.nodes[cl.at.node].name.clone(),
            port: cl.at.port,
            dlid: req.dlid,
            request: req.mad,
            response: result.map_err(|d| d.to_string().replace(char::is_whitespace, "_")),
        };
        st.log(&Entry::Exchange(Box::new(entry)));
        let brought_up = st.phase == SmPhase::Waiting && !st.watching && st.subnet.all_active();
        if brought_up {
            st.watching = true;
        }
        drop(st);
        if let Some(r) = reply {
            if let Err(e) = sock.send_to(&r.encode(), &cl.to) {
                // The client vanished without a DISCONNECT: its slot is free again.
                let mut st = state.lock().expect("server state");
                if st.clients[slot].as_ref().is_some_and(|c| c.at == cl.at) {
                    st.clients[slot] = None;
                }
                eprintln!(
                    "softib sim --serve: the client of slot {slot} is gone ({e}); slot freed"
                );
            }
        }
        if brought_up {
            let state = state.clone();
            std::thread::spawn(move || await_sm_done(&state));
        }
        if rerun {
            start_run(&state);
        }
    }
}

/// Every port is Active, but the SM has not finished: OpenSM configures congestion control
/// (A10) only after the ports are up, and those settings must reach the data plane. The
/// run starts once the SM is done: it withdrew (`opensm -o` clears IsSM as it exits) or it
/// sent nothing for [`SM_SETTLE`]. Where that happened is in the MAD log (`# sm-up`), so
/// the replay takes the same tables whatever the wall clock did.
fn await_sm_done(state: &Arc<Mutex<State>>) {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let st = state.lock().expect("server state");
        if st.phase != SmPhase::Waiting {
            return;
        }
        let withdrew = !st
            .subnet
            .nodes
            .iter()
            .any(|n| n.ports.iter().any(|p| p.is_sm));
        let quiet = st.last_mad.is_none_or(|t| t.elapsed() >= SM_SETTLE);
        if st.subnet.all_active() && (withdrew || quiet) {
            drop(st);
            start_run(state);
            return;
        }
    }
}

/// Every port is Active and the SM is done (or, on a served fabric, a congestion control
/// Set changed what the switches and CAs run: [`rerun_after_cc_set`]): takes the SM's
/// tables and the nodes' CC settings and runs the scenario with them on a thread of its
/// own, so further MADs are answered meanwhile (against the state before the run); the
/// run's snapshot, with whatever was configured since, then replaces it.
fn start_run(state: &Arc<Mutex<State>>) {
    let (program, run, wall) = {
        let mut st = state.lock().expect("server state");
        let first = match st.phase {
            SmPhase::Waiting => true,
            SmPhase::Done if st.run.is_some() => false,
            _ => return,
        };
        st.phase = SmPhase::Running;
        st.rerun_wanted = false;
        st.log(&Entry::SmUp);
        let wall = st.first_mad.map(|t| t.elapsed()).unwrap_or_default();
        let mads = st.counters.answered;
        if first {
            eprintln!(
                "softib sim --serve: the subnet manager brought every port up ({mads} MADs, {:.3} s wall); running the scenario with its tables",
                wall.as_secs_f64()
            );
        } else {
            eprintln!(
                "softib sim --serve: congestion control changed by a Set; running the scenario again with the new settings"
            );
        }
        (st.subnet.program(), st.run.take(), wall)
    };
    let Some(mut run) = run else {
        eprintln!(
            "softib sim --serve: no run for the external SM's tables; serving the held fabric"
        );
        state.lock().expect("server state").phase = SmPhase::Done;
        return;
    };
    let state = state.clone();
    std::thread::spawn(move || {
        let began = std::time::Instant::now();
        let result = run(program);
        let mut st = state.lock().expect("server state");
        st.phase = SmPhase::Done;
        st.run = Some(run);
        match result {
            Ok(mut ran) => {
                ran.keep_configuration(&st.subnet);
                let at = ran.at;
                st.subnet = ran;
                st.log(&Entry::Ran { at_ps: at });
                eprintln!(
                    "softib sim --serve: ran to {} us in {:.3} s wall ({:.3} s after the first MAD); serving the fabric frozen there",
                    at as f64 / 1e6,
                    began.elapsed().as_secs_f64(),
                    (wall + began.elapsed()).as_secs_f64()
                );
            }
            Err(why) => eprintln!(
                "softib sim --serve: the run with the SM's tables failed: {why}; serving the fabric as the SM left it"
            ),
        }
        // CC Sets answered during the run are not in it: run again with them.
        let again = st.rerun_wanted;
        drop(st);
        if again {
            start_run(&state);
        }
    });
}

/// A congestion control Set was taken (`request`, answered `response`). Once the fabric
/// has run (frozen after its run, or after an external SM's), the run it is frozen after no
/// longer matches the switches' marking and the CAs' CCA: it is run again from time 0
/// with the new settings and the same tables, so `ibccconfig` changes what the counters
/// then show. A Set during a run is taken by the next one. Held for an external SM, the
/// settings go into the first run instead.
fn rerun_after_cc_set(st: &mut State, request: &Mad, response: &Mad) -> bool {
    use softib_fabric::agents::{cca, mad};
    let set = request[1] == cca::CLASS_CONGESTION_CONTROL
        && request[3] & 0x7f == mad::method::SET
        && response[4..6] == [0, 0];
    match (set, st.phase) {
        (true, SmPhase::Done) => st.run.is_some(),
        (true, SmPhase::Running) => {
            st.rerun_wanted = true;
            false
        }
        _ => false,
    }
}
