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
