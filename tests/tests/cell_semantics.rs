#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What programs that test filesystems (fsx, pjdfstest, fsstress, rsync)
//! expect of a file, wherever a cell can give it (docs/cell-semantics.md
//! lists where it cannot).

use tests::Mount;

/// Runs Python `code` in the mount and returns its stdout, trimmed.
fn py(m: &Mount, code: &str) -> String {
    let script = format!(
        "import os, errno, mmap, socket, stat, sys\n\
def probe(f):\n    try:\n        f()\n        return 0\n    except OSError as e:\n        return e.errno\n\
{code}"
    );
    m.ok(&format!("python3 - <<'EOF'\n{script}\nEOF"))
        .trim()
        .to_string()
}

fn table(m: &Mount) {
    m.table("t", "f\ng\n");
    m.mutate("t", b"set r f:c old\n");
}

#[test]
fn a_cell_unlinked_while_open_stays_deleted() {
    let mut m = Mount::new();
    table(&m);
    let out = py(
        &m,
        "fd = os.open('t/r/f/c', os.O_RDWR)\n\
os.write(fd, b'new')\n\
os.unlink('t/r/f/c')\n\
os.fsync(fd)\n\
os.close(fd)\n\
print(os.path.exists('t/r/f/c'), 'c' in os.listdir('t/r/f'))\n\
# A cell created and never closed: its unlink removes it.\n\
fd = os.open('t/r/f/n', os.O_CREAT | os.O_WRONLY, 0o644)\n\
os.write(fd, b'pending')\n\
print(probe(lambda: os.unlink('t/r/f/n')), 'n' in os.listdir('t/r/f'), os.path.exists('t/r/f/n'))\n\
os.close(fd)\n\
print(os.path.exists('t/r/f/n'), 'n' in os.listdir('t/r/f'))\n\
# The name can be used again at once, and that file commits.\n\
fd = os.open('t/r/f/c', os.O_CREAT | os.O_WRONLY, 0o644)\n\
os.write(fd, b'again')\n\
os.close(fd)\n\
print(open('t/r/f/c').read())\n",
    );
    assert_eq!(
        out,
        "False False\n0 False False\nFalse False\nagain",
        "log: {}",
        tests::tail(&m.log_text(), 20)
    );
    // After a remount too: nothing of the unlinked buffers was committed.
    m.remount();
    assert!(!m.path("t/r/f/n").exists());
    assert_eq!(std::fs::read_to_string(m.path("t/r/f/c")).unwrap(), "again");
}

#[test]
fn fstat_of_an_unlinked_cell_answers_with_nlink_0() {
    let m = Mount::new();
    table(&m);
    let out = py(
        &m,
        "w = os.open('t/r/f/c', os.O_RDWR)\n\
r = os.open('t/r/f/c', os.O_RDONLY)\n\
os.write(w, b'newer')\n\
print(os.fstat(w).st_nlink, os.fstat(r).st_nlink)\n\
os.unlink('t/r/f/c')\n\
# One inode, one size: the writer's, as the kernel has seen it written.\n\
sw, sr = os.fstat(w), os.fstat(r)\n\
print(sw.st_nlink, sw.st_size, sr.st_nlink, sr.st_size)\n\
print(os.pread(w, 10, 0), os.pread(r, 10, 0))\n\
os.close(w); os.close(r)\n",
    );
    assert_eq!(out, "1 1\n0 5 0 5\nb'newer' b'old'");
}

#[test]
fn shared_maps_of_writable_cells_read_and_write() {
    let m = Mount::new();
    table(&m);
    let out = py(
        &m,
        "fd = os.open('t/r/f/c', os.O_RDWR)\n\
mm = mmap.mmap(fd, 3, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)\n\
print(mm[:])\n\
mm[0:3] = b'NEW'\n\
# Not committed before msync: another reader sees the old value.\n\
print(open('t/r/f/c', 'rb').read())\n\
mm.flush()\n\
print(open('t/r/f/c', 'rb').read())\n\
mm[0:1] = b'Z'\n\
mm.close()\n\
os.close(fd)\n\
print(open('t/r/f/c', 'rb').read())\n\
# A read-only shared map of a cell opened for writing.\n\
fd = os.open('t/r/f/c', os.O_RDWR)\n\
mm = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)\n\
print(mm[:])\n\
mm.close(); os.close(fd)\n",
    );
    assert_eq!(out, "b'old'\nb'old'\nb'NEW'\nb'ZEW'\nb'ZEW'");
}

/// A writer's pwrite, then a private map of its own descriptor, fill the
/// inode's one page cache with bytes nobody committed; readers opened
/// meanwhile, and after the writer goes away without committing, must
/// never see them (by read or by their own map). The kernel keeps one size
/// per inode, so a reader's map made while the writer has grown the file
/// is that long: past the committed value it reads zeros.
#[test]
fn readers_never_see_what_a_writer_did_not_commit() {
    let m = Mount::new();
    table(&m);
    let out = py(
        &m,
        "bad = []\n\
def same(seen, committed):\n    \
    return seen[:len(committed)] == committed and not seen[len(committed):].strip(b'\\0')\n\
for i in range(150):\n    \
    committed = open('t/r/f/c', 'rb').read()\n    \
    w = os.open('t/r/f/c', os.O_RDWR)\n    \
    os.pwrite(w, b'UNCOMMITTED-%d' % i, i % 5)\n    \
    pm = mmap.mmap(w, 0, mmap.MAP_PRIVATE, mmap.PROT_READ)\n    \
    seen_by_writer = pm[:]\n    \
    r = os.open('t/r/f/c', os.O_RDONLY)\n    \
    got = os.pread(r, 100, 0)\n    \
    rm = mmap.mmap(r, 0, mmap.MAP_PRIVATE, mmap.PROT_READ)\n    \
    got_map = rm[:]\n    \
    rm.close(); os.close(r)\n    \
    if got != committed or not same(got_map, committed): bad.append(('during', i, committed, got, got_map))\n    \
    pm.close()\n    \
    if i % 3 == 0:\n        \
        os.unlink('t/r/f/c')\n        \
        os.close(w)\n        \
        with open('t/r/f/c', 'wb') as f: f.write(b'v%d' % i)\n    \
    else:\n        \
        os.close(w)\n    \
    after = open('t/r/f/c', 'rb').read()\n    \
    fd = os.open('t/r/f/c', os.O_RDONLY)\n    \
    am = mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ)\n    \
    after_map = am[:]\n    \
    am.close(); os.close(fd)\n    \
    if after != after_map: bad.append(('after', i, after, after_map))\n    \
    if i % 3 == 0 and after != b'v%d' % i: bad.append(('recreated', i, after))\n\
print(bad[:3])\n",
    );
    assert_eq!(out, "[]", "log: {}", tests::tail(&m.log_text(), 20));
}

/// A reader that keeps a cell open through the page cache past
/// `reader_wait` lets a writer go on; the writer's own map then faults
/// pages in: the reader must still read the committed value.
#[test]
fn a_cached_reader_outwaited_by_a_writer_never_sees_its_bytes() {
    let m = Mount::with_options(&["reader_wait=0.2"]);
    table(&m);
    let out = py(
        &m,
        "bad = []\n\
for i in range(20):\n    \
    committed = open('t/r/f/c', 'rb').read()\n    \
    r = os.open('t/r/f/c', os.O_RDONLY)\n    \
    first = os.pread(r, 100, 0)\n    \
    w = os.open('t/r/f/c', os.O_RDWR)\n    \
    os.pwrite(w, b'X' * len(committed), 0)\n    \
    pm = mmap.mmap(w, 0, mmap.MAP_PRIVATE, mmap.PROT_READ)\n    \
    seen_by_writer = pm[:]\n    \
    again = os.pread(r, 100, 0)\n    \
    own = os.pread(w, 100, 0)\n    \
    pm.close()\n    \
    if first != committed or again != committed: bad.append((i, committed, first, again, seen_by_writer))\n    \
    if own != b'X' * len(committed): bad.append(('own', i, own))\n    \
    os.close(r)\n    \
    os.ftruncate(w, 0); os.pwrite(w, b'v%03d' % i, 0)\n    \
    os.close(w)\n\
print(bad[:3])\n",
    );
    assert_eq!(out, "[]", "log: {}", tests::tail(&m.log_text(), 20));
}

#[test]
fn mknod_makes_an_empty_cell_and_other_kinds_are_eperm() {
    let m = Mount::new();
    table(&m);
    let out = py(
        &m,
        "print(probe(lambda: os.mknod('t/r/f/reg', 0o644 | stat.S_IFREG)), os.stat('t/r/f/reg').st_size)\n\
print(probe(lambda: os.mknod('t/r/f/reg', 0o644 | stat.S_IFREG)))\n\
print(probe(lambda: os.mkfifo('t/r/f/fifo')))\n\
print(probe(lambda: os.mknod('t/r/f/chr', 0o644 | stat.S_IFCHR, os.makedev(1, 3))))\n\
s = socket.socket(socket.AF_UNIX)\n\
print(probe(lambda: s.bind('t/r/f/sock')))\n\
print(probe(lambda: os.symlink('c', 't/r/f/link')))\n\
print(probe(lambda: os.link('t/r/f/c', 't/r/f/hard')))\n\
print(sorted(os.listdir('t/r/f')))\n",
    );
    let eexist = libc::EEXIST;
    let eperm = libc::EPERM;
    assert_eq!(
        out,
        format!("0 0\n{eexist}\n{eperm}\n{eperm}\n{eperm}\n{eperm}\n{eperm}\n['c', 'reg']")
    );
    assert!(!m.log_text().contains("Not Implemented"));
}

#[test]
fn directory_times_move_when_names_come_and_go() {
    let m = Mount::new();
    table(&m);
    let out = py(
        &m,
        "def t(p):\n    s = os.stat(p)\n    return (s.st_mtime_ns, s.st_ctime_ns)\n\
os.mkdir('t/r/g')\n\
moved = []\n\
before = t('t/r/f')\n\
open('t/r/f/new', 'w').close()\n\
a = t('t/r/f'); moved.append(a > before)\n\
os.rename('t/r/f/new', 't/r/f/renamed')\n\
b = t('t/r/f'); moved.append(b > a)\n\
os.rename('t/r/f/renamed', 't/r/g/other')\n\
c = t('t/r/f'); moved.append(c > b)\n\
os.unlink('t/r/g/other')\n\
os.unlink('t/r/f/c')\n\
moved.append(t('t/r/f') > c)\n\
tb = t('t')\n\
os.mkdir('t/r2')\n\
moved.append(t('t') > tb)\n\
print(moved)\n",
    );
    assert_eq!(out, "[True, True, True, True, True]");
}

#[test]
fn umount_then_mount_at_once_works() {
    let mut m = Mount::new();
    table(&m);
    for _ in 0..3 {
        m.remount_at_once();
        assert_eq!(std::fs::read_to_string(m.path("t/r/f/c")).unwrap(), "old");
    }
}

#[test]
fn set_times_are_kept_and_rsync_copies_nothing_twice() {
    let m = Mount::new();
    table(&m);
    // touch -d: the cell's newest version moves to that time.
    m.ok("touch -d @1500000000.25 t/r/f/c");
    let out = py(
        &m,
        "print(os.stat('t/r/f/c').st_mtime_ns, open('t/r/f/c').read(), os.listdir('t/r/f/.versions/c'))\n",
    );
    assert_eq!(
        out,
        "1500000000250000000 old ['1500000000250000']",
        "{}",
        tests::tail(&m.log_text(), 10)
    );
    // cp -p sets the times on the open file before it closes it.
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    std::fs::write(s.join("a"), "alpha").unwrap();
    std::fs::write(s.join("b"), "beta").unwrap();
    let sd = s.display();
    m.ok(&format!(
        "touch -d @1600000000.123456 {sd}/a && touch -d @1600000001 {sd}/b && \
         cp -p {sd}/a t/r/f/cp && test $(stat -c %Y t/r/f/cp) = 1600000000"
    ));
    // rsync -a: a second run finds every cell up to date.
    m.ok(&format!("mkdir -p t/r2/f && rsync -a {sd}/ t/r2/f/"));
    let second = m.ok(&format!("rsync -a --itemize-changes {sd}/ t/r2/f/"));
    let changed: Vec<&str> = second
        .lines()
        .filter(|l| l.starts_with('>') || l.starts_with('c'))
        .collect();
    assert!(changed.is_empty(), "the second rsync copied {changed:?}");
    assert_eq!(m.ok("cat t/r2/f/a"), "alpha");
    // A time before an older version's would make that version the newest.
    m.ok("echo v2 > t/r/f/c");
    let e = m.fails("touch -d @1400000000 t/r/f/c");
    assert!(e.contains("Invalid argument"), "{e}");
    assert_eq!(m.ok("cat t/r/f/c"), "v2\n");
}

#[test]
fn isatty_and_a_clean_remount_leave_the_log_quiet() {
    let mut m = Mount::new();
    table(&m);
    py(
        &m,
        "for i in range(5):\n    print(os.isatty(os.open('t/r/f/c', os.O_RDONLY)))\n",
    );
    m.remount();
    assert_eq!(std::fs::read_to_string(m.path("t/r/f/c")).unwrap(), "old");
    m.remount();
    let _ = std::fs::read_to_string(m.path("t/r/f/c"));
    let log = m.log_text();
    let noisy: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Not Implemented") || l.contains(" WARN") || l.contains(" ERROR"))
        .collect();
    assert!(noisy.is_empty(), "{noisy:#?}");
}

/// A cell moved into another family keeps its inode number, as a file
/// moved between directories does (pjdfstest rename/00, 09, 10; `tar` and
/// `rsync` track files by (dev, ino)); a cell made at the old name gets a
/// number of its own. No caching of names or attributes, so every `stat`
/// asks the daemon again.
#[test]
fn a_cell_keeps_its_inode_number_across_a_rename() {
    let m = Mount::with_options(&["entry_timeout=0", "attr_timeout=0"]);
    table(&m);
    m.mutate("t", b"set r f:d dee\n");
    let out = py(
        &m,
        "ino = lambda p: os.stat(p).st_ino\n\
os.mkdir('t/r/g')\n\
before = ino('t/r/f/c')\n\
os.rename('t/r/f/c', 't/r/g/c2')\n\
print(ino('t/r/g/c2') == before)\n\
# Made again at the old name: another number.\n\
with open('t/r/f/c', 'w') as f: f.write('new')\n\
print(ino('t/r/f/c') != before, ino('t/r/g/c2') == before)\n\
# Within a family, and back again, over an existing cell.\n\
d = ino('t/r/f/d')\n\
os.rename('t/r/g/c2', 't/r/g/c3')\n\
os.rename('t/r/g/c3', 't/r/f/d')\n\
print(ino('t/r/f/d') == before, ino('t/r/f/d') != d)\n\
fd = os.open('t/r/f/d', os.O_RDONLY)\n\
print(os.fstat(fd).st_ino == before, os.pread(fd, 9, 0))\n\
os.close(fd)\n\
inos = [os.stat('t/r/' + f + '/' + n).st_ino for f in 'fg' for n in os.listdir('t/r/' + f) if n != '.versions']\n\
print(len(inos), len(set(inos)))\n",
    );
    assert_eq!(
        out,
        "True\nTrue True\nTrue True\nTrue b'old'\n2 2",
        "{}",
        tests::tail(&m.log_text(), 10)
    );
    // tar and rsync, which track files by (dev, ino), copy every cell.
    let dst = tempfile::tempdir().unwrap();
    let d = dst.path().display();
    m.ok(&format!(
        "mkdir {d}/tar {d}/rsync && tar -C t/r -cf - f g | tar -C {d}/tar -xf - && \
         rsync -aH t/r/ {d}/rsync/"
    ));
    for copy in ["tar", "rsync"] {
        let p = dst.path().join(copy);
        assert_eq!(std::fs::read_to_string(p.join("f/c")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(p.join("f/d")).unwrap(), "old");
    }
}

/// A cell deleted by a `.mutate` batch while a descriptor holds it open
/// for writing is gone until that descriptor's close commits it again: a
/// `>>` in between makes it anew (it answered `stat` but not `open`).
#[test]
fn a_cell_deleted_by_a_batch_while_written_is_gone_until_the_close() {
    let m = Mount::new();
    table(&m);
    m.mutate("t", b"set r f:d dee\n");
    let out = py(
        &m,
        "fd = os.open('t/r/f/c', os.O_WRONLY | os.O_TRUNC)\n\
os.write(fd, b'writer')\n\
with open('t/.mutate', 'w') as f: f.write('delete r f:c\\n')\n\
print(os.path.exists('t/r/f/c'), 'c' in os.listdir('t/r/f'))\n\
with open('t/r/f/c', 'a') as f: f.write('appended')\n\
print(open('t/r/f/c').read())\n\
os.close(fd)\n\
print(open('t/r/f/c').read())\n",
    );
    assert_eq!(
        out,
        "False False\nappended\nwriter",
        "{}",
        tests::tail(&m.log_text(), 10)
    );
}

/// A rename over a cell that a descriptor holds open replaces it; once
/// the cell that moved in moves on, a cell made at that name gets a number
/// of its own (the held one's stays the held file's): it was EIO, an
/// inode number collision.
#[test]
fn a_cell_made_where_a_held_cell_was_replaced_can_be_written() {
    let m = Mount::new();
    table(&m);
    m.mutate("t", b"set r g:x gee\nset r f:x eff\n");
    let out = py(
        &m,
        "held = os.open('t/r/f/x', os.O_RDONLY)\n\
os.rename('t/r/g/x', 't/r/f/x')\n\
os.rename('t/r/f/x', 't/r/f/y')\n\
with open('t/r/f/x', 'w') as f: f.write('new')\n\
print(open('t/r/f/x').read(), open('t/r/f/y').read())\n\
st = os.fstat(held)\n\
print(os.stat('t/r/f/x').st_ino != st.st_ino, st.st_nlink, st.st_size)\n\
os.close(held)\n\
print(sorted(os.listdir('t/r/f')))\n",
    );
    assert_eq!(
        out,
        "new gee\nTrue 0 3\n['c', 'x', 'y']",
        "{}",
        tests::tail(&m.log_text(), 10)
    );
}

/// `close` returns before the kernel's RELEASE, which commits a cell that
/// was created and never written, reaches the daemon: a rename right after
/// it found the cell uncommitted and answered EBUSY (pjdfstest rename/01).
/// Descriptors follow a rename, as a file's do: what they write later is
/// the new name's; one open on a cell a rename replaced commits nothing.
#[test]
fn renames_right_after_close_work_and_descriptors_follow_them() {
    let m = Mount::new();
    table(&m);
    m.mutate("t", b"set r f:d dee\n");
    let out = py(
        &m,
        "bad = 0\n\
for i in range(100):\n    os.close(os.open('t/r/f/x%d' % i, os.O_CREAT | os.O_WRONLY, 0o644))\n    bad += probe(lambda: os.rename('t/r/f/x%d' % i, 't/r/f/y%d' % i)) != 0\n\
names = os.listdir('t/r/f')\n\
print(bad, sum(n.startswith('x') for n in names), sum(n.startswith('y') for n in names))\n\
os.mkdir('t/r/g')\n\
fd = os.open('t/r/f/c', os.O_RDWR)\n\
os.rename('t/r/f/c', 't/r/g/c2')\n\
os.pwrite(fd, b'moved', 0)\n\
os.close(fd)\n\
print(open('t/r/g/c2').read(), os.path.exists('t/r/f/c'))\n\
fd = os.open('t/r/f/new', os.O_CREAT | os.O_WRONLY, 0o644)\n\
os.rename('t/r/f/new', 't/r/g/new2')\n\
os.write(fd, b'z')\n\
os.close(fd)\n\
print(open('t/r/g/new2').read(), os.path.exists('t/r/f/new'))\n\
fd = os.open('t/r/f/d', os.O_RDWR)\n\
os.rename('t/r/f/y0', 't/r/f/d')\n\
os.pwrite(fd, b'stale', 0)\n\
os.close(fd)\n\
print(repr(open('t/r/f/d').read()))\n",
    );
    assert_eq!(
        out,
        "0 0 100\nmoved False\nz False\n''",
        "{}",
        tests::tail(&m.log_text(), 10)
    );
}

/// `renameat2(RENAME_EXCHANGE)` of two cells of one row swaps them
/// atomically (fsstress does it); each keeps its inode number and its open
/// descriptors.
#[test]
fn rename_exchange_swaps_two_cells() {
    let m = Mount::new();
    table(&m);
    m.mutate("t", b"set r g:d dee\n");
    let out = py(
        &m,
        "import ctypes\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
def xchg(a, b):\n    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:\n        raise OSError(ctypes.get_errno(), 'renameat2')\n\
ic, idd = os.stat('t/r/f/c').st_ino, os.stat('t/r/g/d').st_ino\n\
fd = os.open('t/r/f/c', os.O_RDWR)\n\
xchg('t/r/f/c', 't/r/g/d')\n\
print(open('t/r/f/c').read(), open('t/r/g/d').read())\n\
print(os.stat('t/r/g/d').st_ino == ic, os.stat('t/r/f/c').st_ino == idd)\n\
os.pwrite(fd, b'OLD', 0)\n\
os.close(fd)\n\
print(open('t/r/f/c').read(), open('t/r/g/d').read())\n\
print(probe(lambda: xchg('t/r/f/c', 't/r/f/none')))\n",
    );
    assert_eq!(
        out,
        "dee old\nTrue True\ndee OLD\n2",
        "{}",
        tests::tail(&m.log_text(), 10)
    );
}
