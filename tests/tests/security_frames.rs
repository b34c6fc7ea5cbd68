#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Attacks on the framed transport of the internal RPC (`Call` and
//! `Control` as length-prefixed frames on the cluster port, see
//! docs/internal-rpc.md), made with raw sockets against a daemon whose own
//! requests cross that port (`cluster_dial_self`): each is refused and
//! logged, and the daemon serves afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tests::Mount;

const SECRET: &str = "e2e-frame-secret-0123456789";

fn secret_file(dir: &tempfile::TempDir) -> String {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.path().join("secret");
    std::fs::write(&f, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!("cluster_secret_file={}", f.display())
}

/// Writes `bytes` on a new connection and returns what comes back until
/// the daemon closes it (or 20 s pass).
fn exchange(addr: &str, bytes: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = c.write_all(bytes);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        // A reply's head is 6 bytes: status, tag length, body length.
        if got.len() >= 6 {
            let len = u32::from_le_bytes([got[2], got[3], got[4], got[5]]) as usize;
            if got.len() >= 6 + got[1] as usize + len {
                break;
            }
        }
    }
    got
}

fn refusals_logged(m: &Mount) -> usize {
    m.log_text().matches("refused an internal call").count()
}

#[test]
fn garbage_huge_lengths_wrong_secrets_and_replays_on_the_framed_port_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        &secret_file(&dir),
        "cluster_dial_self",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (name, addr) = m.servers()[0].clone();
    let body = grpc::internal::encode_read_row(&name, 1, b"r", &engine::ScanSpec::default());
    let ours = grpc::internal::Secret::new(SECRET).unwrap();

    // Garbage after the magic's first byte: the connection is closed.
    assert!(exchange(&addr, b"BTFRAME? and garbage").is_empty());
    // A length prefix of 4 GiB: refused on the head (OUT_OF_RANGE, 11),
    // nothing allocated or read.
    let mut huge = b"BTFRAME1".to_vec();
    huge.extend_from_slice(&[1, 0, 0]);
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(exchange(&addr, &huge).first(), Some(&11));
    // Another secret's token: UNAUTHENTICATED (16).
    let theirs = grpc::internal::Secret::new("someone-elses-secret-42").unwrap();
    let wrong = grpc::internal::encode_frame(Some(&theirs), "Control", &addr, &body);
    assert_eq!(exchange(&addr, &wrong).first(), Some(&16));
    // A good call, then the same bytes again: the replay is refused.
    let good = grpc::internal::encode_frame(Some(&ours), "Control", &addr, &body);
    assert_eq!(exchange(&addr, &good).first(), Some(&0));
    let again = exchange(&addr, &good);
    assert_eq!(again.first(), Some(&16));
    assert!(String::from_utf8_lossy(&again).contains("a replayed call"));

    // Refused and logged (once a minute per address).
    let logged = tests::wait_until(Duration::from_secs(10), || refusals_logged(&m) >= 1);
    assert!(logged, "{}", tests::tail(&m.log_text(), 20));
    // The daemon still serves, through the framed port itself.
    assert_eq!(m.ok("cat t/r/cf/q"), "kept\n");
    m.ok("echo again > t/r/cf/q2");
    assert_eq!(m.ok("cat t/r/cf/q2"), "again\n");
}
