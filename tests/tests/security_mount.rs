#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Attacks on the daemon by a local user (uid 65534 through an
//! `allow_other` mount): each is performed for real and must be refused or
//! bounded, and the daemon must serve everyone afterwards.

use std::time::Duration;
use tests::{wait_until, Mount};

/// Whether the daemon still serves: a table can be made (which needs the
/// master), written and read back.
fn still_serves(m: &Mount, table: &str) {
    m.ok(&format!(
        "mkdir {table} && printf 'f\\n' > {table}/.schema && \
         printf 'set r f:q ok\\n' > {table}/.mutate"
    ));
    assert_eq!(m.ok(&format!("cat {table}/r/f/q")), "ok");
}

#[test]
fn nobody_cannot_read_lock_or_write_the_engines_lock_nodes() {
    let m = Mount::new();
    m.table("secret", "f\n");
    m.ok("chmod 0700 secret");
    for node in [
        "bigtable/master",
        "bigtable/root-tablet",
        "bigtable/numbers",
    ] {
        let o = m.sh_as_nobody(&format!("cat .chubby/{node}"));
        assert!(!o.status.success(), "nobody read {node}");
        for mode in ["-s", "-x"] {
            let o = m.sh_as_nobody(&format!("flock -n {mode} .chubby/{node} true"));
            assert!(!o.status.success(), "nobody took flock {mode} on {node}");
        }
    }
    for dir in ["bigtable/servers", "bigtable/tables"] {
        let o = m.sh_as_nobody(&format!("ls .chubby/{dir}"));
        assert!(!o.status.success(), "nobody listed {dir}");
    }
    let o = m.sh_as_nobody("ls .chubby/bigtable/tables/secret");
    assert!(!o.status.success());
    // A file of root's that others may read can no longer be locked by them.
    m.ok("echo cfg > .chubby/shared && chmod 0644 .chubby/shared");
    assert_eq!(m.sh_as_nobody("cat .chubby/shared").stdout, b"cfg\n");
    let o = m.sh_as_nobody("flock -n -x .chubby/shared true");
    assert!(!o.status.success(), "read permission took root's lock");
    // Their own files lock as before.
    let o = m.sh_as_nobody("echo x > .chubby/mine && flock -n -x .chubby/mine true");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    still_serves(&m, "after");
}

#[test]
fn a_standby_takes_over_although_nobody_tried_to_hold_the_master_lock() {
    let mut m = Mount::new();
    // The attack of issue 49: a reader's writer lock on the master file,
    // held while the daemon restarts.
    let mut holder = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "flock",
            "-x",
            ".chubby/bigtable/master",
            "sleep",
            "60",
        ])
        .current_dir(&m.mnt)
        .spawn()
        .unwrap();
    // flock fails at once (EACCES) rather than holding the lock.
    assert!(
        wait_until(Duration::from_secs(20), || holder
            .try_wait()
            .unwrap()
            .is_some()),
        "nobody's flock on the master file is still running"
    );
    let _ = holder.kill();
    let _ = holder.wait();
    m.remount();
    still_serves(&m, "after");
}

/// The daemon's resident memory, in KiB.
fn rss(m: &Mount) -> u64 {
    tests::rss_kib(m.pid())
}

/// `cat`'s stderr and whether it failed, reading `path` as nobody.
fn nobody_reads(m: &Mount, path: &str) -> (bool, String) {
    let o = m.sh_as_nobody(&format!("cat '{path}' > /dev/null"));
    (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn a_filter_that_doubles_every_cell_forty_times_is_refused() {
    let m = Mount::new();
    m.table("t", "f\n");
    let mut batch = String::new();
    for r in 0..20 {
        for q in 0..20 {
            batch.push_str(&format!("set r{r} f:q{q} {}\n", "v".repeat(100)));
        }
    }
    m.mutate("t", batch.as_bytes());
    let before = rss(&m);
    let filter = format!("chain({}all)", "interleave(all,all),".repeat(40));
    let (ok, err) = nobody_reads(&m, &format!("t/.scan/filter={filter}"));
    assert!(!ok, "the doubling filter was answered");
    assert!(err.contains("Argument list too long"), "{err}");
    let after = rss(&m);
    assert!(
        after < before + 256 * 1024,
        "the daemon grew from {before} to {after} KiB"
    );
    let stats = m.ok("cat .bigtable/stats");
    assert!(
        stats.lines().any(|l| l.starts_with("filter_limit_hits=") && l != "filter_limit_hits=0"),
        "{stats}"
    );
    assert!(m.log_text().contains("row filter refused"));
    // A filter that doubles once is served.
    let out = m.ok("cat 't/.scan/filter=chain(interleave(all,all),all)&limit=1'");
    assert_eq!(out.lines().count(), 40, "{out}");
    still_serves(&m, "after");
}

#[test]
fn the_scan_filter_parser_refuses_deep_nesting_and_small_limits_hold() {
    let m = Mount::with_options(&["filter_max_cells=100"]);
    m.table("t", "f\n");
    let mut batch = String::new();
    for q in 0..60 {
        batch.push_str(&format!("set r f:q{q} v\n"));
    }
    m.mutate("t", batch.as_bytes());
    let deep = format!("{}all{}", "chain(".repeat(100), ")".repeat(100));
    let (ok, err) = nobody_reads(&m, &format!("t/.scan/filter={deep}"));
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    // 60 cells doubled once: 120 > 100 copies.
    let (ok, err) = nobody_reads(&m, "t/.scan/filter=interleave(all,all)");
    assert!(!ok && err.contains("Argument list too long"), "{err}");
    // 60 cells through one branch: within the limit.
    let (ok, err) = nobody_reads(&m, "t/.scan/filter=interleave(all)");
    assert!(ok, "{err}");
    still_serves(&m, "after");
}
