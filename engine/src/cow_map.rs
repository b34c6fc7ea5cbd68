//! A read-mostly map whose readers take no lock and write no shared memory:
//! the map sits behind an [`ArcSwap`], and a writer replaces it with an
//! edited copy. For the registries every request consults (tables, tablet
//! servers, served tablets), which change only when tables or tablets come
//! and go: with a read-write lock, each point read bounced the lock's and
//! the entry's counters between cores.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct CowMap<K, V> {
    map: ArcSwap<BTreeMap<K, V>>,
    /// Moved after every edit is installed (see [`CowMap::version`]).
    version: AtomicU64,
    /// Serializes writers, so that no edit is lost to a concurrent one.
    write: Mutex<()>,
}

impl<K: Ord + Clone, V: Clone> Default for CowMap<K, V> {
    fn default() -> Self {
        Self::from(BTreeMap::new())
    }
}

impl<K: Ord + Clone, V: Clone> From<BTreeMap<K, V>> for CowMap<K, V> {
    fn from(m: BTreeMap<K, V>) -> Self {
        CowMap {
            map: ArcSwap::from_pointee(m),
            version: AtomicU64::new(0),
            write: Mutex::new(()),
        }
    }
}

impl<K: Ord + Clone, V: Clone> CowMap<K, V> {
    /// `f` of the value at `k`, borrowed (no clone); None if absent.
    pub fn with<Q, R>(&self, k: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.load().get(k).map(f)
    }

    /// `f` of the whole map as of now, borrowed (for range lookups).
    pub fn with_map<R>(&self, f: impl FnOnce(&BTreeMap<K, V>) -> R) -> R {
        f(&self.map.load())
    }

    /// A clone of the value at `k`.
    pub fn get<Q>(&self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.with(k, V::clone)
    }

    pub fn contains_key<Q>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.load().contains_key(k)
    }

    /// The whole map as of now (a consistent snapshot).
    pub fn snapshot(&self) -> Arc<BTreeMap<K, V>> {
        self.map.load_full()
    }

    /// A number that every edit moves once it is installed. Something
    /// read from the map after this returned `v` is current while the
    /// version is still `v` (what a caller may keep beside it).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Edits a copy of the map and installs it; returns what `f` returns.
    pub fn update<R>(&self, f: impl FnOnce(&mut BTreeMap<K, V>) -> R) -> R {
        let _one_at_a_time = self.write.lock();
        let mut m = BTreeMap::clone(&self.map.load());
        let r = f(&mut m);
        self.map.store(Arc::new(m));
        self.version.fetch_add(1, Ordering::Release);
        r
    }

    pub fn insert(&self, k: K, v: V) -> Option<V> {
        self.update(|m| m.insert(k, v))
    }

    pub fn remove<Q>(&self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.update(|m| m.remove(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_keep_their_snapshot_while_writers_edit() {
        let m: CowMap<String, u32> = CowMap::default();
        m.insert("a".into(), 1);
        let before = m.snapshot();
        m.insert("b".into(), 2);
        assert_eq!(m.remove("a"), Some(1));
        assert_eq!(before.len(), 1);
        assert_eq!(m.get("b"), Some(2));
        assert_eq!(m.with("b", |v| v * 10), Some(20));
        assert_eq!(m.with_map(|m| m.keys().next().cloned()), Some("b".into()));
        assert!(!m.contains_key("a"));
        assert_eq!(m.update(|m| m.len()), 1);
    }

    #[test]
    fn every_edit_moves_the_version() {
        let m: CowMap<u32, u32> = CowMap::default();
        let v = m.version();
        m.insert(1, 1);
        assert!(m.version() > v);
        let v = m.version();
        assert_eq!(m.get(&1), Some(1));
        assert_eq!(m.version(), v, "reads leave it");
        m.remove(&1);
        assert!(m.version() > v);
    }

    #[test]
    fn concurrent_writers_lose_no_edit() {
        let m: Arc<CowMap<u32, u32>> = Arc::new(CowMap::default());
        let hs: Vec<_> = (0..4u32)
            .map(|t| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for i in 0..200 {
                        m.insert(t * 1000 + i, i);
                        assert_eq!(m.get(&(t * 1000 + i)), Some(i));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(m.snapshot().len(), 800);
    }
}
