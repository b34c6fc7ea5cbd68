#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Cloud Bigtable's data model through the mount: row filters in `.scan`
//! and `.mutate`, nested GC rules in `.schema`, deletes of a time range,
//! counters read as numbers, and the errors a shell sees.

use tests::Mount;

const DAY: u64 = 86_400_000_000;

/// A refused write as a shell reports it (dash: "I/O error" for any errno).
fn refused(stderr: &str) -> bool {
    stderr.contains("Invalid argument") || stderr.contains("I/O error")
}

fn now() -> u64 {
    engine::now_micros()
}

/// The paper's Figure 1 row and two more sites.
fn webtable(m: &Mount) {
    m.table(
        "webtable",
        "anchor max_versions=none\ncontents max_versions=none\n",
    );
    let old = now() - 20 * DAY;
    m.mutate(
        "webtable",
        format!(
            "set com.cnn.www contents: <html>v3 3\n\
             set com.cnn.www contents: <html>v5 5\n\
             set com.cnn.www anchor:cnnsi.com CNN 9\n\
             set com.cnn.www anchor:my.look.ca CNN.com 8\n\
             set com.cnn.www anchor:money.cnn.com old {old}\n\
             set com.bbc.www anchor:news.cnn.com BBC\n\
             set com.bbc.www contents: <html>bbc 2\n"
        )
        .as_bytes(),
    );
}

/// Column and value of each TSV line.
fn cols(tsv: &str) -> Vec<String> {
    tsv.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("{} {} {}", f[0], f[1], f[3])
        })
        .collect()
}

#[test]
fn paper_scans_as_filters() {
    let m = Mount::new();
    webtable(&m);
    // "anchor:*.cnn.com"
    let out = m.ok(r"cat 'webtable/.scan/filter=chain(family(anchor),qualifier(.*\.cnn\.com))'");
    assert_eq!(
        cols(&out),
        [
            "com.bbc.www anchor:news.cnn.com BBC",
            "com.cnn.www anchor:money.cnn.com old"
        ]
    );
    // Anchors within ten days of now (Figure 2's restriction by timestamp).
    let out = m.ok(&format!(
        "cat 'webtable/.scan/filter=chain(family(anchor),time(from={}))'",
        now() - 10 * DAY
    ));
    assert_eq!(cols(&out), ["com.bbc.www anchor:news.cnn.com BBC"]);
    // Every version of one row's contents, newest first, values stripped.
    let out = m.ok(
        "cat 'webtable/.scan/prefix=com.cnn&versions=all&filter=chain(family(contents),strip)'",
    );
    assert_eq!(
        cols(&out),
        ["com.cnn.www contents: ", "com.cnn.www contents: "]
    );
    // Interleave keeps duplicates; condition chooses per row.
    let out = m.ok(
        "cat 'webtable/.scan/prefix=com.cnn&filter=chain(family(anchor),interleave(qualifier(cnnsi.com),value(CNN.*)))'",
    );
    assert_eq!(
        cols(&out),
        [
            "com.cnn.www anchor:cnnsi.com CNN",
            "com.cnn.www anchor:cnnsi.com CNN",
            "com.cnn.www anchor:my.look.ca CNN.com"
        ]
    );
    let out =
        m.ok("cat 'webtable/.scan/filter=condition(value(BBC),family(contents),cells_per_row(1))'");
    assert_eq!(
        cols(&out),
        [
            "com.bbc.www contents: <html>bbc",
            "com.cnn.www anchor:cnnsi.com CNN"
        ]
    );
    // limit= counts rows the filter outputs.
    let out = m.ok("cat 'webtable/.scan/limit=1&filter=family(contents)'");
    assert_eq!(cols(&out), ["com.bbc.www contents: <html>bbc"]);
    // A bad filter fails the open with EINVAL and says why in the log.
    let err = m.fails("cat 'webtable/.scan/filter=chain(value(%28)'");
    assert!(err.contains("Invalid argument"), "{err}");
    let err = m.fails("cat 'webtable/.scan/filter=bogus(1)'");
    assert!(err.contains("Invalid argument"), "{err}");
}

#[test]
fn mutate_with_filter_guards_and_time_range_deletes() {
    let m = Mount::new();
    m.table("t", "f max_versions=none\n");
    m.mutate(
        "t",
        b"set r f:q a 100\nset r f:q b 200\nset r f:q c 300\nset r f:q d 400\nset r f:lock free\n",
    );
    // delete of [200, 400): keeps 100 and 400.
    m.mutate("t", b"delete r f:q 200..400\n");
    assert_eq!(
        m.ok("ls t/r/f/.versions/q"),
        "0000000000000100\n0000000000000400\n"
    );
    // rm of a version file still deletes exactly one version.
    m.ok("rm t/r/f/.versions/q/0000000000000100");
    assert_eq!(m.ok("ls t/r/f/.versions/q"), "0000000000000400\n");
    m.mutate("t", b"delete r f:q ..\n");
    assert!(m.fails("cat t/r/f/q").contains("No such file"));
    // A filter guard: the row's mutations run only if the lock is free.
    let out = m.ok(
        "exec 3<>t/.mutate; printf 'if r filter=chain(family(f),qualifier(lock),cells_per_column(1),value(free))\\nset r f:lock me\\n' >&3; cat <&3",
    );
    assert_eq!(out, "applied r\n");
    assert_eq!(m.ok("cat t/r/f/lock"), "me");
    let out = m.ok(
        "exec 3<>t/.mutate; printf 'if r filter=chain(qualifier(lock),cells_per_column(1),value(free))\\nset r f:lock you\\n' >&3; cat <&3",
    );
    assert_eq!(out, "skipped r\n");
    let out = m.ok(
        "exec 3<>t/.mutate; printf 'ifnot r filter=chain(cells_per_column(1),value(free))\\nset r f:seen yes\\n' >&3; cat <&3",
    );
    assert_eq!(out, "applied r\n");
    assert_eq!(m.ok("cat t/r/f/seen"), "yes");
    // Bad lines fail the write that completes them.
    for bad in [
        "delete r f:q 5..5",
        "delete r f:q 9..x",
        "if r filter=value(()",
    ] {
        // dash reports any failed write of `echo` as "I/O error".
        let err = m.fails(&format!("echo '{bad}' > t/.mutate"));
        assert!(refused(&err), "{bad}: {err}");
    }
}

#[test]
fn nested_gc_rules_in_the_schema() {
    let mut m = Mount::new();
    m.table("t", "f\n");
    let rule = "union(max_versions=3,intersection(max_age=7d,max_versions=1))";
    m.ok(&format!("echo 'f gc={rule}' >> t/.schema"));
    let schema = m.ok("cat t/.schema");
    assert!(
        schema.starts_with(&format!("f gc={rule} locality=default ")),
        "{schema}"
    );
    // Four versions: the newest always stays; of the rest, only young ones
    // among the newest three.
    let n = now();
    let (young, old) = (n - DAY, n - 10 * DAY);
    m.mutate(
        "t",
        format!(
            "set r f:q v1 {}\nset r f:q v2 {}\nset r f:q v3 {young}\nset r f:q v4 {}\n",
            old - 2,
            old - 1,
            young + 1
        )
        .as_bytes(),
    );
    let versions = |m: &Mount| m.ok("ls t/r/f/.versions/q");
    assert_eq!(versions(&m), format!("{:016}\n{:016}\n", young, young + 1));
    // The rule survives a restart (lock service text and METADATA).
    m.remount();
    assert!(m.ok("cat t/.schema").starts_with(&format!("f gc={rule} ")));
    assert_eq!(versions(&m), format!("{:016}\n{:016}\n", young, young + 1));
    // The flat keys still work, and a flat key cannot half-alter a tree.
    let err = m.fails("echo 'f max_versions=2' >> t/.schema");
    assert!(refused(&err), "{err}");
    m.ok("echo 'f gc=max_versions=1' >> t/.schema");
    m.ok("echo 'f max_age=1d gc=intersection' >> t/.schema");
    assert!(m
        .ok("cat t/.schema")
        .starts_with("f max_versions=1 max_age=1d gc=intersection "));
}

#[test]
fn counters_read_as_numbers() {
    let m = Mount::new();
    m.table("t", "s\n");
    m.mutate("t", b"increment page s:hits 41\nincrement page s:hits 1\nincrement page s:debt -7\nset page s:name home\n");
    // The file keeps the 8 raw bytes clients expect.
    assert_eq!(
        m.ok("od -An -tx1 t/page/s/hits | tr -d ' \\n'"),
        "000000000000002a"
    );
    // The xattr and the scan option show the number.
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values t/page/s/hits"),
        "42"
    );
    assert!(m
        .fails("getfattr -n user.bigtable.counter --only-values t/page/s/name")
        .contains("No such attribute"));
    let out = m.ok("cat 't/.scan/counters=s:(hits|debt)'");
    let vals: Vec<&str> = out
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap())
        .collect();
    assert_eq!(vals, ["-7", "42", "home"]);
    let out = m.ok("cat 't/.scan/counters=s:hits&format=json&filter=qualifier(hits)'");
    assert!(out.trim_end().ends_with(",\"counter\":42}"), "{out}");
}

#[test]
fn schema_errors_reach_the_shell() {
    let m = Mount::new();
    m.table("t", "anchor\ncontents\n");
    m.mutate("t", b"set r anchor:a 1\n");
    let before = m.ok("cat t/.schema");
    // A complete bad line fails the write, so the shell sees it.
    let o = m.sh("echo 'anchor max_versions=banana' >> t/.schema");
    assert!(!o.status.success(), "{o:?}");
    assert!(refused(&String::from_utf8_lossy(&o.stderr)), "{o:?}");
    // The errno itself, through Python.
    let o = m.sh(
        "python3 -c \"import os\nfd = os.open('t/.schema', os.O_WRONLY | os.O_APPEND)\ntry:\n    os.write(fd, b'anchor bloom=x\\n')\nexcept OSError as e:\n    print(e.errno)\n\"",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        libc::EINVAL.to_string(),
        "{o:?}"
    );
    let o = m.sh("printf 'contents max_versions=2\\nanchor gc=union(\\n' >> t/.schema");
    assert!(!o.status.success(), "{o:?}");
    assert_eq!(m.ok("cat t/.schema"), before, "nothing applied");
    // Truncating the schema would drop a family holding data: close fails.
    let o = m.sh("python3 -c \"open('t/.schema', 'w').close()\"");
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Directory not empty"),
        "{o:?}"
    );
    assert_eq!(m.ok("cat t/.schema"), before, "nothing applied");
    // A good append still works.
    m.ok("echo 'contents max_versions=2' >> t/.schema");
    assert!(m.ok("cat t/.schema").contains("contents max_versions=2 "));
}

#[test]
fn aggregate_families_in_the_mount() {
    let m = Mount::new();
    m.table("t", "plain\nhits type=int64_sum\nlow type=int64_min\n");
    let schema = m.ok("cat t/.schema");
    let line = |f: &str| {
        schema
            .lines()
            .find(|l| l.starts_with(&format!("{f} ")))
            .unwrap()
            .to_string()
    };
    assert!(line("hits").ends_with(" type=int64_sum"), "{schema}");
    assert!(line("low").ends_with(" type=int64_min"), "{schema}");
    assert!(!line("plain").contains("type="), "{schema}");
    // `add` folds into one cell per column (timestamp 0 unless given).
    m.mutate(
        "t",
        b"add page hits:n 40\nadd page hits:n 2\nadd page low:n 5\nadd page low:n -3\n\
          add page hits:day 4 86400000000\nadd page hits:day 3 86400000000\n",
    );
    m.mutate("t", b"add page hits:n +0\nadd page low:n 9\n");
    // The file keeps the 8 bytes clients expect; the xattr shows the number.
    assert_eq!(
        m.ok("od -An -tx1 t/page/hits/n | tr -d ' \\n'"),
        "000000000000002a"
    );
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values t/page/hits/n"),
        "42"
    );
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values t/page/low/n"),
        "-3"
    );
    // A scan prints aggregate cells as decimal without being asked.
    let out = m.ok("cat t/.scan/prefix=page");
    let cells: Vec<(&str, &str, &str)> = out
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1], f[2], f[3])
        })
        .collect();
    assert_eq!(
        cells,
        [
            ("hits:day", "86400000000", "7"),
            ("hits:n", "0", "42"),
            ("low:n", "0", "-3")
        ],
        "{out}"
    );
    // What an aggregate family refuses, and `add` to a plain family.
    for batch in [
        "set page hits:n 12345678",
        "add page plain:q 1",
        "increment page hits:n 1",
    ] {
        let o = m.sh(&format!("printf '{batch}\\n' > t/.mutate"));
        assert!(!o.status.success(), "{batch}: {o:?}");
    }
    // A cell file written into one fails at close (where a write commits).
    let o = m.sh(
        "python3 -c \"import os\nfd = os.open('t/page/hits/other', os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'12345678')\ntry:\n    os.close(fd)\nexcept OSError as e:\n    print(e.errno)\n\"",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        libc::EINVAL.to_string(),
        "{o:?}"
    );
    m.fails("cat t/page/hits/other");
    // Settings change; the type does not.
    m.ok("echo 'hits max_versions=1' >> t/.schema");
    assert!(m.ok("cat t/.schema").contains("max_versions=1 "));
    let before = m.ok("cat t/.schema");
    let o = m.sh("echo 'hits type=int64_max' >> t/.schema");
    assert!(!o.status.success(), "{o:?}");
    assert!(refused(&String::from_utf8_lossy(&o.stderr)), "{o:?}");
    assert_eq!(m.ok("cat t/.schema"), before, "nothing applied");
    m.ok("echo 'top type=int64_max' >> t/.schema");
    m.mutate(
        "t",
        b"add page top:n 3\nadd page top:n 11\nadd page top:n 5\n",
    );
    assert_eq!(
        m.ok("getfattr -n user.bigtable.counter --only-values t/page/top/n"),
        "11"
    );
}
