//! An in-memory [`FileStore`] for unit tests of the layers above.

use crate::{Error, FileStore, ReadableFile, Result, WritableFile};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

type Data = Arc<RwLock<Vec<u8>>>;

/// Files kept in memory; cloning shares the same files.
#[derive(Clone, Default)]
pub struct MemStore {
    files: Arc<RwLock<BTreeMap<String, Data>>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Overwrites one byte of a file (for corruption tests).
    pub fn corrupt(&self, name: &str, offset: usize) -> Result<()> {
        let files = self.files.read();
        let data = files
            .get(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        let mut d = data.write();
        let len = d.len();
        let b = d.get_mut(offset).ok_or(Error::ShortRead {
            name: name.to_string(),
            offset: offset as u64,
            wanted: 1,
            available: len as u64,
        })?;
        *b ^= 0x5A;
        Ok(())
    }

    /// Cuts a file to `len` bytes (for torn-write tests).
    pub fn truncate(&self, name: &str, len: usize) -> Result<()> {
        let files = self.files.read();
        let data = files
            .get(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        data.write().truncate(len);
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Data> {
        self.files
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }
}

struct MemWriter(Data);

impl WritableFile for MemWriter {
    fn append(&mut self, data: &[u8]) -> Result<u64> {
        let mut d = self.0.write();
        let off = d.len() as u64;
        d.extend_from_slice(data);
        Ok(off)
    }
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        let mut d = self.0.write();
        let off = d.len() as u64;
        for b in bufs {
            d.extend_from_slice(b);
        }
        Ok(off)
    }
    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.append_vectored(bufs)
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.0.read().len() as u64
    }
}

struct MemReader {
    name: String,
    data: Data,
}

impl ReadableFile for MemReader {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let d = self.data.read();
        let start = offset as usize;
        match start.checked_add(len) {
            Some(end) if end <= d.len() => Ok(d[start..end].to_vec()),
            _ => Err(Error::ShortRead {
                name: self.name.clone(),
                offset,
                wanted: len,
                available: d.len() as u64,
            }),
        }
    }
    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        ranges.iter().map(|&(o, l)| self.read_at(o, l)).collect()
    }
    fn len(&self) -> Result<u64> {
        Ok(self.data.read().len() as u64)
    }
}

impl FileStore for MemStore {
    fn create(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        let mut files = self.files.write();
        if files.contains_key(name) {
            return Err(Error::AlreadyExists(name.to_string()));
        }
        let data: Data = Arc::default();
        files.insert(name.to_string(), data.clone());
        Ok(Box::new(MemWriter(data)))
    }
    fn open_append(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(MemWriter(self.get(name)?)))
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ReadableFile>> {
        Ok(Arc::new(MemReader {
            name: name.to_string(),
            data: self.get(name)?,
        }))
    }
    fn delete(&self, name: &str) -> Result<()> {
        self.files
            .write()
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let mut files = self.files.write();
        let data = files
            .remove(from)
            .ok_or_else(|| Error::NotFound(from.to_string()))?;
        files.insert(to.to_string(), data);
        Ok(())
    }
    fn exists(&self, name: &str) -> Result<bool> {
        Ok(self.files.read().contains_key(name))
    }
    fn size(&self, name: &str) -> Result<u64> {
        Ok(self.get(name)?.read().len() as u64)
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .files
            .read()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_corrupt() {
        let s = MemStore::new();
        let mut w = s.create("a/b").unwrap();
        assert_eq!(w.append(b"hello").unwrap(), 0);
        assert_eq!(w.append_vectored(&[b" ", b"world"]).unwrap(), 5);
        let r = s.open("a/b").unwrap();
        assert_eq!(r.read_at(6, 5).unwrap(), b"world");
        assert!(r.read_at(8, 5).is_err());
        s.corrupt("a/b", 0).unwrap();
        assert_ne!(r.read_at(0, 1).unwrap(), b"h");
        assert!(s.create("a/b").is_err());
        assert_eq!(s.list("a/").unwrap(), vec!["a/b".to_string()]);
        s.rename("a/b", "c").unwrap();
        assert!(!s.exists("a/b").unwrap());
        s.delete("c").unwrap();
        assert!(s.open("c").is_err());
    }
}
