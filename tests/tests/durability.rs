#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What a closed file promises: it survives a remount and a kill -9.

use std::fs;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tests::Mount;

#[test]
fn data_survives_a_remount() {
    let mut m = Mount::new();
    m.table("t", "f max_versions=5\ng\n");
    m.ok("mkdir -p t/r/f && echo one > t/r/f/q && echo two > t/r/f/q && printf bin > t/r/f/b");
    m.mutate("t", b"set s g:x 1\nincrement s g:n 3\n");
    m.ok("chmod 0750 t && chmod 0700 t/r/f");
    m.remount();
    assert_eq!(m.ok("cat t/r/f/q"), "two\n");
    assert_eq!(m.ok("ls t/r/f/.versions/q | wc -l").trim(), "2");
    assert_eq!(m.ok("cat t/s/g/x"), "1");
    assert!(m
        .ok("cat t/.schema")
        .lines()
        .any(|l| l.starts_with("f ") && l.contains("mode=0700")));
    assert_eq!(m.ok("stat -c %a t"), "750\n");
    assert_eq!(m.ok("ls t"), "r\ns\n");
}

/// Writes `data` to `path` with open/write/close; Ok only if close succeeded.
fn write_and_close(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = fs::File::create(path)?;
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

#[test]
fn every_closed_write_survives_kill_9_under_load() {
    let mut m = Mount::new();
    m.table("t", "f\n");
    for w in 0..4 {
        fs::create_dir_all(m.path(&format!("t/w{w}/f"))).unwrap();
    }
    let done: Arc<Mutex<Vec<Closed>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (done, stop, dir) = (done.clone(), stop.clone(), m.path(&format!("t/w{w}/f")));
        writers.push(std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("c{}", i % 50);
                let data =
                    format!("writer {w} write {i} {}", "x".repeat((i % 300) as usize)).into_bytes();
                match write_and_close(&dir.join(&name), &data) {
                    Ok(()) => done
                        .lock()
                        .unwrap()
                        .push((format!("t/w{w}/f/{name}"), data)),
                    Err(_) => break,
                }
                i += 1;
            }
        }));
    }
    // Let the load run, then kill the daemon in the middle of it.
    assert!(tests::wait_until(Duration::from_secs(30), || done
        .lock()
        .unwrap()
        .len()
        >= 400));
    m.kill9();
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    m.start();
    // The last closed write of each cell is what it holds now.
    let done = done.lock().unwrap();
    let mut last = std::collections::HashMap::new();
    for (p, d) in done.iter() {
        last.insert(p.clone(), d.clone());
    }
    for (p, d) in &last {
        let got = fs::read(m.path(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        // A write whose close did not return may have landed after the last
        // recorded one; anything older than the last closed one must not.
        if &got != d {
            let got_i: u32 = String::from_utf8_lossy(&got)
                .split(' ')
                .nth(3)
                .unwrap()
                .parse()
                .unwrap();
            let want_i: u32 = String::from_utf8_lossy(d)
                .split(' ')
                .nth(3)
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                got_i > want_i,
                "{p}: lost the write whose close returned ({want_i}, found {got_i})"
            );
        }
    }
    eprintln!("{} closed writes, {} cells checked", done.len(), last.len());
}
