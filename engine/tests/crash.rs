//! Crash test: a child process applies mutations and reports each acknowledged
//! one over a pipe; it is killed with SIGKILL at a random moment; the engine is
//! reopened and every acknowledged mutation must be there. On local files, and
//! on an S3 object store, where the reopening daemon takes the prefix over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use rand::Rng;
use std::io::{BufRead, BufReader, Write};
use std::ops::Range;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use testkit::seaweed::{Seaweed, ACCESS_KEY, SECRET_KEY};

/// Where the child's files are: a directory, or `s3://BUCKET/PREFIX`.
const CHILD_ENV: &str = "BIGTABLE_CRASH_CHILD_STORE";
/// The S3 endpoint, with an `s3://` store.
const CHILD_S3_ENDPOINT: &str = "BIGTABLE_CRASH_CHILD_S3_ENDPOINT";
/// The S3 keys, with an `s3://` store.
const CHILD_S3_KEYS: [&str; 2] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];

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

/// Where the engine keeps its files, as the parent tells the child.
enum Place {
    Dir(PathBuf),
    S3 {
        location: String,
        endpoint: String,
        keys: [String; 2],
    },
}

impl Place {
    fn on_seaweed(w: &Seaweed, prefix: &str) -> Place {
        Place::S3 {
            location: format!("s3://{}/{prefix}", w.bucket),
            endpoint: w.endpoint.clone(),
            keys: [ACCESS_KEY.to_string(), SECRET_KEY.to_string()],
        }
    }

    /// The environment that tells the child this place.
    fn child_env(&self) -> Vec<(&'static str, String)> {
        match self {
            Place::Dir(d) => vec![(CHILD_ENV, d.display().to_string())],
            Place::S3 {
                location,
                endpoint,
                keys: [key, secret],
            } => vec![
                (CHILD_ENV, location.clone()),
                (CHILD_S3_ENDPOINT, endpoint.clone()),
                (CHILD_S3_KEYS[0], key.clone()),
                (CHILD_S3_KEYS[1], secret.clone()),
            ],
        }
    }

    /// The place the parent told this process, if it is a child.
    fn of_child() -> Option<Place> {
        let var = |v: &str| std::env::var(v).unwrap_or_else(|_| panic!("{v} is not set"));
        let store = std::env::var(CHILD_ENV).ok()?;
        Some(if store.starts_with("s3://") {
            Place::S3 {
                location: store,
                endpoint: var(CHILD_S3_ENDPOINT),
                keys: CHILD_S3_KEYS.map(var),
            }
        } else {
            Place::Dir(store.into())
        })
    }

    /// Opens the engine here; on S3 as a new daemon, which takes the prefix
    /// over and seals the logs the last one (perhaps killed) wrote.
    fn open(&self) -> Bigtable {
        let store: Arc<dyn gfs::FileStore> = match self {
            Place::Dir(d) => Arc::new(gfs::LocalStore::open(d).unwrap()),
            Place::S3 {
                location,
                endpoint,
                keys: [key, secret],
            } => support::open_s3(endpoint, location, key, secret),
        };
        Bigtable::open(store, options()).unwrap()
    }
}

/// The child: write forever, printing each acknowledged write. Runs only when
/// the parent starts this test binary with the environment variable set.
#[test]
fn crash_child() {
    let Some(place) = Place::of_child() else {
        return;
    };
    let bt = place.open();
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
    kill_9_rounds(&Place::Dir(dir.path().into()), rounds(20), 30..700);
}

/// The same on an S3 store: each reopening (the parent's check, the next
/// child) is a new daemon that takes the prefix over from a killed one.
/// A child starts slower here (it claims the prefix, seals the logs and
/// reads every segment back: a few hundred milliseconds), so it lives longer
/// before the kill.
#[test]
fn acknowledged_writes_survive_kill_9_on_s3() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let w = Seaweed::start("crash");
    kill_9_rounds(&Place::on_seaweed(&w, "crash"), rounds(8), 100..2000);
}

/// `default` rounds, or `CRASH_POINTS / 50` when that is more: a round (a
/// child's life, then a check of every write acknowledged so far) costs
/// far more than a power-loss test's crash point.
fn rounds(default: u64) -> u64 {
    (testkit::fuzz::crash_points(0) / 50).max(default)
}

/// `rounds` times: a child writes at `place` and is killed after a random
/// number of milliseconds in `kill_after`, then the engine is reopened here
/// and every write any child acknowledged must be there.
fn kill_9_rounds(place: &Place, rounds: u64, kill_after: Range<u64>) {
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let mut acked: Vec<(String, String, String, bool)> = Vec::new();
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .envs(place.child_env())
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
        std::thread::sleep(Duration::from_millis(rng.gen_range(kill_after.clone())));
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
        let bt = place.open();
        for (row, q, value, batch) in &acked {
            let got = bt
                .read_cell("t", row.as_bytes(), "f", q.as_bytes())
                .unwrap();
            assert_eq!(
                got.map(|c| c.value.into_vec()),
                Some(value.clone().into_bytes()),
                "round {round}: acknowledged write {row}/{q} lost"
            );
            if *batch {
                let got = bt
                    .read_cell("t", format!("{row}-b").as_bytes(), "f", q.as_bytes())
                    .unwrap();
                assert_eq!(
                    got.map(|c| c.value.into_vec()),
                    Some(q.clone().into_bytes()),
                    "round {round}: batch row {row}-b lost"
                );
            }
        }
        bt.close().unwrap();
    }
    assert!(
        acked.len() as u64 > rounds,
        "the child acknowledged too little: {}",
        acked.len()
    );
}
