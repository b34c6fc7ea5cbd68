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
