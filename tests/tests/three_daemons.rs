#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Three daemons, one Bigtable: each runs a tablet server and a master
//! (one active in the whole cluster), all on one SeaweedFS bucket and
//! one etcd, calling each other over the internal RPC. What one mount
//! writes the others read; the death of a daemon is the death of a tablet
//! server (or of the master), which the others recover from the bucket.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::etcd::Etcd;
use testkit::seaweed::Seaweed;
use tests::{wait_until, Mount};

/// One bucket and one etcd the daemons share.
struct Shared {
    weed: Seaweed,
    etcd: Arc<Etcd>,
    secret: std::path::PathBuf,
    /// One cluster of this file at a time: three daemons, a SeaweedFS and
    /// an etcd already fill a 2-core machine.
    _turn: std::sync::MutexGuard<'static, ()>,
}

static TURN: Mutex<()> = Mutex::new(());

impl Shared {
    fn start(name: &str) -> Shared {
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let weed = Seaweed::start(name);
        let secret = weed.data_dir().join("cluster-secret");
        std::fs::write(&secret, "a-secret-of-more-than-sixteen-bytes\n").unwrap();
        // The daemon refuses a secret others can read.
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        Shared {
            weed,
            etcd: Arc::new(Etcd::start()),
            secret,
            _turn: turn,
        }
    }

    /// A daemon of the cluster: one tablet server, a master that may win
    /// the election, its RPC on a free loopback port.
    fn daemon(&self, extra: &[&str]) -> Mount {
        let w = &self.weed;
        let creds = w.credentials_file();
        let mut opts = vec![
            format!("store=s3://{}/bt", w.bucket),
            format!("s3_endpoint={}", w.endpoint),
            format!("s3_credentials={}", creds.display()),
            "tablet_servers=1".to_string(),
            // The tests split tablets on purpose: the master must not
            // merge the small halves back meanwhile.
            "merge=0".to_string(),
            "cluster_listen=127.0.0.1:0".to_string(),
            format!("cluster_secret_file={}", self.secret.display()),
        ];
        opts.extend(extra.iter().map(|s| s.to_string()));
        let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
        Mount::on_etcd(self.etcd.clone(), "/bt", &opts)
    }
}

/// A daemon started by hand (its mount may never come up), killed and
/// unmounted when dropped.
struct Stranger {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Stranger {
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        tests::unmount(&self.mnt);
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    /// A daemon on the cluster's bucket and etcd without the secret.
    fn stranger(&self) -> Stranger {
        let w = &self.weed;
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let creds = w.credentials_file();
        let opts = [
            format!("store=s3://{}/bt", w.bucket),
            format!("s3_endpoint={}", w.endpoint),
            format!("s3_credentials={}", creds.display()),
            format!("lock=etcd://{}/bt", self.etcd.endpoint),
            "etcd_lease=2".to_string(),
            "tablet_servers=1".to_string(),
            "merge=0".to_string(),
            "cluster_listen=127.0.0.1:0".to_string(),
            // Without the secret a daemon sharing the etcd must say it
            // trusts every local caller; the cluster still believes none of
            // its answers.
            "cluster_trust_loopback".to_string(),
        ];
        let log = std::fs::File::create(dir.path().join("mountd.log")).unwrap();
        let child = std::process::Command::new(tests::bin("bigtable-mountd"))
            .arg(dir.path().join("data"))
            .arg(&mnt)
            .arg("-f")
            .arg("-o")
            .arg(opts.join(","))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Stranger {
            child,
            _dir: dir,
            mnt,
        }
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

/// The live server daemon `d` runs, as `m` lists it.
fn server_of(m: &Mount, d: &Mount) -> Server {
    let addr = d.rpc_addr();
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
    // `kill` through A reaches C's server: its tablet is served elsewhere,
    // and C starts a server under a new name.
    a.control(&format!("kill {to}"));
    assert!(
        wait_until(Duration::from_secs(60), || !m_lists_server(&a, &to)
            && servers(&a).iter().filter(|s| s.state == "serving").count() == 3),
        "{:?}",
        servers(&a)
    );
    assert_eq!(c.ok("cat ta/r1/cf/q"), "from-a\n");
}

/// Writes one cell through the mount at `mnt`: its row and family
/// directories, then the value (acknowledged when the write returns).
fn write_cell(mnt: &Path, table: &str, row: &str, q: &str, value: &str) -> std::io::Result<()> {
    let dir = mnt.join(table).join(row).join("cf");
    std::fs::create_dir_all(&dir)?;
    tests::write_and_close(&dir.join(q), value.as_bytes())
}

#[test]
fn killing_the_daemon_with_most_tablets_loses_no_acknowledged_write() {
    let s = Shared::start("three-kill");
    // No balancing: the count balancer would move the victim's tablets
    // away between the operator's moves below.
    let a = s.daemon(&["no_balance"]);
    let b = s.daemon(&["no_balance"]);
    let mut c = s.daemon(&["no_balance"]);
    wait_serving(&a, 3);
    // Four tablets of one table, all on C's server: C hosts the most.
    a.table("w", "cf\n");
    for row in ["r2", "r4", "r6"] {
        a.control(&format!("split w {row}"));
    }
    assert!(
        wait_until(Duration::from_secs(30), || a.tablets("w").len() == 4),
        "{:?}",
        a.tablets("w")
    );
    let victim = server_of(&a, &c).name;
    for row in ["r0", "r2", "r4", "r6"] {
        a.control(&format!("move w {row} {victim}"));
    }
    assert!(
        a.tablets("w").iter().all(|(_, s)| *s == victim),
        "{:?}",
        a.tablets("w")
    );
    let most = servers(&a).into_iter().max_by_key(|s| s.tablets).unwrap();
    assert_eq!(most.name, victim, "{:?}", servers(&a));

    // Two writers through A and two through B, each writing new cells
    // across the four tablets; a reader through B checks what was acked.
    let acked: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..4 {
        let mnt: PathBuf = if i % 2 == 0 {
            a.mnt.clone()
        } else {
            b.mnt.clone()
        };
        let (acked, stop) = (acked.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                let row = format!("r{}", n % 8);
                let (q, v) = (format!("w{i}-{n}"), format!("value {i} {n}"));
                if write_cell(&mnt, "w", &row, &q, &v).is_ok() {
                    acked.lock().unwrap().push((row, q, v));
                }
                n += 1;
            }
        }));
    }
    let wrong = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let (mnt, acked, stop, wrong) = (b.mnt.clone(), acked.clone(), stop.clone(), wrong.clone());
        std::thread::spawn(move || {
            let mut k = 0usize;
            while !stop.load(Ordering::Acquire) {
                let pick = {
                    let a = acked.lock().unwrap();
                    (!a.is_empty()).then(|| a[k % a.len()].clone())
                };
                k += 7;
                let Some((row, q, v)) = pick else {
                    std::thread::yield_now();
                    continue;
                };
                // Errors are allowed while tablets move; a wrong value never.
                if let Ok(got) =
                    std::fs::read_to_string(mnt.join("w").join(&row).join("cf").join(&q))
                {
                    if got != v {
                        wrong.lock().unwrap().push((row, q, v, got));
                    }
                }
            }
        })
    };
    let acks = |n: usize| wait_until(Duration::from_secs(60), || acked.lock().unwrap().len() >= n);
    assert!(acks(40), "the writers made no progress");
    c.kill9();
    let killed = Instant::now();
    // The master reassigns the dead daemon's tablets; writes go on.
    assert!(
        wait_until(Duration::from_secs(90), || a
            .tablets("w")
            .iter()
            .all(|(_, s)| *s != victim)),
        "C's tablets were not reassigned: {:?}",
        a.tablets("w")
    );
    let before = acked.lock().unwrap().len();
    assert!(acks(before + 40), "no writes after the reassignment");
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().unwrap();
    }
    reader.join().unwrap();
    eprintln!(
        "{} writes acknowledged; C's tablets served again {:?} after the kill",
        acked.lock().unwrap().len(),
        killed.elapsed()
    );
    assert!(
        wrong.lock().unwrap().is_empty(),
        "wrong values read: {:?}",
        wrong.lock().unwrap()
    );
    // Every acknowledged write reads back through both surviving mounts.
    for m in [&a, &b] {
        for (row, q, v) in acked.lock().unwrap().iter() {
            let path = m.path(&format!("w/{row}/cf/{q}"));
            let got = std::fs::read_to_string(&path);
            assert_eq!(
                got.as_deref().ok(),
                Some(v.as_str()),
                "{}: {got:?}",
                path.display()
            );
        }
    }
    assert!(
        !m_lists_server(&a, &victim),
        "the dead daemon's server is still listed serving: {:?}",
        servers(&a)
    );
}

/// Whether `m` lists server `name` as serving.
fn m_lists_server(m: &Mount, name: &str) -> bool {
    servers(m)
        .iter()
        .any(|s| s.name == name && s.state == "serving")
}

/// The daemon whose master is active, by its log.
fn is_master(m: &Mount) -> bool {
    m.ok("cat .bigtable/master")
        .lines()
        .any(|l| l.contains(" state=active "))
}

#[test]
fn the_master_daemon_dies_and_another_takes_over() {
    let s = Shared::start("three-master");
    let mut a = s.daemon(&[]);
    let b = s.daemon(&[]);
    let c = s.daemon(&[]);
    wait_serving(&b, 3);
    assert!(is_master(&a), "{}", a.ok("cat .bigtable/master"));
    b.table("t", "cf\n");
    for r in 0..10 {
        write_cell(&b.mnt, "t", &format!("r{r}"), "q", &format!("v{r}")).unwrap();
    }
    a.kill9();
    assert!(
        wait_until(Duration::from_secs(60), || is_master(&b) || is_master(&c)),
        "no master took over:\nB: {}\nC: {}",
        b.ok("cat .bigtable/master"),
        c.ok("cat .bigtable/master")
    );
    // A split and a move made through the new master are served.
    b.control("split t r5");
    assert!(
        wait_until(Duration::from_secs(30), || b.tablets("t").len() == 2),
        "{:?}",
        b.tablets("t")
    );
    let to = server_of(&b, &c).name;
    b.control(&format!("move t r7 {to}"));
    assert!(
        wait_until(Duration::from_secs(30), || c
            .tablets("t")
            .iter()
            .any(|(start, s)| start == "r5" && *s == to)),
        "{:?}",
        c.tablets("t")
    );
    for r in 0..10 {
        assert_eq!(c.ok(&format!("cat t/r{r}/cf/q")), format!("v{r}"));
    }
    write_cell(&c.mnt, "t", "r8", "q2", "after").unwrap();
    assert_eq!(b.ok("cat t/r8/cf/q2"), "after");
}

#[test]
fn a_frozen_daemon_is_fenced_and_applies_nothing_twice() {
    let s = Shared::start("three-freeze");
    let a = s.daemon(&[]);
    let b = s.daemon(&[]);
    let c = s.daemon(&[]);
    wait_serving(&a, 3);
    a.table("n", "cf\n");
    let frozen = server_of(&a, &c).name;
    a.control(&format!("move n r {frozen}"));
    for _ in 0..3 {
        a.mutate("n", b"increment r cf:n 1\n");
    }
    let counter = |m: &Mount| {
        let o = m.ok("getfattr -n user.bigtable.counter --only-values n/r/cf/n");
        o.trim().parse::<i64>().unwrap()
    };
    assert_eq!(counter(&b), 3);

    // C freezes past its session, with an increment held in its mount.
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(c.pid() as i32, libc::SIGSTOP) };
    // The shell enters the mount itself: `current_dir` would chdir before
    // exec, and spawn() waits for the exec, which the frozen mount holds.
    let held = std::process::Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && printf 'increment r cf:n 1\n' > n/.mutate")
        .arg("sh")
        .arg(&c.mnt)
        .spawn()
        .unwrap();
    let resume = scopeguard_resume(c.pid());
    assert!(
        wait_until(Duration::from_secs(60), || a
            .tablets("n")
            .iter()
            .all(|(_, s)| *s != frozen)),
        "the frozen daemon's tablet was not reassigned: {:?}",
        a.tablets("n")
    );
    for _ in 0..3 {
        a.mutate("n", b"increment r cf:n 1\n");
    }
    assert_eq!(counter(&b), 6);
    drop(resume);
    // Woken, C finds its server fenced: the held increment goes to the
    // tablet's new server, once.
    let mut held = held;
    let mut status = None;
    let done = wait_until(Duration::from_secs(120), || {
        status = held.try_wait().unwrap();
        status.is_some()
    });
    if !done {
        let _ = held.kill();
        let _ = held.wait();
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the held increment failed or hung: {status:?}"
    );
    for m in [&a, &b, &c] {
        assert_eq!(counter(m), 7, "{}", m.mnt.display());
    }
    // C serves again under a new name; its old server is gone.
    assert!(
        wait_until(Duration::from_secs(60), || !m_lists_server(&a, &frozen)
            && servers(&a).iter().filter(|s| s.state == "serving").count() == 3),
        "{:?}",
        servers(&a)
    );
    assert_eq!(counter(&c), 7);
}

/// Sends SIGCONT to `pid` when dropped (also when the test fails while
/// the daemon is stopped, so that its mount can be cleaned up).
fn scopeguard_resume(pid: u32) -> impl Drop {
    struct Resume(u32);
    impl Drop for Resume {
        fn drop(&mut self) {
            // SAFETY: signalling the daemon the test started and stopped.
            unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
        }
    }
    Resume(pid)
}

#[test]
fn a_daemon_without_the_secret_gets_nothing_and_serves_nothing() {
    let s = Shared::start("three-stranger");
    let a = s.daemon(&[]);
    let b = s.daemon(&[]);
    wait_serving(&a, 2);
    a.table("t", "cf\n");
    for r in 0..4 {
        write_cell(&a.mnt, "t", &format!("r{r}"), "q", &format!("v{r}")).unwrap();
    }
    a.control("split t r2");
    // A third daemon on the same bucket and etcd, without the secret (on
    // loopback it may run without one), registers its server...
    let mut stranger = s.stranger();
    let own = [server_of(&a, &a).name, server_of(&a, &b).name];
    let mut theirs = String::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            theirs = servers(&a)
                .into_iter()
                .map(|s| s.name)
                .find(|n| !own.contains(n))
                .unwrap_or_default();
            !theirs.is_empty()
        }),
        "the stranger never registered: {:?}",
        servers(&a)
    );
    // ...but its calls are refused and logged, and the master believes no
    // answer from it: it gets no tablet, not even when told to take one.
    // It calls them as it starts; a read through its mount, once that is
    // up, makes it call again (its client must locate the table on a or b).
    // In a thread of its own, which the stranger's kill at the end
    // releases, since the stranger may never answer it.
    let (mnt, table) = (stranger.mnt.clone(), stranger.mnt.join("t"));
    std::thread::spawn(move || {
        if wait_until(Duration::from_secs(60), || {
            tests::mount_type(&mnt).is_some()
        }) {
            let _ = std::fs::read_dir(&table);
        }
    });
    assert!(
        wait_until(Duration::from_secs(60), || a
            .log_text()
            .contains("refused an internal call")
            || b.log_text().contains("refused an internal call")),
        "no refusal logged"
    );
    let o = a.sh(&format!("echo 'move t r0 {theirs}' > .bigtable/control"));
    assert!(!o.status.success(), "a move to the stranger was accepted");
    for _ in 0..3 {
        assert!(
            a.tablets("t").iter().all(|(_, s)| *s != theirs),
            "{:?}",
            a.tablets("t")
        );
        for r in 0..4 {
            assert_eq!(b.ok(&format!("cat t/r{r}/cf/q")), format!("v{r}"));
        }
    }
    stranger.stop();
}

#[test]
fn a_snapshot_spans_two_daemons_servers_and_clones_through_either_daemon() {
    let s = Shared::start("three-snapshots");
    let a = s.daemon(&[]);
    let b = s.daemon(&[]);
    for m in [&a, &b] {
        wait_serving(m, 2);
    }
    a.table("t", "cf\n");
    a.ok("mkdir -p t/r1/cf t/r5/cf && echo one > t/r1/cf/q && echo five > t/r5/cf/q");
    // Two tablets, one on each daemon's server.
    a.control("split t r3");
    assert!(
        wait_until(Duration::from_secs(30), || a.tablets("t").len() == 2),
        "{:?}",
        a.tablets("t")
    );
    // The first tablet (listed from `%`) on A's server, the second on B's.
    let (on_a, on_b) = (server_of(&a, &a).name, server_of(&a, &b).name);
    for (row, start, to) in [("r1", "%", &on_a), ("r5", "r3", &on_b)] {
        if !a.tablets("t").contains(&(start.to_string(), to.clone())) {
            a.control(&format!("move t {row} {to}"));
        }
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            let t = a.tablets("t");
            t.len() == 2 && t[0].1 != t[1].1
        }),
        "{:?}",
        a.tablets("t")
    );
    // Taken through B: the hold and the release reach A's server by RPC.
    b.ok("mkdir t/.snapshots/s");
    a.ok("echo later > t/r5/cf/q && echo later > t/r1/cf/q");
    assert_eq!(b.ok("ls t/.snapshots/"), "s\n");
    assert_eq!(a.ok("ls t/.snapshots/"), "s\n");
    for m in [&a, &b] {
        assert_eq!(
            m.ok("cat t/.snapshots/s/r1/cf/q t/.snapshots/s/r5/cf/q"),
            "one\nfive\n"
        );
    }
    // A clone through each daemon: one of them holds the master.
    for (m, c) in [(&a, "ca"), (&b, "cb")] {
        m.control(&format!("clone t s {c}"));
        assert_eq!(m.ok(&format!("cat {c}/r1/cf/q {c}/r5/cf/q")), "one\nfive\n");
    }
    assert_eq!(a.ok("cat t/r5/cf/q"), "later\n");
    b.ok("rmdir t/.snapshots/s");
    assert_eq!(a.ok("ls t/.snapshots/"), "");
    assert_eq!(b.ok("cat cb/r5/cf/q"), "five\n");
}
