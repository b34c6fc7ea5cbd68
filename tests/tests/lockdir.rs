#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `.chubby/` driven by real programs: flock(1), sh, cat, timeout, and the
//! test process's own flock(2)/fcntl/xattr calls. Every test mounts its own
//! filesystem; processes it starts are killed (by pid or process group) and
//! reaped before it returns.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tests::{wait_until, Mount};

/// The mount each test uses: here with the embedded cell. lockdir_etcd.rs
/// includes this file as a module and brings its own, on etcd.
#[allow(dead_code)]
pub fn backend_mount() -> Mount {
    Mount::new()
}

fn mount() -> Mount {
    crate::backend_mount()
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn setxattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let (p, n) = (cstr(path), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn getxattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let (p, n) = (cstr(path), CString::new(name).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid strings; the buffer is writable for its length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// flock(2) on a descriptor of the test process.
fn flock(f: &std::fs::File, op: i32) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Reads one line from `r` within `timeout` (on a helper thread).
fn line_within<R: BufRead + Send + 'static>(
    r: R,
    timeout: Duration,
) -> (Option<String>, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in r.lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(timeout).ok();
    (first, rx)
}

/// A process holding a lock through flock(1): it prints `locked`, then
/// waits on its stdin; closing stdin ends it normally.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The pid of the command flock runs (it may outlive a killed flock).
    cmd_pid: u32,
}

impl Holder {
    /// `flock <args> <file> sh -c 'echo locked $$; exec cat'`; None if it
    /// did not get the lock within `timeout` (it is then killed).
    fn start(m: &Mount, args: &[&str], file: &str, timeout: Duration) -> Option<Holder> {
        let mut child = Command::new("flock")
            .args(args)
            .arg(file)
            .args(["sh", "-c", "echo locked $$; exec cat"])
            .current_dir(&m.mnt)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (first, _) = line_within(out, timeout);
        let Some(cmd_pid) = first.and_then(|l| l.strip_prefix("locked ")?.parse().ok()) else {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        };
        Some(Holder {
            stdin: child.stdin.take(),
            child,
            cmd_pid,
        })
    }

    /// Ends the holder normally (its command sees end of input and exits).
    fn release(mut self) {
        drop(self.stdin.take());
        let st = self.child.wait().unwrap();
        assert!(st.success(), "holder exited with {st}");
    }

    /// kill -9 of the flock process (and, separately, of its command).
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        // SAFETY: kill(2) of the command this holder started.
        unsafe { libc::kill(self.cmd_pid as i32, libc::SIGKILL) };
    }
}

/// kill -9 of `child`; whether it is gone within a deadline (one blocked in
/// a request the daemon never answers stays unless the kill interrupts it).
fn killed_and_gone(child: &mut Child) -> bool {
    child.kill().unwrap();
    wait_until(Duration::from_secs(30), || {
        child.try_wait().unwrap().is_some()
    })
}

/// Runs `sh -c script` in the mount; exit code and how long it took.
fn timed(m: &Mount, script: &str) -> (i32, Duration) {
    let start = Instant::now();
    let o = m.sh(script);
    (o.status.code().unwrap_or(-1), start.elapsed())
}

/// A lock file with a short lock-delay.
fn lock_file(m: &Mount, name: &str, delay_ms: u32) -> PathBuf {
    let p = m.path(&format!(".chubby/{name}"));
    std::fs::write(&p, b"").unwrap();
    setxattr(
        &p,
        "user.chubby.lock_delay_ms",
        delay_ms.to_string().as_bytes(),
    )
    .unwrap();
    p
}

#[test]
fn exclusive_and_shared_modes_between_processes() {
    let m = mount();
    lock_file(&m, "mode", 0);
    let s1 = Holder::start(&m, &["-s"], ".chubby/mode", Duration::from_secs(5)).unwrap();
    let s2 = Holder::start(&m, &["-s"], ".chubby/mode", Duration::from_secs(5))
        .expect("a second reader shares the lock");
    assert_eq!(
        timed(&m, "flock -n -x .chubby/mode true").0,
        1,
        "writer refused"
    );
    assert_eq!(
        timed(&m, "flock -n -s .chubby/mode true").0,
        0,
        "reader admitted"
    );
    s1.release();
    assert_eq!(timed(&m, "flock -n -x .chubby/mode true").0, 1);
    s2.release();
    let x = Holder::start(&m, &["-x"], ".chubby/mode", Duration::from_secs(5)).unwrap();
    assert_eq!(
        timed(&m, "flock -n -s .chubby/mode true").0,
        1,
        "reader refused"
    );
    assert_eq!(
        timed(&m, "flock -n -x .chubby/mode true").0,
        1,
        "writer refused"
    );
    x.release();
    // An orderly release frees the lock at once (lock-delay is for the dead).
    assert_eq!(timed(&m, "flock -n -x .chubby/mode true").0, 0);

    // Files outside .chubby lock too (in the daemon's own table).
    m.table("t", "f\n");
    m.ok("mkdir -p t/r/f && echo v > t/r/f/q");
    let c = Holder::start(&m, &["-x"], "t/r/f/q", Duration::from_secs(5)).unwrap();
    assert_eq!(timed(&m, "flock -n -x t/r/f/q true").0, 1);
    c.release();
    assert_eq!(timed(&m, "flock -n -x t/r/f/q true").0, 0);
}

#[test]
fn flock_n_fails_at_once_and_w_gives_up_in_time() {
    let m = mount();
    lock_file(&m, "busy", 0);
    let h = Holder::start(&m, &["-x"], ".chubby/busy", Duration::from_secs(5)).unwrap();
    // The holder never lets go: a waiter that blocked would meet the outer
    // timeout (exit 124) instead of failing on its own.
    let (code, _) = timed(&m, "timeout 30 flock -n -x .chubby/busy true");
    assert_eq!(code, 1, "flock -n must fail at once");
    let (code, took) = timed(&m, "timeout 30 flock -w 1 -x .chubby/busy true");
    assert_eq!(code, 1, "flock -w 1 must give up by itself");
    assert!(
        took >= Duration::from_millis(950),
        "flock -w 1 took {took:?}"
    );
    // The failed attempts' closes did not disturb the holder.
    assert_eq!(timed(&m, "flock -n -x .chubby/busy true").0, 1);
    h.release();
    let (code, _) = timed(&m, "flock -w 30 -x .chubby/busy true");
    assert_eq!(code, 0);
}

#[test]
fn timeout_interrupts_a_waiter() {
    let m = mount();
    // A minute of lock-delay: had a dead process held it, the last flock
    // below would time out.
    lock_file(&m, "t", 60_000);
    let h = Holder::start(&m, &["-x"], ".chubby/t", Duration::from_secs(5)).unwrap();
    let (code, took) = timed(&m, "timeout 2 flock -x .chubby/t true");
    assert_eq!(code, 124, "timeout must have killed the waiter");
    assert!(took >= Duration::from_millis(1950), "took {took:?}");
    h.release();
    // The interrupted waiter never held it: no lock-delay to wait out.
    let (code, _) = timed(&m, "flock -w 30 -x .chubby/t true");
    assert_eq!(code, 0);
}

#[test]
fn a_killed_waiter_is_never_granted() {
    let m = mount();
    // A minute of lock-delay: had the killed waiter held it, the third
    // process below would time out.
    lock_file(&m, "w", 60_000);
    let marker = m.data.with_file_name("waiter-ran");
    let h = Holder::start(&m, &["-x"], ".chubby/w", Duration::from_secs(5)).unwrap();
    let mut waiter = Command::new("flock")
        .args(["-x", ".chubby/w", "sh", "-c"])
        .arg(format!("echo granted > {}", marker.display()))
        .current_dir(&m.mnt)
        .spawn()
        .unwrap();
    // A check that something does not happen: give the waiter time in which
    // it must not get the lock (there is no event to wait for).
    std::thread::sleep(Duration::from_millis(300));
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter waits");
    // The holder keeps it: a waiter that kill -9 could not interrupt would
    // still be there.
    assert!(killed_and_gone(&mut waiter), "kill -9 did not end a waiter");
    h.release();
    // A third process gets the lock: nobody (dead) held it between.
    let (code, _) = timed(&m, "flock -w 30 -x .chubby/w true");
    assert_eq!(code, 0, "the killed waiter held the lock");
    // A check that something does not happen: a killed waiter that was
    // wrongly granted would write the marker within this grace period.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!marker.exists(), "the killed waiter ran its command");
}

#[test]
fn a_killed_holder_leaves_the_lock_in_lock_delay() {
    let m = mount();
    let p = lock_file(&m, "h", 1000);
    assert_eq!(getxattr(&p, "user.chubby.lock_delay_ms").unwrap(), b"1000");
    // flock -o: the command does not inherit the descriptor, so killing
    // flock kills the lock's only holder.
    let h = Holder::start(&m, &["-o", "-x"], ".chubby/h", Duration::from_secs(5)).unwrap();
    // The delay starts once the daemon sees the holder die, which is after
    // this instant: the grant cannot come sooner than a second from here.
    let killed = Instant::now();
    h.kill9();
    let (code, _) = timed(&m, "flock -w 30 -x .chubby/h true");
    assert_eq!(code, 0, "granted after the lock-delay");
    let waited = killed.elapsed();
    assert!(
        waited >= Duration::from_millis(990),
        "lock-delay of 1 s, waited {waited:?}"
    );
    // A holder that exits normally releases at once: with a minute of
    // lock-delay, a release that went through it would time out.
    let p = lock_file(&m, "h2", 60_000);
    assert_eq!(getxattr(&p, "user.chubby.lock_delay_ms").unwrap(), b"60000");
    let h = Holder::start(&m, &["-o", "-x"], ".chubby/h2", Duration::from_secs(5)).unwrap();
    h.release();
    let (code, _) = timed(&m, "flock -w 30 -x .chubby/h2 true");
    assert_eq!(code, 0, "a normal release went through the lock-delay");
}

#[test]
fn an_inherited_descriptor_keeps_the_lock_after_the_parent_exits() {
    let m = mount();
    lock_file(&m, "inh", 0);
    // The parent locks fd 9, starts a child that inherits it, and exits.
    let marker = m.data.with_file_name("child-done");
    m.ok(&format!(
        "exec 9>.chubby/inh; flock -x 9; (sleep 4; touch {}) >/dev/null 2>&1 & exit 0",
        marker.display()
    ));
    // Unless the machine stalled for the child's whole sleep, it still runs.
    let (code, _) = timed(&m, "flock -n -x .chubby/inh true");
    assert!(code == 1 || marker.exists(), "the child holds it");
    let (code, _) = timed(&m, "flock -w 30 -x .chubby/inh true");
    assert_eq!(code, 0);
    assert!(marker.exists(), "granted only once the child was done");
}

#[test]
fn sequencer_generations_increase_and_a_stale_one_is_refused() {
    let m = mount();
    let p = lock_file(&m, "seq", 0);
    let f = std::fs::File::open(&p).unwrap();
    assert_eq!(
        getxattr(&p, "user.chubby.sequencer")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENODATA),
        "nothing held, no sequencer"
    );
    flock(&f, libc::LOCK_EX).unwrap();
    let s1 = String::from_utf8(getxattr(&p, "user.chubby.sequencer").unwrap()).unwrap();
    assert!(s1.starts_with("/seq:exclusive:"), "{s1}");
    assert!(String::from_utf8(getxattr(&p, "user.chubby.lock").unwrap())
        .unwrap()
        .starts_with("exclusive "));
    setxattr(&p, "user.chubby.check", s1.as_bytes()).unwrap();
    flock(&f, libc::LOCK_UN).unwrap();
    let err = setxattr(&p, "user.chubby.check", s1.as_bytes()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESTALE));
    flock(&f, libc::LOCK_EX).unwrap();
    let s2 = String::from_utf8(getxattr(&p, "user.chubby.sequencer").unwrap()).unwrap();
    let gen = |s: &str| s.rsplit(':').next().unwrap().parse::<u64>().unwrap();
    assert!(gen(&s2) > gen(&s1), "{s2} after {s1}");
    assert_eq!(
        setxattr(&p, "user.chubby.check", s1.as_bytes())
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ESTALE)
    );
    setxattr(&p, "user.chubby.check", s2.as_bytes()).unwrap();
    drop(f);
    // The lock went with the descriptor (a child forked meanwhile by another
    // test may hold a copy of it until its exec closes it).
    assert!(wait_until(Duration::from_secs(3), || setxattr(
        &p,
        "user.chubby.check",
        s2.as_bytes()
    )
    .is_err_and(|e| e.raw_os_error() == Some(libc::ESTALE))));

    // A description shared with other processes: flock(1), run by a shell
    // that inherited our descriptor as fd 3, locks it; this process (which
    // opened it) is told the sequencer.
    let shared = std::fs::File::open(&p).unwrap();
    let fd = shared.as_raw_fd();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "flock -x 3 && echo locked && exec cat"])
        .current_dir(&m.mnt)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: dup2/fcntl on descriptors, async-signal-safe, in the child.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec set.
            let r = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let mut child = cmd.spawn().unwrap();
    let (first, _) = line_within(
        BufReader::new(child.stdout.take().unwrap()),
        Duration::from_secs(5),
    );
    assert_eq!(first.as_deref(), Some("locked"));
    let s3 = String::from_utf8(getxattr(&p, "user.chubby.sequencer").unwrap()).unwrap();
    assert!(gen(&s3) > gen(&s2), "{s3}");
    drop(child.stdin.take());
    child.wait().unwrap();
    // Our descriptor still holds it (the shell's exit was not the last close).
    setxattr(&p, "user.chubby.check", s3.as_bytes()).unwrap();
    drop(shared);
    assert!(wait_until(Duration::from_secs(3), || setxattr(
        &p,
        "user.chubby.check",
        s3.as_bytes()
    )
    .is_err()));
}

#[test]
fn fcntl_locks_map_to_the_same_locks() {
    let m = mount();
    let p = lock_file(&m, "posix", 0);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    // SAFETY: a plain C struct for which all zeroes is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    // SAFETY: fcntl with a valid flock struct on our descriptor.
    assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &fl) }, 0);
    assert_eq!(timed(&m, "flock -n -x .chubby/posix true").0, 1);
    // F_GETLK from another process would see us; from here, a shell's
    // flock holder shows up with its pid.
    // Closing any descriptor of the file releases this process's fcntl locks.
    drop(std::fs::File::open(&p).unwrap());
    assert_eq!(timed(&m, "flock -n -x .chubby/posix true").0, 0);
    let h = Holder::start(&m, &["-x"], ".chubby/posix", Duration::from_secs(5)).unwrap();
    // SAFETY: as above.
    let mut q: libc::flock = unsafe { std::mem::zeroed() };
    q.l_type = libc::F_RDLCK as i16;
    q.l_whence = libc::SEEK_SET as i16;
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut q) },
        0
    );
    assert_eq!(q.l_type, libc::F_WRLCK as i16);
    assert_eq!(q.l_pid as u32, h.child.id(), "the holder's pid");
    h.release();
}

#[test]
fn an_ephemeral_file_vanishes_when_its_creator_is_killed() {
    let m = mount();
    m.ok("mkdir .chubby/members");
    let mut creator = Command::new("sh")
        .args(["-c", "exec 7>.chubby/members/a; echo ready; exec cat"])
        .current_dir(&m.mnt)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (first, _) = line_within(
        BufReader::new(creator.stdout.take().unwrap()),
        Duration::from_secs(5),
    );
    assert_eq!(first.as_deref(), Some("ready"));
    let a = m.path(".chubby/members/a");
    setxattr(&a, "user.chubby.ephemeral", b"1").unwrap();
    assert_eq!(getxattr(&a, "user.chubby.ephemeral").unwrap(), b"1");
    assert_eq!(m.ok("ls .chubby/members"), "a\n");
    creator.kill().unwrap();
    creator.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || !a.exists()),
        "the ephemeral file outlived its creator"
    );
    assert_eq!(m.ok("ls .chubby/members"), "");
    // A permanent file stays.
    m.ok("echo x > .chubby/members/b");
    assert_eq!(m.ok("cat .chubby/members/b"), "x\n");
}

#[test]
fn an_events_reader_wakes_on_each_kind_of_event() {
    let m = mount();
    m.ok("mkdir .chubby/ev");
    let mut reader = Command::new("cat")
        .arg(".chubby/ev/.events")
        .current_dir(&m.mnt)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = {
        let (tx, rx) = mpsc::channel();
        let out = BufReader::new(reader.stdout.take().unwrap());
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        rx
    };
    // The reader must have the file open before the first change.
    let fds = PathBuf::from(format!("/proc/{}/fd", reader.id()));
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_dir(&fds)
            .map(|d| d
                .flatten()
                .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.ends_with(".events"))))
            .unwrap_or(false)),
        "the events reader never opened .events"
    );
    let expect = |want: &str| {
        let got = lines.recv_timeout(Duration::from_secs(30));
        assert_eq!(got.as_deref(), Ok(want), "waiting for {want:?}");
    };
    m.ok("echo v > .chubby/ev/f");
    expect("created f");
    expect("modified f");
    m.ok("flock -x .chubby/ev/f true");
    expect("locked f exclusive");
    expect("unlocked f");
    m.ok("rm .chubby/ev/f");
    expect("removed f");
    m.ok("mkdir .chubby/ev/sub");
    expect("created sub");
    // kill -9 ends a reader blocked in read (no event would wake it).
    assert!(
        killed_and_gone(&mut reader),
        "kill -9 did not end a reader blocked in read"
    );

    // poll(2) and O_NONBLOCK from this process; inotify for local changes.
    let ev = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(m.path(".chubby/ev/.events"))
        .unwrap();
    let mut buf = [0u8; 4096];
    // SAFETY: read into our buffer from our descriptor.
    let n = unsafe { libc::read(ev.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(n, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN)
    );
    // SAFETY: inotify on a path of the mount.
    let ino = unsafe { libc::inotify_init1(libc::IN_NONBLOCK) };
    assert!(ino >= 0);
    let dir = cstr(&m.path(".chubby/ev"));
    // SAFETY: valid descriptor and path.
    let wd = unsafe { libc::inotify_add_watch(ino, dir.as_ptr(), libc::IN_CREATE) };
    assert!(wd >= 0);
    let fd = ev.as_raw_fd();
    let poller = std::thread::spawn(move || {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, 5000) };
        (r, p.revents)
    });
    // Deliberate spacing, not a wait for an event: poll is most likely
    // asleep when the change comes, the wake-up this test is about; if it is
    // not yet, it finds the event at once and the assertions still hold.
    std::thread::sleep(Duration::from_millis(200));
    m.ok("echo w > .chubby/ev/g");
    let (r, revents) = poller.join().unwrap();
    assert_eq!(r, 1, "poll woke");
    assert!(revents & libc::POLLIN != 0);
    // SAFETY: as above.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0);
    assert!(String::from_utf8_lossy(&buf[..n as usize]).starts_with("created g\n"));
    // SAFETY: read of inotify events into our buffer.
    let n = unsafe { libc::read(ino, buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0, "inotify saw the local create");
    // SAFETY: closing the descriptor we opened.
    unsafe { libc::close(ino) };
}

#[test]
fn contents_survive_kill_9_of_the_daemon_and_remount() {
    let mut m = mount();
    m.ok("mkdir -p .chubby/cfg && printf 'leader=a\\n' > .chubby/cfg/x && echo y > .chubby/y");
    m.ok("chmod 0640 .chubby/y");
    let p = m.path(".chubby/y");
    setxattr(&p, "user.chubby.lock_delay_ms", b"250").unwrap();
    m.kill9();
    m.start();
    assert_eq!(m.ok("cat .chubby/cfg/x"), "leader=a\n");
    assert_eq!(m.ok("cat .chubby/y"), "y\n");
    assert_eq!(m.ok("stat -c %a .chubby/y"), "640\n");
    assert_eq!(getxattr(&p, "user.chubby.lock_delay_ms").unwrap(), b"250");
    // The engine's own nodes are there, read-only for others.
    assert!(m.ok("cat .chubby/bigtable/master").contains("pid="));
    let o = m.sh_as_nobody("echo x > .chubby/bigtable/master");
    assert!(!o.status.success(), "nobody wrote the master file");
    m.ok("echo z > .chubby/y");
    m.remount();
    assert_eq!(m.ok("cat .chubby/y"), "z\n");
}

#[test]
fn acls_are_enforced_for_other_users() {
    let m = mount();
    m.ok("echo secret > .chubby/private && chmod 0600 .chubby/private");
    let o = m.sh_as_nobody("cat .chubby/private");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    let o = m.sh_as_nobody("flock -n .chubby/private true");
    assert!(!o.status.success(), "no lock without access");
    // The root of .chubby is sticky and world-writable, like /tmp.
    let o = m.sh_as_nobody(
        "echo mine > .chubby/nobodys && flock -x .chubby/nobodys cat .chubby/nobodys",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(m.ok("stat -c %u .chubby/nobodys"), "65534\n");
    let o = m.sh_as_nobody("rm .chubby/private");
    assert!(!o.status.success(), "sticky: not nobody's to remove");
    m.ok("chown 65534 .chubby/private");
    let o = m.sh_as_nobody("cat .chubby/private");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "secret\n");
}

/// One contender: waits for the lock, logs its pid outside the mount,
/// writes it into the lock file, and leads until killed.
const CONTENDER: &str = r#"
exec 9>>.chubby/election
flock -x 9 || exit 1
echo $$ >> "$LOG"
echo $$ > .chubby/election
while :; do sleep 0.2 9>&-; done
"#;

fn contender(m: &Mount, log: &Path) -> Child {
    Command::new("sh")
        .args(["-c", CONTENDER])
        .env("LOG", log)
        .current_dir(&m.mnt)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap()
}

/// kill -9 of a contender's whole process group, reaped.
fn kill_group(c: &mut Child) {
    // SAFETY: kill(2) of the process group this test created.
    unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
    c.wait().unwrap();
}

#[test]
fn leader_election_with_three_contenders_over_50_rounds() {
    const ROUNDS: usize = 50;
    let m = mount();
    lock_file(&m, "election", 100);
    let log = m.data.with_file_name("leaders.log");
    std::fs::File::create(&log).unwrap().flush().unwrap();
    let read_log = || -> Vec<u32> {
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    };
    let mut contenders: Vec<Child> = (0..3).map(|_| contender(&m, &log)).collect();
    let start = Instant::now();
    for round in 0..ROUNDS {
        assert!(
            wait_until(Duration::from_secs(10), || read_log().len() > round),
            "round {round}: no leader elected"
        );
        let leaders = read_log();
        assert_eq!(
            leaders.len(),
            round + 1,
            "round {round}: two leaders at once"
        );
        let leader = leaders[round];
        let idx = contenders
            .iter()
            .position(|c| c.id() == leader)
            .unwrap_or_else(|| panic!("round {round}: leader {leader} is not a live contender"));
        assert!(
            wait_until(Duration::from_secs(5), || m
                .sh("cat .chubby/election")
                .stdout
                == format!("{leader}\n").into_bytes()),
            "round {round}: the lock file does not name the leader"
        );
        let mut dead = contenders.swap_remove(idx);
        kill_group(&mut dead);
        contenders.push(contender(&m, &log));
    }
    // The last kill elects one more leader, and only one.
    assert!(wait_until(Duration::from_secs(10), || read_log().len() > ROUNDS));
    // A check that something does not happen: no second leader shows up in
    // this grace period (there is no event to wait for).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read_log().len(), ROUNDS + 1);
    let took = start.elapsed();
    for c in &mut contenders {
        kill_group(c);
    }
    eprintln!("{ROUNDS} elections in {took:?}");
}
