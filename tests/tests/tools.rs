#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Everyday tools on the mount: cp, rsync, grep -r, stat, getfattr, Python's
//! os module and a shell loop.

use std::path::Path;
use tests::Mount;

fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn cp_grep_stat_python_and_a_shell_loop() {
    let m = Mount::new();
    m.table("t", "f\ng\n");
    // A shell loop writing cells, then reading them back.
    m.ok("mkdir -p t/r/f && for i in $(seq 1 50); do echo \"value $i\" > t/r/f/q$i; done");
    assert_eq!(m.ok("cat t/r/f/q7"), "value 7\n");
    assert_eq!(m.ok("ls t/r/f | wc -l").trim(), "50");
    assert_eq!(m.ok("grep -rl 'value 42$' t"), "t/r/f/q42\n");
    assert_eq!(m.ok("stat -c '%s %F %a' t/r/f/q1"), "8 regular file 644\n");
    assert_eq!(m.ok("stat -c '%F' t/r"), "directory\n");
    // cp in, cp out, cp -r of a row into another row.
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("blob"), vec![7u8; 200_000]).unwrap();
    m.ok(&format!(
        "cp {}/blob t/r/f/blob && cmp {}/blob t/r/f/blob",
        src.path().display(),
        src.path().display()
    ));
    m.ok("cp -r t/r t/r2 && diff -r t/r t/r2");
    // Python's os module.
    let py = m.ok(
        "python3 - <<'EOF'\nimport os\nn = sum(len(fs) for _, _, fs in os.walk('t'))\nos.makedirs('t/r3/g', exist_ok=True)\nwith open('t/r3/g/x', 'wb') as f:\n    f.write(b'abc')\nos.rename('t/r3/g/x', 't/r3/g/y')\nprint(n, open('t/r3/g/y').read(), sorted(os.listdir('t/r3/g')), os.path.getsize('t/r3/g/y'))\nEOF",
    );
    assert_eq!(py.trim(), "104 abc ['y'] 3", "{py}");
}

#[test]
fn getfattr_shows_full_keys() {
    if !have("getfattr") {
        eprintln!("getfattr is not installed (package attr): skipped");
        return;
    }
    let m = Mount::new();
    m.table("t", "f\n");
    let long = "x".repeat(300);
    m.mutate("t", format!("set {long} f:q v\n").as_bytes());
    let name = m.ok("ls t").trim().to_string();
    assert!(name.contains("%#"));
    assert_eq!(
        m.ok(&format!(
            "getfattr --only-values -n user.bigtable.key t/{name}"
        )),
        long
    );
    assert!(m
        .ok(&format!("getfattr -d t/{name}/f/q"))
        .contains("user.bigtable.timestamp="));
}

#[test]
fn rsync_copies_trees_in_and_out() {
    if !have("rsync") {
        eprintln!("rsync is not installed: skipped");
        return;
    }
    let m = Mount::new();
    m.table("t", "f\n");
    let src = tempfile::tempdir().unwrap();
    for r in 0..10 {
        let d = src.path().join(format!("row{r}/f"));
        std::fs::create_dir_all(&d).unwrap();
        for q in 0..5 {
            std::fs::write(
                d.join(format!("q{q}")),
                format!("{r}-{q}\n").repeat(r * 10 + q + 1),
            )
            .unwrap();
        }
    }
    // rsync writes each file under a temporary name, then renames it.
    m.ok(&format!("rsync -a {}/ t/", src.path().display()));
    m.ok(&format!(
        "diff -r {} t --exclude=.schema --exclude=.mutate",
        src.path().display()
    ));
    let out = tempfile::tempdir().unwrap();
    m.ok(&format!(
        "rsync -a --exclude=.mutate t/ {}/",
        out.path().display()
    ));
    assert!(Path::new(&out.path().join(".schema")).exists());
    m.ok(&format!(
        "diff -r {} {} --exclude=.schema",
        src.path().display(),
        out.path().display()
    ));
    // A second run finds nothing to do, and changed files are updated.
    m.ok(&format!(
        "echo changed > {}/row3/f/q1",
        src.path().display()
    ));
    m.ok(&format!("rsync -a {}/ t/", src.path().display()));
    assert_eq!(m.ok("cat t/row3/f/q1"), "changed\n");
}

#[test]
fn a_child_closing_an_inherited_descriptor_commits_nothing() {
    let m = Mount::new();
    m.table("t", "f\n");
    m.mutate("t", b"set r1 f:q a\n");
    // A process writes a batch and a value in two parts; between them it
    // runs a child, which closes its copy of each descriptor at exec (they
    // are close-on-exec), sending the open file a flush. Only the writer's
    // own close commits.
    let script = r#"
import os, subprocess
b = os.open("t/.mutate", os.O_WRONLY)
v = os.open("t/r1/f/q", os.O_WRONLY | os.O_TRUNC)
os.write(b, b"set r2 f:q b\nset r")
os.write(v, b"hal")
subprocess.run(["true"], check=True)
print(os.path.exists("t/r2"), open("t/r1/f/q").read())
os.write(b, b"3 f:q c\n")
os.write(v, b"f")
os.close(b)
os.close(v)
print(open("t/r2/f/q").read(), open("t/r3/f/q").read(), open("t/r1/f/q").read())
"#;
    let out = m.ok(&format!("python3 - <<'EOF'\n{script}\nEOF"));
    assert_eq!(out, "False a\nb c half\n");
}
