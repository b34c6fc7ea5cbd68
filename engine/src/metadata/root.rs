//! The root tablet's descriptor: the one METADATA tablet that no METADATA
//! row describes. It is a small checksummed file replaced atomically
//! (written, synced, renamed) each time the root tablet's files or redo
//! point change; its location is in the lock service.

use super::codec::TabletMeta;
use super::row::{root_end, METADATA_ID};
use crate::{Error, Result};
use gfs::FileStore;
use parking_lot::Mutex;
use std::sync::Arc;

pub const ROOT_FILE: &str = "meta/root";

/// Reads and replaces the root tablet's descriptor.
pub struct RootStore {
    store: Arc<dyn FileStore>,
    /// Serializes writers of the temporary file.
    write: Mutex<()>,
}

impl RootStore {
    pub fn new(store: Arc<dyn FileStore>) -> RootStore {
        RootStore {
            store,
            write: Mutex::new(()),
        }
    }

    /// The descriptor, or a fresh empty root tablet when none was written.
    pub fn load(&self) -> Result<TabletMeta> {
        if !self.store.exists(ROOT_FILE)? {
            return Ok(TabletMeta {
                id: 0,
                table: METADATA_ID,
                start: Vec::new(),
                end: Some(root_end()),
                files: Vec::new(),
                redo: None,
            });
        }
        let f = self.store.open(ROOT_FILE)?;
        let len = f.len()?;
        if len > 16 << 20 {
            return Err(Error::corruption(format!(
                "{ROOT_FILE}: {len} bytes is too big"
            )));
        }
        let buf = f.read_at(0, len as usize)?;
        let (sum, body) = buf
            .split_first_chunk::<8>()
            .ok_or_else(|| Error::corruption(format!("{ROOT_FILE}: truncated")))?;
        if u64::from_le_bytes(*sum) != seahash::hash(body) {
            return Err(Error::corruption(format!("{ROOT_FILE}: checksum mismatch")));
        }
        TabletMeta::decode(body)
    }

    /// Durably replaces the descriptor.
    pub fn save(&self, meta: &TabletMeta) -> Result<()> {
        let _g = self.write.lock();
        let body = meta.encode();
        let sum = seahash::hash(&body).to_le_bytes();
        self.store.replace(ROOT_FILE, &[&sum, &body])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_loads_and_detects_damage() {
        let store: Arc<dyn FileStore> = Arc::new(gfs::MemStore::new());
        let r = RootStore::new(store.clone());
        let mut m = r.load().unwrap();
        assert!(m.files.is_empty());
        m.redo = Some(super::super::codec::Redo {
            log: "logs/x".into(),
            seq: 4,
        });
        r.save(&m).unwrap();
        assert_eq!(r.load().unwrap(), m);
        store.delete(ROOT_FILE).unwrap();
        let mut f = store.create(ROOT_FILE).unwrap();
        f.append(b"0123456789abcdef").unwrap();
        drop(f);
        assert!(matches!(r.load(), Err(Error::Corruption(_))));
    }
}
