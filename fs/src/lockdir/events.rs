//! Events files and kernel invalidation.
//!
//! One thread follows every change of the cell (`LockService::watch_all`).
//! For each it tells the kernel what it may have cached wrongly (the change
//! may come from the engine or from a dead holder's cleanup, which the kernel
//! never saw), and appends a line to every open `<dir>/.events` file that
//! watches the directory the change happened in:
//!
//! ```text
//! created NAME                 a child was added
//! removed NAME                 a child was removed
//! modified NAME                a file's contents were replaced
//! locked NAME shared|exclusive a lock was granted
//! unlocked NAME                a lock was released
//! deleted .                    the directory itself was removed (end of file follows)
//! ```
//!
//! NAME is the child's name, or `.` for the directory itself; `%`, white
//! space and control characters in it are written `%XX`. An events file
//! shows the changes made after it was opened; a reader that falls more
//! than [`MAX_BUFFERED`] bytes behind gets one `overflow` line in place of
//! what was lost.

use super::{split, LockNode};
use crate::notify::{Inval, Invalidator};
use chubby::{Event, WatchEvent};
use crossbeam_channel::Receiver;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Unread bytes kept per events file.
pub const MAX_BUFFERED: usize = 256 * 1024;

/// Called once when a poll that found nothing to read may now succeed.
pub type PollWaker = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct QueueState {
    buf: Vec<u8>,
    /// Lines were dropped since the reader last caught up.
    overflowed: bool,
    /// The directory is gone: end of file once `buf` is read.
    closed: bool,
    poll: Option<PollWaker>,
}

/// The unread lines of one open events file.
pub struct Queue {
    /// The watched directory's path.
    pub dir: String,
    state: Mutex<QueueState>,
    cond: Condvar,
}

impl Queue {
    fn push(&self, line: &[u8]) {
        let waker = {
            let mut st = self.state.lock();
            if st.closed {
                return;
            }
            if st.buf.len() + line.len() > MAX_BUFFERED {
                st.overflowed = true;
            } else {
                st.buf.extend_from_slice(line);
            }
            st.poll.take()
        };
        self.cond.notify_all();
        if let Some(w) = waker {
            w();
        }
    }

    fn close(&self) {
        let waker = {
            let mut st = self.state.lock();
            st.closed = true;
            st.poll.take()
        };
        self.cond.notify_all();
        if let Some(w) = waker {
            w();
        }
    }

    /// Takes up to `max` bytes, ending at a line boundary when one fits.
    /// `None` if nothing is there yet; `Some(empty)` at end of file.
    pub fn take(&self, max: usize) -> Option<Vec<u8>> {
        let mut st = self.state.lock();
        if st.overflowed && st.buf.len() + 9 <= MAX_BUFFERED {
            st.overflowed = false;
            st.buf.extend_from_slice(b"overflow\n");
        }
        if st.buf.is_empty() {
            return st.closed.then(Vec::new);
        }
        let mut n = st.buf.len().min(max);
        if n < st.buf.len() {
            if let Some(nl) = st.buf[..n].iter().rposition(|&b| b == b'\n') {
                n = nl + 1;
            }
        }
        Some(st.buf.drain(..n).collect())
    }

    /// Waits at most `timeout` for something to read.
    pub fn wait(&self, timeout: Duration) {
        let mut st = self.state.lock();
        if st.buf.is_empty() && !st.closed && !st.overflowed {
            self.cond.wait_for(&mut st, timeout);
        }
    }

    /// Whether a read would return at once.
    pub fn ready(&self) -> bool {
        let st = self.state.lock();
        !st.buf.is_empty() || st.closed || st.overflowed
    }

    /// Arranges for `waker` to run when the queue becomes readable (at once
    /// if it already is).
    pub fn on_ready(&self, waker: PollWaker) {
        let mut st = self.state.lock();
        if !st.buf.is_empty() || st.closed || st.overflowed {
            drop(st);
            waker();
        } else {
            st.poll = Some(waker);
        }
    }
}

/// The open events files.
#[derive(Default)]
pub struct Hub {
    queues: Mutex<HashMap<u64, Arc<Queue>>>,
    next: AtomicU64,
}

impl Hub {
    /// A new events file for directory `dir`; its id unsubscribes.
    pub fn subscribe(&self, dir: &str) -> (u64, Arc<Queue>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let q = Arc::new(Queue {
            dir: dir.to_string(),
            state: Mutex::new(QueueState::default()),
            cond: Condvar::new(),
        });
        self.queues.lock().insert(id, q.clone());
        (id, q)
    }

    pub fn unsubscribe(&self, id: u64) {
        self.queues.lock().remove(&id);
    }

    /// Appends the line(s) `ev` means to every queue watching its directory.
    pub fn dispatch(&self, ev: &WatchEvent) {
        let queues: Vec<Arc<Queue>> = self.queues.lock().values().cloned().collect();
        if queues.is_empty() {
            return;
        }
        let (parent, name) = split(&ev.path);
        for q in queues {
            if q.dir == ev.path {
                match &ev.event {
                    Event::Deleted => {
                        q.push(b"deleted .\n");
                        q.close();
                    }
                    e => q.push(&line(e, ".")),
                }
            } else if q.dir == parent && ev.path != "/" {
                // Children's own child events are their directory's business;
                // their removal shows as "removed" in this one.
                if !matches!(
                    ev.event,
                    Event::ChildAdded(_) | Event::ChildRemoved(_) | Event::Deleted
                ) {
                    q.push(&line(&ev.event, name));
                }
            }
        }
    }
}

/// Escapes a name for an events line: `%`, white space and control bytes as `%XX`.
pub fn escape(name: &str) -> String {
    let mut out = Vec::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b == b'%' || b.is_ascii_whitespace() || b < 0x20 || b == 0x7F {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    // Only ASCII bytes were replaced, so multi-byte characters are intact.
    String::from_utf8_lossy(&out).into_owned()
}

/// The events line for `ev` happening to `name` (".": the directory itself).
pub fn line(ev: &Event, name: &str) -> Vec<u8> {
    let n = if name == "." {
        ".".to_string()
    } else {
        escape(name)
    };
    let s = match ev {
        Event::ChildAdded(c) => format!("created {}\n", escape(c)),
        Event::ChildRemoved(c) => format!("removed {}\n", escape(c)),
        Event::ContentsChanged => format!("modified {n}\n"),
        Event::LockAcquired(m) => format!("locked {n} {m}\n"),
        Event::LockReleased => format!("unlocked {n}\n"),
        Event::Deleted => format!("deleted {n}\n"),
    };
    s.into_bytes()
}

/// What the kernel must forget after `ev`.
pub fn invalidations(ev: &WatchEvent) -> Vec<Inval> {
    let ino = LockNode::entry_ino(&ev.path);
    match &ev.event {
        Event::ContentsChanged => vec![Inval::Inode(ino)],
        Event::ChildAdded(name) | Event::ChildRemoved(name) => vec![
            Inval::Entry {
                parent: ino,
                name: name.as_bytes().to_vec(),
            },
            Inval::Inode(ino),
        ],
        Event::LockAcquired(_) | Event::LockReleased | Event::Deleted => Vec::new(),
    }
}

/// Starts the thread that follows the cell; it ends when the cell does.
pub fn start_watcher(rx: Receiver<WatchEvent>, hub: Arc<Hub>, inval: Arc<Invalidator>) {
    let spawned = std::thread::Builder::new()
        .name("chubby-events".into())
        .spawn(move || {
            for ev in rx {
                hub.dispatch(&ev);
                for i in invalidations(&ev) {
                    inval.send(i);
                }
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the lock service's event thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chubby::LockMode;

    fn ev(path: &str, event: Event) -> WatchEvent {
        WatchEvent {
            id: 7,
            path: path.into(),
            event,
        }
    }

    #[test]
    fn lines_for_a_directory_and_its_children() {
        let hub = Hub::default();
        let (_, q) = hub.subscribe("/d");
        let (_, root) = hub.subscribe("/");
        hub.dispatch(&ev("/d", Event::ChildAdded("a b".into())));
        hub.dispatch(&ev("/d/a b", Event::ContentsChanged));
        hub.dispatch(&ev("/d/a b", Event::LockAcquired(LockMode::Exclusive)));
        hub.dispatch(&ev("/d/a b", Event::LockReleased));
        hub.dispatch(&ev("/d/x/y", Event::ContentsChanged)); // grandchild: not ours
        hub.dispatch(&ev("/d/x", Event::ChildAdded("y".into()))); // child's child
        hub.dispatch(&ev("/d", Event::ChildRemoved("a b".into())));
        hub.dispatch(&ev("/d", Event::LockAcquired(LockMode::Shared)));
        assert_eq!(
            String::from_utf8(q.take(4096).unwrap()).unwrap(),
            "created a%20b\nmodified a%20b\nlocked a%20b exclusive\nunlocked a%20b\n\
             removed a%20b\nlocked . shared\n"
        );
        assert!(q.take(4096).is_none(), "nothing more to read");
        // The root's file sees /d's own lock events as a child's.
        let r = String::from_utf8(root.take(4096).unwrap()).unwrap();
        assert_eq!(r, "locked d shared\n");
        hub.dispatch(&ev("/d", Event::Deleted));
        assert_eq!(q.take(4096).unwrap(), b"deleted .\n");
        assert_eq!(q.take(4096).unwrap(), b"", "end of file after deletion");
    }

    #[test]
    fn short_reads_end_at_line_boundaries_and_overflow_is_reported() {
        let hub = Hub::default();
        let (id, q) = hub.subscribe("/");
        hub.dispatch(&ev("/aaaa", Event::ContentsChanged));
        hub.dispatch(&ev("/bbbb", Event::ContentsChanged));
        assert_eq!(q.take(20).unwrap(), b"modified aaaa\n");
        assert_eq!(q.take(5).unwrap(), b"modif");
        assert_eq!(q.take(100).unwrap(), b"ied bbbb\n");
        for _ in 0..MAX_BUFFERED / 10 {
            hub.dispatch(&ev("/cccc", Event::ContentsChanged));
        }
        let all = q.take(usize::MAX).unwrap();
        assert!(all.len() <= MAX_BUFFERED);
        assert_eq!(q.take(100).unwrap(), b"overflow\n");
        hub.unsubscribe(id);
        hub.dispatch(&ev("/dddd", Event::ContentsChanged));
        assert!(q.take(100).is_none(), "unsubscribed");
    }

    #[test]
    fn poll_waker_runs_once_on_the_next_line() {
        let hub = Hub::default();
        let (_, q) = hub.subscribe("/");
        let hits = Arc::new(AtomicU64::new(0));
        let h = hits.clone();
        q.on_ready(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(!q.ready());
        hub.dispatch(&ev("/x", Event::LockReleased));
        hub.dispatch(&ev("/x", Event::LockReleased));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert!(q.ready());
        // Already readable: the waker runs at once.
        let h = hits.clone();
        q.on_ready(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(hits.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn escaping_and_invalidations() {
        assert_eq!(escape("a%b\nc d"), "a%25b%0Ac%20d");
        assert_eq!(escape("é"), "é");
        let i = invalidations(&ev("/d", Event::ChildRemoved("x".into())));
        assert_eq!(
            i,
            vec![
                Inval::Entry {
                    parent: LockNode::entry_ino("/d"),
                    name: b"x".to_vec()
                },
                Inval::Inode(LockNode::entry_ino("/d"))
            ]
        );
        assert!(invalidations(&ev("/d", Event::LockReleased)).is_empty());
    }
}
