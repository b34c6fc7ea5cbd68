#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Issue 53's test of change streams under chaos: four writers while a
//! tablet splits, its upper half moves to another daemon's server, that
//! daemon is killed with `kill -9` (the other takes its tablet over), and
//! the halves merge back. Two readers follow the table's change
//! log meanwhile: the official Python client's generated ReadChangeStream
//! client (`scripts/change_stream.py`) and `tail -f TABLE/.changes/all`
//! through the mount. Each must see every acknowledged write exactly once,
//! in commit-timestamp order, and nothing that was never tried; resuming
//! from tokens seen mid-stream must lose and repeat nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::etcd::Etcd;
use testkit::seaweed::Seaweed;
use tests::{wait_until, Background, Mount};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/change_stream.py")
}

/// One change as both readers print it (docs/changes.md's lines).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    ts: u64,
    token: String,
    ops: Vec<String>,
}

/// The whole changes of a stream's text (a change whose lines are not all
/// written yet is left out; `# partition` lines are skipped).
fn parse(text: &str) -> Vec<Change> {
    // Only whole lines.
    let text = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let mut out: Vec<Change> = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# change ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            out.push(Change {
                ts: f[0].parse().unwrap(),
                token: f[1].to_string(),
                ops: Vec::new(),
            });
        } else if !l.starts_with('#') {
            out.last_mut()
                .unwrap_or_else(|| panic!("an op before any change: {l:?}"))
                .ops
                .push(l.to_string());
        }
    }
    out
}

/// The write a change made: its value (`v<writer>-<n>`), checking that it
/// is one `set` whose cell timestamp is the commit timestamp.
fn value_of(c: &Change) -> String {
    assert_eq!(c.ops.len(), 1, "{c:?}");
    let f: Vec<&str> = c.ops[0].split(' ').collect();
    assert!(f.len() == 5 && f[0] == "set", "{c:?}");
    assert_eq!(f[4], c.ts.to_string(), "cell timestamp != commit: {c:?}");
    f[3].to_string()
}

/// What the writers tried: value -> (row, acknowledged).
type Tried = Arc<Mutex<BTreeMap<String, (String, bool)>>>;

fn acked(tried: &Tried) -> usize {
    tried.lock().unwrap().values().filter(|v| v.1).count()
}

/// Checks one ordered stream (all of the tail's, or one partition's):
/// commit timestamps never go back, each tried write at most once and
/// none that was not tried, and each writer's writes to a row in the
/// order it made them. Returns the values seen.
fn check_stream(who: &str, changes: &[Change], tried: &Tried) -> BTreeSet<String> {
    let tried = tried.lock().unwrap();
    let mut seen: BTreeMap<String, &Change> = BTreeMap::new();
    let mut last = 0;
    // (writer, row) -> (n, ts) of the last write seen.
    let mut order: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for c in changes {
        assert!(c.ts >= last, "{who}: commit time went back at {c:?}");
        last = c.ts;
        let v = value_of(c);
        if v == "end" {
            continue;
        }
        let Some((row, _)) = tried.get(&v) else {
            panic!("{who}: a change no writer made: {c:?}");
        };
        if let Some(first) = seen.insert(v.clone(), c) {
            panic!("{who}: {v} twice: {first:?} and {c:?}");
        }
        let (w, n) = v.trim_start_matches('v').split_once('-').unwrap();
        let n: u64 = n.parse().unwrap();
        if let Some((pn, pts)) = order.insert((w.to_string(), row.clone()), (n, c.ts)) {
            assert!(
                pn < n && pts < c.ts,
                "{who}: writer {w}'s writes to {row} out of order: {pn}@{pts} then {n}@{}",
                c.ts
            );
        }
    }
    seen.into_keys().collect()
}

/// Every acknowledged write is in `seen`.
fn missing(tried: &Tried, seen: &BTreeSet<String>) -> Vec<String> {
    tried
        .lock()
        .unwrap()
        .iter()
        .filter(|(v, (_, ack))| *ack && !seen.contains(*v))
        .map(|(v, _)| v.clone())
        .collect()
}

/// Resuming from a few tokens spread over `all` (a stream complete up to
/// `end`) gives exactly the rest of it, tokens included.
fn check_resumes(who: &str, all: &[Change], end: u64, resume: impl Fn(&str) -> String) {
    let all: Vec<&Change> = all.iter().filter(|c| c.ts < end).collect();
    assert!(
        all.len() > 10,
        "{who}: too few changes to resume: {}",
        all.len()
    );
    for k in 1..=4 {
        let i = all.len() * k / 5;
        let rest = parse(&resume(&all[i].token));
        let want: Vec<Change> = all[i + 1..].iter().map(|c| (*c).clone()).collect();
        assert!(
            rest == want,
            "{who}: resuming after {} (change {i} of {}) gave {} changes, not the {} after it; \
             first difference at {:?}",
            all[i].token,
            all.len(),
            rest.len(),
            want.len(),
            rest.iter().zip(&want).position(|(a, b)| a != b)
        );
    }
}

/// A daemon on the shared bucket and etcd: one tablet server, a master.
fn daemon(weed: &Seaweed, etcd: &Arc<Etcd>, secret: &std::path::Path, extra: &[&str]) -> Mount {
    let mut opts = vec![
        format!("store=s3://{}/bt", weed.bucket),
        format!("s3_endpoint={}", weed.endpoint),
        format!("s3_credentials={}", weed.credentials_file().display()),
        "tablet_servers=1".to_string(),
        // Only the test moves tablets; a merge is never held back by load.
        "no_balance".to_string(),
        "load_split=0".to_string(),
        // The split's halves merge back once the test is done with them.
        "split_cooldown=15".to_string(),
        "cluster_listen=127.0.0.1:0".to_string(),
        format!("cluster_secret_file={}", secret.display()),
    ];
    opts.extend(extra.iter().map(|s| s.to_string()));
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    Mount::on_etcd(etcd.clone(), "/bt", &opts)
}

#[test]
fn both_change_readers_see_every_acknowledged_write_once_through_split_merge_move_and_kill() {
    let weed = Seaweed::start("changes-chaos");
    let etcd = Arc::new(Etcd::start());
    let secret = weed.data_dir().join("cluster-secret");
    std::fs::write(&secret, "a-secret-of-more-than-sixteen-bytes\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // A serves the readers (mount and gRPC) and the writers; C's server is
    // the one killed.
    let a = daemon(
        &weed,
        &etcd,
        &secret,
        &["grpc=127.0.0.1:0", "grpc_trust_loopback"],
    );
    let mut c = daemon(&weed, &etcd, &secret, &[]);
    assert!(
        wait_until(Duration::from_secs(60), || a.servers().len() == 2),
        "{:?}",
        a.servers()
    );
    let server_of = |d: &Mount| {
        let addr = d.rpc_addr();
        let all = a.servers();
        all.iter()
            .find(|(_, a)| *a == addr)
            .unwrap_or_else(|| panic!("no server at {addr}: {all:?}"))
            .0
            .clone()
    };
    let (survivor, victim) = (server_of(&a), server_of(&c));
    a.table("t", "cf\n");
    a.ok("echo '.table change_retention=1d' >> t/.schema");

    // The readers, from the oldest change kept.
    let dir = tempfile::Builder::new()
        .prefix("h53-chaos-")
        .tempdir()
        .unwrap();
    let tmp = dir.path().to_path_buf();
    let addr = a.grpc_addr();
    let mut py = Command::new(tests::python());
    py.arg(script())
        .args(["follow", "t"])
        .arg(&tmp)
        .env("BIGTABLE_EMULATOR_HOST", &addr)
        .env("PYTHONUNBUFFERED", "1");
    let mut python = Background::spawn(py, tmp.join("python.out"));
    let tail = Background::tail_f(&a, &["-n", "+1", "-f"], "t/.changes/all", tmp.join("tail"));
    let parts = |dir: &std::path::Path| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("part-")
                    .then(|| (name, std::fs::read_to_string(e.path()).unwrap()))
            })
            .collect();
        v.sort();
        v
    };
    assert!(
        wait_until(Duration::from_secs(30), || !parts(&tmp).is_empty()),
        "the Python reader started no stream: {}",
        python.errors()
    );

    // Four writers through A's mount, one `.mutate` batch (one change) a
    // write, each a value of its own.
    let tried: Tried = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let (mnt, tried, stop) = (a.mnt.clone(), tried.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let row = format!("r{}", (n * 3 + i) % 8);
                    let v = format!("v{i}-{n}");
                    tried
                        .lock()
                        .unwrap()
                        .insert(v.clone(), (row.clone(), false));
                    let line = format!("set {row} cf:w{i}-{n} {v}\n");
                    if tests::write_and_close(&mnt.join("t/.mutate"), line.as_bytes()).is_ok() {
                        tried.lock().unwrap().insert(v, (row, true));
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let more = |n: usize| {
        let want = acked(&tried) + n;
        assert!(
            wait_until(Duration::from_secs(90), || acked(&tried) >= want),
            "the writers stalled at {} acknowledged writes",
            acked(&tried)
        );
    };
    more(40);
    // A split; the lower half moves to A's server, the upper to C's
    // (one of them moves, whichever server held the table).
    a.control("split t r4");
    a.control(&format!("move t r0 {survivor}"));
    a.control(&format!("move t r4 {victim}"));
    more(40);
    // C dies holding the tablet of r4 (moved there again: the master may
    // have merged the halves meanwhile, if this machine is slow).
    a.control(&format!("move t r4 {victim}"));
    c.kill9();
    assert!(
        wait_until(Duration::from_secs(90), || a
            .tablets("t")
            .iter()
            .all(|(_, s)| *s != victim)),
        "C's tablet was not taken over: {:?}",
        a.tablets("t")
    );
    more(40);
    // The split's cooldown over, the master merges the halves back.
    assert!(
        wait_until(Duration::from_secs(60), || a.tablets("t").len() == 1),
        "the halves were not merged back: {:?}",
        a.tablets("t")
    );
    more(40);
    stop.store(true, Ordering::Release);
    for w in writers {
        w.join().unwrap();
    }
    // A last write after every other: a reader that has it has the rest.
    let end = tests::now_us();
    a.mutate("t", b"set zz cf:end end\n");
    let total = acked(&tried);
    eprintln!(
        "{total} writes acknowledged of {} tried",
        tried.lock().unwrap().len()
    );

    // Both readers have every acknowledged write, once, in order.
    let has_end = |text: &str| {
        parse(text)
            .iter()
            .any(|c| c.ops.iter().any(|o| o.contains(" end ")))
    };
    assert!(
        wait_until(Duration::from_secs(90), || has_end(&tail.text())
            && parts(&tmp).iter().any(|(_, t)| has_end(t))),
        "the readers did not reach the last write: tail has {} changes ({}), Python {:?} ({})",
        parse(&tail.text()).len(),
        tail.errors(),
        parts(&tmp)
            .iter()
            .map(|(n, t)| (n.clone(), parse(t).len()))
            .collect::<Vec<_>>(),
        python.errors()
    );
    let tail_all = parse(&tail.text());
    let tail_seen = check_stream("tail -f", &tail_all, &tried);
    assert_eq!(
        missing(&tried, &tail_seen),
        Vec::<String>::new(),
        "tail -f lost these"
    );
    let mut py_seen = BTreeSet::new();
    for (name, text) in parts(&tmp) {
        for v in check_stream(&format!("Python {name}"), &parse(&text), &tried) {
            assert!(py_seen.insert(v.clone()), "Python: {v} in two partitions");
        }
    }
    assert_eq!(
        missing(&tried, &py_seen),
        Vec::<String>::new(),
        "Python lost these"
    );
    // Unacknowledged writes that the kill cut short are in both or neither.
    assert_eq!(tail_seen, py_seen, "the two readers disagree");
    assert!(
        python.running(),
        "the Python reader died: {}",
        python.errors()
    );
    eprintln!("Python reader's resumptions:\n{}", python.errors());

    // Resuming from tokens seen mid-stream gives exactly the rest.
    check_resumes("the mount", &tail_all, end, |tok| {
        a.ok(&format!("cat 't/.changes/since={tok}&until={end}'"))
    });
    for (name, text) in parts(&tmp) {
        let header = text.lines().next().unwrap().to_string();
        let f: Vec<&str> = header.split_whitespace().collect();
        let (start, stop) = (f[2].to_string(), f[3].to_string());
        let all = parse(&text);
        if all.len() <= 10 {
            continue;
        }
        check_resumes(&format!("Python {name}"), &all, end, |tok| {
            let o = Command::new(tests::python())
                .arg(script())
                .args(["read", "t", &start, &stop, tok, &end.to_string()])
                .env("BIGTABLE_EMULATOR_HOST", &addr)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        });
    }
}

#[test]
fn the_python_client_puts_a_value_larger_than_its_message_limit_back_together() {
    let m = Mount::with_options(&["grpc=127.0.0.1:0", "grpc_trust_loopback"]);
    m.table("t", "f\n");
    m.ok("echo '.table change_retention=1d' >> t/.schema");
    // 5 MiB: over the client's 4 MiB message limit, so it must come in
    // chunks (1 MiB each) that the client puts back together.
    let size = 5 << 20;
    m.ok(&format!(
        "mkdir -p t/r/f && head -c {size} /dev/zero | tr '\\0' x > t/r/f/big && printf small > t/r/f/s"
    ));
    let end = tests::now_us();
    let o = Command::new(tests::python())
        .arg(script())
        .args(["read", "t", "-", "-", "0", &end.to_string()])
        .env("BIGTABLE_EMULATOR_HOST", m.grpc_addr())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let changes = parse(&String::from_utf8_lossy(&o.stdout));
    let values: Vec<(String, usize)> = changes
        .iter()
        .flat_map(|c| &c.ops)
        .filter_map(|op| {
            let f: Vec<&str> = op.split(' ').collect();
            (f[0] == "set" && !f[3].is_empty()).then(|| (f[2].to_string(), f[3].len()))
        })
        .collect();
    assert!(
        values.contains(&("f:big".to_string(), size)),
        "{:?}",
        values
    );
    assert!(values.contains(&("f:s".to_string(), 5)), "{values:?}");
}
