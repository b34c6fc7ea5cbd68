//! Crash test of the cluster: a child process appends records and reports
//! each acknowledged one over a pipe; it is killed with SIGKILL at a random
//! moment, in some rounds while re-replicating a chunkserver directory it
//! has just lost. The cluster is reopened here and every acknowledged record
//! must be in its file, at the offset the append returned, and every file
//! must be whole records only. Replication is restored between rounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{options, parse, record};
use gfs::{Cluster, FileStore};
use rand::Rng;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "GFS_CRASH_CHILD_DIR";
const MODE_ENV: &str = "GFS_CRASH_MODE";
const SERVERS: usize = 4;

/// The child: append forever, printing each acknowledged record.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let rerep = std::env::var(MODE_ENV).as_deref() == Ok("rerep");
    let c = Cluster::open(options(&dir, SERVERS)).unwrap();
    let mut rng = rand::thread_rng();
    if rerep {
        // Lose a disk shortly: its chunks are re-replicated while we append.
        let victim = dir.join(format!("cs{}", rng.gen_range(0..SERVERS)));
        let delay = Duration::from_millis(rng.gen_range(0..40));
        std::thread::spawn(move || {
            // Deliberate: the disk goes at a random moment of the appends.
            std::thread::sleep(delay);
            while victim.exists() {
                let _ = std::fs::remove_dir_all(&victim);
            }
        });
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let start: u64 = rng.gen::<u32>().into();
    let mut file = format!("log/{start:010}-0");
    let mut w = c.create(&file).unwrap();
    for i in 0u64.. {
        let seq = start * 1_000_000 + i;
        if i % 150 == 149 {
            // Roll to a new file, as a commit log does.
            file = format!("log/{start:010}-{i}");
            w = c.create(&file).unwrap();
        }
        let len = if rng.gen_bool(0.05) {
            rng.gen_range(20_000..60_000)
        } else {
            rng.gen_range(1..3000)
        };
        let r = record(seq, len);
        let off = if i % 5 == 0 {
            w.append_sync(&[&r]).unwrap()
        } else {
            w.append(&r).unwrap()
        };
        writeln!(out, "{file}\t{seq}\t{off}\t{}", r.len()).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn acknowledged_appends_survive_kill_9() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let mut acked: Vec<(String, u64, u64, usize)> = Vec::new();
    let rounds = 12;
    for round in 0..rounds {
        let mode = if round % 2 == 1 { "rerep" } else { "append" };
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_ENV, dir.path())
            .env(MODE_ENV, mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(n) if n > 0 && line.ends_with('\n') => {
                        lines.push(line.trim_end().to_string())
                    }
                    _ => break,
                }
            }
            lines
        });
        // Deliberate: kill at a random moment, not after an event.
        std::thread::sleep(Duration::from_millis(rng.gen_range(40..400)));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        for line in reader.join().unwrap() {
            let p: Vec<&str> = line.split('\t').collect();
            if p.len() == 4 {
                acked.push((
                    p[0].to_string(),
                    p[1].parse().unwrap(),
                    p[2].parse().unwrap(),
                    p[3].parse().unwrap(),
                ));
            }
        }
        let c = Cluster::open(options(dir.path(), SERVERS)).unwrap();
        let mut files = std::collections::HashMap::new();
        for name in c.list("log/").unwrap() {
            let f = c.open(&name).unwrap();
            let data = f.read_at(0, f.len().unwrap() as usize).unwrap();
            let recs = parse(&name, &data);
            files.insert(name, recs);
        }
        for (file, seq, off, len) in &acked {
            let recs = files
                .get(file)
                .unwrap_or_else(|| panic!("round {round} ({mode}): file {file} lost"));
            assert!(
                recs.iter().any(|r| r == &(*seq, *off, *len)),
                "round {round} ({mode}): acknowledged record {seq} at {file}:{off} lost"
            );
        }
        // One lost disk at a time, as in operations: the next round's loss
        // must not find chunks still short of the last one's replicas (three
        // losses before a repair can take every copy of a chunk, which no
        // system survives).
        assert!(
            c.wait_for_repair(Duration::from_secs(60)),
            "round {round} ({mode}): {:?}",
            c.health()
        );
        drop(c);
    }
    assert!(
        acked.len() > 100,
        "only {} appends acknowledged",
        acked.len()
    );
    // Finally, with no crash in the way, replication is fully restored.
    let c = Cluster::open(options(dir.path(), SERVERS)).unwrap();
    assert!(
        c.wait_for_repair(Duration::from_secs(30)),
        "{:?}",
        c.health()
    );
    assert_eq!(c.scrub(), 0);
}
