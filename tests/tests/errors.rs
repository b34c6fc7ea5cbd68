#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Precise errnos for bad input, and permissions for other users.

use tests::Mount;

/// Runs Python `code` in the mount; it prints one errno (or 0) per probe.
fn errnos(m: &Mount, code: &str) -> Vec<i32> {
    let script = format!(
        "import os, errno\n\
def probe(f):\n    try:\n        f()\n        print(0)\n    except OSError as e:\n        print(e.errno)\n\
def write(p, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):\n    fd = os.open(p, flags, 0o644)\n    try:\n        while data:\n            data = data[os.write(fd, data):]\n    finally:\n        os.close(fd)\n{code}"
    );
    let out = m.ok(&format!("python3 - <<'EOF'\n{script}\nEOF"));
    out.lines().map(|l| l.trim().parse().unwrap()).collect()
}

#[test]
fn bad_input_gets_precise_errnos() {
    let m = Mount::with_options(&["max_value=1m"]);
    m.table("t", "f\n");
    m.mutate("t", b"set r f:q v\n");
    let got = errnos(
        &m,
        "probe(lambda: os.mkdir('t/r/nofam'))\n\
probe(lambda: write('t/r/nofam/q', b'x'))\n\
probe(lambda: os.mkdir('missing/row'))\n\
probe(lambda: write('t/r/f/big', b'x' * (1024 * 1024 + 1)))\n\
probe(lambda: write('t/.schema', b'f\\nbad setting=1\\n'))\n\
probe(lambda: write('t/.schema', b'g\\n'))\n\
probe(lambda: os.rmdir('t/r'))\n\
probe(lambda: write('t/.at/9999999999999999/r/f/q', b'x'))\n\
probe(lambda: os.open('.bigtable/stats', os.O_WRONLY))\n\
probe(lambda: os.mkdir('t'))\n\
probe(lambda: os.listdir('t/r/f/q'))\n\
probe(lambda: open('t/r/f', 'rb').read())\n\
probe(lambda: write('t/.mutate', b'set r nofam:q 1\\n'))\n\
probe(lambda: write('t/.mutate', b'set r f:q\\n'))\n\
probe(lambda: write('t/rowfile', b'x'))\n\
probe(lambda: os.mkdir('t/%41'))\n\
probe(lambda: write('t/r/f/q', b'ok'))\n",
    );
    use libc::*;
    assert_eq!(
        got,
        vec![
            ENOENT, ENOENT, ENOENT, EFBIG, EINVAL, ENOTEMPTY, ENOTEMPTY, EROFS, EROFS, EEXIST,
            ENOTDIR, EISDIR, ENOENT, EINVAL, EPERM, EINVAL, 0
        ]
    );
    // Nothing of the failed writes was applied.
    assert_eq!(m.ok("cat t/r/f/q"), "ok");
    assert!(m.ok("cat t/.schema").starts_with("f "));
    assert!(m.fails("ls t/r/f/big").contains("No such file"));
    // Each refusal left a log line.
    let log = m.log_text();
    assert!(
        log.contains("bad setting") || log.contains("line 2"),
        "{}",
        tests::tail(&log, 30)
    );
}

#[test]
fn family_permissions_are_enforced_for_other_users() {
    let m = Mount::new();
    m.table("t", "pub mode=0755\npriv mode=0700\nshared mode=0777\n");
    m.mutate(
        "t",
        b"set r pub:a hello\nset r priv:b secret\nset r shared:c open\n",
    );
    let nobody = |s: &str| m.sh_as_nobody(s);
    let o = nobody("cat t/r/pub/a");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hello", "{o:?}");
    let o = nobody("cat t/r/priv/b");
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Permission denied")
    );
    let o = nobody("echo x > t/r/pub/a");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{o:?}"
    );
    let o = nobody("echo x > t/r/shared/c && cat t/r/shared/c");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "x\n", "{o:?}");
    // .mutate and .scan check each family.
    m.ok("chmod 0777 t");
    let o = nobody("printf 'set r priv:z 1\\n' > t/.mutate");
    assert!(!o.status.success(), "{o:?}");
    assert!(m.fails("ls t/r/priv/z").contains("No such file"));
    let o = nobody("printf 'set r shared:z 1\\n' > t/.mutate");
    assert!(o.status.success(), "{o:?}");
    let o = nobody("cat t/.scan/all");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("pub:a") && !out.contains("secret"), "{out}");
    let o = nobody("cat t/.scan/family=priv");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{o:?}"
    );
    // chmod/chown of a family directory change the family (stored in the schema).
    m.ok("chmod 0755 t/r/priv");
    assert!(m
        .ok("cat t/.schema")
        .lines()
        .any(|l| l.starts_with("priv ") && l.contains("mode=0755")));
    let o = nobody("cat t/r/priv/b");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "secret", "{o:?}");
    m.ok("chown 65534 t/r/priv && chmod 0700 t/r/priv");
    let o = nobody("cat t/r/priv/b");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "secret", "{o:?}");
    // The table's own bits: nobody cannot create rows in a 0755 table.
    m.ok("chmod 0755 t");
    let o = nobody("mkdir t/newrow");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{o:?}"
    );
}
