//! Ranges fetched from the object store, kept on local disk so that a
//! restarted daemon does not fetch its working set again.
//!
//! One file per range, named by a hash of (object, ETag, offset, length): an
//! object is written once, and its ETag changes if it is ever written again,
//! so a cached range is never stale. Each file is the bytes followed by their
//! 8-byte seahash; a file that fails it is deleted and fetched again. The
//! cache is bounded: the least recently used files go first. Deleting the
//! whole directory at any time loses nothing but speed.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

struct Index {
    /// name -> (last use, size)
    files: HashMap<String, (u64, u64)>,
    /// last use -> name, oldest first
    order: BTreeMap<u64, String>,
    bytes: u64,
    tick: u64,
}

/// A bounded cache of fetched ranges in one directory.
pub(crate) struct DiskCache {
    dir: PathBuf,
    limit: u64,
    index: Mutex<Index>,
}

/// What a lookup found.
pub(crate) enum Lookup {
    Hit(Vec<u8>),
    Miss,
    /// The file was there but failed its checksum (now deleted).
    Corrupt,
}

impl DiskCache {
    /// Opens (creating) the cache in `dir`, taking in what an earlier daemon
    /// left there, oldest modification first.
    pub(crate) fn open(dir: &Path, limit: u64) -> std::io::Result<DiskCache> {
        fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
                continue;
            }
            let meta = e.metadata()?;
            let age = meta.modified().ok();
            found.push((age, name, meta.len()));
        }
        found.sort();
        let cache = DiskCache {
            dir: dir.to_path_buf(),
            limit,
            index: Mutex::new(Index {
                files: HashMap::new(),
                order: BTreeMap::new(),
                bytes: 0,
                tick: 0,
            }),
        };
        {
            let mut ix = cache.index.lock();
            for (_, name, size) in found {
                ix.tick += 1;
                let t = ix.tick;
                ix.order.insert(t, name.clone());
                ix.files.insert(name, (t, size));
                ix.bytes += size;
            }
        }
        cache.evict();
        Ok(cache)
    }

    /// The file name of a range.
    pub(crate) fn key(object: &str, etag: &str, offset: u64, len: usize) -> String {
        let h = seahash::hash(format!("{object}\0{etag}\0{offset}\0{len}").as_bytes());
        format!("{h:016x}-{offset}-{len}")
    }

    /// The bytes cached under `key`, checked.
    pub(crate) fn get(&self, key: &str) -> Lookup {
        let Ok(mut bytes) = fs::read(self.dir.join(key)) else {
            return Lookup::Miss;
        };
        let ok = bytes.len() >= 8 && {
            let (body, sum) = bytes.split_at(bytes.len() - 8);
            sum == seahash::hash(body).to_le_bytes()
        };
        if !ok {
            self.remove(key);
            return Lookup::Corrupt;
        }
        bytes.truncate(bytes.len() - 8);
        self.touch(key);
        Lookup::Hit(bytes)
    }

    /// Stores `data` under `key` (best effort: a full disk only costs speed).
    pub(crate) fn put(&self, key: &str, data: &[u8]) {
        let size = data.len() as u64 + 8;
        if size > self.limit {
            return;
        }
        let tmp = self.dir.join(format!("{key}.tmp"));
        let written = (|| -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(data)?;
            f.write_all(&seahash::hash(data).to_le_bytes())?;
            fs::rename(&tmp, self.dir.join(key))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        {
            let mut ix = self.index.lock();
            ix.tick += 1;
            let t = ix.tick;
            if let Some((old, old_size)) = ix.files.insert(key.to_string(), (t, size)) {
                ix.order.remove(&old);
                ix.bytes -= old_size;
            }
            ix.order.insert(t, key.to_string());
            ix.bytes += size;
        }
        self.evict();
    }

    /// Bytes held now, and the limit.
    pub(crate) fn usage(&self) -> (u64, u64) {
        (self.index.lock().bytes, self.limit)
    }

    fn touch(&self, key: &str) {
        let mut ix = self.index.lock();
        ix.tick += 1;
        let t = ix.tick;
        if let Some(entry) = ix.files.get_mut(key) {
            let old = std::mem::replace(&mut entry.0, t);
            ix.order.remove(&old);
            ix.order.insert(t, key.to_string());
        }
    }

    fn remove(&self, key: &str) {
        let _ = fs::remove_file(self.dir.join(key));
        let mut ix = self.index.lock();
        if let Some((t, size)) = ix.files.remove(key) {
            ix.order.remove(&t);
            ix.bytes -= size;
        }
    }

    fn evict(&self) {
        let mut doomed = Vec::new();
        {
            let mut ix = self.index.lock();
            while ix.bytes > self.limit {
                let Some((_, name)) = ix.order.pop_first() else {
                    break;
                };
                if let Some((_, size)) = ix.files.remove(&name) {
                    ix.bytes -= size;
                }
                doomed.push(name);
            }
        }
        for name in doomed {
            let _ = fs::remove_file(self.dir.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_checks_and_bounds_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open(dir.path(), 100).unwrap();
        let k = DiskCache::key("sst/1", "e1", 0, 40);
        c.put(&k, &[7; 40]);
        assert!(matches!(c.get(&k), Lookup::Hit(v) if v == vec![7; 40]));
        // Another ETag is another key.
        assert!(matches!(
            c.get(&DiskCache::key("sst/1", "e2", 0, 40)),
            Lookup::Miss
        ));
        // Flipped bytes are found, dropped and refetched.
        let path = dir.path().join(&k);
        let mut b = fs::read(&path).unwrap();
        b[3] ^= 1;
        fs::write(&path, b).unwrap();
        assert!(matches!(c.get(&k), Lookup::Corrupt));
        assert!(!path.exists());
        // Over the limit, the least recently used go first.
        let (a, b2, d) = ("a".to_string(), "b".to_string(), "d".to_string());
        c.put(&a, &[1; 40]);
        c.put(&b2, &[2; 40]);
        assert!(matches!(c.get(&a), Lookup::Hit(_)));
        c.put(&d, &[3; 40]);
        assert!(matches!(c.get(&b2), Lookup::Miss));
        assert!(matches!(c.get(&a), Lookup::Hit(_)));
        assert!(c.usage().0 <= 100);
        // A new cache on the same directory keeps what is there.
        drop(c);
        let c = DiskCache::open(dir.path(), 100).unwrap();
        assert!(matches!(c.get(&d), Lookup::Hit(v) if v == vec![3; 40]));
    }
}
