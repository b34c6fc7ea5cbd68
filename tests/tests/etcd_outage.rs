#![allow(clippy::unwrap_used, clippy::expect_used)]
//! etcd killed and restarted under load, with the lock service on it: no
//! acknowledged write is lost, the master is elected again and tablets are
//! served again, without a remount.

use std::io::Write;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use testkit::etcd::Etcd;
use tests::{wait_until, Mount};

/// Writes `data` to `path` with open/write/close; Ok only if close succeeded.
fn write_and_close(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    let fd = f.into_raw_fd();
    // SAFETY: fd is the descriptor we own, closed exactly once here.
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A write whose close returned: the cell's path and the bytes written.
type Closed = (String, Vec<u8>);

fn status(m: &Mount) -> String {
    std::fs::read_to_string(m.path(".bigtable/status")).unwrap_or_default()
}

/// The `master=` word of `.bigtable/status`.
fn master_of(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("master=")))
        .unwrap_or("")
        .to_string()
}

#[test]
fn etcd_killed_and_restarted_under_load() {
    let etcd = Arc::new(Etcd::start());
    let m = Mount::on_etcd(etcd.clone(), "/o", &[]);
    m.table("t", "f\n");
    for w in 0..2 {
        std::fs::create_dir_all(m.path(&format!("t/w{w}/f"))).unwrap();
    }
    // Every write whose close returned 0, in order, per writer.
    let done: Arc<Mutex<Vec<Closed>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..2 {
        let (done, stop, failed) = (done.clone(), stop.clone(), failed.clone());
        let dir = m.path(&format!("t/w{w}/f"));
        writers.push(std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("c{}", i % 20);
                let data = format!("writer {w} write {i}").into_bytes();
                match write_and_close(&dir.join(&name), &data) {
                    Ok(()) => done
                        .lock()
                        .unwrap()
                        .push((format!("t/w{w}/f/{name}"), data)),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                i += 1;
            }
        }));
    }
    let count = || done.lock().unwrap().len();
    assert!(wait_until(Duration::from_secs(30), || count() >= 100));
    let elected = |m: &Mount| m.log_text().matches("became the active master").count();
    let elections_before = elected(&m);
    etcd.kill();
    // Keep-alives fail until the daemon ends its session (lease 2 s).
    assert!(
        wait_until(Duration::from_secs(30), || {
            let s = status(&m);
            s.contains("keepalive=ended") || s.contains("sessions_lost=1")
        }),
        "the daemon never ended its session: {}",
        status(&m)
    );
    etcd.restart();
    let before = count();
    assert!(
        wait_until(Duration::from_secs(90), || count() >= before + 100),
        "writes did not resume after etcd came back ({} failed); status:\n{}\nlog:\n{}",
        failed.load(Ordering::SeqCst),
        status(&m),
        tests::tail(&m.log_text(), 40)
    );
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    // The last acknowledged write of each cell is what it holds.
    let mut last = std::collections::HashMap::new();
    for (p, d) in done.lock().unwrap().iter() {
        last.insert(p.clone(), d.clone());
    }
    for (p, d) in &last {
        assert_eq!(&std::fs::read(m.path(p)).unwrap(), d, "{p}");
    }
    let s = status(&m);
    // The session ended with etcd away: the master lock went with it, and
    // a master was elected again once etcd was back.
    assert!(
        !master_of(&s).is_empty() && elected(&m) > elections_before,
        "no master was elected again after etcd came back:\n{s}"
    );
    assert!(
        s.contains("sessions_lost=1") && s.contains("keepalive=ok"),
        "{s}"
    );
}
