//! What the daemon learns about its callers from /proc.
//!
//! fuser 0.18 answers FUSE_INTERRUPT with ENOSYS, after which the kernel
//! never sends another: a thread blocked in SETLKW or in a blocking read of
//! an events file sits in the kernel, uninterruptible, until we answer. So a
//! waiter checks its caller itself: a thread that has an unblocked signal
//! pending (`flock -w`'s alarm, `timeout`'s SIGTERM, a `kill -9`), is a
//! zombie or is gone must stop waiting, and is answered EINTR.
//!
//! The same file tells a FLUSH sent by the `close` of a process being killed
//! (a fatal signal is pending: SIGKILL, or one with no handler whose default
//! action ends the process) from an orderly close: the first releases its
//! locks with lock-delay, the second at once.
//!
//! Only /proc/<pid>/status and fdinfo are read, never /proc/<pid>/stat: the
//! kernel takes the target's exec_update_lock to show `stat`, and a process
//! in execve holds it while it closes its close-on-exec descriptors — which
//! sends us the FLUSH we would be answering. Reading `stat` there deadlocks.

use std::fs;
use std::io;

/// Bit of SIGKILL in the /proc signal masks (signal n is bit n-1).
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// The fields of /proc/<tid>/status a waiter needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStatus {
    /// First letter of `State:` (R, S, D, T, Z, X...).
    pub state: char,
    pub tgid: u32,
    /// Signals pending for this thread alone.
    pub sig_pnd: u64,
    /// Signals pending for the whole process.
    pub shd_pnd: u64,
    /// Signals this thread blocks.
    pub sig_blk: u64,
    /// Signals the process ignores.
    pub sig_ign: u64,
    /// Signals the process has handlers for.
    pub sig_cgt: u64,
}

impl TaskStatus {
    /// Whether a request made by this thread should be given up: a signal
    /// would be delivered to it if the request returned, or it is dying.
    pub fn should_abandon(&self) -> bool {
        let pending = self.sig_pnd | self.shd_pnd;
        matches!(self.state, 'Z' | 'X')
            || pending & SIGKILL_BIT != 0
            || pending & !self.sig_blk != 0
    }

    /// Whether a signal that will end the process is pending: SIGKILL, or an
    /// unblocked one with neither handler nor SIG_IGN whose default action
    /// terminates. (Its fatal delivery leaves it pending in the process's
    /// shared set while the process exits and closes its files.)
    pub fn dying_by_signal(&self) -> bool {
        let pending = self.sig_pnd | self.shd_pnd;
        if pending & SIGKILL_BIT != 0 {
            return true;
        }
        pending & !self.sig_blk & !self.sig_cgt & !self.sig_ign & !NOT_FATAL != 0
    }
}

/// Signals whose default action does not end a process: SIGCHLD, SIGCONT,
/// SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGWINCH.
const NOT_FATAL: u64 = {
    let sigs = [
        libc::SIGCHLD,
        libc::SIGCONT,
        libc::SIGSTOP,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGURG,
        libc::SIGWINCH,
    ];
    let mut m = 0u64;
    let mut i = 0;
    while i < sigs.len() {
        m |= 1 << (sigs[i] - 1);
        i += 1;
    }
    m
};

/// Parses the text of /proc/<tid>/status.
pub fn parse_status(text: &str) -> Option<TaskStatus> {
    let mut st = TaskStatus {
        state: '?',
        tgid: 0,
        sig_pnd: 0,
        shd_pnd: 0,
        sig_blk: 0,
        sig_ign: 0,
        sig_cgt: 0,
    };
    let mut seen = 0;
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let val = val.trim();
        let hex = || u64::from_str_radix(val, 16).ok();
        match key {
            "State" => st.state = val.chars().next()?,
            "Tgid" => st.tgid = val.parse().ok()?,
            "SigPnd" => st.sig_pnd = hex()?,
            "ShdPnd" => st.shd_pnd = hex()?,
            "SigBlk" => st.sig_blk = hex()?,
            "SigIgn" => st.sig_ign = hex()?,
            "SigCgt" => st.sig_cgt = hex()?,
            _ => continue,
        }
        seen += 1;
    }
    (seen == 7).then_some(st)
}

/// The status of thread `tid` (any thread id: /proc/<tid> resolves threads
/// too). `Ok(None)` if it no longer exists.
pub fn task_status(tid: u32) -> io::Result<Option<TaskStatus>> {
    match fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(text) => Ok(parse_status(&text)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// Whether the thread that made a request (its FUSE header pid) should stop
/// waiting for it. An unknown caller (pid 0: another pid namespace) is
/// never cancelled; an unreadable /proc counts as "keep waiting".
pub fn should_abandon(tid: u32) -> bool {
    if tid == 0 {
        return false;
    }
    match task_status(tid) {
        Ok(Some(st)) => st.should_abandon(),
        Ok(None) => true,
        Err(e) => {
            log::debug!("cannot read /proc/{tid}/status: {e}");
            false
        }
    }
}

/// Whether thread `tid`, which is closing a file, is being killed by a
/// signal (`kill -9`, the OOM killer, an unhandled SIGTERM): its close is a
/// holder dying. A crash (a fault in one thread) is not always seen as such.
pub fn being_killed(tid: u32) -> bool {
    tid != 0 && matches!(task_status(tid), Ok(Some(st)) if st.dying_by_signal())
}

/// A process known to use an open file description. A recycled pid does no
/// harm: descriptions are compared with kcmp(2), which only matches a
/// process that really has the description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcRef {
    pub pid: u32,
}

impl ProcRef {
    /// The process `pid` (None for pid 0).
    pub fn of(pid: u32) -> Option<ProcRef> {
        (pid != 0).then_some(ProcRef { pid })
    }

    /// Whether a process by that pid runs (not a zombie).
    pub fn alive(&self) -> bool {
        matches!(task_status(self.pid), Ok(Some(st)) if !matches!(st.state, 'Z' | 'X'))
    }
}

/// The process (thread group) a thread belongs to.
pub fn tgid_of(tid: u32) -> Option<u32> {
    match task_status(tid) {
        Ok(Some(st)) if st.tgid != 0 => Some(st.tgid),
        _ => None,
    }
}

/// The descriptors of process `pid` open on inode number `ino` (from
/// /proc/<pid>/fdinfo; our inode numbers are 64-bit hashes, so another
/// filesystem's file will not match by accident).
pub fn fds_on(pid: u32, ino: u64) -> Vec<i32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(info) = fs::read_to_string(e.path()) else {
            continue;
        };
        let file_ino = info
            .lines()
            .find_map(|l| l.strip_prefix("ino:"))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if file_ino == Some(ino) {
            out.push(fd);
        }
    }
    out
}

/// Whether descriptor `fd1` of `pid1` and `fd2` of `pid2` are one open file
/// description (kcmp(2)); None if the kernel will not say.
pub fn same_description(pid1: u32, fd1: i32, pid2: u32, fd2: i32) -> Option<bool> {
    const KCMP_FILE: libc::c_long = 0;
    // SAFETY: kcmp only reads its integer arguments; no memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid1 as libc::c_long,
            pid2 as libc::c_long,
            KCMP_FILE,
            fd1 as libc::c_long,
            fd2 as libc::c_long,
        )
    };
    match r {
        0 => Some(true),
        1..=3 => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    const STATUS: &str = "Name:\tflock\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t4242\n\
        Pid:\t4243\nSigQ:\t1/1000\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000002000\n\
        SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\n";

    #[test]
    fn pending_unblocked_signal_abandons() {
        let st = parse_status(STATUS).unwrap();
        assert_eq!(st.state, 'D');
        assert_eq!(st.tgid, 4242);
        // SIGALRM (14) is bit 13 = 0x2000.
        assert_eq!(st.shd_pnd, 0x2000);
        assert!(st.should_abandon());
        // Blocked, it stays pending and the wait goes on.
        let blocked = TaskStatus {
            sig_blk: 0x2000,
            ..st
        };
        assert!(!blocked.should_abandon());
        // SIGKILL cannot be blocked.
        let killed = TaskStatus {
            sig_pnd: SIGKILL_BIT,
            sig_blk: u64::MAX,
            shd_pnd: 0,
            ..st
        };
        assert!(killed.should_abandon());
        let zombie = TaskStatus {
            state: 'Z',
            shd_pnd: 0,
            ..st
        };
        assert!(zombie.should_abandon());
        let quiet = TaskStatus { shd_pnd: 0, ..st };
        assert!(!quiet.should_abandon());
        assert!(parse_status("State:\tR\n").is_none());
    }

    #[test]
    fn fatal_signals_tell_a_dying_closer() {
        let st = parse_status(STATUS).unwrap();
        // SIGALRM with no handler: the process dies of it.
        assert!(st.dying_by_signal());
        // With a handler it lives on.
        let caught = TaskStatus {
            sig_cgt: 0x2000,
            ..st
        };
        assert!(!caught.dying_by_signal());
        assert!(caught.should_abandon(), "but a waiter still returns EINTR");
        // SIGCHLD and SIGTSTP do not kill; SIGKILL always does.
        let chld = TaskStatus {
            shd_pnd: 1 << (libc::SIGCHLD - 1) | 1 << (libc::SIGTSTP - 1),
            ..st
        };
        assert!(!chld.dying_by_signal());
        let kill = TaskStatus {
            shd_pnd: SIGKILL_BIT,
            sig_blk: u64::MAX,
            ..st
        };
        assert!(kill.dying_by_signal());
        let none = TaskStatus { shd_pnd: 0, ..st };
        assert!(!none.dying_by_signal());
    }

    #[test]
    fn a_signal_pending_on_a_child_is_seen() {
        // A child that blocks nothing and is stopped: a SIGUSR1 sent to it
        // stays pending until it continues.
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = child.id();
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let stopped = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            task_status(pid).unwrap().is_some_and(|s| s.state == 'T')
        });
        assert!(stopped);
        assert!(!should_abandon(pid));
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
        assert!(should_abandon(pid), "SIGUSR1 pending on a stopped child");
        assert!(being_killed(pid), "SIGUSR1 has no handler in sleep");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(should_abandon(pid), "a reaped child is gone");
        assert!(!ProcRef::of(pid).unwrap().alive());
    }

    #[test]
    fn descriptions_compare_with_kcmp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let a = std::fs::File::open(&p).unwrap();
        let b = a.try_clone().unwrap();
        let c = std::fs::File::open(&p).unwrap();
        let me = std::process::id();
        let same = same_description(me, a.as_raw_fd(), me, b.as_raw_fd());
        if same.is_none() {
            return; // kcmp not available here: the caller falls back.
        }
        assert_eq!(same, Some(true));
        assert_eq!(
            same_description(me, a.as_raw_fd(), me, c.as_raw_fd()),
            Some(false)
        );
        use std::os::unix::fs::MetadataExt;
        let ino = a.metadata().unwrap().ino();
        let fds = fds_on(me, ino);
        for f in [&a, &b, &c] {
            assert!(fds.contains(&f.as_raw_fd()));
        }
    }
}
