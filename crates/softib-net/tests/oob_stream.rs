//! The TCP exchange on loopback: round trips, and every failure a user can meet (refused
//! port, silent peer, peer vanishing mid-message, garbage) ends in a clear error quickly.

use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

use softib_net::oob::endpoint::{Endpoint, RemoteRegion};
use softib_net::oob::pingpong::PingpongDest;
use softib_net::oob::stream::{OobStream, Role};
use softib_net::oob::OobError;

const T: Duration = Duration::from_millis(400);

fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

#[test]
fn pingpong_exchange_runs_client_first_and_both_sides_get_the_other() {
    let (l, port) = listener();
    let server = std::thread::spawn(move || {
        let mut s = OobStream::accept(&l, Duration::from_secs(5)).unwrap();
        assert_eq!(s.role(), Role::Server);
        let mine = PingpongDest {
            lid: 0,
            qpn: 0x11,
            psn: 0x6ea77a,
            gid: [1; 16],
        };
        let mut theirs = [0u8; 52];
        s.exchange("keys", &mine.to_bytes(), &mut theirs).unwrap();
        PingpongDest::parse(&theirs).unwrap()
    });
    let mut c = OobStream::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
    let mine = PingpongDest {
        lid: 0,
        qpn: 0x12,
        psn: 0x145bf3,
        gid: [2; 16],
    };
    let mut theirs = [0u8; 52];
    c.exchange("keys", &mine.to_bytes(), &mut theirs).unwrap();
    assert_eq!(PingpongDest::parse(&theirs).unwrap().qpn, 0x11);
    assert_eq!(server.join().unwrap(), mine);
}

#[test]
fn endpoint_exchange_round_trips() {
    let (l, port) = listener();
    let ep = |qpn| Endpoint {
        qpn,
        psn: 7,
        gid: "::ffff:127.0.0.1".parse().unwrap(),
        lid: 0,
        udp: Some("127.0.0.1:4791".parse().unwrap()),
        mtu: Some(4096),
        qkey: None,
        regions: vec![RemoteRegion {
            addr: 0x1000,
            rkey: 0x42,
            len: 65536,
        }],
    };
    let server = std::thread::spawn(move || {
        let mut s = OobStream::accept(&l, Duration::from_secs(5)).unwrap();
        s.exchange_endpoint(&ep(1)).unwrap()
    });
    let mut c = OobStream::connect("localhost", port, Duration::from_secs(5)).unwrap();
    assert_eq!(c.exchange_endpoint(&ep(2)).unwrap(), ep(1));
    assert_eq!(server.join().unwrap(), ep(2));
}

#[test]
fn refused_port_is_a_clear_error() {
    let (l, port) = listener();
    drop(l);
    let e = OobStream::connect("127.0.0.1", port, T).unwrap_err();
    assert!(matches!(e, OobError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("is the server running"), "{e}");
}

#[test]
fn silent_peer_times_out() {
    let (l, port) = listener();
    let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut s = OobStream::accept(&l, T).unwrap();
    let mut buf = [0u8; 52];
    let e = s.read_msg("receive keys", &mut buf).unwrap_err();
    assert!(matches!(e, OobError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("timed out"), "{e}");
}

#[test]
fn no_client_times_out_on_accept() {
    let (l, _) = listener();
    let e = OobStream::accept(&l, T).unwrap_err();
    assert!(
        matches!(
            e,
            OobError::Timeout {
                what: "accept a client",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn peer_vanishing_mid_message_is_reported_with_byte_counts() {
    let (l, port) = listener();
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut s = OobStream::accept(&l, Duration::from_secs(5)).unwrap();
    c.write_all(b"0000:0000").unwrap();
    drop(c);
    let mut buf = [0u8; 52];
    let e = s.read_msg("receive keys", &mut buf).unwrap_err();
    assert!(
        matches!(
            e,
            OobError::Closed {
                got: 9,
                expected: 52,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn garbage_endpoint_is_malformed_not_a_huge_allocation() {
    let (l, port) = listener();
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut s = OobStream::accept(&l, Duration::from_secs(5)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let e = s.exchange_endpoint(&Endpoint {
        qpn: 1,
        psn: 1,
        gid: "::1".parse().unwrap(),
        lid: 0,
        udp: None,
        mtu: None,
        qkey: None,
        regions: vec![],
    });
    let e = e.unwrap_err();
    assert!(matches!(e, OobError::Malformed { .. }), "{e:?}");
}

#[test]
fn poll_peer_sees_waiting_bytes_without_consuming_them_and_sees_a_close() {
    let (l, port) = listener();
    let c = std::thread::spawn(move || {
        let mut c = OobStream::connect("127.0.0.1", port, T).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        c.write_msg("greeting", b"hi").unwrap();
        std::thread::sleep(Duration::from_millis(100));
    });
    let mut s = OobStream::accept(&l, Duration::from_secs(5)).unwrap();
    assert!(!s.poll_peer("greeting").unwrap(), "nothing sent yet");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !s.poll_peer("greeting").unwrap() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut b = [0u8; 2];
    s.read_msg("greeting", &mut b).unwrap();
    assert_eq!(&b, b"hi");
    c.join().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match s.poll_peer("the end") {
            Err(OobError::Closed { .. }) => break,
            other => {
                assert!(std::time::Instant::now() < deadline, "{other:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
