#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The internal RPC between daemons (`-o cluster_listen=…`): a daemon whose
//! client and master reach its own tablet servers through it behaves as one
//! that calls them in process, its servers say where others reach them, and
//! a caller without the cluster's secret is refused.

use std::time::Duration;
use tests::Mount;

const SECRET: &str = "e2e-cluster-secret-0123456789";

/// A daemon that sends all its requests through the internal RPC.
fn mount_over_rpc(dir: &tempfile::TempDir) -> Mount {
    let secret = dir.path().join("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    // The daemon refuses a secret others can read.
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    Mount::with_options(&[
        "cluster_listen=127.0.0.1:0",
        &format!("cluster_secret_file={}", secret.display()),
        "cluster_dial_self",
    ])
}

#[test]
fn a_daemon_whose_requests_cross_the_internal_rpc_serves_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let m = mount_over_rpc(&dir);
    let listed = m.servers();
    assert_eq!(listed.len(), 3, "{listed:?}");
    for (name, addr) in &listed {
        assert!(addr.starts_with("127.0.0.1:"), "{name} registered {addr:?}");
    }
    m.table("t", "cf\n");
    m.ok("for i in 0 1 2 3 4 5 6 7 8 9; do mkdir -p t/row$i/cf; echo value$i > t/row$i/cf/q; done");
    assert_eq!(m.ok("cat t/row7/cf/q"), "value7\n");
    assert_eq!(m.ok("ls t | wc -l").trim(), "10");
    // A batch is applied whole.
    m.mutate("t", b"set row1 cf:a one\nset row2 cf:b two\n");
    assert_eq!(m.ok("cat t/row1/cf/a t/row2/cf/b"), "onetwo");
    // A server killed through the control file (a call to it over the RPC)
    // is replaced; its tablets come back elsewhere with every value.
    let (victim, _) = listed[0].clone();
    m.ok(&format!("echo 'kill {victim}' > .bigtable/control"));
    let back = tests::wait_until(Duration::from_secs(60), || {
        !m.servers().iter().any(|(n, _)| *n == victim)
    });
    assert!(
        back,
        "{victim} still listed:\n{}",
        m.ok("cat .bigtable/servers")
    );
    for i in 0..10 {
        assert_eq!(m.ok(&format!("cat t/row{i}/cf/q")), format!("value{i}\n"));
    }
    assert!(
        !m.log_text().contains("refused an internal call"),
        "the daemon refused itself:\n{}",
        tests::tail(&m.log_text(), 30)
    );
}

#[test]
fn a_caller_without_the_cluster_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = mount_over_rpc(&dir);
    m.table("t", "cf\n");
    m.ok("mkdir -p t/r/cf && echo secret-value > t/r/cf/q");
    let (name, addr) = m.servers()[0].clone();
    let local = "127.0.0.1:0".parse().unwrap();
    // With the cluster's secret, a stranger's node reaches the server...
    let good = grpc::internal::Secret::new(SECRET).unwrap();
    let friend = grpc::internal::Node::start(local, Some(good)).unwrap();
    let s = friend.dial_server(&addr, &name).unwrap();
    assert!(s.report().is_ok(), "the right secret is accepted");
    // ...without it, nothing: no reads, no loads, no unloads.
    let bad = grpc::internal::Secret::new("not-the-cluster-secret-42").unwrap();
    for secret in [Some(bad), None] {
        let stranger = grpc::internal::Node::start(local, secret).unwrap();
        let s = stranger.dial_server(&addr, &name).unwrap();
        let ids = s.tablet_ids();
        assert!(ids.is_err(), "listed tablets: {ids:?}");
        let e = s.unload(1).unwrap_err().to_string();
        assert!(e.contains("refused"), "{e}");
        let read = s.read_row(1, b"r", &engine::ScanSpec::default());
        assert!(read.is_err(), "read: {read:?}");
        stranger.stop();
    }
    let refused = tests::wait_until(Duration::from_secs(10), || {
        m.log_text().contains("refused an internal call")
    });
    assert!(refused, "the refusals are logged");
    assert_eq!(
        m.ok("cat t/r/cf/q"),
        "secret-value\n",
        "nothing was unloaded"
    );
    friend.stop();
}
