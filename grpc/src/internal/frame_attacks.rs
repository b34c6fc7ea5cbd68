//! Attacks on the framed transport's port, raw bytes on a socket: each is
//! refused (before the body is read where the frame's head is enough),
//! and the listener serves afterwards.

use super::frame::{self, u32_at, MAGIC};
use super::{encode_frame, Node, Secret};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const SECRET: &str = "frame-attack-secret-0123456789";

fn node() -> Node {
    Node::start(
        "127.0.0.1:0".parse().unwrap(),
        Some(Secret::new(SECRET).unwrap()),
    )
    .unwrap()
}

fn connect(n: &Node) -> TcpStream {
    let c = TcpStream::connect(n.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

/// The status and message of the reply to `bytes` on a new connection.
fn answer(n: &Node, bytes: &[u8]) -> (u8, String) {
    let mut c = connect(n);
    c.write_all(bytes).unwrap();
    read_reply(&mut c)
}

fn read_reply(c: &mut TcpStream) -> (u8, String) {
    let mut head = [0; frame::REPLY_HEAD];
    c.read_exact(&mut head).unwrap();
    let mut rest = vec![0; head[1] as usize + u32_at(&head, 2)];
    c.read_exact(&mut rest).unwrap();
    let body = &rest[head[1] as usize..];
    (head[0], String::from_utf8_lossy(body).into_owned())
}

/// Whether the callee closed `c` (reads end) rather than waiting.
fn closed(c: &mut TcpStream) -> bool {
    let mut b = [0; 64];
    loop {
        match c.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

fn body() -> Vec<u8> {
    super::encode_read_row("ts0", 1, b"r", &engine::ScanSpec::default())
}

/// A call that passes the checks reaches the daemon (here, one not yet
/// attached to a cluster: "starting").
fn admitted(n: &Node) {
    let target = n.addr.to_string();
    let ok = encode_frame(
        Some(&Secret::new(SECRET).unwrap()),
        "Control",
        &target,
        &body(),
    );
    let (code, why) = answer(n, &ok);
    assert_eq!(code, tonic::Code::Unavailable as u8, "{why}");
    assert!(why.contains("starting"), "{why}");
}

#[test]
fn garbage_bytes_are_refused_and_the_listener_lives() {
    let n = node();
    for garbage in [
        &b"BTFRAMEX and then some"[..],
        &[0x42; 4096][..],
        &[0xff; 100][..],
    ] {
        let mut c = connect(&n);
        let _ = c.write_all(garbage);
        // Closed, or (not starting with the magic's first byte) handed to
        // HTTP/2, which refuses it in its own way; never served.
        let _ = closed(&mut c);
    }
    // A frame after the magic whose route is no route.
    let mut bad = MAGIC.to_vec();
    bad.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0]);
    let (code, _) = answer(&n, &bad);
    assert_eq!(code, tonic::Code::Unauthenticated as u8);
    admitted(&n);
    n.stop();
}

#[test]
fn a_huge_length_prefix_is_refused_on_the_head_without_reading() {
    let n = node();
    let mut f = MAGIC.to_vec();
    f.extend_from_slice(&[1, 0, 0]);
    f.extend_from_slice(&u32::MAX.to_le_bytes());
    let mut c = connect(&n);
    c.write_all(&f).unwrap();
    let (code, why) = read_reply(&mut c);
    assert_eq!(code, tonic::Code::OutOfRange as u8, "{why}");
    assert!(why.contains("limited to"), "{why}");
    assert!(
        closed(&mut c),
        "the connection is closed, its body never read"
    );
    // Control requests have the smaller bound.
    let big = vec![0; (4 << 20) + 1];
    let f = encode_frame(None, "Control", &n.addr.to_string(), &big);
    let (code, _) = answer(&n, &f[..MAGIC.len() + frame::REQUEST_HEAD]);
    assert_eq!(code, tonic::Code::OutOfRange as u8);
    admitted(&n);
    n.stop();
}

#[test]
fn a_replayed_token_a_wrong_secret_and_a_token_for_elsewhere_are_refused() {
    let n = node();
    let target = n.addr.to_string();
    let s = Secret::new(SECRET).unwrap();
    let unauth = tonic::Code::Unauthenticated as u8;
    // Replayed: the same frame twice.
    let f = encode_frame(Some(&s), "Control", &target, &body());
    assert_eq!(answer(&n, &f).0, tonic::Code::Unavailable as u8);
    let (code, why) = answer(&n, &f);
    assert_eq!(code, unauth, "{why}");
    assert!(why.contains("a replayed call"), "{why}");
    // Another secret, and no token at all: refused before the body, which
    // is never sent.
    let other = Secret::new("another-secret-0123456789").unwrap();
    let wrong = encode_frame(Some(&other), "Control", &target, &body());
    for f in [wrong, encode_frame(None, "Control", &target, &body())] {
        let head = f.len() - body().len();
        let mut c = connect(&n);
        c.write_all(&f[..head]).unwrap();
        let (code, why) = read_reply(&mut c);
        assert_eq!(code, unauth, "{why}");
        assert!(closed(&mut c));
    }
    // A token for another route, another daemon, another body.
    let mut route = encode_frame(Some(&s), "Call", &target, &body());
    route[MAGIC.len()] = 2;
    assert_eq!(answer(&n, &route).0, unauth);
    let elsewhere = encode_frame(Some(&s), "Control", "10.9.9.9:7100", &body());
    assert_eq!(answer(&n, &elsewhere).0, unauth);
    let mut altered = encode_frame(Some(&s), "Control", &target, &body());
    let last = altered.len() - 1;
    altered[last] ^= 1;
    let (code, why) = answer(&n, &altered);
    assert_eq!(code, unauth);
    assert!(why.contains("a body other than"), "{why}");
    admitted(&n);
    n.stop();
}

#[test]
fn a_silent_connection_is_closed() {
    let n = Node::start_with(
        "127.0.0.1:0".parse().unwrap(),
        super::Config {
            secret: Some(Secret::new(SECRET).unwrap()),
            limits: crate::guard::Limits {
                header_timeout: Duration::from_secs(1),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    // The magic, then half a head, then nothing.
    let mut c = connect(&n);
    let mut f = MAGIC.to_vec();
    f.extend_from_slice(&[2, 0]);
    c.write_all(&f).unwrap();
    // Half a head waits for the idle limit; a frame missing its token is
    // closed after the header timeout.
    let mut c2 = connect(&n);
    let mut f2 = MAGIC.to_vec();
    f2.extend_from_slice(&[2, 200, 0, 0, 0, 0, 0]);
    c2.write_all(&f2).unwrap();
    let (code, _) = read_reply(&mut c2);
    assert_eq!(code, tonic::Code::DeadlineExceeded as u8);
    assert!(closed(&mut c2));
    drop(c);
    admitted(&n);
    n.stop();
}
