#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Copying trees in and out with tar, and arbitrary bytes everywhere.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use tests::{field, key_name, Mount};

fn run(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Byte-for-byte comparison of two trees (names, kinds and contents).
fn same_tree(a: &Path, b: &Path) {
    let mut ea: Vec<_> = fs::read_dir(a)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut eb: Vec<_> = fs::read_dir(b)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    ea.sort();
    eb.sort();
    assert_eq!(ea, eb, "entries of {} and {}", a.display(), b.display());
    for name in ea {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let ma = fs::metadata(&pa).unwrap();
        assert_eq!(
            ma.is_dir(),
            fs::metadata(&pb).unwrap().is_dir(),
            "{}",
            pa.display()
        );
        if ma.is_dir() {
            same_tree(&pa, &pb);
        } else {
            assert_eq!(
                fs::read(&pa).unwrap(),
                fs::read(&pb).unwrap(),
                "contents of {}",
                pa.display()
            );
        }
    }
}

#[test]
fn tar_copies_tables_in_and_out_byte_for_byte() {
    let m = Mount::new();
    // The schema text as the mount writes it, so the round trip is exact.
    m.table("proto", "anchor max_versions=5\ncontents\n");
    let schema = fs::read(m.path("proto/.schema")).unwrap();
    m.ok("rm -r proto");

    let src = tempfile::tempdir().unwrap();
    for t in ["web", "logs"] {
        let root = src.path().join(t);
        fs::create_dir(&root).unwrap();
        fs::write(root.join(".schema"), &schema).unwrap();
        fs::write(root.join(".mutate"), b"").unwrap();
        for r in 0..40 {
            let row = root.join(format!("row{r:03}"));
            for fam in ["anchor", "contents"] {
                if (r + fam.len()) % 3 == 0 {
                    continue;
                }
                fs::create_dir_all(row.join(fam)).unwrap();
                for q in 0..(r % 4 + 1) {
                    let data: Vec<u8> = (0..(r * 37 + q * 1000) as u32)
                        .map(|i| (i * 13 + q as u32) as u8)
                        .collect();
                    fs::write(row.join(fam).join(format!("q{q} name with spaces")), data).unwrap();
                }
            }
            fs::create_dir_all(row.join("contents")).unwrap();
            fs::write(row.join("contents").join("ünïcödé"), "text\n").unwrap();
        }
    }
    let work = tempfile::tempdir().unwrap();
    let a = work.path().join("in.tar");
    let b = work.path().join("out.tar");
    // --sort=name puts each table's .schema before its rows.
    run(Command::new("tar")
        .arg("--sort=name")
        .arg("-C")
        .arg(src.path())
        .arg("-cf")
        .arg(&a)
        .args(["web", "logs"]));
    run(Command::new("tar").arg("-C").arg(&m.mnt).arg("-xf").arg(&a));
    same_tree(&src.path().join("web"), &m.path("web"));
    run(Command::new("tar")
        .arg("-C")
        .arg(&m.mnt)
        .arg("-cf")
        .arg(&b)
        .args(["web", "logs"]));
    let back = work.path().join("back");
    fs::create_dir(&back).unwrap();
    run(Command::new("tar").arg("-C").arg(&back).arg("-xf").arg(&b));
    same_tree(src.path(), &back);
    // And a second copy inside the mount, from the mount's own archive.
    let again = tempfile::tempdir().unwrap();
    run(Command::new("tar")
        .arg("-C")
        .arg(again.path())
        .arg("-xf")
        .arg(&b));
    fs::rename(again.path().join("web"), again.path().join("web2")).unwrap();
    run(Command::new("tar")
        .arg("--sort=name")
        .arg("-C")
        .arg(again.path())
        .arg("-cf")
        .arg(&a)
        .arg("web2"));
    run(Command::new("tar").arg("-C").arg(&m.mnt).arg("-xf").arg(&a));
    same_tree(&m.path("web"), &m.path("web2"));
}

#[test]
fn every_byte_in_keys_qualifiers_and_values() {
    let m = Mount::new();
    m.table("t", "f\n");
    let all: Vec<u8> = (0..=255u8).collect();
    // Through .mutate: every byte in a row key, a qualifier and a value.
    let mut batch = Vec::new();
    for b in 0..=255u8 {
        batch.extend_from_slice(b"set ");
        batch.extend(field(&[b'r', b]));
        batch.extend_from_slice(b" f:");
        batch.extend(field(&[b]));
        batch.push(b' ');
        batch.extend(field(&all));
        batch.push(b'\n');
    }
    m.mutate("t", &batch);
    for b in 0..=255u8 {
        let mut p = m.mnt.join("t").as_os_str().as_bytes().to_vec();
        p.push(b'/');
        p.extend(key_name(&[b'r', b]));
        p.extend_from_slice(b"/f/");
        p.extend(key_name(&[b]));
        let path = Path::new(std::ffi::OsStr::from_bytes(&p));
        assert_eq!(fs::read(path).unwrap(), all, "byte {b}");
    }
    // Listed in key order under their escaped names.
    let mut rows: Vec<Vec<u8>> = fs::read_dir(m.path("t"))
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .filter(|n| n.first() != Some(&b'.'))
        .collect();
    assert_eq!(rows.len(), 256);
    let expected: Vec<Vec<u8>> = (0..=255u8).map(|b| key_name(&[b'r', b])).collect();
    rows.sort();
    let mut exp_sorted = expected.clone();
    exp_sorted.sort();
    assert_eq!(rows, exp_sorted);
    // Through files: qualifiers with every byte a filename can hold, written with write(2).
    fs::create_dir_all(m.path("t/files/f")).unwrap();
    for b in 1..=255u8 {
        if b == b'/' {
            continue;
        }
        let mut p = m.path("t/files/f").as_os_str().as_bytes().to_vec();
        p.push(b'/');
        p.extend(key_name(&[b, b'x', b]));
        fs::write(
            Path::new(std::ffi::OsStr::from_bytes(&p)),
            [&all[..], &[b]].concat(),
        )
        .unwrap();
    }
    let tsv = m.ok("cat 't/.scan/prefix=files'");
    assert_eq!(tsv.lines().count(), 254, "one line per cell");
    let listed = fs::read_dir(m.path("t/files/f")).unwrap().count();
    assert_eq!(listed, 254);
    // JSON lines give back the exact bytes (surrogateescape).
    let check = m.ok(
        "python3 - <<'EOF'\nimport json\nall_ = bytes(range(256))\nn = 0\nfor line in open('t/.scan/prefix=r&format=json', encoding='utf-8', errors='surrogatepass'):\n    o = json.loads(line)\n    v = o['value'].encode('utf-8', 'surrogateescape')\n    assert v == all_, (o['row'], v[:20])\n    n += 1\nprint(n)\nEOF",
    );
    assert_eq!(check.trim(), "256");
}
