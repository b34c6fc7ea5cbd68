//! `.chubby/` against a real lock-service cell, without a mount.

mod files;
mod locks;

use super::locks::OFFSET_MAX;
use super::*;
use crate::mock::MockStore;
use crate::node::{Node, ROOT_INO};
use crate::perms::Caller;
use crate::reply::SetAttr;
use crate::Fs;
use crate::FsOptions;
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
            false,
            Box::new(move |r| tx.send(r).unwrap()),
        );
        rx.recv_timeout(Duration::from_secs(30)).unwrap()
    }

    fn close(&self, fh: u64) -> Result<(), Errno> {
        let r = self.fs.flush_locks(&self.me, 0, fh, 1).unwrap();
        self.fs.release_locks(0, fh, None).unwrap().unwrap();
        r
    }

    fn put(&self, path: &str, data: &[u8]) -> Result<(), Errno> {
        let fh = self.open(path, TRUNC | libc::O_CREAT)?;
        self.fs.write(fh, 0, data, None)?;
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
            .recv_timeout(Duration::from_secs(30))
            .unwrap()
    }
}
