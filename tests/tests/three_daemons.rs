#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Three daemons, one Bigtable: each runs a tablet server and a master
//! (one active in the whole cluster), all on one SeaweedFS bucket and
//! one etcd, calling each other over the internal RPC. What one mount
//! writes the others read; the death of a daemon is the death of a tablet
//! server (or of the master), which the others recover from the bucket.

use std::sync::Arc;
use std::time::Duration;
use testkit::etcd::Etcd;
use testkit::seaweed::{Seaweed, ACCESS_KEY, SECRET_KEY};
use tests::{wait_until, Mount};

/// One bucket and one etcd the daemons share.
struct Shared {
    weed: Seaweed,
    etcd: Arc<Etcd>,
    secret: std::path::PathBuf,
}

impl Shared {
    fn start(name: &str) -> Shared {
        let weed = Seaweed::start(name);
        let secret = weed.data_dir().join("cluster-secret");
        std::fs::write(&secret, "a-secret-of-more-than-sixteen-bytes\n").unwrap();
        Shared {
            weed,
            etcd: Arc::new(Etcd::start()),
            secret,
        }
    }

    /// A daemon of the cluster: one tablet server, a master that may win
    /// the election, its RPC on a free loopback port.
    fn daemon(&self, extra: &[&str]) -> Mount {
        let w = &self.weed;
        let creds = w.data_dir().join("credentials");
        std::fs::write(
            &creds,
            format!(
                "[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
            ),
        )
        .unwrap();
        let mut opts = vec![
            format!("store=s3://{}/bt", w.bucket),
            format!("s3_endpoint={}", w.endpoint),
            format!("s3_credentials={}", creds.display()),
            "tablet_servers=1".to_string(),
            "cluster_listen=127.0.0.1:0".to_string(),
            format!("cluster_secret_file={}", self.secret.display()),
        ];
        opts.extend(extra.iter().map(|s| s.to_string()));
        let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
        Mount::on_etcd(self.etcd.clone(), "/bt", &opts)
    }
}

/// One line of `.bigtable/servers`.
#[derive(Debug, Clone)]
struct Server {
    name: String,
    state: String,
    tablets: usize,
    addr: String,
}

/// Every server of the cluster, as `.bigtable/servers` in `m` lists them.
fn servers(m: &Mount) -> Vec<Server> {
    m.ok("cat .bigtable/servers")
        .lines()
        .map(|l| {
            let f = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .unwrap_or_default()
                    .to_string()
            };
            Server {
                name: f("server="),
                state: f("state="),
                tablets: f("tablets=").parse().unwrap_or(0),
                addr: f("addr="),
            }
        })
        .collect()
}

/// The address a daemon's internal RPC listens on, as it logged it.
fn rpc_addr(m: &Mount) -> String {
    let mut addr = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            addr = m.log_text().lines().find_map(|l| {
                l.split("serving the cluster's internal RPC on ")
                    .nth(1)
                    .map(|a| a.trim().to_string())
            });
            addr.is_some()
        }),
        "no internal RPC in the log:\n{}",
        m.log_text()
    );
    addr.unwrap_or_default()
}

/// The live server daemon `d` runs, as `m` lists it.
fn server_of(m: &Mount, d: &Mount) -> Server {
    let addr = rpc_addr(d);
    let all = servers(m);
    all.iter()
        .find(|s| s.addr == addr && s.state == "serving")
        .cloned()
        .unwrap_or_else(|| panic!("no serving server at {addr}: {all:?}"))
}

/// Waits until `m` lists `n` serving servers.
fn wait_serving(m: &Mount, n: usize) {
    assert!(
        wait_until(Duration::from_secs(60), || servers(m)
            .iter()
            .filter(|s| s.state == "serving")
            .count()
            == n),
        "waiting for {n} serving servers: {:?}",
        servers(m)
    );
}

#[test]
fn three_daemons_serve_one_bigtable() {
    let s = Shared::start("three-basic");
    let a = s.daemon(&[]);
    let b = s.daemon(&[]);
    let c = s.daemon(&[]);
    // Every daemon lists the three servers, all serving.
    for m in [&a, &b, &c] {
        wait_serving(m, 3);
    }
    // A value written through A reads back through B and C.
    a.table("ta", "cf\n");
    a.ok("mkdir -p ta/r1/cf && echo from-a > ta/r1/cf/q");
    assert_eq!(b.ok("cat ta/r1/cf/q"), "from-a\n");
    assert_eq!(c.ok("cat ta/r1/cf/q"), "from-a\n");
    // A table made in B is listed in A and C.
    b.table("tb", "cf\n");
    b.ok("mkdir -p tb/r2/cf && echo from-b > tb/r2/cf/q");
    for m in [&a, &c] {
        assert!(
            wait_until(Duration::from_secs(5), || m
                .ok("ls")
                .lines()
                .any(|l| l == "tb")),
            "{}",
            m.ok("ls")
        );
        assert_eq!(m.ok("cat tb/r2/cf/q"), "from-b\n");
    }
    // A batch through C is seen whole from A.
    c.mutate("ta", b"set r3 cf:x one\nset r4 cf:y two\n");
    assert_eq!(a.ok("cat ta/r3/cf/x ta/r4/cf/y"), "onetwo");
    // Tablets spread over the daemons: moving one to C's server is served.
    let to = server_of(&a, &c).name;
    a.ok(&format!("echo 'move ta r1 {to}' > .bigtable/control"));
    assert!(
        wait_until(Duration::from_secs(10), || a
            .ok("cat .bigtable/tablets")
            .lines()
            .any(|l| l.contains("ta") && l.contains(&to))),
        "{}",
        a.ok("cat .bigtable/tablets")
    );
    assert_eq!(b.ok("cat ta/r1/cf/q ta/r3/cf/x"), "from-a\none");
}

#[test]
#[ignore]
fn debug_hold() {
    let s = Shared::start("three-debug");
    let a = s.daemon(&["log=debug"]);
    let b = s.daemon(&["log=debug"]);
    let c = s.daemon(&["log=debug"]);
    for m in [&a, &b, &c] {
        println!("MOUNT {} LOG {}", m.mnt.display(), m.log.display());
    }
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    wait_until(Duration::from_secs(3000), || {
        std::path::Path::new("/tmp/x/stop").exists()
    });
}
