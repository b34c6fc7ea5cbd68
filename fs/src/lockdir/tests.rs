//! `.chubby/` against a real lock-service cell, without a mount.

use super::*;
use crate::files::SetAttr;
use crate::mock::MockStore;
use crate::node::{Node, ROOT_INO};
use crate::Fs;
use crate::{Caller, FsOptions};
use chubby::{CellOptions, LocalCell, NodeSpec};
use crossbeam_channel::{bounded, Receiver};
use fuser::FileType;
use std::time::{Duration, Instant};

struct T {
    fs: Fs,
    cell: Arc<LocalCell>,
    _dir: tempfile::TempDir,
    /// This test process as the caller (so /proc checks see a live process).
    me: Caller,
}

const RD: i32 = libc::O_RDONLY;
const WR: i32 = libc::O_WRONLY;
const TRUNC: i32 = libc::O_WRONLY | libc::O_TRUNC;

fn me() -> u32 {
    std::process::id()
}

impl T {
    fn new() -> T {
        let dir = tempfile::tempdir().unwrap();
        let cell = LocalCell::open(
            dir.path(),
            CellOptions {
                root_mode: 0o1777,
                default_lock_delay: Duration::from_millis(300),
                ..CellOptions::default()
            },
        )
        .unwrap();
        let fs = Fs::new(Arc::new(MockStore::default()), FsOptions::default())
            .with_lock_service(cell.clone());
        T {
            fs,
            cell,
            _dir: dir,
            me: Caller::new(0, 0, me()),
        }
    }

    fn ino(&self, path: &str) -> Result<u64, Errno> {
        let mut ino = ROOT_INO;
        for c in path.split('/').filter(|c| !c.is_empty()) {
            ino = self.fs.lookup(ino, c.as_bytes())?.attr.ino.0;
        }
        Ok(ino)
    }

    fn parent_and_name<'a>(&self, path: &'a str) -> (u64, &'a str) {
        let (d, n) = path.rsplit_once('/').unwrap();
        (self.ino(d).unwrap(), n)
    }

    /// Creates (if needed) and opens a file; returns the handle.
    fn open(&self, path: &str, flags: i32) -> Result<u64, Errno> {
        match self.ino(path) {
            Ok(ino) => Ok(self.fs.open(&self.me, ino, flags)?.fh),
            Err(Errno::ENOENT) if flags & libc::O_ACCMODE != RD => {
                let (p, n) = self.parent_and_name(path);
                let (_, o) = self
                    .fs
                    .create_mode(&self.me, p, n.as_bytes(), 0o644, 0o022, flags)?;
                Ok(o.fh)
            }
            Err(e) => Err(e),
        }
    }

    fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let (tx, rx) = bounded(1);
        self.fs.read_then(
            &self.me,
            fh,
            offset,
            size,
            true,
            Box::new(move |r| tx.send(r).unwrap()),
        );
        rx.recv_timeout(Duration::from_secs(5)).unwrap()
    }

    fn close(&self, fh: u64) -> Result<(), Errno> {
        let r = self.fs.flush_locks(&self.me, 0, fh, 1).unwrap();
        self.fs.release_locks(0, fh, None).unwrap().unwrap();
        r
    }

    fn put(&self, path: &str, data: &[u8]) -> Result<(), Errno> {
        let fh = self.open(path, TRUNC | libc::O_CREAT)?;
        self.fs.write(fh, 0, data)?;
        self.close(fh)
    }

    fn get(&self, path: &str) -> Result<Vec<u8>, Errno> {
        let fh = self.open(path, RD)?;
        let d = self.read(fh, 0, 1 << 20);
        self.close(fh)?;
        d
    }

    fn lock_req(&self, path: &str, fh: u64, owner: u64, typ: i32, sleep: bool) -> LockRequest {
        LockRequest {
            ino: self.ino(path).unwrap(),
            fh,
            owner,
            start: 0,
            end: OFFSET_MAX,
            typ,
            pid: me(),
            sleep,
        }
    }

    /// SETLK/SETLKW; the receiver gets the answer.
    fn setlk(&self, caller: &Caller, r: LockRequest) -> Receiver<Result<(), Errno>> {
        let (tx, rx) = bounded(1);
        self.fs
            .setlk(caller, r, Box::new(move |res| tx.send(res).unwrap()));
        rx
    }

    fn lock(&self, path: &str, fh: u64, owner: u64, typ: i32) -> Result<(), Errno> {
        let r = self.lock_req(path, fh, owner, typ, false);
        self.setlk(&self.me, r)
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
    }
}

#[test]
fn the_directory_is_in_the_root_and_lists_the_cell() {
    let t = T::new();
    let ino = t.ino(".chubby").unwrap();
    assert_eq!(t.fs.ctx().lock_node(ino), Some(LockNode::root()));
    let (a, _) = t.fs.getattr(ino, None).unwrap();
    assert_eq!(a.kind, FileType::Directory);
    assert_eq!(a.perm, 0o1777);
    t.put(".chubby/a", b"x").unwrap();
    t.fs.mkdir(&t.me, ino, b"d", 0o750, 0o022).unwrap();
    let fh = t.fs.opendir(&t.me, ino).unwrap();
    let mut names = Vec::new();
    t.fs.readdir(fh, 0, true, &mut |e| {
        names.push((
            String::from_utf8(e.name.to_vec()).unwrap(),
            e.kind,
            e.attr.unwrap().perm,
        ));
        false
    })
    .unwrap();
    t.fs.releasedir(fh);
    assert_eq!(
        names,
        vec![
            (".".into(), FileType::Directory, 0o1777),
            ("..".into(), FileType::Directory, 0o755),
            ("a".into(), FileType::RegularFile, 0o644),
            ("d".into(), FileType::Directory, 0o750),
        ]
    );
    // The root listing shows .chubby; the virtual files are there by name only.
    assert!(t.ino(".chubby/.events").is_ok());
    assert!(t.ino(".chubby/.status").is_ok());
    assert_eq!(t.ino(".chubby/d/.status"), Err(Errno::ENOENT));
    let status = t.get(".chubby/.status").unwrap();
    assert!(String::from_utf8(status).unwrap().contains("nodes "));
    // Without a lock service there is no .chubby.
    let plain = Fs::new(Arc::new(MockStore::default()), FsOptions::default());
    assert_eq!(
        plain.lookup(ROOT_INO, b".chubby").err(),
        Some(Errno::ENOENT)
    );
}

#[test]
fn contents_are_replaced_whole_on_close() {
    let t = T::new();
    t.put(".chubby/f", b"first").unwrap();
    let reader = t.open(".chubby/f", RD).unwrap();
    assert_eq!(t.read(reader, 0, 2).unwrap(), b"fi");
    let w = t.open(".chubby/f", WR | libc::O_TRUNC).unwrap();
    t.fs.write(w, 0, b"second").unwrap();
    // Not visible before the writer closes.
    assert_eq!(t.get(".chubby/f").unwrap(), b"first");
    let (a, _) = t.fs.getattr(t.ino(".chubby/f").unwrap(), None).unwrap();
    assert_eq!(a.size, 5);
    assert_eq!(t.fs.lock_dir().handle_attr(t.fs.ctx(), w).unwrap().size, 6);
    t.close(w).unwrap();
    // A reader in the middle of the file keeps its snapshot; a read from the
    // start sees the new contents.
    assert_eq!(t.read(reader, 2, 10).unwrap(), b"rst");
    assert_eq!(t.read(reader, 0, 10).unwrap(), b"second");
    t.close(reader).unwrap();
    // Appending and partial writes merge into the current contents.
    let a = t.open(".chubby/f", WR | libc::O_APPEND).unwrap();
    t.fs.write(a, 0, b"!").unwrap();
    t.close(a).unwrap();
    let p = t.open(".chubby/f", WR).unwrap();
    t.fs.write(p, 0, b"S").unwrap();
    t.close(p).unwrap();
    assert_eq!(t.get(".chubby/f").unwrap(), b"Second!");
    // Truncation through setattr, by path and through a handle.
    let ino = t.ino(".chubby/f").unwrap();
    let set = SetAttr {
        size: Some(3),
        ..Default::default()
    };
    t.fs.setattr(&t.me, ino, None, set).unwrap();
    assert_eq!(t.get(".chubby/f").unwrap(), b"Sec");
    // Opening with O_TRUNC and closing without writing empties the file.
    let e = t.open(".chubby/f", TRUNC).unwrap();
    t.close(e).unwrap();
    assert_eq!(t.get(".chubby/f").unwrap(), b"");
}

#[test]
fn too_large_contents_fail_with_efbig_and_change_nothing() {
    let t = T::new();
    t.put(".chubby/big", b"small").unwrap();
    let fh = t.open(".chubby/big", TRUNC).unwrap();
    let chunk = vec![b'x'; 128 * 1024];
    t.fs.write(fh, 0, &chunk).unwrap();
    t.fs.write(fh, chunk.len() as u64, &chunk).unwrap();
    assert_eq!(
        t.fs.write(fh, 2 * chunk.len() as u64, b"y"),
        Err(Errno::EFBIG)
    );
    assert_eq!(t.fs.write(fh, 0, b"z"), Err(Errno::EFBIG), "poisoned");
    assert_eq!(t.close(fh), Err(Errno::EFBIG));
    assert_eq!(t.get(".chubby/big").unwrap(), b"small");
    let set = SetAttr {
        size: Some(300 * 1024),
        ..Default::default()
    };
    let ino = t.ino(".chubby/big").unwrap();
    assert_eq!(
        t.fs.setattr(&t.me, ino, None, set).err(),
        Some(Errno::EFBIG)
    );
}

#[test]
fn namespace_operations_and_reserved_names() {
    let t = T::new();
    let root = t.ino(".chubby").unwrap();
    let d = t.fs.mkdir(&t.me, root, b"d", 0o755, 0).unwrap();
    let d = d.attr.ino.0;
    t.fs.mkdir(&t.me, d, b"sub", 0o755, 0).unwrap();
    t.put(".chubby/d/sub/f", b"deep").unwrap();
    let f_ino = t.ino(".chubby/d/sub/f").unwrap();
    assert_eq!(
        t.fs.mkdir(&t.me, d, b".events", 0o755, 0).err(),
        Some(Errno::EEXIST)
    );
    assert_eq!(t.fs.unlink(&t.me, d, b".events"), Err(Errno::EPERM));
    assert_eq!(
        t.fs.mkdir(&t.me, d, b"\xff", 0o755, 0).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(t.fs.rmdir(&t.me, root, b"d"), Err(Errno::ENOTEMPTY));
    // Renaming a directory moves the inodes the kernel holds below it.
    t.fs.rename(&t.me, root, b"d", root, b"e", 0).unwrap();
    assert_eq!(
        t.fs.ctx().lock_node(f_ino),
        Some(LockNode::Entry("/e/sub/f".into()))
    );
    let fh = t.fs.open(&t.me, f_ino, RD).unwrap().fh;
    assert_eq!(t.read(fh, 0, 100).unwrap(), b"deep");
    t.close(fh).unwrap();
    t.put(".chubby/x", b"1").unwrap();
    assert_eq!(
        t.fs.rename(&t.me, root, b"x", d, b"sub", libc::RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    // Across the boundary of .chubby: EXDEV.
    assert_eq!(
        t.fs.rename(&t.me, root, b"x", ROOT_INO, b"x", 0),
        Err(Errno::EXDEV)
    );
    t.fs.unlink(&t.me, d, b"sub").unwrap_err();
    let sub = t.ino(".chubby/e/sub").unwrap();
    t.fs.unlink(&t.me, sub, b"f").unwrap();
    t.fs.rmdir(&t.me, d, b"sub").unwrap();
    assert_eq!(t.ino(".chubby/e/sub"), Err(Errno::ENOENT));
}

#[test]
fn permissions_are_the_cells() {
    let t = T::new();
    // The engine's nodes: root's, read-only for others.
    t.cell
        .create(&Credentials::root(), "/bigtable", &NodeSpec::dir(0o755))
        .unwrap();
    t.cell
        .create(
            &Credentials::root(),
            "/bigtable/master",
            &NodeSpec::file(0o644),
        )
        .unwrap();
    let alice = Caller::new(1000, 1000, me());
    let ino = t.ino(".chubby/bigtable/master").unwrap();
    assert!(t.fs.open(&alice, ino, RD).is_ok());
    assert_eq!(t.fs.open(&alice, ino, WR).err(), Some(Errno::EACCES));
    // In the sticky root alice makes her own files, chmods and keeps them.
    let root = t.ino(".chubby").unwrap();
    let (e, o) =
        t.fs.create_mode(&alice, root, b"mine", 0o666, 0o022, WR | libc::O_CREAT)
            .unwrap();
    assert_eq!((e.attr.uid, e.attr.perm), (1000, 0o644));
    t.fs.release_locks(0, o.fh, None).unwrap().unwrap();
    let mine = e.attr.ino.0;
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    let (a, _) = t.fs.setattr(&alice, mine, None, chmod).unwrap();
    assert_eq!(a.perm, 0o600);
    let bob = Caller::new(1001, 1001, me());
    assert_eq!(t.fs.open(&bob, mine, RD).err(), Some(Errno::EACCES));
    assert_eq!(t.fs.unlink(&bob, root, b"mine"), Err(Errno::EACCES));
    assert_eq!(
        t.fs.setattr(&bob, mine, None, chmod).err(),
        Some(Errno::EPERM)
    );
    // chown to bob: root only; alice's no-op chown to herself is fine.
    let to_bob = SetAttr {
        uid: Some(1001),
        ..Default::default()
    };
    assert_eq!(
        t.fs.setattr(&alice, mine, None, to_bob).err(),
        Some(Errno::EPERM)
    );
    let to_alice = SetAttr {
        uid: Some(1000),
        ..Default::default()
    };
    t.fs.setattr(&alice, mine, None, to_alice).unwrap();
    let (a, _) = t.fs.setattr(&t.me, mine, None, to_bob).unwrap();
    assert_eq!(a.uid, 1001);
    assert!(t.fs.open(&bob, mine, RD).is_ok());
}

#[test]
fn locks_exclusive_shared_and_getlk() {
    let t = T::new();
    t.put(".chubby/l", b"").unwrap();
    let a = t.open(".chubby/l", RD).unwrap();
    let b = t.open(".chubby/l", RD).unwrap();
    t.lock(".chubby/l", a, 11, libc::F_WRLCK).unwrap();
    assert_eq!(
        t.lock(".chubby/l", b, 12, libc::F_RDLCK),
        Err(Errno::EAGAIN)
    );
    let q = t.lock_req(".chubby/l", b, 12, libc::F_RDLCK, false);
    let g = t.fs.getlk(q).unwrap();
    assert_eq!((g.typ, g.pid, g.end), (libc::F_WRLCK, me(), OFFSET_MAX));
    // Asking again for what one holds is fine; downgrade lets readers in.
    t.lock(".chubby/l", a, 11, libc::F_WRLCK).unwrap();
    t.lock(".chubby/l", a, 11, libc::F_RDLCK).unwrap();
    t.lock(".chubby/l", b, 12, libc::F_RDLCK).unwrap();
    assert_eq!(t.fs.getlk(q).unwrap().typ, libc::F_UNLCK);
    let state =
        t.fs.getxattr(&t.me, t.ino(".chubby/l").unwrap(), xattr::LOCK.as_bytes())
            .unwrap();
    assert!(state.starts_with(b"shared "));
    t.lock(".chubby/l", a, 11, libc::F_UNLCK).unwrap();
    t.lock(".chubby/l", b, 12, libc::F_UNLCK).unwrap();
    // A failed try and its RELEASE change nothing for the holder.
    t.lock(".chubby/l", a, 11, libc::F_WRLCK).unwrap();
    assert_eq!(
        t.lock(".chubby/l", b, 12, libc::F_WRLCK),
        Err(Errno::EAGAIN)
    );
    t.fs.release_locks(0, b, Some(12)).unwrap().unwrap();
    let c = t.open(".chubby/l", RD).unwrap();
    assert_eq!(
        t.lock(".chubby/l", c, 13, libc::F_WRLCK),
        Err(Errno::EAGAIN)
    );
    // Closing the holder's description releases at once (no lock-delay).
    t.fs.release_locks(0, a, Some(11)).unwrap().unwrap();
    t.lock(".chubby/l", c, 13, libc::F_WRLCK).unwrap();
    t.close(c).unwrap();
}

#[test]
fn a_waiter_is_granted_after_unlock() {
    let t = T::new();
    t.put(".chubby/w", b"").unwrap();
    let a = t.open(".chubby/w", RD).unwrap();
    let b = t.open(".chubby/w", RD).unwrap();
    t.lock(".chubby/w", a, 21, libc::F_WRLCK).unwrap();
    let r = t.lock_req(".chubby/w", b, 22, libc::F_WRLCK, true);
    let rx = t.setlk(&t.me, r);
    assert!(
        rx.recv_timeout(Duration::from_millis(150)).is_err(),
        "waits"
    );
    t.lock(".chubby/w", a, 21, libc::F_UNLCK).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(()));
    assert_eq!(
        t.lock(".chubby/w", a, 21, libc::F_RDLCK),
        Err(Errno::EAGAIN)
    );
}

#[test]
fn a_waiter_whose_caller_dies_gives_up_and_is_never_granted() {
    let t = T::new();
    t.put(".chubby/k", b"").unwrap();
    let a = t.open(".chubby/k", RD).unwrap();
    let b = t.open(".chubby/k", RD).unwrap();
    t.lock(".chubby/k", a, 31, libc::F_WRLCK).unwrap();
    // The waiting "thread" is a child process that we kill.
    let mut child = std::process::Command::new("sleep")
        .arg("10")
        .spawn()
        .unwrap();
    let victim = Caller::new(0, 0, child.id());
    let mut r = t.lock_req(".chubby/k", b, 32, libc::F_WRLCK, true);
    r.pid = child.id();
    let rx = t.setlk(&victim, r);
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    let start = Instant::now();
    child.kill().unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Err(Errno::EINTR)
    );
    assert!(start.elapsed() < Duration::from_secs(1));
    child.wait().unwrap();
    t.lock(".chubby/k", a, 31, libc::F_UNLCK).unwrap();
    let c = t.open(".chubby/k", RD).unwrap();
    t.lock(".chubby/k", c, 33, libc::F_WRLCK).unwrap();
}

#[test]
fn a_killed_holder_leaves_the_lock_in_lock_delay() {
    let t = T::new();
    t.put(".chubby/d", b"").unwrap();
    let ino = t.ino(".chubby/d").unwrap();
    t.fs.setxattr(&t.me, ino, xattr::LOCK_DELAY.as_bytes(), b"400")
        .unwrap();
    assert_eq!(
        t.fs.getxattr(&t.me, ino, xattr::LOCK_DELAY.as_bytes())
            .unwrap(),
        b"400"
    );
    let a = t.open(".chubby/d", RD).unwrap();
    t.lock(".chubby/d", a, 41, libc::F_WRLCK).unwrap();
    // As if FLUSH had come from a process being killed.
    t.fs.lock_dir()
        .handle_file(a, |f| {
            f.killed = true;
            Ok(())
        })
        .unwrap();
    t.fs.release_locks(0, a, Some(41)).unwrap().unwrap();
    let b = t.open(".chubby/d", RD).unwrap();
    assert_eq!(
        t.lock(".chubby/d", b, 42, libc::F_WRLCK),
        Err(Errno::EAGAIN)
    );
    let start = Instant::now();
    let r = t.lock_req(".chubby/d", b, 42, libc::F_WRLCK, true);
    assert_eq!(
        t.setlk(&t.me, r)
            .recv_timeout(Duration::from_secs(5))
            .unwrap(),
        Ok(())
    );
    let waited = start.elapsed();
    assert!(waited > Duration::from_millis(250), "{waited:?}");
}

#[test]
fn sequencers_name_the_callers_lock_and_go_stale() {
    let t = T::new();
    t.put(".chubby/s", b"").unwrap();
    let ino = t.ino(".chubby/s").unwrap();
    let seq = |c: &Caller| t.fs.getxattr(c, ino, xattr::SEQUENCER.as_bytes());
    let check = |v: &[u8]| t.fs.setxattr(&t.me, ino, xattr::CHECK.as_bytes(), v);
    assert_eq!(seq(&t.me), Err(Errno::NO_XATTR));
    let a = t.open(".chubby/s", RD).unwrap();
    t.lock(".chubby/s", a, 51, libc::F_WRLCK).unwrap();
    let s1 = seq(&t.me).unwrap();
    let text = String::from_utf8(s1.clone()).unwrap();
    assert!(text.starts_with("/s:exclusive:"), "{text}");
    check(&s1).unwrap();
    // Another process that holds nothing gets no sequencer.
    let mut other = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    assert_eq!(seq(&Caller::new(0, 0, other.id())), Err(Errno::NO_XATTR));
    other.kill().unwrap();
    other.wait().unwrap();
    t.lock(".chubby/s", a, 51, libc::F_UNLCK).unwrap();
    assert_eq!(check(&s1), Err(Errno::ESTALE));
    t.lock(".chubby/s", a, 51, libc::F_WRLCK).unwrap();
    let s2 = String::from_utf8(seq(&t.me).unwrap()).unwrap();
    let gen = |s: &str| s.rsplit(':').next().unwrap().parse::<u64>().unwrap();
    assert!(gen(&s2) > gen(&text), "{s2} after {text}");
    assert_eq!(check(&s1), Err(Errno::ESTALE));
    check(s2.as_bytes()).unwrap();
    assert_eq!(check(b"garbage"), Err(Errno::EINVAL));
    // A sequencer of another lock is not current for this one.
    t.put(".chubby/s2", b"").unwrap();
    let ino2 = t.ino(".chubby/s2").unwrap();
    assert_eq!(
        t.fs.setxattr(&t.me, ino2, xattr::CHECK.as_bytes(), s2.as_bytes()),
        Err(Errno::ESTALE)
    );
    t.close(a).unwrap();
}

#[test]
fn ephemeral_files_vanish_with_their_last_handle() {
    let t = T::new();
    let fh = t.open(".chubby/eph", WR | libc::O_CREAT).unwrap();
    let ino = t.ino(".chubby/eph").unwrap();
    t.fs.setxattr(&t.me, ino, xattr::EPHEMERAL.as_bytes(), b"1")
        .unwrap();
    assert_eq!(
        t.fs.getxattr(&t.me, ino, xattr::EPHEMERAL.as_bytes())
            .unwrap(),
        b"1"
    );
    let list = t.fs.listxattr(ino).unwrap();
    assert!(list
        .split(|&b| b == 0)
        .any(|n| n == xattr::EPHEMERAL.as_bytes()));
    let second = t.open(".chubby/eph", RD).unwrap();
    t.close(fh).unwrap();
    assert!(t.ino(".chubby/eph").is_ok(), "a handle is still open");
    t.close(second).unwrap();
    assert_eq!(t.ino(".chubby/eph"), Err(Errno::ENOENT));
}

#[test]
fn events_file_streams_changes_and_polls() {
    let t = T::new();
    let root = t.ino(".chubby").unwrap();
    t.fs.mkdir(&t.me, root, b"d", 0o755, 0).unwrap();
    let ev = t.open(".chubby/d/.events", RD).unwrap();
    assert_eq!(t.read(ev, 0, 4096), Err(Errno::EAGAIN), "nothing yet");
    let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w = woken.clone();
    let ready =
        t.fs.poll(
            ev,
            Some(Box::new(move || {
                w.store(true, std::sync::atomic::Ordering::SeqCst)
            })),
        )
        .unwrap();
    assert_eq!(ready, 0);
    t.put(".chubby/d/f", b"v").unwrap();
    let a = t.open(".chubby/d/f", RD).unwrap();
    t.lock(".chubby/d/f", a, 61, libc::F_WRLCK).unwrap();
    t.close(a).unwrap();
    let dir = t.ino(".chubby/d").unwrap();
    t.fs.unlink(&t.me, dir, b"f").unwrap();
    let mut text = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !text.ends_with(b"removed f\n") && Instant::now() < deadline {
        match t.read(ev, 0, 4096) {
            Ok(d) => text.extend(d),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    assert!(woken.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "created f\nmodified f\nlocked f exclusive\nunlocked f\nremoved f\n"
    );
    // A blocking read wakes on the next event.
    let (tx, rx) = bounded(1);
    t.fs.read_then(
        &t.me,
        ev,
        0,
        4096,
        false,
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    t.put(".chubby/d/g", b"").unwrap();
    // The read wakes on the first event and returns every event queued by
    // then: the create, and the write too if it came first. How they were
    // batched is up to the scheduler, so only their order is asserted.
    let got = String::from_utf8(rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap()).unwrap();
    assert!(
        got == "created g\n" || got == "created g\nmodified g\n",
        "unexpected events {got:?}"
    );
    t.close(ev).unwrap();
    // Events of a file that is not a directory: ENOTDIR.
    assert_eq!(t.ino(".chubby/d/g/.events"), Err(Errno::ENOTDIR));
}

#[test]
fn locks_outside_chubby_use_the_local_table() {
    let t = T::new();
    let r = LockRequest {
        ino: 777,
        fh: 5,
        owner: 1,
        start: 0,
        end: OFFSET_MAX,
        typ: libc::F_WRLCK,
        pid: me(),
        sleep: false,
    };
    assert_eq!(t.setlk(&t.me, r).recv().unwrap(), Ok(()));
    let other = LockRequest { owner: 2, ..r };
    assert_eq!(t.setlk(&t.me, other).recv().unwrap(), Err(Errno::EAGAIN));
    assert_eq!(t.fs.getlk(other).unwrap().typ, libc::F_WRLCK);
    let wait = LockRequest {
        sleep: true,
        ..other
    };
    let rx = t.setlk(&t.me, wait);
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    assert!(t.fs.release_locks(777, 5, Some(1)).is_none());
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(()));
    assert!(t.fs.flush_locks(&t.me, 777, 5, 2).is_none());
    assert_eq!(t.fs.getlk(r).unwrap().typ, libc::F_UNLCK);
    // Node::Lock inode numbers stay apart from the rest.
    assert_ne!(
        Node::Lock(LockNode::root()).ino(),
        Node::Table(".chubby".into()).ino()
    );
}
