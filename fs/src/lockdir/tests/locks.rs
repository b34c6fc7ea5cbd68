//! Locks, waiters, lock-delay, sequencers, ephemeral files and events.

use super::*;

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
    assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), Ok(()));
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
    child.kill().unwrap();
    // The lock stays held: only the interruption can answer the request.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)).unwrap(),
        Err(Errno::EINTR)
    );
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
            .recv_timeout(Duration::from_secs(30))
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
        false,
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    t.put(".chubby/d/g", b"").unwrap();
    // The read wakes on the first event and returns every event queued by
    // then: the create, and the write too if it came first. How they were
    // batched is up to the scheduler, so only their order is asserted.
    let got =
        String::from_utf8(rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap()).unwrap();
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
    assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), Ok(()));
    assert!(t.fs.flush_locks(&t.me, 777, 5, 2).is_none());
    assert_eq!(t.fs.getlk(r).unwrap().typ, libc::F_UNLCK);
    // Node::Lock inode numbers stay apart from the rest.
    assert_ne!(
        Node::Lock(LockNode::root()).natural_ino(),
        Node::Table(".chubby".into()).natural_ino()
    );
}
