#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A table's change stream through the mount (docs/changes.md): `head`,
//! `cat` and `tail -f` of `.changes/`, resuming from a token, the
//! replication pipe into another table's `.mutate`, permissions and bad
//! tokens.

use std::time::Duration;
use testkit::wait_until;
use tests::{Background, Mount};

/// Every version of every cell, as the scan prints them.
fn versions(m: &Mount, table: &str) -> String {
    m.ok(&format!("cat '{table}/.scan/versions=all'"))
}

#[test]
fn the_change_stream_follows_resumes_and_replicates_a_table() {
    let m = Mount::new();
    m.table("t", "f\ng\n");
    m.ok("echo '.table change_retention=1d' >> t/.schema");
    assert!(m.ok("cat t/.schema").contains(".table change_retention=1d"));
    m.table("u", "f\ng\n");
    // A table without a log has no stream.
    let e = m.fails("cat u/.changes/all");
    assert!(e.contains("Invalid argument"), "{e}");
    m.mutate(
        "t",
        b"set r1 f:a one\nset r1 g:b two 5\nset r2 f:a three\nset r%20x f:q%3A1 sp%20ace\n",
    );
    m.mutate("t", b"delete r1 g:b\nset r1 f:a four 7\n");
    m.mutate("t", b"deleterow r2\nset r3 g:z zz\ndeletefamily r3 g\n");
    m.mutate("t", b"set r1 f:a five\ndelete r1 f:a 3..8\n");
    // The stream's head: a change line, then its ops.
    let head = m.ok("head -n 2 t/.changes/all");
    let lines: Vec<&str> = head.lines().collect();
    assert!(lines[0].starts_with("# change "), "{head}");
    assert!(lines[1].starts_with("set r1 f:a one "), "{head}");
    // `cat` with until= in the past ends; the pipe replicates the table,
    // timestamps and deletes included.
    let until = tests::now_us();
    let all = m.ok(&format!("cat t/.changes/until={until}"));
    assert_eq!(
        all.lines().filter(|l| l.starts_with("# change")).count(),
        7,
        "{all}"
    );
    m.ok(&format!("cat t/.changes/until={until} > u/.mutate"));
    assert_eq!(versions(&m, "u"), versions(&m, "t"));
    assert!(!versions(&m, "t").is_empty());
    // Resuming from any change's token gives exactly the rest.
    let tokens: Vec<String> = all
        .lines()
        .filter_map(|l| l.strip_prefix("# change "))
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    for (i, tok) in tokens.iter().enumerate() {
        let rest = m.ok(&format!("cat 't/.changes/since={tok}&until={until}'"));
        let n = rest.lines().filter(|l| l.starts_with("# change")).count();
        assert_eq!(n, tokens.len() - i - 1, "after token {tok}:\n{rest}");
    }
    // family= keeps one family's ops; prefix= some rows.
    let g = m.ok(&format!("cat 't/.changes/family=g&until={until}'"));
    assert!(
        g.lines()
            .all(|l| l.starts_with('#') || l.contains(" g") || l.starts_with("deleterow")),
        "{g}"
    );
    let r3 = m.ok(&format!("cat 't/.changes/prefix=r3&until={until}'"));
    assert_eq!(
        r3.lines().filter(|l| l.starts_with("# change")).count(),
        1,
        "{r3}"
    );
    // A backlog of many changes: tail -f catches up, then follows.
    let many: String = (0..600)
        .map(|i| format!("set bulk{i:04} f:n {i}\n"))
        .collect();
    m.mutate("t", many.as_bytes());
    // `tail -n +1 -f` shows the whole stream once, backlog included, and
    // goes on; a plain `tail -f` shows the last lines, then new changes.
    let tmp = |n: &str| std::env::temp_dir().join(format!("h53-{n}-{}", std::process::id()));
    let whole = Background::tail_f(&m, &["-n", "+1", "-f"], "t/.changes/all", tmp("whole"));
    let last = Background::tail_f(&m, &["-f"], "t/.changes/all", tmp("last"));
    assert!(
        wait_until(Duration::from_secs(60), || {
            whole.text().contains("set bulk0599 ") && last.text().lines().count() >= 10
        }),
        "tail -f never showed the backlog: {}\n---\n{}",
        whole.text(),
        last.text()
    );
    m.mutate("t", b"set r9 f:new later\n");
    assert!(
        wait_until(Duration::from_secs(30), || {
            whole.text().contains("set r9 f:new later")
                && last.text().contains("set r9 f:new later")
        }),
        "tail -f did not follow a new write: {}\n---\n{}",
        whole.text(),
        last.text()
    );
    let seen = whole.text();
    assert_eq!(
        seen.lines().filter(|l| l.starts_with("set bulk")).count(),
        600,
        "tail -f lost or repeated changes"
    );
    assert!(seen.starts_with("# change "), "{seen}");
    assert!(seen.contains("set r1 f:a five "));
    drop(whole);
    drop(last);
    // Bad and expired tokens are refused.
    for name in ["since=abc", "since=1", "since=5&until=3", "colour=red"] {
        let e = m.fails(&format!("cat 't/.changes/{name}'"));
        assert!(e.contains("Invalid argument"), "{name}: {e}");
    }
    // Only who may read the table (every family of it) reads its changes.
    m.ok("chmod 0750 t");
    let o = m.sh_as_nobody("cat t/.changes/all");
    assert!(!o.status.success(), "nobody read the changes: {o:?}");
    m.ok("chmod 0755 t");
    let o = m.sh_as_nobody(&format!("cat t/.changes/until={until}"));
    assert!(o.status.success(), "{o:?}");
}

/// The changes since `since` (a token; none: from the start) up to
/// `until`, and the last change's token in them (or `since` again).
fn round(m: &Mount, since: &Option<String>, until: u64) -> (String, Option<String>) {
    let name = match since {
        Some(tok) => format!("since={tok}&until={until}"),
        None => format!("until={until}"),
    };
    let text = m.ok(&format!("cat 't/.changes/{name}'"));
    let last = text
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("# change "))
        .find_map(|l| l.split_whitespace().nth(1))
        .map(str::to_string)
        .or_else(|| since.clone());
    (text, last)
}

#[test]
fn replication_in_rounds_under_concurrent_writes_makes_an_equal_table() {
    let m = Mount::new();
    m.table("t", "f\ng\n");
    m.ok("echo '.table change_retention=1d' >> t/.schema");
    m.table("u", "f\ng\n");
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let rounds = AtomicUsize::new(0);
    let mut since = None;
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..2 {
            let (m, rounds) = (&m, &rounds);
            writers.push(s.spawn(move || {
                let mutate = m.path("t/.mutate");
                for i in 0..150u64 {
                    if i == 75 {
                        // Half written: go on once a round has run meanwhile.
                        assert!(
                            wait_until(Duration::from_secs(60), || rounds.load(SeqCst) > 0),
                            "no replication round ran"
                        );
                    }
                    let row = format!("w{w}r{}", i % 7);
                    // Sets with the server's time and with an explicit one,
                    // and every kind of delete, so that timestamps and
                    // deletes must survive the round trip.
                    let mut b = format!("set {row} f:a v{i}\nset {row} g:b x{i} {}\n", 1000 + i);
                    match i % 5 {
                        1 => b.push_str(&format!("delete {row} g:b 1000..{}\n", 1001 + i / 2)),
                        2 => b.push_str(&format!("deletefamily w{w}r{} g\n", (i + 3) % 7)),
                        3 => b.push_str(&format!("deleterow w{w}r{}\n", (i + 1) % 7)),
                        4 => b.push_str(&format!("delete {row} f:a\n")),
                        _ => {}
                    }
                    tests::write_and_close(&mutate, b.as_bytes()).unwrap();
                }
            }));
        }
        // Rounds while the writers write: each applies the changes since
        // the last round's last token, up to now.
        // (A writer that failed ends the rounds too; the scope re-raises.)
        while !writers.iter().all(|w| w.is_finished()) {
            let (text, last) = round(&m, &since, tests::now_us());
            if !text.is_empty() {
                m.mutate("u", text.as_bytes());
            }
            since = last;
            rounds.fetch_add(1, SeqCst);
        }
    });
    let (text, _) = round(&m, &since, tests::now_us());
    m.mutate("u", text.as_bytes());
    let (t, u) = (versions(&m, "t"), versions(&m, "u"));
    assert!(t.lines().count() > 10, "{t}");
    assert_eq!(u, t, "the replica differs after {rounds:?} rounds");
}
