#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The mount with its tables in an S3 bucket (SeaweedFS on loopback):
//! cells survive `kill -9` of the daemon and come back on another data
//! directory, since everything the engine stores is in the bucket.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::seaweed::{Seaweed, ACCESS_KEY, SECRET_KEY};
use tests::Mount;

/// The `-o` options of a mount on `w`'s bucket, keys from a credentials
/// file (as an fstab line would have them).
fn s3_options(w: &Seaweed, prefix: &str) -> Vec<String> {
    let creds = w.credentials_file();
    vec![
        format!("store=s3://{}/{prefix}", w.bucket),
        format!("s3_endpoint={}", w.endpoint),
        format!("s3_credentials={}", creds.display()),
    ]
}

fn mount_on(w: &Seaweed, prefix: &str) -> Mount {
    let opts = s3_options(w, prefix);
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    Mount::with_options(&opts)
}

#[test]
fn cells_live_in_the_bucket() {
    let w = Seaweed::start("mount-basic");
    let mut m = mount_on(&w, "t");
    m.table("web", "contents\n");
    m.ok("mkdir -p web/com.cnn.www/contents && echo '<html>' > web/com.cnn.www/contents/page");
    assert_eq!(m.ok("cat web/com.cnn.www/contents/page"), "<html>\n");
    let status = m.ok("cat .bigtable/status");
    assert!(
        status.contains("s3 s3://mount-basic/t requests"),
        "{status}"
    );
    assert!(!status.contains(SECRET_KEY) && !status.contains(ACCESS_KEY));
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(SECRET_KEY));
    m.remount();
    assert_eq!(m.ok("cat web/com.cnn.www/contents/page"), "<html>\n");
    // Another data directory on the same bucket sees the same table.
    m.stop();
    let other = mount_on(&w, "t");
    assert_eq!(other.ok("cat web/com.cnn.www/contents/page"), "<html>\n");
}

#[test]
fn kill_9_during_writers_loses_nothing_acknowledged() {
    let w = Seaweed::start("mount-kill");
    let mut m = mount_on(&w, "k");
    m.table("t", "f\n");
    let acked = m.data.with_file_name("acked");
    std::fs::create_dir_all(&acked).unwrap();
    let acked_s = acked.display().to_string();
    // Four writers; each records a cell only once its close returned (dd
    // reports a failed close, where a shell's `echo >` ignores it).
    let writers = m.sh(&format!(
        "for w in 0 1 2 3; do \
           (mkdir -p t/r$w/f; i=0; while [ $i -lt 100000 ]; do \
              echo v$w-$i | dd of=t/r$w/f/c$i status=none || exit 0; echo c$i >> {acked_s}/$w; i=$((i + 1)); \
            done) >/dev/null 2>&1 & \
         done; \
         until [ \"$(cat {acked_s}/* 2>/dev/null | wc -l)\" -ge 60 ]; do sleep 0.05; done"
    ));
    assert!(writers.status.success(), "{writers:?}");
    m.kill9();
    // The writers fail once the daemon is gone; let their loops end.
    let _ = tests::wait_until(Duration::from_secs(30), || {
        std::process::Command::new("pgrep")
            .args(["-f", &format!("{acked_s}/")])
            .output()
            .is_ok_and(|o| o.stdout.is_empty())
    });
    let again = mount_on(&w, "k");
    let mut checked = 0;
    let mut missing = Vec::new();
    for w in 0..4 {
        let list = std::fs::read_to_string(acked.join(w.to_string())).unwrap_or_default();
        for c in list.lines() {
            let i = c.trim_start_matches('c');
            match std::fs::read_to_string(again.path(&format!("t/r{w}/f/{c}"))) {
                Ok(got) => assert_eq!(got, format!("v{w}-{i}\n")),
                Err(e) => missing.push(format!("t/r{w}/f/{c} ({e})")),
            }
            checked += 1;
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {checked} acknowledged cells are gone: {missing:?}\nfirst daemon:\n{}\nsecond daemon:\n{}",
        missing.len(),
        tests::tail(&m.log_text(), 40),
        tests::tail(&again.log_text(), 40)
    );
    assert!(checked >= 60, "only {checked} cells were checked");
}

/// Writes `value` to cell `path` inside the mount with dd (which reports a
/// failed close); true if the close returned success.
fn write_cell(m: &Mount, path: &str, value: &str) -> bool {
    m.sh(&format!(
        "echo {value} | timeout 300 dd of={path} status=none"
    ))
    .status
    .success()
}

#[test]
fn a_store_that_goes_away_fails_writes_and_the_mount_recovers() {
    let mut w = Seaweed::start("mount-away");
    let mut opts = s3_options(&w, "a");
    opts.push("s3_timeout=3".into());
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let m = Mount::with_options(&opts);
    m.table("t", "f\n");
    m.ok("mkdir -p t/r/f");
    assert!(write_cell(&m, "t/r/f/before", "before"));

    // Frozen: a write fails within a bounded time, and is not acknowledged.
    w.pause();
    let t = std::time::Instant::now();
    let acked = write_cell(&m, "t/r/f/frozen", "frozen");
    let took = t.elapsed();
    w.resume();
    assert!(
        !acked,
        "a write was acknowledged while the store was frozen"
    );
    assert!(
        took < Duration::from_secs(200),
        "the write hung for {took:?}"
    );
    // Reads of what the daemon holds keep working.
    assert_eq!(m.ok("cat t/r/f/before"), "before\n");

    // Back: writes work again without a remount.
    let back = tests::wait_until(Duration::from_secs(120), || {
        write_cell(&m, "t/r/f/after", "after")
    });
    assert!(
        back,
        "writes still fail after the store came back:\n{}",
        tests::tail(&m.log_text(), 30)
    );

    // Killed and restarted on its directory: the same.
    w.restart();
    let back = tests::wait_until(Duration::from_secs(120), || {
        write_cell(&m, "t/r/f/restarted", "restarted")
    });
    assert!(
        back,
        "writes still fail after the store restarted:\n{}",
        tests::tail(&m.log_text(), 30)
    );
    for c in ["before", "after", "restarted"] {
        assert_eq!(m.ok(&format!("cat t/r/f/{c}")), format!("{c}\n"));
    }
}

#[test]
fn a_second_daemon_on_the_prefix_fences_the_first() {
    let w = Seaweed::start("mount-fence");
    let a = mount_on(&w, "f");
    a.table("t", "f\n");
    a.ok("mkdir -p t/r/f");
    for i in 0..5 {
        assert!(write_cell(&a, &format!("t/r/f/a{i}"), &format!("a{i}")));
    }
    // a keeps writing while b takes the prefix over; a cell counts as
    // acknowledged once dd's close returned.
    let acked = a.data.with_file_name("acked-by-a");
    let acked_s = acked.display().to_string();
    let writer = a.sh(&format!(
        "(i=0; while [ $i -lt 100000 ]; do \
            echo w$i | timeout 300 dd of=t/r/f/w$i status=none || exit 0; echo w$i >> {acked_s}; i=$((i + 1)); \
          done) >/dev/null 2>&1 & \
         until [ \"$(wc -l < {acked_s} 2>/dev/null)\" -ge 5 ]; do sleep 0.05; done"
    ));
    assert!(writer.status.success(), "{writer:?}");
    // Nothing either daemon writes is ever overwritten: a poller lists the
    // prefix over and over, and every log segment or SSTable it sees keeps
    // its first ETag for as long as it exists (only OWNER and descriptors
    // replaced by compare-and-swap change in place).
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (stop, w) = (
            Arc::clone(&stop),
            Endpoint {
                bucket: w.bucket.clone(),
                url: w.endpoint.clone(),
            },
        );
        std::thread::spawn(move || {
            let mut seen: BTreeMap<String, String> = BTreeMap::new();
            let mut overwritten = Vec::new();
            let mut lists = 0;
            while !stop.load(Ordering::Acquire) || lists < 2 {
                for (key, etag) in objects(&w, "f") {
                    let immutable = key.contains("/logs/") || key.ends_with(".sst");
                    match seen.get(&key) {
                        Some(first) if immutable && *first != etag => overwritten.push(key),
                        Some(_) => {}
                        None => {
                            seen.insert(key, etag);
                        }
                    }
                }
                lists += 1;
            }
            (seen, overwritten, lists)
        })
    };
    let b = mount_on(&w, "f");
    // Everything a acknowledged before b started is there for b, and b writes.
    for i in 0..5 {
        assert_eq!(b.ok(&format!("cat t/r/f/a{i}")), format!("a{i}\n"));
    }
    assert!(write_cell(&b, "t/r/f/b0", "b0"));
    // a learns it was fenced and acknowledges nothing more.
    let fenced = tests::wait_until(Duration::from_secs(30), || {
        a.ok("cat .bigtable/status").contains("fenced=true")
    });
    assert!(fenced, "{}", a.ok("cat .bigtable/status"));
    assert!(
        !write_cell(&a, "t/r/f/late", "late"),
        "a fenced daemon acknowledged a write"
    );
    assert!(a.log_text().contains("fenced"));
    assert_eq!(b.ok("cat t/r/f/b0"), "b0\n");
    assert!(b.fails("cat t/r/f/late").contains("No such file"));
    // a's writer has stopped (its writes fail once it is fenced). Every
    // cell it had acknowledged is there for b: either logged before b
    // sealed a's logs, or refused.
    let _ = tests::wait_until(Duration::from_secs(60), || {
        std::process::Command::new("pgrep")
            .args(["-f", &acked_s])
            .output()
            .is_ok_and(|o| o.stdout.is_empty())
    });
    let list = std::fs::read_to_string(&acked).unwrap_or_default();
    assert!(list.lines().count() >= 5, "{list}");
    for c in list.lines() {
        assert_eq!(b.ok(&format!("cat t/r/f/{c}")), format!("{c}\n"));
    }
    stop.store(true, Ordering::Release);
    let (seen, overwritten, lists) = poller.join().unwrap();
    assert!(overwritten.is_empty(), "overwritten: {overwritten:?}");
    assert!(
        lists >= 2 && seen.keys().any(|k| k.contains("/logs/")),
        "{lists} listings, {seen:?}"
    );
}

/// Where a bucket is, for a thread that lists it.
struct Endpoint {
    bucket: String,
    url: String,
}

/// Key → ETag of every object under `prefix` in `w`'s bucket, listed
/// without taking the prefix over.
fn objects(w: &Endpoint, prefix: &str) -> BTreeMap<String, String> {
    let mut cfg = objstore::S3Config::from_url(&format!("s3://{}/{prefix}", w.bucket)).unwrap();
    cfg.endpoint = Some(w.url.clone());
    cfg.credentials = Some(objstore::Credentials {
        access_key_id: ACCESS_KEY.into(),
        secret_access_key: SECRET_KEY.into(),
        session_token: None,
    });
    objstore::inventory(&cfg)
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.etag.unwrap_or_default()))
        .collect()
}

/// Data in the bucket and the lock service on etcd: the daemon keeps
/// nothing on its own disk that another machine needs. Its machine lost
/// (`kill -9`, and its data directory never used again), a daemon on a
/// fresh data directory finds the cells, the tables' permissions (held by
/// the lock service) and the files of `.chubby/`.
#[test]
fn a_daemon_on_s3_and_etcd_is_replaced_by_one_on_another_data_directory() {
    let w = Seaweed::start("mount-etcd");
    let etcd = Arc::new(testkit::etcd::Etcd::start());
    let opts = s3_options(&w, "e");
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let mut a = Mount::on_etcd(etcd.clone(), "/e", &opts);
    let status = a.ok("cat .bigtable/status");
    assert!(
        status.contains("lock_backend=etcd") && status.contains("s3 s3://mount-etcd/e"),
        "{status}"
    );
    a.table("t", "f\n");
    a.ok("mkdir -p t/r/f && chmod 750 t");
    assert!(write_cell(&a, "t/r/f/c", "v"));
    a.ok("echo leader-1 > .chubby/app");
    a.kill9();

    let b = Mount::on_etcd(etcd.clone(), "/e", &opts);
    assert_ne!(a.data, b.data);
    assert_eq!(b.ok("cat t/r/f/c"), "v\n");
    assert_eq!(b.ok("stat -c %a t").trim(), "750");
    assert_eq!(b.ok("cat .chubby/app"), "leader-1\n");
    assert!(write_cell(&b, "t/r/f/d", "w"));
    assert_eq!(b.ok("cat t/r/f/d"), "w\n");
}
