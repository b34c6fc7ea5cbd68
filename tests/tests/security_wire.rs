#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Attacks on the wire of the internal RPC (`cluster_listen=`), made with
//! raw HTTP/2 clients: each is refused or bounded, is logged where it
//! should be, and the daemon serves afterwards.

#[path = "security_wire/proxy.rs"]
mod proxy;
#[path = "security_wire/raw.rs"]
mod raw;

use bytes::Bytes;
use engine::protocol::TabletService;
use proxy::{Proxy, Way};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::Mount;

const SECRET: &str = "e2e-wire-secret-0123456789";
const SCAN: &str = "/bigtable.internal.v1.Cluster/Scan";
const CALL: &str = "/bigtable.internal.v1.Cluster/Call";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// (server name, addr) of each serving line of `.bigtable/servers`.
fn servers(m: &Mount) -> Vec<(String, String)> {
    m.ok("cat .bigtable/servers")
        .lines()
        .filter(|l| l.contains(" state=serving "))
        .map(|l| {
            let word = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .unwrap_or_default()
                    .to_string()
            };
            (word("server="), word("addr="))
        })
        .collect()
}

fn secret_file(dir: &tempfile::TempDir) -> String {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.path().join("secret");
    std::fs::write(&f, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!("cluster_secret_file={}", f.display())
}

/// A `Scan` request whose filter is `depth` nested `Condition`s, laid out
/// by hand (serializing it would recurse as deep).
fn nested_scan(server: &str, depth: usize) -> Vec<u8> {
    use engine::filter::RowFilter;
    let one = RowFilter::Condition {
        predicate: Box::new(RowFilter::PassAll),
        true_filter: None,
        false_filter: None,
    };
    let b = grpc::internal::encode_scan_call(
        server,
        1,
        &engine::ScanSpec {
            filter: Some(one),
            ..Default::default()
        },
    );
    // ...[Some][Condition][PassAll][None][None] at the end.
    let (head, tail) = b.split_at(b.len() - 10);
    let (tag, rest) = tail.split_at(4);
    let (leaf, nones) = rest.split_at(4);
    let mut out = head.to_vec();
    out.extend(tag.repeat(depth));
    out.extend_from_slice(leaf);
    out.extend(nones.repeat(depth));
    out
}

fn refusals_logged(m: &Mount) -> usize {
    m.log_text().matches("refused an internal call").count()
}

#[test]
fn an_unauthenticated_call_is_refused_on_its_headers_before_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        &secret_file(&dir),
        "cluster_dial_self",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (_, addr) = servers(&m)[0].clone();
    let rt = runtime();
    rt.block_on(async {
        // Headers, then a body that never comes: the refusal does not wait
        // for it (the body is never read).
        let mut conn = raw::connect(&addr).await;
        let (_send, answer) = raw::open(&mut conn, &addr, SCAN, &[], false).await;
        let a = raw::within(Duration::from_secs(20), answer)
            .await
            .expect("no answer before the body");
        assert_eq!(a.code, Some(16), "{a:?}");
        // A filter nested 10,000 levels deep (60 KB), no token: refused
        // unread.
        let a = raw::call(&addr, SCAN, &[], &nested_scan("s", 10_000)).await;
        assert_eq!(a.code, Some(16), "{a:?}");
        // A forged token, and garbage where a message should be.
        let forged = [("x-bigtable-cluster-auth", "1.2.00ff".to_string())];
        let a = raw::call(&addr, CALL, &forged, &[0xff; 64]).await;
        assert_eq!(a.code, Some(16), "{a:?}");
        // Twenty more refusals from twenty ports of one address...
        for _ in 0..20 {
            let a = raw::call(&addr, CALL, &[], b"x").await;
            assert_eq!(a.code, Some(16), "{a:?}");
        }
    });
    // ...are one line in the log (once a minute per address, not per port).
    let logged = tests::wait_until(Duration::from_secs(10), || refusals_logged(&m) >= 1);
    assert!(logged, "{}", tests::tail(&m.log_text(), 20));
    assert_eq!(refusals_logged(&m), 1, "{}", tests::tail(&m.log_text(), 30));
    // The daemon still serves, through the internal RPC itself.
    assert_eq!(m.ok("cat t/r/cf/q"), "kept\n");
    m.ok("echo again > t/r/cf/q2");
    assert_eq!(m.ok("cat t/r/cf/q2"), "again\n");
}

#[test]
fn a_deeply_nested_filter_is_refused_not_a_stack_overflow() {
    // No secret on loopback: the decoder itself is what stands in the way.
    let m = Mount::with_options(&["cluster_listen=127.0.0.1:0", "cluster_dial_self"]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (name, addr) = servers(&m)[0].clone();
    let rt = runtime();
    rt.block_on(async {
        let a = raw::call(&addr, SCAN, &[], &nested_scan("s", 10_000)).await;
        assert_eq!(a.code, Some(3), "{a:?}");
        assert!(a.message.contains("nested deeper"), "{a:?}");
        // A filter as deep as the engine allows still decodes (and is
        // answered by the server: here, an unknown tablet).
        let body = nested_scan(&name, engine::filter::MAX_DEPTH - 1);
        let a = raw::call(&addr, SCAN, &[], &body).await;
        assert_ne!(a.code, Some(3), "{a:?}");
    });
    assert!(m.pid() > 0);
    assert_eq!(m.ok("cat t/r/cf/q"), "kept\n");
}

/// Samples the daemon's RSS until told to stop; returns the highest.
fn sample_rss(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(tests::rss_kib(pid));
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    })
}

/// `n` streams on one connection that each announce a message of `len`
/// bytes and send all of it but the last byte; returns each one's answer.
fn streams_stopping_short(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    n: usize,
    len: u32,
) -> Vec<raw::Answer> {
    let sent = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let mut conn = raw::connect(addr).await;
        let body = Arc::new({
            let mut b = raw::frame_header(len);
            b.resize(5 + len as usize - 1, 7);
            b
        });
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (mut send, answer) = raw::open(&mut conn, addr, CALL, &[], false).await;
            let body = body.clone();
            let sent = sent.clone();
            tasks.push(tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(120);
                let n = raw::send_all(&mut send, &body, deadline).await;
                sent.fetch_add(n as u64, Ordering::Relaxed);
                // Keep the stream open (the last byte never comes) until
                // the server answers.
                let a = answer.await;
                drop(send);
                a
            }));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        answers
    })
}

#[test]
fn many_streams_stopping_short_of_a_huge_message_leave_the_daemon_alive_and_bounded() {
    // No secret on loopback, so that the bodies are read at all (with a
    // secret they are refused unread, above); a small budget of bytes
    // being received, 32 MiB, so that the bound is clear.
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        "cluster_dial_self",
        "rpc_buffer=32m",
        "rpc_body_timeout=15",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (_, addr) = servers(&m)[0].clone();
    let pid = m.pid();
    let before = tests::rss_kib(pid);
    let rt = runtime();
    // Twelve streams each stopping one byte short of a message just under
    // the largest request (80 MiB): 960 MiB if each were buffered.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(pid, stop.clone());
    let answers = streams_stopping_short(&rt, &addr, 12, (80 << 20) - 1);
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let grown_mib = peak.saturating_sub(before) / 1024;
    eprintln!("RSS {before} KiB before, {peak} KiB at the peak (+{grown_mib} MiB)");
    assert!(
        grown_mib < 200,
        "the daemon grew {grown_mib} MiB under 12 streams of 80 MiB"
    );
    for a in &answers {
        // Over the budget: RESOURCE_EXHAUSTED (or the body's deadline).
        assert!(matches!(a.code, Some(8) | Some(4)), "{answers:?}");
    }
    assert!(answers.iter().any(|a| a.code == Some(8)), "{answers:?}");
    // A message announced larger than any method allows is refused on its
    // 5-byte header (OUT_OF_RANGE, tonic's word for it).
    rt.block_on(async {
        let mut conn = raw::connect(&addr).await;
        let (mut send, answer) = raw::open(&mut conn, &addr, CALL, &[], false).await;
        let _ = send.send_data(Bytes::from(raw::frame_header(255 << 20)), false);
        let a = raw::within(Duration::from_secs(20), answer).await.unwrap();
        assert_eq!(a.code, Some(11), "{a:?}");
    });
    // Streams that fit the budget but never finish are dropped at the
    // body's deadline, and their bytes given back.
    let answers = streams_stopping_short(&rt, &addr, 12, (4 << 20) - 1);
    assert!(answers.iter().any(|a| a.code == Some(4)), "{answers:?}");
    rt.block_on(async {
        let a = raw::call(&addr, CALL, &[], &vec![0xff; 8 << 20]).await;
        assert_eq!(a.code, Some(3), "a whole request is read again: {a:?}");
    });
    assert_eq!(m.ok("cat t/r/cf/q"), "kept\n");
    m.ok("echo again > t/r/cf/q2");
    assert_eq!(m.ok("cat t/r/cf/q2"), "again\n");
}

/// A daemon with the secret that advertises a proxy's address (so the
/// calls of other daemons cross the proxy, as they would cross a network
/// an attacker watches), a table `t` with a row `r`, and a node of the
/// cluster (it has the secret) whose calls cross the proxy.
struct Watched {
    m: Mount,
    proxy: Proxy,
    /// The daemon's own listener (behind the proxy).
    direct: String,
    friend: grpc::internal::Node,
    _dir: tempfile::TempDir,
}

impl Watched {
    fn start(extra: &[&str]) -> Watched {
        let dir = tempfile::tempdir().unwrap();
        let port = proxy::free_port();
        let direct = format!("127.0.0.1:{port}");
        let proxy = Proxy::start("127.0.0.1:0", direct.clone());
        let listen = format!("cluster_listen={direct}");
        let advertise = format!("cluster_advertise={}", proxy.addr);
        let secret = secret_file(&dir);
        let mut opts = vec![listen.as_str(), advertise.as_str(), secret.as_str()];
        opts.extend_from_slice(extra);
        let m = Mount::with_options(&opts);
        m.table("t", "cf\n");
        m.ok("mkdir -p t/r/cf && echo kept-CCCC > t/r/cf/q");
        let friend = grpc::internal::Node::start(
            "127.0.0.1:0".parse().unwrap(),
            Some(grpc::internal::Secret::new(SECRET).unwrap()),
        )
        .unwrap();
        Watched {
            m,
            proxy,
            direct,
            friend,
            _dir: dir,
        }
    }

    /// The server (reached through the proxy) and tablet holding row `r`.
    fn holder(&self) -> (std::sync::Arc<dyn TabletService>, u64) {
        for (name, addr) in servers(&self.m) {
            assert_eq!(addr, self.proxy.addr);
            let s = self.friend.dial_server(&addr, &name).unwrap();
            for id in s.tablet_ids().unwrap() {
                let cells = s.read_row(id, b"r", &engine::ScanSpec::default());
                if cells.is_ok_and(|c| !c.is_empty()) {
                    return (s, id);
                }
            }
        }
        panic!("no server holds row r");
    }
}

/// Writes `bytes` on a new connection to `addr` and reads what comes
/// back until the server closes or stays quiet for 3 s.
fn replay(addr: &str, bytes: &[u8]) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    c.write_all(bytes).unwrap();
    let mut buf = [0u8; 16 << 10];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}

#[test]
fn a_captured_call_replayed_is_refused_and_an_altered_one_too() {
    let w = Watched::start(&[]);
    let (s, tablet) = w.holder();
    let cells = s
        .read_row(tablet, b"r", &engine::ScanSpec::default())
        .unwrap();
    assert_eq!(cells[0].value, b"kept-CCCC\n");
    // Everything the friend sent so far, sent again as it was (its
    // connection's preface, settings and every request, tokens included),
    // straight to the daemon within the token window: refused.
    let captured: Vec<Vec<u8>> = w.proxy.sent.lock().unwrap().clone();
    assert!(!captured.is_empty() && !captured[0].is_empty());
    for c in &captured {
        replay(&w.direct, c);
    }
    let refused = tests::wait_until(Duration::from_secs(20), || {
        w.m.log_text().contains("a replayed call")
    });
    assert!(refused, "{}", tests::tail(&w.m.log_text(), 20));

    // A write whose body is changed on the way, its token intact: refused,
    // and the change is not applied.
    w.proxy.rewrite(Way::Up, b"tampered-AAAA", b"tampered-BBBB");
    let m =
        engine::RowMutation::new(b"r").set_at("cf", b"q", engine::now_micros(), b"tampered-AAAA");
    let e = s.apply(tablet, &[m], false, None).unwrap_err().to_string();
    assert!(
        e.contains("a body other than the one its token covers"),
        "{e}"
    );
    w.proxy.clear();
    let now = w.m.ok("cat t/r/cf/q");
    assert_eq!(now, "kept-CCCC\n");

    // A reply changed on the way: not believed, for a call and for each
    // message of a scan's stream.
    w.proxy.rewrite(Way::Down, b"kept-CCCC", b"kept-DDDD");
    let r = s.read_row(tablet, b"r", &engine::ScanSpec::default());
    assert!(r.is_err(), "an altered reply was believed: {r:?}");
    let scanned = s
        .scan_part(tablet, &engine::ScanSpec::default())
        .and_then(|(mut cells, _)| {
            let mut all = Vec::new();
            while let Some(c) = cells.next_cell()? {
                all.push(c);
            }
            Ok(all)
        });
    assert!(
        scanned.is_err(),
        "an altered scan was believed: {scanned:?}"
    );
    w.proxy.clear();
    let cells = s
        .read_row(tablet, b"r", &engine::ScanSpec::default())
        .unwrap();
    assert_eq!(cells[0].value, b"kept-CCCC\n");
    // Without TLS, what crosses is in clear for whoever watches.
    assert!(w.proxy.saw(b"kept-CCCC"));
    assert_eq!(w.m.ok("cat t/r/cf/q"), "kept-CCCC\n");
}
