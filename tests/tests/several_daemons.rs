#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Two daemons, one Bigtable: one serves (its tablet servers and master),
//! the other runs none (`tablet_servers=0`) and reaches them over the
//! internal RPC, both coordinating through one etcd. What either mount
//! writes, the other reads.

use std::sync::Arc;
use testkit::etcd::Etcd;
use tests::Mount;

/// `addr=` of every serving line of `.bigtable/servers`.
fn server_addrs(m: &Mount) -> Vec<String> {
    m.ok("cat .bigtable/servers")
        .lines()
        .filter(|l| l.contains(" state=serving "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("addr="))
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_client_only_daemon_reads_and_writes_what_another_serves() {
    let etcd = Arc::new(Etcd::start());
    let a = Mount::on_etcd(etcd.clone(), "/bt", &["cluster_listen=127.0.0.1:0"]);
    let mut b = Mount::on_etcd(
        etcd.clone(),
        "/bt",
        &["tablet_servers=0", "cluster_listen=127.0.0.1:0"],
    );
    // B serves nothing: every server it lists is A's.
    let addrs = server_addrs(&b);
    assert_eq!(addrs.len(), 3, "{}", b.ok("cat .bigtable/servers"));
    assert_eq!(addrs, server_addrs(&a));

    // A table made and written in A is read in B...
    a.table("ta", "cf\n");
    a.ok("mkdir -p ta/r1/cf && echo from-a > ta/r1/cf/q");
    assert_eq!(b.ok("cat ta/r1/cf/q"), "from-a\n");
    // ...one made and written in B is listed and read in A.
    b.table("tb", "cf\n");
    b.ok("mkdir -p tb/r2/cf && echo from-b > tb/r2/cf/q");
    assert!(a.ok("ls").lines().any(|l| l == "tb"), "{}", a.ok("ls"));
    assert_eq!(a.ok("cat tb/r2/cf/q"), "from-b\n");
    // A batch through B is there whole in A.
    b.mutate("ta", b"set r3 cf:x one\nset r4 cf:y two\n");
    assert_eq!(a.ok("cat ta/r3/cf/x ta/r4/cf/y"), "onetwo");
    // Scans in B cross the RPC in streams.
    assert_eq!(b.ok("ls ta"), "r1\nr3\nr4\n");

    // B's daemon dies: A, which holds everything, goes on.
    b.kill9();
    a.ok("echo after > ta/r1/cf/q2");
    assert_eq!(a.ok("cat ta/r1/cf/q ta/r1/cf/q2"), "from-a\nafter\n");
}
