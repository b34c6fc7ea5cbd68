//! The whole filesystem against the in-memory store: every operation a
//! mount would see, without a mount.

mod calls;
mod files;
mod kept_listings;
mod listed;
mod model;
mod names;

use crate::mock::MockStore;
use crate::node::ROOT_INO;
use crate::perms::Caller;
use crate::reply::{DirOut, SetAttr};
use crate::store::Store;
use crate::{Fs, FsOptions};
use fuser::{Errno, FileType};
use std::sync::Arc;

struct T {
    fs: Fs,
    store: Arc<dyn Store>,
    /// The in-memory store, unless the engine is (see
    /// [`T::over_the_shared_engine`]).
    mock: Option<Arc<MockStore>>,
    root: Caller,
    opts: FsOptions,
}

/// See [`T::over_the_shared_engine`].
struct SharedEngine {
    bt: engine::Bigtable,
    uses: usize,
}

/// Tests run on one engine before a new one is opened.
const SHARED_ENGINE_USES: usize = 500;

const WR: i32 = libc::O_WRONLY;
const TRUNC: i32 = libc::O_WRONLY | libc::O_TRUNC;

impl T {
    fn new() -> T {
        T::with(FsOptions {
            max_value_size: 1 << 20,
            ..Default::default()
        })
    }

    /// [`T::new`] with these options.
    fn with(opts: FsOptions) -> T {
        let mock = Arc::new(MockStore::default());
        T::on(mock.clone(), Some(mock), opts)
    }

    /// [`T::new`] on the engine itself (in memory), not the mock store: an
    /// engine kept for many tests in turn (opening and closing one was 95%
    /// of a short sequence's time), its tables deleted first. One test at a
    /// time may use it, which the returned guard holds. A new one every
    /// [`SHARED_ENGINE_USES`] tests: the master's collection reads all of
    /// METADATA, where every table made and deleted leaves its rows until
    /// a compaction drops them (with the trash purged after each test, a
    /// quarter of an hour into 20,000 tests four fifths of the time went
    /// to that).
    fn over_the_shared_engine() -> (T, parking_lot::MutexGuard<'static, Option<SharedEngine>>) {
        static ENGINE: parking_lot::Mutex<Option<SharedEngine>> = parking_lot::const_mutex(None);
        let mut guard = ENGINE.lock();
        if guard.as_ref().is_some_and(|e| e.uses >= SHARED_ENGINE_USES) {
            if let Some(old) = guard.take() {
                let _ = old.bt.close();
            }
        }
        let shared = guard.get_or_insert_with(|| {
            let files: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
            SharedEngine {
                bt: engine::Bigtable::open(files, engine::Options::default()).unwrap(),
                uses: 0,
            }
        });
        shared.uses += 1;
        let bt = shared.bt.clone();
        for t in bt.list_tables() {
            bt.delete_table(&t).unwrap();
        }
        let opts = FsOptions {
            max_value_size: 1 << 20,
            ..Default::default()
        };
        (T::on(Arc::new(bt), None, opts), guard)
    }

    fn on(store: Arc<dyn Store>, mock: Option<Arc<MockStore>>, opts: FsOptions) -> T {
        let fs = Fs::new(store.clone(), opts.clone());
        let t = T {
            fs,
            store,
            mock,
            root: Caller::root(),
            opts,
        };
        t.fs.mkdir(&t.root, ROOT_INO, b"t", 0o755, 0o022).unwrap();
        t.put("/t/.schema", b"f\ng max_versions=5\n", TRUNC)
            .unwrap();
        t
    }

    /// A second daemon's mount of the same store (nothing tells either
    /// mount of the other's writes unless the test does).
    fn peer(&self) -> T {
        T {
            fs: Fs::new(self.store.clone(), self.opts.clone()),
            store: self.store.clone(),
            mock: self.mock.clone(),
            root: Caller::root(),
            opts: self.opts.clone(),
        }
    }

    /// The mount stopped and started again on the same store.
    fn remount(&mut self) {
        self.fs = Fs::new(self.store.clone(), self.opts.clone());
    }

    /// The mock store (a test that reads it runs on it).
    fn mock(&self) -> &MockStore {
        self.mock.as_deref().expect("a test on the mock store")
    }

    /// Looks up every component of a path (components are raw names).
    fn ino(&self, path: &str) -> Result<u64, Errno> {
        self.ino_b(path.as_bytes())
    }

    fn ino_b(&self, path: &[u8]) -> Result<u64, Errno> {
        let mut ino = ROOT_INO;
        for c in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            ino = self.fs.lookup(ino, c)?.attr.ino.0;
        }
        Ok(ino)
    }

    fn split(path: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let i = path.iter().rposition(|&b| b == b'/').unwrap();
        (path[..i].to_vec(), path[i + 1..].to_vec())
    }

    /// open(O_CREAT)+write+close, as `printf > path` does.
    fn put(&self, path: &str, data: &[u8], flags: i32) -> Result<(), Errno> {
        self.put_b(path.as_bytes(), data, flags)
    }

    fn put_b(&self, path: &[u8], data: &[u8], flags: i32) -> Result<(), Errno> {
        let fh = match self.ino_b(path) {
            Ok(ino) => self.fs.open(&self.root, ino, flags)?.fh,
            Err(Errno::ENOENT) => {
                let (dir, name) = Self::split(path);
                let parent = self.ino_b(&dir)?;
                self.fs
                    .create(&self.root, parent, &name, flags | libc::O_CREAT)?
                    .1
                    .fh
            }
            Err(e) => return Err(e),
        };
        // A shell closes a duplicate descriptor before writing, and ignores
        // that close's error (a truncated `.schema` that would drop a family
        // holding data reports it there too).
        let _ = self.fs.flush(fh, None);
        let r = self
            .fs
            .write(fh, 0, data, None)
            .and_then(|_| self.fs.flush(fh, None));
        self.fs.release(fh)?;
        r
    }

    fn get(&self, path: &str) -> Result<Vec<u8>, Errno> {
        self.get_b(path.as_bytes())
    }

    fn get_b(&self, path: &[u8]) -> Result<Vec<u8>, Errno> {
        let ino = self.ino_b(path)?;
        let fh = self.fs.open(&self.root, ino, libc::O_RDONLY)?.fh;
        let mut out = Vec::new();
        loop {
            let chunk = self.fs.read(fh, out.len() as u64, 7)?;
            if chunk.is_empty() {
                break;
            }
            out.extend_from_slice(&chunk);
        }
        self.fs.release(fh)?;
        Ok(out)
    }

    /// The directory `ino` listed as the kernel lists it without OPENDIR
    /// (READDIRPLUS until one comes back empty), at most `per_reply`
    /// entries a reply: names and inodes, `.` and `..` left out.
    fn list_unopened(&self, ino: u64, per_reply: usize) -> Vec<(String, u64)> {
        let (mut out, mut offset) = (Vec::new(), 0);
        loop {
            let mut got = Vec::new();
            self.fs
                .readdir_unopened(&self.root, ino, offset, true, &mut |e: &DirOut<'_>| {
                    if got.len() == per_reply {
                        return true;
                    }
                    let name = String::from_utf8_lossy(e.name).into_owned();
                    got.push((e.offset, name, e.ino));
                    false
                })
                .unwrap();
            let Some(last) = got.last() else { break };
            offset = last.0;
            out.extend(
                got.into_iter()
                    .filter(|(_, n, _)| n != "." && n != "..")
                    .map(|(_, n, i)| (n, i)),
            );
        }
        out
    }

    fn ls(&self, path: &str) -> Result<Vec<String>, Errno> {
        let ino = self.ino(path)?;
        let fh = self.fs.opendir(&self.root, ino)?;
        let mut names = Vec::new();
        let mut offset = 0;
        loop {
            let mut got = Vec::new();
            self.fs.readdir(fh, offset, false, &mut |e: &DirOut<'_>| {
                if got.len() == 5 {
                    return true;
                }
                got.push((e.offset, String::from_utf8_lossy(e.name).into_owned()));
                false
            })?;
            if got.is_empty() {
                break;
            }
            offset = got.last().unwrap().0;
            names.extend(
                got.into_iter()
                    .map(|(_, n)| n)
                    .filter(|n| n != "." && n != ".."),
            );
        }
        self.fs.releasedir(fh);
        Ok(names)
    }

    fn mutate(&self, batch: impl AsRef<[u8]>) -> Result<Vec<u8>, Errno> {
        self.mutate_as(&self.root, batch)
    }

    fn mutate_as(&self, who: &Caller, batch: impl AsRef<[u8]>) -> Result<Vec<u8>, Errno> {
        let ino = self.ino("/t/.mutate")?;
        let fh = self.fs.open(who, ino, libc::O_RDWR)?.fh;
        let r = self.fs.write(fh, 0, batch.as_ref(), None);
        if let Err(e) = r {
            let _ = self.fs.flush(fh, None);
            self.fs.release(fh)?;
            return Err(e);
        }
        let out = self.fs.read(fh, 0, 1 << 20);
        self.fs.flush(fh, None)?;
        self.fs.release(fh)?;
        out
    }

    fn mkdir(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = Self::split(path.as_bytes());
        let p = self.ino_b(&dir)?;
        self.fs.mkdir(&self.root, p, &name, 0o755, 0).map(|_| ())
    }

    fn rmdir(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = Self::split(path.as_bytes());
        let p = self.ino_b(&dir)?;
        self.fs.rmdir(&self.root, p, &name)
    }

    fn unlink(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = Self::split(path.as_bytes());
        let p = self.ino_b(&dir)?;
        self.fs.unlink(&self.root, p, &name)
    }

    fn versions(&self, path: &str) -> Vec<String> {
        self.ls(path).unwrap()
    }
}
