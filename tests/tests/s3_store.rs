#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The object-store file layer against a real S3 server (SeaweedFS on
//! loopback): files written once, logs of put-if-absent segments,
//! descriptors by compare-and-swap, fencing of a second daemon, the disk
//! cache, and a store that goes away and comes back.

use gfs::FileStore;
use objstore::{Credentials, S3Config, S3Store};
use std::time::{Duration, Instant};
use testkit::seaweed::{Seaweed, ACCESS_KEY, SECRET_KEY};

fn config(w: &Seaweed, prefix: &str) -> S3Config {
    let mut c = S3Config::from_url(&format!("s3://{}/{prefix}", w.bucket)).unwrap();
    c.endpoint = Some(w.endpoint.clone());
    c.credentials = Some(Credentials {
        access_key_id: ACCESS_KEY.into(),
        secret_access_key: SECRET_KEY.into(),
        session_token: None,
    });
    c.timeout = Duration::from_secs(10);
    c
}

fn status_value(store: &S3Store, line: &str, key: &str) -> u64 {
    let lines = store.status();
    let l = lines
        .iter()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no {line} line in {lines:?}"));
    l.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {l}"))
}

#[test]
fn files_logs_and_descriptors() {
    let w = Seaweed::start("files-logs");
    let s = S3Store::open(config(&w, "t1")).unwrap();

    // A file written once: nothing is visible until it is synced.
    let mut f = s.create("sst/000001.sst").unwrap();
    f.append(b"hello ").unwrap();
    f.append_vectored(&[b"object ", b"store"]).unwrap();
    assert!(!s.exists("sst/000001.sst").unwrap());
    f.sync().unwrap();
    drop(f);
    assert!(matches!(
        s.create("sst/000001.sst"),
        Err(gfs::Error::AlreadyExists(_))
    ));
    let r = s.open("sst/000001.sst").unwrap();
    assert_eq!(r.len().unwrap(), 18);
    assert_eq!(r.read_at(6, 6).unwrap(), b"object");
    assert_eq!(
        r.read_many(&[(0, 5), (13, 5)]).unwrap(),
        vec![b"hello".to_vec(), b"store".to_vec()]
    );
    assert!(matches!(
        r.read_at(10, 20),
        Err(gfs::Error::ShortRead { .. })
    ));

    // A log: every append is stored when it returns, and reads back joined.
    let mut l = s.create_log("logs/ts-0/000001.log").unwrap();
    for i in 0..5u8 {
        assert_eq!(l.append(&[i; 3]).unwrap(), u64::from(i) * 3);
    }
    drop(l);
    assert_eq!(s.size("logs/ts-0/000001.log").unwrap(), 15);
    let mut l = s.open_append("logs/ts-0/000001.log").unwrap();
    l.append_sync(&[b"xy"]).unwrap();
    let all = s.open("logs/ts-0/000001.log").unwrap();
    assert_eq!(all.len().unwrap(), 17);
    assert_eq!(all.read_at(12, 5).unwrap(), vec![4, 4, 4, b'x', b'y']);

    // Descriptors are replaced whole.
    s.replace("meta/root", &[b"one"]).unwrap();
    s.replace("meta/root", &[b"two", b"!"]).unwrap();
    let d = s.open("meta/root").unwrap();
    assert_eq!(d.read_at(0, 4).unwrap(), b"two!");

    assert_eq!(
        s.list("").unwrap(),
        vec!["logs/ts-0/000001.log", "meta/root", "sst/000001.sst"]
    );
    assert_eq!(s.list("sst/0000").unwrap(), vec!["sst/000001.sst"]);

    // A deleted file stays readable to a reader that has it open.
    s.delete("sst/000001.sst").unwrap();
    assert_eq!(r.read_at(0, 5).unwrap(), b"hello");
    drop(r);
    assert!(!s.exists("sst/000001.sst").unwrap());
    s.delete("logs/ts-0/000001.log").unwrap();
    assert!(matches!(
        s.delete("logs/ts-0/000001.log"),
        Err(gfs::Error::NotFound(_))
    ));
}

#[test]
fn a_second_daemon_fences_the_first() {
    let w = Seaweed::start("fencing");
    let a = S3Store::open(config(&w, "shared")).unwrap();
    let mut log = a.create_log("logs/a.log").unwrap();
    log.append(b"acknowledged").unwrap();
    a.replace("meta/root", &[b"from a"]).unwrap();

    // b takes the prefix over: a higher epoch, every log sealed.
    let b = S3Store::open(config(&w, "shared")).unwrap();
    assert_eq!(b.epoch(), a.epoch() + 1);

    // a's next append finds its segment name taken, and a stops writing.
    let e = log.append(b"never acknowledged").unwrap_err();
    assert!(e.to_string().contains("fenced"), "{e}");
    assert!(a.is_fenced());
    assert!(a.replace("meta/root", &[b"stale"]).is_err());
    assert!(a.create("sst/9").is_err());

    // b reads everything a acknowledged, and a overwrote nothing of b's.
    let r = b.open("logs/a.log").unwrap();
    assert_eq!(
        r.read_at(0, r.len().unwrap() as usize).unwrap(),
        b"acknowledged"
    );
    b.replace("meta/root", &[b"from b"]).unwrap();
    let d = b.open("meta/root").unwrap();
    assert_eq!(d.read_at(0, 6).unwrap(), b"from b");
}

#[test]
fn a_created_log_exists_before_its_first_append() {
    // As on a disk: the engine lists a server's log directory to find the
    // logs to recover and to collect, and a server that never wrote still
    // created its log.
    let w = Seaweed::start("empty-log");
    let s = S3Store::open(config(&w, "p")).unwrap();
    let l = s.create_log("logs/ts-0/000001.log").unwrap();
    assert!(s.exists("logs/ts-0/000001.log").unwrap());
    assert_eq!(s.list("logs/").unwrap(), vec!["logs/ts-0/000001.log"]);
    assert_eq!(s.size("logs/ts-0/000001.log").unwrap(), 0);
    assert_eq!(s.open("logs/ts-0/000001.log").unwrap().len().unwrap(), 0);
    assert!(matches!(
        s.create_log("logs/ts-0/000001.log"),
        Err(gfs::Error::AlreadyExists(_))
    ));
    drop(l);
    let mut l = s.open_append("logs/ts-0/000001.log").unwrap();
    assert_eq!(l.append(b"first").unwrap(), 0);
    let r = s.open("logs/ts-0/000001.log").unwrap();
    assert_eq!(r.read_at(0, 5).unwrap(), b"first");
    s.delete("logs/ts-0/000001.log").unwrap();
    assert!(!s.exists("logs/ts-0/000001.log").unwrap());
}

#[test]
fn a_log_created_after_a_takeover_is_fenced() {
    // b seals the logs that exist when it takes over; a log a creates
    // afterwards (before a's owner check runs) must not take appends b
    // never recovers.
    let w = Seaweed::start("late-log");
    let a = S3Store::open(config(&w, "p")).unwrap();
    let _b = S3Store::open(config(&w, "p")).unwrap();
    let e = a
        .create_log("logs/ts-0/000002.log")
        .and_then(|mut l| l.append(b"never acknowledged"))
        .unwrap_err();
    assert!(e.to_string().contains("fenced"), "{e}");
    assert!(a.is_fenced());
}

#[test]
fn a_fenced_daemon_learns_it_from_owner_without_writing() {
    let w = Seaweed::start("owner-watch");
    let a = S3Store::open(config(&w, "p")).unwrap();
    let _b = S3Store::open(config(&w, "p")).unwrap();
    assert!(
        tests::wait_until(Duration::from_secs(30), || a.is_fenced()),
        "a never noticed the new owner"
    );
    assert!(a.status().iter().any(|l| l.contains("fenced=true")));
}

#[test]
fn a_bad_store_fails_at_once_naming_the_problem() {
    let w = Seaweed::start("exists");
    // The S3 gateway can learn of the bucket after the filer made it (once,
    // on a loaded machine, wrong keys were answered "not found"): the
    // right keys reach it first.
    assert!(
        tests::wait_until(Duration::from_secs(30), || S3Store::open(config(
            &w, "known"
        ))
        .is_ok()),
        "the bucket never answered the right keys"
    );
    // A bucket that does not exist.
    let mut c = config(&w, "p");
    c.bucket = "no-such-bucket".into();
    let e = S3Store::open(c).err().expect("a missing bucket must fail");
    assert!(e.to_string().contains("bucket"), "{e}");
    // Wrong keys.
    let mut c = config(&w, "p");
    c.credentials = Some(Credentials {
        access_key_id: "wrong".into(),
        secret_access_key: "wrong".into(),
        session_token: None,
    });
    let e = S3Store::open(c).err().expect("wrong keys must fail");
    assert!(e.to_string().contains("credentials"), "{e}");
    // Nothing listening.
    let mut c = config(&w, "p");
    c.endpoint = Some("http://127.0.0.1:1".into());
    let t = Instant::now();
    let e = S3Store::open(c).err().expect("no server must fail");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert!(e.to_string().contains("no answer"), "{e}");
}

#[test]
fn the_disk_cache_serves_restarts_and_refetches_damage() {
    let w = Seaweed::start("cache");
    let cache = tempfile::tempdir().unwrap();
    let mut c = config(&w, "p");
    c.cache_dir = Some(cache.path().to_path_buf());
    let s = S3Store::open(c.clone()).unwrap();
    let mut f = s.create("sst/1").unwrap();
    f.append(&[9u8; 4096]).unwrap();
    f.sync().unwrap();
    drop(f);
    let r = s.open("sst/1").unwrap();
    assert_eq!(r.read_at(0, 4096).unwrap(), vec![9u8; 4096]);
    drop((r, s));

    // A restarted daemon reads the range from its disk cache.
    let s = S3Store::open(c.clone()).unwrap();
    let r = s.open("sst/1").unwrap();
    assert_eq!(r.read_at(0, 4096).unwrap(), vec![9u8; 4096]);
    assert_eq!(status_value(&s, "s3_disk_cache", "hits"), 1);
    assert_eq!(status_value(&s, "s3_errors", "get"), 0);

    // A damaged cache file is found by its checksum and fetched again.
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        b[100] ^= 0xff;
        std::fs::write(&p, b).unwrap();
    }
    assert_eq!(r.read_at(0, 4096).unwrap(), vec![9u8; 4096]);
    assert_eq!(status_value(&s, "s3_disk_cache", "corrupt"), 1);
}

#[test]
fn a_store_that_goes_away_fails_writes_then_comes_back() {
    let w = Seaweed::start("away");
    let s = S3Store::open(config(&w, "p")).unwrap();
    let mut log = s.create_log("logs/l").unwrap();
    log.append(b"before").unwrap();

    w.pause();
    let t = Instant::now();
    let e = log.append(b"while away").unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "hung {:?}",
        t.elapsed()
    );
    assert!(!e.to_string().contains("fenced"), "{e}");
    w.resume();

    // The same writer goes on once the store is back: nothing was stored
    // of the failed append under its sequence number, or if the store did
    // take it before the client gave up, the writer is told so.
    let ok = tests::wait_until(Duration::from_secs(60), || log.append(b"after").is_ok());
    assert!(ok, "the store came back but writes still fail");
    let r = s.open("logs/l").unwrap();
    let text = r.read_at(0, r.len().unwrap() as usize).unwrap();
    assert!(
        text.starts_with(b"before") && text.ends_with(b"after"),
        "{:?}",
        String::from_utf8_lossy(&text)
    );
}
