#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Attacks on the wire of the internal RPC (`cluster_listen=`), made with
//! raw HTTP/2 clients and raw frames: each is refused or bounded, is logged where it
//! should be, and the daemon serves afterwards.

#[path = "security_wire/proxy.rs"]
mod proxy;
#[path = "security_wire/raw.rs"]
mod raw;

use bytes::Bytes;
use engine::protocol::TabletService;
use proxy::{Proxy, Way};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// A daemon with the secret whose own requests cross its internal RPC,
/// with `t/r/cf/q` = "kept".
fn guarded_mount(dir: &tempfile::TempDir) -> Mount {
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        &secret_file(dir),
        "cluster_dial_self",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    m
}

#[test]
fn an_unauthenticated_call_is_refused_on_its_headers_before_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let m = guarded_mount(&dir);
    let (_, addr) = m.servers()[0].clone();
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
fn a_loopback_listener_without_a_secret_serves_only_its_own_daemon() {
    // No secret, no certificates, no shared etcd: the daemon makes a secret
    // of its own, so a local user who dials the port gets nothing, while
    // the daemon's own requests (cluster_dial_self) go through.
    let m = Mount::with_options(&["cluster_listen=127.0.0.1:0", "cluster_dial_self"]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (name, addr) = m.servers()[0].clone();
    let rt = runtime();
    rt.block_on(async {
        let body = grpc::internal::encode_scan_call(&name, 1, &engine::ScanSpec::default());
        let a = raw::call(&addr, SCAN, &[], &body).await;
        assert_eq!(a.code, Some(16), "{a:?}");
    });
    assert_eq!(m.ok("cat t/r/cf/q"), "kept\n");
}

#[test]
fn a_deeply_nested_filter_is_refused_not_a_stack_overflow() {
    // No secret on a trusted loopback: the decoder itself is what stands in
    // the way.
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        "cluster_dial_self",
        "cluster_trust_loopback",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (name, addr) = m.servers()[0].clone();
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

/// `n` streams on one connection that each announce a message of `len`
/// bytes and send all of it but the last byte; returns each one's answer.
fn streams_stopping_short(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    n: usize,
    len: u32,
) -> Vec<raw::Answer> {
    streams_stopping_short_on(rt, addr, CALL, n, len)
}

fn streams_stopping_short_on(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    path: &'static str,
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
            let (mut send, answer) = raw::open(&mut conn, addr, path, &[], false).await;
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
    // No secret on a trusted loopback, so that the bodies are read at all
    // (with a secret they are refused unread, above); a small budget of
    // bytes being received, 32 MiB, so that the bound is clear.
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        "cluster_dial_self",
        "cluster_trust_loopback",
        "rpc_buffer=32m",
        "rpc_body_timeout=15",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let (_, addr) = m.servers()[0].clone();
    let pid = m.pid();
    let before = tests::rss_kib(pid);
    let rt = runtime();
    // Twelve streams each stopping one byte short of a message just under
    // the largest request (80 MiB): 960 MiB if each were buffered.
    tests::reset_peak_rss(pid);
    let answers = streams_stopping_short(&rt, &addr, 12, (80 << 20) - 1);
    let peak = tests::peak_rss_kib(pid);
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
        for (name, addr) in self.m.servers() {
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

/// `bigtable-bench certs DIR --names NAMES --extra-san 127.0.0.1`.
fn certs(dir: &std::path::Path, names: &str) {
    let out = std::process::Command::new(tests::bin("bigtable-bench"))
        .arg("certs")
        .arg(dir)
        .args(["--names", names, "--extra-san", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn tls_files(dir: &std::path::Path, name: &str) -> grpc::TlsFiles {
    grpc::TlsFiles {
        ca: Some(dir.join("ca.pem")),
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
    }
}

/// A node of the internal RPC with `tls` (and no secret).
fn node(tls: Option<grpc::TlsFiles>) -> grpc::internal::Node {
    let config = grpc::internal::Config {
        tls: tls.map(|f| grpc::Tls::load(f, true).unwrap()),
        ..Default::default()
    };
    grpc::internal::Node::start_with("127.0.0.1:0".parse().unwrap(), config).unwrap()
}

#[test]
fn mutual_tls_refuses_peers_without_a_cluster_certificate_and_hides_values() {
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = (dir.path().join("ours"), dir.path().join("theirs"));
    certs(&ours, "daemon,friend");
    certs(&theirs, "rogue");
    let f = tls_files(&ours, "daemon");
    let port = proxy::free_port();
    let direct = format!("127.0.0.1:{port}");
    let proxy = Proxy::start("127.0.0.1:0", direct.clone());
    let m = Mount::with_options(&[
        &format!("cluster_listen={direct}"),
        &format!("cluster_advertise={}", proxy.addr),
        &format!("cluster_ca={}", f.ca.as_ref().unwrap().display()),
        &format!("cluster_cert={}", f.cert.display()),
        &format!("cluster_key={}", f.key.display()),
        // The daemon's own calls cross the proxy too, over mTLS.
        "cluster_dial_self",
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo wire-value-VVVV > t/r/cf/q");
    assert_eq!(m.ok("cat t/r/cf/q"), "wire-value-VVVV\n");
    m.ok("ls t; cat t/r/cf/q");
    // What crossed the wire: plenty, but not the value.
    let crossed: usize = proxy.sent.lock().unwrap().iter().map(Vec::len).sum();
    assert!(crossed > 1000, "the calls did not cross the proxy");
    assert!(!proxy.saw(b"wire-value-VVVV"), "the value crossed in clear");
    assert!(!proxy.saw(b"t/r") && !proxy.saw(b"Apply"));

    let (name, addr) = m.servers()[0].clone();
    assert_eq!(addr, proxy.addr);
    // A node with a certificate of the cluster's CA is served...
    let friend = node(Some(tls_files(&ours, "friend")));
    let s = friend.dial_server(&addr, &name).unwrap();
    assert!(s.report().is_ok(), "a cluster certificate is accepted");
    // ...one without a certificate, or with another CA's, is not.
    for (who, tls) in [
        ("plain", None),
        ("rogue", Some(tls_files(&theirs, "rogue"))),
    ] {
        let n = node(tls);
        let s = n.dial_server(&direct, &name).unwrap();
        let ids = s.tablet_ids();
        assert!(ids.is_err(), "{who} listed tablets: {ids:?}");
        let e = s.unload(1);
        assert!(e.is_err(), "{who}");
        n.stop();
    }
    let logged = tests::wait_until(Duration::from_secs(20), || {
        let log = m.log_text();
        log.contains("refused a connection to the internal RPC from 127.0.0.1: TLS")
            && log
                .matches("refused a connection to the internal RPC")
                .count()
                >= 2
    });
    assert!(logged, "{}", tests::tail(&m.log_text(), 20));
    // A daemon whose certificate is not the cluster's is not believed as a
    // server either: the friend reaching the rogue fails.
    let rogue = node(Some(tls_files(&theirs, "rogue")));
    let s = friend.dial_server(&rogue.addr.to_string(), "ts0").unwrap();
    assert!(s.report().is_err());
    rogue.stop();
    friend.stop();
    assert_eq!(m.ok("cat t/r/cf/q"), "wire-value-VVVV\n");
}

/// Starts bigtable-mountd with `opts` and expects it to refuse to start;
/// returns what it said.
fn refused_at_mount(opts: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (data, mnt) = (dir.path().join("data"), dir.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let mut child = std::process::Command::new(tests::bin("bigtable-mountd"))
        .arg(&data)
        .arg(&mnt)
        .arg("-f")
        .arg("-o")
        .arg(opts.join(","))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    tests::wait_until(Duration::from_secs(30), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        tests::unmount(&mnt);
        panic!("the daemon started with {opts:?}");
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_secret_or_key_file_others_can_read_is_refused_at_mount() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let said = refused_at_mount(&[
        "cluster_listen=127.0.0.1:0".into(),
        format!("cluster_secret_file={}", secret.display()),
    ]);
    assert!(
        said.contains("cluster_secret_file=") && said.contains("chmod 600"),
        "{said}"
    );
    // A key the group can read, too.
    let certs_dir = dir.path().join("certs");
    certs(&certs_dir, "daemon");
    let f = tls_files(&certs_dir, "daemon");
    std::fs::set_permissions(&f.key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let said = refused_at_mount(&[
        "cluster_listen=127.0.0.1:0".into(),
        format!("cluster_ca={}", f.ca.as_ref().unwrap().display()),
        format!("cluster_cert={}", f.cert.display()),
        format!("cluster_key={}", f.key.display()),
    ]);
    assert!(
        said.contains("cluster_key=") && said.contains("0640"),
        "{said}"
    );
    // Made private, the same options mount.
    std::fs::set_permissions(&f.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        &format!("cluster_ca={}", f.ca.as_ref().unwrap().display()),
        &format!("cluster_cert={}", f.cert.display()),
        &format!("cluster_key={}", f.key.display()),
    ]);
    m.table("t", "cf\n");
}

#[test]
fn the_public_api_over_tls_hides_values_and_refuses_plain_text() {
    use grpc::v2::bigtable_client::BigtableClient;
    use grpc::v2::ReadRowsRequest;
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path(), "server");
    let f = tls_files(dir.path(), "server");
    let m = Mount::with_options(&[
        "grpc=127.0.0.1:0",
        "grpc_trust_loopback",
        &format!("grpc_cert={}", f.cert.display()),
        &format!("grpc_key={}", f.key.display()),
    ]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo api-value-WWWW > t/r/cf/q");
    let proxy = Proxy::start("127.0.0.1:0", m.grpc_addr());
    let ca = std::fs::read(f.ca.as_ref().unwrap()).unwrap();
    let rt = runtime();
    let read = |scheme: &str, tls: bool| {
        rt.block_on(async {
            let mut e = Endpoint::from_shared(format!("{scheme}://{}", proxy.addr))
                .unwrap()
                .connect_timeout(Duration::from_secs(10))
                .timeout(Duration::from_secs(20));
            if tls {
                e = e
                    .tls_config(
                        ClientTlsConfig::new()
                            .ca_certificate(Certificate::from_pem(&ca))
                            .domain_name("127.0.0.1"),
                    )
                    .unwrap();
            }
            let channel = e.connect().await.map_err(|e| e.to_string())?;
            let mut c = BigtableClient::new(channel);
            let req = ReadRowsRequest {
                table_name: "projects/p/instances/default/tables/t".into(),
                ..Default::default()
            };
            let mut stream = c
                .read_rows(req)
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let mut values = Vec::new();
            while let Some(r) = stream.message().await.map_err(|e| e.to_string())? {
                values.extend(r.chunks.into_iter().map(|c| c.value));
            }
            Ok::<_, String>(values)
        })
    };
    let values = read("https", true).unwrap();
    assert_eq!(values, vec![b"api-value-WWWW\n".to_vec()]);
    assert!(!proxy.saw(b"api-value-WWWW"), "the value crossed in clear");
    // A plain-text client gets nothing.
    let plain = read("http", false);
    assert!(plain.is_err(), "{plain:?}");
    assert!(!proxy.saw(b"api-value-WWWW"));
    let logged = tests::wait_until(Duration::from_secs(20), || {
        m.log_text()
            .contains("refused a connection to the gRPC API from 127.0.0.1: TLS")
    });
    assert!(logged, "{}", tests::tail(&m.log_text(), 20));
    assert_eq!(m.ok("cat t/r/cf/q"), "api-value-WWWW\n");
}

#[test]
fn certificates_are_reloaded_when_their_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new, live) = (
        dir.path().join("old"),
        dir.path().join("new"),
        dir.path().join("live"),
    );
    certs(&old, "daemon,friend");
    certs(&new, "daemon,friend");
    std::fs::create_dir(&live).unwrap();
    let install = |from: &std::path::Path| {
        for f in ["ca.pem", "daemon.pem", "daemon-key.pem"] {
            std::fs::copy(from.join(f), live.join(f)).unwrap();
        }
    };
    install(&old);
    let f = tls_files(&live, "daemon");
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        &format!("cluster_ca={}", f.ca.as_ref().unwrap().display()),
        &format!("cluster_cert={}", f.cert.display()),
        &format!("cluster_key={}", f.key.display()),
    ]);
    let (name, addr) = m.servers()[0].clone();
    let served = |ca_dir: &std::path::Path| {
        let n = node(Some(tls_files(ca_dir, "friend")));
        let ok = n.dial_server(&addr, &name).unwrap().report().is_ok();
        n.stop();
        ok
    };
    assert!(served(&old));
    assert!(!served(&new));
    // New files in place (a renewal with a new CA): the next connections
    // use them, without a restart.
    install(&new);
    assert!(
        tests::wait_until(Duration::from_secs(30), || served(&new)),
        "{}",
        tests::tail(&m.log_text(), 20)
    );
    assert!(!served(&old));
    assert!(m.log_text().contains("reloaded the TLS certificate"));
}

#[test]
fn the_public_api_bounds_streams_stopping_short_too() {
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback", "rpc_buffer=32m"]);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo kept > t/r/cf/q");
    let addr = m.grpc_addr();
    let pid = m.pid();
    let before = tests::rss_kib(pid);
    let rt = runtime();
    tests::reset_peak_rss(pid);
    let path = "/google.bigtable.v2.Bigtable/MutateRow";
    let answers = streams_stopping_short_on(&rt, &addr, path, 12, (80 << 20) - 1);
    let peak = tests::peak_rss_kib(pid);
    let grown_mib = peak.saturating_sub(before) / 1024;
    eprintln!("RSS {before} KiB before, {peak} KiB at the peak (+{grown_mib} MiB)");
    assert!(grown_mib < 200, "the daemon grew {grown_mib} MiB");
    assert!(answers.iter().any(|a| a.code == Some(8)), "{answers:?}");
    // A read request larger than a control call may be (4 MiB): refused
    // once its bytes pass that.
    rt.block_on(async {
        let a = raw::call(
            &addr,
            "/google.bigtable.v2.Bigtable/ReadRows",
            &[],
            &vec![0; 5 << 20],
        )
        .await;
        assert_eq!(a.code, Some(8), "{a:?}");
    });
    assert_eq!(m.ok("cat t/r/cf/q"), "kept\n");
}

#[test]
fn public_api_clients_may_present_certificates_of_the_client_ca_only() {
    use grpc::v2::bigtable_client::BigtableClient;
    use grpc::v2::PingAndWarmRequest;
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = (dir.path().join("ours"), dir.path().join("theirs"));
    certs(&ours, "server,alice");
    certs(&theirs, "mallory");
    let f = tls_files(&ours, "server");
    let m = Mount::with_options(&[
        "grpc=127.0.0.1:0",
        "grpc_trust_loopback",
        &format!("grpc_cert={}", f.cert.display()),
        &format!("grpc_key={}", f.key.display()),
        &format!("grpc_client_ca={}", f.ca.as_ref().unwrap().display()),
    ]);
    let addr = m.grpc_addr();
    let ca = std::fs::read(f.ca.as_ref().unwrap()).unwrap();
    let rt = runtime();
    let ping = |who: Option<(&std::path::Path, &str)>| {
        rt.block_on(async {
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&ca))
                .domain_name("127.0.0.1");
            if let Some((d, name)) = who {
                let cert = std::fs::read(d.join(format!("{name}.pem"))).unwrap();
                let key = std::fs::read(d.join(format!("{name}-key.pem"))).unwrap();
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            let channel = Endpoint::from_shared(format!("https://{addr}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .timeout(Duration::from_secs(20))
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            BigtableClient::new(channel)
                .ping_and_warm(PingAndWarmRequest {
                    name: "projects/p/instances/default".into(),
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    };
    assert_eq!(ping(None), Ok(()), "a client without a certificate");
    assert_eq!(ping(Some((&ours, "alice"))), Ok(()), "a client of the CA");
    let e = ping(Some((&theirs, "mallory")));
    assert!(e.is_err(), "another CA's client certificate was taken");
    let logged = tests::wait_until(Duration::from_secs(20), || {
        m.log_text()
            .contains("refused a connection to the gRPC API from 127.0.0.1: TLS")
    });
    assert!(logged, "{}", tests::tail(&m.log_text(), 20));
}

#[test]
fn silent_connections_are_closed_and_their_number_is_bounded() {
    use std::io::Read;
    let m = Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        "cluster_trust_loopback",
        "rpc_max_connections=4",
        "rpc_header_timeout=2",
    ]);
    let (_, addr) = m.servers()[0].clone();
    // Read until the server closes the connection (or 30 s pass).
    let closed = |c: &mut std::net::TcpStream| {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => return e.kind() != std::io::ErrorKind::WouldBlock,
            }
        }
    };
    let mut idle: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    // A fifth is closed at once (the four are within their 2 s).
    let mut fifth = std::net::TcpStream::connect(&addr).unwrap();
    assert!(closed(&mut fifth));
    // The silent four are closed after the header timeout...
    for c in &mut idle {
        assert!(closed(c), "a silent connection stayed open");
    }
    // ...and a caller that speaks is served again.
    let rt = runtime();
    rt.block_on(async {
        let a = raw::call(&addr, CALL, &[], &[0xff; 16]).await;
        assert_eq!(a.code, Some(3), "{a:?}");
    });
}

// The framed transport (`Call` and `Control` as length-prefixed frames on
// the same port, docs/internal-rpc.md): raw sockets.

/// Writes `bytes` on a new connection and returns what comes back until
/// the daemon closes it (or 20 s pass).
fn exchange(addr: &str, bytes: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
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

#[test]
fn garbage_huge_lengths_wrong_secrets_and_replays_on_the_framed_port_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = guarded_mount(&dir);
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
