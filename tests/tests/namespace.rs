#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every item of the namespace, driven with shell tools.

use std::fs;
use tests::Mount;

fn webtable(m: &Mount) {
    m.ok("mkdir webtable");
    m.ok("echo anchor >> webtable/.schema && echo 'contents max_versions=10' >> webtable/.schema");
    m.ok("mkdir -p webtable/com.cnn.www/anchor webtable/com.cnn.www/contents");
}

#[test]
fn tables_schema_rows_families_and_cells() {
    let m = Mount::new();
    webtable(&m);
    let schema = m.ok("cat webtable/.schema");
    assert!(schema.lines().any(|l| l.starts_with("anchor ")), "{schema}");
    assert!(
        schema
            .lines()
            .any(|l| l.starts_with("contents max_versions=10")),
        "{schema}"
    );
    // Reading shows every setting.
    assert!(
        schema.contains("compression=") && schema.contains("mode=") && schema.contains("owner=")
    );

    m.ok("echo CNN > webtable/com.cnn.www/anchor/cnnsi.com");
    assert_eq!(m.ok("cat webtable/com.cnn.www/anchor/cnnsi.com"), "CNN\n");
    assert_eq!(
        m.ok("stat -c %s webtable/com.cnn.www/anchor/cnnsi.com"),
        "4\n"
    );
    assert_eq!(m.ok("ls webtable"), "com.cnn.www\n");
    assert_eq!(m.ok("ls webtable/com.cnn.www"), "anchor\ncontents\n");
    assert_eq!(m.ok("ls -A webtable/com.cnn.www/anchor"), "cnnsi.com\n");
    assert!(m.ok("ls -a webtable").contains(".schema"));
    assert_eq!(m.ok("stat -c %F webtable/com.cnn.www"), "directory\n");

    // Partial writes, appends, truncation, O_TRUNC.
    let html = "webtable/com.cnn.www/contents/html";
    m.ok(&format!("printf 0123456789 > {html}"));
    m.ok(&format!(
        "printf AB | dd of={html} bs=1 seek=3 conv=notrunc status=none"
    ));
    assert_eq!(m.ok(&format!("cat {html}")), "012AB56789");
    m.ok(&format!("printf '+tail' >> {html}"));
    assert_eq!(m.ok(&format!("cat {html}")), "012AB56789+tail");
    m.ok(&format!("truncate -s 4 {html}"));
    assert_eq!(m.ok(&format!("cat {html}")), "012A");
    m.ok(&format!("printf new > {html}"));
    assert_eq!(m.ok(&format!("cat {html}")), "new");
    m.ok(&format!("touch {html}")); // times are accepted
    m.ok("touch webtable/com.cnn.www/contents/empty");
    assert_eq!(
        m.ok("stat -c %s webtable/com.cnn.www/contents/empty"),
        "0\n"
    );
    // A large value in large writes.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(m.path("webtable/com.cnn.www/contents/big"), &big).unwrap();
    assert_eq!(
        fs::read(m.path("webtable/com.cnn.www/contents/big")).unwrap(),
        big
    );
    // mkdir of a family that is not in the schema, and of a row under a missing table.
    assert!(m
        .fails("mkdir webtable/com.cnn.www/nofam")
        .contains("No such file"));
    assert!(m.fails("mkdir nosuchtable/row").contains("No such file"));
}

#[test]
fn versions_are_listed_read_written_and_removed() {
    let m = Mount::new();
    webtable(&m);
    let q = "webtable/com.cnn.www/contents/page";
    for v in ["one", "two", "three"] {
        m.ok(&format!("echo {v} > {q}"));
    }
    let versions = m.ok("ls webtable/com.cnn.www/contents/.versions/page");
    let names: Vec<&str> = versions.lines().collect();
    assert_eq!(names.len(), 3, "{versions}");
    assert!(names
        .iter()
        .all(|n| n.len() == 16 && n.bytes().all(|b| b.is_ascii_digit())));
    assert_eq!(
        m.ok(&format!(
            "cat webtable/com.cnn.www/contents/.versions/page/{}",
            names[0]
        )),
        "one\n"
    );
    // Write an exact (old) version: it does not become the newest.
    m.ok("echo ancient > webtable/com.cnn.www/contents/.versions/page/0000000000001000");
    assert_eq!(
        m.ok("cat webtable/com.cnn.www/contents/.versions/page/0000000000001000"),
        "ancient\n"
    );
    assert_eq!(m.ok(&format!("cat {q}")), "three\n");
    // Remove the newest version: the previous one shows.
    m.ok(&format!(
        "rm webtable/com.cnn.www/contents/.versions/page/{}",
        names[2]
    ));
    assert_eq!(m.ok(&format!("cat {q}")), "two\n");
    // rm of the cell removes every version.
    m.ok(&format!("rm {q}"));
    assert!(m.fails(&format!("cat {q}")).contains("No such file"));
    assert!(m
        .fails("ls webtable/com.cnn.www/contents/.versions/page/0000000000001000")
        .contains("No such file"));
}

#[test]
fn rm_of_cells_families_rows_and_tables() {
    let m = Mount::new();
    webtable(&m);
    m.ok("for q in a b c; do echo $q > webtable/com.cnn.www/anchor/$q; done");
    m.ok("echo x > webtable/com.cnn.www/contents/x");
    m.ok("mkdir -p webtable/org.x/anchor && echo y > webtable/org.x/anchor/y");
    assert!(m.fails("rmdir webtable/com.cnn.www").contains("not empty"));
    m.ok("rm -r webtable/com.cnn.www/anchor");
    assert_eq!(m.ok("ls webtable/com.cnn.www"), "contents\n");
    m.ok("rm -r webtable/com.cnn.www");
    assert_eq!(m.ok("ls webtable"), "org.x\n");
    assert!(m.fails("rmdir webtable").contains("not empty"));
    m.ok("rm -r webtable");
    assert_eq!(m.ok("ls"), "");
    // Empty directories made with mkdir can be removed again.
    webtable(&m);
    m.ok("rmdir webtable/com.cnn.www/anchor webtable/com.cnn.www/contents webtable/com.cnn.www");
    m.ok("rmdir webtable");
}

/// A family dropped from `.schema` takes its empty directories made with
/// mkdir in every row: added again, it comes back empty (they came back).
#[test]
fn a_dropped_family_takes_its_empty_directories() {
    let m = Mount::new();
    m.table("t", "f\ng\n");
    m.ok("mkdir -p t/a/g t/b/g t/b/f && echo v > t/b/f/q");
    m.ok("printf 'f\\n' > t/.schema");
    assert_eq!(m.ok("ls t/b"), "f\n");
    m.ok("printf 'g\\n' >> t/.schema");
    assert_eq!(m.ok("ls t/a t/b"), "t/a:\n\nt/b:\nf\n");
}

#[test]
fn mutate_batches_and_scans() {
    let m = Mount::new();
    m.table("t", "anchor\ncontents\n");
    m.mutate(
        "t",
        b"set com.a anchor:x.cnn.com A1\nset com.a contents:html <p>%20hi\nset com.b anchor:y.cnn.com B1\n\
set com.c anchor:z.bbc.co.uk C1\nset org.d contents:html D\nincrement com.a contents:hits 5\nappend com.b contents:log x\n",
    );
    assert_eq!(m.ok("cat t/com.a/contents/html"), "<p> hi");
    assert_eq!(
        m.ok("od -An -tx1 t/com.a/contents/hits")
            .split_whitespace()
            .last(),
        Some("05")
    );
    // Results are read back from the same open file.
    let out = m.ok("exec 3<>t/.mutate; printf 'increment com.a contents:hits 2\\nif com.b anchor:y.cnn.com B1\\nset com.b contents:ok yes\\nifnot com.c anchor:z.bbc.co.uk\\ndeleterow com.c\\n' >&3; cat <&3");
    assert_eq!(
        out,
        "applied com.a\nvalue com.a contents:hits 7\napplied com.b\nskipped com.c\n"
    );
    assert_eq!(m.ok("cat t/com.b/contents/ok"), "yes");
    // A bad line applies nothing and fails the write.
    let err = m.fails("printf 'set com.e anchor:q 1\\nfrobnicate\\n' > t/.mutate");
    assert!(
        err.contains("Invalid argument") || err.contains("I/O error"),
        "{err}"
    );
    assert!(m.fails("ls t/com.e").contains("No such file"));
    assert!(m.log_text().contains("line 2"), "the log names the line");

    // Scans: ranges, prefixes, families, column regex, formats.
    let tsv = m.ok("cat 't/.scan/start=com.a&end=com.c&family=anchor'");
    let rows: Vec<&str> = tsv.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(rows, vec!["com.a", "com.b"], "{tsv}");
    let cnn = m.ok(r"cat 't/.scan/column=anchor:.*\.cnn\.com'");
    assert_eq!(cnn.lines().count(), 2, "{cnn}");
    let prefix = m.ok("cat t/.scan/prefix=org.");
    assert!(
        prefix.starts_with("org.d\tcontents:html\t") && prefix.ends_with("\tD\n"),
        "{prefix}"
    );
    let json = m.ok("cat 't/.scan/prefix=com.a&family=contents&format=json'");
    assert!(
        json.lines().all(|l| l.starts_with("{\"row\":\"com.a\"")),
        "{json}"
    );
    let escaped = m.ok("cat 't/.scan/prefix=com.a&column=contents:html'");
    assert!(escaped.ends_with("\t<p> hi\n"), "{escaped}");
    assert_eq!(
        m.ok("cat t/.scan/limit=2 | cut -f1 | uniq"),
        "com.a\ncom.b\n"
    );
    assert!(m.fails("cat t/.scan/bogus=1").contains("Invalid argument"));
}

#[test]
fn time_travel_and_status_are_read_only() {
    let m = Mount::new();
    m.table("t", "f max_versions=10\n");
    m.mutate(
        "t",
        b"set r f:q old 1000\nset r f:q new 3000\nset r f:later x 5000\n",
    );
    assert_eq!(m.ok("cat t/.at/2000/r/f/q"), "old");
    assert_eq!(m.ok("cat t/.at/0000000000004000/r/f/q"), "new");
    assert_eq!(m.ok("ls t/.at/4000/r/f"), "q\n");
    assert!(m.fails("ls t/.at/500/r").contains("No such file"));
    assert!(m
        .fails("echo x > t/.at/2000/r/f/q")
        .contains("Read-only file system"));
    assert!(m
        .fails("rm t/.at/2000/r/f/q")
        .contains("Read-only file system"));
    assert!(m
        .fails("mkdir t/.at/2000/r2")
        .contains("Read-only file system"));
    let status = m.ok("ls .bigtable");
    for f in ["mount", "stats", "status", "tables", "tablets"] {
        assert!(status.contains(f), "{status}");
    }
    assert!(m.ok("cat .bigtable/tables").contains("t "));
    assert!(m.ok("cat .bigtable/stats").contains("lookups"));
    assert!(!m.ok("cat .bigtable/tablets").is_empty());
    let e = m.sh("python3 -c \"import os\ntry:\n  os.open('.bigtable/stats', os.O_WRONLY)\nexcept OSError as e: print(e.errno)\"");
    assert_eq!(
        String::from_utf8_lossy(&e.stdout).trim(),
        libc::EROFS.to_string()
    );
}

#[test]
fn names_are_escaped_and_long_keys_hashed() {
    let m = Mount::new();
    m.table("t", "f\n");
    let long = "k".repeat(400);
    m.mutate(
        "t",
        format!("set a/b f:100%25 1\nset .dot f:x 2\nset {long} f:{long} 3\nset sp%20ace f:q 4\n")
            .as_bytes(),
    );
    let ls = m.ok("ls -A t");
    let names: Vec<&str> = ls.lines().collect();
    assert!(
        names.contains(&"a%2Fb") && names.contains(&"%2Edot") && names.contains(&"sp ace"),
        "{ls}"
    );
    assert_eq!(m.ok("cat t/a%2Fb/f/100%25"), "1");
    assert_eq!(m.ok("cat t/%2Edot/f/x"), "2");
    let hashed = names
        .iter()
        .find(|n| n.starts_with("kkk"))
        .unwrap()
        .to_string();
    assert!(hashed.len() <= 255 && hashed.contains("%#"), "{hashed}");
    let q = m.ok(&format!("ls t/{hashed}/f")).trim().to_string();
    assert_eq!(m.ok(&format!("cat t/{hashed}/f/{q}")), "3");
    let key = m.ok(&format!(
        "python3 -c \"import os,sys; sys.stdout.write(os.getxattr('t/{hashed}', 'user.bigtable.key').decode())\""
    ));
    assert_eq!(key, long);
    let attrs = m.ok(&format!(
        "python3 -c \"import os; print(sorted(os.listxattr('t/{hashed}/f/{q}')))\""
    ));
    assert!(
        attrs.contains("user.bigtable.key") && attrs.contains("user.bigtable.timestamp"),
        "{attrs}"
    );
    // find and grep -r walk the tree (and skip the virtual directories).
    let found = m.ok("find t -type f | sort");
    assert!(
        found.contains("t/a%2Fb/f/100%25\n") && !found.contains(".versions"),
        "{found}"
    );
    assert!(m.ok("grep -rl '^2$' t").contains("%2Edot"));
}

#[test]
fn rename_within_a_row_and_mv_across_rows() {
    let m = Mount::new();
    m.table("t", "f\ng\n");
    m.mutate("t", b"set r f:a 1\nset s g:z 2\n");
    m.ok("mv t/r/f/a t/r/f/b");
    assert_eq!(m.ok("cat t/r/f/b"), "1");
    assert!(m.fails("cat t/r/f/a").contains("No such file"));
    m.ok("mkdir -p t/s/f && mv t/r/f/b t/s/f/b");
    assert_eq!(m.ok("cat t/s/f/b"), "1");
    m.ok("cp t/s/g/z t/r/f/copy && cmp t/s/g/z t/r/f/copy");
}

/// A table listed twice with the kernel's copy of its listing dropped in
/// between is kept whole by the daemon (docs/mount.md, "Caching"): every
/// change made with shell tools shows in the listing right after it.
#[test]
fn a_listing_the_daemon_keeps_follows_every_change() {
    if !tests::drop_kernel_caches() {
        eprintln!("not root: cannot drop the kernel's listings; skipping");
        return;
    }
    let m = Mount::new();
    m.table("t", "f\n");
    let rows: String = (0..300).map(|i| format!("set k{i:03} f:q v\n")).collect();
    m.mutate("t", rows.as_bytes());
    let ls = || {
        assert!(tests::drop_kernel_caches());
        m.ok("ls t")
    };
    for (change, row, listed) in [
        ("mkdir -p t/n1/f && echo v > t/n1/f/q", "n1", true),
        ("echo 'set n2 f:q v' > t/.mutate", "n2", true),
        ("rm -r t/n1", "n1", false),
        ("echo 'deleterow n2' > t/.mutate", "n2", false),
        ("mkdir t/n3", "n3", true),
        ("rmdir t/n3", "n3", false),
        (
            "mv t/k000/f/q t/k001/f/moved && rm -r t/k000",
            "k000",
            false,
        ),
    ] {
        ls();
        ls();
        assert!(
            m.stat("kept_listing_bytes") > 0,
            "not kept before `{change}`"
        );
        m.ok(change);
        let out = ls();
        assert_eq!(
            out.lines().any(|l| l == row),
            listed,
            "after `{change}`: {row} listed: {out}"
        );
        assert_eq!(
            out.lines().filter(|l| l.starts_with('k')).count(),
            if row == "k000" { 299 } else { 300 }
        );
    }
}
