//! Open files and directories.

use crate::mutate::BatchParser;
use crate::node::Node;
use crate::perms::Caller;
use crate::query::Query;
use crate::store::RowStream;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One entry of a directory snapshot.
#[derive(Debug, Clone)]
pub struct Listed {
    pub name: Vec<u8>,
    pub node: Node,
    pub kind: fuser::FileType,
    /// Attributes when already known from the listing's read.
    pub attr: Option<fuser::FileAttr>,
    /// Size and timestamp of the value `attr` describes: once the kernel
    /// has them from a readdirplus reply, an open may use its page cache.
    pub version: Option<(u64, u64)>,
}

/// A cell or version file open for reading or writing: the whole value is
/// held here and committed as one new version.
pub struct CellHandle {
    pub node: Node,
    /// The inode number the handle was opened on (its node's number may
    /// change under it: a rename).
    pub ino: u64,
    pub writable: bool,
    /// Opened with O_APPEND: writes go to the end whatever the offset, and if
    /// nothing else changed the commit is an atomic append in the store.
    pub append_mode: bool,
    /// The value as this handle sees it.
    pub data: Vec<u8>,
    /// Length of `data` when the appended part began (for append commits).
    pub base_len: usize,
    /// Every change since open is an append at the end.
    pub append_only: bool,
    /// `data` differs from what is committed.
    pub dirty: bool,
    /// A write or truncate happened since the last commit. `close` commits
    /// only then: a shell's `> file` opens with O_TRUNC and closes a duplicate
    /// descriptor before writing, which must not commit an empty version.
    pub wrote: bool,
    /// Created by this handle and not committed yet (visible as pending).
    pub created: bool,
    /// The directory and name this handle created the file under (the
    /// kernel's entry to drop if the file is never committed).
    pub created_as: Option<(Node, Vec<u8>)>,
    /// The handle bypasses the page cache (a writer, or a reader while the
    /// kernel's size or pages may not be the committed value's).
    pub direct: bool,
    /// Timestamp of the version `data` was read from (0: none yet).
    pub ts: u64,
    /// A reader opened on the kernel's pages alone (`files/open.rs`): the
    /// value of version `ts` is not read yet, and this is its size. A READ
    /// (the kernel dropped pages since) reads it first.
    pub unread: Option<u64>,
    /// A write failed (EFBIG): the value is incomplete and is never
    /// committed; close reports the error.
    pub failed: Option<fuser::Errno>,
    /// The file was unlinked while this handle was open: it reads and
    /// writes its own buffer as a regular file's descriptor does, reports
    /// st_nlink 0, and its close or fsync commits nothing.
    pub unlinked: bool,
    /// The cell's versions were all deleted another way (a `.mutate`
    /// delete, `rm` of its versions) while this writer was open: its name
    /// no longer answers from this handle (a lookup reads the store, as an
    /// open and a listing do), though its close still commits, as a new
    /// version after the delete.
    pub deleted: bool,
    /// An mtime set through this open file before its value was committed
    /// (`cp -p` sets it before it closes): the commit is the version of
    /// that timestamp (µs) rather than the server's.
    pub mtime: Option<u64>,
    /// What `data` holds of the write-buffer budget (writers only).
    pub charge: Option<crate::write_budget::Charge>,
}

impl CellHandle {
    /// The size of the value as this handle sees it.
    pub fn value_len(&self) -> u64 {
        self.unread.unwrap_or(self.data.len() as u64)
    }
}

/// `.schema` open for reading or writing.
pub struct SchemaHandle {
    pub table: String,
    pub caller: Caller,
    pub append_mode: bool,
    pub data: Vec<u8>,
    pub base_len: usize,
    pub dirty: bool,
    pub wrote: bool,
    /// A complete line was refused (EINVAL): later writes and the close
    /// fail, and nothing is applied.
    pub failed: Option<fuser::Errno>,
}

/// `.mutate` open: the batch being written, and what reading returns.
pub struct MutateHandle {
    pub table: String,
    pub caller: Caller,
    pub parser: BatchParser,
    /// What the batch's unfinished line holds of the write-buffer budget.
    pub charge: crate::write_budget::Charge,
    /// The first error of the batch (errno and message); later writes and the
    /// close fail with it.
    pub failed: Option<(fuser::Errno, String)>,
    /// Result lines of committed batches, read back sequentially.
    pub results: Vec<u8>,
    /// Whether the handle can read, so that results are worth keeping.
    pub keep_results: bool,
    pub read_pos: usize,
}

/// `.scan/<query>` open: a streaming window over the formatted output.
pub struct ScanHandle {
    pub table: String,
    pub query: Query,
    /// Families the caller may read (None: all).
    pub readable: Option<Vec<String>>,
    /// Aggregate families: their cells print as decimal, as counters do.
    pub aggregates: Vec<String>,
    pub stream: Option<Box<dyn RowStream>>,
    /// Output bytes from file offset `start` on.
    pub buf: Vec<u8>,
    pub start: u64,
    pub done: bool,
}

/// `.changes/<query>` open: the change stream from the query's position,
/// as lines; a read at its end returns what is new (nothing: EOF, and a
/// later read goes on), so `tail -f` follows it.
pub struct ChangesHandle {
    /// Its file's inode (`crate::change_sizes` keeps the file's size).
    pub ino: u64,
    pub table: String,
    pub name: crate::change_query::ChangeName,
    /// Where the stream goes on.
    pub pos: engine::changes::Position,
    /// Output bytes from file offset `start` on.
    pub buf: Vec<u8>,
    pub start: u64,
    /// `until=` reached.
    pub done: bool,
}

impl Drop for ChangesHandle {
    fn drop(&mut self) {
        crate::change_sizes::close(self.ino);
    }
}

/// A directory being listed.
pub struct DirHandle {
    pub node: Node,
    /// Entries of small directories, listed once (offset = index + 1).
    pub snapshot: Option<Vec<Listed>>,
    /// Streaming listings (rows of a table): offset → the row key listed
    /// there, for the last two batches only, so that memory does not grow
    /// with the table and a listing resumes after the right key even if rows
    /// are inserted meanwhile.
    pub cursors: BTreeMap<u64, Vec<u8>>,
    pub next_offset: u64,
    /// First offset of the previous batch (older cursors are dropped).
    pub prev_batch: u64,
}

/// Any open handle.
pub enum Handle {
    Cell(CellHandle),
    Schema(SchemaHandle),
    Mutate(MutateHandle),
    Scan(ScanHandle),
    Changes(ChangesHandle),
    /// Fixed contents (status files).
    Content(Vec<u8>),
    /// `.bigtable/control` open for writing: the unfinished command line.
    Control(Vec<u8>),
    Dir(DirHandle),
}

/// Writable handles: inode → handles, and handle → inode.
#[derive(Default)]
struct Writers(HashMap<u64, Vec<u64>>, HashMap<u64, u64>);

/// Who wrote through one open file, by the kernel's id of each writer's
/// descriptor table (FUSE's lock owner; None when the kernel gave none).
#[derive(Default)]
struct WroteBy {
    owners: Vec<u64>,
    unknown: bool,
}

/// Owners remembered per open file; past this, any close commits.
const MAX_OWNERS: usize = 16;

/// The table of open handles.
#[derive(Default)]
pub struct Handles {
    map: Mutex<HashMap<u64, Arc<Mutex<Handle>>>>,
    /// Writable cell handles by the inode number of their node, and back:
    /// while a file is being written, its size is the writer's.
    writers: Mutex<Writers>,
    /// Open files written to, and by whom (see [`Handles::commits_on_close`]).
    wrote_by: Mutex<HashMap<u64, WroteBy>>,
    next: AtomicU64,
}

impl Handles {
    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.map.lock().insert(fh, Arc::new(Mutex::new(h)));
        fh
    }

    /// Inserts a writable cell handle on the node with inode number `ino`.
    pub fn insert_writer(&self, h: Handle, ino: u64) -> u64 {
        let fh = self.insert(h);
        let mut w = self.writers.lock();
        w.0.entry(ino).or_default().push(fh);
        w.1.insert(fh, ino);
        fh
    }

    /// The writable handles open on the node with inode number `ino`.
    pub fn writers_of(&self, ino: u64) -> Vec<Arc<Mutex<Handle>>> {
        let fhs = self.writers.lock().0.get(&ino).cloned().unwrap_or_default();
        let map = self.map.lock();
        fhs.iter().filter_map(|fh| map.get(fh).cloned()).collect()
    }

    /// Every writable cell handle (unlocked: a caller may hold one).
    pub fn writers(&self) -> Vec<Arc<Mutex<Handle>>> {
        let fhs: Vec<u64> = self.writers.lock().1.keys().copied().collect();
        let map = self.map.lock();
        fhs.iter().filter_map(|fh| map.get(fh).cloned()).collect()
    }

    /// Notes a write through `fh` by the descriptor table `owner`.
    pub fn wrote(&self, fh: u64, owner: Option<u64>) {
        let mut map = self.wrote_by.lock();
        let w = map.entry(fh).or_default();
        match owner {
            Some(o) if w.owners.contains(&o) => {}
            Some(o) if w.owners.len() < MAX_OWNERS => w.owners.push(o),
            _ => w.unknown = true,
        }
    }

    /// Whether a close of `fh` by the descriptor table `closer` commits
    /// what was written. Only a table that wrote through the open file
    /// does: a child that inherited the descriptor also closes it when it
    /// exits or execs (FUSE sends a flush each time), and must not commit a
    /// batch or value its parent is still writing.
    pub fn commits_on_close(&self, fh: u64, closer: u64) -> bool {
        self.wrote_by
            .lock()
            .get(&fh)
            .is_none_or(|w| w.unknown || w.owners.contains(&closer))
    }

    pub fn get(&self, fh: u64) -> Option<Arc<Mutex<Handle>>> {
        self.map.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<Mutex<Handle>>> {
        let mut w = self.writers.lock();
        if let Some(ino) = w.1.remove(&fh) {
            if let Some(v) = w.0.get_mut(&ino) {
                v.retain(|&f| f != fh);
                if v.is_empty() {
                    w.0.remove(&ino);
                }
            }
        }
        drop(w);
        self.wrote_by.lock().remove(&fh);
        self.map.lock().remove(&fh)
    }

    /// The cell handles (readers and writers) open on a node `which`
    /// accepts, for unlink and for the attributes of an unlinked open file:
    /// a scan of the open handles, which are few next to the files.
    pub fn cells_where(&self, which: impl Fn(&Node) -> bool) -> Vec<Arc<Mutex<Handle>>> {
        let all: Vec<Arc<Mutex<Handle>>> = self.map.lock().values().cloned().collect();
        all.into_iter()
            .filter(|h| matches!(&*h.lock(), Handle::Cell(c) if which(&c.node)))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_are_indexed_by_inode() {
        let h = Handles::default();
        let a = h.insert_writer(Handle::Content(b"a".to_vec()), 7);
        let _b = h.insert_writer(Handle::Content(b"b".to_vec()), 7);
        assert_eq!(h.writers_of(7).len(), 2);
        h.remove(a);
        assert_eq!(h.writers_of(7).len(), 1);
        assert!(h.writers_of(8).is_empty());
    }

    #[test]
    fn handles_are_distinct_and_removable() {
        let h = Handles::default();
        let a = h.insert(Handle::Content(b"a".to_vec()));
        let b = h.insert(Handle::Content(b"b".to_vec()));
        assert_ne!(a, b);
        assert!(h.get(a).is_some());
        assert!(h.remove(a).is_some());
        assert!(h.get(a).is_none());
        assert_eq!(h.len(), 1);
    }
}
