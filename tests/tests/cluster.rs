#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The cluster behind the mount: a tablet server killed through
//! `.bigtable/control` under load, operator commands and their errors.

use std::collections::HashMap;
use std::fs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tests::{wait_until, Mount};

/// Names of the serving tablet servers, from `.bigtable/servers`.
fn live_servers(m: &Mount) -> Vec<String> {
    m.ok("cat .bigtable/servers")
        .lines()
        .filter(|l| l.contains(" state=serving "))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("server=")
                .map(String::from)
        })
        .collect()
}

/// (tablet id, server) of each tablet of `table`, from `.bigtable/tablets`.
fn tablets(m: &Mount, table: &str) -> Vec<(String, String)> {
    m.ok("cat .bigtable/tablets")
        .lines()
        .filter(|l| l.starts_with(&format!("{table} ")))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some((w.get(1)?.to_string(), w.last()?.to_string()))
        })
        .collect()
}

#[test]
fn a_killed_tablet_server_loses_no_acknowledged_write_and_fails_no_operation() {
    let m = Mount::with_options(&["memtable=64k", "split=256k"]);
    assert_eq!(live_servers(&m).len(), 3, "three tablet servers by default");
    m.table("t", "f\n");
    for w in 0..4 {
        fs::create_dir_all(m.path(&format!("t/w{w}/f"))).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    // Writes closed so far (the map below has at most 200 cells).
    let done = Arc::new(AtomicU64::new(0));
    // Last value closed per cell.
    let closed: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let mut threads = Vec::new();
    for w in 0..4 {
        let (stop, errors, closed) = (stop.clone(), errors.clone(), closed.clone());
        let done = done.clone();
        let dir = m.path(&format!("t/w{w}/f"));
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("c{}", i % 50);
                let value = format!("w{w}-{i}");
                match fs::write(dir.join(&name), &value) {
                    Ok(()) => {
                        closed
                            .lock()
                            .unwrap()
                            .insert(format!("w{w}/f/{name}"), value);
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        eprintln!("write w{w}/{name}: {e}");
                        errors.fetch_add(1, Ordering::SeqCst);
                    }
                }
                i += 1;
            }
        }));
    }
    for r in 0..2 {
        let (stop, errors) = (stop.clone(), errors.clone());
        let root = m.path("t");
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let w = (i + r) % 4;
                let p = root.join(format!("w{w}/f/c{}", i % 50));
                match fs::read_to_string(&p) {
                    // A value is whole and the writer's own (a cell being
                    // created for the first time reads empty until closed).
                    Ok(v) => assert!(
                        v.is_empty()
                            || (v.starts_with(&format!("w{w}-")) && v[3..].parse::<u64>().is_ok()),
                        "{p:?} read {v:?}"
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        eprintln!("read {p:?}: {e}");
                        errors.fetch_add(1, Ordering::SeqCst);
                    }
                }
                i += 1;
            }
        }));
    }
    assert!(wait_until(Duration::from_secs(60), || closed
        .lock()
        .unwrap()
        .len()
        >= 100));
    let victim = tablets(&m, "t")[0].1.clone();
    m.ok(&format!("echo 'kill {victim}' > .bigtable/control"));
    // The master reassigns the dead server's tablets to the others.
    assert!(
        wait_until(Duration::from_secs(60), || {
            let t = tablets(&m, "t");
            !t.is_empty() && t.iter().all(|(_, s)| *s != victim)
        }),
        "{}",
        m.ok("cat .bigtable/tablets .bigtable/master")
    );
    let seen = done.load(Ordering::SeqCst);
    let writes = || done.load(Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(60), || writes() >= seen + 20),
        "writes stopped after the kill:\n{}",
        tests::tail(&m.log_text(), 30)
    );
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(errors.load(Ordering::SeqCst), 0, "an operation failed");
    for (cell, value) in closed.lock().unwrap().iter() {
        assert_eq!(&m.ok(&format!("cat t/{cell}")), value, "{cell}");
    }
    assert!(m
        .ok("cat .bigtable/master")
        .contains(&format!("server {victim} is dead")));
}

#[test]
fn operators_move_tablets_and_bad_commands_are_refused() {
    let m = Mount::new();
    m.table("t", "f\n");
    m.ok("mkdir -p t/r/f && echo v > t/r/f/q");
    let (id, from) = tablets(&m, "t")[0].clone();
    let to = live_servers(&m).into_iter().find(|s| *s != from).unwrap();
    m.ok(&format!("echo 'move t r {to}' > .bigtable/control"));
    // (The balancer may move it on afterwards: the event log says it moved.)
    assert!(m
        .ok("cat .bigtable/master")
        .contains(&format!("moved tablet {id} from {from} to {to}")));
    assert_eq!(m.ok("cat t/r/f/q"), "v\n");
    // bash names the errno (dash says "I/O error" for any failed write).
    let err = m.fails("bash -c \"echo 'launch missiles' > .bigtable/control\"");
    assert!(err.contains("Invalid argument"), "{err}");
    let err = m.fails("bash -c \"echo 'kill no-such-server' > .bigtable/control\"");
    assert!(err.contains("Invalid argument"), "{err}");
    assert!(m.log_text().contains("unknown command"));
    let o = m.sh_as_nobody(&format!(
        "echo 'kill {to}' > {}/.bigtable/control",
        m.mnt.display()
    ));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    assert_eq!(live_servers(&m).len(), 3);
    assert!(m
        .ok("cat .bigtable/control")
        .contains("move <table> <row> <server>"));
}
