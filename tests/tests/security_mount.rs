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
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
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
    eprintln!("daemon RSS {before} KiB before the attack, {after} KiB after");
    assert!(
        after < before + 256 * 1024,
        "the daemon grew from {before} to {after} KiB"
    );
    let stats = m.ok("cat .bigtable/stats");
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("filter_limit_hits=") && l != "filter_limit_hits=0"),
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

/// A table anyone may write, with a family anyone may write.
fn open_table(m: &Mount, name: &str) {
    m.table(name, "f mode=0777\n");
    m.ok(&format!("chmod 0777 {name}"));
}

#[test]
fn a_mutate_line_without_newline_is_bounded() {
    let m = Mount::with_options(&["mutate_max_line=1m"]);
    open_table(&m, "t");
    let before = rss(&m);
    // 64 MiB of one unfinished line.
    let o = m.sh_as_nobody("head -c 67108864 /dev/zero | tr '\\0' a > t/.mutate");
    assert!(!o.status.success(), "an endless line was taken");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("File too large"), "{err}");
    let after = rss(&m);
    eprintln!("daemon RSS {before} KiB before the attack, {after} KiB after");
    assert!(
        after < before + 48 * 1024,
        "the daemon grew from {before} to {after} KiB"
    );
    still_serves(&m, "after");
}

#[test]
fn sixty_four_appends_to_one_cell_cost_one_value() {
    let m = Mount::new();
    open_table(&m, "t");
    let before = rss(&m);
    let o = m.sh_as_nobody(
        "v=$(head -c 131072 /dev/zero | tr '\\0' a); \
         for i in $(seq 64); do echo \"append r f:q $v\"; done > t/.mutate",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(m.ok("wc -c < t/r/f/q").trim(), (64 * 131072).to_string());
    let after = rss(&m);
    eprintln!("daemon RSS {before} KiB before the attack, {after} KiB after");
    // Applied one by one they held 1.66 GB; folded, a few copies of 8 MiB.
    assert!(
        after < before + 400 * 1024,
        "the daemon grew from {before} to {after} KiB"
    );
    still_serves(&m, "after");
}

#[test]
fn sparse_writes_to_open_cells_are_held_to_the_users_share() {
    let m = Mount::with_options(&["write_buffer_uid=100m"]);
    open_table(&m, "t");
    m.ok("printf 'set r0 f:x 1\\nset r1 f:x 1\\nset r2 f:x 1\\n' > t/.mutate");
    // Each open cell takes a 1-byte write at 64 MiB - 1; all stay open.
    let script = r#"
import errno, os
fds, out = [], []
for i in range(3):
    fd = os.open("t/r%d/f/q" % i, os.O_WRONLY | os.O_CREAT, 0o644)
    fds.append(fd)
    try:
        os.pwrite(fd, b"x", (64 << 20) - 1)
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(" ".join(out))
for fd in fds:
    try:
        os.close(fd)
    except OSError:
        pass
"#;
    let o = m.sh_as_nobody(&format!("/usr/bin/python3 -c '{script}'"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.trim(),
        "ok EDQUOT EDQUOT",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let stats = m.ok("cat .bigtable/stats");
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("write_buffer_refusals=") && l != "write_buffer_refusals=0"),
        "{stats}"
    );
    // Closed, they give their bytes back (RELEASE may follow close a little).
    assert!(wait_until(Duration::from_secs(20), || m
        .ok("cat .bigtable/stats")
        .contains("write_buffer_bytes=0\n")));
    still_serves(&m, "after");
}

#[test]
fn another_users_schema_write_cannot_change_a_family_it_may_not_write() {
    let m = Mount::new();
    m.table("t", "f mode=0700\ng mode=0777\n");
    m.ok("chmod 0777 t && printf 'set r f:secret s\\nset b g:open o\\n' > t/.mutate");
    let before = m.ok("cat t/.schema");
    let o = m.sh_as_nobody("printf 'f max_age=1ms\\n' >> t/.schema");
    assert!(!o.status.success(), "nobody changed f's settings");
    assert_eq!(m.ok("cat t/.schema"), before);
    assert_eq!(m.ok("cat t/r/f/secret"), "s");
    // A scan answers nothing about f: the first row nobody sees is b.
    let o = m.sh_as_nobody("cat 't/.scan/limit=1'");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("b\t"), "{out}");
    let o = m.sh_as_nobody("cat 't/.scan/column=f:s.*'");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    still_serves(&m, "after");
}

#[test]
fn tablet_boundaries_of_a_private_table_are_hidden_from_others() {
    // No merges: the master would merge the split's two small halves back.
    let m = Mount::with_options(&["merge=0"]);
    m.table("private", "f\n");
    m.ok("chmod 0700 private && printf 'set secretkey f:q 1\\nset zz f:q 1\\n' > private/.mutate");
    m.ok("echo 'split private secretkey' > .bigtable/control");
    assert!(wait_until(Duration::from_secs(30), || m
        .ok("cat .bigtable/tablets")
        .contains("secretkey")));
    let o = m.sh_as_nobody("cat .bigtable/tablets");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("private "), "{out}");
    assert!(!out.contains("secretkey"), "{out}");
    still_serves(&m, "after");
}

#[test]
fn each_user_is_held_to_a_quota_in_the_lock_directory() {
    let m = Mount::with_options(&["chubby_nodes=20", "chubby_bytes=64k"]);
    let o = m.sh_as_nobody(
        "cd .chubby && i=0; while [ $i -lt 40 ]; do touch f$i || exit 7; i=$((i+1)); done",
    );
    assert!(!o.status.success(), "nobody made 40 nodes");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Disk quota exceeded"), "{err}");
    assert_eq!(m.ok("ls .chubby | grep -c '^f'").trim(), "20");
    assert!(m
        .ok("cat .chubby/.status")
        .contains("quota nodes 20 bytes 65536 refusals 1"));
    // Bytes: 64 KiB in all, whatever the number of files.
    m.sh_as_nobody("rm -f .chubby/f1* .chubby/f2* .chubby/f3*");
    let o = m.sh_as_nobody(
        "head -c 40000 /dev/zero > .chubby/f1 && head -c 40000 /dev/zero > .chubby/f2",
    );
    assert!(!o.status.success(), "nobody stored 80,000 bytes");
    // Root is not held to it, and the daemon serves.
    m.ok("for i in $(seq 30); do : > .chubby/root$i; done");
    still_serves(&m, "after");
}

#[test]
fn a_scan_of_a_table_whose_families_are_all_unreadable_shows_nothing() {
    let m = Mount::new();
    m.table("closed", "f mode=0700\n");
    m.ok("printf 'set r f:secret s\\n' > closed/.mutate");
    for q in ["all", "limit=1", "column=f:.*", "filter=qualifier(secret)"] {
        let o = m.sh_as_nobody(&format!("cat 'closed/.scan/{q}'"));
        assert!(
            o.stdout.is_empty(),
            "{q}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    assert_eq!(m.ok("cat 'closed/.scan/all'").lines().count(), 1);
}
