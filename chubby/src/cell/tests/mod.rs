//! Tests of the whole cell through the `LockService` interface.

mod acl;
mod durability;
mod election;
mod events;
mod locks;
mod namespace;
mod sessions;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::{CellOptions, Credentials, LocalCell, LockService, NodeKind, Target};

pub fn opts() -> CellOptions {
    CellOptions {
        default_lock_delay: Duration::from_millis(300),
        ..CellOptions::default()
    }
}

pub fn open(dir: &Path) -> Arc<LocalCell> {
    LocalCell::open(dir, opts()).unwrap()
}

/// Waits until `n` lock waiters are queued in the cell (a waiter thread has
/// reached the queue), polling with a deadline instead of guessing a sleep.
pub fn wait_for_waiters(cell: &LocalCell, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, waiters) = cell.state.lock().locks.counts();
        if waiters >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{waiters} lock waiters queued after 10 s, expected {n}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn root() -> Credentials {
    Credentials::root()
}

pub fn alice() -> Credentials {
    Credentials::user(1000, 1000)
}

pub fn bob() -> Credentials {
    Credentials::user(1001, 1001)
}

/// A canonical text picture of the whole namespace (everything durable).
pub fn dump(cell: &dyn LockService) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        let st = cell.stat(&root(), Target::Path(&p)).unwrap();
        let mut line = format!(
            "{p} {:?} {:o} {}:{} cgen={} lgen={} delay={:?} eph={} mtime={:?}",
            st.kind,
            st.mode,
            st.uid,
            st.gid,
            st.content_generation,
            st.lock_generation,
            st.lock_delay,
            st.ephemeral,
            st.mtime
        );
        match st.kind {
            NodeKind::File => {
                let (data, _) = cell.read(&root(), Target::Path(&p)).unwrap();
                line.push_str(&format!(" data={}", String::from_utf8_lossy(&data)));
            }
            NodeKind::Dir => {
                for e in cell.list(&root(), &p).unwrap() {
                    stack.push(join(&p, &e.name));
                }
            }
        }
        out.push(line);
    }
    out.sort();
    out
}

/// Joins a parent path and a name.
fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}
