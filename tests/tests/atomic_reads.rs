#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Readers never see half a value: while one process rewrites a cell in
//! several write(2) calls, concurrent readers only ever get a whole committed
//! value, never the writer's unclosed bytes or an O_TRUNC-emptied file.

use tests::Mount;

#[test]
fn concurrent_readers_see_only_whole_committed_values() {
    let m = Mount::new();
    m.table("t", "f max_versions=1\n");
    m.ok("mkdir -p t/r/f && printf 'v0:xxxxxxxxxxxxxxxxxxxxxxxx:end' > t/r/f/c");
    // The writer builds each value in three writes to one open file.
    let writer = "for i in $(seq 1 150); do \
           { printf \"v$i:\"; printf xxxxxxxxxxxxxxxxxxxxxxxx; printf ':end'; } > t/r/f/c; \
         done";
    let reader = "for i in $(seq 1 400); do cat t/r/f/c; echo; done";
    let out = m.ok(&format!(
        "tmp=$(mktemp); ({writer}) & ({reader}) > \"$tmp\"; wait; cat \"$tmp\"; rm \"$tmp\""
    ));
    let mut checked = 0;
    for line in out.lines() {
        let ok = line
            .strip_prefix('v')
            .and_then(|l| l.split_once(':'))
            .is_some_and(|(n, rest)| {
                n.parse::<u32>().is_ok() && rest == "xxxxxxxxxxxxxxxxxxxxxxxx:end"
            });
        assert!(ok, "a reader saw a partial value: {line:?}");
        checked += 1;
    }
    assert!(checked >= 400, "only {checked} reads");
    assert_eq!(m.ok("cat t/r/f/c"), "v150:xxxxxxxxxxxxxxxxxxxxxxxx:end");
}
