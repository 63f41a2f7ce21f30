//! The TCP connection that carries an out-of-band exchange, with a deadline on every step.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::endpoint::Endpoint;
use super::OobError;

/// Which side of the exchange this is. The client writes first in every symmetric step,
/// the server reads first (perftest `ctx_xchg_data`, ibv_rc_pingpong).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Connected to a named host.
    Client,
    /// Accepted the connection.
    Server,
}

/// A connected exchange stream.
#[derive(Debug)]
pub struct OobStream {
    stream: TcpStream,
    role: Role,
    timeout: Duration,
    peer: SocketAddr,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OobError {
    let what = what.into();
    move |source| OobError::Io { what, source }
}

impl OobStream {
    /// Connects to `host:port` (every address it resolves to, in turn), waiting at most
    /// `timeout` for each attempt and for every later step.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<OobStream, OobError> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(io_err(format!("resolve {host}")))?
            .collect();
        let mut last = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, timeout) {
                Ok(stream) => return OobStream::from_stream(stream, Role::Client, timeout),
                Err(e) => last = Some((addr, e)),
            }
        }
        match last {
            Some((_, e))
                if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock =>
            {
                Err(OobError::Timeout {
                    what: "connect to the exchange port",
                    seconds: timeout.as_secs_f64(),
                })
            }
            Some((addr, e)) => Err(OobError::Io {
                what: format!("connect to {addr} (is the server running?)"),
                source: e,
            }),
            None => Err(OobError::Io {
                what: format!("resolve {host}"),
                source: std::io::Error::new(ErrorKind::NotFound, "no addresses"),
            }),
        }
    }

    /// Waits at most `timeout` for one client on `listener`, then uses `timeout` for every
    /// later step.
    pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<OobStream, OobError> {
        listener
            .set_nonblocking(true)
            .map_err(io_err("make listener non-blocking"))?;
        let deadline = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream
                        .set_nonblocking(false)
                        .map_err(io_err("make connection blocking"))?;
                    return OobStream::from_stream(stream, Role::Server, timeout);
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    if Instant::now() >= deadline {
                        return Err(OobError::Timeout {
                            what: "accept a client",
                            seconds: timeout.as_secs_f64(),
                        });
                    }
                    // Accepting is once per run: a short sleep costs nothing that matters.
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    return Err(OobError::Io {
                        what: "accept".into(),
                        source: e,
                    })
                }
            }
        }
    }

    /// Wraps an already connected stream.
    pub fn from_stream(
        stream: TcpStream,
        role: Role,
        timeout: Duration,
    ) -> Result<OobStream, OobError> {
        let peer = stream.peer_addr().map_err(io_err("getpeername"))?;
        let _ = stream.set_nodelay(true);
        Ok(OobStream {
            stream,
            role,
            timeout,
            peer,
        })
    }

    /// The peer's address (the client's, seen from a server; for a default RoCE setup
    /// also where its device listens).
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Our address on the connection (the address a peer reaches this host on, which is
    /// where a tool opens its device by default).
    pub fn local_addr(&self) -> Result<SocketAddr, OobError> {
        self.stream.local_addr().map_err(io_err("getsockname"))
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether the peer has sent something we have not read yet, without waiting or
    /// consuming it: `Ok(true)` if bytes are waiting, `Ok(false)` if not, and
    /// [`OobError::Closed`] if the peer closed the connection. Tools poll this while RDMA
    /// traffic runs, to notice a peer that finished or vanished.
    pub fn poll_peer(&self, what: &'static str) -> Result<bool, OobError> {
        self.stream
            .set_nonblocking(true)
            .map_err(io_err("make connection non-blocking"))?;
        let mut b = [0u8; 1];
        let r = self.stream.peek(&mut b);
        self.stream
            .set_nonblocking(false)
            .map_err(io_err("make connection blocking"))?;
        match r {
            Ok(0) => Err(OobError::Closed {
                what,
                got: 0,
                expected: 1,
            }),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Ok(false)
            }
            Err(e) => Err(OobError::Io {
                what: format!("check the connection while waiting to {what}"),
                source: e,
            }),
        }
    }

    /// Writes all of `msg` before the deadline.
    pub fn write_msg(&mut self, what: &'static str, msg: &[u8]) -> Result<(), OobError> {
        self.stream
            .set_write_timeout(Some(self.timeout))
            .map_err(io_err("set write timeout"))?;
        match self.stream.write_all(msg) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                Err(OobError::Timeout {
                    what,
                    seconds: self.timeout.as_secs_f64(),
                })
            }
            Err(e) => Err(OobError::Io {
                what: format!("send {what}"),
                source: e,
            }),
        }
    }

    /// Reads exactly `buf.len()` bytes before the deadline.
    pub fn read_msg(&mut self, what: &'static str, buf: &mut [u8]) -> Result<(), OobError> {
        let deadline = Instant::now() + self.timeout;
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(OobError::Timeout {
                    what,
                    seconds: self.timeout.as_secs_f64(),
                });
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(io_err("set read timeout"))?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(OobError::Closed {
                        what,
                        got,
                        expected: buf.len(),
                    })
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {}
                Err(e) => {
                    return Err(OobError::Io {
                        what: format!("receive {what}"),
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }

    /// One symmetric step: send `mine`, receive the peer's message of `theirs.len()` bytes,
    /// in the order the role demands (client writes first).
    pub fn exchange(
        &mut self,
        what: &'static str,
        mine: &[u8],
        theirs: &mut [u8],
    ) -> Result<(), OobError> {
        match self.role {
            Role::Client => {
                self.write_msg(what, mine)?;
                self.read_msg(what, theirs)
            }
            Role::Server => {
                self.read_msg(what, theirs)?;
                self.write_msg(what, mine)
            }
        }
    }

    /// Exchanges softib [`Endpoint`]s (length-prefixed JSON; client first).
    pub fn exchange_endpoint(&mut self, mine: &Endpoint) -> Result<Endpoint, OobError> {
        let msg = mine.to_message();
        if self.role == Role::Client {
            self.write_msg("send endpoint", &msg)?;
        }
        let mut prefix = [0u8; 4];
        self.read_msg("receive endpoint length", &mut prefix)?;
        let mut body = vec![0u8; Endpoint::body_len(prefix)?];
        self.read_msg("receive endpoint", &mut body)?;
        let theirs = Endpoint::from_json(&body)?;
        if self.role == Role::Server {
            self.write_msg("send endpoint", &msg)?;
        }
        Ok(theirs)
    }
}
