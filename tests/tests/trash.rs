#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Deletion protection and the trash, through the mount with real shell
//! tools (docs/trash.md).

use tests::Mount;

#[test]
fn deletion_protection_stops_rm_rmdir_and_family_drops() {
    let mut m = Mount::new();
    m.table("t", "f\ng\n");
    m.mutate("t", b"set r f:q v\nset r g:q w\n");
    m.ok("echo '.table deletion_protection=true' >> t/.schema");
    assert!(
        m.ok("cat t/.schema")
            .starts_with(".table deletion_protection=true\n"),
        "{}",
        m.ok("cat t/.schema")
    );
    // Kept with the schema.
    m.remount();
    assert!(m
        .ok("cat t/.schema")
        .starts_with(".table deletion_protection=true\n"));
    let e = m.fails("rm -r t");
    assert!(e.contains("Operation not permitted"), "{e}");
    let e = m.fails("rmdir t");
    assert!(e.contains("Operation not permitted"), "{e}");
    let e = m.fails("rm t/r/g/q");
    assert!(e.contains("Operation not permitted"), "{e}");
    // Refused removals take no removal snapshot.
    assert_eq!(m.ok("ls t/.snapshots/"), "");
    // Dropping a family, by rewriting the whole file.
    let e = m.fails("python3 -c \"f = open('t/.schema', 'w'); f.write('f\\n'); f.close()\"");
    assert!(e.contains("Operation not permitted"), "{e}");
    assert!(m.ok("cat t/.schema").contains("\ng "));
    // Nothing went on the way.
    assert_eq!(m.ok("cat t/r/f/q"), "v");
    assert_eq!(m.ok("cat t/r/g/q"), "w");
    // Only the table's owner may turn it off, even with write access.
    m.ok("chmod 0777 t");
    let o = m.sh_as_nobody("echo '.table deletion_protection=false' >> t/.schema");
    assert!(!o.status.success(), "{o:?}");
    assert!(m.ok("cat t/.schema").starts_with(".table"));
    // Its owner turns it off, and the table goes.
    m.ok("echo '.table deletion_protection=false' >> t/.schema");
    assert!(!m.ok("cat t/.schema").contains(".table"));
    m.ok("rm -r t");
    assert!(!m.ok("ls").lines().any(|l| l == "t"));
}

/// The trash's entries: (id, name, tablets, files) per line.
fn trash(m: &Mount) -> Vec<(String, String, u64, u64)> {
    m.ok("cat .bigtable/trash")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[0].to_string(),
                w[1].to_string(),
                w[6].parse().unwrap(),
                w[7].parse().unwrap(),
            )
        })
        .collect()
}

fn trash_id(m: &Mount, name: &str) -> String {
    let t = trash(m);
    let mut ids = t.iter().filter(|e| e.1 == name).map(|e| e.0.clone());
    ids.next()
        .unwrap_or_else(|| panic!("no {name} in the trash: {t:?}"))
}

#[test]
fn deleted_tables_wait_in_the_trash_and_come_back_whole() {
    let mut m = Mount::new();
    m.table("t", "f\n");
    m.mutate("t", b"set r1 f:q one\nset r2 f:q two\n");
    m.ok("sync t/.mutate");
    m.ok("echo 'delete t' > .bigtable/control");
    assert!(!m.ok("ls").lines().any(|l| l == "t"));
    let id = trash_id(&m, "t");
    let entry = trash(&m).into_iter().find(|e| e.0 == id).unwrap();
    assert!(entry.2 >= 1 && entry.3 >= 1, "{entry:?}");
    // The name is free at once, and a new table there is a new table.
    m.table("t", "g\n");
    assert!(!m.ok("cat t/.schema").contains("f "));
    m.fails(&format!("echo 'undelete {id}' > .bigtable/control"));
    assert!(m.log_text().contains("table already exists: t"));
    assert!(m.ok("cat t/.schema").starts_with("g "));
    // Back under another name, whole.
    m.ok(&format!("echo 'undelete {id} old' > .bigtable/control"));
    assert_eq!(m.ok("cat old/r1/f/q"), "one");
    assert_eq!(m.ok("cat old/r2/f/q"), "two");
    assert!(m.ok("cat old/.schema").starts_with("f "));
    assert!(trash(&m).iter().all(|e| e.0 != id));

    // kill -9 right after a delete: after the restart it is in the trash, whole.
    m.table("u", "f\n");
    m.mutate("u", b"set r f:q kept\n");
    m.ok("echo 'delete u' > .bigtable/control");
    m.kill9();
    m.start();
    let id = trash_id(&m, "u");
    assert!(!m.ok("ls").lines().any(|l| l == "u"));
    m.ok(&format!("echo 'undelete {id}' > .bigtable/control"));
    assert_eq!(m.ok("cat u/r/f/q"), "kept");

    // rm -r empties a table cell by cell, then its rmdir trashes what is left.
    m.table("v", "f\n");
    m.mutate("v", b"set r f:q x\n");
    m.ok("rm -r v");
    let id = trash_id(&m, "v");
    // Purged by hand: gone from the trash.
    m.ok(&format!("echo 'purge {id}' > .bigtable/control"));
    assert!(trash(&m).iter().all(|e| e.0 != id));
    // Only root may write commands.
    let o = m.sh_as_nobody("echo 'undelete 1' > .bigtable/control");
    assert!(!o.status.success());
}

#[test]
fn the_trash_is_collected_when_its_period_runs_out() {
    // About 1.7 s.
    let m = Mount::with_options(&["trash_days=0.00002"]);
    m.table("t", "f\n");
    m.mutate("t", b"set r f:q v\n");
    m.ok("echo 'delete t' > .bigtable/control");
    let id = trash_id(&m, "t");
    // The master collects once every 30 s or so.
    let gone = testkit::wait_until(std::time::Duration::from_secs(120), || {
        trash(&m).iter().all(|e| e.0 != id)
    });
    assert!(gone, "{:?}", trash(&m));
    assert!(m.log_text().contains(&format!("purged table t (id {id})")));
}

/// The removal snapshots of `table`, oldest first.
fn removal_snapshots(m: &Mount, table: &str) -> Vec<String> {
    let mut s: Vec<String> = m
        .ok(&format!("ls {table}/.snapshots/"))
        .lines()
        .filter(|l| l.starts_with("removed-"))
        .map(String::from)
        .collect();
    s.sort();
    s
}

/// Every cell of `table` as `row/family/qualifier=value` lines, sorted.
fn cells(m: &Mount, table: &str) -> String {
    m.ok(&format!(
        "cd {table} && for f in */*/*; do if [ -f \"$f\" ]; then printf '%s=%s\\n' \"$f\" \"$(cat \"$f\")\"; fi; done | sort"
    ))
}

#[test]
fn rm_r_of_a_table_is_undone_by_undelete_from_its_removal_snapshot() {
    let m = Mount::new();
    m.table("t", "f\ng\n");
    let mut batch = String::new();
    let mut want = Vec::new();
    for r in 0..20 {
        for (fam, q) in [("f", "a"), ("f", "b"), ("g", "c")] {
            batch += &format!("set row{r:02} {fam}:{q} v{r}{fam}{q}\n");
            want.push(format!("row{r:02}/{fam}/{q}=v{r}{fam}{q}"));
        }
    }
    want.sort();
    let want = want.join("\n") + "\n";
    m.mutate("t", batch.as_bytes());
    assert_eq!(cells(&m, "t"), want);
    assert!(removal_snapshots(&m, "t").is_empty());

    // The real rm, bottom up: every cell deleted, then the table trashed.
    m.ok("rm -r t");
    assert!(!m.ok("ls").lines().any(|l| l == "t"));
    let id = trash_id(&m, "t");
    m.ok(&format!("echo 'undelete {id}' > .bigtable/control"));
    assert!(m.ok("ls").lines().any(|l| l == "t"));
    // It came back empty, so undelete restored it from the removal
    // snapshot, taken before the first unlink: every cell is back.
    let snaps = removal_snapshots(&m, "t");
    assert!(!snaps.is_empty(), "{}", m.ok("ls -a t/.snapshots/"));
    assert_eq!(cells(&m, "t"), want);
    assert!(m.log_text().contains(&format!(
        "undelete of t: it came back empty, restored from its removal snapshot {}",
        snaps[0]
    )));
    // The snapshot holds it all, restored by hand too.
    m.ok("rm t/row00/f/a");
    m.ok(&format!(
        "echo 'restore t {}' > .bigtable/control",
        snaps[0]
    ));
    assert_eq!(cells(&m, "t"), want);

    // A table deleted whole comes back as it was, not from an older
    // removal snapshot.
    m.ok("rm t/row01/f/a");
    m.ok("echo 'delete t' > .bigtable/control");
    let id = trash_id(&m, "t");
    m.ok(&format!("echo 'undelete {id}' > .bigtable/control"));
    let back = cells(&m, "t");
    assert!(
        back.contains("row00/f/a=") && !back.contains("row01/f/a="),
        "{back}"
    );
}

#[test]
fn one_removal_streak_takes_one_snapshot_and_none_without_the_trash() {
    let m = Mount::new();
    m.table("u", "f\n");
    m.mutate("u", b"set r f:a one\nset r f:b two\n");
    m.ok("rm u/r/f/a");
    let snaps = removal_snapshots(&m, "u");
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    assert_eq!(m.ok(&format!("cat u/.snapshots/{}/r/f/a", snaps[0])), "one");
    assert_eq!(m.ok(&format!("cat u/.snapshots/{}/r/f/b", snaps[0])), "two");
    // The next removal is in the same streak: no second snapshot.
    m.ok("rm u/r/f/b");
    assert_eq!(removal_snapshots(&m, "u"), snaps);
    // Undeleted under another name it comes back empty (snapshots are
    // kept by table name); the log names the snapshot to clone.
    m.ok("rm -r u");
    let id = trash_id(&m, "u");
    m.ok(&format!("echo 'undelete {id} u2' > .bigtable/control"));
    assert_eq!(m.ok("ls u2"), "");
    let hint = format!("`clone u {} NEW` makes a table of it", snaps[0]);
    assert!(m.log_text().contains(&hint), "{hint}");
    m.ok(&format!(
        "echo 'clone u {} u3' > .bigtable/control",
        snaps[0]
    ));
    assert_eq!(m.ok("cat u3/r/f/a u3/r/f/b"), "onetwo");
    drop(m);

    // trash_days=0: deleting is final, and removals take no snapshot.
    let m = Mount::with_options(&["trash_days=0"]);
    m.table("w", "f\n");
    m.mutate("w", b"set r f:a one\n");
    m.ok("rm w/r/f/a");
    assert_eq!(m.ok("ls w/.snapshots/"), "");
}
