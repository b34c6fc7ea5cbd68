//! Crash test: a child process applies mutations and reports each acknowledged
//! one over a pipe; it is killed with SIGKILL at a random moment; the engine is
//! reopened and every acknowledged mutation must be there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use rand::Rng;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const CHILD_ENV: &str = "BIGTABLE_CRASH_CHILD_DIR";

fn options() -> Options {
    Options {
        memtable_bytes: 32 << 10,
        sstable_target_bytes: 16 << 10,
        split_bytes: 256 << 10,
        merge_trigger: 3,
        log_file_bytes: 64 << 10,
        ..Options::default()
    }
}

fn open(dir: &std::path::Path) -> Bigtable {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::LocalStore::open(dir).unwrap());
    Bigtable::open(store, options()).unwrap()
}

/// The child: write forever, printing each acknowledged write. Runs only when
/// the parent starts this test binary with the environment variable set.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let bt = open(std::path::Path::new(&dir));
    if bt.schema("t").is_err() {
        bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
            .unwrap();
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut rng = rand::thread_rng();
    let start: u64 = rng.gen();
    for i in 0u64.. {
        let id = start.wrapping_add(i);
        let row = format!("r{:020}", id % 100_000);
        let value = format!("v{id}").repeat(rng.gen_range(1..40));
        let sync = i % 7 == 0;
        let m = RowMutation::new(row.clone()).set("f", format!("{id}"), value.clone());
        if i % 3 == 0 {
            // A batch of two rows, atomic per row.
            let m2 =
                RowMutation::new(format!("{row}-b")).set("f", format!("{id}"), format!("{id}"));
            bt.apply_batch("t", &[m, m2], WriteOptions { sync })
                .unwrap();
            writeln!(out, "{row}\t{id}\t{value}\t{id}").unwrap();
        } else {
            bt.apply("t", &m, WriteOptions { sync }).unwrap();
            writeln!(out, "{row}\t{id}\t{value}").unwrap();
        }
        out.flush().unwrap();
    }
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let mut acked: Vec<(String, String, String, bool)> = Vec::new();
    let rounds = 20;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            // Only complete lines count: the child prints after apply returned.
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(n) if n > 0 && line.ends_with('\n') => {
                        lines.push(line.trim_end_matches('\n').to_string())
                    }
                    _ => break,
                }
            }
            lines
        });
        // Kill at a random moment: during startup/recovery, mid-write, mid-flush
        // (a deliberate random delay, not a wait for an event).
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..700)));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let lines = reader.join().unwrap();
        for line in lines {
            let parts: Vec<&str> = line.split('\t').collect();
            if parts.len() < 3 {
                continue;
            }
            acked.push((
                parts[0].to_string(),
                parts[1].to_string(),
                parts[2].to_string(),
                parts.len() == 4,
            ));
        }
        // Reopen in this process and check everything acknowledged so far.
        let bt = open(dir.path());
        for (row, q, value, batch) in &acked {
            let got = bt
                .read_cell("t", row.as_bytes(), "f", q.as_bytes())
                .unwrap();
            assert_eq!(
                got.map(|c| c.value),
                Some(value.clone().into_bytes()),
                "round {round}: acknowledged write {row}/{q} lost"
            );
            if *batch {
                let got = bt
                    .read_cell("t", format!("{row}-b").as_bytes(), "f", q.as_bytes())
                    .unwrap();
                assert_eq!(
                    got.map(|c| c.value),
                    Some(q.clone().into_bytes()),
                    "round {round}: batch row {row}-b lost"
                );
            }
        }
        bt.close().unwrap();
    }
    assert!(
        acked.len() > rounds,
        "the child acknowledged too little: {}",
        acked.len()
    );
}
