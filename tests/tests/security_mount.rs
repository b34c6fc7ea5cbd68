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
